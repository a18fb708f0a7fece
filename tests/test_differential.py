"""Differential fuzzers: the same data gets one verdict, whichever path checks it.

Records are generated valid and subtly invalid — integers a float32 cannot hold exactly (alone
or beside floats, `reward`, `value`, a tensor element), floats at and beyond float32's range,
empty lists, nulls, missing optional fields, mixed lists, bools — under three models: the pinned
`CartPoleStep` (a bulk plan), the unpinned `RolloutStep` (a plan bound from the data) and
`LLMStep` (modalities, named dims). Every path must give identical verdicts, messages, rules and
line numbers:

- `validate_step` on the compiled fast path and with `GYRE_FAST_PATHS=0`;
- per record and in a file: each record's problems are the file's problems on its line (the
  file adds only what its episode rules find);
- a JSON Lines file read in bulk (fast paths on) and line by line (off);
- a JSON Lines file and its Parquet twins, read on columns and by rows: one written by
  `write_parquet` (the model's column types) when it writes the records, one by plain pyarrow as
  another tool would, when Parquet can carry the records (`foreign_twin`).

Sized for the default run (bounded `max_examples`, `deadline=None`, a fixed seed); the `slow`
cases run the same properties on many more examples (.ci/run).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from fastpaths import fast_paths, report_both_ways
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import ContractError
from gyre_contract.core._fields import AnyObservation
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import RolloutStep, field_specs
from gyre_contract.core._validate import validate_step
from gyre_contract.io._arrowschema import arrow_schema_problems
from gyre_contract.pinned import CartPoleStep, LLMStep

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

DEFAULT = {"records": 30, "files": 10}
"""Examples per case in the default run: a few seconds for all of this module (a file example
validates up to ten files; a record example costs about a millisecond)."""
BIG = {"records": 800, "files": 200}
"""`-m slow`: the same properties on many more examples, a new seed each run (about two minutes
on 2 busy cores)."""
SIZES = [pytest.param(DEFAULT, id="default"),
         pytest.param(BIG, id="big", marks=pytest.mark.slow)]


def sized(size: dict[str, int], what: str) -> settings:
    """Bounded examples, no deadline; the default run derandomized (the same examples each run)."""
    return settings(max_examples=size[what], deadline=None, derandomize=size is DEFAULT,
                    suppress_health_check=[HealthCheck.too_slow])


F32_MAX = float(np.finfo(np.float32).max)
EXACT = 2**24

EDGE_NUMBERS = [0.0, -0.0, 1e-45, 1e-50, F32_MAX, -F32_MAX, 3.5e38, -1e39, 16777216.0,
                16777217.0, 2.0**53 + 2, 0, 1, -3, EXACT, -EXACT, EXACT + 1, -(EXACT + 1),
                2**53 + 1, 123456789012345678, 2**63 - 1, True, None, "1"]
"""Values at the edges of the float rules (and a few that are no number at all)."""

plain_floats = st.floats(-1e3, 1e3, allow_nan=False).map(lambda x: round(x, 3))
numbers = st.one_of(plain_floats, plain_floats, plain_floats, st.sampled_from(EDGE_NUMBERS))
"""Mostly ordinary floats, now and then an edge: a block of lines is often clean, so the bulk
readers accept it and are compared with the line path on what they accept."""
ABSENT = object()
optional = st.one_of(st.just(ABSENT), st.just(ABSENT), numbers)
log_probs = st.one_of(st.floats(-20, 0).map(lambda x: round(x, 3)),
                      st.sampled_from([0.0, 0.5, -(EXACT + 1), -EXACT, -1e39, None, True]))


def _set(record: dict[str, Any], **fields: Any) -> dict[str, Any]:
    record.update({k: v for k, v in fields.items() if v is not ABSENT})
    return record


@st.composite
def cartpole_fields(draw: Any) -> dict[str, Any]:
    """The fields of a CartPole step other than the episode's own."""
    size = draw(st.sampled_from([4, 4, 4, 4, 3, 0]))
    observation = draw(st.lists(numbers, min_size=size, max_size=size))
    action = draw(st.one_of(st.sampled_from([0, 1, 0, 1]),
                            st.sampled_from([1.5, True, EXACT + 1, None])))
    return _set({"observation": observation, "action": action, "reward": draw(numbers)},
                logprob=draw(st.one_of(st.just(ABSENT), log_probs)), value=draw(optional),
                next_value=draw(st.one_of(st.just(ABSENT), st.just(ABSENT), numbers)))


