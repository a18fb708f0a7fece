"""Run log: time the rollout and train phases, keep the user's metrics, one `RunRecord` per run.

Why: whether to tune the sampler or the training batch, and whether a change helped, is read from
the spread over repeated runs of one configuration (different seeds), not from one run.
`runs.jsonl` keeps every run: its times and counts, the final value of each numeric metric the
trainer returned, and that metric per cycle (the learning curve). `summarize` gives min / median
/ max per configuration; `gyre_contract.harness._runplot.plot_runs` draws them.
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import orjson
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
)

from gyre_contract.core._errors import ContractError, InputError, Problem, describe
from gyre_contract.core._report import Report
from gyre_contract.core._text import MAX_MESSAGE_CHARS, printable, shorten, shown
from gyre_contract.io._jsonfile import refuse_devices
from gyre_contract.io._lines import Crowded, LineSource, Overlong, hidden_problems, unparsed_problem
from gyre_contract.io._linescan import scan, surely_json
from gyre_contract.io._writer import ends_with_newline, open_for_append

TIMES = ("rollout_s", "train_s", "total_s")
"""The timed quantities of a run, in seconds."""

SUMMARY_METRICS = (*TIMES, "steps_per_s")
"""What `summarize` reports per configuration; `steps_per_s` is `n_steps / total_s`."""


MetricName = Annotated[str, Field(min_length=1, max_length=200)]
FiniteNumber = Annotated[float, Field(strict=True, allow_inf_nan=False)]


class RunRecord(BaseModel):
    """One run: its configuration, phase times, counts, final policy version and metrics.

    `metrics` holds the run's final value of each numeric metric (its last cycle's, when the
    run log was written by `full_loop`); `curves` holds each metric per cycle, `null` where a
    cycle reported no finite value for it. Both are optional: a run log without them still reads.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # built on first use

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
    metrics: dict[MetricName, FiniteNumber] = Field(default_factory=dict)
    curves: dict[MetricName, list[FiniteNumber | None]] = Field(default_factory=dict)

    @field_validator("curves")
    @classmethod
    def _one_value_per_cycle(cls, curves: dict[str, list[float | None]]
                             ) -> dict[str, list[float | None]]:
        lengths = sorted({len(values) for values in curves.values()})
        if len(lengths) > 1:
            raise ValueError(f"curves of lengths {lengths}")
        return curves

    @property
    def cycles(self) -> int:
        """How many cycles the curves cover (0 without curves)."""
        return max((len(v) for v in self.curves.values()), default=0)

    @property
    def config_key(self) -> str:
        """The configuration as one string: itself, or its JSON with sorted keys."""
        return config_key(self.config)


MAX_RUN_KEYS = 100
"""A run-log line with more keys (its own, as written: a duplicate counts each time) is one
`too many keys` problem, not one per unknown key; counted on the line's bytes, so a line of a
million keys is refused without being parsed."""

MAX_RUN_LOG_BYTES = 256 * 2**20
"""Largest run log `RunLog.read` reads (256 MiB, about 250,000 runs); read with a bounded reader,
so `/dev/zero` or an endless pipe cannot take the memory."""
MAX_RUN_METRICS = 1000
"""A run's `metrics` or `curves` with more names is one `too many metrics` problem; `RunTimer`
refuses the cycle that would go beyond it, so a run log it writes always reads back."""
MAX_CONFIG_DEPTH = 64
"""A run's `config` nested deeper is one `config nested too deeply` problem."""

TORN = "invalid JSON"
"""What a run-log line that is not JSON got (a torn line: a writer cut off mid-line);
`RunLog.scan` skips such lines and says so."""

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
    "metrics": "an object of metric name -> finite number",
    "curves": "an object of metric name -> list of finite numbers or null, one per cycle, "
              "all of one length",
}


def config_key(config: str | dict[str, Any]) -> str:
    """A configuration as a grouping key: a string as is, an object as sorted compact JSON."""
    if isinstance(config, str):
        return config
    return orjson.dumps(config, option=orjson.OPT_SORT_KEYS).decode()


MAX_LABEL = 32
"""A configuration key longer than this is shown by its hash (`#` and 8 hex digits)."""


