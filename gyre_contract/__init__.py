"""gyre-contract: the sampler ↔ trainer contract of online RL, explicit and checkable."""

from gyre_contract.advantages import discounted_returns, gae
from gyre_contract.collate import collate
from gyre_contract.compat import CompatReport, compat
from gyre_contract.diff import DiffReport, diff
from gyre_contract.errors import (
    ContractError,
    FieldMapError,
    GyreError,
    InputError,
    MissingFieldError,
    Problem,
    SchemaError,
)
from gyre_contract.fieldmap import FieldMap, known_ops, register_op, unregister_op
from gyre_contract.fieldtable import (
    Field,
    FieldTable,
    field_table,
    field_table_from_model,
    infer_schema,
    load_schema,
)
from gyre_contract.inspect import batch_schema, inspect_batch
from gyre_contract.models import Modalities, RolloutStep, RolloutStepV1, TrainBatch, TrainBatchV1
from gyre_contract.parquet import to_arrow_schema, validate_parquet
from gyre_contract.raydata import ShardsReport, iter_train_batches, validate_dataset, validate_shards
from gyre_contract.recorder import Recorder, episodes_from_records
from gyre_contract.rollout import (
    Episode,
    FileReport,
    read_episodes,
    read_steps,
    validate_file,
    write_steps,
)
from gyre_contract.runlog import RunLog, RunRecord, RunTimer, plot_runs, summarize
from gyre_contract.schema import export_schemas, json_schema
from gyre_contract.stages import CycleReport, HalfWayReport, LoopReport, full_loop, half_way
from gyre_contract.tensor import Tensor
from gyre_contract.validate import EpisodeTracker, validate_batch, validate_episode, validate_step

__version__ = "0.1.0"

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
