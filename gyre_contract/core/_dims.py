"""Dims and dtypes: the shape grammar, dim binding and the lossless-cast rule.

A dim is an int (fixed), a name (symbolic, bound on first use) or `*name` (zero or more dims bound
together). A value is cast to a dtype only when nothing is lost: 1.5 is not an int64, 300 is not a
uint8, `true` is not a number, `"1"` is not an int, an integer beyond 2**24 is not a float32 (nor
beyond 2**53 a float64), alone or in a list beside floats. Floats must be finite; a float is
rounded to a narrower float width (0.1 and 16777217.0 are float32 values) but must not overflow
it. An empty list holds no value to lose: it takes the declared dtype.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gyre_contract.core._errors import SchemaError, describe

DTYPES: tuple[str, ...] = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "string",
)
INT_DTYPES = frozenset(d for d in DTYPES if d.startswith(("int", "uint")))
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
INT_RANGES: dict[str, tuple[int, int]] = {
    d: (int(np.iinfo(d).min), int(np.iinfo(d).max)) for d in INT_DTYPES
}
FLOAT_MAX: dict[str, float] = {
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float32": float(np.finfo(np.float32).max),
    "float64": float(np.finfo(np.float64).max),
}
# Largest integer each float width holds exactly; an int beyond it would be rounded.
FLOAT_EXACT_INT: dict[str, int] = {"float16": 2**11, "bfloat16": 2**8, "float32": 2**24,
                                   "float64": 2**53}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype for a contract dtype name (`string` is numpy's unicode kind)."""
    if name == "string":
        return np.dtype(np.str_)
    if name == "bfloat16":
        raise SchemaError("bfloat16 cannot be held by a numpy array; use float32 on the wire")
    if name not in DTYPES:
        raise SchemaError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}")
    return np.dtype(name)


def dtype_name(dtype: np.dtype) -> str:
    """The contract name of a numpy dtype (`<U7` is `string`)."""
    return "string" if dtype.kind == "U" else str(dtype)


@dataclass(frozen=True, slots=True)
class Dim:
    """One dim of a shape: `size` when fixed, else `name` (`variadic` for `*name`)."""

    size: int | None = None
    name: str | None = None
    variadic: bool = False

    def __str__(self) -> str:
        if self.size is not None:
            return str(self.size)
        return f"*{self.name}" if self.variadic else str(self.name)

    def to_json(self) -> int | str:
        return self.size if self.size is not None else str(self)


Shape = tuple[Dim, ...]


def parse_dim(spec: int | str) -> Dim:
    """Parse one dim: 4, "T", "*obs"."""
    if isinstance(spec, bool) or not isinstance(spec, (int, str)):
        raise SchemaError(f"a dim is an int >= 0, a name or *name; got {spec!r}")
    if isinstance(spec, int):
        if spec < 0:
            raise SchemaError(f"a fixed dim must be >= 0; got {spec}")
        return Dim(size=spec)
    if spec.isdigit():  # ASCII digits only: "²" is a digit to str.isdigit, not to int
        if not spec.isascii() or len(spec) > 19:
            raise SchemaError(f"a fixed dim is an integer of at most 19 ASCII digits; got "
                              f"{spec[:40]!r}")
        return Dim(size=int(spec))
    variadic = spec.startswith("*")
    name = spec[1:] if variadic else spec
    if not _NAME.match(name):
        raise SchemaError(f"a dim name must match [A-Za-z_][A-Za-z0-9_]*; got {spec!r}")
    return Dim(name=name, variadic=variadic)


def parse_shape(spec: Iterable[int | str] | str) -> Shape:
    """Parse a shape: `["B", "T", "*obs"]`, `[4]`, `[]` or the string form `"B T *obs"`."""
    items = spec.split() if isinstance(spec, str) else list(spec)
    shape = tuple(parse_dim(d) for d in items)
    if sum(d.variadic for d in shape) > 1:
        raise SchemaError(f"a shape may hold at most one *name; got {format_shape(shape)}")
    return shape