def config_label(key: str) -> str:
    """How a table or plot names a configuration: its key, or `#` + a short hash of a long one."""
    if len(key) <= MAX_LABEL:
        return key
    return "#" + hashlib.sha256(key.encode()).hexdigest()[:8]


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

    Keeps every phase (for ordering checks), their summed seconds, the step and episode counts
    the caller adds with `count`, and each cycle's numeric metrics added with `add_metrics` (the
    learning curves). `clock` is injectable so tests can drive it.
    """

    clock: Callable[[], float] = time.perf_counter
    phases: list[Phase] = field(default_factory=list)
    n_steps: int = 0
    n_episodes: int = 0
    cycle_metrics: list[dict[str, float | None]] = field(default_factory=list)
    started_at: datetime | None = None
    _start: float | None = None
    _end: float | None = None
    _open: str | None = None
    _metric_names: set[str] = field(default_factory=set)

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

    def add_metrics(self, metrics: Mapping[str, Any]) -> None:
        """Keeps one cycle's numeric metrics (the trainer's `{"loss": 0.3, ...}`).

        Numbers only (Python or numpy ints and floats, not bools); other values and the
        record's own fields (such as `policy_version`) are not metrics and are left out. A value
        that is not finite is kept as None: the curve shows a gap there, it is never filled.
        More than `MAX_RUN_METRICS` names in one run is a `ValueError`.
        """
        kept = {name: finite_or_none(value) for name, value in metrics.items()
                if is_metric(value) and name not in RunRecord.model_fields}
        names = self._metric_names | set(kept)
        if len(names) > MAX_RUN_METRICS:
            raise ValueError(f"more than {MAX_RUN_METRICS} metric names in one run "
                             f"({len(names)}); a run log keeps at most {MAX_RUN_METRICS}")
        self._metric_names = names
        self.cycle_metrics.append(kept)

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
        policy_version: int, notes: str = "", metrics: Mapping[str, float] | None = None,
    ) -> RunRecord:
        """The `RunRecord` of this finished run.

        Its curves are the metrics added per cycle; its `metrics` are `metrics` when given, else
        each curve's last value (left out when the last cycle reported none that is finite).
        """
        total_s = self.total_s  # raises unless the `with` block ran (which set started_at)
        assert self.started_at is not None
        names = list(dict.fromkeys(n for cycle in self.cycle_metrics for n in cycle))
        curves = {n: [cycle.get(n) for cycle in self.cycle_metrics] for n in names}
        if metrics is None:
            metrics = {n: values[-1] for n, values in curves.items() if values[-1] is not None}
        return RunRecord(
            run_id=run_id, config=config, rollout_s=self.seconds("rollout"),
            train_s=self.seconds("train"), total_s=total_s, n_steps=self.n_steps,
            n_episodes=self.n_episodes, batch_shape=tuple(batch_shape),
            policy_version=policy_version, notes=notes, started_at=self.started_at,
            metrics=dict(metrics), curves=curves,
        )


def finite_or_none(value: Any) -> float | None:
    """A number as a float, or None when it is not finite (NaN, ±inf, an int beyond float)."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def is_metric(value: Any) -> bool:
    """A number a run log keeps as a metric: a Python or numpy int or float, not a bool."""
    return (isinstance(value, (int, float, np.integer, np.floating))
            and not isinstance(value, (bool, np.bool_)))


