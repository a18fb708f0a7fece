"""Trainer-side inspector: what one live batch holds, and a trainer JSON Schema built from it.

A trainer repo with no schema runs one real batch of its dataloader through `batch_schema` and
writes `trainer.json`, which `gyre-contract diff` compares with the sampler's schema. Any array
with `.shape` and `.dtype` works (numpy, torch, jax, ...); torch is never imported: its dtypes are
read from their names (`torch.float32` → `float32`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any, NamedTuple

from gyre_contract.core._errors import SchemaError
from gyre_contract.core._text import shown

SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"

_JSON_TYPES = {"bool": "boolean", "string": "string"}
_DTYPE_ALIASES = {"long": "int64", "int": "int32", "float": "float32", "double": "float64",
                  "half": "float16", "bool_": "bool", "str": "string"}
_ROLES = {"obs": "observation", "action": "action", "reward": "reward", "done": "done",
          "terminated": "terminated", "truncated": "truncated", "advantage": "advantage",
          "return": "return", "value": "value", "logprob": "logprob", "mask": "mask",
          "policy_version": "policy_version", "episode_id": "episode_id", "step": "step"}
"""Roles of the contract's own batch names (docs/contract.md §4); other names are left to the diff."""


class FieldInfo(NamedTuple):
    """What one batch entry is: its type name, shape and dtype name (None if not array-like)."""

    type_name: str
    shape: tuple[int, ...] | None
    dtype: str | None


class Inspection(dict[str, FieldInfo]):
    """`{key: FieldInfo(type_name, shape, dtype)}`; `str()` is an aligned table."""

    def __str__(self) -> str:
        return format_table(self)

    def print(self, file: IO[str] | None = None) -> None:
        """Print the table (to stdout by default)."""
        print(format_table(self), file=file or sys.stdout)


def inspect_batch(batch: Any) -> Inspection:
    """Describe every entry of a batch: a mapping, a pydantic model or an object with fields.

    Nested mappings (observation modalities) become dotted keys (`obs.image`).
    """
    out = Inspection()
    for key, value in _entries(batch, ""):
        out[key] = describe_entry(value)
    return out


def describe_entry(value: Any) -> FieldInfo:
    """Type name, shape and dtype of one value, by duck typing (`.shape` and `.dtype`)."""
    type_name = type(value).__name__
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return FieldInfo(type_name, tuple(int(d) for d in value.shape), dtype_of(value.dtype))
    if isinstance(value, bool):
        return FieldInfo(type_name, (), "bool")
    if isinstance(value, int):
        return FieldInfo(type_name, (), "int64")
    if isinstance(value, float):
        return FieldInfo(type_name, (), "float64")
    if isinstance(value, str):
        return FieldInfo(type_name, (), "string")
    return FieldInfo(type_name, None, None)


def dtype_of(dtype: Any) -> str:
    """The contract's dtype name for a numpy, torch, jax or tensorflow dtype."""
    kind = getattr(dtype, "kind", None)
    if kind == "U" or kind == "S":
        return "string"
    name = getattr(dtype, "name", None)
    text = name if isinstance(name, str) else str(dtype)
    text = text.removeprefix("torch.").removeprefix("tf.")
    return _DTYPE_ALIASES.get(text, text)


