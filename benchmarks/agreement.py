"""Every baseline of benchmarks/run.py gives the package's verdicts and the package's arrays.

A baseline that checks less than the package is not a baseline, so before anything is timed:

- **Verdicts.** Valid data and planted-invalid data (one broken thing per case: a NaN literal,
  an unknown key, a skipped step, a step after a done, ...) go through the package and through
  every baseline. Where a baseline cannot express a check (pydantic has no cross-field rule
  without a Python validator; a columnar reader reads null as absent), the case is declared in
  `GAPS` with the reason. The run fails when a baseline disagrees on a case not declared, and
  also when it agrees on a declared one (the declaration would be stale).
- **Outputs.** On every valid record, the `validate_step` baselines the targets compare with
  (`BestStepOut`, `BestCartPoleStepOut`, `BestLLMStepOut`) return what the package returns,
  field for field: the same type (a float32 array, a numpy int64 scalar, a Python float, ...),
  dtype, shape and value, exactly.
- **Arrays.** On valid data, every batch baseline's arrays equal the package's batch, key for
  key: same shapes, dtype kinds, values (floats within 1e-4), and the baseline GAE equals
  `gyre_contract.gae` on the same padded arrays.

`check_all(cache)` returns the problems found (empty: every baseline agrees) and the table of
cases and verdicts that benchmarks/README.md reproduces.

    python benchmarks/agreement.py            # check, print the table; exit 1 on a mismatch
"""

from __future__ import annotations

import io
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import baselines  # noqa: E402
import corpus  # noqa: E402

import gyre_contract  # noqa: E402
from gyre_contract.cli._app import run as cli_run  # noqa: E402
from gyre_contract.pinned import CartPoleStep, LLMStep  # noqa: E402

CHECK_LINES = 4_000
CHECK_COMPLETIONS = 64

Rows = list[tuple[str, str, bool, bool]]
"""(baseline, case, the package refuses, the baseline refuses) per verdict."""

# -- declared gaps: (baseline, case) -> what it cannot check and why ------------------------------

INEXACT = "an integer beyond 2**24 in a float field (float32 cannot hold it exactly) passes: a " \
          "float bound cannot tell an integer from a float, a reader keeps no trace of which " \
          "literals were integers"
NULL = "null in an optional field reads as absent (a column holds no difference)"
CROSS = "a rule across fields needs a Python validator (the model has none)"
DUP = "a key given twice: the reader keeps one value and says nothing"
UNKNOWN = "read_ndjson with a schema drops the keys it does not name"
SCHEMA = "the exported schema bounds no integer to int64 and no float field to the integers " \
         "float32 holds exactly"
EPISODE = "a JSON Schema checks one record: no episode rule"

_GAPS: dict[tuple[str, str], str] = {
    **{(b, "reward integer 2**24+1"): INEXACT
       for b in ("pydantic", "msgspec", "pydantic pinned", "msgspec pinned", "polars",
                 "pyarrow.json", "pyarrow.json batch", "pq.read_table batch")},
    **{(b, "logprob null"): NULL for b in ("polars", "pyarrow.json", "pyarrow.json batch")},
    ("pydantic", "logprob positive"): CROSS + " (logprob <= 0 only for an integer action)",
    ("msgspec", "logprob positive"): CROSS + " (logprob <= 0 only for an integer action)",
    ("pydantic LLM", "logprob one short"): CROSS + " (one log-prob per action token)",
    ("msgspec LLM", "logprob one short"): CROSS + " (one log-prob per action token)",
    ("polars", "duplicate key"): DUP,
    ("polars", "unknown key"): UNKNOWN,
    **{("jsonschema-rs", c): EPISODE for c in (
        "step skipped", "first step 1", "step after done", "policy_version decreases",
        "observation shorter mid-episode", "action float mid-episode", "logprob positive")},
    ("jsonschema-rs", "reward integer 2**24+1"): SCHEMA,
    ("jsonschema-rs", "action beyond int64"): SCHEMA,
    ("jsonschema-rs", "step float"): "JSON Schema's \"integer\" is any number with a zero "
                                     "fractional part: 17.0 is one",
    ("pydantic", "action beyond int64"): "an integer beyond int64 fails `int` and falls to the "
                                         "`float` branch of `int | float` (strict floats accept "
                                         "integers)",
    ("jsonschema-rs", "duplicate key"): DUP,
}
OUT = {"pydantic": "pydantic out", "pydantic pinned": "pydantic pinned out",
       "pydantic LLM": "pydantic LLM out"}
