"""The value forms the compiled fast path (`core._fastpath`) takes, and their conversion.

A tensor field's fast schema is a union of strict forms (nested lists of one dtype with finite
floats in the dtype's range, a numpy array, a scalar), tried left to right, each followed by the
conversion that gives the normal path's result directly (`np.array(value, dtype)` called from
pydantic-core, a numpy scalar type, an array check): no Python loop over the fields afterwards.

This module holds the forms of the free-form fields of the generic models, so that the default
`RolloutStep` is as fast as a pinned one, and of any tensor of one dtype and shape `[*name]`
(the generic `logprob`):

- an observation (`AnyObservation`): a finite float tensor of any rank up to `MAX_RANK` (nested
  lists of floats, or a numpy array: a float array becomes float32, an integer array keeps its
  dtype), or an object of modalities (each a string, a numpy array, or nested lists of ints or of
  floats);
- a tensor with a choice of one integer and one float dtype (the action: `int64 | float32`, any
  shape): a Python int or float, a numpy scalar of one of the two dtypes, nested lists of ints or
  of floats, a numpy array.

A tensor of one dtype and fixed dims (a pinned `[4]`, `[A]`, `[B, 2]`) is checked as strict
nested lists of exactly that rank and those sizes and converted the same way (`tensor_schema`);
only a fixed-dims log-prob whose elements are checked <= 0 stays a list, for the model's
finisher (`field_converters`), which then knows it needs no sign check.

Every choice of these schemas is strict; the normal validation function is the last one, so any
other form (or a list numpy finds ragged) is validated there with its exact semantics. An array
check that meets something it is not sure of raises `GiveUp`: the whole record then goes to the
normal path, which decides and explains. Verdicts and messages are therefore the
normal path's (`tests/core/test_fast_paths.py` runs random records through both).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from pydantic import BaseModel
from pydantic_core import core_schema as cs

from gyre_contract.core._dims import (
    FLOAT_DTYPES,
    FLOAT_MAX,
    INT_DTYPES,
    INT_RANGES,
    Shape,
    numpy_dtype,
)
from gyre_contract.core._fields import AnyObservation, field_specs
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._tensor import TensorSpec

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


def leaf_schema(dtype: str, nonpositive: bool = False) -> cs.CoreSchema:
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


def nested_lists(leaf: cs.CoreSchema, max_rank: int = MAX_RANK, nonempty: bool = False
                 ) -> list[cs.CoreSchema]:
    """Strict nested lists of `leaf`, one schema per rank 1..max_rank (for a union of choices).

    `fail_fast`: a list of the wrong element type or depth is refused at its first element, so
    trying the ranks and dtypes one after another costs little. `nonempty`: no list may be empty
    (numpy reads `[]` as float64, so an empty list of another dtype is the normal path's).
    """
    out: list[cs.CoreSchema] = []
    body = leaf
    for _ in range(max_rank):
        body = cs.list_schema(body, strict=True, fail_fast=True, min_length=1 if nonempty else None)
        out.append(body)
    return out


def as_array(dtype: np.dtype, lists: list[cs.CoreSchema]) -> list[cs.CoreSchema]:
    """Each list schema followed by `np.array(value, dtype)`, called from pydantic-core.

    numpy raises ValueError on ragged lists: pydantic-core then tries the next choice (in the
    end the normal function, which explains). An int beyond an integer dtype's range (numpy's
    OverflowError) gives up: checking the range in the schema would cost four times the check of
    a strict int.
    """
    return [cs.no_info_after_validator_function(_array_of(dtype), body) for body in lists]


def _array_of(dtype: np.dtype) -> Converter:
    """`np.array(value, dtype)` as a closure: called from pydantic-core, a closure with
    positional arguments costs half of a `functools.partial` with a keyword."""
    array = np.array
    if dtype.kind == "U":
        return array  # numpy sizes the strings itself
    if dtype.kind not in "iu":
        return lambda value: array(value, dtype)

    def ints(value: list[Any]) -> np.ndarray:
        try:
            return array(value, dtype)
        except OverflowError:
            raise GiveUp from None

    return ints


def then(function: Callable[[Any], Any], schema: cs.CoreSchema) -> cs.CoreSchema:
    """`schema`, then `function` on its result (called from pydantic-core)."""
    return cs.no_info_after_validator_function(function, schema)


def bounded_int(dtype: str) -> cs.CoreSchema:
    """A strict int within the dtype's range: numpy's conversion cannot overflow. (For a scalar:
    on each element of a list the range check costs more than the rest of the validation.)"""
    lo, hi = INT_RANGES[dtype]
    return cs.int_schema(strict=True, ge=lo, le=hi)


def scalar_choices(node: cs.CoreSchema) -> cs.CoreSchema:
    """A gyre scalar's schema (`tensor.scalar_core_schema`) as one left-to-right union of its
    choices: a float32 scalar takes ~70 ns instead of ~100.

    The normal schema nests them in a union of pydantic's smart mode, which tries every choice
    that is not an exact match and names one error for them all. The fast plan needs neither:
    it only accepts, and each choice is strict and accepts what the others refuse, or the same
    value (`tests/core/test_fast_paths.py` compares the two on every scalar dtype).
    """
    choices: list[Any] = []
    for choice in node["choices"]:
        nested = isinstance(choice, dict) and choice.get("type") == "union" \
            and choice.get("mode") == "left_to_right" and "custom_error_type" not in choice
        choices += choice["choices"] if nested else [choice]
    return cs.union_schema(choices, mode="left_to_right")


def all_finite(arr: np.ndarray) -> bool:
    """No NaN or infinity. Small arrays: a Python sum (inf - inf and nan stay non-finite)."""
    if arr.size <= SMALL:
        total = sum(arr.ravel().tolist())
        return total - total == 0.0
    return bool(np.isfinite(arr).all())


# -- the observation of the generic models ------------------------------------------------------

def observation_schema(normal: cs.CoreSchema) -> cs.CoreSchema:
    """A float tensor (array or nested float lists), an object of modalities, else `normal`.

    The choices are disjoint; the usual ones come first (a failed choice costs an error object).
    """
    floats = as_array(FLOAT32, nested_lists(leaf_schema("float32")))
    ints = as_array(INT64, nested_lists(cs.int_schema(strict=True), nonempty=True))
    modality = cs.union_schema(
        [ints[0], cs.is_instance_schema(str), then(_modality_array, cs.is_instance_schema(np.ndarray)),
         floats[0], *ints[1:], *floats[1:]], mode="left_to_right")
    modalities = cs.dict_schema(cs.str_schema(strict=True), modality, strict=True)
    return cs.union_schema(
        [floats[0], then(_observation_array, cs.is_instance_schema(np.ndarray)), modalities,
         *floats[1:], normal], mode="left_to_right")


def _observation_array(arr: np.ndarray) -> np.ndarray:
    """float32 as is (finite), float16/float64 cast once, an integer array (an image) as is."""
    dtype = arr.dtype
    if not arr.ndim or arr.__class__ is not np.ndarray:
        raise GiveUp  # the normal path gives a numpy scalar; a subclass is the normal path's
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


def _modality_array(arr: np.ndarray) -> np.ndarray:
    """An array modality keeps its own dtype (a float one must be finite)."""
    dtype = arr.dtype
    if not dtype.isnative or arr.__class__ is not np.ndarray:
        raise GiveUp
    if dtype.kind in _KEPT_KINDS:
        return arr
    if dtype in _KEPT_FLOATS and all_finite(arr):
        return arr
    raise GiveUp


# -- a tensor with a choice of an integer and a float dtype (the generic action) ------------------

def choice_dtypes(dtypes: tuple[str, ...]) -> tuple[str, str] | None:
    """(integer dtype, float dtype) when a tensor's dtypes are one of each, else None."""
    ints = [d for d in dtypes if d in INT_DTYPES]
    floats = [d for d in dtypes if d in FLOAT_DTYPES and d != "bfloat16"]
    if len(dtypes) != 2 or len(ints) != 1 or len(floats) != 1:
        return None
    return ints[0], floats[0]