def format_shape(shape: Sequence[Dim] | Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def shape_names(shape: Shape) -> set[str]:
    return {d.name for d in shape if d.name is not None}


def rank_ok(shape: Shape, actual: tuple[int, ...]) -> bool:
    """Whether the actual rank fits the declared shape (before names are bound)."""
    fixed = sum(not d.variadic for d in shape)
    if any(d.variadic for d in shape):
        return len(actual) >= fixed
    return len(actual) == fixed


def split_variadic(shape: Shape, actual: tuple[int, ...]) -> list[tuple[Dim, Any]]:
    """Pair each declared dim with its actual size (a tuple for `*name`). Assumes rank_ok."""
    if not any(d.variadic for d in shape):
        return list(zip(shape, actual))
    at = next(i for i, d in enumerate(shape) if d.variadic)
    tail = len(shape) - at - 1
    middle = actual[at: len(actual) - tail]
    pairs: list[tuple[Dim, Any]] = list(zip(shape[:at], actual[:at]))
    pairs.append((shape[at], tuple(middle)))
    pairs += list(zip(shape[at + 1:], actual[len(actual) - tail:]))
    return pairs


def shape_mismatch(shape: Shape, actual: tuple[int, ...]) -> str | None:
    """Why `actual` cannot have the declared shape on its own (rank, fixed dims), or None."""
    if not rank_ok(shape, actual):
        return "wrong rank"
    for dim, size in split_variadic(shape, actual):
        if dim.size is not None and dim.size != size:
            return "wrong shape"
    return None


def bind_dims(
    shape: Shape, actual: tuple[int, ...], bindings: dict[str, Any],
    skip: Iterable[str] = (),
) -> list[tuple[str, Any, Any]]:
    """Bind the names of `shape` to `actual`, in place; return (name, bound, got) conflicts."""
    conflicts = []
    for dim, size in split_variadic(shape, actual):
        if dim.name is None or dim.name in skip:
            continue
        bound = bindings.setdefault(dim.name, size)
        if bound != size:
            conflicts.append((dim.name, bound, size))
    return conflicts


def format_size(size: Any) -> str:
    return format_shape(size) if isinstance(size, tuple) else str(size)


class CastError(ValueError):
    """A value cannot become the declared dtype without loss. `reason` is the short message."""

    def __init__(self, reason: str, got: str) -> None:
        super().__init__(f"{reason}: got {got}")
        self.reason = reason
        self.got = got


def to_array(value: Any, dtype: str, finite: bool = True) -> np.ndarray:
    """Convert nested lists, numpy arrays or scalars to an array of `dtype`, losslessly.

    `finite=False` lets NaN and infinities through (a batch's padding may hold them) but still
    refuses a finite value that overflows the narrower width.
    """
    if dtype == "auto":
        arr = _as_array(value)
        dtype = _auto_dtype(arr, keep=isinstance(value, (np.ndarray, np.generic)))
    else:
        arr = value if isinstance(value, np.ndarray) else _as_array(value)
    if not isinstance(value, np.ndarray):
        if arr.dtype.kind in "iuf" and dtype != "string":
            _reject_hidden_bools(value, arr)
        if isinstance(value, (list, tuple)) and arr.dtype.kind == "f":
            if not arr.size and dtype not in FLOAT_DTYPES:
                # `[]` holds no value to lose: it takes the declared dtype (numpy says float64)
                return np.empty(arr.shape, np.str_ if dtype == "string" else numpy_dtype(dtype))
            if dtype in FLOAT_DTYPES:
                _reject_inexact_ints(value, arr, dtype)
    return _cast(arr, dtype, finite)


def _as_array(value: Any) -> np.ndarray:
    if value is None:
        raise CastError("null is not allowed", "null")
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        raise CastError("ragged or mixed nested list", describe(value)) from None
    if arr.dtype.kind == "O":
        raise CastError(_object_reason(value), describe(value))
    if arr.dtype.kind == "f" and isinstance(value, (list, tuple)) and _only_ints(value):
        # numpy reads ints past int64 beside small ones as float64, silently rounding them
        try:
            return np.asarray(value, dtype=np.uint64)
        except OverflowError:
            raise CastError("integer out of range", describe(value)) from None
    return arr


def _reject_inexact_ints(value: list[Any] | tuple[Any, ...], arr: np.ndarray, dtype: str) -> None:
    """numpy reads `[16777217, 1.5]` as float64, and the cast to float32 would round the integer:
    an integer beyond the float's exact range is refused wherever it stands in a list, as it is
    in a list of integers alone. (A float is rounded to the width: only integers are exact.)"""
    limit = FLOAT_EXACT_INT[dtype]
    with np.errstate(invalid="ignore"):  # >=: float64 itself reads 2**53 + 1 as 2**53
        if not arr.size or not np.abs(arr).max() >= limit:
            return  # the usual case: one vectorised look, no walk over the list
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool) \
                and abs(int(item)) > limit:
            raise CastError(f"integer too large to be exact in {dtype}",
                            f"{describe(int(item))} in {describe(arr)}")


