"""Run timing log: time the rollout and train phases, append one `RunRecord` per run to JSONL.

Why: whether to tune the sampler or the training batch is read from the spread of rollout and
train time over repeated runs of one configuration, not from one run. `runs.jsonl` keeps them all;
`summarize` gives min / median / max per configuration and `plot_runs` draws every run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, ValidationError

from gyre_contract.core.errors import ContractError, Problem, describe
from gyre_contract.core.report import Report
from gyre_contract.io.jsonfile import read_bounded

TIMES = ("rollout_s", "train_s", "total_s")
"""The timed quantities of a run, in seconds."""

SUMMARY_METRICS = (*TIMES, "steps_per_s")
"""What `summarize` reports per configuration; `steps_per_s` is `n_steps / total_s`."""


class RunRecord(BaseModel):
    """One run: its configuration, phase times, counts and final policy version."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str = Field(min_length=1)
    config: str | dict[str, Any] = Field(
        description="a configuration key, or the configuration itself (grouped by its sorted JSON)"
    )
    rollout_s: float = Field(strict=True, ge=0, allow_inf_nan=False)
    train_s: float = Field(strict=True, ge=0, allow_inf_nan=False)
    total_s: float = Field(strict=True, gt=0, allow_inf_nan=False)
    n_steps: int = Field(strict=True, ge=0)
    n_episodes: int = Field(strict=True, ge=0)
    batch_shape: tuple[StrictInt, ...]
    policy_version: int = Field(strict=True)
    notes: str = ""
    started_at: AwareDatetime

    @property
    def config_key(self) -> str:
        """The configuration as one string: itself, or its JSON with sorted keys."""
        return config_key(self.config)


MAX_RUN_KEYS = 100
"""A run-log line with more keys is one `too many keys` problem, not one per unknown key."""

MAX_RUN_LOG_BYTES = 256 * 2**20
"""Largest run log `RunLog.read` reads (256 MiB, about 250,000 runs); read with a bounded reader,
so `/dev/zero` or an endless pipe cannot take the memory."""

_EXPECTED = {
    "run_id": "a non-empty string",
    "config": "a string or an object",
    "rollout_s": "a finite number >= 0",
    "train_s": "a finite number >= 0",
    "total_s": "a finite number > 0",
    "n_steps": "an integer >= 0",
    "n_episodes": "an integer >= 0",
    "batch_shape": "a list of integers",
    "policy_version": "an integer",
    "notes": "a string",
    "started_at": "an ISO 8601 time with a UTC offset",
}


def config_key(config: str | dict[str, Any]) -> str:
    """A configuration as a grouping key: a string as is, an object as sorted compact JSON."""
    if isinstance(config, str):
        return config
    return orjson.dumps(config, option=orjson.OPT_SORT_KEYS).decode()


@dataclass(frozen=True, slots=True)
class Phase:
    """One timed phase (`rollout` or `train`), as `time.perf_counter` readings."""

    name: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class RunTimer:
    """Times a run: `with RunTimer() as timer:` around it, `timer.rollout()` / `.train()` inside.

    Keeps every phase (for ordering checks), their summed seconds, and the step and episode counts
    the caller adds with `count`. `clock` is injectable so tests can drive it.
    """

    clock: Callable[[], float] = time.perf_counter
    phases: list[Phase] = field(default_factory=list)
    n_steps: int = 0
    n_episodes: int = 0
    started_at: datetime | None = None
    _start: float | None = None
    _end: float | None = None
    _open: str | None = None

    def __enter__(self) -> RunTimer:
        self.started_at = datetime.now(timezone.utc)
        self._start = self.clock()
        return self

    def __exit__(self, *exc: object) -> None:
        self._end = self.clock()

    @contextmanager
    def rollout(self) -> Iterator[None]:
        """Times one rollout (sampling) phase."""
        with self._phase("rollout"):
            yield

    @contextmanager
    def train(self) -> Iterator[None]:
        """Times one train (update) phase."""
        with self._phase("train"):
            yield

    @contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        if self._start is None or self._end is not None:
            raise RuntimeError(f"{name} phase outside `with RunTimer()`")
        if self._open is not None:
            raise RuntimeError(f"{name} phase started inside the {self._open} phase")
        self._open = name
        start = self.clock()
        try:
            yield
        finally:
            self.phases.append(Phase(name, start, self.clock()))
            self._open = None

    def count(self, *, steps: int, episodes: int) -> None:
        """Adds the steps and completed episodes of one rollout."""
        self.n_steps += steps
        self.n_episodes += episodes

    def seconds(self, name: str) -> float:
        """Summed seconds of the phases called `name`."""
        return sum(p.seconds for p in self.phases if p.name == name)

    def phase_count(self, name: str) -> int:
        return sum(1 for p in self.phases if p.name == name)

    @property
    def total_s(self) -> float:
        if self._start is None or self._end is None:
            raise RuntimeError("total_s is known once the `with RunTimer()` block has ended")
        return self._end - self._start

    def record(
        self, *, run_id: str, config: str | dict[str, Any], batch_shape: Sequence[int],
        policy_version: int, notes: str = "",
    ) -> RunRecord:
        """The `RunRecord` of this finished run."""
        return RunRecord(
            run_id=run_id, config=config, rollout_s=self.seconds("rollout"),
            train_s=self.seconds("train"), total_s=self.total_s, n_steps=self.n_steps,
            n_episodes=self.n_episodes, batch_shape=tuple(batch_shape),
            policy_version=policy_version, notes=notes, started_at=self.started_at,
        )


