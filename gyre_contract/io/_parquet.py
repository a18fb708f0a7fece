"""Parquet rollout files: writing step records as typed Arrow columns, reading them back as a
record source (extra `parquet`).

The layout is `arrowschema.to_arrow_schema`; a file whose Arrow schema disagrees with the model
gives one problem per column and no row is read. Rows are numbered from 1 and a problem's `line`
is the row number. Rows feed the same checks, episode assembly and `FileReport` as the lines of
a JSON Lines file (`checking.StepChecker`). pyarrow is imported inside the functions only.
"""

from __future__ import annotations

import contextvars
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel

from gyre_contract.core._errors import ContractError, InputError, Problem, describe
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import JsonScalars, Modalities, RolloutStep, RolloutStepV1
from gyre_contract.core._switches import fast_paths_enabled
from gyre_contract.core._validate import validate_step
from gyre_contract.io._arrowschema import (
    EXTENSIONS,
    arrow_schema_problems,
    dtype_problems,
    is_parquet,
    is_pinned,
    layout_problems,
    peel,
    schema_metadata,
    spec_of,
    to_arrow_schema,
    type_text,
)
from gyre_contract.io._assembly import EpisodeAssembler
from gyre_contract.io._atomic import atomic_path
from gyre_contract.io._checking import StepChecker, check_items, unread_report
from gyre_contract.io._episodes import Episode
from gyre_contract.io._lines import Item, Parsed, hidden_problems
from gyre_contract.io._parquetcols import columnar_plan, decode_batch
from gyre_contract.io._raggedcols import ragged_plan
from gyre_contract.io._report import FileReport

__all__ = ["EXTENSIONS", "ROWS_PER_BATCH", "arrow_schema_problems", "is_parquet",
           "iter_parquet_records", "open_parquet", "read_parquet_episodes", "read_parquet_steps",
           "records_from_arrow", "to_arrow_schema", "type_text", "validate_parquet",
           "write_parquet"]

ROWS_PER_BATCH = 8192
"""Rows converted to records at a time when reading, and written per batch."""
COLUMN_BATCH_ROWS = 65536
"""Rows `ParquetRows` reads at a time: a batch checked on its columns costs a few numpy calls
whatever its size (a batch that fails is converted to records as a whole)."""


# -- writing ---------------------------------------------------------------------------------

