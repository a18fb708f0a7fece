"""Parquet rollout files: the step records of docs/contract.md §3 as typed Arrow columns (extra `parquet`).

Why: a sampler fleet writes many shards, and Parquet keeps dtypes, compresses well and is what Ray
Data, Spark and pandas read natively. The contract travels with the file: every column carries
its `x-gyre-*` facts (dtype, shape, role) in the field metadata and the schema metadata names the
record kind and version.

Layout (`to_arrow_schema`): one column per record key, in the model's field order. A fixed dim
is a `fixed_size_list`, a symbolic dim a variable `list`; an observation of modalities is a
`struct`; `info` is its JSON text (a free-form object has no single Arrow type). Optional fields
are nullable columns and a null there means "absent"; a null in a required column is a null
value and fails validation like JSON `null`. Rows are numbered from 1; a problem's `line` is
the row number. Reading a file whose Arrow schema disagrees with the contract gives one
problem per column and reads no row. pyarrow is imported inside the functions only.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel

from gyre_contract.core.dims import Dim, format_shape
from gyre_contract.core.errors import ContractError, InputError, Problem, SchemaError, describe
from gyre_contract.core.models import (
    AnyObservation,
    JsonScalars,
    Modalities,
    RolloutStep,
    RolloutStepV1,
    field_specs,
)
from gyre_contract.core.tensor import TensorSpec
from gyre_contract.core.validate import iter_validated_steps, validate_step

EXTENSIONS = (".parquet", ".pq")
"""File name endings read and written as Parquet (anything else is JSON Lines)."""

ROWS_PER_BATCH = 8192
"""Rows converted to records at a time when reading, and written per batch."""

_LEAVES = {
    "bool": "bool_", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "float16": "float16", "float32": "float32", "float64": "float64", "string": "string",
}
_PLAIN = {str: "string", int: "int64", float: "float64", bool: "bool"}
_KINDS = {"bool": "b", "string": "U"}  # else: int dtypes "i", float dtypes "f"


def is_parquet(path: str | os.PathLike[str]) -> bool:
    """Whether a path names a Parquet file by its extension (`.parquet` or `.pq`)."""
    return os.fspath(path).lower().endswith(EXTENSIONS)


# -- the Arrow schema of a step model ---------------------------------------------------------

def to_arrow_schema(model: type[BaseModel] = RolloutStep, *, sample: Any = None) -> Any:
    """The Arrow schema of a step model, with the x-gyre facts in field and schema metadata.

    A model whose fields all have one dtype and a known rank (a pinned model such as
    CartPoleStep) needs nothing else. The unpinned `RolloutStep` leaves the observation's rank
    and the action's dtype open: pass `sample` (one record or step) to settle them from data.
    Raises SchemaError naming every field that cannot be laid out.
    """
    import pyarrow as pa

    step = _validated_sample(sample, model)
    fields, problems = [], []
    for wire, attr, required in _fields(model):
        value = getattr(step, attr) if step is not None else None
        spec = _spec_of(model, wire)
        if value is None and not required and isinstance(spec, TensorSpec):
            spec = _without_variadic(spec)
        if value is None and isinstance(spec, AnyObservation) and step is not None:
            value = step.observation  # next_observation is laid out like observation
        try:
            arrow_type = _arrow_type(spec, value)
        except SchemaError as err:
            problems.append(f"{wire}: {err}")
            continue
        meta = _field_metadata(_spec_of(model, wire), model.model_fields[attr])
        fields.append(pa.field(wire, arrow_type, nullable=not required, metadata=meta))
    if problems:
        raise SchemaError(f"no Arrow schema for {model.__name__}: " + "; ".join(problems))
    return pa.schema(fields, metadata=_schema_metadata(model))


def _without_variadic(spec: TensorSpec) -> TensorSpec:
    """An optional `*name` field the sample does not settle: laid out with `*name` empty."""
    shape = tuple(d for d in spec.shape if not d.variadic)
    return TensorSpec(spec.dtype, shape, spec.role, spec.description, spec.finite)


def _validated_sample(sample: Any, model: type[BaseModel]) -> Any:
    if sample is None:
        return None
    if isinstance(sample, model):
        return sample
    return validate_step(sample, model)


def _fields(model: type[BaseModel]) -> list[tuple[str, str, bool]]:
    """(wire name, attribute, required) of every field, in declaration order."""
    return [(info.alias or name, name, info.is_required())
            for name, info in model.model_fields.items()]


def _spec_of(model: type[BaseModel], wire: str) -> Any:
    """What a field holds: a TensorSpec, AnyObservation, Modalities class, JsonScalars (`info`)
    or, for a plain field, its annotation (`str`)."""
    spec = field_specs(model).get(wire)
    if spec is not None:
        return spec
    info = model.model_fields[_attr(model, wire)]
    for item in info.metadata:
        if isinstance(item, JsonScalars):
            return item
    return info.annotation


def _attr(model: type[BaseModel], wire: str) -> str:
    for name, info in model.model_fields.items():
        if (info.alias or name) == wire:
            return name
    return wire


def _arrow_type(spec: Any, value: Any) -> Any:
    import pyarrow as pa

    if isinstance(spec, TensorSpec):
        return _tensor_type(spec, value)
    if isinstance(spec, AnyObservation):
        if value is None:
            raise SchemaError("an unpinned observation (float32 [*obs] or modalities) has no "
                              "fixed layout; pin the model or pass sample=")
        if isinstance(value, dict):
            return pa.struct([pa.field(k, _free_type(v)) for k, v in value.items()])
        return _tensor_type(spec.spec, value)
    if isinstance(spec, type) and issubclass(spec, Modalities):
        return pa.struct([
            pa.field(wire, _arrow_type(_spec_of(spec, wire),
                                       getattr(value, attr) if value is not None else None),
                     nullable=not required)
            for wire, attr, required in _fields(spec)])
    if isinstance(spec, JsonScalars):
        return pa.string()
    if spec in _PLAIN:
        return _leaf(_PLAIN[spec])
    raise SchemaError(f"no Arrow type for a field annotated {spec!r}")


def _tensor_type(spec: TensorSpec, value: Any) -> Any:
    import pyarrow as pa

    dtype = spec.dtype if isinstance(spec.dtype, str) else None
    if dtype is None:
        if value is None:
            raise SchemaError(f"dtype is one of {' or '.join(spec.dtypes)}; pin it or pass sample=")
        dtype = _dtype_name(np.asarray(value).dtype)
    if dtype == "bfloat16":
        raise SchemaError("bfloat16 has no Arrow type; use float32 on the wire")
    dims = _concrete_dims(spec, value)
    arrow_type = _leaf(dtype)
    for dim in reversed(dims):
        arrow_type = pa.list_(arrow_type, dim.size) if dim.size is not None else pa.list_(arrow_type)
    return arrow_type


def _concrete_dims(spec: TensorSpec, value: Any) -> list[Dim]:
    """The shape with `*name` expanded to as many symbolic dims as the sample has."""
    if not any(d.variadic for d in spec.shape):
        return list(spec.shape)
    if value is None:
        raise SchemaError(f"shape {format_shape(spec.shape)} has a *name of unknown rank; "
                          "pin the model or pass sample=")
    rank = np.ndim(value) - (len(spec.shape) - 1)
    out: list[Dim] = []
    for dim in spec.shape:
        out += [Dim(name=dim.name)] * rank if dim.variadic else [dim]
    return out


def _free_type(value: Any) -> Any:
    """A free-form modality: a string, or a tensor whose dims are all variable."""
    import pyarrow as pa

    if isinstance(value, str):
        return pa.string()
    arr = np.asarray(value)
    arrow_type = _leaf(_dtype_name(arr.dtype))
    for _ in range(arr.ndim):
        arrow_type = pa.list_(arrow_type)
    return arrow_type


def _leaf(dtype: str) -> Any:
    import pyarrow as pa

    return getattr(pa, _LEAVES[dtype])()


def _dtype_name(dtype: np.dtype) -> str:
    return "string" if dtype.kind == "U" else str(dtype)


def _field_metadata(spec: Any, info: Any) -> dict[bytes, bytes]:
    meta: dict[str, Any] = {}
    if isinstance(spec, TensorSpec):
        meta = {"x-gyre-dtype": spec.dtype if isinstance(spec.dtype, str) else list(spec.dtype),
                "x-gyre-shape": [d.to_json() for d in spec.shape], "x-gyre-role": spec.role}
    elif isinstance(spec, AnyObservation):
        meta = {"x-gyre-dtype": spec.spec.dtype, "x-gyre-shape": ["*obs"],
                "x-gyre-role": spec.spec.role, "x-gyre-modalities": "any"}
    elif isinstance(spec, type) and issubclass(spec, Modalities):
        meta = {"x-gyre-role": "observation", "x-gyre-modalities": spec.__name__}
    elif isinstance(spec, JsonScalars):
        meta = {"x-gyre-role": "other", "x-gyre-encoding": "json"}
    description = getattr(info, "description", None) or getattr(spec, "description", "")
    if description:
        meta["description"] = description
    return {k.encode(): (v if isinstance(v, str) else json.dumps(v)).encode()
            for k, v in meta.items() if v is not None}


def _schema_metadata(model: type[BaseModel]) -> dict[bytes, bytes]:
    return {b"x-gyre-kind": str(model.gyre_kind).encode(),
            b"x-gyre-version": str(model.gyre_version).encode(),
            b"x-gyre-model": model.__name__.encode(),
            b"x-gyre-varying-dims": json.dumps(list(model.varying_dims)).encode()}


# -- does a file's Arrow schema fit the model? ------------------------------------------------

def arrow_schema_problems(schema: Any, model: type[BaseModel] = RolloutStep) -> list[Problem]:
    """One problem per column that disagrees with the model; [] when every column fits.

    A column fits when its nesting depth is the field's rank, a `fixed_size_list` has the
    declared size of a fixed dim, and its leaf is of the dtype's kind (bool, integer, float,
    string; an integer column may feed a float field). Widths are not compared here: each value
    is still cast losslessly row by row, exactly as a JSON Lines value is.
    """
    problems = _metadata_problems(schema.metadata or {}, model)
    problems += _struct_problems(model, {f.name: f for f in schema}, "")
    return problems


def _metadata_problems(meta: Mapping[bytes, bytes], model: type[BaseModel]) -> list[Problem]:
    problems = []
    kind = meta.get(b"x-gyre-kind", b"").decode()
    if kind and kind != model.gyre_kind:
        problems.append(Problem("", f"x-gyre-kind {model.gyre_kind!r}", repr(kind),
                                "file holds another kind of record"))
    version = meta.get(b"x-gyre-version", b"").decode()
    if version and version.split(".")[0] != str(model.gyre_version).split(".")[0]:
        problems.append(Problem("", f"x-gyre-version {model.gyre_version} (same major version)",
                                version, "file written under another contract major version"))
    return problems


def _struct_problems(model: type[BaseModel], columns: Mapping[str, Any], prefix: str
                     ) -> list[Problem]:
    problems = []
    known = []
    for wire, _, required in _fields(model):
        known.append(wire)
        path = f"{prefix}{wire}"
        spec = _spec_of(model, wire)
        column = columns.get(wire)
        if column is None:
            if required:
                problems.append(Problem(path, _expected(spec), "no such column",
                                        "missing required column"))
            continue
        problems += _column_problems(spec, column.type, path)
    for name, column in columns.items():
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(Problem(f"{prefix}{name}", f"only the fields of {model.__name__}{hint}",
                                    f"a column of {type_text(column.type)}", "unknown column"))
    return problems


def _column_problems(spec: Any, arrow_type: Any, path: str) -> list[Problem]:
    import pyarrow as pa

    if isinstance(spec, type) and issubclass(spec, Modalities):
        if not pa.types.is_struct(arrow_type):
            return [_type_problem(spec, arrow_type, path, "is not a struct of modalities")]
        return _struct_problems(spec, {f.name: f for f in arrow_type}, path + ".")
    why = _mismatch(spec, arrow_type)
    return [_type_problem(spec, arrow_type, path, why)] if why else []


def _type_problem(spec: Any, arrow_type: Any, path: str, why: str) -> Problem:
    return Problem(path, _expected(spec), type_text(arrow_type), f"column {why}")


def _mismatch(spec: Any, arrow_type: Any) -> str | None:
    """Why a column's type cannot hold the field, or None."""
    import pyarrow as pa

    if isinstance(spec, TensorSpec):
        return _tensor_mismatch(spec, arrow_type)
    if isinstance(spec, AnyObservation):
        if pa.types.is_struct(arrow_type):
            for child in arrow_type:
                leaf, _ = _peel(child.type)
                if _leaf_kind(leaf) not in ("b", "i", "f", "U"):
                    return f"has modality {child.name!r} of an unsupported type"
            return None
        return _tensor_mismatch(spec.spec, arrow_type)
    if isinstance(spec, JsonScalars) or spec is str:
        ok = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
        return None if ok else "has the wrong dtype"
    if spec in _PLAIN:
        return None if _leaf_kind(arrow_type) == _kind(_PLAIN[spec]) else "has the wrong dtype"
    return "has a type this model does not describe"


