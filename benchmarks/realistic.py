"""The "fast by default" file figures of benchmarks/run.py: the DEFAULT step model on realistic corpora.

(`validate_step(record)` with the default model is in run.py's `validate_step` section.)

Sections (each figure a ratio to a hand-written baseline timed in the same run, interleaved):

- `corpus_validate`: `gyre-contract validate FILE` with and without `--model` on the real-length
  CartPole corpus (1,000,000 lines; `--quick` 100,000) against the orjson parse loop.
- `corpus_batch`: `gyre-contract batch FILE --map examples/cartpole_map.json` with and without
  `--model` (200,000 lines; `--quick` 20,000) against `pyarrow.json.read_json` + numpy padding + GAE.
- `parquet`: `batch FILE.parquet --map` against `pq.read_table` + numpy, and `validate` of the
  Parquet file against `validate` of the same steps as JSON Lines.
- `rss`: peak resident memory of a fresh `gyre-contract validate` process (no `--model`) at
  2,000,000 lines against 100,000 lines (`--quick`: 200,000 against 20,000), on the default mix
  and on a corpus of short random-policy episodes (five times the episodes per line).

The commands run in this process through `gyre_contract.cli._app.run` (what the console script runs,
minus interpreter start-up), their output captured; a command that does not exit 0 stops the
benchmark. Before any baseline is timed, `baselines.self_check` compares the baselines' batches
with the package's on a 20,000-line corpus and the benchmark exits 1 on a mismatch.
"""

from __future__ import annotations

import io
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import baselines
import corpus
from run import (
    ROOT,
    Figure,
    _env,
    best_of,
    check,
)

from gyre_contract.cli._app import run as cli_run

MAP = str(ROOT / "examples" / "cartpole_map.json")
PINNED = "gyre_contract.pinned:CartPoleStep"
CHECK_LINES = 20_000


class BaselineMismatch(Exception):
    """A baseline does not compute what the package computes: its times would mean nothing."""


def cli(*argv: str) -> str:
    """Run one gyre-contract command in this process; its stdout, or raise unless it exits 0."""
    out, err = io.StringIO(), io.StringIO()
    code = cli_run(list(argv), stdout=out, stderr=err)
    if code != 0:
        raise AssertionError(f"gyre-contract {' '.join(argv)} exited {code}:\n"
                             f"{out.getvalue()[-2000:]}{err.getvalue()[-2000:]}")
    return out.getvalue()


_checked: list[bool] = []


def ensure_baselines_agree() -> None:
    """`baselines.self_check` once per run, on a small real corpus (JSON Lines and Parquet)."""
    if _checked:
        return
    problems = baselines.self_check(corpus.cartpole_corpus(CHECK_LINES),
                                    corpus.cartpole_corpus(CHECK_LINES, "parquet"))
    if problems:
        raise BaselineMismatch("; ".join(problems))
    _checked.append(True)


def paired_within(ours: Callable[[], Any], base: Callable[[], Any], rounds: int,
                  budget: float) -> tuple[float, float, float, int]:
    """`paired` (ours and base alternated, median ratio), but no new round once `budget` seconds
    have gone: (ours s, base s, median ratio, rounds run). One round always runs."""
    t_ours, t_base, ratios = [], [], []
    start = time.perf_counter()
    while len(ratios) < rounds and (not ratios or time.perf_counter() - start < budget):
        b = best_of(base, 1)
        a = best_of(ours, 1)
        t_ours.append(a)
        t_base.append(b)
        ratios.append(a / b)
    med = statistics.median
    return med(t_ours), med(t_base), med(ratios), len(ratios)


def rounds_note(n: int) -> str:
    return f" ({n} round{'s' if n > 1 else ''})"


def corpus_note(path: Path) -> str:
    meta = corpus.load_meta(path)
    return (f"{path.name}: {meta['lines']:,} lines, {meta['episodes']:,} episodes, lengths "
            f"{meta['length_min']}-{meta['length_max']} (median {meta['length_median']:.0f}), "
            f"{meta['bytes'] / 2**20:.0f} MiB")


# -- validate FILE with and without --model ------------------------------------------------------

ROUNDS = 3
BUDGET = 90.0
"""Seconds after which a figure starts no new round (a slow path on a busy machine): the
figure then says how many rounds it ran."""


def bench_corpus_validate(quick: bool) -> list[Figure]:
    lines = 100_000 if quick else 1_000_000
    path = corpus.cartpole_corpus(lines)
    print(f"      corpus {corpus_note(path)}", flush=True)
    file = str(path)
    floor = lambda: baselines.orjson_loop(path)  # noqa: E731
    a, b, ratio, n = paired_within(lambda: cli("validate", file, "--format", "json"), floor,
                                   ROUNDS, BUDGET)
    figures = [Figure(f"validate {lines:,} lines (no --model) / orjson loop", a, b,
                      "orjson.loads loop" + rounds_note(n), ratio, "<= 2", check(ratio, "<= 2"))]
    a2, b2, ratio2, n2 = paired_within(
        lambda: cli("validate", file, "--model", PINNED, "--format", "json"), floor, ROUNDS, BUDGET)
    figures.append(Figure(f"validate {lines:,} lines --model / orjson loop", a2, b2,
                          "orjson.loads loop" + rounds_note(n2), ratio2, "<= 2",
                          check(ratio2, "<= 2")))
    figures.append(Figure("  validate no --model / --model", a, a2, "--model CartPoleStep",
                          ratio / ratio2, "", None))
    return figures


