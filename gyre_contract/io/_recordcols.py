"""Records held in memory checked as columns of a bulk plan, straight from their values.

Why: a sampler hands the channel's `put` a block of step dicts whose observations are already
numpy arrays. The bulk JSON path (`fastfile`) wrote every record with orjson and decoded the
lines again to check them, most of the cost of a put. For a model with a bulk plan (every field
of one dtype and fixed sizes, no modalities: `CartPoleStep`, or the default `RolloutStep` once
its plan is bound from a first block, `binding`), each field is one list of the records' values:
a tensor is taken as it is when every record holds a numpy array of exactly the plan's dtype
and shape (`np.stack`, floats finite: `columnrules.as_dtype`); a scalar when every record
holds a Python `float` / `int` / `bool` of the field's kind, converted exactly
(`columnrules.scalars`, `narrowed`); a string field Python strings, not empty. The rules across
fields are `columnrules.checked_block`'s, the episode rules the caller's
(`StepChecker.accept`).

Like every bulk path it only ever accepts: a block holding anything else (another type, a numpy
scalar, an array of another dtype or shape, a bool where a number goes, an integer beyond the
exact range of a float field, NaN, a null, a required field missing, a key the plan has no
column for, `info`, an optional non-float field some records lack) gets None and takes the JSON
path, then the record path, which decides and explains.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from gyre_contract.core._registry import declare_fast_path
from gyre_contract.core._switches import fast_paths_enabled
from gyre_contract.io._columnrules import COLUMN_RULES, as_dtype, checked_block, scalars
from gyre_contract.io._fastfile import Block, BulkPlan, coded_ids

RECORDS_FAST_PATH = declare_fast_path("record_columns", kinds=("field", "step"),
                                      implements=COLUMN_RULES)
"""The rules `check_records` implements (`columnrules`): a block that breaks one goes the JSON
path, then record by record."""

_ABSENT = object()


def check_records(plan: BulkPlan, records: Sequence[Any]) -> Block | None:
    """The block of `records` (dicts) checked on the plan's columns (module doc), every number
    column as an array (`Block.arrays`); None when some record may break a rule."""
    n = len(records)
    if not n or not fast_paths_enabled() or not RECORDS_FAST_PATH.usable():
        return None
    if list(map(type, records)).count(dict) != n:
        return None  # a mapping of another class: the record path reads it
    # The keys the block carries: the first record's, when the columns read for them account
    # for every key of every record (the sum of the records' sizes); else (a record carries
    # another key) the union of all the records' keys, once.
    keys = sum(map(len, records))
    first = records[0].keys()
    found = _columns(plan, records, [w for w in plan.wires if w in first])
    if found is not None and sum(found[3].values()) != keys:
        carried = set().union(*records)
        if not carried <= plan.dtypes.keys():
            return None  # a key the plan has no column for (a typo, `info`): the record path
        found = _columns(plan, records, [w for w in plan.wires if w in carried])
    if found is None:
        return None
    return checked_block(plan, n, *found, arrays=True)


def _columns(plan: BulkPlan, records: Sequence[Any], wires: list[str]
             ) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, Sequence[Any]],
                        dict[str, int]] | None:
    """(values, masks, strings, counts) of the `wires` some record carries, each checked
    (module doc); None when some record may break a rule."""
    n = len(records)
    values: dict[str, Any] = {}
    masks: dict[str, np.ndarray] = {}
    strings: dict[str, Sequence[Any]] = {}
    counts: dict[str, int] = {}
    together = _together(records, wires)
    for wire in wires:
        dtype = plan.dtypes.get(wire)
        if dtype is None:
            return None  # a key the plan has no column for (`info`): the record path
        try:
            held = together[wire] if together is not None else \
                list(map(itemgetter(wire), records))
            present = None
        except KeyError:
            if wire in plan.required:
                return None  # field.required: the record path reports it
            column = [r.get(wire, _ABSENT) for r in records]
            present = np.fromiter((v is not _ABSENT for v in column), bool, n)
            held = [v for v in column if v is not _ABSENT]
        if dtype.kind == "U":
            if list(map(type, held)).count(str) != len(held) or not all(held):
                return None  # not a str, or an empty one (field.nonempty_string)
            if wire == "episode_id":
                strings[wire] = coded_ids(held)
            elif present is None:
                strings[wire] = list(held)
            else:
                full: list[Any] = [None] * n
                for i, value in zip(np.flatnonzero(present).tolist(), held):
                    full[i] = value
                strings[wire] = full
            values[wire] = None
        else:
            array = _numbers(held, dtype, plan.shapes[wire], wire in plan.no_ints)
            if array is None:
                return None
            if present is not None:
                if dtype.kind != "f":
                    return None  # a non-float field some records lack: a list in episodes
                out = np.full((n, *plan.shapes[wire]), np.nan, dtype)
                out[present] = array
                array = out
            values[wire] = array
        counts[wire] = len(held)
        masks[wire] = np.ones(n, bool) if present is None else present
    return values, masks, strings, counts


def _together(records: Sequence[Any], wires: list[str]) -> dict[str, Sequence[Any]] | None:
    """Each of `wires` -> its values over the records, in one pass over them (one look-up of
    all the keys a record); None when some record lacks one (then field by field)."""
    if len(wires) < 2:
        return None
    paused = gc.isenabled()  # a tuple per record, freed at once: no cycle to look for
    if paused:
        gc.disable()
    try:
        return dict(zip(wires, zip(*map(itemgetter(*wires), records))))
    except KeyError:
        return None
    finally:
        if paused:
            gc.enable()


def _numbers(held: Sequence[Any], dtype: np.dtype, shape: tuple[int, ...], floats_only: bool
             ) -> np.ndarray | None:
    """One number field's values as an `[count, *shape]` array of `dtype`, or None: scalars
    by `columnrules.scalars`, tensors as numpy arrays of exactly `dtype` and `shape`."""
    if not shape:
        return scalars(held, dtype, floats_only)
    if list(map(type, held)).count(np.ndarray) != len(held):
        return None  # a list, a subclass: the JSON path reads it
    try:  # one pass: casting "no" refuses any array not of exactly `dtype` (byte order too);
        # arrays of another number of dims, or other trailing dims, do not concatenate
        joined = np.concatenate(held, dtype=dtype, casting="no")
    except (TypeError, ValueError):
        return None  # another dtype or rank (field.shape): the JSON or record path decides
    if joined.shape[1:] != shape[1:] or list(map(len, held)).count(shape[0]) != len(held):
        return None  # another shape (field.shape): the record path reports it
    return as_dtype(joined.reshape(len(held), *shape), dtype)