def _tensor_mismatch(spec: TensorSpec, arrow_type: Any) -> str | None:
    leaf, sizes = _peel(arrow_type)
    variadic = any(d.variadic for d in spec.shape)
    fixed = len(spec.shape) - variadic
    if len(sizes) < fixed or (not variadic and len(sizes) != fixed):
        return "has the wrong rank"
    declared: list[Dim | None] = list(spec.shape)
    if variadic:
        at = next(i for i, d in enumerate(spec.shape) if d.variadic)
        declared[at:at + 1] = [None] * (len(sizes) - fixed)
    for dim, size in zip(declared, sizes):
        if dim is not None and dim.size is not None and size is not None and size != dim.size:
            return "has the wrong size"
    kind = _leaf_kind(leaf)
    wanted = {_kind(d) for d in spec.dtypes}
    if kind in wanted or (kind in "iu" and "f" in wanted) or (kind == "u" and "i" in wanted):
        return None
    return "has the wrong dtype"


def _peel(arrow_type: Any) -> tuple[Any, list[int | None]]:
    """(leaf type, list sizes outer to inner; None for a variable list)."""
    import pyarrow as pa

    sizes: list[int | None] = []
    while True:
        if pa.types.is_fixed_size_list(arrow_type):
            sizes.append(arrow_type.list_size)
        elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
            sizes.append(None)
        else:
            return arrow_type, sizes
        arrow_type = arrow_type.value_type


