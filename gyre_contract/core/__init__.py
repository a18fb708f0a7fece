"""The contract itself: dims and dtypes, the Tensor field, record and batch models, rules, validators.

Names load on first use (PEP 562); `import gyre_contract` already imports the models, the
validators and the errors, so nothing here costs more.
"""

from gyre_contract.core._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "._models": ("RolloutStep", "RolloutStepV1", "TrainBatch", "TrainBatchV1", "Modalities"),
    "._tokens": ("TokenBatch", "TokenBatchV1"),
    "._tensor": ("Tensor",),
    "._validate": ("validate_step", "validate_episode", "validate_batch", "EpisodeTracker"),
    "._errors": ("Problem", "GyreError", "ContractError", "MissingFieldError", "SchemaError",
                 "FieldMapError", "InputError"),
})