"""The models returning the package's output: the lists models plus numpy's conversions, so the
same gaps."""
GAPS = {**_GAPS, **{(OUT[b], c): why for (b, c), why in _GAPS.items() if b in OUT}}


# -- records (validate_step) ---------------------------------------------------------------------

def cartpole_record() -> dict[str, Any]:
    return {"observation": [0.0123, -0.0456, 0.0789, -0.1011], "action": 1, "logprob": -0.6931,
            "value": 17.25, "reward": 1.0, "step": 17, "episode_id": "cartpole-3-12",
            "terminated": False, "truncated": False, "policy_version": 4}


def llm_record() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {"observation": {"token_ids": rng.integers(0, 50_000, 512).tolist()},
            "action": rng.integers(0, 50_000, 128).tolist(),
            "logprob": (-rng.random(128) * 5).astype(np.float32).astype(float).tolist(),
            "reward": 1.0, "step": 0, "episode_id": "prompt-17/3", "terminated": True,
            "truncated": False, "policy_version": 12}


def _without(record: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != key}


def cartpole_cases() -> dict[str, dict[str, Any]]:
    r = cartpole_record()
    return {
        "valid": r, "valid: integer observation": {**r, "observation": [0, 1, 0, 0]},
        "valid: optional fields absent": _without(_without(r, "logprob"), "value"),
        "valid: info scalars": {**r, "info": {"seed": 3, "note": "x"}},
        "step float": {**r, "step": 17.0}, "observation string": {**r, "observation": "x"},
        "observation NaN": {**r, "observation": [0.0, math.nan, 0.0, 0.0]},
        "reward inf": {**r, "reward": math.inf}, "reward 1e39": {**r, "reward": 1e39},
        "reward bool": {**r, "reward": True}, "terminated int": {**r, "terminated": 0},
        "reward missing": _without(r, "reward"), "unknown key": {**r, "trunctaed": True},
        "logprob null": {**r, "logprob": None}, "episode_id empty": {**r, "episode_id": ""},
        "logprob positive": {**r, "logprob": 0.1}, "action beyond int64": {**r, "action": 2**63},
        "reward integer 2**24+1": {**r, "reward": 2**24 + 1},
        "info list": {**r, "info": {"seed": [1]}},
        "observation one short": {**r, "observation": [0.0, 0.1, 0.2]},
        "action float": {**r, "action": 0.5},
    }


def llm_cases() -> dict[str, dict[str, Any]]:
    r = llm_record()
    lp = r["logprob"]
    return {
        "valid": r, "valid: ref_logprob and group": {**r, "ref_logprob": lp, "group_id": "p17"},
        "valid: every token field": {
            **r, "observation": {**r["observation"], "text": "Q: 2+2?"},
            "next_observation": {"token_ids": r["observation"]["token_ids"][::-1]},
            "loss_mask": [i % 5 != 0 for i in range(len(r["action"]))],
            "token_reward": [0.0] * (len(r["action"]) - 1) + [1.0], "entropy": 0.7},
        "action None": {**r, "action": [*r["action"][:-1], None]},
        "logprob inf": {**r, "logprob": [-math.inf, *lp[1:]]},
        "logprob positive": {**r, "logprob": [0.5, *lp[1:]]},
        "logprob one short": {**r, "logprob": lp[:-1]},
        "token id string": {**r, "observation": {"token_ids": ["7", *r["observation"]["token_ids"][1:]]}},
        "prompt unknown key": {**r, "observation": {**r["observation"], "txt": "x"}},
        "group_id empty": {**r, "group_id": ""},
    }


def _refuses(fn: Callable[[Any], Any], record: Any) -> bool:
    try:
        out = fn(record)
    except Exception:  # every baseline raises its own error type
        return True
    return out is False