def write_parquet(
    path: str | os.PathLike[str],
    steps: Iterable[BaseModel | Mapping[str, Any]],
    model: type[RolloutStepV1] | None = None,
    *,
    rows_per_group: int = ROWS_PER_BATCH,
    fsync: bool = False,
) -> int:
    """Write step records as one Parquet file laid out by `to_arrow_schema`; return the count.

    Accepts validated models or plain dicts written as they are (validate them first with
    `validate_step`). `model` defaults to the class of the first step when steps are models,
    else `RolloutStep`; the first record settles what an unpinned model leaves open. A key the
    model does not have, a `None` value or a value the column type cannot hold is refused with
    ContractError (`steps[i].field`) before the batch holding it is written. The file is
    written to a temporary file in the same folder and renamed (`io._atomic`), so a reader never
    sees half a file and a failed write leaves the previous file; with `fsync=True` it is on
    disk before the rename. Every page carries a CRC
    checksum, verified when the file is read (`open_parquet`).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    steps = iter(steps)
    first = next(steps, None)
    if first is not None:
        steps = itertools.chain([first], steps)
    if model is None:
        model = type(first) if isinstance(first, RolloutStepV1) else RolloutStep
    with atomic_path(path, fsync=fsync) as tmp:  # a reader never sees half a file
        count = _write_rows(pa, pq, tmp, steps, model, rows_per_group)
    return count


def _write_rows(pa: Any, pq: Any, tmp: str, steps: Iterator[Any], model: type[RolloutStepV1],
                rows_per_group: int) -> int:
    pinned = is_pinned(model)
    writer: Any = None  # a pyarrow ParquetWriter (pyarrow is untyped), made with the schema
    schema: Any = None
    checks: Any = None  # made with the schema, from the first chunk on
    count = 0
    try:
        for start, chunk in _chunks(steps, rows_per_group):
            records = [_record(step, start + i) for i, step in enumerate(chunk)]
            if schema is None:
                sample = None if pinned else _first_sample(records, model)
                schema = to_arrow_schema(model, sample=sample)
                checks = _writable_checks(schema)
                writer = _writer(pq, tmp, schema)
            _check_writable(records, schema, start, checks)
            if problems := layout_problems(records, schema, start) \
                    or dtype_problems(records, schema, start, model):
                raise ContractError(problems)
            table = pa.Table.from_arrays(
                [_to_arrow(records, f, start) for f in schema], schema=schema)
            writer.write_table(table, row_group_size=rows_per_group)
            count += len(records)
        if writer is None:
            schema = to_arrow_schema(model) if pinned else pa.schema(
                [], metadata=schema_metadata(model))
            writer = _writer(pq, tmp, schema)
    finally:
        if writer is not None:
            writer.close()
    return count


def _writer(pq: Any, path: str, schema: Any) -> Any:
    try:
        return pq.ParquetWriter(path, schema, write_page_checksum=True)
    except OSError as err:
        raise InputError(f"cannot open {path} for writing: {err}") from None


def _chunks(steps: Iterable[Any], size: int) -> Iterator[tuple[int, list[Any]]]:
    chunk: list[Any] = []
    start = 0
    for step in steps:
        chunk.append(step)
        if len(chunk) == size:
            yield start, chunk
            start += size
            chunk = []
    if chunk:
        yield start, chunk


def _record(step: Any, index: int) -> dict[str, Any]:
    record = step.to_record() if hasattr(step, "to_record") else step
    if isinstance(record, BaseModel):
        record = record.model_dump(by_alias=True, exclude_none=True)
    if not isinstance(record, Mapping):
        raise TypeError(f"steps[{index}]: expected a model or a dict, got {type(step).__name__}")
    return dict(record)


def _first_sample(records: list[dict[str, Any]], model: type[RolloutStepV1]) -> Any:
    """The first record, validated, to settle what an unpinned model leaves open."""
    try:
        return validate_step(records[0], model)
    except ContractError as err:
        raise ContractError([p.under("steps[0]") for p in err.problems]) from None


def _to_arrow(records: list[dict[str, Any]], field: Any, start: int) -> Any:
    """One column of a batch of records, or ContractError naming the first bad row."""
    import pyarrow as pa

    values = [_python(r.get(field.name), field) for r in records]
    try:
        column = pa.array(values, type=field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        column = None
    if column is not None and not _overflowed(column):
        return column
    for i, value in enumerate(values):
        try:
            if _overflowed(pa.array([value], type=field.type)) and not _has_infinity(value):
                raise pa.ArrowInvalid("out of range for the column's float width: it would "
                                      "be written as an infinity")
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as err:
            raise ContractError(Problem(
                f"steps[{start + i}].{field.name}", type_text(field.type),
                describe(records[i].get(field.name)),
                f"cannot be written as this column ({str(err).splitlines()[0]})")) from None
    if column is None:
        raise AssertionError("a column failed as a whole but no row failed")  # pragma: no cover
    return column  # an infinity the records hold themselves: validation reports it


def _overflowed(array: Any) -> bool:
    """Whether a column built from Python values holds an infinity in a float leaf narrower than
    float64: pyarrow writes 3.5e38 into a float32 column as inf, silently (then the row path of
    the twin file would read `not finite` where the JSON Lines file reads `out of range`)."""
    import pyarrow as pa

    kind = array.type
    if pa.types.is_struct(kind):
        return any(_overflowed(array.field(i)) for i in range(kind.num_fields))
    while pa.types.is_list(kind) or pa.types.is_large_list(kind) \
            or pa.types.is_fixed_size_list(kind):
        array, kind = array.flatten(), kind.value_type
    if not pa.types.is_floating(kind) or kind.bit_width == 64:
        return False
    return bool(np.isinf(array.to_numpy(zero_copy_only=False)).any())


def _has_infinity(value: Any) -> bool:
    """Whether a Python value (nested lists and dicts of numbers) holds an infinity itself."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and item in (float("inf"), float("-inf")):
            return True
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return False


