"""The value forms the compiled fast path (`core.fastpath`) takes, and their conversion.

A tensor field is checked in two halves: a pydantic-core schema checks the elements (strict
nested lists of one dtype, finite floats in the dtype's range, a numpy array's class), and a
Python converter, run once per field by the model's finisher, turns the accepted value into the
normal path's result (a numpy array of the dtype, a numpy scalar).

This module holds the forms of the free-form fields of the generic models, so that the default
`RolloutStep` is as fast as a pinned one:

- an observation (`AnyObservation`): a finite float tensor of any rank up to `MAX_RANK` (nested
  lists of floats, or a numpy array: a float array becomes float32, an integer array keeps its
  dtype), or an object of modalities (each a string, a numpy array, or nested lists of ints or of
  floats);
- a tensor with a choice of one integer and one float dtype (the action: `int64 | float32`, any
  shape): a Python int or float, a numpy scalar of one of the two dtypes, nested lists of ints or
  of floats, a numpy array.

Every choice of these schemas is strict; the normal validation function is the last one, so any
other form is validated there with its exact semantics, and its result passes the converter
unchanged. A converter that meets something it is not sure of raises `GiveUp`: the whole record
then goes to the normal path, which decides and explains. Verdicts and messages are therefore the
normal path's (`tests/core/test_fast_paths.py` runs random records through both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from pydantic_core import core_schema as cs

from gyre_contract.core.dims import FLOAT_DTYPES, FLOAT_MAX, INT_DTYPES, INT_RANGES, numpy_dtype

MAX_RANK = 4
"""Nested lists deeper than this take the normal validation function (still correct, slower)."""

SMALL = 64
"""Float arrays up to this size are checked for finiteness in Python (cheaper than a ufunc)."""

FLOAT32 = np.dtype(np.float32)
INT64 = np.dtype(np.int64)
_CAST_TO_FLOAT32 = (np.dtype(np.float16), np.dtype(np.float64))

Converter = Callable[[Any], Any]


class GiveUp(Exception):
    """Raised inside a fast validation: let the normal path decide and explain."""


def leaf_schema(dtype: str, nonpositive: bool = False) -> dict[str, Any]:
    """One element, strictly: a float tensor refuses ints here (their exactness rule is the
    normal path's), and every float must be finite and within the dtype's range."""
    if dtype == "bool":
        return cs.bool_schema(strict=True)
    if dtype == "string":
        return cs.str_schema(strict=True)
    if dtype in INT_DTYPES:
        return cs.int_schema(strict=True)  # range: numpy raises OverflowError on conversion
    top = FLOAT_MAX[dtype]
    return cs.chain_schema([cs.is_instance_schema(float), cs.float_schema(
        strict=True, allow_inf_nan=False, ge=-top, le=0.0 if nonpositive else top)])


def nested_lists(leaf: dict[str, Any], max_rank: int = MAX_RANK) -> list[dict[str, Any]]:
    """Strict nested lists of `leaf`, one schema per rank 1..max_rank (for a union of choices).

    `fail_fast`: a list of the wrong element type or depth is refused at its first element, so
    trying the ranks and dtypes one after another costs little.
    """
    out, body = [], leaf
    for _ in range(max_rank):
        body = cs.list_schema(body, strict=True, fail_fast=True)
        out.append(body)
    return out


def all_finite(arr: np.ndarray) -> bool:
    """No NaN or infinity. Small arrays: a Python sum (inf - inf and nan stay non-finite)."""
    if arr.size <= SMALL:
        total = sum(arr.ravel().tolist())
        return total - total == 0.0
    return bool(np.isfinite(arr).all())


def _int_leaves(value: list[Any]) -> bool:
    """Whether lists a schema accepted as all ints or all floats hold ints: their first element
    decides. No element at all (`[]`, `[[]]`) reads as float, as numpy and the normal path do."""
    probe: Any = value
    while probe.__class__ is list:
        if not probe:
            return False
        probe = probe[0]
    return not isinstance(probe, float)


def _array(value: list[Any], dtype: np.dtype) -> np.ndarray:
    try:
        return np.array(value, dtype)
    except (ValueError, OverflowError):
        raise GiveUp from None  # ragged, or an int beyond the dtype: the normal path explains


# -- the observation of the generic models ------------------------------------------------------

def observation_schema(normal: dict[str, Any]) -> dict[str, Any]:
    """A float tensor (array or nested float lists), an object of modalities, else `normal`."""
    floats = nested_lists(leaf_schema("float32"))
    modality = cs.union_schema(
        [cs.is_instance_schema(str), cs.is_instance_schema(np.ndarray),
         *nested_lists(cs.int_schema(strict=True)), *floats], mode="left_to_right")
    modalities = cs.dict_schema(cs.str_schema(strict=True), modality, strict=True)
    return cs.union_schema([cs.is_instance_schema(np.ndarray), *floats, modalities, normal],
                           mode="left_to_right")


def convert_observation(value: Any) -> Any:
    """The normal path's result for a value `observation_schema` accepted."""
    cls = value.__class__
    if cls is list:  # floats only: ints or mixed lists took the normal function
        return _array(value, FLOAT32)
    if cls is np.ndarray:
        return _tensor_observation(value)
    if cls is dict:
        return {key: _modality(item) for key, item in value.items()}
    if isinstance(value, np.generic):
        return value  # the normal function's result for a 0-d observation
    raise GiveUp


def _tensor_observation(arr: np.ndarray) -> np.ndarray:
    """float32 as is (finite), float16/float64 cast once, an integer array (an image) as is."""
    dtype = arr.dtype
    if not arr.ndim:
        raise GiveUp  # the normal path gives a numpy scalar
    if dtype == FLOAT32:
        if not all_finite(arr):
            raise GiveUp
        return arr
    if dtype.kind in "iu" and dtype.isnative:
        return arr
    if dtype in _CAST_TO_FLOAT32:
        with np.errstate(over="ignore", invalid="ignore"):
            out = arr.astype(FLOAT32)
        if not all_finite(out):
            raise GiveUp  # NaN, inf or beyond float32's range: the normal path names which
        return out
    raise GiveUp


_KEPT_KINDS = frozenset("biuU")
_KEPT_FLOATS = (np.dtype(np.float16), FLOAT32, np.dtype(np.float64))


def _modality(value: Any) -> Any:
    """One modality: a string as is, an array of its own dtype as is, lists int64 or float32."""
    cls = value.__class__
    if cls is list:
        if _int_leaves(value):
            return _array(value, INT64)  # the schema checked every leaf is a strict int
        return _array(value, FLOAT32)  # [] and [[]] read as float32, as the normal path does
    if cls is np.ndarray:
        dtype = value.dtype
        if not dtype.isnative:
            raise GiveUp
        if dtype.kind in _KEPT_KINDS:
            return value
        if dtype in _KEPT_FLOATS:
            if not all_finite(value):
                raise GiveUp
            return value
        raise GiveUp
    if isinstance(value, str):
        return value
    raise GiveUp


# -- a tensor with a choice of an integer and a float dtype (the generic action) ------------------

def choice_dtypes(dtypes: tuple[str, ...]) -> tuple[str, str] | None:
    """(integer dtype, float dtype) when a tensor's dtypes are one of each, else None."""
    ints = [d for d in dtypes if d in INT_DTYPES]
    floats = [d for d in dtypes if d in FLOAT_DTYPES and d != "bfloat16"]
    if len(dtypes) != 2 or len(ints) != 1 or len(floats) != 1:
        return None
    return ints[0], floats[0]


def choice_schema(int_name: str, float_name: str, normal: dict[str, Any]) -> dict[str, Any]:
    """An array, a numpy scalar of either dtype, a Python int or float, nested lists of ints or
    of floats, else `normal`."""
    lo, hi = INT_RANGES[int_name]
    scalars = (numpy_dtype(int_name).type, numpy_dtype(float_name).type)
    float_leaf = leaf_schema(float_name)
    return cs.union_schema(
        [cs.is_instance_schema(np.ndarray), cs.is_instance_schema(scalars),
         cs.int_schema(strict=True, ge=lo, le=hi), float_leaf,
         *nested_lists(cs.int_schema(strict=True)), *nested_lists(float_leaf), normal],
        mode="left_to_right")


def choice_converter(int_name: str, float_name: str, fixed: Callable[[tuple[int, ...]], bool]
                     ) -> Converter:
    """The normal path's result for a value `choice_schema` accepted. `fixed(shape)` says
    whether an array's shape has the declared rank and fixed dims."""
    int_dtype, float_dtype = numpy_dtype(int_name), numpy_dtype(float_name)
    int_type, float_type = int_dtype.type, float_dtype.type
    others = tuple(numpy_dtype(d) for d in FLOAT_DTYPES if d not in ("bfloat16", float_name))

    def convert(value: Any) -> Any:
        cls = value.__class__
        if cls is int:
            return int_type(value)
        if cls is float:
            return float_type(value)
        if cls is list:
            arr = _array(value, int_dtype if _int_leaves(value) else float_dtype)
            if not fixed(arr.shape):
                raise GiveUp
            return arr
        if cls is np.ndarray:
            return from_array(value)
        if cls is int_type:
            return value
        if cls is float_type:
            if value - value != 0:
                raise GiveUp
            return value
        raise GiveUp

    def from_array(arr: np.ndarray) -> np.ndarray:
        dtype = arr.dtype
        if not arr.ndim or not fixed(arr.shape):
            raise GiveUp  # a 0-d array: the normal path gives a numpy scalar
        if dtype == int_dtype:
            return arr
        if dtype == float_dtype:
            if not all_finite(arr):
                raise GiveUp
            return arr
        if dtype.kind in "iu" and dtype.isnative and np.can_cast(dtype, int_dtype, "safe"):
            return arr.astype(int_dtype)
        if dtype in others:
            with np.errstate(over="ignore", invalid="ignore"):
                out = arr.astype(float_dtype)
            if not all_finite(out):
                raise GiveUp
            return out
        raise GiveUp

    return convert
