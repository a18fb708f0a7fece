"""Stage checks: the half way (stage 2) and, below it, the full loop (stage 3).

Stage 2 proves the handoff without training: rollouts → field map → collated `[B, T, ...]`
batch → validated `TrainBatch` → the user's loss, called once, with no parameter update.

Every result is a `Report` (gyre_contract/core/_report.py). A stage that fails raises
`ContractError` instead of returning, so a report that exists always holds (`ok` is True).
Model arguments follow one rule: `model=` is the rollout-step model, `batch_model=` the
batch model; `trainer=` is instead a trainer's own batch schema (any JSON Schema, with
`batch_dims=` when it names none), so a trainer runs on its own keys, unchanged.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from gyre_contract.core._errors import ContractError, MissingFieldError, Problem
from gyre_contract.core._report import Report
from gyre_contract.core._text import shorten
from gyre_contract.core._validate import staleness_problems
from gyre_contract.harness._channelloop import CHANNEL_CHECKS, ChannelLeg
from gyre_contract.harness._channelloop import batch_shape as channel_batch_shape
from gyre_contract.harness._losscall import LossFn, call_loss, check_container, in_container
from gyre_contract.harness._runlog import Phase, RunLog, RunRecord, RunTimer
from gyre_contract.io._reading import episodes_from_records
from gyre_contract.schema._fieldtable import SchemaInput
from gyre_contract.trainer._batching import build_batch, resolve_trainer
from gyre_contract.trainer._fieldmap import FieldMap, as_field_map
from gyre_contract.trainer._inspection import Inspection, format_table, inspect_batch
from gyre_contract.trainer._rowstats import RowStats
from gyre_contract.trainer._trainerbatch import TrainerSchema


@dataclass
class HalfWayReport(Report):
    """What stage 2 saw: the batch's keys, shapes and dtypes, its size, and the loss.

    `half_way` raises on a broken contract, so a report always holds (`ok` is True).
    """

    fields: Inspection
    rows: int
    time_steps: int
    steps: int
    episodes: int
    policy_versions: list[int]
    loss: float | None
    seconds: dict[str, float]
    batch: dict[str, Any] = field(repr=False)
    trainer: str | None = None
    tokens: RowStats | None = None
    """For token rows (`TokenRows`): their sizes, staleness and warnings."""

    @property
    def warnings(self) -> list[Any]:
        return list(self.tokens.warnings) if self.tokens is not None else []

    @property
    def padding(self) -> float:
        """The fraction of the collated `[B, T]` batch that is padding (not data)."""
        cells = self.rows * self.time_steps
        return 1.0 - self.steps / cells if cells else 0.0

    @property
    def ok(self) -> bool:
        return True

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the arrays themselves are left out)."""
        return {
            "stage": "half_way",
            "ok": self.ok,
            "fields": {shorten(k): {"type": v.type_name, "shape": list(v.shape or ()),
                                    "dtype": v.dtype} for k, v in self.fields.items()},
            "rows": self.rows,
            "time_steps": self.time_steps,
            "steps": self.steps,
            "episodes": self.episodes,
            "padding": self.padding,
            "trainer": self.trainer,
            "policy_versions": self.policy_versions,
            "loss": self.loss,
            "seconds": self.seconds,
            **({"tokens": self.tokens.to_dict()} if self.tokens is not None else {}),
        }

    def to_text(self) -> str:
        """The batch's table of fields, its size and the loss."""
        versions = self.policy_versions
        span = (f"{versions[0]}..{versions[-1]}" if len(versions) > 1 else
                str(versions[0]) if versions else "not recorded")
        loss = "not computed (no loss function given)" if self.loss is None else (
            f"{self.loss:.6g} (one call, no update)")
        what = f"a valid {self.tokens.batch_name if self.tokens else 'TrainBatch'}" \
            if self.trainer is None \
            else f"valid against the trainer schema {self.trainer}"
        return "\n".join([
            f"stage 2 (half way): the batch is {what}",
            format_table(self.fields),
            f"B={self.rows} rows (one per step) from {self.episodes} episodes, policy versions "
            f"{span}" if self.tokens is not None else
            f"B={self.rows} rows from {self.episodes} episodes, T={self.time_steps}, "
            f"{self.steps} real steps of {self.rows * self.time_steps} "
            f"({self.padding:.1%} padding), policy versions {span}",
            f"loss: {loss}",
            *([self.tokens.to_text()] if self.tokens is not None else []),
        ])


