"""The field and step rules of a bulk plan checked on Arrow columns, a block of records at a time.

Why: records held as Arrow columns (a Parquet record batch, `parquetcols`; a chunk of JSON Lines
read by pyarrow's JSON reader, `arrowlines`) are already typed arrays: the rules of a simple
model are a few vectorised looks at them, where the row path builds and validates one record
at a time. For a plan (`fastfile.BulkPlan`: every field of one dtype and fixed sizes, no
modalities), `check_columns` looks at each column once: nulls (a required column with one, one
inside a list), list lengths (the plan's sizes), numbers (floats finite; with `widened`, columns
read as float64 / int64 must narrow to the plan's dtype exactly: a float within the range where
the dtype holds an integer exactly, an integer within the dtype's range), strings not empty, and
log-probabilities <= 0 under a discrete action. The episode rules are `EpisodeTracker
.add_columns`'s, applied by the caller to the `Block` this gives.

Like every bulk path it only ever accepts: a block holding anything else gets None, and the
caller reads it record by record with the explaining path, which decides and explains. pyarrow
is imported inside the functions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gyre_contract.core._dims import FLOAT_EXACT_INT, INT_RANGES
from gyre_contract.core._rules import FIELD_RULES
from gyre_contract.io._arrownumpy import numpy_of, valid_mask
from gyre_contract.io._fastfile import SIGNED, Block, BulkPlan, CodedIds

COLUMN_RULES = (
    *(r.name for r in FIELD_RULES),  # typed columns, `_checked`, the strings' lengths
    "step.dims_agree",  # a plan has no named dims
    "step.logprob_shape",  # a scalar logprob column
    "step.logprob_nonpositive",  # SIGNED
    "step.ref_logprob_nonpositive",  # SIGNED
    "step.token_fields_shape",  # the plan's fixed shapes (`fastfile.bound_specs`,
    # `binding._consistent`), and columns of exactly those shapes
    "step.next_observation_structure", "step.next_observation_modalities",
    "step.next_observation_shape")  # one fixed type for both columns
"""The rules `check_columns` implements (a block that breaks one gets None)."""


def check_columns(plan: BulkPlan, columns: list[tuple[str, Any]], n: int, *, arrays: bool,
                  widened: bool = False, counts: dict[str, int] | None = None) -> Block | None:
    """The block of `n` records whose columns (name, Arrow array) are `columns`, checked
    (module doc); None when some record may break a rule. `arrays`: keep each field's array
    (`Block.arrays`). `widened`: numbers were read as float64 / int64 and must narrow to the
    plan's dtypes exactly. `counts`: how many records carry each column checked elsewhere
    (Parquet's `info`)."""
    import pyarrow.compute as pc

    if n == 0:
        return None
    counts = dict(counts or {})
    values: dict[str, Any] = {}
    masks: dict[str, np.ndarray] = {}
    strings: dict[str, Sequence[Any]] = {}
    for name, column in columns:
        nulls = column.null_count
        if nulls and name in plan.required:
            return None  # a required null (or a record without the field): the row path
        if nulls == n:
            continue
        present = None if not nulls else valid_mask(column)
        if plan.dtypes[name].kind == "U":
            valid = column if present is None else column.drop_null()
            if pc.min(pc.utf8_length(valid)).as_py() == 0:
                return None  # an empty string: the row path reports it
            if name == "episode_id":  # required: no null; coded, no string per row
                encoded = pc.dictionary_encode(column)
                strings[name] = CodedIds(numpy_of(encoded.indices).astype(np.int64),
                                         encoded.dictionary.to_pylist())
            else:
                strings[name] = column.to_pylist()  # None on null rows, as `Block.lists`
            array = None
        else:
            array = _checked(plan, name, column, present, n, widened)
            if array is None:
                return None
            if present is not None and arrays and array.dtype.kind != "f":
                return None  # a non-float column some rows lack: a list in episodes
        counts[name], values[name] = n - nulls, array
        masks[name] = np.ones(n, bool) if present is None else present
    return checked_block(plan, n, values, masks, strings, counts, arrays)


def checked_block(plan: BulkPlan, n: int, values: dict[str, Any], masks: dict[str, np.ndarray],
                  strings: dict[str, Sequence[Any]], counts: dict[str, int], arrays: bool
                  ) -> Block | None:
    """The `Block` of `n` records whose columns were each checked (`values`: number columns
    `[n, ...]`, floats NaN where absent, or None for a column kept as strings; `masks`: which
    records carry each; `strings`: string columns, None where absent; `counts`), once the rules
    across columns hold: every required field there, log-probabilities <= 0 under a discrete
    action. None: the row path decides."""
    if not set(plan.required) <= set(counts):
        return None
    if plan.discrete and not all((values[w][masks[w]] <= 0).all() for w in SIGNED
                                 if w in values):
        return None  # step.logprob_nonpositive (and ref_logprob's): the row path reports it
    block = Block(n=n, episode_id=strings["episode_id"],
                  step=values["step"], policy_version=values["policy_version"],
                  terminated=values["terminated"], truncated=values["truncated"],
                  key_counts=counts, lines=[], plan=plan)
    block.present = {w: masks.get(w, np.zeros(n, bool)) for w in plan.presence}
    block.lists = strings  # what `Block.column` gives for them (lines are not kept)
    if arrays:
        block.arrays = {w: a for w, a in values.items() if a is not None}
        block.arrays.update(dict.fromkeys(strings))
    return block


def _lengths_ok(column: Any, size: int) -> bool:
    """Every value of a (non-null) list column has `size` elements (fixed size lists do)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_fixed_size_list(column.type):
        return True
    width = np.dtype(np.int32) if pa.types.is_list(column.type) else \
        np.dtype(np.int64) if pa.types.is_large_list(column.type) else None
    if width is None or column.null_count or not len(column):  # the general way
        bounds = pc.min_max(pc.list_value_length(column)).as_py()
        return bool(bounds["min"] == bounds["max"] == size)
    # the offsets as numpy: beside two reader threads, pyarrow's two kernels took ~0.7 ms a
    # chunk of 20,000 lists on the checking thread (~0.01 ms alone)
    offsets = np.frombuffer(column.buffers()[1], width, len(column) + 1,
                            column.offset * width.itemsize)
    lengths = np.diff(offsets)
    return bool(lengths.min() == lengths.max() == size)


def _checked(plan: BulkPlan, name: str, column: Any, present: np.ndarray | None, n: int,
             widened: bool) -> np.ndarray | None:
    """The column as `[n, *shape]` numpy (floats NaN on null rows) when its values are clean:
    no null inside a list, floats finite, numbers of the plan's dtype (`narrowed`)."""
    dtype, shape = plan.dtypes[name], plan.shapes[name]
    leaf = column if present is None else column.drop_null()
    if shape and not _lengths_ok(leaf, shape[0]):
        return None  # a variable list of another length: the row path reports it
    for _ in shape:
        leaf = leaf.flatten()
    if leaf.null_count:
        return None  # a null inside a list: the row path reports it
    read = numpy_of(leaf)
    flat = narrowed(read, dtype) if widened else as_dtype(read, dtype)
    if flat is None:
        return None  # NaN or inf, another dtype: the row path reports it
    if present is None:
        return flat.reshape(n, *shape)
    out = np.full((n, *shape), np.nan if dtype.kind == "f" else 0, dtype)
    out[present] = flat.reshape(-1, *shape)
    return out


def narrowed(flat: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """Numbers read as float64, int64 or bool as `dtype`, when each is a value the row path reads
    the same from its JSON literal: a float (or integer) strictly within the range where
    `dtype` holds every integer exactly (beyond it an integer literal may not be exact, and a
    reader of floats cannot tell `16777217` from `16777217.0`), finite; an integer within the
    dtype's range. Else None."""
    if dtype.kind == "f":
        if flat.dtype.kind != "f":
            return None
        limit = FLOAT_EXACT_INT.get(dtype.name)
        if limit is None:
            return None
        if flat.size and not (flat.min() > -limit and flat.max() < limit):
            return None  # NaN (the min and max are NaN then) and inf fail too
        return flat if flat.dtype == dtype else flat.astype(dtype)
    if dtype.kind in "iu":
        if flat.dtype.kind not in "iu":
            return None
        if flat.dtype != dtype and flat.size:
            lo, hi = INT_RANGES[dtype.name]
            if int(flat.min()) < lo or int(flat.max()) > hi:
                return None
            return flat.astype(dtype)
        return flat if flat.dtype == dtype else flat.astype(dtype)
    return flat if flat.dtype == dtype else None


def as_dtype(flat: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """Numbers held as `dtype` already, as they are when each is a value the row path takes:
    floats finite. Else (another dtype, NaN or inf) None."""
    if flat.dtype != dtype:
        return None
    if dtype.kind == "f" and flat.size and not (np.isfinite(flat.min())
                                                and np.isfinite(flat.max())):
        return None  # a NaN makes both NaN, an inf one of them
    return flat


SCALARS = {"f": frozenset({float, int}), "i": frozenset({int}), "u": frozenset({int}),
           "b": frozenset({bool})}
"""The Python types a scalar of a dtype kind is taken as (a bool is no number; a numpy scalar,
a subclass: the row path decides)."""
_USUAL = {"f": float, "i": int, "u": int, "b": bool}
"""The type the scalars of a dtype kind usually all are: counted first (a count of one type
costs less than a set of them)."""
_READ_AS = {"f": np.dtype(np.float64), "i": np.dtype(np.int64), "u": np.dtype(np.int64),
            "b": np.dtype(bool)}


def scalars(held: Sequence[Any], dtype: np.dtype, floats_only: bool = False
            ) -> np.ndarray | None:
    """Python scalars of one field as `dtype`, when each is of a type `SCALARS` takes and a value
    the row path reads the same (`narrowed`: an integer within the dtype's range, a number in a
    float field within the range where the dtype holds integers exactly, finite); else None.
    `floats_only`: an integer is refused too (a field bound to a float: `binding`)."""
    kind = dtype.kind
    read_as = _READ_AS.get(kind)
    if read_as is None:
        return None
    types, usual = list(map(type, held)), _USUAL[kind]
    if types.count(usual) != len(types) or floats_only and usual is int:  # else: one type
        kinds = set(types)
        if not kinds <= SCALARS[kind] or floats_only and int in kinds:
            return None
    try:  # element by element, as np.array(held, read_as) converts them
        raw = np.fromiter(held, read_as, len(held))
    except OverflowError:
        return None  # an integer beyond 64 bits (or any float): the row path reports it
    return narrowed(raw, dtype)
