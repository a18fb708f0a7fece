"""Every performance figure, each a ratio to the strongest baseline, measured in the same run.

    python benchmarks/run.py                 # full sizes (corpora cached after the first run)
    python benchmarks/run.py --quick         # smaller corpora, fewer rounds (a few minutes)
    python benchmarks/run.py --smoke         # tiny sizes: the harness works (tests run this)
    python benchmarks/run.py --only validate_step,startup
    python benchmarks/run.py --json figures.json --markdown table.md

Before anything is timed, benchmarks/agreement.py checks that every baseline gives the
package's verdicts on valid and planted-invalid data (declared gaps aside) and the package's
arrays; a mismatch stops the run with exit 2. The protocol (interleaved rounds, median of
per-round ratios, raw-read and typed-decode limits, load and free cores per figure) is in
benchmarks/measure.py. Exit 0: every target holds; 1: a target fails; 2: a baseline disagrees
with the package or the run could not be made.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(ROOT), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import agreement  # noqa: E402
import baselines  # noqa: E402
import corpus  # noqa: E402
from measure import Figure, interleaved, load_now, markdown, process_time, where  # noqa: E402

import gyre_contract  # noqa: E402
import gyre_contract.io  # noqa: E402
from gyre_contract.cli._app import run as cli_run  # noqa: E402
from gyre_contract.pinned import CartPoleStep, LLMStep  # noqa: E402

SECTIONS = ("validate_step", "validate", "batch", "parquet", "tokens", "startup", "rss",
            "collate", "diff")
MAP = str(baselines.CARTPOLE_MAP)


@dataclass(frozen=True)
class Sizes:
    """How big and how many rounds, per mode."""

    step_rounds: int
    step_calls: int  # CartPole calls per round (the LLM record: a tenth)
    validate_lines: tuple[int, ...]
    batch_lines: int
    completions: int
    file_rounds: int
    startup_rounds: int
    rss_lines: tuple[int, int]
    check_lines: int
    check_completions: int


MODES = {
    "full": Sizes(31, 2000, (200_000, 1_000_000), 200_000, 10_000, 5, 15,
                  (100_000, 2_000_000), agreement.CHECK_LINES, agreement.CHECK_COMPLETIONS),
    "quick": Sizes(9, 1000, (50_000,), 50_000, 1_000, 3, 7, (20_000, 200_000),
                   agreement.CHECK_LINES, agreement.CHECK_COMPLETIONS),
    "smoke": Sizes(3, 100, (3_000,), 3_000, 100, 2, 2, (2_000, 6_000), 2_000, 32),
}


def cli(*argv: str) -> str:
    """One gyre-contract command in this process (the console script minus interpreter
    start-up); its stdout, or AssertionError unless it exits 0."""
    out, err = io.StringIO(), io.StringIO()
    code = cli_run(list(argv), stdout=out, stderr=err)
    if code != 0:
        raise AssertionError(f"gyre-contract {' '.join(argv)} exited {code}:\n"
                             f"{out.getvalue()[-2000:]}{err.getvalue()[-2000:]}")
    return out.getvalue()


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), out.get("PYTHONPATH")]))
    return out


def corpus_note(path: Path) -> str:
    meta = corpus.load_meta(path)
    if "episodes" not in meta:
        return f"{path.name}: {meta['lines']:,} lines, {meta['bytes'] / 2**20:.0f} MiB"
    return (f"{path.name}: {meta['lines']:,} lines, {meta['episodes']:,} episodes, lengths "
            f"{meta['length_min']}-{meta['length_max']} (median {meta['length_median']:.0f}), "
            f"{meta['bytes'] / 2**20:.0f} MiB")


# -- validate_step --------------------------------------------------------------------------------

def bench_validate_step(s: Sizes) -> list[Figure]:
    """`validate_step` with the default model and the pinned models against the best pydantic
    model returning the same output (the target), the same model returning lists (information:
    the price of the numpy output), msgspec and jsonschema-rs beside (information). The LLM
    record is timed pinned only: unpinned, the contract reads its observation as free
    modalities (any names, string arrays too), which no fixed model of an LLM turn matches."""
    cart, llm = agreement.cartpole_record(), agreement.llm_record()
    schema = baselines.JsonSchemaRs()
    default = gyre_contract.RolloutStep
    sides = [  # label, record, our model, pydantic (the output), pydantic (lists), msgspec, calls
        ("CartPole, default model", cart, default, baselines.BestStepOut, baselines.BestStep,
         baselines.StepStruct, 1),
        ("CartPole, pinned CartPoleStep", cart, CartPoleStep, baselines.BestCartPoleStepOut,
         baselines.BestCartPoleStep, baselines.CartPoleStruct, 1),
        ("LLM (512 + 128 tokens), pinned LLMStep", llm, LLMStep, baselines.BestLLMStepOut,
         baselines.BestLLMStep, baselines.LLMStruct, 10),
    ]
    figures = []
    for label, record, model, best, lists, struct, per in sides:
        number = max(s.step_calls // per, 5)

        def ours(r: Any = record, m: Any = model) -> Any:
            return gyre_contract.validate_step(r, m)

        def typed(r: Any = record, t: Any = struct) -> Any:
            return baselines.msgspec_step(r, t)

        figures.append(interleaved(
            f"validate_step {label} / best pydantic", ours,
            lambda r=record, b=best: b.model_validate(r), best.__name__, target="<= 1.1",
            rounds=s.step_rounds, number=number, typed=typed))
        # the package returns tensors as numpy (documented); a model returning lists does less
        figures.append(interleaved(
            f"validate_step {label} / best pydantic returning lists", ours,
            lambda r=record, b=lists: b.model_validate(r), f"{lists.__name__} (lists)",
            rounds=s.step_rounds, number=number))
        figures.append(interleaved(
            f"validate_step {label} / msgspec Struct", ours, typed, struct.__name__,
            rounds=s.step_rounds, number=number))
    figures.append(interleaved(
        "validate_step CartPole, default model / jsonschema-rs", lambda: gyre_contract.validate_step(
            cart, default), lambda: schema.record(cart), "jsonschema-rs is_valid (schema only)",
        rounds=s.step_rounds, number=s.step_calls))
    return figures


# -- validate FILE --------------------------------------------------------------------------------

def without_duckdb(call: Callable[[], str]) -> Callable[[], str]:
    """`call` with DuckDB's reader switched off (`GYRE_DUCKDB=0`, read per file): what a package
    installed without the extra `fast` does, pyarrow's reader reading every chunk."""
    def off() -> str:
        before = os.environ.get("GYRE_DUCKDB")
        os.environ["GYRE_DUCKDB"] = "0"
        try:
            return call()
        finally:
            if before is None:
                del os.environ["GYRE_DUCKDB"]
            else:
                os.environ["GYRE_DUCKDB"] = before
    return off