@dataclass
class BatchReport(Report):
    """What `gyre-contract batch` reports: stage 2's report (`stage`) and the `.npz` written, if any."""

    stage: HalfWayReport
    output: str | None = None

    @property
    def ok(self) -> bool:
        return self.stage.ok

    @property
    def warnings(self) -> list[Any]:
        return self.stage.warnings

    @property
    def batch(self) -> dict[str, Any]:
        """The validated batch (a dict of numpy arrays keyed by the contract's names)."""
        return self.stage.batch

    def to_dict(self) -> dict[str, Any]:
        """Stage 2's summary, plus `output` when the batch was written."""
        data = self.stage.to_dict()
        if self.output is not None:
            data["output"] = self.output
        return data

    def to_text(self) -> str:
        text = self.stage.to_text()
        return text if self.output is None else f"{text}\nwrote {self.output}"


def half_way(
    episodes_or_path: Iterable[Any] | str | os.PathLike[str],
    field_map: FieldMap | Mapping[str, Any] | str | os.PathLike[str],
    loss_fn: LossFn | None = None,
    *,
    max_len: int | None = None,
    current_version: int | None = None,
    max_staleness: int | None = None,
    model: Any = None,
    batch_model: Any = None,
    trainer: SchemaInput | TrainerSchema | None = None,
    batch_dims: tuple[str, ...] | str | None = None,
    container: str = "numpy",
) -> HalfWayReport:
    """Stage 2: map, collate, validate, then call `loss_fn(batch)` once with no update.

    The batch is built as `FieldMap.batch` builds it (`trainer._batching.build_batch`, one path):
    `episodes_or_path` is a rollout file (read with `read_episodes(path, model)`, `model`
    defaulting to `RolloutStep`), episodes already read, or step records (validated as
    `model`); the batch is validated as `batch_model` (default `TrainBatch`).
    The map's row layout decides the rest: with token rows (`TokenRows`) a file is read step by
    step in file order (`read_steps`, `model` defaulting to `LLMStep`), steps or episodes may be
    given, and the batch is a `TokenBatch` by default; the report's `tokens` gives the staleness
    of every row.
    With `trainer=` (a JSON Schema path or dict, ours or foreign; `batch_dims=` when neither it
    (`x-gyre-batch-dims`) nor the map (`"batch_dims"`, written by the diff) names them) the
    batch is checked against that schema instead and keyed by its
    names, nested ones joined with `.` (see `trainer_schema`). Raises ContractError when the
    batch breaks docs/contract.md §4 or the trainer schema (a missing field, a wrong shape or
    dtype, stale policy versions), when `loss_fn` raises, or when the loss is not one finite
    number; SchemaError when the trainer schema cannot describe a batch.
    `container` is what `loss_fn` gets: `"numpy"` (the dict of arrays), `"torch"`,
    `"tensordict"` or `"dataproto"` (`gyre_contract.adapters`; the report keeps the arrays).
    """
    if max_staleness is not None and max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    check_container(container)
    fmap = _field_map(field_map)
    built = build_batch(fmap, episodes_or_path, trainer=trainer, batch_dims=batch_dims,
                        model=model, batch_model=batch_model, max_len=max_len,
                        current_version=current_version, max_staleness=max_staleness)
    batch, columns = built.batch, built.columns
    validated = time.perf_counter()
    dims = built.schema.batch_dims if built.schema is not None else None
    loss = None if loss_fn is None else call_loss(loss_fn, batch, container, dims)
    done = time.perf_counter()
    mask = fmap.layout.row_mask(columns)
    versions = sorted({int(v) for v in np.asarray(columns.get("policy_version", [])).tolist()})
    return HalfWayReport(
        fields=inspect_batch(batch),
        rows=int(mask.shape[0]),
        time_steps=int(mask.shape[1]),
        steps=int(mask.sum()),
        episodes=built.episodes,
        policy_versions=versions,
        loss=loss,
        seconds={**built.seconds, "loss": done - validated},
        batch=batch,
        trainer=None if built.schema is None else built.schema.name,
        tokens=fmap.layout.stats(columns, current_version),
    )


def _field_map(field_map: FieldMap | Mapping[str, Any] | str | os.PathLike[str]) -> FieldMap:
    return as_field_map(field_map)


# -- stage 3: full loop -----------------------------------------------------------------------

SampleFn = Callable[[int], Iterable[Any]]
"""`sample_fn(policy_version) -> episodes`: roll out with the weights of that version."""