@st.composite
def llm_fields(draw: Any, empty: bool = True) -> dict[str, Any]:
    """The fields of an LLM step (one generation) other than the episode's own. `empty`: token
    lists may be empty (a generation that stopped at once); not under the unpinned model, whose
    action and modalities have no declared dtype: JSON Lines reads `[]` there as float32 and a
    Parquet column as its own dtype (docs/rollout-files.md#nulls-absent-fields-and-empty-lists)."""
    token_ids = st.lists(st.integers(0, 50_000), min_size=0 if empty else 1, max_size=4)
    action = draw(token_ids)
    observation: dict[str, Any] = {"token_ids": draw(token_ids)}
    text = draw(st.sampled_from([ABSENT, ABSENT, "2+2=", 5, None, ""]))
    if text is not ABSENT:
        observation["text"] = text
    length = draw(st.sampled_from([len(action)] * 4 + [len(action) + 1] + [0] * empty))
    logprob = draw(st.one_of(st.just(ABSENT), st.lists(log_probs, min_size=length,
                                                       max_size=length)))
    return _set({"observation": observation, "action": action, "reward": draw(numbers)},
                logprob=logprob, ref_logprob=draw(st.one_of(st.just(ABSENT), st.just(logprob))))


KINDS = {"cartpole": cartpole_fields(), "llm": llm_fields(), "llm-unpinned": llm_fields(False)}
CASES = [(CartPoleStep, "cartpole"), (RolloutStep, "cartpole"), (LLMStep, "llm"),
         (RolloutStep, "llm-unpinned")]
IDS = [f"{model.__name__}-{kind}" for model, kind in CASES]


@st.composite
def files(draw: Any, kind: str) -> list[dict[str, Any]]:
    """One to three episodes of one to four steps, one after another, the last step done."""
    records = []
    for e in range(draw(st.integers(1, 3))):
        steps = draw(st.integers(1, 4))
        for i in range(steps):
            records.append({**draw(KINDS[kind]), "step": i, "episode_id": f"ep-{e}",
                            "terminated": i == steps - 1, "truncated": False,
                            "policy_version": 0})
    return records


def step_problems(record: dict[str, Any], model: type) -> list[tuple]:
    try:
        validate_step(record, model)
    except ContractError as err:
        return [(str(p), p.rule) for p in err.problems]
    return []


def file_problems(found: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for g in found["problems"]["groups"] for p in g["examples"]]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def same_both_ways(path: Path, model: type) -> dict[str, Any]:
    """The whole report with the fast paths on, asserted identical with them off."""
    return report_both_ways(path, model, examples=10_000)


def foreign_twin(path: Path, records: list[dict[str, Any]], model: type) -> Path | None:
    """The records as Parquet written by plain pyarrow (types inferred, as another tool would),
    or None where Parquet cannot carry them as they are: a required key some record lacks (a
    row cannot lack a column), a column pyarrow cannot build, or one whose values come back
    changed (`[16777217, 1.5]` read as floats, an int among float rewards). An optional key
    whose value is JSON `null` is written as a null cell, which Parquet reads as absent (the
    documented difference, asserted in `test_jsonl_and_parquet_twins_agree`). Nor where an
    unpinned observation comes out as an integer column: Parquet's column type is data JSON
    cannot carry, and an integer column keeps its dtype (an image stays uint8) where JSON numbers
    become float32 (docs/rollout-files.md#images), so the twin would hold other data."""
    required = model_info(model).required
    specs = field_specs(model)
    names = list(dict.fromkeys(k for r in records for k in r))
    if any(k in required and any(k not in r for r in records) for k in names):
        return None
    columns = {}
    for name in names:
        values = [r.get(name) for r in records]
        try:
            column = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            return None
        if orjson.dumps(_no_null_keys(column.to_pylist())) != orjson.dumps(_no_null_keys(values)):
            return None
        if isinstance(specs.get(name), AnyObservation) and _integer_leaves(column.type):
            return None
        columns[name] = column
    pq.write_table(pa.table(columns), path)
    return path


def _integer_leaves(kind: Any) -> bool:
    """An Arrow type whose values (through lists) are integers."""
    while pa.types.is_list(kind) or pa.types.is_large_list(kind):
        kind = kind.value_type
    return bool(pa.types.is_integer(kind))


def _no_null_keys(value: Any) -> Any:
    """A struct cell holds every child, null where a record lacked the key: compare without."""
    if isinstance(value, list):
        return [_no_null_keys(v) for v in value]
    if isinstance(value, dict):
        return {k: _no_null_keys(v) for k, v in value.items() if v is not None}
    return value


def own_twin(path: Path, records: list[dict[str, Any]], model: type) -> Path | None:
    """The records written by `write_parquet` (the model's column types, read on columns when
    clean), or None where it refuses them (a value its column cannot hold, a null)."""
    from gyre_contract.io._parquet import write_parquet

    try:
        write_parquet(path, records, model)
    except ContractError:
        return None
    return path