class RunLog:
    """`runs.jsonl`: one `RunRecord` per line, appended whole, read back with line numbers."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(self, record: RunRecord) -> None:
        """Appends one record as one line, written with a single call.

        When the log ends in a partial line (a writer killed, a full disk), a newline goes
        first: the torn line stays alone (`scan` reports it) and this record stays whole.
        """
        line = orjson.dumps(record.model_dump(mode="json")) + b"\n"
        fd = open_for_append(self.path)
        try:
            if not ends_with_newline(fd):
                line = b"\n" + line
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def read(self) -> list[RunRecord]:
        """Every record; blank lines skipped; bad lines (torn ones too) raise one
        `ContractError` listing all."""
        records: list[RunRecord] = []
        torn, problems = self._fold(records.append)
        if torn or problems:
            raise ContractError(sorted(torn + problems, key=lambda p: p.line or 0))
        return records

    def scan(self) -> tuple[list[RunRecord], list[Problem]]:
        """Every good record, and the torn lines (not JSON: a writer cut off mid-line), skipped.

        Why: one append cut short by a kill or a full disk must not make the whole log
        unreadable. Any other bad line still raises one `ContractError` listing all of them.
        """
        records: list[RunRecord] = []
        return records, self.fold(records.append)

    def fold(self, add: Callable[[RunRecord], None]) -> list[Problem]:
        """`scan` without keeping the records: each good one is handed to `add` as it is read
        (a `Summary` keeps a few numbers per run, so a log of a million runs is summarized in
        bounded memory). Returns the torn lines; any other bad line raises as in `scan`."""
        torn, problems = self._fold(add)
        if problems:
            raise ContractError(problems)
        return torn

    def _fold(self, add: Callable[[RunRecord], None]) -> tuple[list[Problem], list[Problem]]:
        torn: list[Problem] = []
        problems: list[Problem] = []
        for number, line in self.numbered_lines():
            if not isinstance(line, bytes):
                problems.append(unparsed_problem(line).at_line(number))
                continue
            if not line.strip():
                continue
            record, line_problems = parse_run_line(line)
            found = [p.at_line(number) for p in line_problems]
            if found and found[0].got.startswith(TORN):
                torn += found
            else:
                problems += found
            if record is not None:
                add(record)
        return torn, problems

    def numbered_lines(self) -> Iterator[tuple[int, bytes | Overlong | Crowded]]:
        """(number, line) of each line, read in blocks (`io._lines.LineSource`), numbered as
        `bytes.splitlines` numbers them (a lone `\\r` ends a line too), never more than
        `MAX_RUN_LOG_BYTES` read, whatever `stat` says."""
        refuse_devices(self.path, "run log")
        number = 0
        try:
            with self.path.open("rb", buffering=0) as handle:
                info = os.fstat(handle.fileno())
                if info.st_size > MAX_RUN_LOG_BYTES:
                    raise InputError(f"run log file {self.path} is {info.st_size} bytes, more "
                                     f"than the limit of {MAX_RUN_LOG_BYTES} (MAX_RUN_LOG_BYTES)")
                source = LineSource(_Capped(handle, MAX_RUN_LOG_BYTES, self.path))
                for block in source:
                    for line in block:
                        for part in _split_cr(line):
                            number += 1
                            yield number, part
                if source.tail is not None:
                    for part in _split_cr(source.tail):
                        number += 1
                        yield number, part
        except OSError as exc:
            raise InputError(f"cannot read run log {self.path}: {exc.strerror or exc}") from exc


def _split_cr(line: bytes | Overlong | Crowded) -> list[bytes | Overlong | Crowded]:
    """A line split on `\\r` as well, as `bytes.splitlines` splits it."""
    if not isinstance(line, bytes) or b"\r" not in line:
        return [line]
    return [*line.splitlines()] or [b""]


class _Capped:
    """A binary handle that refuses to read beyond `limit` bytes (a pipe, a growing file)."""

    def __init__(self, handle: Any, limit: int, path: Path) -> None:
        self._handle, self._left, self._path = handle, limit + 1, path

    def read(self, size: int) -> bytes:
        block = self._handle.read(min(size, self._left)) if self._left > 0 else b""
        self._left -= len(block)
        if self._left <= 0:
            raise InputError(f"run log file {self._path} holds more than {MAX_RUN_LOG_BYTES} "
                             f"bytes, the limit (MAX_RUN_LOG_BYTES)")
        return block


def parse_run_line(line: bytes) -> tuple[RunRecord | None, list[Problem]]:
    """One JSONL line as a `RunRecord`, or the problems that stop it.

    Strict like a rollout line: a duplicate key or an integer beyond 64 bits is a problem, and
    `config` may nest at most `MAX_CONFIG_DEPTH` levels. A line that is not JSON is torn.
    """
    keys = None  # the line's own keys as written, counted on its bytes when there may be many
    if line.count(b":") > MAX_RUN_KEYS:
        counts = scan(line)
        if counts.top > MAX_RUN_KEYS:
            keys = counts.top
            if surely_json(line, counts):  # refused unparsed: no key is made
                return None, [_too_many_keys(keys)]
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        return None, [Problem("", "a JSON object", f"{TORN} ({e.msg})", "bad line")]
    if not isinstance(value, dict):
        return None, [Problem("", "a JSON object", describe(value), "bad line")]
    if keys is not None:  # one problem, not one per unknown key (bounded memory)
        return None, [_too_many_keys(keys)]
    for name in ("metrics", "curves"):
        if isinstance(value.get(name), dict) and len(value[name]) > MAX_RUN_METRICS:
            return None, [Problem(name, f"at most {MAX_RUN_METRICS} metrics",
                                  f"{len(value[name])} metrics", "too many metrics")]
    depth = _depth(value.get("config"))
    if depth > MAX_CONFIG_DEPTH:
        return None, [Problem("config", f"at most {MAX_CONFIG_DEPTH} nested levels",
                              f"{depth} levels", "config nested too deeply")]
    hidden = hidden_problems(line, value)
    if hidden:
        return None, hidden
    try:
        return RunRecord.model_validate(value), []
    except ValidationError as e:
        return None, [_problem(error) for error in e.errors()]


def _too_many_keys(keys: int) -> Problem:
    return Problem("", f"at most {MAX_RUN_KEYS} keys (a RunRecord has "
                       f"{len(RunRecord.model_fields)} fields)", f"{keys} keys", "too many keys")


def _depth(value: Any) -> int:
    """Nesting depth of lists and objects (0 for a scalar), without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        node, level = todo.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(
            node, list) else None
        if children is None:
            deepest = max(deepest, level)
            continue
        deepest = max(deepest, level + 1)
        if level + 1 <= MAX_CONFIG_DEPTH:
            todo += [(child, level + 1) for child in children]
    return deepest