TrainFn = Callable[[dict[str, Any]], "Mapping[str, Any] | None"]
"""`train_fn(batch) -> metrics`: one update on the validated batch, a dict of numpy arrays keyed
by the contract's names (as `loss_fn` gets it in `half_way`)."""


@dataclass(frozen=True)
class CycleReport(Report):
    """One sample → map → train cycle: what went in, how long each phase took, what came out."""

    cycle: int
    policy_version: int
    n_steps: int
    n_episodes: int
    n_ended: int
    batch_shape: tuple[int, int]
    rollout_s: float
    train_s: float
    metrics: dict[str, Any]
    tokens: RowStats | None = None
    """For token rows: their sizes, the staleness of every row, group warnings."""
    channel: dict[str, Any] | None = None
    """Through a channel: the delivery's facts (segments, steps, staleness of its rows)."""

    @property
    def ok(self) -> bool:
        return True

    @property
    def warnings(self) -> list[Any]:
        return list(self.tokens.warnings) if self.tokens is not None else []

    @property
    def staleness(self) -> list[int]:
        """The staleness of the batch's rows (token rows, or a channel's delivery)."""
        if self.tokens is not None:
            return list(self.tokens.staleness)
        if self.channel is not None:
            return [int(k) for k, n in self.channel["staleness"].items() for _ in range(n)]
        return []

    def to_text(self) -> str:
        """One line: the cycle, its version, what it sampled and how long each phase took."""
        return (f"cycle {self.cycle}: policy version {self.policy_version}, {self.n_episodes} "
                f"episodes ({self.n_ended} ended), {self.n_steps} steps, batch "
                f"{'x'.join(map(str, self.batch_shape))}, rollout {self.rollout_s:.3f} s, "
                f"train {self.train_s:.3f} s")

    def to_dict(self) -> dict[str, Any]:
        return {
            "cycle": self.cycle, "policy_version": self.policy_version, "n_steps": self.n_steps,
            "n_episodes": self.n_episodes, "n_ended": self.n_ended,
            "batch_shape": list(self.batch_shape), "rollout_s": self.rollout_s,
            "train_s": self.train_s, "metrics": self.metrics,
            **({"tokens": self.tokens.to_dict()} if self.tokens is not None else {}),
            **({"channel": self.channel} if self.channel is not None else {}),
        }


@dataclass(frozen=True)
class LoopReport(Report):
    """Stage 3's result: every cycle, the final policy version, and the run's `RunRecord`.

    `full_loop` raises on the first failed check, so a report always holds (`ok` is True).
    """

    cycles: list[CycleReport]
    policy_version: int
    run: RunRecord
    checks: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return True

    @property
    def n_steps(self) -> int:
        return sum(c.n_steps for c in self.cycles)

    @property
    def n_episodes(self) -> int:
        return sum(c.n_episodes for c in self.cycles)

    def to_text(self) -> str:
        """A cycle table, then the checks that held."""
        names = sorted({k for c in self.cycles for k, v in c.metrics.items()
                        if isinstance(v, (int, float)) and not isinstance(v, bool)})
        header = ("cycle", "version", "episodes", "steps", "batch", "rollout_s", "train_s",
                  *names)
        rows = [header] + [
            (str(c.cycle), str(c.policy_version), str(c.n_episodes), str(c.n_steps),
             "x".join(map(str, c.batch_shape)), f"{c.rollout_s:.3f}", f"{c.train_s:.3f}",
             *(_metric_text(c.metrics.get(k)) for k in names))
            for c in self.cycles
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        table = ["  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True))
                 for r in rows]
        return "\n".join([
            f"stage 3 (full loop): {len(self.cycles)} cycles, {self.n_steps} steps, "
            f"{self.n_episodes} episodes, policy version {self.policy_version}",
            *table,
            *(f"ok: {check}" for check in self.checks),
        ])

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": "full_loop", "ok": self.ok,
            "cycles": [c.to_dict() for c in self.cycles], "policy_version": self.policy_version,
            "n_steps": self.n_steps, "n_episodes": self.n_episodes, "checks": list(self.checks),
            "run": self.run.model_dump(mode="json"),
        }


FULL_LOOP_CHECKS = (
    "every cycle ran to the end",
    "n_steps sampled == mask.sum() of the batch",
    "episodes sampled == distinct episode ids in the batch",
    "rollout start <= rollout end <= train start <= train end, cycle after cycle",
    "policy_version advanced by 1 with each update",
    "no batch row older than current - max_staleness (the stale episode is named)",
)
"""What `full_loop` checks, in words (for reports)."""