def bench_validate(s: Sizes) -> list[Figure]:
    """`gyre-contract validate FILE` (no --model) against polars + vectorised checks, and
    pyarrow.json + numpy checks and jsonschema-rs per line (information); pyarrow's reader
    alone against polars (information: the floor of a path built on that reader)."""
    figures = []
    schema = baselines.JsonSchemaRs()
    for lines in s.validate_lines:
        path = corpus.cartpole_corpus(lines)
        print(f"      corpus {corpus_note(path)}", flush=True)
        file = str(path)

        def ours(f: str = file) -> str:
            return cli("validate", f, "--format", "json")

        limits = {"raw": lambda p=path: baselines.raw_read(p),
                  "typed": lambda p=path: baselines.typed_decode(p)}
        figures.append(interleaved(
            f"validate {lines:,} lines (no --model) / polars", ours,
            lambda p=path: baselines.validate_polars(p), "pl.read_ndjson + polars checks",
            target="<= 1.0", rounds=s.file_rounds, **limits))
        figures.append(interleaved(
            f"validate {lines:,} lines (no --model), without the extra fast / polars",
            without_duckdb(ours), lambda p=path: baselines.validate_polars(p),
            "pl.read_ndjson + polars checks", rounds=s.file_rounds))
        figures.append(interleaved(
            f"validate {lines:,} lines (no --model) / pyarrow.json", ours,
            lambda p=path: baselines.validate_pyarrow(p), "pyarrow.json + numpy checks",
            rounds=s.file_rounds))
        # the floor under the target: the reader this path is built on, alone, on all threads,
        # nothing checked, against polars reading and checking everything
        figures.append(interleaved(
            f"pyarrow.json read alone, {lines:,} lines (the parse floor) / polars",
            lambda p=path: baselines.read_steps_arrow(p),
            lambda p=path: baselines.validate_polars(p), "pl.read_ndjson + polars checks",
            rounds=s.file_rounds))
        if lines == s.validate_lines[0]:
            figures.append(interleaved(
                f"validate {lines:,} lines (no --model) / jsonschema-rs", ours,
                lambda p=path: schema.file(p), "orjson + jsonschema-rs per line (schema only)",
                rounds=min(s.file_rounds, 3)))
    return figures


# -- JSONL and Parquet -> batch -------------------------------------------------------------------

