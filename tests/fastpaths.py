"""Helpers for tests that compare the fast paths with the explaining paths: `fast_paths(on)`
switches them on or off for a block of a test, as `GYRE_FAST_PATHS` does for a process (the
switch follows the variable), then back; `report_both_ways` is a file's report with them on,
asserted identical with them off; `same_arrays` asserts two batches hold the same arrays."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from gyre_contract import validate_file


@contextmanager
def fast_paths(on: bool) -> Iterator[None]:
    with mock.patch.dict(os.environ, {"GYRE_FAST_PATHS": "1" if on else "0"}):
        yield


def report_both_ways(path: Path, model: type, *, examples: int = 100) -> dict[str, Any]:
    """The whole report as data (the path left out: twins have their own names) with the fast
    paths on; asserts the report with them off is identical."""
    found = []
    for on in (True, False):
        with fast_paths(on):
            report = validate_file(path, model, max_examples_per_group=examples).to_dict()
        report.pop("path")
        found.append(report)
    assert found[0] == found[1], path.name
    return found[0]


def same_arrays(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> None:
    """The same keys in the same order, each array of the same dtype, shape and values."""
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert a[key].shape == b[key].shape, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