def choice_schema(int_name: str, float_name: str, normal: cs.CoreSchema) -> cs.CoreSchema:
    """For a `[*name]` tensor of an int or a float dtype: an array, a numpy scalar of either
    dtype, a Python int or float, nested lists of ints or of floats, else `normal`. Lists of
    ints become the int dtype, every other list (`[]` too) the float one, as on the normal path."""
    int_dtype, float_dtype = numpy_dtype(int_name), numpy_dtype(float_name)
    float_leaf = leaf_schema(float_name)
    ints = as_array(int_dtype, nested_lists(cs.int_schema(strict=True), nonempty=True))
    floats = as_array(float_dtype, nested_lists(float_leaf))
    return cs.union_schema(
        [then(numpy_ints(int_dtype), bounded_int(int_name)), ints[0],
         then(float_scalar(float_dtype), float_leaf), floats[0],
         then(_choice_array(int_dtype, float_dtype), cs.is_instance_schema(np.ndarray)),
         cs.is_instance_schema(int_dtype.type),
         then(_finite_scalar, cs.is_instance_schema(float_dtype.type)),
         *ints[1:], *floats[1:], normal],
        mode="left_to_right")


class _NumpyInts(dict[int, Any]):
    """Python int -> numpy scalar of one dtype; small ones made once (numpy scalars are
    immutable, so sharing one is safe), the others on demand."""

    def __init__(self, dtype: np.dtype) -> None:
        lo, hi = INT_RANGES[dtype.name]
        make = self.make = dtype.type
        super().__init__((i, make(i)) for i in range(max(lo, -256), min(hi, 4096) + 1))

    def __missing__(self, key: int) -> Any:
        return self.make(key)


