"""The Arrow layout of a step model, and whether a Parquet file's columns fit it (extra `parquet`).

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
problem per column and reads no row (`arrow_schema_problems`). pyarrow is imported inside the
functions only. Writing and reading rows is `parquet.py`.
"""

from __future__ import annotations

import difflib
import json
import os
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel

from gyre_contract.core._dims import Dim, format_shape
from gyre_contract.core._errors import Problem, SchemaError, describe
from gyre_contract.core._fields import TOKEN_FIELDS
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import (
    AnyObservation,
    GyreModel,
    JsonScalars,
    Modalities,
    RolloutStep,
    RolloutStepV1,
    field_specs,
)
from gyre_contract.core._tensor import TensorSpec
from gyre_contract.core._text import quoted
from gyre_contract.core._validate import validate_step

EXTENSIONS = (".parquet", ".pq")
"""File name endings read and written as Parquet (anything else is JSON Lines)."""

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

def to_arrow_schema(model: type[RolloutStepV1] = RolloutStep, *, sample: Any = None) -> Any:
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
        spec = spec_of(model, wire)
        if value is None and wire in TOKEN_FIELDS and isinstance(spec, TensorSpec):
            spec, value = _token_layout(model, step, wire, spec)
        if value is None and not required and isinstance(spec, TensorSpec):
            spec = _without_variadic(spec)
        if value is None and isinstance(spec, AnyObservation) and step is not None:
            value = step.observation  # next_observation is laid out like observation
        try:
            arrow_type = _arrow_type(spec, value)
        except SchemaError as err:
            problems.append(f"{wire}: {err}")
            continue
        meta = _field_metadata(spec_of(model, wire), model.model_fields[attr], value)
        fields.append(pa.field(wire, arrow_type, nullable=not required, metadata=meta))
    if problems:
        raise SchemaError(f"no Arrow schema for {model.__name__}: " + "; ".join(problems))
    return pa.schema(fields, metadata=schema_metadata(model))


def _token_layout(model: type[RolloutStepV1], step: Any, wire: str, spec: TensorSpec
                  ) -> tuple[TensorSpec, Any]:
    """A free-shape token field (`*name`) laid out as the field its rule binds it to:
    `ref_logprob` as `logprob`, `loss_mask` and `token_reward` as the action (its dims, the
    field's own dtype), from the sample or a pinned shape; else (spec, None) unchanged."""
    if not any(d.variadic for d in spec.shape):
        return spec, None
    partner = "logprob" if wire == "ref_logprob" else "action"
    value = getattr(step, partner, None) if step is not None else None
    if value is not None:
        return spec, np.zeros(np.shape(value), bool)  # only its rank is read
    pinned = spec_of(model, partner)
    if isinstance(pinned, TensorSpec) and not any(d.variadic for d in pinned.shape):
        return TensorSpec(spec.dtype, pinned.shape, spec.role, spec.description, spec.finite), None
    return spec, None


def _without_variadic(spec: TensorSpec) -> TensorSpec:
    """An optional `*name` field the sample does not settle: laid out with `*name` empty."""
    shape = tuple(d for d in spec.shape if not d.variadic)
    return TensorSpec(spec.dtype, shape, spec.role, spec.description, spec.finite)


def _validated_sample(sample: Any, model: type[RolloutStepV1]) -> Any:
    if sample is None:
        return None
    if isinstance(sample, model):
        return sample
    return validate_step(sample, model)


def _fields(model: type[BaseModel]) -> list[tuple[str, str, bool]]:
    """(wire name, attribute, required) of every field, in declaration order."""
    info = model_info(model)
    return [(wire, info.attr(wire), wire in info.required) for wire in info.wires]


