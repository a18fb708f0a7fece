"""gyre-contract: the sampler ↔ trainer contract of online RL, explicit and checkable.

The top level holds what users call directly, by role (docs/api.md lists it): the records and
the error, the sampler's validators and writer, the rollout files, schemas and the diff, the
trainer's field map and collation, and the stage checks. A few specialised names live in their
subpackage (`gyre_contract.core`, `.io`, `.schema`, `.adapters`, `.trainer`, `.channel`,
`.harness`); every other module is private (`_name.py`) and may change without notice.

Every name loads on first use (PEP 562): `import gyre_contract` imports nothing but this file,
so `gyre-contract --version` and a process that only passes the package around pay for nothing.
The first use of `validate_step` or a model imports the core (numpy, pydantic, the models); a
model's pydantic schema and its compiled fast path are built when it first validates a record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gyre_contract.core._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see of the names loaded on first use
    from gyre_contract.core._errors import ContractError, MissingFieldError
    from gyre_contract.core._models import Modalities, RolloutStep, TrainBatch
    from gyre_contract.core._tensor import Tensor
    from gyre_contract.core._tokens import TokenBatch
    from gyre_contract.core._validate import validate_batch, validate_episode, validate_step
    from gyre_contract.harness._recorder import Recorder
    from gyre_contract.harness._runlog import RunLog
    from gyre_contract.harness._stages import full_loop, half_way
    from gyre_contract.io._reading import read_episodes, read_steps
    from gyre_contract.io._validation import validate_file
    from gyre_contract.io._writer import write_steps
    from gyre_contract.schema._compatibility import compat
    from gyre_contract.schema._diffing import diff
    from gyre_contract.schema._export import export_schemas, json_schema
    from gyre_contract.schema._infer import infer_schema
    from gyre_contract.schema._loading import load_schema
    from gyre_contract.trainer._advantages import discounted_returns, gae
    from gyre_contract.trainer._collation import collate
    from gyre_contract.trainer._fieldmap import FieldMap
    from gyre_contract.trainer._ops import register_op

__version__ = "0.3.0"

_LAZY, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "gyre_contract.core": ("RolloutStep", "TrainBatch", "TokenBatch", "Modalities", "Tensor",
                               "ContractError", "MissingFieldError", "validate_step",
                               "validate_episode", "validate_batch"),
        "gyre_contract.io": ("write_steps", "read_steps", "read_episodes", "validate_file"),
        "gyre_contract.schema": ("json_schema", "export_schemas", "load_schema", "infer_schema",
                                 "diff", "compat"),
        "gyre_contract.trainer": ("FieldMap", "register_op", "collate", "gae",
                                  "discounted_returns"),
        "gyre_contract.harness": ("Recorder", "half_way", "full_loop", "RunLog"),
    },
)

__all__ = [
    # the contract's records and field type
    "RolloutStep", "TrainBatch", "TokenBatch", "Modalities", "Tensor",
    # errors: one exception type holds all problems
    "ContractError", "MissingFieldError",
    # sampler: validate each step, record an env, write the file
    "validate_step", "validate_episode", "Recorder", "write_steps",
    # rollout files
    "read_steps", "read_episodes", "validate_file",
    # schemas and the diff (CI)
    "json_schema", "export_schemas", "load_schema", "infer_schema", "diff", "compat",
    # trainer: field map, collation, advantages, the batch check
    "FieldMap", "register_op", "collate", "gae", "discounted_returns", "validate_batch",
    # the stage checks and the run log
    "half_way", "full_loop", "RunLog",
    "__version__",
]

del lazy_exports, TYPE_CHECKING  # helpers of this file, not public names
