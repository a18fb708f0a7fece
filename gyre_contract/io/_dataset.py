"""A Ray Dataset of step records: validate it, or turn it into training batches (extra `ray`).

`validate_dataset(ds, model)` and `iter_train_batches(ds, field_map)` take a Dataset of step
records (e.g. `ray.data.read_parquet(paths, include_paths=True)`). Records are validated on the
workers with `map_batches` over columnar (pyarrow) batches; the episode rules, which need a
shard's steps in order, run where the results are gathered, shard by shard, through the same
`StepChecker` and `EpisodeAssembler` as a single file. Episode rules hold within a shard; an
episode id found in two shards is a problem of its own. ray and pyarrow are imported inside the
functions only.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from gyre_contract.core._errors import ContractError, InputError, Problem
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import RolloutStep, RolloutStepV1
from gyre_contract.core._validate import validate_step
from gyre_contract.io._assembly import EpisodeAssembler
from gyre_contract.io._checking import StepChecker
from gyre_contract.io._episodes import Episode
from gyre_contract.io._parquet import records_from_arrow
from gyre_contract.io._report import FieldStats, ProblemGroups
from gyre_contract.io._shards import ShardResult, ShardsReport, all_cpus_at_once, merge, shipped

# -- a Dataset of step records -------------------------------------------------------------------

def validate_dataset(
    ds: Any,
    model: type[RolloutStepV1] = RolloutStep,
    *,
    shard_column: str = "path",
    row_column: str | None = None,
    require_complete: bool = False,
    max_examples_per_group: int = 3,
    batch_size: int = 4096,
) -> ShardsReport:
    """Check a Ray Dataset of step records; one `FileReport` per shard, merged.

    Each record is validated on the workers (`map_batches` on pyarrow batches). The episode
    rules run as results arrive, per shard, in dataset order (order is preserved). A row's
    number is `row_column` when given, else its position within its shard (from 1) in
    dataset order. `shard_column` (what `include_paths=True` adds) names each row's shard.
    """
    shards: dict[str, _ShardAcc] = {}
    for shard, row, keys, step, problems in _checked_rows(ds, model, shard_column, row_column,
                                                          batch_size):
        acc = shards.get(shard)
        if acc is None:
            acc = shards[shard] = _ShardAcc(shard, model, max_examples_per_group)
        acc.add(row, keys, step, problems)
    if not shards:
        raise InputError("the dataset has no rows")
    results = [acc.finish(require_complete) for acc in shards.values()]
    return merge(f"dataset ({len(shards)} shards)", f"model {model.__name__}", results)


def _checked_rows(ds: Any, model: type[RolloutStepV1], shard_column: str,
                  row_column: str | None, batch_size: int
                  ) -> Iterator[tuple[Any, Any, dict[str, Any], Any, list[Problem] | None]]:
    """(shard, row or None, record keys, step or lost, problems or None) in dataset order.

    A record that failed validation comes with `lost`: its episode id and step, if it has them.
    """
    _require_columns(ds, [shard_column] + ([row_column] if row_column else []))
    checked = ds.map_batches(
        _validate_batch, batch_size=batch_size, batch_format="pyarrow", zero_copy_batch=True,
        fn_kwargs={"model": model, "shard_column": shard_column, "row_column": row_column})
    checked.context.execution_options.preserve_order = True
    all_cpus_at_once(checked)
    with shipped(model):
        for batch in checked.iter_batches(batch_size=None, batch_format="pyarrow"):
            for blob in batch.column("checked").to_pylist():
                yield from pickle.loads(blob)


def _require_columns(ds: Any, names: list[str]) -> None:
    have = ds.schema().names
    missing = [n for n in names if n not in have]
    if missing:
        raise InputError(f"the dataset has no column {', '.join(map(repr, missing))}; have "
                         f"[{', '.join(have)}] (read shards with include_paths=True, or pass "
                         f"shard_column=)")


def _validate_batch(batch: Any, *, model: type[RolloutStepV1], shard_column: str,
                    row_column: str | None) -> Any:
    """Ray worker: validate each record of a columnar batch; one pickled list per batch."""
    import pyarrow as pa

    shards = batch.column(shard_column).to_pylist()
    rows = batch.column(row_column).to_pylist() if row_column else [None] * batch.num_rows
    data = batch.drop_columns([c for c in (shard_column, row_column) if c])
    known = set(model_info(model).wires)
    out: list[tuple[Any, Any, dict[str, Any], Any, list[Problem] | None]] = []
    for shard, row, record in zip(shards, rows, records_from_arrow(data, model)):
        try:
            out.append((shard, row, _keys(record, known), validate_step(record, model), None))
        except ContractError as err:
            lost = {k: record[k] for k in ("episode_id", "step") if k in record}
            out.append((shard, row, _keys(record, known), lost, err.problems))
    return pa.table({"checked": pa.array([pickle.dumps(out)], pa.binary())})


def _keys(record: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """The record's keys for the field table; values kept only for keys the model lacks."""
    return {k: (None if k in known else v) for k, v in record.items()}