def spec_of(model: type[BaseModel], wire: str) -> Any:
    """What a field holds: a TensorSpec, AnyObservation, Modalities class, JsonScalars (`info`)
    or, for a plain field, its annotation (`str`)."""
    spec = field_specs(model).get(wire)
    if spec is not None:
        return spec
    info = model.model_fields[model_info(model).attr(wire)]
    for item in info.metadata:
        if isinstance(item, JsonScalars):
            return item
    return info.annotation


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
        return _tensor_type(spec.spec_for(value), value)  # an integer ndarray keeps its dtype
    if isinstance(spec, type) and issubclass(spec, Modalities):
        return pa.struct([
            pa.field(wire, _arrow_type(spec_of(spec, wire),
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


def json_read_type(dtype: str, rank: int) -> Any:
    """The Arrow type pyarrow's JSON reader reads a field of `dtype` and `rank` as, exactly: a
    float as float64 and an integer as int64 (JSON numbers: the value the row path reads too,
    narrowed to the dtype afterwards, `columnrules.narrowed`), a bool or a string as such,
    inside one variable list per dim (the reader has no fixed-size lists: sizes are checked
    on the columns)."""
    import pyarrow as pa

    kind = _kind(dtype)
    arrow_type = _leaf("float64" if kind == "f" else "int64" if kind == "i" else dtype)
    for _ in range(rank):
        arrow_type = pa.list_(arrow_type)
    return arrow_type


def _dtype_name(dtype: np.dtype) -> str:
    return "string" if dtype.kind == "U" else str(dtype)


def _field_metadata(spec: Any, info: Any, value: Any = None) -> dict[bytes, bytes]:
    meta: dict[str, Any] = {}
    if isinstance(spec, TensorSpec):
        meta = {"x-gyre-dtype": spec.dtype if isinstance(spec.dtype, str) else list(spec.dtype),
                "x-gyre-shape": [d.to_json() for d in spec.shape], "x-gyre-role": spec.role}
    elif isinstance(spec, AnyObservation):
        meta = {"x-gyre-dtype": spec.spec_for(value).dtype, "x-gyre-shape": ["*obs"],
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


def schema_metadata(model: type[GyreModel]) -> dict[bytes, bytes]:
    return {b"x-gyre-kind": str(model.gyre_kind).encode(),
            b"x-gyre-version": str(model.gyre_version).encode(),
            b"x-gyre-model": model.__name__.encode(),
            b"x-gyre-varying-dims": json.dumps(list(model.varying_dims)).encode()}


# -- does a file's Arrow schema fit the model? ------------------------------------------------

def arrow_schema_problems(schema: Any, model: type[RolloutStepV1] = RolloutStep) -> list[Problem]:
    """One problem per column that disagrees with the model; [] when every column fits.

    Each names the field rule the column breaks for every row (`field.required` for a missing
    column, `field.unknown`, `field.shape`, `field.object`, else `field.dtype`); a file of another
    record kind or contract major version is a problem of the file, with no rule.

    A column fits when its nesting depth is the field's rank, a `fixed_size_list` has the
    declared size of a fixed dim, and its leaf is of the dtype's kind (bool, integer, float,
    string; an integer column may feed a float field). Widths are not compared here: each value
    is still cast losslessly row by row, exactly as a JSON Lines value is.
    """
    problems = _metadata_problems(schema.metadata or {}, model)
    problems += _struct_problems(model, _by_name(schema), "")
    return problems


def _by_name(fields: Any) -> dict[str, Any]:
    """Columns by name; a name used more than once maps to its count (a duplicated column)."""
    counts = Counter(f.name for f in fields)
    return {f.name: f if counts[f.name] == 1 else counts[f.name] for f in fields}


def _metadata_problems(meta: Mapping[bytes, bytes], model: type[GyreModel]) -> list[Problem]:
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
    problems = [Problem(f"{prefix}{name}", "each column once", f"{count} columns named {quoted(name)}",
                        "duplicated column") for name, count in columns.items()
                if isinstance(count, int)]
    duplicated = {name for name, column in columns.items() if isinstance(column, int)}
    columns = {name: column for name, column in columns.items() if name not in duplicated}
    known = [*duplicated]
    for wire, _, required in _fields(model):
        known.append(wire)
        path = f"{prefix}{wire}"
        spec = spec_of(model, wire)
        column = columns.get(wire)
        if wire in duplicated:
            continue
        if column is None:
            if required:
                problems.append(Problem(path, _expected(spec), "no such column",
                                        "missing required column").by_rule("field.required"))
            continue
        problems += _column_problems(spec, column.type, path)
    for name, column in columns.items():
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(Problem(f"{prefix}{name}", f"only the fields of {model.__name__}{hint}",
                                    f"a column of {type_text(column.type)}", "unknown column"
                                    ).by_rule("field.unknown"))
    return problems


def _column_problems(spec: Any, arrow_type: Any, path: str) -> list[Problem]:
    import pyarrow as pa

    if isinstance(spec, type) and issubclass(spec, Modalities):
        if not pa.types.is_struct(arrow_type):
            return [_type_problem(spec, arrow_type, path, "is not a struct of modalities")]
        return _struct_problems(spec, _by_name(arrow_type), path + ".")
    if pa.types.is_null(arrow_type):
        return []  # every row null: absent where optional, reported per row where required
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type  # read decoded, like the plain column
    why = _mismatch(spec, arrow_type)
    return [_type_problem(spec, arrow_type, path, why)] if why else []


def _type_problem(spec: Any, arrow_type: Any, path: str, why: str) -> Problem:
    rule = COLUMN_RULES.get(why, "field.dtype")
    return Problem(path, _expected(spec), type_text(arrow_type), f"column {why}").by_rule(rule)


COLUMN_RULES = {"has the wrong rank": "field.shape", "has the wrong size": "field.shape",
                "is not a struct of modalities": "field.object"}
"""The field rule a column that cannot hold its field breaks (any other mismatch: `field.dtype`),
so a Parquet file's schema problems name the same rules as the row's would on JSON Lines."""


def _mismatch(spec: Any, arrow_type: Any) -> str | None:
    """Why a column's type cannot hold the field, or None."""
    import pyarrow as pa

    if isinstance(spec, TensorSpec):
        return _tensor_mismatch(spec, arrow_type)
    if isinstance(spec, AnyObservation):
        if pa.types.is_struct(arrow_type):
            for child in arrow_type:
                leaf, _ = peel(child.type)
                if _leaf_kind(leaf) not in ("b", "i", "u", "f", "U", "null"):
                    return f"has modality {quoted(child.name)} of an unsupported type"
            return None
        return _tensor_mismatch(spec.spec, arrow_type)
    if isinstance(spec, JsonScalars) or spec is str:
        ok = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
        return None if ok else "has the wrong dtype"
    if spec in _PLAIN:
        return None if _leaf_kind(arrow_type) == _kind(_PLAIN[spec]) else "has the wrong dtype"
    return "has a type this model does not describe"


def _tensor_mismatch(spec: TensorSpec, arrow_type: Any) -> str | None:
    leaf, sizes = peel(arrow_type)
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
    if kind == "null" and sizes:
        return None  # lists of no type hold only `[]` (the field's dtype, as in JSON) or nulls
    wanted = {_kind(d) for d in spec.dtypes}
    if kind in wanted or (kind in "iu" and "f" in wanted) or (kind == "u" and "i" in wanted):
        return None
    return "has the wrong dtype"


def peel(arrow_type: Any) -> tuple[Any, list[int | None]]:
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
    if pa.types.is_null(arrow_type):
        return "null"
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

    leaf, sizes = peel(arrow_type)
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



def is_pinned(model: type[RolloutStepV1]) -> bool:
    """Whether `model` lays out without a sample (every field of one dtype and a known rank)."""
    try:
        to_arrow_schema(model)
    except SchemaError:
        return False
    return True


def layout_problems(records: list[dict[str, Any]], schema: Any, start: int) -> list[Problem]:
    """Rows `start`.. of `records` whose value has not the layout of its column of `schema`: a
    scalar where the column holds lists, or a list where it holds scalars.

    An unpinned `*name` field (`logprob`, `ref_logprob`: [] or the action's dims) may take
    either form from record to record in JSON Lines, but a Parquet column has one layout,
    settled by the first record (`steps[0]`)."""
    import pyarrow as pa

    problems = []
    for column in schema:
        if column.metadata and column.metadata.get(b"x-gyre-encoding") == b"json" \
                or pa.types.is_struct(column.type) or pa.types.is_string(column.type):
            continue
        lists = pa.types.is_list(column.type) or pa.types.is_large_list(column.type) \
            or pa.types.is_fixed_size_list(column.type)
        for i, record in enumerate(records):
            value = record.get(column.name)
            scalar = not isinstance(value, (list, tuple, np.ndarray)) or np.ndim(value) == 0
            if value is None or lists != scalar:
                continue
            layout = "a list per row" if lists else "one value per row"
            problems.append(Problem(
                f"steps[{start + i}].{column.name}", type_text(column.type), describe(value),
                f"cannot be written as this column: a Parquet column has one layout, here "
                f"{layout} as settled by steps[0]; write {column.name} in one form in the "
                f"whole file (or pin the model), or use JSON Lines"))
    return sorted(problems, key=lambda p: _row_of(p.path))


def dtype_problems(records: list[dict[str, Any]], schema: Any, start: int,
                   model: type[BaseModel]) -> list[Problem]:
    """Rows `start`.. of `records` whose integers would go into a float column of a field whose
    dtype `model` leaves open: the unpinned action (`int64` or `float32`) or a free modality.

    JSON Lines keeps each value's own dtype (the episode rule `episode.dtype_fixed` compares
    them); a Parquet column has one, settled by the first record (`steps[0]`), and an integer
    written into a float column would come back a float, a record the JSON Lines file does not
    hold. (A float into an integer column is refused by `parquet._changed_by_arrow`.)"""
    import pyarrow as pa

    specs = field_specs(model)
    problems = []
    for column in schema:
        spec = specs.get(column.name)
        if isinstance(spec, TensorSpec) and len(spec.dtypes) > 1:
            children = [("", column.type)]
        elif isinstance(spec, AnyObservation) and pa.types.is_struct(column.type):
            children = [(f".{child.name}", child.type) for child in column.type]
        else:
            continue
        for suffix, arrow_type in children:
            leaf, _ = peel(arrow_type)
            if not pa.types.is_floating(leaf):
                continue
            for i, record in enumerate(records):
                value = record.get(column.name)
                if suffix and isinstance(value, dict):
                    value = value.get(suffix[1:])
                if _integers_only(value):
                    problems.append(Problem(
                        f"steps[{start + i}].{column.name}{suffix}", type_text(arrow_type),
                        describe(value),
                        f"cannot be written as this column: a Parquet column has one dtype, here "
                        f"{type_text(leaf)} as settled by steps[0]; write {column.name}{suffix} "
                        f"in one dtype in the whole file (or pin the model), or use JSON Lines"))
    return sorted(problems, key=lambda p: _row_of(p.path))


def _integers_only(value: Any) -> bool:
    """Whether a value is integers and nothing else (at least one): an int, an integer array,
    nested lists of ints."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.dtype.kind in "iu" and value.size > 0
    stack, seen = [value], False
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            seen = True
        else:
            return False
    return seen


def _row_of(path: str) -> int:
    return int(path[len("steps["):path.index("]")])