def bench_batch(s: Sizes) -> list[Figure]:
    path = corpus.cartpole_corpus(s.batch_lines)
    print(f"      corpus {corpus_note(path)}", flush=True)
    file = str(path)

    def ours() -> str:
        return cli("batch", file, "--map", MAP, "--format", "json")

    return [
        interleaved(f"JSONL {s.batch_lines:,} lines -> [B, T] batch + GAE / pyarrow.json", ours,
                    lambda: baselines.batch_jsonl(path), "pyarrow.json + checks + numpy + GAE",
                    target="<= 1.1", rounds=s.file_rounds,
                    raw=lambda: baselines.raw_read(path),
                    typed=lambda: baselines.typed_decode(path)),
        interleaved(f"JSONL {s.batch_lines:,} lines -> batch / pyarrow.json, no checks", ours,
                    lambda: baselines.batch_jsonl(path, check=False),
                    "pyarrow.json + numpy + GAE, nothing checked", rounds=s.file_rounds),
    ]


def bench_parquet(s: Sizes) -> list[Figure]:
    path = corpus.cartpole_corpus(s.batch_lines, "parquet")
    print(f"      corpus {corpus_note(path)}", flush=True)
    file = str(path)
    return [interleaved(
        f"Parquet {s.batch_lines:,} lines -> [B, T] batch + GAE / pq.read_table",
        lambda: cli("batch", file, "--map", MAP, "--format", "json"),
        lambda: baselines.batch_parquet(path), "pq.read_table + checks + numpy + GAE",
        target="<= 1.1", rounds=s.file_rounds, raw=lambda: baselines.raw_read(path),
        typed=lambda: baselines.typed_decode(path))]


# -- completions -> token batch -------------------------------------------------------------------

def bench_tokens(s: Sizes, tmp: Path) -> list[Figure]:
    """Token rows from completions, padded (`baselines.TOKEN_MAP`) and packed
    (`baselines.PACKED_MAP`: micro-batch rows of 4,096 tokens, group_norm advantages)."""
    path = corpus.llm_corpus(s.completions)
    print(f"      corpus {corpus_note(path)}", flush=True)
    token_map = str(agreement.write_token_map(tmp))
    packed_map = str(agreement.write_packed_map(tmp))
    file = str(path)
    layouts = (("padded", token_map, baselines.token_batch,
                "pyarrow.json list columns + checks + mask scatter"),
               ("packed", packed_map, baselines.packed_batch,
                "pyarrow.json list columns + checks + FFD + index scatter"))
    figures = [interleaved(
        f"JSONL {s.completions:,} completions -> token batch ({layout}) / pyarrow.json",
        lambda m=map_file: cli("batch", file, "--map", m, "--format", "json"),
        lambda b=base: b(path), name, target="<= 1.2", rounds=s.file_rounds,
        raw=lambda: baselines.raw_read(path),
        typed=lambda: baselines.typed_decode(path, baselines.LLMStruct))
        for layout, map_file, base, name in layouts]
    # as real completions come: each prompt's text beside its ids (escaped newlines and quotes,
    # colons inside the string: what sends a chunk away from a reader's checks on its bytes)
    texts = corpus.llm_corpus(s.completions, text=True)
    print(f"      corpus {corpus_note(texts)}, each prompt's text in a chat template", flush=True)
    figures.append(interleaved(
        f"JSONL {s.completions:,} completions with prompt texts -> token batch (padded) "
        "/ pyarrow.json",
        lambda t=str(texts): cli("batch", t, "--map", token_map, "--format", "json"),
        lambda: baselines.token_batch(texts, text=True),
        "pyarrow.json list columns + checks + mask scatter", rounds=s.file_rounds))
    return figures


# -- start-up -------------------------------------------------------------------------------------

def bench_startup(s: Sizes) -> list[Figure]:
    """Fresh processes, interleaved: ours against `python -c "import numpy, pydantic"`."""
    python = sys.executable
    script = str(Path(python).with_name("gyre-contract"))
    base = [python, "-c", "import numpy, pydantic"]
    environ, cwd = env(), str(ROOT)

    def proc(argv: list[str]) -> Callable[[], float]:
        return lambda: process_time(argv, environ, cwd)

    cases = [("import gyre_contract", [python, "-c", "import gyre_contract"], "<= 1.2"),
             ("gyre-contract --version", [script, "--version"], "<= 1.3"),
             ("gyre-contract --help", [script, "--help"], "<= 1.3"),
             # what a sampler pays: the core (numpy, pydantic, the models), no schema built
             ("from gyre_contract import validate_step, RolloutStep",
              [python, "-c", "from gyre_contract import validate_step, RolloutStep"], ""),
             ("python -c pass (bare interpreter)", [python, "-c", "pass"], "")]
    figures = [interleaved(f"{label} / import numpy, pydantic", proc(argv), proc(base),
                           'python -c "import numpy, pydantic"', target=target,
                           rounds=s.startup_rounds) for label, argv, target in cases]
    record = repr(agreement.cartpole_record())
    figures.append(interleaved(  # the first validated step, import and schema build included
        "first validated step: import + validate_step / plain pydantic",
        proc([python, "-c", f"from gyre_contract import validate_step; validate_step({record})"]),
        proc([python, "-c", FIRST_STEP_PYDANTIC.format(record=record)]),
        "numpy + a strict pydantic model (allow_inf_nan=False), one record",
        rounds=s.startup_rounds))
    return figures


