"""gyre-contract: the sampler ↔ trainer contract of online RL, explicit and checkable.

The top level holds what users call directly, by role (docs/api.md lists it): the records and
errors, the sampler's validators and writer, the rollout files, schemas and the diff, the
trainer's field map and collation, and the stage checks. Specialised names live in their
subpackage (`gyre_contract.core`, `.io`, `.schema`, `.trainer`, `.harness`).

What a sampler's hot loop needs (the models, `Tensor`, the validators, the errors) is imported
with the package; everything else is imported on first use, so `import gyre_contract` in every
sampler process stays close to the cost of numpy and pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gyre_contract.core.deprecation import ModuleAliases, lazy_exports
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
from gyre_contract.core.tokenbatch import TokenBatch, TokenBatchV1
from gyre_contract.core.validate import validate_batch, validate_episode, validate_step

if TYPE_CHECKING:  # what type checkers and IDEs see of the names loaded on first use
    from gyre_contract.harness.recorder import Recorder
    from gyre_contract.harness.runlog import RunLog, RunRecord
    from gyre_contract.harness.stages import full_loop, half_way
    from gyre_contract.io.episodes import Episode
    from gyre_contract.io.reading import read_episodes, read_steps
    from gyre_contract.io.validation import validate_file
    from gyre_contract.io.writer import write_steps
    from gyre_contract.schema.compatibility import compat
    from gyre_contract.schema.diffing import diff
    from gyre_contract.schema.export import export_schemas, json_schema
    from gyre_contract.schema.infer import infer_schema
    from gyre_contract.schema.loading import load_schema
    from gyre_contract.trainer.advantages import discounted_returns, gae
    from gyre_contract.trainer.collation import collate
    from gyre_contract.trainer.fieldmap import FieldMap
    from gyre_contract.trainer.ops import register_op

__version__ = "0.2.0"

# Names that left the top level: still served for one minor version, with a DeprecationWarning
# naming their new home.
_MOVED = {
    "gyre_contract.core": ("EpisodeTracker",),
    "gyre_contract.io": ("FileReport", "ShardsReport", "to_arrow_schema", "validate_parquet",
                         "validate_shards", "validate_dataset", "iter_train_batches"),
    "gyre_contract.schema": ("Field", "FieldTable", "field_table", "field_table_from_model",
                             "DiffReport", "CompatReport"),
    "gyre_contract.trainer": ("unregister_op", "known_ops", "inspect_batch", "batch_schema"),
    "gyre_contract.harness": ("HalfWayReport", "LoopReport", "CycleReport", "RunTimer",
                              "summarize", "plot_runs", "episodes_from_records"),
}

_LAZY, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "gyre_contract.io": ("write_steps", "read_steps", "read_episodes", "validate_file",
                             "Episode"),
        "gyre_contract.schema": ("json_schema", "export_schemas", "load_schema", "infer_schema",
                                 "diff", "compat"),
        "gyre_contract.trainer": ("FieldMap", "register_op", "collate", "gae",
                                  "discounted_returns"),
        "gyre_contract.harness": ("Recorder", "half_way", "full_loop", "RunLog", "RunRecord"),
    },
    moved={name: home for home, names in _MOVED.items() for name in names},
)

__all__ = [
    # the contract's records and field type
    "RolloutStep", "RolloutStepV1", "TrainBatch", "TrainBatchV1", "TokenBatch", "TokenBatchV1",
    "Modalities", "Tensor",
    # errors: one exception type holds all problems
    "GyreError", "ContractError", "MissingFieldError", "SchemaError", "FieldMapError",
    "InputError", "Problem",
    # sampler: validate each step, record an env, write the file
    "validate_step", "validate_episode", "Recorder", "write_steps",
    # rollout files
    "read_steps", "read_episodes", "validate_file", "Episode",
    # schemas and the diff (CI)
    "json_schema", "export_schemas", "load_schema", "infer_schema", "diff", "compat",
    # trainer: field map, collation, advantages, the batch check
    "FieldMap", "register_op", "collate", "gae", "discounted_returns", "validate_batch",
    # the stage checks and the run log
    "half_way", "full_loop", "RunLog", "RunRecord",
    "__version__",
]

# Old module paths (before the subpackages) keep importing for one minor version, as views of
# the subpackage that now exposes their public names. `gyre_contract.diff`, `.collate` and
# `.compat` are the functions, so those three old modules cannot be aliased.
ModuleAliases({
    **{f"gyre_contract.{old}": "gyre_contract.core"
       for old in ("models", "tensor", "validate", "errors")},
    **{f"gyre_contract.{old}": "gyre_contract.io" for old in ("rollout", "parquet", "raydata")},
    **{f"gyre_contract.{old}": "gyre_contract.schema" for old in ("fieldtable",)},
    **{f"gyre_contract.{old}": "gyre_contract.trainer"
       for old in ("fieldmap", "advantages", "inspect")},
    **{f"gyre_contract.{old}": "gyre_contract.harness"
       for old in ("recorder", "stages", "runlog", "demo")},
}).install()

del ModuleAliases, lazy_exports, TYPE_CHECKING  # helpers of this file, not public names
