"""Every performance figure, each as a ratio to its baseline measured in the same run.

    python benchmarks/run.py            # full sizes (1,000,000-line files; 136 s at load average 2)
    python benchmarks/run.py --quick    # smaller files and fewer repeats (about 75 s)
    python benchmarks/run.py --only validate_step,import
    python benchmarks/run.py --normal-path   # fast paths off: the figures without the fast paths
    python benchmarks/run.py --only corpus_validate,corpus_batch,parquet,rss
                                             # the default model on realistic corpora
                                             # (benchmarks/realistic.py; corpora cached)

Times are interleaved (ours, baseline, ours, baseline, ...) so that machine noise hits both
sides alike; a ratio is the median of the per-round ratios. Absolute times are printed beside
the ratios for reading, never as a verdict (the one absolute target is the 500-field diff).
Generated files go to a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import baselines  # noqa: E402
from models import CartPoleStep, LLMStep  # noqa: E402

from gyre_contract.core._models import RolloutStep  # noqa: E402
from gyre_contract.core._validate import validate_step  # noqa: E402
from gyre_contract.schema._export import json_schema  # noqa: E402

SECTIONS = ("validate_step", "validate_file", "end_to_end", "collate", "import", "diff",
            # the default model on realistic corpora: benchmarks/realistic.py
            "corpus_validate", "corpus_batch", "parquet", "rss")


# -- records (record A = classic control, record B = LLM) --------

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


def as_numpy(record: dict[str, Any]) -> dict[str, Any]:
    """The LLM record as a sampler holds it: arrays already numpy, of the declared dtypes."""
    out = dict(record)
    out["observation"] = {"token_ids": np.asarray(record["observation"]["token_ids"], np.int64)}
    out["action"] = np.asarray(record["action"], np.int64)
    out["logprob"] = np.asarray(record["logprob"], np.float32)
    return out


# -- timing and reporting -----------------------------------------------------------------------

@dataclass
class Figure:
    name: str
    ours: float
    base: float
    base_name: str
    ratio: float
    target: str
    ok: bool | None
    unit: str = "s"
    spread: tuple[float, float] | None = None
    """The per-round ratios' quartiles (interleaved figures): how much the machine moved."""
    section: str = ""
    """The section of run.py that measured it (set by `main`)."""

    def line(self) -> str:
        verdict = {True: "PASS", False: "FAIL", None: "info"}[self.ok]
        return (f"{verdict:4}  {self.name:46} {self.ratio:9.2f}x {self.target:9}  "
                f"({_fmt(self.ours, self.unit)} vs {_fmt(self.base, self.unit)} {self.base_name})"
                + (f" [rounds {self.spread[0]:.2f}-{self.spread[1]:.2f}x]" if self.spread else ""))


def _fmt(seconds: float, unit: str) -> str:
    if unit == "MB":
        return f"{seconds:.0f} MB"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def check(ratio: float, target: str) -> bool | None:
    """`<= 1.5` / `>= 25`; an empty target is informational."""
    if not target:
        return None
    op, value = target.split()
    return ratio <= float(value) if op == "<=" else ratio >= float(value)


def quartiles(values: list[float]) -> tuple[float, float]:
    """The first and third quartiles (the middle half of the rounds)."""
    if len(values) < 4:
        return min(values), max(values)
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def interleaved_rounds(ours: Callable[[], Any], base: Callable[[], Any], number: int,
                       rounds: int, base_number: int | None = None
                       ) -> tuple[float, float, list[float]]:
    """(ours s/call median, base s/call median, the ratio of each round)."""
    base_number = base_number or number
    ours(), base()
    t_ours, t_base, ratios = [], [], []
    for _ in range(rounds):
        a = timeit.timeit(ours, number=number) / number
        b = timeit.timeit(base, number=base_number) / base_number
        t_ours.append(a)
        t_base.append(b)
        ratios.append(a / b)
    med = statistics.median
    return med(t_ours), med(t_base), ratios