_NUMPY_INTS: dict[np.dtype, _NumpyInts] = {}


def numpy_ints(dtype: np.dtype) -> Callable[[int], Any]:
    """`dtype.type(value)` for a Python int of the dtype's range, faster for small values
    (a discrete action, a token id: the table lookup costs a tenth of making the scalar)."""
    table = _NUMPY_INTS.get(dtype)
    if table is None:
        table = _NUMPY_INTS[dtype] = _NumpyInts(dtype)
    return table.__getitem__


def float_scalar(dtype: np.dtype) -> Converter:
    """`dtype.type(value)` for a Python float within the dtype's range, four times faster.

    Under numpy 2's promotion rules (NEP 50) `one * value` is that scalar: the Python float is
    cast to the dtype (the constructor's rounding), then multiplied by one, exactly. Older numpy
    promotes to float64 there, and gets the constructor.
    """
    one = dtype.type(1.0)
    probe = one * 0.1
    if probe.__class__ is dtype.type and probe == dtype.type(0.1):
        return one.__mul__
    return dtype.type


def _finite_scalar(value: Any) -> Any:
    # math.isfinite, not `value - value != 0`: inf - inf on a numpy scalar warns (RuntimeWarning)
    if not math.isfinite(value):
        raise GiveUp  # NaN or infinity
    return value


def _choice_array(int_dtype: np.dtype, float_dtype: np.dtype) -> Converter:
    others = tuple(numpy_dtype(d) for d in FLOAT_DTYPES
                   if d != "bfloat16" and numpy_dtype(d) != float_dtype)

    def check(arr: np.ndarray) -> np.ndarray:
        dtype = arr.dtype
        if not arr.ndim or arr.__class__ is not np.ndarray:
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

    return check


# -- a tensor of one dtype and shape [*name] (the generic logprob) --------------------------------

def lone_schema(dtype: str, leaf: cs.CoreSchema, check_array: Converter,
                normal: cs.CoreSchema, raw_scalar: bool = False) -> cs.CoreSchema:
    """A scalar (`leaf`, as the dtype's numpy scalar; left a Python scalar with `raw_scalar`, for
    the model's finisher to check and convert), nested lists of `leaf` of any rank, an array
    (`check_array`), else `normal`."""
    np_dtype = numpy_dtype(dtype)
    if dtype in INT_DTYPES:
        scalar = then(numpy_ints(np_dtype), bounded_int(dtype))
    elif np_dtype.kind == "f":
        scalar = leaf if raw_scalar else then(float_scalar(np_dtype), leaf)
    else:  # bool, string
        scalar = then(np_dtype.type, leaf)
    lists = as_array(np_dtype, nested_lists(leaf, nonempty=np_dtype.kind != "f"))
    return cs.union_schema(
        [scalar, lists[0], then(check_array, cs.is_instance_schema(np.ndarray)), *lists[1:],
         normal], mode="left_to_right")


# -- the tensor fields of any model: schema, then conversion by the model's finisher ----------------