def full_loop(
    sample_fn: SampleFn | None,
    train_fn: TrainFn,
    field_map: FieldMap | Mapping[str, Any] | str | os.PathLike[str],
    cycles: int,
    max_staleness: int = 0,
    *,
    start_version: int = 0,
    max_len: int | None = None,
    run_id: str = "full-loop",
    config: str | dict[str, Any] = "full_loop",
    run_log: RunLog | str | os.PathLike[str] | None = None,
    notes: str = "",
    clock: Callable[[], float] = time.perf_counter,
    model: Any = None,
    batch_model: Any = None,
    trainer: SchemaInput | TrainerSchema | None = None,
    batch_dims: tuple[str, ...] | str | None = None,
    container: str = "numpy",
    channel: Any = None,
    rows: int | None = None,
    channel_timeout: float | None = 60.0,
) -> LoopReport:
    """Stage 3: `cycles` rounds of sample → map → collate → validate → train, timed and checked.

    Each cycle calls `sample_fn(version)` under the rollout timer. It returns episodes
    (`Episode` objects or mappings of columns) or step records (§3 dicts, validated and grouped
    here as `model`, default `RolloutStep`). Then, under the train timer, the field map builds
    the batch, validated as `batch_model` (default `TrainBatch`) or against `trainer=` (a
    trainer's own schema, keyed by its names, as in `half_way`), and `train_fn(batch)` runs.
    One `train_fn` call is one update: the version goes up by 1 (when the returned metrics
    hold `policy_version`, it must be exactly that). The first
    failed check raises `ContractError` naming the cycle; the loop never trains on a batch that
    failed. `train_fn` gets the batch in `container` (`"numpy"`, `"torch"`, `"tensordict"`,
    `"dataproto"`: see `half_way`). The run's `RunRecord` is appended to `run_log` when one is
    given; its `notes` say how the batch was made, from the map (`FieldMap.describe`), then the
    caller's `notes`.

    With `channel=` (a channel URI, or a `TrainerEnd` already open; docs/channel.md) the steps
    go through a channel: `sample_fn`'s step records are put by a sampler end and the batch is
    what the trainer end delivers (the trainer's own keys; stale rows refused), acked after
    `train_fn`, and the new version published. With `sample_fn=None` another process is the
    sampler: each cycle takes `rows` steps. Both ends' counts are run-log metrics per cycle
    (`channel.sampler.*`, `channel.trainer.*`) and must agree at the end.
    """
    if cycles < 1:
        raise ValueError(f"cycles must be >= 1, got {cycles}")
    if max_staleness < 0:
        raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
    check_container(container)
    # a FieldMap, or a stand-in with its methods (a test's map that loses an episode)
    fmap = cast(FieldMap, field_map) if hasattr(field_map, "to_train_batch") else \
        _field_map(field_map)
    if channel is not None:
        return _channel_loop(sample_fn, train_fn, fmap, cycles, max_staleness,
                             ChannelLeg.open(channel, fmap, trainer, batch_dims,
                                             model or fmap.layout.step_model,
                                             sampling=sample_fn is not None,
                                             timeout=channel_timeout),
                             rows=rows, start_version=start_version, run_id=run_id,
                             config=config, run_log=run_log, notes=notes, clock=clock,
                             container=container)
    if sample_fn is None:
        raise ValueError("sample_fn=None needs channel= (another process samples)")
    schema = resolve_trainer(fmap, trainer, batch_dims, batch_model)
    dims = schema.batch_dims if schema is not None else None
    version = start_version
    reports: list[CycleReport] = []
    batch_shape: tuple[int, int] = (0, 0)
    with RunTimer(clock=clock) as timer:
        for cycle in range(cycles):
            with timer.rollout():
                episodes = _as_episodes(list(sample_fn(version)), model or fmap.layout.step_model)
            counts = _episode_counts(episodes, cycle)
            timer.count(steps=counts.n_steps, episodes=counts.n_ended)
            with timer.train():
                if schema is None:
                    batch = fmap.to_train_batch(episodes, max_len=max_len, batch_model=batch_model)
                    columns = batch.model_dump(by_alias=True, exclude_none=True, round_trip=True)
                else:
                    columns = fmap.collated(episodes, max_len=max_len)
                    batch = fmap.layout.row_keys(columns)
                _check_batch(batch, fmap.layout.row_mask(columns), counts, version,
                             max_staleness, cycle)
                arrays = columns if schema is None else schema.check(
                    fmap.apply(columns), columns.get("mask"), rows=fmap.layout,
                    episode_id=columns.get("episode_id"))
                metrics = _metrics(train_fn(in_container(arrays, container, dims)))
            timer.add_metrics(metrics)
            version = _next_version(metrics, version, cycle)
            rollout, train = timer.phases[-2:]
            _check_order(rollout, train, timer.phases[-3] if cycle else None, cycle)
            tokens = fmap.layout.stats(columns, version - 1)
            batch_shape = fmap.layout.shape(columns)
            reports.append(CycleReport(
                cycle=cycle, policy_version=version - 1, n_steps=counts.n_steps,
                n_episodes=counts.n_episodes, n_ended=counts.n_ended, batch_shape=batch_shape,
                rollout_s=rollout.seconds, train_s=train.seconds, metrics=metrics, tokens=tokens,
            ))
    run = timer.record(run_id=run_id, config=config, batch_shape=batch_shape,
                       policy_version=version, notes=run_notes(fmap, notes))
    if run_log is not None:
        (run_log if isinstance(run_log, RunLog) else RunLog(run_log)).append(run)
    return LoopReport(cycles=reports, policy_version=version, run=run, checks=FULL_LOOP_CHECKS)