def without_null_options(records: list[dict[str, Any]], model: type) -> list[dict[str, Any]]:
    """The records as a Parquet file says them: an optional field whose value is null absent."""
    required = model_info(model).required

    def clean(record: dict[str, Any], required: frozenset[str]) -> dict[str, Any]:
        return {k: v for k, v in record.items() if v is not None or k in required}

    inner = model_info(LLMStep.model_fields["observation"].annotation).required \
        if model is LLMStep else frozenset()  # the modalities of the unpinned model: none
    out = []
    for record in records:
        record = clean(record, required)
        if isinstance(record.get("observation"), dict):
            record["observation"] = clean(record["observation"], inner)
        out.append(record)
    return out


# -- per record: the compiled fast path and GYRE_FAST_PATHS=0 ------------------------------------

def check_record(record: dict[str, Any], model: type) -> None:
    with fast_paths(True):
        fast = step_problems(record, model)
    with fast_paths(False):
        normal = step_problems(record, model)
    assert fast == normal


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(("model", "kind"), CASES, ids=IDS)
def test_a_record_gets_one_verdict_fast_or_not(model, kind, size):
    @settings(sized(size, "records"), deadline=None)
    @given(fields=KINDS[kind])
    def run(fields):
        check_record({**fields, "step": 0, "episode_id": "e", "terminated": True,
                      "truncated": False, "policy_version": 0}, model)
    run()


# -- files: bulk and line by line, per record and per line, JSON Lines and Parquet ---------------

def check_file(records: list[dict[str, Any]], model: type) -> None:
    with tempfile.TemporaryDirectory() as folder:
        jsonl = same_both_ways(write_jsonl(Path(folder) / "r.jsonl", records), model)
        # per record and in the file: each line's record problems, and only episode ones beside
        by_line = [(p["line"], p["message"], p["path"], p["expected"], p["got"], p.get("rule"))
                   for p in file_problems(jsonl) if not str(p.get("rule")).startswith("episode.")]
        expected = []
        for line, record in enumerate(records, 1):
            try:
                validate_step(record, model)
            except ContractError as err:
                expected += [(line, p.message, p.path, p.expected, p.got, p.rule)
                             for p in err.problems]
        assert sorted(by_line, key=str) == sorted(expected, key=str)
        # Parquet twins: the same report, with the same line (row) numbers
        said = without_null_options(records, model)
        as_parquet = jsonl if said == records else same_both_ways(
            write_jsonl(Path(folder) / "said.jsonl", said), model)
        for make, name in ((own_twin, "own.parquet"), (foreign_twin, "foreign.parquet")):
            twin = make(Path(folder) / name, records, model)
            if twin is None:
                continue
            found = same_both_ways(twin, model)
            if arrow_schema_problems(pq.read_schema(twin), model):
                # a column type that cannot hold its field: one problem per column, no row read
                # (docs/rollout-files.md#parquet); the rows break a rule of that field in JSON
                assert not as_parquet["holds"] and found["counts"]["records"] == 0
                paths = {p["path"] for p in file_problems(as_parquet)}
                assert {p["path"] for p in file_problems(found)} <= paths
            else:
                assert found == as_parquet, name


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(("model", "kind"), CASES, ids=IDS)
def test_a_file_gets_one_verdict_on_every_path(model, kind, size):
    @settings(sized(size, "files"), deadline=None)
    @given(records=files(kind))
    def run(records):
        check_file(records, model)
    run()


def test_the_generated_files_reach_every_path(tmp_path):
    """The strategies are not idle: clean files take the bulk readers (so they are compared on
    what they accept), and the edge values are refused, each on every path."""
    records = [{"observation": [0.5, -1.0, 2.0, 3.0], "action": 1, "reward": 1.0,
                "step": i, "episode_id": "a", "terminated": i == 2, "truncated": False,
                "policy_version": 0} for i in range(3)]
    check_file(records, CartPoleStep)
    from gyre_contract.io._fastfile import bulk_plan

    with fast_paths(True):
        plan = bulk_plan(CartPoleStep)
        assert plan is not None and plan.decode(
            [json.dumps(r).encode() for r in records]) is not None
    for bad in ({"reward": EXACT + 1}, {"observation": [EXACT + 1, 1.5, 2.0, 3.0]},
                {"value": 2**53 + 1}, {"reward": 3.5e38}):
        broken = [dict(records[0], **bad), *records[1:]]
        check_file(broken, CartPoleStep)
        assert step_problems(broken[0], CartPoleStep)