def _python(value: Any, field: Any) -> Any:
    if _json_encoded(field):
        return None if value is None else orjson.dumps(value).decode()
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, BaseModel):
        return {k: _plain(v) for k, v in value.model_dump(by_alias=True,
                                                           exclude_none=True).items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _check_writable(records: list[dict[str, Any]], schema: Any, start: int,
                    checks: dict[str, Any]) -> None:
    """Unknown keys, None values and values pyarrow would change on the way into their column
    (`checks`: `_writable_checks(schema)`) cannot be written; say so for every record of the
    batch."""
    problems = []
    for i, record in enumerate(records):
        for key, value in record.items():
            if key not in checks:
                problems.append(Problem(f"steps[{start + i}].{key}",
                                        "a field of the model (a column of the file)",
                                        describe(value), "unknown field cannot be written"))
            elif value is None:
                problems.append(Problem(f"steps[{start + i}].{key}",
                                        "a value (null is never valid in a record)", "None",
                                        "None cannot be written"))
            elif (check := checks[key]) is not None and (why := check(value)):
                problems.append(Problem(f"steps[{start + i}].{key}",
                                        type_text(schema.field(key).type), describe(value),
                                        f"cannot be written as this column ({why})"))
    if problems:
        raise ContractError(problems)


def _json_encoded(field: Any) -> bool:
    return bool(field.metadata) and field.metadata.get(b"x-gyre-encoding") == b"json"


Check = Callable[[Any], "str | None"]


def _writable_checks(schema: Any) -> dict[str, Check | None]:
    """Column name -> why pyarrow would write a value into it as another value (or None for a
    column where it never does), made once per file.

    pyarrow truncates a float into an integer column (1.5 is written 1), writes `True` into a
    float column as 1.0 and drops a key a struct column has no child for (a modality the first
    record of an unpinned model lacked, a typo), silently: the file would hold a valid record
    where the data had none. (An integer a float column cannot hold exactly, or a bool or float
    into a bool column, it refuses itself; a float beyond a float32 column's range is
    `_overflowed`.)"""
    return {f.name: None if _json_encoded(f) else _check_of(f.type) for f in schema}


def _check_of(arrow_type: Any) -> Check | None:
    import pyarrow as pa

    if pa.types.is_struct(arrow_type):
        children = {child.name: _check_of(child.type) for child in arrow_type}

        def struct(value: Any) -> str | None:
            if isinstance(value, BaseModel):
                value = value.model_dump(by_alias=True, exclude_none=True)
            if not isinstance(value, dict):
                return None
            for key, item in value.items():
                if key not in children:
                    return f"{key!r} is not a field of the column: it would be dropped"
                check = children[key]
                why = None if check is None or item is None else check(item)
                if why:
                    return f"{key}: {why}"
            return None

        return struct
    leaf, _ = peel(arrow_type)
    if pa.types.is_integer(leaf):
        return _numbers_check(ints=True)
    return _numbers_check(ints=False) if pa.types.is_floating(leaf) else None


def _numbers_check(ints: bool) -> Check:
    """A value for a column of integers (`ints`) or floats: no float in an integer column, no
    bool in either. A flat list of plain numbers is looked at in one set of its types."""
    good = frozenset({int}) if ints else frozenset({int, float})

    def check(value: Any) -> str | None:
        if value.__class__ in good:
            return None  # the usual scalar
        if isinstance(value, (np.ndarray, np.generic)):
            kind = value.dtype.kind
            return "a bool is not a number" if kind == "b" else \
                "not an integer" if ints and kind in "fc" else None
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, (list, tuple)):
                if not good.issuperset(map(type, item)):
                    stack.extend(item)  # nested lists, or a leaf to look at
            elif isinstance(item, (bool, np.bool_)):
                return "a bool is not a number"
            elif ints and isinstance(item, (float, np.floating)):
                return "not an integer"
        return None

    return check