def _problem(error: Any) -> Problem:
    path = ".".join(str(part) for part in error["loc"])
    name = str(error["loc"][0])
    if error["type"] == "missing":
        return Problem(path, _EXPECTED[name], "nothing", "missing field")
    if error["type"] == "extra_forbidden":
        return Problem(path, "a RunRecord field", describe(error["input"]), "unknown field")
    if error["type"] == "value_error":  # a check across values: its words say what it got
        return Problem(path, _EXPECTED[name], str(error["ctx"]["error"]), "bad value")
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

    def to_dict(self) -> dict[str, float]:
        return {"min": self.min, "median": self.median, "max": self.max}


@dataclass(frozen=True, slots=True)
class ConfigSummary:
    """One configuration's runs: how many, the spread of each timing in `SUMMARY_METRICS`, and
    the spread of the final value of each of the user's metrics.

    `metric_runs[name]` is how many of the runs have a final value of `name` (a run whose last
    cycle reported none that is finite, or that never reported it, does not count).
    """

    config: str
    runs: int
    n_steps: int
    spreads: dict[str, Spread]
    metrics: dict[str, Spread] = field(default_factory=dict)
    metric_runs: dict[str, int] = field(default_factory=dict)
    n_episodes: int = 0

    @property
    def label(self) -> str:
        """The configuration's name in tables and plots (`config_label`)."""
        return config_label(self.config)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config, "label": self.label, "runs": self.runs,
            "n_steps": self.n_steps,
            "n_episodes": self.n_episodes,
            **{name: s.to_dict() for name, s in self.spreads.items()},
            "metrics": {name: {**s.to_dict(), "runs": self.metric_runs[name]}
                        for name, s in self.metrics.items()},
        }


def summarize(records: Iterable[RunRecord]) -> list[ConfigSummary]:
    """Per configuration (in order of first appearance): min / median / max of times, steps/s
    and the final value of each of the user's metrics (in order of first appearance)."""
    summary = Summary()
    for record in records:
        summary.add(record)
    return summary.summaries()


class Summary:
    """`summarize`, one run at a time: per configuration, the runs' numbers that the summary
    spreads (8 bytes each, in arrays) and their sums, never the runs themselves. Why: a run log
    of a million runs is summarized in tens of megabytes (`RunLog.fold`), where holding every
    `RunRecord` took gigabytes."""

    def __init__(self) -> None:
        self.runs = 0
        self._configs: dict[str, _ConfigRuns] = {}

    def add(self, record: RunRecord) -> None:
        """Count one run."""
        self.runs += 1
        key = record.config_key
        runs = self._configs.get(key)
        if runs is None:
            runs = self._configs[key] = _ConfigRuns()
        runs.add(record)

    def summaries(self) -> list[ConfigSummary]:
        """One `ConfigSummary` per configuration, in order of first appearance."""
        return [runs.summary(key) for key, runs in self._configs.items()]


