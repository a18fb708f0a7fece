"""`columnrules._lengths_ok` (a list column's values all of one size) = pyarrow's kernels, for
list and large-list columns, sliced, with nulls, empty."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyre_contract.io._columnrules import _lengths_ok

pa = pytest.importorskip("pyarrow")
pc = pytest.importorskip("pyarrow.compute")


def kernels(column, size: int) -> bool:
    bounds = pc.min_max(pc.list_value_length(column)).as_py()
    return bool(bounds["min"] == bounds["max"] == size)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(lengths=st.lists(st.one_of(st.none(), st.integers(0, 5)), max_size=30),
       large=st.booleans(), start=st.integers(0, 5), size=st.integers(0, 5))
def test_lengths_ok_is_pyarrows_answer(lengths, large, start, size):
    values = [None if k is None else [0.5] * k for k in lengths]
    kind = pa.large_list(pa.float64()) if large else pa.list_(pa.float64())
    column = pa.array(values, kind).slice(start)
    assert _lengths_ok(column, size) == kernels(column, size)


def test_fixed_size_lists_hold_their_size():
    column = pa.array([[1.0, 2.0]], pa.list_(pa.float64(), 2))
    assert _lengths_ok(column, 2)