def tensor_schema(spec: TensorSpec, normal: cs.CoreSchema, nonpositive: bool = False,
                   raw_scalar: bool = False) -> cs.CoreSchema:
    """A numpy array (checked later), strict nested lists of the dtype, else the normal function.

    Only single-dtype tensors get the list forms; the normal function (last choice) handles every
    other form with its exact semantics, and its result passes the finisher unchanged.
    """
    if lone_tensor(spec):  # [*name]: a scalar or nested lists of any rank
        pair = choice_dtypes(spec.dtypes)
        if pair is not None:
            return choice_schema(*pair, normal)  # int64 | float32 [*act]
        dtype = spec.dtypes[0]  # one dtype (`lone_tensor`)
        leaf = leaf_schema(dtype, nonpositive)
        return lone_schema(dtype, leaf, TensorForms("", spec).from_array, normal, raw_scalar)
    if final_in_schema(spec, nonpositive):  # fixed dims ([4], [A]): the lists, then an array
        dtype = spec.dtypes[0]  # one dtype (`final_in_schema`)
        np_dtype = numpy_dtype(dtype)
        lists = nested_fixed(leaf_schema(dtype, nonpositive), spec.shape,
                             nonempty=np_dtype.kind != "f")
        return cs.union_schema(
            [*as_array(np_dtype, [lists]),
             then(TensorForms("", spec).from_array, cs.is_instance_schema(np.ndarray)), normal],
            mode="left_to_right")
    fixed = [nested_fixed(leaf_schema(spec.dtype, nonpositive), spec.shape)] \
        if isinstance(spec.dtype, str) and not any(d.variadic for d in spec.shape) else []
    return cs.union_schema([cs.is_instance_schema(np.ndarray), *fixed, normal],
                           mode="left_to_right")


def final_in_schema(spec: Any, nonpositive: bool = False) -> bool:
    """Whether the fast schema of a field gives the normal path's value itself (a free
    observation, a `[*name]` tensor, a tensor of one dtype and fixed dims), so that the finisher
    converts nothing. A fixed-dims log-prob whose list elements are checked <= 0 (`nonpositive`)
    stays a list for the finisher, which then knows it needs no sign check."""
    if isinstance(spec, AnyObservation):
        return not spec.lead
    if lone_tensor(spec):
        return True
    return isinstance(spec, TensorSpec) and not nonpositive and bool(spec.shape) \
        and isinstance(spec.dtype, str) and spec.dtype != "bfloat16" \
        and not any(d.variadic for d in spec.shape)


def lone_tensor(spec: Any) -> bool:
    """A `[*name]` tensor of one dtype, or of an int and a float dtype (`lone_schema`,
    `choice_schema`)."""
    if not isinstance(spec, TensorSpec) or len(spec.shape) != 1 or not spec.shape[0].variadic:
        return False
    if choice_dtypes(spec.dtypes) is not None:
        return True
    return isinstance(spec.dtype, str) and spec.dtype != "bfloat16"


def nested_fixed(leaf: cs.CoreSchema, shape: Shape, nonempty: bool = False) -> cs.CoreSchema:
    """Strict nested lists of `leaf` of exactly `shape`'s rank and fixed sizes. `nonempty`: no
    list may be empty (numpy reads `[]` as float64: an empty list of another dtype is the normal
    path's)."""
    body = leaf
    for dim in reversed(shape):
        low = dim.size if dim.size is not None else 0
        body = cs.list_schema(body, strict=True, min_length=max(low, 1) if nonempty else dim.size,
                              max_length=dim.size)
    return body