# -- reading ---------------------------------------------------------------------------------

def open_parquet(path: str | os.PathLike[str]) -> Any:
    """A `pyarrow.parquet.ParquetFile`, or InputError (exit 2) when it cannot be read as one.

    Page checksums (which `write_parquet` writes) are verified as pages are read: a page whose
    bytes changed on disk is an InputError naming the file, never data read as if it were
    good. A file written without checksums is read as before."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = os.fspath(path)
    if os.path.isdir(name):
        raise InputError(f"is a directory, not a rollout file: {name}")
    if not os.path.exists(name):
        raise InputError(f"no such file: {name}")
    try:
        return pq.ParquetFile(name, page_checksum_verification=True)
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(f"cannot read {name} as Parquet: {str(err).splitlines()[0]}") from None


def iter_parquet_records(
    path: str | os.PathLike[str],
    model: type[RolloutStepV1] = RolloutStep,
    *,
    batch_rows: int = ROWS_PER_BATCH,
) -> Iterator[Item]:
    """Yield `(row, record)` for every row (rows numbered from 1), not validated; a row whose
    JSON column hides a problem (a duplicate key, ...) comes as a `Parsed` carrying it.

    Raises ContractError (one problem per column) before the first row when the file's Arrow
    schema disagrees with the model, and InputError when the file is not readable Parquet.
    """
    import pyarrow as pa

    handle = open_parquet(path)
    problems = arrow_schema_problems(handle.schema_arrow, model)
    if problems:
        raise ContractError(problems)
    row = 0
    json_columns = [f.name for f in handle.schema_arrow
                    if f.metadata and f.metadata.get(b"x-gyre-encoding") == b"json"]
    try:
        for batch in handle.iter_batches(batch_size=batch_rows):
            hidden = hidden_json_problems(batch, json_columns)
            for i, record in enumerate(records_from_arrow(batch, model)):
                row += 1
                if i in hidden:  # what JSON Lines refuses, a JSON column refuses too
                    yield Parsed(row, None, [p.at_line(row) for p in hidden[i]])
                else:
                    yield row, record
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(f"cannot read {os.fspath(path)} after row {row}: "
                         f"{str(err).splitlines()[0]}") from None


def hidden_json_problems(batch: Any, names: list[str]) -> dict[int, list[Problem]]:
    """Per row index: duplicate keys and integers beyond 64 bits in JSON-encoded columns
    (`info`), which orjson would silently drop or round, as `lines.hidden_problems` finds them."""
    found: dict[int, list[Problem]] = {}
    for name in names:
        for i, text in enumerate(batch.column(name).to_pylist()):
            if text is None:
                continue
            raw = text.encode("utf-8", "surrogatepass")
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue  # validation reports a value that is not an object
            if isinstance(value, dict):
                problems = hidden_problems(raw, value)
                if problems:
                    found.setdefault(i, []).extend(p.under(name) for p in problems)
    return found


_UNSET = object()


class ParquetRows:
    """A Parquet file as a record source of `checking.StepChecker.feed`, a record batch at a
    time: each checked on its columns (`decode_block`, see `parquetcols`) or turned into row
    items (`parse`, as `iter_parquet_records`). ContractError when the Arrow schema disagrees
    with the model (one problem per column), InputError when the file is not readable."""

    def __init__(self, path: str | os.PathLike[str], model: type[RolloutStepV1],
                 batch_rows: int | None = None) -> None:
        self.path, self.model = path, model
        self.batch_rows = COLUMN_BATCH_ROWS if batch_rows is None else batch_rows
        self.handle = open_parquet(path)
        schema = self.handle.schema_arrow
        problems = arrow_schema_problems(schema, model)
        if problems:
            raise ContractError(problems)
        self.rows = self.handle.metadata.num_rows
        self.json_columns = [f.name for f in schema
                             if f.metadata and f.metadata.get(b"x-gyre-encoding") == b"json"]
        self.schema = schema
        self.plan: Any = _UNSET  # made from the first batch (`decode_block`)

    def blocks(self) -> Iterator[tuple[int, Any]]:
        """(number of the first row, the record batch) of each batch, rows numbered from 1.

        The next batch is decoded on a helper thread while the caller checks this one (pyarrow
        lets go of the GIL): one batch ahead, never more; an error reading it is raised when
        the caller asks for it, after the rows before it, as without the read-ahead."""
        import pyarrow as pa

        row = 0
        batches = self.handle.iter_batches(batch_size=self.batch_rows, use_threads=True)
        with ThreadPoolExecutor(1, thread_name_prefix="gyre-parquet-ahead") as ahead:
            try:
                def read_ahead() -> Any:
                    return ahead.submit(contextvars.copy_context().run, next_or_none, batches)

                pending = read_ahead()
                while (batch := pending.result()) is not None:
                    pending = read_ahead()
                    yield row + 1, batch
                    row += batch.num_rows
            except (pa.ArrowInvalid, OSError) as err:
                raise InputError(f"cannot read {os.fspath(self.path)} after row {row}: "
                                 f"{str(err).splitlines()[0]}") from None

    def parse(self, first: int, batch: Any) -> Iterator[Any]:
        hidden = hidden_json_problems(batch, self.json_columns)
        for i, record in enumerate(records_from_arrow(batch, self.model)):
            row = first + i
            yield Parsed(row, None, [p.at_line(row) for p in hidden[i]]) if i in hidden \
                else (row, record)

    def decode_block(self, batch: Any, arrays: bool = False, ragged: bool = True) -> Any:
        """The batch checked on its columns (`parquetcols`; a model of ragged lists,
        `raggedcols`, when `ragged`), or None."""
        if self.plan is _UNSET:
            self.plan = columnar_plan(self.model, self.schema, batch)
        if self.plan is None:
            plan = ragged_plan(self.model) if ragged else None
            return None if plan is None else plan.check(
                list(zip(batch.schema.names, batch.columns)), batch.num_rows, arrays=arrays)
        return decode_batch(self.plan, batch, arrays)

    def tail_item(self) -> None:
        return None


def records_from_arrow(batch: Any, model: type[RolloutStepV1] = RolloutStep) -> list[dict[str, Any]]:
    """Rows of an Arrow table or record batch as step records (numpy arrays for tensors).

    A null in an optional column means the field is absent; a null in a required column stays
    `None` so that validation reports it as the null it is. Columns the model does not have are
    kept, so validation reports them as unknown fields.
    """
    names = batch.schema.names
    n = batch.num_rows
    info = model_info(model)
    required = info.required
    bulk = fast_paths_enabled()
    columns = []
    for name in names:
        spec = spec_of(model, name) if name in info.wires else None
        columns.append(_values(batch.column(name), spec, bulk))
    records = []
    for i in range(n):
        record = {}
        for name, values in zip(names, columns):
            value = values[i]
            if value is not None or name in required:
                record[name] = value
        records.append(record)
    return records


def _values(array: Any, spec: Any, bulk: bool) -> list[Any]:
    """One column as a list of per-row Python values / numpy arrays (None for a null).

    With `bulk` (fast paths on), a list column becomes numpy arrays in one conversion; without,
    row by row: the same arrays for a list of numbers (`_number_rows`), else nested Python lists
    that validation casts (same values, same verdicts, same messages).
    """
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()  # a dictionary-encoded column reads as its values
    arrow_type = array.type
    if pa.types.is_null(arrow_type):
        return [None] * len(array)
    if isinstance(spec, JsonScalars):
        return [_json_value(v) for v in array.to_pylist()]
    if pa.types.is_struct(arrow_type):
        return _struct_values(array, spec, bulk)
    leaf, sizes = peel(arrow_type)
    if not sizes or pa.types.is_null(leaf) or _has_nested_nulls(array, len(sizes)):
        return array.to_pylist()  # lists of no type: `[]` takes the field's dtype in validation
    if all(s is not None for s in sizes) or len(sizes) == 1:
        if not bulk:
            return _number_rows(array.to_pylist(), leaf)
        return _fixed_values(array, sizes) if None not in sizes else _list_values(array)
    if bulk and pa.types.is_integer(leaf):
        return _nested_integer_values(array, len(sizes))
    return _integer_rows(array.to_pylist(), leaf)  # nested lists, cast by validation


def _nested_integer_values(array: Any, depth: int) -> list[Any]:
    """Rows of an integer column with several variable dims (an unpinned image) as arrays, from
    one conversion of the leaf values: the same arrays `_integer_rows` builds row by row from
    Python lists, without the lists. A row that is not rectangular (or has an empty dim, whose
    inner sizes are unknown) is left as a nested list for validation to report or cast."""
    lengths = []
    level = array
    for _ in range(depth):
        lengths.append(level.value_lengths().fill_null(0).to_numpy(zero_copy_only=False))
        level = level.flatten()
    leaf = _leaf_numpy(level)
    starts = [np.concatenate(([0], np.cumsum(lens))) for lens in lengths]
    rows: list[Any] = []
    for i in range(len(array)):
        begin, end, dims = i, i + 1, []
        for lens, start in zip(lengths, starts):
            inner = lens[begin:end]
            if inner.size == 0 or (inner != inner[0]).any() or inner[0] == 0:
                break
            dims.append(int(inner[0]))
            begin, end = int(start[begin]), int(start[end])
        if len(dims) < depth:
            rows.append(array[i].as_py())
            continue
        rows.append(leaf[begin:end].reshape(dims))
    return rows


def _number_rows(rows: list[Any], leaf: Any) -> list[Any]:
    """Rows of a list column of numbers or booleans as arrays of the column's dtype, one row at
    a time: the arrays `_fixed_values` / `_list_values` make in one conversion, so that a
    problem shows a value the same way with fast paths off (a NaN in a float32 list is a
    `float32[4]`, not the `float64[4]` of a Python list). Other leaves stay Python lists."""
    import pyarrow as pa

    if not (pa.types.is_integer(leaf) or pa.types.is_floating(leaf) or pa.types.is_boolean(leaf)):
        return rows
    dtype = _leaf_numpy(pa.array([], type=leaf)).dtype
    return [None if row is None else np.array(row, dtype=dtype) for row in rows]


def _integer_rows(rows: list[Any], leaf: Any) -> list[Any]:
    """Rows of an integer column as arrays of its dtype, as the bulk conversion gives them.

    An integer ndarray keeps its dtype in validation (a uint8 image stays uint8), so nested
    lists from a `uint8` column must not be left for validation to read as JSON ints (int64,
    or float32 in an unpinned tensor observation). A ragged or empty row stays a list, as
    `_nested_integer_values` leaves it: validation reports or casts it.
    """
    import pyarrow as pa

    if not pa.types.is_integer(leaf):
        return rows
    dtype = np.dtype(leaf.to_pandas_dtype())
    out: list[Any] = []
    for row in rows:
        try:
            arr = None if row is None else np.array(row, dtype=dtype)
        except ValueError:
            arr = None
        out.append(row if arr is None or arr.size == 0 else arr)
    return out


def _json_value(text: Any) -> Any:
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text  # not an object: validation reports it as such


def _struct_values(array: Any, spec: Any, bulk: bool) -> list[Any]:
    sub_model = spec if isinstance(spec, type) and issubclass(spec, Modalities) else None
    info = model_info(sub_model) if sub_model is not None else None
    required = info.required if info is not None else frozenset()
    names = [f.name for f in array.type]
    children = []
    for i, name in enumerate(names):
        sub = None
        if sub_model is not None and info is not None and name in info.wires:
            sub = spec_of(sub_model, name)
        children.append(_values(array.field(i), sub, bulk))
    valid = array.is_valid().to_pylist() if array.null_count else None
    out: list[dict[str, Any] | None] = []
    for row in range(len(array)):
        if valid is not None and not valid[row]:
            out.append(None)
            continue
        out.append({name: values[row] for name, values in zip(names, children)
                    if values[row] is not None or name in required})
    return out


def _has_nested_nulls(array: Any, depth: int) -> bool:
    values = array
    for _ in range(depth):
        values = values.flatten()
        if values.null_count:
            return True
    return False


def _leaf_numpy(flat: Any) -> np.ndarray:
    out = flat.to_numpy(zero_copy_only=False)
    if out.dtype.kind == "O":
        out = np.array(flat.to_pylist(), dtype=np.str_)
    return np.array(out)  # a writable copy: validated steps may be changed by their owner


def _fixed_values(array: Any, sizes: list[int | None]) -> list[Any]:
    n = len(array)
    valid = array.is_valid().to_numpy(zero_copy_only=False) if array.null_count else None
    flat = array
    for _ in sizes:
        flat = flat.flatten()
    leaf = _leaf_numpy(flat)
    if valid is not None:  # flatten() drops null rows: put them back as None
        rows: list[Any] = [None] * n
        taken = leaf.reshape(int(valid.sum()), *sizes)
        for i, row in zip(np.flatnonzero(valid), taken):
            rows[i] = row
        return rows
    return list(leaf.reshape(n, *sizes))


def _list_values(array: Any) -> list[Any]:
    n = len(array)
    valid = array.is_valid().to_numpy(zero_copy_only=False) if array.null_count else None
    lengths = array.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    leaf = _leaf_numpy(array.flatten())
    parts = np.split(leaf, np.cumsum(lengths)[:-1]) if n else []
    if valid is not None:
        return [p if ok else None for p, ok in zip(parts, valid)]
    return parts


# -- validated steps, episodes and whole-file reports -------------------------------------------

def read_parquet_steps(
    path: str | os.PathLike[str], model: type[RolloutStepV1] = RolloutStep,
) -> Iterator[RolloutStepV1]:
    """Yield each row as a validated `model` instance, like `read_steps` on JSON Lines.

    Raises ContractError (with the row number as `line`) on the first row that breaks a record
    or episode rule, and before any row when the Arrow schema disagrees with the model.
    """
    checker = StepChecker(model)
    for item in iter_parquet_records(path, model):
        found = checker.item(item)
        if found is not None:
            yield found[1]


def read_parquet_episodes(
    path: str | os.PathLike[str],
    model: type[RolloutStepV1] = RolloutStep,
    *,
    include_open: bool = True,
) -> Iterator[Episode]:
    """Yield the file's episodes as `Episode` columns, like `read_episodes`."""
    episodes = EpisodeAssembler(model)
    yield from StepChecker(model).feed(iter_parquet_records(path, model), episodes)
    if include_open:
        yield from episodes.rest()


