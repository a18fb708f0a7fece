"""gyre-contract: the sampler ↔ trainer contract of online RL, explicit and checkable.

What a sampler's hot loop needs (the models, `Tensor`, the validators, the errors) is imported
with the package; everything else (diff, field maps, files, stages, Parquet, Ray) is imported on
first use, so `import gyre_contract` in every sampler process stays close to the cost of numpy
and pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gyre_contract.core.errors import (
    ContractError,
    FieldMapError,
    GyreError,
    InputError,
    MissingFieldError,
    Problem,
    SchemaError,
)
from gyre_contract.core.models import Modalities, RolloutStep, RolloutStepV1, TrainBatch, TrainBatchV1
from gyre_contract.core.tensor import Tensor
from gyre_contract.core.validate import EpisodeTracker, validate_batch, validate_episode, validate_step

if TYPE_CHECKING:  # what type checkers and IDEs see of the names loaded on first use
    from gyre_contract.harness.recorder import Recorder, episodes_from_records
    from gyre_contract.harness.runlog import RunLog, RunRecord, RunTimer, plot_runs, summarize
    from gyre_contract.harness.stages import CycleReport, HalfWayReport, LoopReport, full_loop, half_way
    from gyre_contract.io.arrowschema import to_arrow_schema
    from gyre_contract.io.dataset import iter_train_batches, validate_dataset
    from gyre_contract.io.episodes import Episode
    from gyre_contract.io.parquet import validate_parquet
    from gyre_contract.io.reading import read_episodes, read_steps
    from gyre_contract.io.report import FileReport
    from gyre_contract.io.shards import ShardsReport, validate_shards
    from gyre_contract.io.validation import validate_file
    from gyre_contract.io.writer import write_steps
    from gyre_contract.schema.compatibility import CompatReport, compat
    from gyre_contract.schema.diffing import DiffReport, diff
    from gyre_contract.schema.export import export_schemas, json_schema
    from gyre_contract.schema.fieldtable import (
        Field,
        FieldTable,
        field_table,
        field_table_from_model,
        infer_schema,
        load_schema,
    )
    from gyre_contract.trainer.advantages import discounted_returns, gae
    from gyre_contract.trainer.collation import collate
    from gyre_contract.trainer.fieldmap import FieldMap, known_ops, register_op, unregister_op
    from gyre_contract.trainer.inspection import batch_schema, inspect_batch

__version__ = "0.1.0"

_ON_FIRST_USE: dict[str, tuple[str, ...]] = {
    "trainer.advantages": ("discounted_returns", "gae"),
    "trainer.collation": ("collate",),
    "schema.compatibility": ("CompatReport", "compat"),
    "schema.diffing": ("DiffReport", "diff"),
    "trainer.fieldmap": ("FieldMap", "known_ops", "register_op", "unregister_op"),
    "schema.fieldtable": ("Field", "FieldTable", "field_table", "field_table_from_model",
                   "infer_schema", "load_schema"),
    "trainer.inspection": ("batch_schema", "inspect_batch"),
    "io.arrowschema": ("to_arrow_schema",),
    "io.parquet": ("validate_parquet",),
    "io.shards": ("ShardsReport", "validate_shards"),
    "io.dataset": ("iter_train_batches", "validate_dataset"),
    "harness.recorder": ("Recorder", "episodes_from_records"),
    "io.episodes": ("Episode",),
    "io.report": ("FileReport",),
    "io.reading": ("read_episodes", "read_steps"),
    "io.validation": ("validate_file",),
    "io.writer": ("write_steps",),
    "harness.runlog": ("RunLog", "RunRecord", "RunTimer", "plot_runs", "summarize"),
    "schema.export": ("export_schemas", "json_schema"),
    "harness.stages": ("CycleReport", "HalfWayReport", "LoopReport", "full_loop", "half_way"),
}
_MODULE_OF = {name: module for module, names in _ON_FIRST_USE.items() for name in names}

__all__ = [
    # the contract's records and field type
    "RolloutStep", "RolloutStepV1", "TrainBatch", "TrainBatchV1", "Modalities", "Tensor",
    # validation (sampler side, stage 1)
    "validate_step", "validate_episode", "validate_batch", "EpisodeTracker",
    "read_steps", "write_steps", "read_episodes", "validate_file", "Episode", "FileReport",
    # errors
    "GyreError", "ContractError", "MissingFieldError", "SchemaError", "FieldMapError",
    "InputError", "Problem",
    # schemas and the diff
    "json_schema", "export_schemas", "load_schema", "field_table", "field_table_from_model",
    "infer_schema", "Field", "FieldTable", "diff", "DiffReport", "compat", "CompatReport",
    # trainer side (stage 2)
    "FieldMap", "register_op", "unregister_op", "known_ops", "collate", "gae",
    "discounted_returns", "inspect_batch", "batch_schema", "half_way", "HalfWayReport",
    # full loop (stage 3) and the run log
    "Recorder", "episodes_from_records", "full_loop", "LoopReport", "CycleReport",
    "RunLog", "RunRecord", "RunTimer", "summarize", "plot_runs",
    # scale out: Parquet files and shards on Ray Data (extras `parquet`, `ray`)
    "to_arrow_schema", "validate_parquet", "validate_shards", "validate_dataset",
    "iter_train_batches", "ShardsReport",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562), then keep the name here."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'gyre_contract' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"gyre_contract.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