def _leaf_kind(arrow_type: Any) -> str:
    import pyarrow as pa

    if pa.types.is_boolean(arrow_type):
        return "b"
    if pa.types.is_signed_integer(arrow_type):
        return "i"
    if pa.types.is_unsigned_integer(arrow_type):
        return "u"
    if pa.types.is_floating(arrow_type):
        return "f"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "U"
    return "?"


def _kind(dtype: str) -> str:
    return _KINDS.get(dtype, "f" if dtype.startswith(("float", "bfloat")) else "i")


def _expected(spec: Any) -> str:
    if isinstance(spec, TensorSpec):
        return spec.expected
    if isinstance(spec, AnyObservation):
        return spec.spec.expected + " or a struct of modalities"
    if isinstance(spec, type) and issubclass(spec, Modalities):
        return f"a struct of modalities ({spec.__name__})"
    if isinstance(spec, JsonScalars):
        return "string (the JSON text of an object of JSON scalars)"
    if spec in _PLAIN:
        return _PLAIN[spec]
    return "a column this model describes"


def type_text(arrow_type: Any) -> str:
    """An Arrow type in the contract's words: `float64[?, 4]`, `struct{token_ids: int64[?]}`."""
    import pyarrow as pa

    leaf, sizes = _peel(arrow_type)
    if pa.types.is_struct(leaf):
        inner = ", ".join(f"{f.name}: {type_text(f.type)}" for f in leaf)
        text = f"struct{{{inner}}}"
    else:
        text = _ARROW_NAMES.get(str(leaf), str(leaf))
    if sizes:
        text += "[" + ", ".join("?" if s is None else str(s) for s in sizes) + "]"
    return text


