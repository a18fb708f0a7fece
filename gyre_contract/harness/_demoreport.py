"""What a demo did, as a report (`gyre_contract.core._report`): each stage's verdict and key
figures, the files it wrote; `to_dict` is exactly what `gyre-contract demo --format json` prints.

Both demos (`harness._demo` on CartPole, `harness._llmdemo` for LLM online RL) fill one
`DemoReport` subclass while they run: a stage records its verdict and figures with `record`,
stage 3 its runs, each with its learning curve and its full cycle table (`cycle_rows`).
`compact_table` is the short per-seed view of that table the text output prints.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TextIO

from gyre_contract.core._errors import ContractError
from gyre_contract.core._report import Report
from gyre_contract.harness._runplot import plot_runs

FILES = {"rollouts.jsonl": "stage 1: the sampler's rollouts (validate, show)",
         "sampler.json": "the diff: the sampler's schema",
         "trainer.json": "the diff: the trainer's schema",
         "map.json": "the diff: the field map it wrote (batch --map)",
         "runs.jsonl": "stage 3: one run record per seed (runs)",
         "runs.png": "stage 3: the curves"}
"""The files a demo leaves in its folder, in the order the stages write them."""


@dataclass
class DemoReport(Report):
    """What a demo did: each stage's verdict (`stages`) and key figures (`figures`), the files.

    `ok` (also `passed`) holds when every stage passed; `exit_code()` is the command's.
    `kept` says whether `out_dir` stays after the command (the CLI removes a temporary one).
    """

    demo: ClassVar[str] = "demo"
    stages: dict[str, bool] = field(default_factory=dict)
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    out_dir: Path | None = None
    seed: int = 0
    cycles: int = 0
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)
    """The files the demo wrote into `out_dir` (names, in `FILES` order)."""
    kept: bool = True

    @property
    def ok(self) -> bool:
        return bool(self.stages) and all(self.stages.values())

    @property
    def passed(self) -> bool:
        """The same as `ok`: every stage passed."""
        return self.ok

    def record(self, stage: str, ok: bool, **figures: Any) -> bool:
        """Set `stage`'s verdict, add its figures; return the verdict."""
        self.stages[stage] = bool(ok)
        self.figures.setdefault(stage, {}).update(figures)
        return bool(ok)

    def failed(self, stage: str, err: ContractError) -> None:
        """`stage` broke the contract: its problems go into its figures."""
        self.record(stage, False, error=str(err), problems=[p.to_dict() for p in err.problems])

    def list_files(self) -> None:
        """Note which of `FILES` are in `out_dir` now (call at the end of the run)."""
        folder = self.out_dir
        self.files = [] if folder is None else [n for n in FILES if (folder / n).is_file()]

    def to_dict(self) -> dict[str, Any]:
        return {
            "demo": self.demo, "ok": self.ok, "exit_code": self.exit_code(),
            "seed": self.seed, "cycles": self.cycles, "seconds": self.seconds,
            "out_dir": None if self.out_dir is None else str(self.out_dir), "kept": self.kept,
            "files": list(self.files),
            "stages": {name: {"ok": ok, **self.figures.get(name, {})}
                       for name, ok in self.stages.items()},
        }

    def to_text(self) -> str:
        """The closing line: every stage's verdict."""
        return (f"{'ALL STAGES PASS' if self.ok else 'SOME STAGES FAILED'} in "
                f"{self.seconds:.1f}s: " + ", ".join(
                    f"{k} {'pass' if v else 'FAIL'}" for k, v in self.stages.items()))


@contextmanager
def timed(report: DemoReport, stage: str) -> Iterator[None]:
    """Time the block into `stage`'s figures (`seconds`)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        report.figures.setdefault(stage, {})["seconds"] = time.perf_counter() - started


def cycle_rows(loop: Any) -> list[dict[str, Any]]:
    """Stage 3's full cycle table as data, one dict per cycle of a `LoopReport`: its version,
    the staleness of its oldest row (token rows), counts, phase times and the trainer's metrics."""
    rows = []
    for c in loop.cycles:
        stale = c.staleness
        rows.append({"cycle": c.cycle, "policy_version": c.policy_version,
                     "staleness": max(stale) if stale else None, "episodes": c.n_episodes,
                     "steps": c.n_steps, "batch_shape": list(c.batch_shape),
                     "rollout_s": c.rollout_s, "train_s": c.train_s,
                     "metrics": dict(c.metrics)})
    return rows


COMPACT_COLUMNS = (("cycle", "cycle"), ("version", "policy_version"), ("staleness", "staleness"),
                   ("mean_reward", "mean_reward"), ("loss", "loss"), ("kl", "kl"),
                   ("clip_fraction", "clip_fraction"))
"""The compact table's columns: (heading, key in a `cycle_rows` row or its metrics)."""


def compact_rows(n: int, every: int = 5) -> list[int]:
    """The cycles the compact table shows: every `every`-th, and the last."""
    return sorted({*range(0, n, every), n - 1}) if n > 0 else []


def compact_table(rows: Sequence[dict[str, Any]], every: int = 5,
                  columns: Sequence[tuple[str, str]] = COMPACT_COLUMNS) -> str:
    """Every `every`-th cycle and the last, in the key columns, right-aligned."""
    def cell(row: dict[str, Any], key: str) -> str:
        value = row[key] if key in row else row.get("metrics", {}).get(key)
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    table = [[h for h, _ in columns]] + [[cell(rows[i], key) for _, key in columns]
                                         for i in compact_rows(len(rows), every)]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True))
                     for r in table)


def first_last(curves: Sequence[Sequence[float]], cycles: int) -> tuple[str, str, str]:
    """How a verdict compares the start of each curve with its end: (label, firsts, lasts).

    The mean of the first k cycles against the last k, k = min(3, cycles // 2), so the two
    never overlap; with k = 1 (three cycles or fewer) it says "first → last cycle"."""
    k = max(1, min(3, cycles // 2))
    label = "first → last cycle" if k == 1 else f"first {k} cycles → last {k}"
    firsts = "/".join(f"{sum(c[:k]) / len(c[:k]):.2f}" for c in curves)
    lasts = "/".join(f"{sum(c[-k:]) / len(c[-k:]):.2f}" for c in curves)
    return label, firsts, lasts


class Say:
    """The demos' text output: a line, a stage heading with its pass criteria, a verdict."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def heading(self, title: str, criteria: str) -> None:
        self(f"\n=== {title} ===")
        self(f"pass criteria: {criteria}")

    def verdict(self, ok: bool, text: str) -> bool:
        self(f"result: {'PASS' if ok else 'FAIL'} — {text}")
        return ok


def plot_curves(say: Say, log: Any, out_dir: Path, curve: str, label: str, what: str) -> str | None:
    """Stage 3's curves as `runs.png` (extra `demo`: matplotlib); the file's name, or None
    without matplotlib (the demo says how to get it)."""
    try:
        path = plot_runs(log.read(), out_dir / "runs.png", curve=curve, curve_label=label)
    except ImportError:
        say("(no plot: pip install 'gyre-contract[demo]' for matplotlib)")
        return None
    say(f"plot: {path} ({what})")
    return Path(path).name