def figure(name: str, ours: Callable[[], Any], base: Callable[[], Any], base_name: str,
           target: str, number: int, rounds: int, *, inverse: bool = False,
           base_number: int | None = None) -> Figure:
    a, b, ratios = interleaved_rounds(ours, base, number, rounds, base_number)
    if inverse:  # "the baseline takes N times as long as ours": its time comes first
        a, b, ratios = b, a, [1 / r for r in ratios]
    ratio = statistics.median(ratios)
    return Figure(name, a, b, base_name, ratio, target, check(ratio, target),
                  spread=quartiles(ratios))


# -- 1. validate_step ---------------------------------------------------------------------------

def bench_validate_step(quick: bool) -> list[Figure]:
    """`validate_step(record)` with the default model (`RolloutStep`) and the pinned models, on the
    CartPole and the LLM record, against plain strict pydantic with numpy conversion and a finite
    check (`baselines.PlainStep`, `baselines.PlainLLMStep`), fastjsonschema compiled from our
    exported default schema, and jsonschema on the pinned models' schemas."""
    from jsonschema import Draft202012Validator

    rounds = 15 if quick else 31  # many short interleaved rounds: the machine is shared
    cart, llm = cartpole_record(), llm_record()
    compiled = baselines.fastjsonschema_validator(RolloutStep)
    plain = {"CartPole": (cart, baselines.PlainStep, CartPoleStep, 2000),
             "LLM": (llm, baselines.PlainLLMStep, LLMStep, 200)}
    for record, model, pinned, _ in plain.values():  # every side accepts the records...
        validate_step(record, RolloutStep)
        validate_step(record, pinned)
        model.model_validate(record)
        compiled(record)
    bad_cart = [{**cart, "step": 1.5}, {**cart, "observation": "x"},
                {**cart, "observation": [0.0, float("nan"), 0.0, 0.0]}]
    bad_llm = [{**llm, "action": [1, None]}, {**llm, "logprob": [float("inf")] * 128}]
    for bad, model in [*((b, baselines.PlainStep) for b in bad_cart),
                       *((b, baselines.PlainLLMStep) for b in bad_llm)]:
        for side in (lambda r: validate_step(r, RolloutStep), model.model_validate):
            try:  # ...and refuse these (fastjsonschema has no finite check: not asked)
                side(bad)
            except Exception:  # each side raises its own error type
                continue
            raise AssertionError(f"{side} accepts the broken record {bad}")
    figures = []
    for label, (record, model, _, n) in plain.items():
        number = n // 2 if quick else n
        figures.append(figure(
            f"validate_step {label} default / plain pydantic",
            lambda r=record: validate_step(r, RolloutStep),
            lambda r=record, m=model: m.model_validate(r), "plain pydantic+numpy", "<= 1.5",
            number, rounds))
        figures.append(figure(
            f"fastjsonschema / validate_step {label} default",
            lambda r=record: validate_step(r, RolloutStep), lambda r=record: compiled(r),
            "validate_step default", ">= 3" if label == "CartPole" else "", number, rounds,
            inverse=True, base_number=number if label == "CartPole" else max(number // 100, 2)))
    for label, (record, model, pinned, n) in plain.items():
        number = n // 2 if quick else n
        figures.append(figure(
            f"validate_step {label} pinned / plain pydantic",
            lambda r=record, p=pinned: validate_step(r, p),
            lambda r=record, m=model: m.model_validate(r), "plain pydantic+numpy", "<= 1.5",
            number, rounds))
        schema = Draft202012Validator(json_schema(pinned))
        if not schema.is_valid(record):
            raise AssertionError(f"jsonschema refuses the {label} record")
        figures.append(figure(
            f"jsonschema / validate_step {label} pinned",
            lambda r=record, p=pinned: validate_step(r, p), lambda r=record, s=schema: s.is_valid(r),
            "validate_step pinned", ">= 25" if label == "CartPole" else "", number, rounds // 3,
            inverse=True, base_number=max(number // (30 if label == "CartPole" else 100), 2)))
    numpy_llm = as_numpy(llm)
    validate_step(numpy_llm, LLMStep)
    figures.append(figure("validate_step LLM pinned, numpy arrays / plain (lists)",
                          lambda: validate_step(numpy_llm, LLMStep),
                          lambda: baselines.PlainLLMStep.model_validate(llm),
                          "plain pydantic+numpy", "", 100 if quick else 200, rounds))
    return figures


# -- 2. rollout files -------------------------------------------------------------------------

def write_cartpole_file(path: Path, lines: int, seed: int = 0) -> None:
    """CartPole-like episodes of 20..200 steps; a quarter truncated with a next_value."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((lines, 4)).astype(np.float32).astype(float).round(6).tolist()
    logp = (-rng.random(lines) - 0.01).round(6).tolist()
    values = (rng.random(lines) * 20).round(4).tolist()
    dumps = orjson.dumps
    written, episode = 0, 0
    with open(path, "wb") as out:
        while written < lines:
            length = min(int(rng.integers(20, 201)), lines - written)
            truncated = episode % 4 == 3
            chunk = []
            for t in range(length):
                i = written + t
                last = t == length - 1
                record = {"observation": obs[i], "action": i & 1, "logprob": logp[i],
                          "value": values[i], "reward": 1.0, "step": t,
                          "episode_id": f"cartpole-{episode}", "terminated": last and not truncated,
                          "truncated": last and truncated, "policy_version": episode // 10}
                if last:
                    record["next_value"] = 0.0 if not truncated else values[i]
                chunk.append(dumps(record))
            out.write(b"\n".join(chunk) + b"\n")
            written += length
            episode += 1


def parse_floor(path: Path) -> None:
    loads = orjson.loads
    with open(path, "rb") as f:
        for line in f:
            loads(line)


def best_of(fn: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def paired(ours: Callable[[], Any], base: Callable[[], Any], rounds: int) -> tuple[float, float, float]:
    """Interleaved single runs of two long jobs: (ours s, base s, median ratio)."""
    t_ours, t_base, ratios = [], [], []
    for _ in range(rounds):
        b = best_of(base, 1)
        a = best_of(ours, 1)
        t_ours.append(a)
        t_base.append(b)
        ratios.append(a / b)
    med = statistics.median
    return med(t_ours), med(t_base), med(ratios)


def bench_validate_file(quick: bool, tmp: Path) -> list[Figure]:
    from gyre_contract.io._validation import validate_file

    lines = 100_000 if quick else 1_000_000
    small_lines = lines // 10
    big, small = tmp / f"cartpole-{lines}.jsonl", tmp / f"cartpole-{small_lines}.jsonl"
    write_cartpole_file(big, lines)
    write_cartpole_file(small, small_lines)

    def ours() -> None:
        report = validate_file(big, CartPoleStep, require_complete=True)
        if not report.ok or report.steps != lines:
            raise AssertionError(f"generated file does not validate: {report.to_text()[:2000]}")

    a, b, ratio = paired(ours, lambda: parse_floor(big), 5 if quick else 3)
    figures = [Figure(f"validate {lines:,} CartPole lines / orjson loop", a, b, "orjson.loads loop",
                      ratio, "<= 2", check(ratio, "<= 2"))]
    peak_small, peak_big = peak_rss(small), peak_rss(big)
    figures.append(Figure(f"peak RSS {lines:,} lines / {small_lines:,} lines", peak_big,
                          peak_small, "smaller file", peak_big / peak_small, "<= 1.2",
                          check(peak_big / peak_small, "<= 1.2"), unit="MB"))
    return figures


PEAK_SCRIPT = """
import sys
sys.path.insert(0, {examples!r})
from models import CartPoleStep
from gyre_contract.io._validation import validate_file
report = validate_file({path!r}, CartPoleStep, require_complete=True)
assert report.ok, report.to_text()[:2000]
with open("/proc/self/status") as f:
    print(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
"""


def peak_rss(path: Path) -> float:
    """Peak resident memory (MB) of a fresh process that validates `path`.

    VmHWM, not ru_maxrss: Linux carries ru_maxrss over `exec` from the forked parent's copy.
    """
    code = PEAK_SCRIPT.format(examples=str(ROOT / "examples"), path=str(path))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=ROOT, env=_env())
    return int(out.stdout.split()[-1]) / 1024


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


# -- 3. rollout file -> validated TrainBatch ----------------------------------------------------

def bench_end_to_end(quick: bool, tmp: Path) -> list[Figure]:
    from gyre_contract.io._reading import read_episodes
    from gyre_contract.trainer._fieldmap import FieldMap

    lines = 20_000 if quick else 200_000
    path = tmp / f"e2e-{lines}.jsonl"
    write_cartpole_file(path, lines, seed=1)
    field_map = FieldMap.load(ROOT / "examples" / "cartpole_map.json")

    def ours() -> None:
        batch = field_map.to_train_batch(read_episodes(path, CartPoleStep))
        if int(batch.mask.sum()) != lines:
            raise AssertionError("the batch lost steps")

    a, b, ratio = paired(ours, lambda: parse_floor(path), 5)
    return [Figure(f"JSONL {lines:,} lines -> TrainBatch / orjson loop", a, b,
                   "orjson.loads loop", ratio, "<= 3", check(ratio, "<= 3"))]


# -- 4. collate -----------------------------------------------------------------------------------

def bench_collate(quick: bool) -> list[Figure]:
    from gyre_contract.io._episodes import Episode
    from gyre_contract.trainer._collation import collate

    rng = np.random.default_rng(0)
    episodes = [Episode(f"ep-{i}", {"observation": rng.standard_normal((200, 64), np.float32),
                                    "episode_id": np.array([f"ep-{i}"] * 200)})
                for i in range(256)]  # as read_episodes delivers them
    src = np.stack([e.columns["observation"] for e in episodes])
    dst = np.empty_like(src)
    out = collate(episodes, fields=["observation"])
    if out["observation"].shape != (256, 200, 64):
        raise AssertionError(f"collate gave {out['observation'].shape}")
    return [figure("collate 256x200x64 float32 / np.copyto", lambda: collate(
        episodes, fields=["observation"]), lambda: np.copyto(dst, src), "np.copyto", "<= 3",
        10, 7 if quick else 15)]


# -- 5. start-up: import, the command line, the first validated step ----------------------------

NUMPY_PYDANTIC = "import numpy, pydantic"
FIRST_STEP = repr(cartpole_record())
PYDANTIC_FIRST_STEP = f"""
import numpy as np
from pydantic import BaseModel, ConfigDict, Field
class Step(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
    observation: list[float] = Field(min_length=4, max_length=4)
    action: int
    logprob: float | None = None
    value: float | None = None
    reward: float
    step: int = Field(ge=0)
    episode_id: str = Field(min_length=1)
    terminated: bool
    truncated: bool
    policy_version: int = Field(ge=0)
step = Step.model_validate({FIRST_STEP})
np.asarray(step.observation, np.float32)
"""
"""The best plain alternative of a sampler's first step: numpy, a strict pydantic model with
bounds in `Field` and `allow_inf_nan=False`, one record validated."""


def bench_import(quick: bool) -> list[Figure]:
    """Whole processes, interleaved round by round: `import gyre_contract` and the command
    line's `--version` / `--help` against `import numpy, pydantic` (the issue's yardstick);
    what a sampler pays to have `validate_step` and the models against numpy + `BaseModel`;
    and the first validated step against a plain pydantic model doing the same (info)."""
    runs = 7 if quick else 15
    script = Path(sys.executable).with_name("gyre-contract")
    cli = [str(script)] if script.exists() else [sys.executable, "-m", "gyre_contract"]
    cases = {  # name: (ours, baseline, baseline's name, target)
        "import gyre_contract / numpy+pydantic": (
            ["-c", "import gyre_contract"], ["-c", NUMPY_PYDANTIC], "import numpy, pydantic",
            "<= 1.2"),
        "gyre-contract --version / numpy+pydantic": (
            [*cli, "--version"], ["-c", NUMPY_PYDANTIC], "import numpy, pydantic", "<= 1.3"),
        "gyre-contract --help / numpy+pydantic": (
            [*cli, "--help"], ["-c", NUMPY_PYDANTIC], "import numpy, pydantic", "<= 1.3"),
        "from gyre_contract import validate_step, RolloutStep / numpy+BaseModel": (
            ["-c", "from gyre_contract import validate_step, RolloutStep"],
            ["-c", "import numpy; from pydantic import BaseModel"], "numpy + BaseModel",
            "<= 1.3"),
        "first validated step: import + validate_step / plain pydantic": (
            ["-c", f"from gyre_contract import validate_step; validate_step({FIRST_STEP})"],
            ["-c", PYDANTIC_FIRST_STEP], "numpy + a strict pydantic model, one record", ""),
    }
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in cases}
    for _ in range(runs):  # every case each round: drift hits ours and its baseline alike
        for name, (ours, base, _, _) in cases.items():
            times[name][0].append(_process_time(ours))
            times[name][1].append(_process_time(base))
    figures = []
    for name, (_, _, base_name, target) in cases.items():
        ours_t, base_t = times[name]
        ratios = [a / b for a, b in zip(ours_t, base_t)]
        ratio = statistics.median(ratios)
        figures.append(Figure(name, statistics.median(ours_t), statistics.median(base_t),
                              f"{base_name} ({runs} rounds)", ratio, target,
                              check(ratio, target), spread=quartiles(ratios)))
    return figures


def _process_time(argv: list[str]) -> float:
    """Wall time of one fresh process: `python ARGV`, or ARGV itself when it names a program."""
    command = argv if not argv[0].startswith("-") else [sys.executable, *argv]
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


# -- 6. diff of two 500-field schemas -------------------------------------------------------------

def wide_schemas(n: int = 500) -> tuple[dict[str, Any], dict[str, Any]]:
    """A sampler and a trainer schema of n fields each: same, renamed, cast and missing fields."""
    sampler_props: dict[str, Any] = {}
    trainer_props: dict[str, Any] = {}
    for i in range(n):
        shape = [4, i % 7 + 1]
        body = {"type": "array", "items": {"type": "array", "items": {"type": "number"},
                                            "minItems": shape[1], "maxItems": shape[1]},
                "minItems": 4, "maxItems": 4, "x-gyre-dtype": "float32", "x-gyre-shape": shape,
                "x-gyre-role": "other"}
        sampler_props[f"feature_{i}"] = body
        lead = {**body, "x-gyre-shape": ["B", "T", *shape]}
        if i % 5 == 1:
            lead["x-gyre-dtype"] = "float16"  # a narrowing cast
        name = f"feature_{i}" if i % 10 else f"missing_{i}"
        trainer_props[name] = lead
    sampler = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "wide sampler",
               "type": "object", "properties": sampler_props, "x-gyre-kind": "rollout_step"}
    trainer = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "wide trainer",
               "type": "object", "properties": trainer_props, "x-gyre-kind": "train_batch",
               "x-gyre-batch-dims": ["B", "T"]}
    return sampler, trainer


def bench_diff(quick: bool) -> list[Figure]:
    from gyre_contract.schema._diffing import diff

    sampler, trainer = wide_schemas()
    report = diff(sampler, trainer)
    if len(report.entries) < 500:
        raise AssertionError(f"diff gave {len(report.entries)} entries for 500 trainer fields")
    runs = 5 if quick else 11
    times = [best_of(lambda: diff(sampler, trainer), 1) for _ in range(runs)]
    t = statistics.median(times)
    return [Figure("diff of two 500-field schemas (absolute)", t, 0.1, "target 100 ms",
                   t / 0.1, "< 100 ms", t < 0.1)]


# -- main ------------------------------------------------------------------------------------------

def machine() -> list[str]:
    cpu = "unknown"
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = ", ".join(f"{p} {_version(p)}" for p in
                         ("pydantic", "pydantic-core", "numpy", "orjson", "msgspec", "jsonschema",
                          "pyarrow", "gymnasium", "fastjsonschema"))
    return [f"machine: {os.cpu_count()} cores, {cpu}, {platform.platform()}",
            f"python {platform.python_version()}; {versions}",
            "load average at start: " + ", ".join(f"{x:.1f}" for x in os.getloadavg())]


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def normal_path_only() -> None:
    """Every record and file goes through the models' normal pydantic validation, line by line."""
    os.environ["GYRE_FAST_PATHS"] = "0"  # core.switches; child processes inherit it


def markdown(figures: list[Figure]) -> str:
    """The figures as a Markdown table (what benchmarks/README.md keeps)."""
    rows = ["| figure | ratio | target | verdict | ours | baseline | section |",
            "|---|---:|---|---|---:|---|---|"]
    for f in figures:
        verdict = {True: "PASS", False: "FAIL", None: "info"}[f.ok]
        ratio = f"{f.ratio:.2f}x" + (f" ({f.spread[0]:.2f}-{f.spread[1]:.2f})" if f.spread else "")
        rows.append(f"| {f.name.strip()} | {ratio} | {f.target or '-'} | {verdict} | "
                    f"{_fmt(f.ours, f.unit)} | {_fmt(f.base, f.unit)} {f.base_name} | {f.section} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections out of {','.join(SECTIONS)}")
    parser.add_argument("--normal-path", action="store_true",
                        help="switch the fast paths off (validate_step's compiled validator, "
                             "bulk file reading): the figures as they were without the fast paths")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--markdown", metavar="FILE", help="also write the figures as a table")
    args = parser.parse_args(argv)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; known: {', '.join(SECTIONS)}")
    if args.normal_path:
        normal_path_only()
    for line in machine():
        print(line)
    print(f"mode: {'--quick' if args.quick else 'full'}"
          f"{', fast paths off (--normal-path)' if args.normal_path else ''}\n")
    figures: list[Figure] = []
    started = time.perf_counter()
    sys.modules.setdefault("run", sys.modules[__name__])  # realistic.py imports this module's helpers
    import realistic
    with tempfile.TemporaryDirectory(prefix="gyre-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        for section in SECTIONS:
            if section not in wanted:
                continue
            runner = {"validate_step": lambda: bench_validate_step(args.quick),
                      "validate_file": lambda: bench_validate_file(args.quick, tmp),
                      "end_to_end": lambda: bench_end_to_end(args.quick, tmp),
                      "collate": lambda: bench_collate(args.quick),
                      "import": lambda: bench_import(args.quick),
                      "diff": lambda: bench_diff(args.quick)}.get(
                section, lambda s=section: realistic.SECTIONS[s](args.quick))
            gc.collect()
            try:
                section_figures = runner()
            except realistic.BaselineMismatch as err:
                print(f"the baselines do not compute what the package computes: {err}")
                return 1
            for fig in section_figures:
                fig.section = section
                print(fig.line(), flush=True)
                figures.append(fig)
    failed = [f for f in figures if f.ok is False]
    print(f"\n{len(figures) - len(failed)} of {len(figures)} figures hold or are informational; "
          f"{len(failed)} FAIL; {time.perf_counter() - started:.0f} s; load average at the end "
          + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    if args.json:
        Path(args.json).write_text(json.dumps([f.__dict__ for f in figures], indent=2) + "\n",
                                   encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(markdown(figures), encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
