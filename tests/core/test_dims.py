"""Shape grammar, dim binding and the lossless-cast rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyre_contract.core._dims import (
    CastError,
    Dim,
    bind_dims,
    format_shape,
    numpy_dtype,
    parse_shape,
    scalar_reason,
    shape_mismatch,
    to_array,
)
from gyre_contract.core._errors import SchemaError


def test_shape_grammar():
    assert parse_shape(["B", "T", "*obs"]) == (Dim(name="B"), Dim(name="T"),
                                               Dim(name="obs", variadic=True))
    assert parse_shape([4, "4"]) == (Dim(size=4), Dim(size=4))
    assert parse_shape("B T 3") == parse_shape(["B", "T", 3])
    assert format_shape(parse_shape(["B", 2, "*x"])) == "[B, 2, *x]"
    assert parse_shape([]) == ()


@pytest.mark.parametrize("bad", [[-1], ["1x"], ["*a", "*b"], [True], [1.5], ["a-b"]])
def test_bad_shapes_are_schema_errors(bad):
    with pytest.raises(SchemaError):
        parse_shape(bad)


def test_binding_within_and_across_fields():
    bindings: dict = {}
    assert bind_dims(parse_shape(["A"]), (3,), bindings) == []
    assert bind_dims(parse_shape(["A", "*rest"]), (3, 2, 2), bindings) == []
    assert bindings == {"A": 3, "rest": (2, 2)}
    assert bind_dims(parse_shape(["A"]), (4,), bindings) == [("A", 3, 4)]
    assert bind_dims(parse_shape(["*rest"]), (2,), bindings) == [("rest", (2, 2), (2,))]
    assert bind_dims(parse_shape(["A"]), (4,), bindings, skip=["A"]) == []


def test_shape_mismatch():
    assert shape_mismatch(parse_shape([4]), (4,)) is None
    assert shape_mismatch(parse_shape([4]), (3,)) == "wrong shape"
    assert shape_mismatch(parse_shape([4]), (1, 4)) == "wrong rank"
    assert shape_mismatch(parse_shape(["B", "*x", 2]), (5, 2)) is None
    assert shape_mismatch(parse_shape(["B", "*x", 2]), (5,)) == "wrong rank"


@pytest.mark.parametrize(("value", "dtype", "reason"), [
    (1.5, "int64", "not an integer"),
    (300, "uint8", "out of range for uint8"),
    (-1, "uint8", "out of range for uint8"),
    (True, "float32", "a bool is not a number"),
    ("1", "int64", "not a number"),
    (None, "float32", "null is not allowed"),
    ([1, True], "int64", "a bool is not a number"),
    ([[1, 2], [True, 3]], "float32", "a bool is not a number"),
    ([1.0, float("inf")], "float32", "not finite"),
    ([1e39], "float32", "out of range for float32"),
    ([2**64], "uint64", "integer out of range"),
    ([1, 0], "bool", "not a bool"),
    ([1, 2], "string", "not a string"),
])
def test_lossy_casts_are_refused(value, dtype, reason):
    with pytest.raises(CastError) as info:
        to_array(value, dtype)
    assert info.value.reason == reason


@pytest.mark.parametrize(("value", "dtype", "out"), [
    ([1, 2], "float32", np.float32), ([0, 255], "uint8", np.uint8), ([True], "bool", np.bool_),
    (np.array([1, 2], np.int32), "int64", np.int64), ([0.1], "float32", np.float32),
    (np.array([1.0], np.float64), "float16", np.float16), (["a"], "string", np.str_),
])
def test_lossless_casts_are_made(value, dtype, out):
    assert to_array(value, dtype).dtype.type is out


def test_scalar_reasons_match_array_reasons():
    for value, dtype in [(1.5, "int64"), (300, "uint8"), (True, "float32"), ("1", "int64"),
                         (float("nan"), "float32"), (None, "bool")]:
        with pytest.raises(CastError) as info:
            to_array(value, dtype)
        assert scalar_reason(value, dtype) == info.value.reason
    assert scalar_reason(3, "int8") == ""


def test_numpy_dtype():
    assert numpy_dtype("string") == np.dtype(np.str_)
    with pytest.raises(SchemaError, match="bfloat16 cannot be held"):
        numpy_dtype("bfloat16")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-(2**70), 2**70), max_size=5),
       st.sampled_from(["int8", "uint8", "int64", "uint64", "float32"]))
def test_integer_cast_is_exact_or_refused(values, dtype):
    try:
        arr = to_array(values, dtype)
    except CastError:
        return
    assert [int(v) for v in arr.tolist()] == values
