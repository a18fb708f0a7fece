"""gyre-contract: the sampler ↔ trainer contract of online RL, explicit and checkable."""

from gyre_contract.errors import (
    ContractError as ContractError,
)
from gyre_contract.errors import (
    FieldMapError as FieldMapError,
)
from gyre_contract.errors import (
    InputError as InputError,
)
from gyre_contract.errors import (
    MissingFieldError as MissingFieldError,
)
from gyre_contract.errors import (
    Problem as Problem,
)
from gyre_contract.errors import (
    SchemaError as SchemaError,
)
from gyre_contract.models import (
    Modalities as Modalities,
)
from gyre_contract.models import (
    RolloutStep as RolloutStep,
)
from gyre_contract.models import (
    RolloutStepV1 as RolloutStepV1,
)
from gyre_contract.models import (
    TrainBatch as TrainBatch,
)
from gyre_contract.models import (
    TrainBatchV1 as TrainBatchV1,
)
from gyre_contract.schema import export_schemas as export_schemas
from gyre_contract.schema import json_schema as json_schema
from gyre_contract.tensor import Tensor as Tensor
from gyre_contract.validate import EpisodeTracker as EpisodeTracker
from gyre_contract.validate import validate_batch as validate_batch
from gyre_contract.validate import validate_episode as validate_episode
from gyre_contract.validate import validate_step as validate_step

__version__ = "0.1.0"