def record_sides() -> dict[str, tuple[str, Callable[[Any], Any], Callable[[Any], Any]]]:
    """name -> (record kind, the package's validator it stands beside, the baseline)."""
    schema = baselines.JsonSchemaRs()
    default = lambda r: gyre_contract.validate_step(r, gyre_contract.RolloutStep)  # noqa: E731
    pinned = lambda r: gyre_contract.validate_step(r, CartPoleStep)  # noqa: E731
    llm = lambda r: gyre_contract.validate_step(r, LLMStep)  # noqa: E731
    return {
        "pydantic": ("cartpole", default, baselines.BestStep.model_validate),
        "msgspec": ("cartpole", default, lambda r: baselines.msgspec_step(r, baselines.StepStruct)),
        "pydantic pinned": ("cartpole", pinned, baselines.BestCartPoleStep.model_validate),
        "msgspec pinned": ("cartpole", pinned,
                           lambda r: baselines.msgspec_step(r, baselines.CartPoleStruct)),
        "pydantic LLM": ("llm", llm, baselines.BestLLMStep.model_validate),
        "pydantic out": ("cartpole", default, baselines.BestStepOut.model_validate),
        "pydantic pinned out": ("cartpole", pinned, baselines.BestCartPoleStepOut.model_validate),
        "pydantic LLM out": ("llm", llm, baselines.BestLLMStepOut.model_validate),
        "msgspec LLM": ("llm", llm, lambda r: baselines.msgspec_step(r, baselines.LLMStruct)),
        "jsonschema-rs": ("cartpole", default, schema.record),
    }


def check_records() -> tuple[list[str], Rows]:
    """(problems, rows of (baseline, case, package refuses, baseline refuses))."""
    cases = {"cartpole": cartpole_cases(), "llm": llm_cases()}
    problems, rows = [], []
    for name, (kind, package, baseline) in record_sides().items():
        for case, record in cases[kind].items():
            ours, theirs = _refuses(package, record), _refuses(baseline, record)
            if case.startswith("valid") and ours:
                problems.append(f"the package refuses the record case {case!r}")
            rows.append((name, case, ours, theirs))
            problems += judge(name, case, ours, theirs)
    return problems, rows


def same_output(ours: Any, theirs: Any, path: str) -> list[str]:
    """Where `theirs` differs from `ours` in type, dtype, shape or value (exactly). A model is
    compared field by field over the package's fields; a field the baseline lacks must be None
    in the package's output."""
    if isinstance(ours, BaseModel):
        if not isinstance(theirs, BaseModel):
            return [f"{path}: a {type(theirs).__name__}, the package's a model"]
        problems = []
        for name in type(ours).model_fields:
            mine = getattr(ours, name)
            if name not in type(theirs).model_fields:
                if mine is not None:
                    problems.append(f"{path}.{name}: missing, the package's {mine!r}")
                continue
            problems += same_output(mine, getattr(theirs, name), f"{path}.{name}")
        return problems
    if type(ours) is not type(theirs):
        return [f"{path}: {type(theirs).__name__}, the package's {type(ours).__name__}"]
    if isinstance(ours, np.ndarray):
        if ours.dtype != theirs.dtype or ours.shape != theirs.shape:
            return [f"{path}: {theirs.dtype}{list(theirs.shape)}, the package's "
                    f"{ours.dtype}{list(ours.shape)}"]
        return [] if np.array_equal(ours, theirs) else [f"{path}: values differ"]
    if isinstance(ours, np.generic):
        return [] if ours.dtype == theirs.dtype and ours == theirs else [
            f"{path}: {theirs!r}, the package's {ours!r}"]
    if isinstance(ours, dict):
        if ours.keys() != theirs.keys():
            return [f"{path}: keys {sorted(theirs)}, the package's {sorted(ours)}"]
        return [p for k in ours for p in same_output(ours[k], theirs[k], f"{path}.{k}")]
    return [] if ours == theirs else [f"{path}: {theirs!r}, the package's {ours!r}"]