def _channel_loop(sample_fn: SampleFn | None, train_fn: TrainFn, fmap: Any, cycles: int,
                  max_staleness: int, leg: ChannelLeg, *, rows: int | None,
                  start_version: int, run_id: str, config: str | dict[str, Any],
                  run_log: RunLog | str | os.PathLike[str] | None, notes: str,
                  clock: Callable[[], float], container: str = "numpy") -> LoopReport:
    """`full_loop` through a channel (`channel=`): see `harness._channelloop`. `train_fn` gets
    the delivered batch in `container` (a TensorDict's batch size inferred from the arrays)."""
    if sample_fn is None and (rows is None or rows < 1):
        raise ValueError("with sample_fn=None, give rows= (the steps each cycle trains on)")
    version = start_version
    reports: list[CycleReport] = []
    batch_shape: tuple[int, int] = (0, 0)
    wanted = rows or 0  # the steps to take: a cycle's put when this process samples
    delivery: Any = None
    try:
        with RunTimer(clock=clock) as timer:
            for cycle in range(cycles):
                with timer.rollout():
                    if sample_fn is not None:
                        wanted = leg.put(list(sample_fn(version)), cycle).steps
                    else:
                        delivery = leg.take(rows or 0, version, max_staleness, cycle)
                with timer.train():
                    if sample_fn is not None:
                        delivery = leg.take(wanted, version, max_staleness, cycle)
                    leg.check(delivery, cycle)
                    metrics = _metrics(train_fn(in_container(delivery.batch, container)))
                    version = _next_version(metrics, version, cycle)
                    leg.commit(delivery, version)
                timer.count(steps=delivery.steps, episodes=delivery.ended)
                timer.add_metrics({**metrics, **leg.metrics()})
                rollout, train = timer.phases[-2:]
                _check_order(rollout, train, timer.phases[-3] if cycle else None, cycle)
                batch_shape = channel_batch_shape(delivery)
                reports.append(CycleReport(
                    cycle=cycle, policy_version=version - 1, n_steps=delivery.steps,
                    n_episodes=delivery.episodes, n_ended=delivery.ended,
                    batch_shape=batch_shape, rollout_s=rollout.seconds, train_s=train.seconds,
                    metrics=metrics, channel=delivery.to_dict()))
            leg.check_counts()
    finally:
        leg.close()
    run = timer.record(run_id=run_id, config=config, batch_shape=batch_shape,
                       policy_version=version,
                       notes=run_notes(fmap, f"through the channel {leg.trainer.uri}; {notes}"))
    if run_log is not None:
        (run_log if isinstance(run_log, RunLog) else RunLog(run_log)).append(run)
    return LoopReport(cycles=reports, policy_version=version, run=run,
                      checks=(*FULL_LOOP_CHECKS, *CHANNEL_CHECKS))


def run_notes(field_map: Any, notes: str = "") -> str:
    """A run record's notes: how the map made the batch, then what the user adds, "; "-joined."""
    describe = getattr(field_map, "describe", None)
    made = describe() if callable(describe) else ""
    return "; ".join(part for part in (made, notes.strip()) if part)


def _metric_text(value: Any) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.4g}"


