"""One path from rollouts to the trainer's batch: read, collate, map, validate.

`build_batch(field_map, source, ...)` is what `FieldMap.batch`, `half_way` and so
`gyre-contract batch` run, so the arrays in memory are the arrays `batch -o` writes. `source` is
a rollout file (JSON Lines or Parquet, read again on every call), episodes, or step records
(dicts or step models, validated here as `model` in the order given: the checks of a file).
A list can be passed again; an iterator (what `read_episodes` and `read_steps` return: they
stream a file, holding one episode or one line at a time) is consumed by the call, and one
that yields nothing is refused rather than built into an empty batch.

The trainer schema's batch dims come from, in order: `batch_dims=`, the schema's own
`x-gyre-batch-dims`, the dims the map records (`"batch_dims"`, written by `diff --write-map`).
A map and a schema that name different dims are refused: the map was written for another layout.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel

from gyre_contract.core._errors import ContractError, SchemaError
from gyre_contract.core._validate import staleness_problems, validate_batch
from gyre_contract.schema._fieldtable import FieldTable, SchemaInput, as_table, shape_text
from gyre_contract.trainer._layouts import RowLayout
from gyre_contract.trainer._trainerbatch import TrainerSchema, flatten_batch, trainer_schema

Source = Iterable[Any] | str | os.PathLike[str]
"""What a batch is built from: a rollout file, episodes, or step records."""


class MapLike(Protocol):
    """What building needs of a field map (`FieldMap`; typed here so that the map's module can
    call this one without a cycle)."""

    source: str
    layout: RowLayout

    @property
    def batch_model(self) -> Any:
        ...

    def collated(self, episodes: Iterable[Any], *, max_len: int | None = None) -> dict[str, Any]:
        ...

    def collated_file(self, path: str | os.PathLike[str], model: Any, *,
                      max_len: int | None = None) -> tuple[dict[str, Any], int] | None:
        ...

    def apply(self, columns: Mapping[str, Any]) -> dict[str, Any]:
        ...


@dataclass
class Built:
    """A batch built and validated: what the trainer gets, and what reports count."""

    batch: dict[str, Any]
    """The validated batch: a batch model's fields (modalities as nested dicts), or the trainer
    schema's keys (nested names joined with `.`)."""
    columns: dict[str, Any]
    """The collated columns the map ran on (`mask`, `episode_id`, `policy_version`, ...)."""
    episodes: int
    schema: TrainerSchema | None
    seconds: dict[str, float]
    """`read_and_build` and `validate`, in seconds."""

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The batch as flat arrays, nested names joined with `.`: what `batch -o` writes."""
        return flatten_batch(self.batch)


def build_batch(
    field_map: MapLike,
    source: Source,
    *,
    trainer: SchemaInput | TrainerSchema | None = None,
    batch_dims: tuple[str, ...] | list[str] | str | None = None,
    model: Any = None,
    batch_model: Any = None,
    max_len: int | None = None,
    current_version: int | None = None,
    max_staleness: int | None = None,
) -> Built:
    """Read `source`, collate what the map reads, apply the map, validate the result as
    `batch_model` (default the map's: `TrainBatch`, or `TokenBatch` for token rows) or against
    `trainer` (a trainer's own schema). Raises ContractError when the batch breaks the contract
    or the trainer schema, SchemaError when the schema cannot describe a batch."""
    clock = time.perf_counter()
    schema = resolve_trainer(field_map, trainer, batch_dims, batch_model)
    columns, n_episodes = collated(field_map, source, model, max_len)
    arrays = field_map.apply(columns)
    built = time.perf_counter()
    if schema is None:
        validated = validate_batch(arrays, batch_model or field_map.batch_model,
                                   current_version=current_version, max_staleness=max_staleness)
        batch = validated.model_dump(by_alias=True, exclude_none=True, round_trip=True)
    else:
        batch = schema.check(arrays, columns.get("mask"), rows=field_map.layout,
                             episode_id=columns.get("episode_id"))
        if max_staleness is not None:
            stale = staleness_problems(field_map.layout.row_keys(columns), current_version,
                                       max_staleness)
            if stale:
                raise ContractError(stale)
    return Built(batch, columns, n_episodes, schema,
                 {"read_and_build": built - clock, "validate": time.perf_counter() - built})


def resolve_trainer(field_map: MapLike, trainer: SchemaInput | TrainerSchema | None,
                    batch_dims: Any, batch_model: Any = None) -> TrainerSchema | None:
    """The trainer schema to check against (its batch dims settled, see the module doc), or
    None for a batch model."""
    if trainer is None:
        if batch_dims is not None:
            raise ValueError("batch_dims= goes with trainer=, the trainer's schema")
        return None
    if batch_model is not None:
        raise ValueError("give trainer= (a trainer's schema) or batch_model=, not both")
    recorded = field_map.layout.batch_dims
    if batch_dims is not None or recorded is None:
        return trainer_schema(trainer, batch_dims)
    table: FieldTable = trainer.table if isinstance(trainer, TrainerSchema) else as_table(trainer)
    own = tuple(table.batch_dims) if table.batch_dims else None
    if own is not None and own != recorded:
        name = table.name or table.title or "the trainer schema"
        raise SchemaError(f"{field_map.source} was written for batch dims "
                          f"{shape_text(recorded)}, but {name} names "
                          f"{shape_text(own)} (x-gyre-batch-dims): write the map again with "
                          f"diff --write-map, or choose with --batch-dims")
    return trainer_schema(table, recorded)


def collated(field_map: MapLike, source: Source, model: Any = None,
             max_len: int | None = None) -> tuple[dict[str, Any], int]:
    """The collated columns the map reads, from a file, episodes or step records, and the
    number of episodes they hold."""
    layout = field_map.layout
    model = model or layout.step_model
    if isinstance(source, (str, os.PathLike)):
        # a file of [B, T] rows: its columns, no episode objects (None: episodes decide)
        flat = field_map.collated_file(source, model, max_len=max_len)
        if flat is not None:
            return flat
        items: list[Any] = layout.read(source, model)
    else:
        items = _items(source, model, layout)
    columns = field_map.collated(items, max_len=max_len)
    return columns, layout.count_episodes(items, columns)


def _items(source: Iterable[Any], model: Any, layout: RowLayout) -> list[Any]:
    """Episodes as given; step records validated (in order for token rows, grouped into
    episodes for `[B, T]` rows)."""
    items = list(source)
    if not items and isinstance(source, Iterator):
        raise ValueError("the source yielded nothing: an iterator (what read_episodes and "
                         "read_steps return) is consumed by the call that reads it; pass the "
                         "path or a list to build again")
    if items and is_step_record(items[0]):
        return layout.from_records(items, model)
    return items


def is_step_record(item: Any) -> bool:
    """A step record (a §3 dict with a str `episode_id` and an int `step`, or a step model),
    rather than an episode (`Episode`, or a mapping of columns)."""
    if isinstance(item, BaseModel):
        return True
    if not isinstance(item, Mapping):
        return False
    step = item.get("step")
    return isinstance(item.get("episode_id"), str) and \
        isinstance(step, (int, np.integer)) and not isinstance(step, bool)