def _only_ints(value: list[Any] | tuple[Any, ...]) -> bool:
    """Every leaf of a nested list is an int (not a bool); the first leaf decides cheaply."""
    probe: Any = value
    while isinstance(probe, (list, tuple)) and probe:
        probe = probe[0]
    if not isinstance(probe, int) or isinstance(probe, bool):
        return False
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif not isinstance(item, int) or isinstance(item, bool):
            return False
    return True


def _object_reason(value: Any) -> str:
    flat = _flatten_first(value)
    if flat is None:
        return "null is not allowed"
    if isinstance(flat, int):
        return "integer out of range"
    return "ragged or mixed nested list"


def _flatten_first(value: Any) -> Any:
    """The first troublesome leaf (None or a huge int) of a nested list, for a message."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif item is None or (isinstance(item, int) and not isinstance(item, bool)
                              and not -(2**63) <= item < 2**64):
            return item
    return "mixed"


def _auto_dtype(arr: np.ndarray, keep: bool) -> str:
    """The dtype a free-form value gets: numpy keeps its own; JSON ints int64, floats float32."""
    kind = arr.dtype.kind
    if kind in "biuf" and keep:
        return str(arr.dtype)
    if kind == "b":
        return "bool"
    if kind in "iu":
        return "uint64" if arr.dtype == np.uint64 else "int64"
    if kind == "f":
        return "float32"
    if kind == "U":
        return "string"
    raise CastError("not a number, bool or string array", describe(arr))


def _reject_hidden_bools(value: Any, arr: np.ndarray) -> None:
    """numpy turns [1, true] into int64 [1, 1]; `true` is not a number, so look for bools."""
    if isinstance(value, bool):
        raise CastError("a bool is not a number", describe(value))
    if isinstance(value, (list, tuple)) and arr.size and _has_bool(value, arr.ndim):
        raise CastError("a bool is not a number", describe(value))


def _has_bool(value: Any, depth: int) -> bool:
    if depth <= 1:
        return bool in set(map(type, value))
    return any(_has_bool(v, depth - 1) for v in value)


def _cast(arr: np.ndarray, dtype: str, finite: bool = True) -> np.ndarray:
    kind = arr.dtype.kind
    if dtype == "bool":
        if kind != "b":
            raise CastError("not a bool", describe_elements(arr))
        return arr
    if dtype == "string":
        if kind != "U":
            raise CastError("not a string", describe_elements(arr))
        return arr
    if dtype in INT_DTYPES:
        return _cast_int(arr, dtype)
    if dtype in FLOAT_DTYPES:
        return _cast_float(arr, dtype, finite)
    raise SchemaError(f"unknown dtype {dtype!r}")


def _cast_int(arr: np.ndarray, dtype: str) -> np.ndarray:
    kind = arr.dtype.kind
    if kind not in "iu":
        reason = {"f": "not an integer", "c": "not an integer", "b": "a bool is not a number"}.get(
            kind, "not a number")
        raise CastError(reason, describe_elements(arr))
    if arr.dtype == dtype:
        return arr
    target = np.dtype(dtype)
    if not np.can_cast(arr.dtype, target, "safe") and arr.size:
        lo, hi = INT_RANGES[dtype]
        if int(arr.min()) < lo or int(arr.max()) > hi:
            raise CastError(f"out of range for {dtype}", describe_elements(arr))
    return arr.astype(target)


def _cast_float(arr: np.ndarray, dtype: str, finite: bool = True) -> np.ndarray:
    kind = arr.dtype.kind
    if kind not in "fiu":
        reason = "a bool is not a number" if kind == "b" else "not a number"
        raise CastError(reason, describe_elements(arr))
    target = np.dtype("float32" if dtype == "bfloat16" else dtype)
    if kind in "iu" and arr.size:
        limit = FLOAT_EXACT_INT[dtype]
        top, bottom = arr.max(), arr.min()
        if int(top) > limit or int(bottom) < -limit:
            bad = top if int(top) > limit else bottom
            got = describe_elements(arr) if not arr.ndim else \
                f"{describe(int(bad))} in {describe_elements(arr)}"
            raise CastError(f"integer too large to be exact in {dtype}", got)
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr if arr.dtype == target else arr.astype(target)
    if not finite:
        if out is not arr and (np.isfinite(arr) & ~np.isfinite(out)).any():
            raise CastError(f"out of range for {dtype}", describe_elements(arr))
        return out
    if not np.isfinite(out).all():
        bad = arr[~np.isfinite(out)] if arr.ndim else arr
        first = bad.flat[0] if bad.size else arr
        reason = "not finite" if not np.isfinite(first) else f"out of range for {dtype}"
        raise CastError(reason, describe_elements(arr))
    return out


def describe_elements(arr: np.ndarray) -> str:
    """`float64[3]` for an array; the value itself for a 0-d array."""
    if arr.ndim == 0:
        return describe(arr.item())
    return describe(arr)


EMPTY_STRING = "empty string"
"""Why a string field's value is refused when it is empty."""
NON_EMPTY = "a non-empty string"
"""What a problem expects of a string field whose value is empty."""