# -- batch FILE --map with and without --model ---------------------------------------------------

def bench_corpus_batch(quick: bool) -> list[Figure]:
    ensure_baselines_agree()
    lines = 20_000 if quick else 200_000
    path = corpus.cartpole_corpus(lines)
    print(f"      corpus {corpus_note(path)}", flush=True)
    file = str(path)
    hand = lambda: baselines.batch_pyarrow_jsonl(path)  # noqa: E731
    base_name = "pyarrow.json + numpy + GAE"
    a, b, ratio, n = paired_within(lambda: cli("batch", file, "--map", MAP, "--format", "json"),
                                   hand, ROUNDS, BUDGET)
    figures = [Figure(f"batch {lines:,} lines (no --model) / pyarrow+numpy", a, b,
                      base_name + rounds_note(n), ratio, "<= 1.5", check(ratio, "<= 1.5"))]
    a2, b2, ratio2, n2 = paired_within(
        lambda: cli("batch", file, "--map", MAP, "--model", PINNED, "--format", "json"), hand,
        ROUNDS, BUDGET)
    figures.append(Figure(f"batch {lines:,} lines --model / pyarrow+numpy", a2, b2,
                          base_name + rounds_note(n2), ratio2, "", None))
    a3, b3, ratio3, n3 = paired_within(lambda: baselines.batch_orjson_jsonl(path), hand, ROUNDS,
                                       BUDGET)
    figures.append(Figure("  hand-written orjson+numpy / pyarrow+numpy", a3, b3,
                          base_name + rounds_note(n3), ratio3, "", None))
    return figures


# -- Parquet -------------------------------------------------------------------------------------

def bench_parquet(quick: bool) -> list[Figure]:
    ensure_baselines_agree()
    lines = 20_000 if quick else 200_000
    jsonl, parquet = corpus.cartpole_corpus(lines), corpus.cartpole_corpus(lines, "parquet")
    print(f"      corpus {corpus_note(parquet)}", flush=True)
    a, b, ratio, n = paired_within(
        lambda: cli("batch", str(parquet), "--map", MAP, "--format", "json"),
        lambda: baselines.batch_parquet(parquet), ROUNDS, BUDGET)
    figures = [Figure(f"Parquet {lines:,} lines -> batch / pq.read_table+numpy", a, b,
                      "pq.read_table + numpy + GAE" + rounds_note(n), ratio, "<= 1.5",
                      check(ratio, "<= 1.5"))]
    a2, b2, ratio2, n2 = paired_within(lambda: cli("validate", str(parquet), "--format", "json"),
                                       lambda: cli("validate", str(jsonl), "--format", "json"),
                                       ROUNDS, BUDGET)
    figures.append(Figure(f"validate Parquet / JSONL, {lines:,} lines", a2, b2,
                          "validate JSONL" + rounds_note(n2), ratio2, "<= 1.2",
                          check(ratio2, "<= 1.2")))
    return figures


# -- peak memory ---------------------------------------------------------------------------------

RSS_SCRIPT = """
import io, resource, sys
from gyre_contract.cli._app import run
out = io.StringIO()
code = run(["validate", {path!r}, "--format", "json"], stdout=out, stderr=io.StringIO())
if code != 0:
    sys.exit(f"validate exited {{code}}: {{out.getvalue()[-2000:]}}")
try:
    with open("/proc/self/status") as f:
        print(int(next(line.split()[1] for line in f if line.startswith("VmHWM:"))))
except OSError:  # no procfs: ru_maxrss (KiB on Linux)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_rss_validate(path: Path) -> float:
    """Peak resident memory (MB) of a fresh process running `gyre-contract validate path`.

    VmHWM of the child itself: `ru_maxrss` can carry the forked parent's peak over `exec`.
    """
    out = subprocess.run([sys.executable, "-c", RSS_SCRIPT.format(path=str(path))], check=True,
                         capture_output=True, text=True, cwd=ROOT, env=_env())
    return int(out.stdout.split()[-1]) / 1024


def bench_rss(quick: bool) -> list[Figure]:
    """Peak RSS at the large size against the small one, on the default mix and on a corpus of
    short (random-policy) episodes, five times the episodes per line (per-episode state)."""
    small_lines, big_lines = (20_000, 200_000) if quick else (100_000, 2_000_000)
    figures = []
    for share, label in ((0.25, ""), (1.0, ", short episodes")):
        small = corpus.cartpole_corpus(small_lines, random_share=share)
        big = corpus.cartpole_corpus(big_lines, random_share=share)
        print(f"      corpus {corpus_note(big)}", flush=True)
        peaks_small: list[float] = []
        peaks_big: list[float] = []
        start = time.perf_counter()
        # interleaved; the smallest peak of each (noise only ever adds memory); a second round
        # only when the first was quick
        while len(peaks_big) < 2 and (not peaks_big or time.perf_counter() - start < BUDGET):
            peaks_small.append(peak_rss_validate(small))
            peaks_big.append(peak_rss_validate(big))
        s, b = min(peaks_small), min(peaks_big)
        figures.append(Figure(f"peak RSS validate {big_lines:,} / {small_lines:,} lines{label}", b, s,
                              f"{small_lines:,} lines", b / s, "<= 1.25", check(b / s, "<= 1.25"),
                              unit="MB"))
    return figures


SECTIONS: dict[str, Any] = {
    "corpus_validate": bench_corpus_validate,
    "corpus_batch": bench_corpus_batch,
    "parquet": bench_parquet,
    "rss": bench_rss,
}