_ARROW_NAMES = {"float": "float32", "double": "float64", "halffloat": "float16",
                "large_string": "string"}


# -- writing ---------------------------------------------------------------------------------

def write_parquet(
    path: str | os.PathLike[str],
    steps: Iterable[BaseModel | Mapping[str, Any]],
    model: type[BaseModel] | None = None,
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
    written to `path + ".tmp"` and renamed, so a reader never sees half a file; with
    `fsync=True` it is on disk before the rename.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = os.fspath(path)
    tmp = name + ".tmp"
    steps = iter(steps)
    first = next(steps, None)
    if first is not None:
        steps = itertools.chain([first], steps)
    if model is None:
        model = type(first) if isinstance(first, RolloutStepV1) else RolloutStep
    pinned = _pinned(model)
    writer = None
    schema = None
    count = 0
    try:
        for start, chunk in _chunks(steps, rows_per_group):
            records = [_record(step, start + i) for i, step in enumerate(chunk)]
            if schema is None:
                sample = None if pinned else _first_sample(records, model)
                schema = to_arrow_schema(model, sample=sample)
                writer = _writer(pq, tmp, schema)
            _check_writable(records, schema, start)
            table = pa.Table.from_arrays(
                [_to_arrow(records, f, start) for f in schema], schema=schema)
            writer.write_table(table, row_group_size=rows_per_group)
            count += len(records)
        if writer is None:
            schema = to_arrow_schema(model) if pinned else pa.schema(
                [], metadata=_schema_metadata(model))
            writer = _writer(pq, tmp, schema)
        writer.close()
        writer = None
        if fsync:
            _fsync(tmp)
        os.replace(tmp, name)
    finally:
        if writer is not None:
            writer.close()
        if os.path.exists(tmp):
            os.remove(tmp)
    return count


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _writer(pq: Any, path: str, schema: Any) -> Any:
    try:
        return pq.ParquetWriter(path, schema)
    except OSError as err:
        raise InputError(f"cannot open {path} for writing: {err}") from None


def _pinned(model: type[BaseModel]) -> bool:
    try:
        to_arrow_schema(model)
    except SchemaError:
        return False
    return True


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


def _first_sample(records: list[dict[str, Any]], model: type[BaseModel]) -> Any:
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
        return pa.array(values, type=field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        pass
    for i, value in enumerate(values):
        try:
            pa.array([value], type=field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as err:
            raise ContractError(Problem(
                f"steps[{start + i}].{field.name}", type_text(field.type),
                describe(records[i].get(field.name)),
                f"cannot be written as this column ({str(err).splitlines()[0]})")) from None
    raise AssertionError("a column failed as a whole but no row failed")  # pragma: no cover


def _python(value: Any, field: Any) -> Any:
    if field.metadata and field.metadata.get(b"x-gyre-encoding") == b"json":
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


def _check_writable(records: list[dict[str, Any]], schema: Any, start: int) -> None:
    """Unknown keys and None values cannot be written; say so for every record of the batch."""
    names = set(schema.names)
    problems = []
    for i, record in enumerate(records):
        for key, value in record.items():
            if key not in names:
                problems.append(Problem(f"steps[{start + i}].{key}",
                                        "a field of the model (a column of the file)",
                                        describe(value), "unknown field cannot be written"))
            elif value is None:
                problems.append(Problem(f"steps[{start + i}].{key}",
                                        "a value (null is never valid in a record)", "None",
                                        "None cannot be written"))
    if problems:
        raise ContractError(problems)


# -- reading ---------------------------------------------------------------------------------

def open_parquet(path: str | os.PathLike[str]) -> Any:
    """A `pyarrow.parquet.ParquetFile`, or InputError (exit 2) when it cannot be read as one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = os.fspath(path)
    if os.path.isdir(name):
        raise InputError(f"is a directory, not a rollout file: {name}")
    if not os.path.exists(name):
        raise InputError(f"no such file: {name}")
    try:
        return pq.ParquetFile(name)
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(f"cannot read {name} as Parquet: {str(err).splitlines()[0]}") from None


def iter_parquet_records(
    path: str | os.PathLike[str],
    model: type[BaseModel] = RolloutStep,
    *,
    batch_rows: int = ROWS_PER_BATCH,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(row, record)` for every row (rows numbered from 1), not validated.

    Raises ContractError (one problem per column) before the first row when the file's Arrow
    schema disagrees with the model, and InputError when the file is not readable Parquet.
    """
    import pyarrow as pa

    handle = open_parquet(path)
    problems = arrow_schema_problems(handle.schema_arrow, model)
    if problems:
        raise ContractError(problems)
    row = 0
    try:
        for batch in handle.iter_batches(batch_size=batch_rows):
            for record in records_from_arrow(batch, model):
                row += 1
                yield row, record
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(f"cannot read {os.fspath(path)} after row {row}: "
                         f"{str(err).splitlines()[0]}") from None


def records_from_arrow(batch: Any, model: type[BaseModel] = RolloutStep) -> list[dict[str, Any]]:
    """Rows of an Arrow table or record batch as step records (numpy arrays for tensors).

    A null in an optional column means the field is absent; a null in a required column stays
    `None` so that validation reports it as the null it is. Columns the model does not have are
    kept, so validation reports them as unknown fields.
    """
    names = batch.schema.names
    n = batch.num_rows
    required = {w for w, _, req in _fields(model) if req}
    columns = []
    for name in names:
        spec = _spec_of(model, name) if name in _wire_names(model) else None
        columns.append(_values(batch.column(name), spec))
    records = []
    for i in range(n):
        record = {}
        for name, values in zip(names, columns):
            value = values[i]
            if value is not None or name in required:
                record[name] = value
        records.append(record)
    return records


def _wire_names(model: type[BaseModel]) -> set[str]:
    cached = model.__dict__.get("__gyre_parquet_wires__")
    if cached is None:
        cached = {info.alias or name for name, info in model.model_fields.items()}
        model.__gyre_parquet_wires__ = cached  # type: ignore[attr-defined]
    return cached


def _values(array: Any, spec: Any) -> list[Any]:
    """One column as a list of per-row Python values / numpy arrays (None for a null)."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    arrow_type = array.type
    if isinstance(spec, JsonScalars):
        return [_json_value(v) for v in array.to_pylist()]
    if pa.types.is_struct(arrow_type):
        return _struct_values(array, spec)
    _, sizes = _peel(arrow_type)
    if not sizes or _has_nested_nulls(array, len(sizes)):
        return array.to_pylist()
    if all(s is not None for s in sizes):
        return _fixed_values(array, sizes)
    if len(sizes) == 1:
        return _list_values(array)
    return array.to_pylist()  # several variable dims: nested lists, cast by validation


def _json_value(text: Any) -> Any:
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text  # not an object: validation reports it as such


def _struct_values(array: Any, spec: Any) -> list[Any]:
    sub_model = spec if isinstance(spec, type) and issubclass(spec, Modalities) else None
    required = {w for w, _, req in _fields(sub_model) if req} if sub_model else set()
    names = [f.name for f in array.type]
    children = []
    for i, name in enumerate(names):
        sub = None
        if sub_model is not None and name in _wire_names(sub_model):
            sub = _spec_of(sub_model, name)
        children.append(_values(array.field(i), sub))
    valid = array.is_valid().to_pylist() if array.null_count else None
    out = []
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


# -- validated steps and whole-file reports ----------------------------------------------------

def read_parquet_steps(
    path: str | os.PathLike[str], model: type[BaseModel] = RolloutStep,
) -> Iterator[BaseModel]:
    """Yield each row as a validated `model` instance, like `read_steps` on JSON Lines.

    Raises ContractError (with the row number as `line`) on the first row that breaks a record
    or episode rule, and before any row when the Arrow schema disagrees with the model.
    """
    yield from iter_validated_steps(iter_parquet_records(path, model), model)


def read_parquet_episodes(
    path: str | os.PathLike[str],
    model: type[BaseModel] = RolloutStep,
    *,
    include_open: bool = True,
) -> Iterator[Any]:
    """Yield the file's episodes as `rollout.Episode` columns, like `read_episodes`."""
    from gyre_contract.io.rollout import episode_from_steps

    open_steps: dict[str, list[tuple[int, BaseModel]]] = {}
    row = 0
    for step in read_parquet_steps(path, model):
        row += 1
        steps = open_steps.setdefault(step.episode_id, [])
        steps.append((row, step))
        if step.terminated or step.truncated:
            del open_steps[step.episode_id]
            yield episode_from_steps(steps, model)
    if include_open:
        for steps in open_steps.values():
            yield episode_from_steps(steps, model)


def validate_parquet(
    path: str | os.PathLike[str],
    model: type[BaseModel] = RolloutStep,
    *,
    require_complete: bool = False,
    max_examples_per_group: int = 3,
) -> Any:
    """Stage 1 on a Parquet file: the same `FileReport` as `validate_file`, rows for lines.

    A disagreeing Arrow schema gives one problem per column and no row is read (`records` 0,
    episode rules not checked). Raises InputError only when the file cannot be read.
    """
    return parquet_report(path, model, require_complete=require_complete,
                          max_examples_per_group=max_examples_per_group)


def parquet_report(
    path: str | os.PathLike[str],
    model: type[BaseModel],
    *,
    require_complete: bool,
    max_examples_per_group: int,
    wrap: Callable[[Iterator[Any]], Iterator[Any]] | None = None,
) -> Any:
    """`validate_parquet`, with the `(row, record)` items passed through `wrap` when given
    (how the shard check notes each episode id on its way)."""
    handle = open_parquet(path)
    builder = ReportBuilder(model, max_examples_per_group)
    problems = arrow_schema_problems(handle.schema_arrow, model)
    if problems:
        report = builder.unread(problems)
    else:
        items = iter_parquet_records(path, model)
        report = builder.run(wrap(items) if wrap is not None else items, require_complete)
    return builder.finish(report, path=path, lines=handle.metadata.num_rows,
                          require_complete=require_complete)


class ReportBuilder:
    """Builds the `FileReport` of `validate_file` from `(line, record)` items of any source.

    It drives the loop behind `rollout.validate_file` (`validate_step`, `EpisodeTracker`,
    problem groups, field table), so a Parquet file, a shard on a Ray worker and a JSON Lines
    file are reported alike.
    """

    def __init__(self, model: type[BaseModel], max_examples_per_group: int) -> None:
        from gyre_contract.io import rollout

        self.model = model
        self.groups = rollout._Groups(max_examples_per_group)
        self.stats = rollout._FieldStats(model)

    def run(self, items: Iterable[Any], require_complete: bool) -> Any:
        from gyre_contract.io import rollout

        return rollout._validate_with_model(items, self.model, self.groups, self.stats,
                                            require_complete)

    def unread(self, problems: list[Problem]) -> Any:
        """A report for a file whose rows were not read (its schema disagrees)."""
        from gyre_contract.io.rollout import FileReport

        self.groups.add(problems)
        return FileReport(path="", checked_against=f"model {self.model.__name__}")

    def finish(self, report: Any, *, path: str | os.PathLike[str], lines: int,
               require_complete: bool, tail_bytes: int = 0) -> Any:
        report.path = os.fspath(path)
        report.lines = lines
        report.partial_tail_bytes = tail_bytes
        report.require_complete = require_complete
        if lines == 0:
            self.groups.add([Problem("", "at least one step record", "an empty file",
                                     "no records")])
        report.fields, report.more_fields = self.stats.summaries()
        report.groups = list(self.groups.groups.values())
        report.problem_count = self.groups.count
        report.ungrouped = self.groups.ungrouped
        return report
