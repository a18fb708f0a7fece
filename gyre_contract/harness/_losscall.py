"""Calling the user's loss once on a validated batch (stage 2): on a copy, to one finite number;
and handing a batch over in the container the user's function asks for (`container=`).

A loss that raises, exits, or returns anything but one finite number (a float, a 0-d or
1-element array, a 1-element tensor) fails the stage with a `ContractError` saying which.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gyre_contract.adapters._containers import to_dataproto, to_tensordict, to_torch
from gyre_contract.core._errors import ContractError, Problem, describe

LossFn = Callable[[dict[str, Any]], Any]
"""`loss_fn(batch) -> scalar`: gets the validated batch as a dict of numpy arrays keyed by the
contract's names (`return`, not `return_`); returns a float, a 0-d array or a 1-element tensor."""


CONTAINERS = ("numpy", "torch", "tensordict", "dataproto")
"""What the user's loss or train function may ask the batch in (`container=`): the dict of numpy
arrays, or the trainer's own container through `gyre_contract.adapters`."""


def check_container(container: str) -> None:
    """Refuse an unknown `container=` before anything runs."""
    if container not in CONTAINERS:
        raise ValueError(f"container must be one of {', '.join(map(repr, CONTAINERS))}, got "
                         f"{container!r}")


def in_container(batch: dict[str, Any], container: str,
                 batch_dims: tuple[str, ...] | None = None) -> Any:
    """The batch as the user's function asked for it: the numpy dict itself, or `to_torch`,
    `to_tensordict` (its batch size from the trainer schema's `batch_dims` when there is one),
    `to_dataproto` of it (tensors sharing the arrays' memory). A library that is missing is
    an InputError naming the extra."""
    check_container(container)
    if container == "numpy":
        return batch
    if container == "torch":
        return to_torch(batch)
    if container == "tensordict":
        return to_tensordict(batch, batch_dims)
    return to_dataproto(batch)


def call_loss(loss_fn: LossFn, batch: dict[str, Any], container: str = "numpy",
              batch_dims: tuple[str, ...] | None = None) -> float:
    """Call the loss once on a copy of the batch, in `container`; its failure or a non-finite
    value fails the stage. A copy: a loss may edit its input in place (advantage normalisation
    often does), and what stage 2 reports and writes is the validated batch, not what the loss
    left of it."""
    given = in_container(copy_batch(batch), container, batch_dims)
    try:
        raw = loss_fn(given)
    except (Exception, SystemExit) as exc:  # sys.exit(0) in a loss is its code failing too
        raise ContractError(Problem("loss", "a loss computed from the batch",
                                    f"{type(exc).__name__}: {exc}",
                                    "loss_fn raised on the batch")) from exc
    try:
        value = loss_value(raw)
    except OverflowError:  # an int beyond float range (10**400)
        raise ContractError(Problem("loss", "a finite number", _loss_text(raw),
                                    "the loss is not finite")) from None
    if not math.isfinite(value):
        raise ContractError(Problem("loss", "a finite number", repr(value),
                                    "the loss is not finite"))
    return value


def copy_batch(batch: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a batch sharing nothing with it: arrays copied, modalities' dicts too."""
    return {key: copy_batch(value) if isinstance(value, Mapping)
            else value.copy() if isinstance(value, np.ndarray) else copy.deepcopy(value)
            for key, value in batch.items()}


def loss_value(raw: Any) -> float:
    """A float from a Python number, a 0-d / 1-element array, or a tensor (via `.item()`)."""
    if isinstance(raw, bool):
        raise ContractError(Problem("loss", "one number", describe(raw), "loss_fn returned a bool"))
    if isinstance(raw, (int, float)):
        return float(raw)
    size = getattr(raw, "size", None)
    count = size() if callable(size) else size
    numel = getattr(raw, "numel", None)
    if callable(numel):
        count = numel()
    if hasattr(raw, "item") and (count is None or int(np.prod(count)) == 1):
        value = raw.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    raise ContractError(Problem("loss", "one number (a float, a 0-d array or a 1-element "
                                "tensor)", _loss_text(raw), "loss_fn returned no scalar"))


def _loss_text(raw: Any) -> str:
    shape = getattr(raw, "shape", None)
    if shape is not None:
        return f"{type(raw).__name__} of shape {list(shape)}"
    return describe(raw)