class _ShardAcc:
    """One shard's running stage-1 state: the `StepChecker` of `validate_file`, fed with rows
    checked on the workers."""

    def __init__(self, shard: str, model: type[RolloutStepV1], max_examples: int) -> None:
        self.shard = shard
        self.checker = StepChecker(model, ProblemGroups(max_examples), FieldStats(model))
        self.rows = 0
        self.ids: dict[str, int] = {}

    def add(self, row: int | None, keys: dict[str, Any], step: Any,
            problems: list[Problem] | None) -> None:
        """One checked row: a valid step, or (problems given) the `lost` part of a bad record."""
        self.rows += 1
        row = self.rows if row is None else row
        if problems is None:
            self.ids.setdefault(step.episode_id, row)
        self.checker.checked(row, keys, step, problems)

    def finish(self, require_complete: bool) -> ShardResult:
        self.checker.finish(require_complete)
        report = self.checker.report(path=self.shard, lines=self.rows,
                                     require_complete=require_complete)
        return ShardResult(report, self.ids)


# -- training batches from a Dataset -------------------------------------------------------------

def iter_train_batches(
    ds: Any,
    field_map: Any,
    model: type[RolloutStepV1] = RolloutStep,
    *,
    shard_column: str = "path",
    row_column: str | None = None,
    episodes_per_batch: int = 32,
    include_open: bool = True,
    max_len: int | None = None,
    current_version: int | None = None,
    max_staleness: int | None = None,
    batch_size: int = 4096,
) -> Iterator[Any]:
    """Yield validated `TrainBatch`es built by `field_map.to_train_batch` from whole episodes.

    Records are validated on the Ray workers; episodes are assembled per shard in dataset order
    and a batch never mixes shards. A batch is yielded as soon as a shard has
    `episodes_per_batch` finished episodes; each shard's remainder (and, with `include_open`,
    its open episodes: the map then needs their `next_value` or an explicit
    `"truncation": "terminal"`) follows at the end. The first invalid record or broken episode
    rule raises ContractError naming the shard and row, before any batch holding its episode.
    """
    if episodes_per_batch < 1:
        raise ValueError(f"episodes_per_batch must be at least 1, got {episodes_per_batch}")
    shards: dict[str, tuple[StepChecker, EpisodeAssembler]] = {}
    done: dict[str, list[Episode]] = {}
    positions: dict[str, int] = {}
    options = {"max_len": max_len, "current_version": current_version,
               "max_staleness": max_staleness}
    for shard, row, keys, step, problems in _checked_rows(ds, model, shard_column, row_column,
                                                          batch_size):
        positions[shard] = positions.get(shard, 0) + 1
        row = positions[shard] if row is None else row
        if shard not in shards:
            shards[shard] = (StepChecker(model), EpisodeAssembler(model))
        checker, episodes = shards[shard]
        try:
            found = checker.checked(row, keys, step, problems)
        except ContractError as err:
            raise _in_shard(shard, err.problems) from None
        episode = episodes.add(*found) if found is not None else None
        if episode is not None:
            finished = done.setdefault(shard, [])
            finished.append(episode)
            if len(finished) == episodes_per_batch:
                yield field_map.to_train_batch(finished, **options)
                done[shard] = []
    for shard, (_, episodes) in shards.items():
        rest = done.get(shard, []) + (episodes.rest() if include_open else [])
        for start in range(0, len(rest), episodes_per_batch):
            yield field_map.to_train_batch(rest[start:start + episodes_per_batch], **options)


def _in_shard(shard: str, problems: list[Problem]) -> ContractError:
    """The problems of one shard, with the shard file at the front of each path."""
    return ContractError([replace(p, path=f"{shard}: {p.path}" if p.path else shard)
                          for p in problems])