@dataclass(frozen=True, slots=True)
class _Counts:
    """What one cycle sampled: steps, episodes (ids), and how many of them ended."""

    n_steps: int
    episode_ids: tuple[str, ...]
    n_ended: int

    @property
    def n_episodes(self) -> int:
        return len(self.episode_ids)


def _episode_counts(episodes: list[Any], cycle: int) -> _Counts:
    if not episodes:
        raise ContractError(Problem(f"cycles[{cycle}].sample", "at least one episode", "none",
                                    "sample_fn returned no episodes"))
    steps, ids, ended = 0, [], 0
    for episode in episodes:
        columns, episode_id = _columns_and_id(episode)
        for name in ("reward", "terminated", "truncated"):
            if name not in columns:
                raise MissingFieldError(name, columns)
        steps += len(columns["reward"])
        ids.append(episode_id)
        ended += bool(columns["terminated"][-1] or columns["truncated"][-1])
    if len(set(ids)) != len(ids):
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        raise ContractError(Problem(f"cycles[{cycle}].sample", "each episode once",
                                    f"repeated ids {repeated}", "episode sampled twice"))
    return _Counts(steps, tuple(ids), ended)


def _as_episodes(items: list[Any], model: Any) -> list[Any]:
    """Step records (a str `episode_id` per item) become episodes; episodes pass through."""
    if items and isinstance(items[0], Mapping) and isinstance(items[0].get("episode_id"), str):
        return episodes_from_records(items, model)
    return items


def _columns_and_id(episode: Any) -> tuple[Mapping[str, Any], str]:
    """An `Episode` (`.columns`, `.episode_id`) or a mapping of columns with `episode_id`."""
    if isinstance(episode, Mapping):
        if "episode_id" not in episode:
            raise MissingFieldError("episode_id", episode)
        return episode, str(np.asarray(episode["episode_id"]).reshape(-1)[0])
    return episode.columns, str(episode.episode_id)


def _check_batch(batch: Any, mask: Any, counts: _Counts, version: int, max_staleness: int,
                 cycle: int) -> None:
    """The loop's checks of one cycle's batch (`mask`: its `[B, T]` real steps, as the map's
    layout counts them)."""
    where = f"cycles[{cycle}]"
    problems: list[Problem] = []
    n_mask = int(np.asarray(mask).sum())
    if n_mask != counts.n_steps:
        problems.append(Problem(f"{where}.mask", f"{counts.n_steps} real steps (as sampled)",
                                f"{n_mask}", "mask count differs from the steps sampled"))
    if batch.episode_id is not None:
        in_batch = set(np.asarray(batch.episode_id).tolist())
        sampled = set(counts.episode_ids)
        if in_batch != sampled:
            lost, extra = sorted(sampled - in_batch), sorted(in_batch - sampled)
            problems.append(Problem(
                f"{where}.episode_id", f"the {len(sampled)} episodes sampled",
                f"{len(in_batch)} (missing {lost}, not sampled {extra})",
                "episodes in the batch differ from the episodes sampled"))
    problems += [p.under(where) for p in staleness_problems(batch, version, max_staleness)]
    if problems:
        raise ContractError(problems)


def _metrics(result: Any) -> dict[str, Any]:
    """`train_fn`'s metrics: a mapping, or None for none."""
    if result is None:
        return {}
    if not isinstance(result, Mapping):
        raise TypeError(f"train_fn must return a mapping of metrics or None, got "
                        f"{type(result).__name__}")
    return dict(result)


def _next_version(metrics: Mapping[str, Any], version: int, cycle: int) -> int:
    if "policy_version" in metrics and metrics["policy_version"] != version + 1:
        raise ContractError(Problem(
            f"cycles[{cycle}].policy_version", f"{version + 1} (one update after {version})",
            repr(metrics["policy_version"]), "policy_version did not advance by one update"))
    return version + 1


def _check_order(rollout: Phase, train: Phase, previous: Phase | None, cycle: int) -> None:
    stamps = [("rollout start", rollout.start), ("rollout end", rollout.end),
              ("train start", train.start), ("train end", train.end)]
    if previous is not None:
        stamps.insert(0, ("previous train end", previous.end))
    for (name_a, a), (name_b, b) in zip(stamps, stamps[1:], strict=False):
        if a > b:
            raise ContractError(Problem(
                f"cycles[{cycle}].timestamps", f"{name_a} <= {name_b}",
                f"{name_a} {a!r} > {name_b} {b!r}", "timestamps out of order"))