class RunLog:
    """`runs.jsonl`: one `RunRecord` per line, appended whole, read back with line numbers."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def append(self, record: RunRecord) -> None:
        """Appends one record as one line, written with a single call."""
        line = orjson.dumps(record.model_dump(mode="json")) + b"\n"
        with self.path.open("ab") as f:
            f.write(line)

    def read(self) -> list[RunRecord]:
        """Every record; blank lines skipped; bad lines raise one `ContractError` listing all."""
        data = read_bounded(self.path, what="run log", max_bytes=MAX_RUN_LOG_BYTES,
                            limit_name="MAX_RUN_LOG_BYTES")
        records: list[RunRecord] = []
        problems: list[Problem] = []
        for number, line in enumerate(data.splitlines(), start=1):
            if not line.strip():
                continue
            record, line_problems = parse_run_line(line)
            problems += [p.at_line(number) for p in line_problems]
            if record is not None:
                records.append(record)
        if problems:
            raise ContractError(problems)
        return records


def parse_run_line(line: bytes) -> tuple[RunRecord | None, list[Problem]]:
    """One JSONL line as a `RunRecord`, or the problems that stop it."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        return None, [Problem("", "a JSON object", f"invalid JSON ({e.msg})", "bad line")]
    if not isinstance(value, dict):
        return None, [Problem("", "a JSON object", describe(value), "bad line")]
    if len(value) > MAX_RUN_KEYS:  # one problem, not one per unknown key (bounded memory)
        return None, [Problem("", f"at most {MAX_RUN_KEYS} keys (a RunRecord has "
                                  f"{len(RunRecord.model_fields)} fields)",
                              f"{len(value)} keys", "too many keys")]
    try:
        return RunRecord.model_validate(value), []
    except ValidationError as e:
        return None, [_problem(error) for error in e.errors()]


def _problem(error: Any) -> Problem:
    path = ".".join(str(part) for part in error["loc"])
    name = str(error["loc"][0]) if error["loc"] else ""
    if error["type"] == "missing":
        return Problem(path, _EXPECTED[name], "nothing", "missing field")
    if error["type"] == "extra_forbidden":
        return Problem(path, "a RunRecord field", describe(error["input"]), "unknown field")
    return Problem(path, _EXPECTED[name], describe(error["input"]), "bad value")


@dataclass(frozen=True, slots=True)
class Spread:
    """Min / median / max of one metric over the runs of one configuration."""

    min: float
    median: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(min(values), statistics.median(values), max(values))


@dataclass(frozen=True, slots=True)
class ConfigSummary:
    """One configuration's runs: how many, and the spread of each metric in `SUMMARY_METRICS`."""

    config: str
    runs: int
    n_steps: int
    spreads: dict[str, Spread]

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config, "runs": self.runs, "n_steps": self.n_steps,
            **{name: {"min": s.min, "median": s.median, "max": s.max}
               for name, s in self.spreads.items()},
        }


