"""A batch as verl's `DataProto` (`to_dataproto`): what verl's workers and its PPO/GRPO
functions (`compute_grpo_outcome_advantage`, `compute_policy_loss`, `kl_penalty`) read.

verl keeps numbers in `DataProto.batch` (a TensorDict with one batch dim) and everything else in
`non_tensor_batch`, numpy arrays of `dtype=object` of the same length (`uid`, the prompt's
group, as verl's own trainer builds it). Keys stay flat, as verl names them; a nested name is
joined with `.`. Tensors share the arrays' memory on CPU (`to_torch`'s rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gyre_contract.adapters._extras import require
from gyre_contract.adapters._tensors import TEXT_KINDS, leaves, tensor
from gyre_contract.core._errors import ContractError, Problem


def to_dataproto(batch: Mapping[str, Any], meta_info: Mapping[str, Any] | None = None) -> Any:
    """`verl.DataProto` of a batch of rows (every array leads with the same `B`): numeric arrays
    as tensors in `.batch`, string arrays (`uid`) in `.non_tensor_batch` as `dtype=object`,
    `meta_info` as given. An array whose first dim is not `B` is a ContractError naming it
    (verl's one batch dim). Needs the extra `verl`."""
    torch = require("torch", "to_dataproto", "verl")
    verl = require("verl", "to_dataproto", "verl")
    tensors: dict[str, Any] = {}
    non_tensors: dict[str, np.ndarray] = {}
    rows: list[tuple[str, int | None]] = []
    for path, value in leaves(batch):
        key = ".".join(path)
        shape = tuple(value.shape) if hasattr(value, "shape") else np.shape(value)
        rows.append((key, shape[0] if shape else None))
        if not isinstance(value, torch.Tensor) and np.asarray(value).dtype.kind in TEXT_KINDS:
            non_tensors[key] = np.asarray(value).astype(object)
        else:
            tensors[key] = tensor(torch, path, value)
    sizes = {n for _, n in rows}
    if len(sizes) > 1 or None in sizes:
        first = rows[0][1]
        raise ContractError([Problem(key, f"first dim {first} (one row per sample: verl's one "
                                     f"batch dim)", "a scalar" if n is None else f"first dim {n}",
                                     "arrays of a DataProto lead with the same batch dim")
                             for key, n in rows if n != first or n is None])
    return verl.DataProto.from_dict(tensors=tensors, non_tensors=non_tensors,
                                    meta_info=dict(meta_info or {}))