def format_table(info: Mapping[str, FieldInfo]) -> str:
    """An aligned text table: key, type, shape, dtype."""
    rows = [("key", "type", "shape", "dtype")]
    for key, entry in info.items():
        shape = "-" if entry.shape is None else f"[{', '.join(map(str, entry.shape))}]"
        rows.append((shown(key), entry.type_name, shape, entry.dtype or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip()
        for r in rows)


def batch_schema(
    batch: Any,
    *,
    batch_dims: Sequence[str] = ("B", "T"),
    title: str = "trainer batch",
    version: str = "1.0.0",
) -> dict[str, Any]:
    """A trainer JSON Schema (docs/contract.md §5) from one live batch.

    The leading dims are named by `batch_dims`: a field's dim i is named `batch_dims[i]` when its
    size is the batch's (the most common size at that position), so a per-row field `[B]` gets
    `["B"]`; every other dim is the fixed size seen. Fields that are not arrays are refused.
    """
    info = inspect_batch(batch)
    bad = [k for k, v in info.items() if v.shape is None]
    if bad:
        raise SchemaError(f"cannot describe {', '.join(bad)} as tensors (no shape and dtype): "
                          f"pass arrays only")
    sizes = _batch_sizes(info, batch_dims)
    properties = {key: _field_schema(key, entry, batch_dims, sizes)
                  for key, entry in info.items()}
    return {
        "$schema": SCHEMA_DRAFT,
        "title": title,
        "description": "built by gyre_contract.trainer._inspection.batch_schema from one live batch",
        "type": "object",
        "x-gyre-kind": "train_batch",
        "x-gyre-version": version,
        "x-gyre-batch-dims": list(batch_dims),
        "properties": properties,
        "required": list(properties),
    }


def _entries(batch: Any, prefix: str) -> list[tuple[str, Any]]:
    items = _items(batch)
    out: list[tuple[str, Any]] = []
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) or _is_model(value):
            out += _entries(value, f"{name}.")
        else:
            out.append((name, value))
    return out


def _items(batch: Any) -> list[tuple[str, Any]]:
    if isinstance(batch, Mapping):
        return [(str(k), v) for k, v in batch.items()]
    if _is_model(batch):
        data = batch.model_dump(by_alias=True, exclude_none=True, round_trip=True)
        return [(str(k), v) for k, v in data.items()]
    if hasattr(batch, "__dataclass_fields__"):
        return [(k, getattr(batch, k)) for k in batch.__dataclass_fields__]
    raise TypeError(f"expected a mapping, a pydantic model or a dataclass, "
                    f"got {type(batch).__name__}")


def _is_model(value: Any) -> bool:
    return hasattr(value, "model_dump") and hasattr(type(value), "model_fields")


def _batch_sizes(info: Mapping[str, FieldInfo], batch_dims: Sequence[str]) -> list[int | None]:
    """The most common size at each leading position, among fields deep enough to have it."""
    sizes: list[int | None] = []
    for i in range(len(batch_dims)):
        seen = [e.shape[i] for e in info.values()
                if e.shape is not None and len(e.shape) > i
                and all(e.shape[j] == sizes[j] for j in range(i))]
        sizes.append(max(set(seen), key=seen.count) if seen else None)
    return sizes


def _field_schema(key: str, entry: FieldInfo, batch_dims: Sequence[str],
                  sizes: list[int | None]) -> dict[str, Any]:
    assert entry.shape is not None and entry.dtype is not None
    shape: list[int | str] = []
    leading = True
    for i, size in enumerate(entry.shape):
        leading = leading and i < len(batch_dims) and size == sizes[i]
        shape.append(batch_dims[i] if leading else size)
    schema = _nested(entry.dtype, shape)
    schema.update({"x-gyre-dtype": entry.dtype, "x-gyre-shape": shape})
    role = _ROLES.get(key)
    if role is not None:
        schema["x-gyre-role"] = role
    schema["description"] = f"{key} as seen in a live batch ({entry.type_name})"
    return schema


def _nested(dtype: str, shape: list[int | str]) -> dict[str, Any]:
    if dtype in _JSON_TYPES:
        leaf: dict[str, Any] = {"type": _JSON_TYPES[dtype]}
    elif dtype.startswith(("int", "uint")):
        leaf = {"type": "integer"}
    else:
        leaf = {"type": "number"}
    for dim in reversed(shape):
        leaf = {"type": "array", "items": leaf}
        if isinstance(dim, int):
            leaf["minItems"] = leaf["maxItems"] = dim
    return leaf
