"""Everything the channel takes from the rest of the package, in one place.

The channel depends on the contract through these names only: the step model's documents
(its JSON Schema, its Arrow layout), validation in bulk of a block of records, a column of
ragged lists (`Ragged`: values and lengths, what collation takes without an array per step)
and of modalities (`Objects`), strings as codes (`CodedIds`), the field map
and the trainer's schema, the field map → the trainer's batch, the diff through the map
(field tables and `compat`), and the fingerprint. A change of the package's internals is a
change here, nowhere else in `gyre_contract.channel`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

from gyre_contract.core._models import GyreModel, RolloutStep, RolloutStepV1
from gyre_contract.core._validate import validate_batch
from gyre_contract.io._arrowschema import is_pinned, to_arrow_schema
from gyre_contract.io._atomic import write_bytes_atomic
from gyre_contract.io._blocks import CheckedBlock, Objects, RecordBlocks
from gyre_contract.io._fastfile import CodedIds
from gyre_contract.io._raggedcols import Ragged
from gyre_contract.schema._compatibility import CompatReport, compat
from gyre_contract.schema._export import json_schema
from gyre_contract.schema._fieldtable import FieldTable, field_table
from gyre_contract.schema._loading import load_schema
from gyre_contract.trainer._fieldmap import FieldMap, as_field_map
from gyre_contract.trainer._trainerbatch import TrainerSchema, trainer_schema

__all__ = ["CONTRACT_VERSION", "CheckedBlock", "CodedIds", "CompatReport", "FieldMap",
           "FieldTable", "Objects", "Ragged", "RecordBlocks", "TrainerSchema", "arrow_layout",
           "compat", "default_step_model", "field_table", "fingerprint", "fixed_layout",
           "load_map", "load_trainer", "schema_document", "step_schema", "trainer_batch",
           "write_atomic"]

CONTRACT_VERSION = "1.2"
"""The contract version a fingerprint covers (docs/contract.md §12: the channel, v1.2)."""


def fingerprint(documents: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of `documents` plus the contract version: two ends agree on
    a fingerprint exactly when they hold the same documents (key order and spacing aside)."""
    canonical = json.dumps({"contract": CONTRACT_VERSION, "documents": documents},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           allow_nan=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def step_schema(model: type[RolloutStepV1]) -> dict[str, Any]:
    """The JSON Schema a sampler publishes: its step model's (`gyre-contract export`'s)."""
    return json_schema(model)


def arrow_layout(model: type[RolloutStepV1], sample: Any) -> Any:
    """The Arrow schema of a segment of `model` steps (`sample` settles an unpinned model)."""
    return to_arrow_schema(model, sample=sample)


def fixed_layout(model: type[RolloutStepV1]) -> Any:
    """The Arrow schema of a pinned model (one layout for every segment), else None."""
    return to_arrow_schema(model) if is_pinned(model) else None


def default_step_model() -> type[RolloutStepV1]:
    """The step model a sampler end validates with when it names none."""
    return RolloutStep


def load_map(source: FieldMap | Mapping[str, Any] | str | os.PathLike[str]) -> FieldMap:
    """A field map from a `FieldMap`, its JSON data or a `map.json` path."""
    return as_field_map(source)


def schema_document(source: Any) -> dict[str, Any]:
    """A JSON Schema document from a path, a dict or a Pydantic model class (local `$ref`s
    only, size limits: `schema.load_schema`)."""
    if isinstance(source, type) and issubclass(source, GyreModel):
        return json_schema(source)
    return load_schema(source)


def load_trainer(source: Any, batch_dims: tuple[str, ...] | list[str] | str | None
                 ) -> TrainerSchema:
    """A trainer's batch schema (a JSON Schema path or dict, ours or foreign)."""
    return trainer_schema(source, batch_dims)


def trainer_batch(fmap: FieldMap, schema: TrainerSchema | None, columns: Mapping[str, Any],
                  episodes: Any = None) -> dict[str, Any]:
    """The trainer's own batch from a block of step columns (a delivery's segments): what the
    map's row layout makes of them (episodes, or one block of token rows), the map's collation
    and ops, then the trainer's schema (or `TrainBatch` / `TokenBatch`) check — what
    `gyre-contract batch --map M --trainer T` does (`half_way`). The one call
    `FieldMap.batch(source, trainer=...)` gives the same arrays: when it exists, this body is
    that call. `episodes`: (each step's episode code, the ids by code), when known."""
    collated = fmap.collated_block(columns, episodes=episodes)
    arrays = fmap.apply(collated)
    if schema is None:
        validated = validate_batch(arrays, fmap.batch_model)
        return validated.model_dump(by_alias=True, exclude_none=True, round_trip=True)
    return schema.check(arrays, collated.get("mask"), rows=fmap.layout)


def write_atomic(path: str | os.PathLike[str], data: Any, *, fsync: bool = True) -> None:
    """Replace `path` with `data` (bytes or a buffer): a temporary file in the same folder,
    fsynced, renamed, the folder fsynced (`io._atomic`); a failed write (a full disk) leaves
    nothing and raises InputError."""
    write_bytes_atomic(path, data, fsync=fsync)
