"""The public dtype and shape rules that diff and compat share."""

from __future__ import annotations

import pytest

from gyre_contract.schema._dtyperules import (
    dtype_kind,
    dtypes_of,
    fits,
    lossless,
    narrowing,
    readable,
)
from gyre_contract.schema._shaperules import compare_shape, shapes_match, static_rank, strip_batch_dims


@pytest.mark.parametrize(("s", "t", "fit", "keeps", "narrows"), [
    ("float32", "float32", True, True, False),
    ("float32", "number", True, True, False),      # a JSON number of unknown width
    ("int32", "integer", True, True, False),
    ("int32", "int64", False, True, False),
    ("int64", "int32", False, False, True),
    ("float64", "float32", False, False, True),
    ("uint8", "int16", False, True, False),
    ("uint16", "int16", False, False, False),
    ("int32", "float64", False, True, False),
    ("int32", "float32", False, False, False),     # beyond 2**24 an int32 does not fit
    ("bool", "float32", False, True, False),
    ("float32", "bool", False, False, False),
    ("float32", "int64", False, False, False),
    ("string", "int64", False, None, False),       # no cast at all
])
def test_fits_lossless_narrowing(s: str, t: str, fit: bool, keeps: bool | None,
                                 narrows: bool) -> None:
    assert fits(s, t) is fit
    if not fit:
        assert lossless(s, t) is keeps
    assert narrowing(s, t) is narrows


def test_bfloat16_to_float16_is_lossy() -> None:
    """Same width, but bfloat16's 8 exponent bits overflow float16's 5 (1e5 becomes inf), and
    float16's 11 significand bits do not fit bfloat16's 8: lossy both ways."""
    assert lossless("bfloat16", "float16") is False
    assert lossless("float16", "bfloat16") is False
    assert lossless("bfloat16", "float32") is True and lossless("float16", "float32") is True
    assert not readable("bfloat16", "float16")


def test_kinds_and_tuples() -> None:
    assert [dtype_kind(d) for d in ("bool", "number", "uint8", "string")] == \
        ["bool", "float", "int", "string"]
    assert dtypes_of(None) == () and dtypes_of("int64") == ("int64",)
    assert dtypes_of(("int64", "float32")) == ("int64", "float32")


def test_readable_is_what_compat_calls_a_safe_read() -> None:
    assert readable("int32", "int64") and not readable("int64", "int32")
    assert readable(("int32", "float32"), ("int64", "float64"))
    assert not readable(("int32", "float64"), ("int64", "float32"))
    assert readable(None, "int64")  # unknown: nothing to refuse


def test_shape_rules() -> None:
    assert shapes_match(("A", 4), (3, 4)) and not shapes_match((3,), (4,))
    assert shapes_match(("*obs",), (2, 3)) and shapes_match((), ("*rest",))
    assert compare_shape((), (1,)).op == "unsqueeze"
    assert compare_shape((4, 1), (4,)).op == "squeeze"
    assert compare_shape(("A",), ("A",), varying=("A",)).op == "pad"
    assert not compare_shape((3,), (4,)).ok
    assert static_rank(("*x", 2)) is None and static_rank((2, 3)) == 2
    assert strip_batch_dims(("B", "T", 4), ("B", "T")) == ((4,), 2)
    assert strip_batch_dims(("T", 4), ("B", "T")) == (("T", 4), 0)  # named dims must line up