def scalar_reason(value: Any, dtype: str) -> str:
    """Why a scalar value is not a lossless `dtype` value (for messages); '' if it is."""
    if value is None:
        return "null is not allowed"
    if isinstance(value, np.generic):
        value = value.item()
    if dtype == "bool":
        return "" if isinstance(value, bool) else "not a bool"
    if dtype == "string":
        if not isinstance(value, str):
            return "not a string"
        return "" if value else EMPTY_STRING
    if isinstance(value, bool):
        return "a bool is not a number"
    if dtype in INT_DTYPES:
        if isinstance(value, float):
            return "not an integer"
        if not isinstance(value, int):
            return "not a number"
        lo, hi = INT_RANGES[dtype]
        return "" if lo <= value <= hi else f"out of range for {dtype}"
    if not isinstance(value, (int, float)):
        return "not a number"
    if isinstance(value, int):  # exact, or refused: a float rounds, an integer must not
        return "" if abs(value) <= FLOAT_EXACT_INT[dtype] else \
            f"integer too large to be exact in {dtype}"
    if value != value or value in (float("inf"), float("-inf")):
        return "not finite"
    return "" if abs(value) <= FLOAT_MAX[dtype] else f"out of range for {dtype}"


def expected_text(dtype: str | Sequence[str], shape: Shape) -> str:
    """How a message names what a field expects: `float32[4]`, `int64 or float32[*act]`."""
    names = dtype if isinstance(dtype, str) else " or ".join(dtype)
    if not shape:
        return names
    return names + format_shape(shape)


def sizes_of(bindings: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={format_size(v)}" for k, v in bindings.items())