def validate_parquet(
    path: str | os.PathLike[str],
    model: type[RolloutStepV1] = RolloutStep,
    *,
    require_complete: bool = False,
    max_examples_per_group: int = 3,
) -> FileReport:
    """Stage 1 on a Parquet file: the same `FileReport` as `validate_file`, rows for lines.

    A disagreeing Arrow schema gives one problem per column and no row is read (`records` 0,
    episode rules not checked). Raises InputError only when the file cannot be read.
    """
    return parquet_report(path, model, require_complete=require_complete,
                          max_examples_per_group=max_examples_per_group)


def parquet_report(
    path: str | os.PathLike[str],
    model: type[RolloutStepV1],
    *,
    require_complete: bool,
    max_examples_per_group: int,
    episode_ids: dict[str, int] | None = None,
) -> FileReport:
    """`validate_parquet`; `episode_ids` gets each episode id with its first row (see
    `checking.StepChecker`: how the shard check compares shards)."""
    handle = open_parquet(path)
    rows = handle.metadata.num_rows
    problems = arrow_schema_problems(handle.schema_arrow, model)
    if problems:
        return unread_report(model, problems, path=path, lines=rows,
                             require_complete=require_complete,
                             max_examples_per_group=max_examples_per_group)
    return check_items(ParquetRows(path, model), model, path=path,
                       require_complete=require_complete,
                       max_examples_per_group=max_examples_per_group, lines=rows,
                       episode_ids=episode_ids)


def next_or_none(items: Iterator[Any]) -> Any:
    """The next item, or None at the end (what the read-ahead thread runs)."""
    return next(items, None)