def check_outputs() -> list[str]:
    """The out models return the package's output on every valid record case."""
    cases = {"cartpole": cartpole_cases(), "llm": llm_cases()}
    sides = record_sides()
    problems = []
    for name in OUT.values():
        kind, package, baseline = sides[name]
        for case, record in cases[kind].items():
            if case.startswith("valid"):
                problems += [f"{name}: {case!r}: {problem}" for problem in
                             same_output(package(record), baseline(record), "step")]
    return problems


def judge(name: str, case: str, ours: bool, theirs: bool) -> list[str]:
    gap = GAPS.get((name, case))
    if ours == theirs and gap is not None:
        return [f"{name}: {case!r} is declared a gap but the verdicts agree (update GAPS)"]
    if ours != theirs and gap is None:
        return [f"{name}: {case!r}: the package {'refuses' if ours else 'accepts'}, the "
                f"baseline {'refuses' if theirs else 'accepts'}"]
    if ours != theirs and (ours is False):
        return [f"{name}: {case!r}: the baseline refuses what the package accepts"]
    return []


# -- files -------------------------------------------------------------------------------------

def _edit(line: bytes, **changes: Any) -> bytes:
    record = orjson.loads(line)
    for key, value in changes.items():
        if value is _DROP:
            record.pop(key, None)
        else:
            record[key] = value
    return orjson.dumps(record)


_DROP = object()