class TensorForms:
    """Turns a tensor field's fast-validated value into the normal path's result."""

    def __init__(self, attr: str, spec: TensorSpec) -> None:
        self.attr = attr
        self.spec = spec
        self.dtypes = tuple(numpy_dtype(d) for d in spec.dtypes if d != "bfloat16")
        self.single = self.dtypes[0] if len(self.dtypes) == 1 and isinstance(spec.dtype, str) \
            else None
        self.float = all(d in FLOAT_DTYPES for d in spec.dtypes)
        self.rank = len(spec.shape)
        self.variadic = any(d.variadic for d in spec.shape)
        self.fixed = _fixed_positions(spec.shape)

    def convert(self, value: Any) -> Any:
        if value.__class__ is list:
            return self._from_list(value)
        if value.__class__ is np.ndarray:
            return self.from_array(value)
        if isinstance(value, np.generic):
            return value  # the normal function's 0-d result (a numpy scalar of the dtype)
        if self.single is not None and value.__class__ in (float, int, bool, str):
            try:
                return self.single.type(value)  # a scalar for a lone *name: np.asarray(v)[()]
            except OverflowError:
                raise GiveUp from None
        raise GiveUp

    def _from_list(self, value: list[Any]) -> np.ndarray:
        dtype = self.single
        if dtype is None:
            raise GiveUp
        try:
            arr = np.array(value, dtype=None if dtype.kind == "U" else dtype)
        except (ValueError, TypeError, OverflowError):
            raise GiveUp from None  # ragged, or an int out of range: the normal path explains
        if arr.ndim != len(self.spec.shape) and not self.variadic:
            raise GiveUp
        if not arr.size and dtype.kind != "f":
            raise GiveUp  # numpy reads [] as float64; the normal path decides
        return arr

    def from_array(self, arr: np.ndarray) -> np.ndarray:
        dtype = arr.dtype
        if dtype not in self.dtypes and not (dtype.kind == "U" == self.dtypes[0].kind):
            if not (self.float and dtype.kind == "f" and self.single is not None):
                raise GiveUp
            with np.errstate(over="ignore", invalid="ignore"):
                arr = arr.astype(self.single)
            dtype = arr.dtype
        if arr.ndim == 0 or not self.shape_ok(arr.shape):
            raise GiveUp
        if dtype.kind == "f" and self.spec.finite and not all_finite(arr):
            raise GiveUp
        return arr

    def shape_ok(self, shape: tuple[int, ...]) -> bool:
        if self.variadic:
            if len(shape) < self.rank - 1:
                return False
        elif len(shape) != self.rank:
            return False
        for at, size in self.fixed:
            if shape[at] != size:
                return False
        return True


def _fixed_positions(shape: Shape) -> tuple[tuple[int, int], ...]:
    """(axis, size) of each fixed dim; axes after a *name count from the end (negative)."""
    out = []
    at = next((i for i, d in enumerate(shape) if d.variadic), None)
    for i, dim in enumerate(shape):
        if dim.size is not None:
            out.append((i if at is None or i < at else i - len(shape), dim.size))
    return tuple(out)


def field_converters(model: type[BaseModel], nonpositive: frozenset[int] | set[int] = frozenset()
                     ) -> list[tuple[str, Converter]]:
    """(attribute, converter) for each tensor field that is not a plain scalar, except those
    whose schema gives the final value (`final_in_schema`; `nonpositive`: the ids of the specs
    whose list elements are checked <= 0)."""
    info = model_info(model)
    return [(info.attr(wire), converter(spec)) for wire, spec in field_specs(model).items()
            if isinstance(spec, TensorSpec) and not spec.is_scalar
            and not final_in_schema(spec, id(spec) in nonpositive)]


def converter(spec: TensorSpec) -> Converter:
    """The general `TensorForms.convert`, behind a shortcut for the usual form when there is one."""
    general = TensorForms("", spec).convert
    dtype = numpy_dtype(spec.dtype) if isinstance(spec.dtype, str) else None
    if dtype is None or dtype.kind == "U":
        return general
    array = np.array
    if all(d.size for d in spec.shape):  # fixed, non-zero dims: the list is exactly in shape

        def fixed(value: Any) -> Any:
            if value.__class__ is list:
                try:
                    return array(value, dtype)
                except OverflowError:  # an int beyond the dtype's range
                    raise GiveUp from None
            return general(value)

        return fixed
    if len(spec.shape) == 1 and not spec.shape[0].variadic:  # [N]: a flat list cannot be ragged

        def flat(value: Any) -> Any:
            if value.__class__ is list:
                try:
                    out = array(value, dtype)
                except OverflowError:
                    raise GiveUp from None
                if not value and dtype.kind != "f":
                    raise GiveUp  # numpy reads [] as float64; the normal path decides
                return out
            return general(value)

        return flat
    return general


def _convert_all(converters: list[tuple[str, Converter]], values: dict[str, Any]) -> None:
    for attr, convert in converters:
        value = values[attr]
        if value is not None:
            values[attr] = convert(value)


def modalities_finisher(model: type[BaseModel]) -> Callable[[Any], Any]:
    """Convert the tensors, then build the instance as pydantic-core's model node would."""
    converters = field_converters(model)
    new, set_slot = model.__new__, object.__setattr__

    def finish(fields: tuple[dict[str, Any], Any, set[str]]) -> Any:
        values, extra, fields_set = fields
        _convert_all(converters, values)
        instance = new(model)
        set_slot(instance, "__dict__", values)
        set_slot(instance, "__pydantic_extra__", extra)
        set_slot(instance, "__pydantic_fields_set__", fields_set)
        set_slot(instance, "__pydantic_private__", None)
        return instance

    return finish
