"""Parquet rows checked a record batch at a time, on the Arrow columns (extra `parquet`).

Why: the row path builds a dict per row and validates it (`parquet.records_from_arrow`, then
`validate_step`), tens of microseconds a row, while the columns already hold typed arrays. For a
model with a bulk plan (`fastfile.bulk_plan`, or one bound from the file's Arrow types for an
unpinned model, `binding`), and columns of exactly the plan's dtypes and fixed sizes, a batch is
checked on its columns with `pyarrow.compute` and numpy: null counts (a required column with a
null, a null inside a list), finiteness of floats, non-empty strings, logprob ≤ 0 for a discrete
action, and the episode rules vectorised (`EpisodeTracker.add_columns`: step contiguity per
episode, policy versions, nothing after a done step).

Like the JSON Lines bulk path it only ever accepts: a batch that holds anything else (a null
where a value is required, a NaN, an empty id, a JSON `info` value, a broken episode rule) is
read row by row by the normal path, which decides and explains, so reports are identical either
way (tests/io/test_parquet_columns.py). A file whose columns are not exactly the plan's types is
read row by row throughout. pyarrow is imported inside the functions only.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gyre_contract.core._models import RolloutStepV1
from gyre_contract.core._registry import declare_fast_path
from gyre_contract.core._switches import fast_paths_enabled
from gyre_contract.io._arrowschema import peel
from gyre_contract.io._binding import bindable, plan_from_kinds
from gyre_contract.io._columnrules import COLUMN_RULES, check_columns
from gyre_contract.io._fastfile import MAX_INFO_KEYS, Block, BulkPlan, bulk_plan

PARQUET_FAST_PATH = declare_fast_path("parquet_columns", kinds=("field", "step"),
                                      implements=COLUMN_RULES)
"""The rules the columnar Parquet check implements (`columnrules`): a batch that breaks one goes
row by row."""


def decode_batch(plan: BulkPlan | None, batch: Any, arrays: bool = False) -> Block | None:
    """A record batch as a checked `Block` when every row is a clean record, else None (the
    row path decides). `plan` is `columnar_plan`'s."""
    if plan is None or not fast_paths_enabled() or not PARQUET_FAST_PATH.usable():
        return None
    return _decode(plan, batch, arrays)


def columnar_plan(model: type[RolloutStepV1], schema: Any, first: Any = None) -> BulkPlan | None:
    """The plan a file's batches are checked with: the model's own bulk plan, or for an
    unpinned model one bound from the column types (a variable list by the one length its
    values have in `first`, the file's first record batch); None unless every column the plan
    knows has its dtype and sizes (a variable list: checked batch by batch, `columnrules`)."""
    if not fast_paths_enabled() or not PARQUET_FAST_PATH.usable():
        return None
    plan = bulk_plan(model)
    if plan is None and bindable(model):
        kinds = {}
        for field in schema:
            leaf, sizes = peel(field.type)
            fixed = [size for size in sizes if size is not None]
            if len(fixed) < len(sizes):
                if len(sizes) != 1 or first is None:
                    return None  # a nested variable list: rows
                length = _one_length(first.column(field.name))
                if length is None:
                    return None  # lengths that differ: rows
                if length < 0:
                    continue  # no value yet: bound like a field no line carries
                fixed = [length]
            kinds[field.name] = (_dtype_name(leaf), tuple(fixed))
        plan = plan_from_kinds(model, kinds)
    if plan is None:
        return None
    for field in schema:
        if field.name == "info" and "info" in plan.attrs:
            continue
        if field.name not in plan.dtypes:
            return None
        leaf, sizes = peel(field.type)
        shape = plan.shapes[field.name]
        if _dtype_name(leaf) != _plan_dtype(plan, field.name) or len(sizes) != len(shape) \
                or any(a is not None and a != b for a, b in zip(sizes, shape)) \
                or None in sizes and len(sizes) != 1:
            return None
    return plan


def _one_length(column: Any) -> int | None:
    """The one length of a variable list column's values (None: several; -1: no value)."""
    import pyarrow.compute as pc

    lengths = pc.list_value_length(column.drop_null())
    if len(lengths) == 0:
        return -1
    bounds = pc.min_max(lengths).as_py()
    return bounds["min"] if bounds["min"] == bounds["max"] else None


def _dtype_name(leaf: Any) -> str:
    import pyarrow as pa

    if pa.types.is_string(leaf) or pa.types.is_large_string(leaf):
        return "string"
    if pa.types.is_null(leaf):
        return "null"
    try:
        return str(leaf.to_pandas_dtype().__name__)
    except (NotImplementedError, AttributeError, TypeError):
        return str(leaf)


def _plan_dtype(plan: BulkPlan, wire: str) -> str:
    dtype = plan.dtypes[wire]
    return "string" if dtype.kind == "U" else dtype.name


def _decode(plan: BulkPlan, batch: Any, arrays: bool) -> Block | None:
    n = batch.num_rows
    counts: dict[str, int] = {}
    columns = []
    for name, column in zip(batch.schema.names, batch.columns):
        if name != "info":
            columns.append((name, column))
        elif column.null_count < n:
            if not _clean_json(plan, column):
                return None  # the row path parses and explains
            counts[name] = n - column.null_count
    return check_columns(plan, columns, n, arrays=arrays, counts=counts)


def _clean_json(plan: BulkPlan, column: Any) -> bool:
    """Whether every `info` value is a JSON object the JSON Lines bulk reader would take: its
    msgspec type (string, integer within 64 bits, finite float or bool values), no key written
    twice (as many ':' as keys, as `fastfile` counts them), at most `MAX_INFO_KEYS` keys."""
    decode = plan.extra.get("info_decode")
    if decode is None:
        kind = next(k for wire, _, k, _ in plan.fields if wire == "info")
        decode = plan.extra["info_decode"] = msgspec.json.Decoder(kind).decode
    for text in column.drop_null().to_pylist():
        raw = text.encode("utf-8", "surrogatepass")
        try:
            value = decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return False
        if len(value) > MAX_INFO_KEYS or raw.count(b":") != len(value):
            return False
    return True