def summarize(records: Iterable[RunRecord]) -> list[ConfigSummary]:
    """Per configuration (in order of first appearance): min / median / max of times and steps/s."""
    groups: dict[str, list[RunRecord]] = {}
    for record in records:
        groups.setdefault(record.config_key, []).append(record)
    return [
        ConfigSummary(
            config=key, runs=len(runs), n_steps=sum(r.n_steps for r in runs),
            spreads={
                **{name: Spread.of([getattr(r, name) for r in runs]) for name in TIMES},
                "steps_per_s": Spread.of([r.n_steps / r.total_s for r in runs]),
            },
        )
        for key, runs in groups.items()
    ]


def format_summary(summaries: Sequence[ConfigSummary]) -> str:
    """An aligned text table: one row per configuration and metric."""
    header = ("config", "runs", "metric", "min", "median", "max")
    rows: list[tuple[str, ...]] = []
    for s in summaries:
        for i, (name, spread) in enumerate(s.spreads.items()):
            first = i == 0
            rows.append((
                s.config if first else "", str(s.runs) if first else "", name,
                *(_number(v) for v in (spread.min, spread.median, spread.max)),
            ))
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.rjust(w) if c >= 3 else cell.ljust(w)
            for c, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


@dataclass(frozen=True)
class RunsReport(Report):
    """What `gyre-contract runs` reports: a run log's runs, summarized per configuration.

    Reading the log raises on a bad line, so a report always holds (`ok` is True).
    """

    path: str
    runs: int
    summaries: list[ConfigSummary]
    plot: str | None = None

    @classmethod
    def of(cls, path: str | Path, records: Sequence[RunRecord], plot: str | None = None
           ) -> RunsReport:
        """Summarize `records`, read from the run log at `path`."""
        return cls(path=str(path), runs=len(records), summaries=summarize(records), plot=plot)

    @property
    def ok(self) -> bool:
        return True

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "runs": self.runs,
                "configs": [s.to_dict() for s in self.summaries], "plot": self.plot}

    def to_text(self) -> str:
        """A heading line, then the per-configuration table (and the plot's path)."""
        noun = "configuration" if len(self.summaries) == 1 else "configurations"
        runs = "run" if self.runs == 1 else "runs"
        lines = [f"{self.path}: {self.runs} {runs}, {len(self.summaries)} {noun}", "",
                 format_summary(self.summaries)]
        if self.plot:
            lines += ["", f"plot: {self.plot}"]
        return "\n".join(lines)


def _number(value: float) -> str:
    """Milliseconds resolution for times; large rates as whole numbers with separators."""
    return f"{value:.3f}" if abs(value) < 1000 else f"{value:,.0f}"


def plot_runs(records: Sequence[RunRecord], path: str | Path) -> Path:
    """Draws rollout and train seconds of every run, one column per configuration (PNG).

    Each run is a dot and each configuration's median a short line, so the spread shows at a
    glance. Needs matplotlib (the `plot` or `demo` extra); uses the Agg canvas, no display.
    """
    if not records:
        raise ValueError("plot_runs needs at least one run")
    from matplotlib.figure import Figure

    keys = list(dict.fromkeys(r.config_key for r in records))
    fig = Figure(figsize=(max(6.0, 1.2 * len(keys) + 3), 4.5), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)  # one scale: which phase dominates shows
    for ax, name in zip(axes, ("rollout_s", "train_s"), strict=True):
        for x, key in enumerate(keys):
            values = [getattr(r, name) for r in records if r.config_key == key]
            offsets = _spread_offsets(len(values))
            ax.scatter([x + o for o in offsets], values, s=18, alpha=0.8)
            ax.hlines(statistics.median(values), x - 0.25, x + 0.25, colors="black")
        ax.set_title(f"{name.removesuffix('_s')} time per run")
        ax.set_ylabel("seconds")
        ax.set_xticks(range(len(keys)), _labels(keys), rotation=20, ha="right")
        ax.set_ylim(bottom=0)
    out = Path(path)
    fig.savefig(out, dpi=100)
    return out


def _spread_offsets(n: int) -> list[float]:
    """Evenly spaced x offsets in [-0.15, 0.15] so runs with equal times stay visible."""
    if n == 1:
        return [0.0]
    return [-0.15 + 0.3 * i / (n - 1) for i in range(n)]


def _labels(keys: Sequence[str]) -> list[str]:
    """Short tick labels, numbered when shortening would make two configurations look alike."""
    short = [_short(k) for k in keys]
    if len(set(short)) == len(short):
        return short
    return [f"{i + 1}: {_short(k, 20)}" for i, k in enumerate(keys)]


def _short(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