def file_cases(lines: list[bytes]) -> dict[str, list[bytes]]:
    """The valid corpus, and copies of it with one thing broken each."""
    records = [orjson.loads(x) for x in lines]
    # a line in the middle of an episode of at least 12 steps, and its episode's first line
    m = next(i for i, r in enumerate(records) if r["step"] == 5 and i + 6 < len(records)
             and records[i + 6]["episode_id"] == r["episode_id"])
    first = m - 5
    mid = records[m]

    def at(i: int, new: bytes) -> list[bytes]:
        return [*lines[:i], new, *lines[i + 1:]]

    def edit(**changes: Any) -> list[bytes]:
        return at(m, _edit(lines[m], **changes))

    def raw(old: bytes, new: bytes) -> list[bytes]:
        if old not in lines[m]:
            raise AssertionError(f"{old!r} not in line {m + 1}")
        return at(m, lines[m].replace(old, new, 1))

    # two episodes interleaved line by line (valid: episodes need not be contiguous)
    a, b = _episode_lines(records, lines, records[first]["episode_id"])
    rest = [x for x, r in zip(lines, records) if r["episode_id"] not in (a[0], b[0])]
    mixed = [x for pair in zip(a[1], b[1]) for x in pair]
    mixed += a[1][len(b[1]):] + b[1][len(a[1]):]
    return {
        "valid": lines,
        "valid: two episodes interleaved": mixed + rest,
        "valid: integer observation": edit(observation=[0, 1, 0, 0]),
        "reward NaN literal": raw(b'"reward":1.0', b'"reward":NaN'),
        "value 1e999 (inf)": at(m, _replace_value(lines[m], b"value", b"1e999")),
        "observation beyond float32": edit(observation=[1e39, *mid["observation"][1:]]),
        "observation string": edit(observation="x"),
        "observation shorter mid-episode": edit(observation=mid["observation"][:3]),
        "step skipped": edit(step=mid["step"] + 1),
        "first step 1": at(first, _edit(lines[first], step=1)),
        "step after done": edit(terminated=True),
        "policy_version decreases": edit(policy_version=mid["policy_version"] + 1),
        "step float": edit(step=float(mid["step"])),
        "action float mid-episode": edit(action=0.5),
        "reward bool": edit(reward=True),
        "reward missing": edit(reward=_DROP),
        "unknown key": edit(trunctaed=False),
        "duplicate key": raw(b'"step":', b'"step":%d,"step":' % mid["step"]),
        "logprob null": edit(logprob=None),
        "episode_id empty": at(first, _edit(lines[first], episode_id="")),
        "logprob positive": edit(logprob=0.25),
        "policy_version beyond int64": edit(policy_version=2**63),
        "reward integer 2**24+1": edit(reward=2**24 + 1),
        "not JSON": at(m, lines[m][: len(lines[m]) // 2]),
    }


def _replace_value(line: bytes, key: bytes, literal: bytes) -> bytes:
    """`line` with the value of `key` replaced by a raw JSON literal (orjson cannot write it)."""
    start = line.index(b'"' + key + b'":') + len(key) + 3
    end = start
    while line[end:end + 1] not in (b",", b"}"):
        end += 1
    return line[:start] + literal + line[end:]


def _episode_lines(records: list[dict[str, Any]], lines: list[bytes], first_id: str
                   ) -> tuple[tuple[str, list[bytes]], tuple[str, list[bytes]]]:
    ids = list(dict.fromkeys(r["episode_id"] for r in records))
    i = ids.index(first_id)
    pick = ids[i], ids[i + 1]
    return tuple((e, [x for x, r in zip(lines, records) if r["episode_id"] == e])  # type: ignore[return-value]
                 for e in pick)


def cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_run(list(argv), stdout=out, stderr=err)
    return code, out.getvalue() + err.getvalue()


def file_sides() -> dict[str, tuple[str, Callable[[Path], Any]]]:
    """name -> (the package's command it stands beside, the baseline on a path)."""
    schema = baselines.JsonSchemaRs()
    return {"polars": ("validate", baselines.validate_polars),
            "pyarrow.json": ("validate", baselines.validate_pyarrow),
            "jsonschema-rs": ("validate", schema.file),
            "pyarrow.json batch": ("batch", baselines.batch_jsonl)}


def check_files(jsonl: Path, tmp: Path) -> tuple[list[str], Rows]:
    lines = jsonl.read_bytes().splitlines()
    problems, rows = [], []
    sides = file_sides()
    for case, content in file_cases(lines).items():
        path = tmp / "case.jsonl"
        path.write_bytes(b"\n".join(content) + b"\n")
        verdicts = {"validate": cli("validate", str(path), "--format", "json")[0] != 0,
                    "batch": cli("batch", str(path), "--map", str(baselines.CARTPOLE_MAP),
                                 "--format", "json")[0] != 0}
        if case.startswith("valid") and any(verdicts.values()):
            problems.append(f"the package refuses the file case {case!r}")
        for name, (command, baseline) in sides.items():
            ours = verdicts[command]
            theirs = _refuses(baseline, path)
            rows.append((name, case, ours, theirs))
            problems += judge(name, case, ours, theirs)
    return problems, rows


def parquet_cases(jsonl: Path) -> dict[str, Any]:
    """Parquet tables: the valid corpus, and the value-level breaks a typed file can carry."""
    import pyarrow as pa

    table = baselines.read_steps_arrow(jsonl)
    table = table.drop_columns([c for c in table.column_names if table.column(c).null_count
                                == table.num_rows])
    m = int(np.flatnonzero(table.column("step").to_numpy() == 5)[0])

    def put(name: str, value: Any) -> Any:
        col = table.column(name).to_pylist()
        col[m] = value
        i = table.column_names.index(name)
        return table.set_column(i, name, pa.array(col, table.schema.field(name).type))

    step = table.column("step").to_numpy()[m]
    return {"valid": table, "value NaN": put("value", float("nan")),
            "step skipped": put("step", int(step) + 1), "step after done": put("terminated", True),
            "episode_id empty": put("episode_id", ""), "logprob positive": put("logprob", 0.5),
            "reward string column": table.set_column(
                table.column_names.index("reward"), "reward",
                pa.array([str(x) for x in table.column("reward").to_pylist()]))}


def check_batches(name: str, paths: dict[str, Path], map_path: Path,
                  baseline: Callable[[Path], Any]) -> tuple[list[str], Rows]:
    """`gyre-contract batch` and `baseline` on each case file: the verdicts compared."""
    problems, rows = [], []
    for case, path in paths.items():
        ours = cli("batch", str(path), "--map", str(map_path), "--format", "json")[0] != 0
        theirs = _refuses(baseline, path)
        if case == "valid" and ours:
            problems.append(f"{name}: the package refuses the valid file")
        rows.append((name, case, ours, theirs))
        problems += judge(name, case, ours, theirs)
    return problems, rows


def check_parquet(jsonl: Path, tmp: Path) -> tuple[list[str], Rows]:
    import pyarrow.parquet as pq

    paths = {}
    for i, (case, table) in enumerate(parquet_cases(jsonl).items()):
        paths[case] = tmp / f"case-{i}.parquet"
        pq.write_table(table, paths[case])
    return check_batches("pq.read_table batch", paths, baselines.CARTPOLE_MAP,
                         baselines.batch_parquet)


def token_cases(path: Path) -> dict[str, list[bytes]]:
    lines = path.read_bytes().splitlines()
    r = orjson.loads(lines[3])
    lp = r["logprob"]

    def edit(**changes: Any) -> list[bytes]:
        return [*lines[:3], _edit(lines[3], **changes), *lines[4:]]

    return {"valid": lines, "logprob one short": edit(logprob=lp[:-1]),
            "ref_logprob one long": edit(ref_logprob=[*r["ref_logprob"], -0.5]),
            "logprob positive": edit(logprob=[0.5, *lp[1:]]),
            "logprob beyond float32": edit(logprob=[-1e39, *lp[1:]]),
            "token id string": edit(action=["7", *r["action"][1:]]),
            "unknown key": edit(rewrd=1.0), "reward missing": edit(reward=_DROP),
            "episode id repeated": edit(episode_id=orjson.loads(lines[2])["episode_id"])}


def check_tokens(path: Path, map_path: Path, tmp: Path,
                 packed_map: Path | None = None) -> tuple[list[str], Rows]:
    """The planted token cases under the padded map and (given) the packed one."""
    paths = {}
    for i, (case, content) in enumerate(token_cases(path).items()):
        paths[case] = tmp / f"tokens-{i}.jsonl"
        paths[case].write_bytes(b"\n".join(content) + b"\n")
    problems, rows = check_batches("pyarrow.json tokens", paths, map_path, baselines.token_batch)
    if packed_map is not None:
        more, more_rows = check_batches("pyarrow.json packed", paths, packed_map,
                                        baselines.packed_batch)
        problems, rows = problems + more, rows + more_rows
    return problems, rows


# -- arrays ------------------------------------------------------------------------------------

def compare(ours: dict[str, Any], theirs: dict[str, Any], label: str) -> list[str]:
    """Every key of `ours` present in `theirs` with equal shape, dtype kind and values."""
    problems = []
    for key, a in ours.items():
        b = theirs.get(key)
        if b is None:
            problems.append(f"{label}: {key} missing")
            continue
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype.kind != b.dtype.kind:
            problems.append(f"{label}: {key} is {b.dtype}{list(b.shape)}, the package's "
                            f"{a.dtype}{list(a.shape)}")
        elif a.dtype.kind == "f":
            if not np.allclose(a, b, rtol=1e-4, atol=1e-4):
                worst = float(np.nanmax(np.abs(a.astype(np.float64) - b)))
                problems.append(f"{label}: {key} differs by up to {worst:.3g}")
        elif not np.array_equal(a, b):
            problems.append(f"{label}: {key} differs at {int((a != b).sum())} positions")
    return problems


def check_arrays(jsonl: Path, parquet: Path, tokens: Path, token_map: Path,
                 packed_map: Path | None = None, texts: Path | None = None) -> list[str]:
    ours = gyre_contract.half_way(jsonl, baselines.CARTPOLE_MAP).batch
    problems = compare(ours, baselines.batch_jsonl(jsonl), "pyarrow.json batch")
    problems += compare(ours, baselines.batch_parquet(parquet), "pq.read_table batch")
    problems += compare(gyre_contract.half_way(parquet, baselines.CARTPOLE_MAP).batch, ours,
                        "package Parquet vs JSON Lines")
    problems += compare(gyre_contract.half_way(tokens, token_map).batch,
                        baselines.token_batch(tokens), "pyarrow.json tokens")
    if packed_map is not None:
        problems += compare(gyre_contract.half_way(tokens, packed_map).batch,
                            baselines.packed_batch(tokens), "pyarrow.json packed")
    if texts is not None:  # completions with prompt texts (`corpus.CHAT_PROMPT`)
        problems += compare(gyre_contract.half_way(texts, token_map).batch,
                            baselines.token_batch(texts, text=True), "pyarrow.json texts")
    b = baselines.batch_jsonl(jsonl)  # the baseline GAE against the package's gae
    lengths = b["mask"].sum(1)
    with open(jsonl, "rb") as f:
        by_episode = {r["episode_id"]: r["next_value"] for r in map(orjson.loads, f)
                      if "next_value" in r}
    next_value = np.array([by_episode.get(e, np.nan) for e in b["episode_id"]])
    ends = b["terminated"][np.arange(len(lengths)), lengths - 1]
    adv, ret = gyre_contract.gae(b["reward"], b["value"], b["terminated"], b["truncated"],
                                 b["mask"], next_value, gamma=baselines.GAMMA, lam=baselines.LAM)
    mine = baselines.gae_padded(b["reward"], b["value"], b["terminated"], b["mask"], lengths,
                                np.where(ends, 0.0, next_value))
    problems += compare({"advantage": adv, "return": ret},
                        {"advantage": mine[0], "return": mine[1]}, "gae_padded vs gae")
    if not np.any(b["truncated"]):
        problems.append("the corpus has no truncated episode: bootstrapping goes untested")
    return problems


def write_token_map(folder: Path) -> Path:
    path = folder / "token_map.json"
    path.write_bytes(orjson.dumps(baselines.TOKEN_MAP))
    return path


def write_packed_map(folder: Path) -> Path:
    path = folder / "packed_map.json"
    path.write_bytes(orjson.dumps(baselines.PACKED_MAP))
    return path


def check_all(lines: int = CHECK_LINES, completions: int = CHECK_COMPLETIONS
              ) -> tuple[list[str], Rows]:
    """Every agreement check: (problems, rows of (baseline, case, package refuses, baseline
    refuses))."""
    jsonl = corpus.cartpole_corpus(lines)
    parquet = corpus.cartpole_corpus(lines, "parquet")
    tokens = corpus.llm_corpus(completions)
    texts = corpus.llm_corpus(completions, text=True)
    problems, rows = check_records()
    problems += check_outputs()
    with tempfile.TemporaryDirectory(prefix="gyre-agree-") as tmp_dir:
        tmp = Path(tmp_dir)
        token_map = write_token_map(tmp)
        packed_map = write_packed_map(tmp)
        for found, more in (check_files(jsonl, tmp), check_parquet(jsonl, tmp),
                            check_tokens(tokens, token_map, tmp, packed_map)):
            problems += found
            rows += more
        problems += check_arrays(jsonl, parquet, tokens, token_map, packed_map, texts)
    return problems, rows


def table(rows: list[tuple[str, str, bool, bool]]) -> str:
    """The verdicts as Markdown: one line per case, one column per baseline."""
    names = list(dict.fromkeys(r[0] for r in rows))
    cases = list(dict.fromkeys(r[1] for r in rows))
    got = {(r[0], r[1]): r for r in rows}
    out = ["| case | package | " + " | ".join(names) + " |",
           "|---|---|" + "---|" * len(names)]
    for case in cases:
        ours = next(r[2] for r in rows if r[1] == case)
        cells = []
        for name in names:
            row = got.get((name, case))
            if row is None:
                cells.append("")
            elif row[2] == row[3]:
                cells.append("same")
            else:
                cells.append("**gap**")
        out.append(f"| {case} | {'refuses' if ours else 'accepts'} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="(the default; kept for scripts)")
    parser.add_argument("--lines", type=int, default=CHECK_LINES)
    parser.add_argument("--table", action="store_true", help="print the verdicts as Markdown")
    args = parser.parse_args(argv)
    problems, rows = check_all(args.lines)
    if args.table:
        print(table(rows))
    for p in problems:
        print(f"MISMATCH {p}")
    print(f"{len(rows)} verdicts; " + ("every baseline agrees with the package (declared gaps "
                                      "aside)" if not problems else f"{len(problems)} mismatches"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