class _ConfigRuns:
    """The numbers of one configuration's runs that its `ConfigSummary` needs."""

    def __init__(self) -> None:
        self.runs = self.n_steps = self.n_episodes = 0
        self.spreads = {name: array("d") for name in SUMMARY_METRICS}
        self.finals: dict[str, array[float]] = {}  # the user's metrics, first appearance first

    def add(self, record: RunRecord) -> None:
        self.runs += 1
        self.n_steps += record.n_steps
        self.n_episodes += record.n_episodes
        for name in TIMES:
            self.spreads[name].append(getattr(record, name))
        self.spreads["steps_per_s"].append(record.n_steps / record.total_s)
        for name, value in record.metrics.items():
            values = self.finals.get(name)
            if values is None:
                values = self.finals[name] = array("d")
            values.append(value)

    def summary(self, key: str) -> ConfigSummary:
        return ConfigSummary(
            config=key, runs=self.runs, n_steps=self.n_steps, n_episodes=self.n_episodes,
            spreads={name: Spread.of(values) for name, values in self.spreads.items()},
            metrics={name: Spread.of(values) for name, values in self.finals.items()},
            metric_runs={name: len(values) for name, values in self.finals.items()},
        )


def format_summary(summaries: Sequence[ConfigSummary]) -> str:
    """An aligned text table: one row per configuration and metric (timings, then the user's).

    A user's metric that only some runs have says so: `loss (2 of 3 runs)`. A long
    configuration is named by its hash in the table and spelled out below it.
    """
    header = ("config", "runs", "metric", "min", "median", "max")
    rows: list[tuple[str, ...]] = []
    for s in summaries:
        named = [(name, spread, _number) for name, spread in s.spreads.items()]
        named += [(shown(name) if s.metric_runs[name] == s.runs
                   else f"{shown(name)} ({s.metric_runs[name]} of {s.runs} runs)", spread, _value)
                  for name, spread in s.metrics.items()]
        for i, (name, spread, show) in enumerate(named):
            first = i == 0
            rows.append((
                printable(s.label) if first else "", str(s.runs) if first else "", name,
                *(show(v) for v in (spread.min, spread.median, spread.max)),
            ))
    widths = [max(len(row[c]) for row in [header, *rows]) for c in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.rjust(w) if c >= 3 else cell.ljust(w)
            for c, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    lines += [printable(f"{s.label} = {shorten(s.config, MAX_MESSAGE_CHARS)}")
              for s in summaries if s.label != s.config]
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
    curve: str | None = None
    torn: list[Problem] = field(default_factory=list)

    @classmethod
    def of(cls, path: str | Path, records: Sequence[RunRecord], plot: str | None = None,
           torn: Sequence[Problem] = (), curve: str | None = None) -> RunsReport:
        """Summarize `records`, read from the run log at `path` (`torn`: lines skipped)."""
        return cls(path=str(path), runs=len(records), summaries=summarize(records), plot=plot,
                   curve=curve, torn=list(torn))

    @property
    def ok(self) -> bool:
        return True

    @property
    def warnings(self) -> list[Any]:
        """The torn lines skipped (`RunLog.scan`), as text."""
        return [str(p) for p in self.torn]

    def to_dict(self) -> dict[str, Any]:
        """Strict JSON: a value that overflows a float (a median of two huge times) is null."""
        return {"path": self.path, "runs": self.runs,
                "configs": [_finite(s.to_dict()) for s in self.summaries], "plot": self.plot,
                "curve": self.curve, "warnings": self.warnings}

    def to_text(self) -> str:
        """A heading line, then the per-configuration table (and the plot's path)."""
        noun = "configuration" if len(self.summaries) == 1 else "configurations"
        runs = "run" if self.runs == 1 else "runs"
        lines = [printable(f"{self.path}: {self.runs} {runs}, {len(self.summaries)} {noun}"), "",
                 format_summary(self.summaries)]
        if self.plot:
            lines += ["", f"plot: {self.plot}" + (f" (curve: {self.curve})" if self.curve else "")]
        if self.torn:
            lines += ["", f"skipped {len(self.torn)} torn line(s):"]
            lines += [f"  {w}" for w in self.warnings]
        return "\n".join(lines)


def _finite(value: Any) -> Any:
    """`value` with every non-finite float replaced by None (strict JSON has no Infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def _number(value: float) -> str:
    """Milliseconds resolution for times; large rates as whole numbers with separators."""
    if abs(value) < 1000:
        return f"{value:.3f}"
    return f"{value:,.0f}" if abs(value) < 1e15 else f"{value:.3g}"  # never a 300-digit cell


def _value(value: float) -> str:
    """A user's metric, whatever its scale: four significant digits."""
    return f"{value:.4g}"