FIRST_STEP_PYDANTIC = """
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
np.asarray(Step.model_validate({record}).observation, np.float32)
"""
"""A sampler's first step without the package: numpy and a strict pydantic model of the
CartPole record, bounds in `Field`, validating one record."""


# -- peak memory ----------------------------------------------------------------------------------

RSS_OURS = """
import io, sys
from gyre_contract.cli._app import run
code = run(["validate", {path!r}, "--format", "json"], stdout=io.StringIO(), stderr=io.StringIO())
if code != 0:
    sys.exit(f"validate exited {{code}}")
"""
RSS_POLARS = """
import sys
sys.path.insert(0, {bench!r})
import baselines
baselines.validate_polars({path!r})
"""
RSS_TAIL = """
with open("/proc/self/status") as f:
    print(int(next(line.split()[1] for line in f if line.startswith("VmHWM:"))))
"""


def peak_rss(code: str, path: Path) -> float:
    """Peak resident memory (MB, VmHWM: ru_maxrss can carry a forked parent's peak) of a fresh
    process running `code` on `path`."""
    out = subprocess.run([sys.executable, "-c", code.format(path=str(path), bench=str(HERE))
                          + RSS_TAIL], check=True, capture_output=True, text=True, cwd=ROOT,
                         env=env())
    return int(out.stdout.split()[-1]) / 1024


def bench_rss(s: Sizes) -> list[Figure]:
    """Peak RSS of `validate` at the large size against the small one, on the default mix and
    on short (random-policy) episodes, four times the episodes per line (per-episode state);
    the polars baseline's peak beside (it holds the file as columns)."""
    small_lines, big_lines = s.rss_lines
    figures = []
    for share, label in ((0.25, ""), (1.0, ", short episodes")):
        small = corpus.cartpole_corpus(small_lines, random_share=share)
        big = corpus.cartpole_corpus(big_lines, random_share=share)
        print(f"      corpus {corpus_note(big)}", flush=True)
        before = load_now()
        peaks: dict[str, list[float]] = {"small": [], "big": [], "polars": []}
        for _ in range(2):  # interleaved; the smallest peak of each (noise only adds memory)
            peaks["small"].append(peak_rss(RSS_OURS, small))
            peaks["big"].append(peak_rss(RSS_OURS, big))
            if not label:
                peaks["polars"].append(peak_rss(RSS_POLARS, big))
        at = {**where(before, load_now()), "rounds": 2}
        p_small, p_big = min(peaks["small"]), min(peaks["big"])
        figures.append(Figure(f"peak RSS validate {big_lines:,} / {small_lines:,} lines{label}",
                              p_big, p_small, f"{small_lines:,} lines", p_big / p_small,
                              "<= 1.1", unit="MB", **at))
        if peaks["polars"]:
            p_polars = min(peaks["polars"])
            figures.append(Figure(f"peak RSS polars baseline / validate, {big_lines:,} lines",
                                  p_polars, p_big, "gyre-contract validate", p_polars / p_big,
                                  unit="MB", **at))
    return figures


# -- collate and diff (no baseline question: numpy and a plain compare) -----------------------

def bench_collate(s: Sizes) -> list[Figure]:
    rng = np.random.default_rng(0)
    episodes = [gyre_contract.io.Episode(f"ep-{i}", {
        "observation": rng.standard_normal((200, 64), np.float32),
        "episode_id": np.array([f"ep-{i}"] * 200)}) for i in range(256)]
    src = np.stack([e.columns["observation"] for e in episodes])
    dst = np.empty_like(src)
    if gyre_contract.collate(episodes, fields=["observation"])["observation"].shape != src.shape:
        raise AssertionError("collate gave the wrong shape")
    return [interleaved("collate 256x200x64 float32 / np.copyto",
                        lambda: gyre_contract.collate(episodes, fields=["observation"]),
                        lambda: np.copyto(dst, src), "np.copyto", target="<= 3",
                        rounds=s.startup_rounds, number=10)]


