"""A batch in the trainer's own container: torch tensors (`to_torch`), a `TensorDict`
(`to_tensordict`) or verl's `DataProto` (`to_dataproto`).

A batch is what `FieldMap.batch` returns (and `batch -o` writes): arrays under dotted keys
(`next.reward`), or nested mappings of arrays. `to_torch` and `to_tensordict` nest the keys
(`next.reward` → `out["next"]["reward"]`, a TensorDict's `("next", "reward")`); every container
shares memory with the arrays on CPU: `torch.from_numpy`, no copy. An array torch cannot view is
copied once, said here so it is never a surprise: a read-only array (a tensor writing into it
would be undefined), one with negative strides, or one in non-native byte order. String arrays
(`uid`, `episode_id`) hold no numbers: `to_torch` keeps them as numpy `object` arrays,
`to_tensordict` as non-tensor entries (`NonTensorStack`: indexing the TensorDict indexes them
with the rest), `to_dataproto` in its `non_tensor_batch`.

verl keeps numbers in `DataProto.batch` (a TensorDict with one batch dim) and everything else in
`non_tensor_batch`, numpy arrays of `dtype=object` of the same length (`uid`, the prompt's
group, as verl's own trainer builds it): what verl's workers and its PPO/GRPO functions
(`compute_grpo_outcome_advantage`, `compute_policy_loss`, `kl_penalty`) read. Its keys stay
flat, as verl names them; a nested name is joined with `.`.

Each library is imported on first use: one that is not installed is one line naming the extra
that installs it (`InputError`: the CLI exits 2 with it), never a traceback from deep inside an
import.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from gyre_contract.core._errors import ContractError, InputError, Problem


def require(module: str, user: str, extra: str) -> ModuleType:
    """Import `module` for the function `user`, or raise InputError naming the `extra` of this
    package that installs it (and the module that was missing: verl's own dependency, say)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        missing = err.name or module
        raise InputError(f"{user} needs {missing}, which is not installed: pip install "
                         f"'gyre-contract[{extra}]'") from None


TEXT_KINDS = frozenset("USO")
"""numpy dtype kinds that hold no numbers: unicode, bytes, Python objects."""


def to_torch(batch: Mapping[str, Any], device: Any = None) -> dict[str, Any]:
    """The batch as a nested dict of `torch.Tensor` (`"next.reward"` → `out["next"]["reward"]`).

    On CPU (`device=None` or `"cpu"`) every tensor shares its array's memory (see the module
    doc for the arrays that are copied once); on another device each is moved there. String
    arrays stay numpy `object` arrays. Needs the extra `torch`."""
    torch = require("torch", "to_torch", "torch")
    out: dict[str, Any] = {}
    for path, value in leaves(batch):
        if _is_text(value):
            leaf: Any = np.asarray(value).astype(object, copy=False)
        else:
            leaf = tensor(torch, path, value)
            if device is not None:
                leaf = leaf.to(device)
        insert(out, path, leaf)
    return out


def to_tensordict(batch: Mapping[str, Any],
                  batch_dims: int | Sequence[str] | Sequence[int] | None = None) -> Any:
    """The batch as a `tensordict.TensorDict`: nested keys (`("next", "reward")`), tensors sharing
    the arrays' memory, string arrays as non-tensor entries.

    `batch_size` is the batch dims given — a number of leading dims (`2`), their names
    (`("B", "T")`, as a trainer schema or a map records them) or their sizes (`(8, 40)`) — else
    the longest leading shape every array shares (`[B, T]` for a TorchRL batch, `[B]` for token
    rows or a batch with per-row ids, `[M]` for a flat one). An array whose leading shape is not
    the batch size is a ContractError naming it. Needs the extra `torch` (torch, tensordict)."""
    torch = require("torch", "to_tensordict", "torch")
    tensordict = require("tensordict", "to_tensordict", "torch")
    items = list(leaves(batch))
    size = _batch_size(items, batch_dims)
    source: dict[str, Any] = {}
    for path, value in items:
        if _is_text(value):
            leaf = _non_tensor(tensordict, np.asarray(value), len(size))
        else:
            leaf = tensor(torch, path, value)
        insert(source, path, leaf)
    return tensordict.TensorDict(source, batch_size=list(size))


# -- shared with to_dataproto ------------------------------------------------------------------

def leaves(batch: Mapping[str, Any], prefix: tuple[str, ...] = ()
           ) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every array of a batch with its key path: dotted keys split, nested mappings walked."""
    if not isinstance(batch, Mapping):
        raise TypeError(f"a batch is a mapping of arrays, got {type(batch).__name__}")
    for key, value in batch.items():
        path = (*prefix, *str(key).split("."))
        if isinstance(value, Mapping):
            yield from leaves(value, path)
        else:
            yield path, value


def insert(out: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Put `value` at `path` in nested dicts; a key that is both an array and a group is refused."""
    node = out
    for i, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            _clash(path[:i + 1], path)
        node = child
    if path[-1] in node:
        _clash(path, path)
    node[path[-1]] = value


def tensor(torch: Any, path: tuple[str, ...], value: Any) -> Any:
    """One numeric array as a CPU tensor sharing its memory (a torch tensor is kept as it is)."""
    if isinstance(value, torch.Tensor):
        return value
    arr = np.asarray(value)
    if arr.dtype.kind not in "biufc":
        raise ContractError(Problem(".".join(path), "numbers, bools or strings",
                                    f"dtype {arr.dtype}", "torch holds no such array"))
    if not arr.flags.writeable or not arr.dtype.isnative or any(s < 0 for s in arr.strides):
        arr = np.array(arr, dtype=arr.dtype.newbyteorder("="))  # the one copy torch needs
    return torch.from_numpy(arr)


def _is_text(value: Any) -> bool:
    return isinstance(value, (np.ndarray, str, bytes)) and np.asarray(value).dtype.kind in TEXT_KINDS


def _clash(group: tuple[str, ...], path: tuple[str, ...]) -> None:
    raise ContractError(Problem(".".join(path), "each key an array or a group of arrays",
                                f"{'.'.join(group)} is both",
                                "a dotted key and a nested name collide"))


def _batch_size(items: list[tuple[tuple[str, ...], Any]],
                batch_dims: int | Sequence[str] | Sequence[int] | None) -> tuple[int, ...]:
    """The TensorDict's batch size: as given (the sizes, or those of the number or names of
    leading dims most arrays have), else the leading shape every array shares."""
    shapes = [(path, tuple(value.shape) if hasattr(value, "shape") else np.shape(value))
              for path, value in items]
    if batch_dims is None:
        common: tuple[int, ...] = shapes[0][1] if shapes else ()
        for _, shape in shapes[1:]:
            n = next((i for i, (a, b) in enumerate(zip(common, shape)) if a != b),
                     min(len(common), len(shape)))
            common = common[:n]
        return common
    wanted, n_dims, named = _dims(batch_dims)
    if wanted is None:
        heads = Counter(shape[:n_dims] for _, shape in shapes if len(shape) >= n_dims)
        wanted = heads.most_common(1)[0][0] if heads else None
    said = f" (batch dims {', '.join(named)})" if named else ""
    misfits = [Problem(".".join(path), f"leading shape {list(wanted or ())}{said}" if wanted
                       is not None else f"{n_dims} leading dims{said}", f"shape {list(shape)}",
                       "the batch dims do not lead this array")
               for path, shape in shapes if wanted is None or shape[:n_dims] != wanted]
    if misfits:
        raise ContractError(misfits)
    assert wanted is not None
    return wanted


def _dims(batch_dims: Any) -> tuple[tuple[int, ...] | None, int, tuple[str, ...]]:
    """`batch_dims=` as (sizes or None, number of dims, names or ())."""
    def whole(d: Any) -> bool:
        return isinstance(d, (int, np.integer)) and not isinstance(d, bool)

    if whole(batch_dims) and batch_dims >= 0:
        return None, int(batch_dims), ()
    if isinstance(batch_dims, Sequence) and not isinstance(batch_dims, str):
        if all(isinstance(d, str) for d in batch_dims):
            return None, len(batch_dims), tuple(batch_dims)
        if all(whole(d) and d >= 0 for d in batch_dims):
            return tuple(int(d) for d in batch_dims), len(batch_dims), ()
    raise TypeError(f"batch_dims is a number of leading dims, their names or their sizes, "
                    f"got {batch_dims!r}")


def _non_tensor(tensordict: Any, arr: np.ndarray, batch_ndim: int) -> Any:
    """A string array as a non-tensor entry: a `NonTensorStack` over the batch dims (each row
    its own string, or its own object array for extra dims), so indexing follows the batch."""
    arr = arr.astype(object, copy=False)
    if batch_ndim == 0 or arr.size == 0:
        return tensordict.NonTensorData(data=arr)
    return tensordict.NonTensorStack.from_list(_nested(arr, batch_ndim))


def _nested(arr: np.ndarray, depth: int) -> list[Any]:
    """Nested lists `depth` deep: strings at the batch dims, object arrays below them."""
    return list(arr) if depth == 1 else [_nested(row, depth - 1) for row in arr]


# -- verl's DataProto ------------------------------------------------------------------------------

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