def wide_schemas(n: int = 500) -> tuple[dict[str, Any], dict[str, Any]]:
    """A sampler and a trainer schema of n fields each: same, cast and missing fields."""
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
        trainer_props[f"feature_{i}" if i % 10 else f"missing_{i}"] = lead
    head = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}
    return ({**head, "title": "wide sampler", "properties": sampler_props,
             "x-gyre-kind": "rollout_step"},
            {**head, "title": "wide trainer", "properties": trainer_props,
             "x-gyre-kind": "train_batch", "x-gyre-batch-dims": ["B", "T"]})


def bench_diff(s: Sizes) -> list[Figure]:
    sampler, trainer = wide_schemas()
    text = json.dumps(sampler), json.dumps(trainer)

    def floor() -> bool:  # parse both and compare the properties by name
        a, b = (json.loads(t)["properties"] for t in text)
        return all(a.get(k) == v for k, v in b.items())

    return [interleaved("diff of two 500-field schemas / parse + compare by name",
                        lambda: gyre_contract.diff(sampler, trainer), floor,
                        "json.loads + dict compare", rounds=s.startup_rounds)]


# -- main -----------------------------------------------------------------------------------------

def header() -> dict[str, Any]:
    import polars as pl
    import pyarrow as pa

    cpu = "unknown"
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        cpu = next((x.split(":", 1)[1].strip() for x in f if x.startswith("model name")), cpu)
    versions = {p: _version(p) for p in ("pydantic", "pydantic-core", "numpy", "orjson", "msgspec",
                                         "pyarrow", "polars", "jsonschema-rs", "gymnasium",
                                         "duckdb")}
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=ROOT, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
            "machine": f"{os.cpu_count()} cores, {cpu}, {platform.platform()}",
            "python": platform.python_version(), "versions": versions,
            "threads": {"pyarrow": pa.cpu_count(), "polars": pl.thread_pool_size()},
            "load_start": load_now().load1}


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller corpora, fewer rounds")
    size.add_argument("--smoke", action="store_true", help="tiny sizes: check the harness runs")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections out of {','.join(SECTIONS)}")
    parser.add_argument("--normal-path", action="store_true",
                        help="GYRE_FAST_PATHS=0: the figures without the package's fast paths")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--markdown", metavar="FILE", help="also write the figures as a table")
    args = parser.parse_args(argv)
    wanted = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; known: {', '.join(SECTIONS)}")
    if args.normal_path:
        os.environ["GYRE_FAST_PATHS"] = "0"  # child processes inherit it
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    sizes = MODES[mode]
    head = {**header(), "mode": mode, "fast_paths": not args.normal_path}
    for key in ("date", "commit", "machine", "python", "versions", "threads", "mode"):
        print(f"{key}: {head[key]}")
    started = time.perf_counter()
    problems, rows = agreement.check_all(sizes.check_lines, sizes.check_completions)
    head["agreement"] = {"verdicts": len(rows), "mismatches": problems}
    if problems:
        for p in problems:
            print(f"MISMATCH {p}")
        print("the baselines do not compute what the package computes: nothing timed")
        return 2
    print(f"agreement: {len(rows)} verdicts and every batch array equal to the package's "
          f"(declared gaps aside; benchmarks/agreement.py)\n")
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="gyre-bench-") as tmp_dir:
        runners: dict[str, Callable[[], list[Figure]]] = {
            "validate_step": lambda: bench_validate_step(sizes),
            "validate": lambda: bench_validate(sizes), "batch": lambda: bench_batch(sizes),
            "parquet": lambda: bench_parquet(sizes),
            "tokens": lambda: bench_tokens(sizes, Path(tmp_dir)),
            "startup": lambda: bench_startup(sizes), "rss": lambda: bench_rss(sizes),
            "collate": lambda: bench_collate(sizes), "diff": lambda: bench_diff(sizes)}
        for section in SECTIONS:
            if section not in wanted:
                continue
            gc.collect()
            for fig in runners[section]():
                fig.section = section
                print(fig.line(), flush=True)
                figures.append(fig)
    failed = [f for f in figures if f.ok is False]
    head["load_end"] = load_now().load1
    print(f"\n{len(figures) - len(failed)} of {len(figures)} figures hold or are informational; "
          f"{len(failed)} FAIL; {time.perf_counter() - started:.0f} s; load average "
          f"{head['load_start']:.1f} at the start, {head['load_end']:.1f} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"run": head, "figures": [f.as_dict() for f in figures]}, indent=1) + "\n",
            encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(markdown(figures), encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
