"""Segments: the steps of one `put`, as one Arrow IPC file (extra `parquet`: pyarrow).

A segment is an Arrow IPC file (`pyarrow.ipc.new_file`) holding one record batch laid out by
`io._arrowschema.to_arrow_schema` (the layout of the package's Parquet files: one column per
record key, a fixed dim a `fixed_size_list`, a symbolic dim a variable `list`, modalities a
`struct`), with the segment's facts as JSON under the schema metadata key `gyre-channel`
(`SegmentMeta`: its id, writer, fingerprint, counts, policy versions, timestamps). Any Arrow
reader opens it.

Encoding takes the columns of a checked block (`io._blocks.CheckedBlock.columnar`): numbers as
arrays become Arrow buffers with one copy (no Python value per step), ragged lists held as
values and lengths (`Ragged`) a list column from those two, modalities held as columns
(`Objects`) a struct of such columns; other columns (strings, lists given per step) are built
per column, ragged arrays concatenated once. Fields that no step
of the segment carries are left out of its file (a reader sees no such column, as it would see
a column of nulls: half the bytes of a CartPole segment).

Decoding gives the columns back per step, as episodes read from a file hold them (`Episode`):
an `[n, ...]` array for a fixed layout, a list of arrays for a field with a varying dim (the
schema's `x-gyre-varying-dims`), a dict for modalities, NaN (floats) or None where an optional
field is absent; `info` is left out (never collated). pyarrow is imported here only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from gyre_contract.channel import _contract as contract
from gyre_contract.core._errors import InputError

META_KEY = b"gyre-channel"
"""The schema metadata key of a segment's facts (JSON)."""
FORMAT = 1
"""The segment format version (`SegmentMeta.format`)."""


class SegmentError(InputError):
    """A file or object that is not a readable segment of this channel (corrupt or foreign)."""


class SegmentGone(SegmentError):
    """A segment acked (and removed) between listing and reading it: not a problem."""


@dataclass
class SegmentMeta:
    """What a segment says about itself (its schema metadata), and what `channel status` adds up."""

    segment: str
    writer: str
    seq: int
    """1, 2, 3, ... per writer: a gap means a segment that never arrived."""
    fingerprint: str
    """The sampler's fingerprint (its step schema and the contract version)."""
    steps: int
    episodes: int
    """Distinct episode ids in the segment (an episode put in pieces counts in each piece)."""
    ended: int
    """Episodes this segment ends (a terminated or truncated step)."""
    policy_versions: dict[str, int]
    """Steps per policy version (JSON keys are strings)."""
    started: float
    """Wall clock (time.time) when `put` was called."""
    written: float
    """Wall clock when the segment was complete (before it became visible)."""
    writer_steps: int = 0
    """Steps the writer had put when this segment was written, itself included."""
    writer_episodes: int = 0
    format: int = FORMAT
    bytes: int = 0
    """The segment's size (filled by the reader; not in the file)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The facts as the segment's metadata holds them (`bytes` is the reader's)."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__
                if name != "bytes"}
        data["policy_versions"], data["extra"] = dict(self.policy_versions), dict(self.extra)
        return data

    @classmethod
    def from_json(cls, data: Any, where: str) -> SegmentMeta:
        if not isinstance(data, Mapping):
            raise SegmentError(f"{where}: segment facts are not a JSON object")
        known = {f for f in cls.__dataclass_fields__ if f != "bytes"}
        missing = sorted(known - set(data) - {"extra", "writer_steps", "writer_episodes"})
        if missing:
            raise SegmentError(f"{where}: segment facts lack {', '.join(missing)}")
        try:
            meta = cls(**{k: data[k] for k in known if k in data})
        except TypeError as err:
            raise SegmentError(f"{where}: bad segment facts: {err}") from None
        if meta.format != FORMAT:
            raise SegmentError(f"{where}: segment format {meta.format!r}; this gyre-contract "
                               f"reads format {FORMAT}")
        return meta

    @property
    def versions(self) -> list[int]:
        return sorted(int(v) for v in self.policy_versions)


# -- encoding ----------------------------------------------------------------------------------

def encode(columns: Mapping[str, Any], n: int, schema: Any, meta: SegmentMeta) -> Any:
    """The Arrow IPC file of one segment, as a `pyarrow.Buffer`: `columns` (a checked block's)
    laid out by `schema` (`to_arrow_schema` of the sampler's model), `meta` in its metadata.
    A field no step of the segment carries is left out (a reader sees no such column, as it
    would see a column of nulls)."""
    import pyarrow as pa

    arrays, present = [], []
    layout, base, schemas = _layout(schema)
    for i, (f, name, json_text) in enumerate(layout):
        values = columns.get(name)
        array = None if values is None else _array(f, values, n, json_text)
        if array is not None and array.null_count < n:
            arrays.append(array)
            present.append(i)
    key = tuple(present)
    fields = schemas.get(key)
    if fields is None:  # the schema of the fields a segment carries, made once per set of them
        if len(schemas) >= 64:
            schemas.clear()
        fields = schemas[key] = pa.schema([layout[i][0] for i in present])
    metadata = {**base, META_KEY: orjson.dumps(meta.to_json())}
    batch = pa.RecordBatch.from_arrays(arrays, schema=fields.with_metadata(metadata))
    if batch.get_total_buffer_size() < EXACT_BUFFER_BYTES:
        sink = pa.BufferOutputStream()
        _write_ipc(sink, batch)
        return sink.getvalue()
    counter = pa.MockOutputStream()  # the file's size, nothing copied: one buffer of it, filled
    _write_ipc(counter, batch)  # once (a growing buffer copies a large segment several times)
    buffer = pa.allocate_buffer(counter.size())
    _write_ipc(pa.FixedSizeBufferWriter(buffer), batch)
    return buffer


_LAYOUTS: dict[int, tuple[Any, list[tuple[Any, str, bool]], dict[bytes, bytes],
                          dict[tuple[int, ...], Any]]] = {}


def _layout(schema: Any) -> tuple[list[tuple[Any, str, bool]], dict[bytes, bytes],
                                  dict[tuple[int, ...], Any]]:
    """(each field, its name, whether it is JSON text; the schema's metadata; the schemas of
    the sets of fields segments carried, by their indices) of a segment schema, read once per
    schema (a sampler end puts many segments of one)."""
    held = _LAYOUTS.get(id(schema))
    if held is None or held[0] is not schema:
        if len(_LAYOUTS) >= 16:
            _LAYOUTS.clear()
        held = _LAYOUTS[id(schema)] = (schema, [(f, f.name, _is_json(f)) for f in schema],
                                       dict(schema.metadata or {}), {})
    return held[1], held[2], held[3]


def _is_json(f: Any) -> bool:
    return bool(f.metadata) and f.metadata.get(b"x-gyre-encoding") == b"json"


EXACT_BUFFER_BYTES = 2**20
"""From this many bytes of columns, `encode` counts the file's size first and writes it into
one buffer of exactly that size."""


def _write_ipc(sink: Any, batch: Any) -> None:
    import pyarrow as pa

    with pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)


def _array(f: Any, values: Any, n: int, json_text: bool | None = None) -> Any:
    import pyarrow as pa

    if _is_json(f) if json_text is None else json_text:
        return pa.array([None if v is None else orjson.dumps(v).decode() for v in values],
                        pa.string())
    if isinstance(values, np.ndarray):
        return _from_ndarray(f.type, values, _nan_rows(values) if f.nullable else None)
    if isinstance(values, contract.Ragged) and pa.types.is_list(f.type) \
            and not pa.types.is_list(f.type.value_type) and values.values.ndim == 1:
        null = np.zeros(n, bool) if values.present is None else ~values.present
        return _ragged_array(f.type, values.lengths, [values.values], null)
    if isinstance(values, contract.Objects) and pa.types.is_struct(f.type):
        return _objects(f.type, values, n)
    if isinstance(values, contract.CodedIds) and pa.types.is_string(f.type):
        return pa.array(values.ids, f.type).take(pa.array(values.codes))  # one str per id
    if isinstance(values, (contract.Ragged, contract.Objects)):
        values = values.per_record()
    return _from_values(f.type, list(values))


def _objects(arrow_type: Any, objects: Any, n: int) -> Any:
    """A struct column from modalities held as columns (`Objects`): each child from its own
    column, null where a step lacks it; the struct null where a step lacks the object."""
    import pyarrow as pa

    children = []
    for child in arrow_type:
        values = objects.children.get(child.name)
        if values is None:
            children.append(pa.nulls(n, child.type))
            continue
        mask = objects.masks[child.name]
        null = None if mask.all() else ~mask
        if isinstance(values, np.ndarray):  # a float NaN, any number, where the step lacks it
            children.append(_from_ndarray(child.type, values, null))
            continue
        array = _array(child, values, n)
        if null is not None and not array.is_null().to_numpy(zero_copy_only=False)[null].all():
            raise ValueError(f"modality {child.name}: a value on a step that lacks it")
        children.append(array)
    present = objects.present
    return pa.StructArray.from_arrays(children, fields=list(arrow_type),
                                      mask=None if present.all() else pa.array(~present))


def _nan_rows(array: np.ndarray) -> np.ndarray | None:
    """Rows that are NaN throughout: where a checked block marks a float field absent."""
    if array.dtype.kind != "f":
        return None
    rows = np.isnan(array.reshape(len(array), -1)).all(axis=1) if array.ndim > 1 else \
        np.isnan(array)
    return rows if rows.any() else None


def _from_ndarray(arrow_type: Any, array: np.ndarray, null: np.ndarray | None = None) -> Any:
    """An `[n, ...]` array as a column of `arrow_type` (lists of one length each)."""
    import pyarrow as pa

    mask = None if null is None else pa.array(null)
    if pa.types.is_string(arrow_type):
        return pa.array(array.tolist() if array.dtype.kind != "U" else array, arrow_type)
    n = len(array)
    if pa.types.is_fixed_size_list(arrow_type) or pa.types.is_list(arrow_type):
        inner = arrow_type.value_type
        width = array.shape[1] if array.ndim > 1 else 0
        values = _from_ndarray(inner, array.reshape(n * width, *array.shape[2:]))
        if pa.types.is_fixed_size_list(arrow_type):
            return pa.FixedSizeListArray.from_arrays(values, type=arrow_type, mask=mask)
        offsets = pa.array(np.arange(n + 1, dtype=np.int32) * width)
        return pa.ListArray.from_arrays(offsets, values, type=arrow_type, mask=mask)
    return pa.array(array, arrow_type, mask=null)


def _from_values(arrow_type: Any, values: list[Any]) -> Any:
    """A column given as one value per step (None where absent)."""
    import pyarrow as pa

    nested = pa.types.is_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type)
    if not nested and not pa.types.is_struct(arrow_type):
        return pa.array(values, arrow_type)  # None: null
    null = np.fromiter((v is None for v in values), bool, len(values))
    if null.all():
        return pa.nulls(len(values), arrow_type)
    if pa.types.is_struct(arrow_type):
        children = [_from_values(f.type, [None if v is None else v.get(f.name) for v in values])
                    for f in arrow_type]
        return pa.StructArray.from_arrays(children, fields=list(arrow_type),
                                          mask=pa.array(null) if null.any() else None)
    arrays = [v if v.__class__ is np.ndarray else np.asarray(v)
              for v in (values if not null.any() else (v for v in values if v is not None))]
    if {a.ndim for a in arrays} == {1}:  # token lists: one length per step
        sizes = np.fromiter(map(len, arrays), np.int64, len(arrays))
        if not null.any() and (sizes == sizes[0]).all():
            return _from_ndarray(arrow_type, np.stack(arrays))
        if pa.types.is_list(arrow_type):
            lengths = np.zeros(len(values), np.int64)
            lengths[~null] = sizes
            return _ragged_array(arrow_type, lengths, arrays, null)
    shapes = {a.shape for a in arrays}
    if len(shapes) == 1 and not null.any():
        return _from_ndarray(arrow_type, np.stack(arrays))
    if pa.types.is_list(arrow_type) and all(len(shape) >= 1 for shape in shapes):
        lengths = np.zeros(len(values), np.int64)
        lengths[~null] = [len(a) for a in arrays]
        return _ragged_array(arrow_type, lengths, arrays, null)
    return pa.array([None if v is None else np.asarray(v).tolist() for v in values], arrow_type)


def _ragged_array(arrow_type: Any, lengths: np.ndarray, arrays: list[np.ndarray],
                  null: np.ndarray) -> Any:
    """A list column from each step's length (0 where absent) and its arrays, concatenated once."""
    import pyarrow as pa

    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise InputError(f"a segment column holds {offsets[-1]} values; put fewer steps "
                         "at a time (Arrow lists hold fewer than 2**31)")
    inner = arrow_type.value_type
    flat = _from_values(inner, [x for a in arrays for x in a]) if pa.types.is_list(inner) \
        else _from_ndarray(inner, arrays[0] if len(arrays) == 1 else np.concatenate(arrays))
    # one array (a `Ragged`'s values): Arrow takes its buffer as it is, no copy
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), flat, type=arrow_type,
                                    mask=pa.array(null) if null.any() else None)


# -- decoding ----------------------------------------------------------------------------------

def allocate(size: int) -> Any:
    """A writable buffer of `size` bytes that Arrow reads columns from in place (64-byte
    aligned), for a segment's bytes read from a file."""
    import pyarrow as pa

    return pa.allocate_buffer(size)


def decode(data: Any, where: str) -> tuple[Any, SegmentMeta]:
    """(the table, its facts) of a segment's bytes; SegmentError when they are not one."""
    import pyarrow as pa

    try:
        reader = pa.ipc.open_file(data if isinstance(data, pa.Buffer) else pa.py_buffer(data))
        table = reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as err:
        raise SegmentError(f"{where}: not an Arrow IPC file ({str(err).splitlines()[0]})"
                           ) from None
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise SegmentError(f"{where}: an Arrow file without segment facts (not written by a "
                           "channel's sampler)")
    try:
        facts = orjson.loads(raw)
    except ValueError:
        raise SegmentError(f"{where}: segment facts are not JSON") from None
    meta = SegmentMeta.from_json(facts, where)
    if table.num_rows != meta.steps:
        raise SegmentError(f"{where}: {table.num_rows} rows but the segment says {meta.steps}")
    names = set(table.schema.names)  # not `column_names`: a Field object per column
    for name in ("episode_id", "policy_version", "step", "terminated", "truncated"):
        if name not in names:
            raise SegmentError(f"{where}: no {name} column")
    return table, meta


def read_meta(source: Any, where: str) -> SegmentMeta:
    """A segment's facts from its file (the footer's schema only) or bytes; SegmentError."""
    import pyarrow as pa

    try:
        handle = pa.memory_map(source) if isinstance(source, str) else \
            source if isinstance(source, pa.Buffer) else pa.py_buffer(source)
        schema = pa.ipc.open_file(handle).schema
    except (pa.ArrowInvalid, OSError, ValueError) as err:
        raise SegmentError(f"{where}: not an Arrow IPC file ({str(err).splitlines()[0]})"
                           ) from None
    raw = (schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise SegmentError(f"{where}: an Arrow file without segment facts")
    try:
        return SegmentMeta.from_json(orjson.loads(raw), where)
    except ValueError:
        raise SegmentError(f"{where}: segment facts are not JSON") from None


def concat(tables: Sequence[Any]) -> Any:
    """The segments of one delivery as one table (columns that only some carry are nulls)."""
    import pyarrow as pa

    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="default")


def row_keys(table: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(each row's episode code, numbered in order of first appearance; the episode ids by code
    as str_; each row's policy version as int64) of a table: Arrow's dictionary encoding, no
    Python value per row."""
    codes, ids = _codes(table.column("episode_id"))
    versions = table.column("policy_version").to_numpy().astype(np.int64, copy=False)
    return codes, ids, versions


def _codes(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """(code per row, numbered in order of first appearance; the distinct values by code) of a
    string column without nulls: Arrow's dictionary encoding. (Codes from its run-end encoding,
    where each episode is one run of rows, were tried: no faster on a CartPole segment.)"""
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    encoded = array.dictionary_encode()
    codes = encoded.indices.to_numpy().astype(np.int64, copy=False)
    return codes, np.array(encoded.dictionary.to_pylist(), dtype=np.str_)


def to_columns(table: Any, episodes: tuple[np.ndarray, np.ndarray] | None = None, *,
               ragged: bool = False) -> dict[str, Any]:
    """The table's columns per step (module doc), nested dicts for modalities. `episodes`:
    the table's `row_keys` codes and ids, when known (`episode_id` is then `ids[codes]`).
    `ragged`: a field whose one dim varies, carried by every step, as a `Ragged` (its values
    one after another, read in place, and each step's length) rather than an array per step."""
    varying, fields = _reading(table.schema)
    out: dict[str, Any] = {}
    for f, column in zip(fields, table.columns):  # not `table.column(name)`: a lookup each
        if f is None:
            continue  # `info`: free-form, never collated
        if f.name == "episode_id" and episodes is not None:
            out[f.name] = episodes[1][episodes[0]]
            continue
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        if column.null_count == len(column):
            continue  # no step carries it
        out[f.name] = _column(column, f, varying, ragged)
    return out


_READINGS: list[tuple[Any, bytes, tuple[set[str], list[Any]]]] = []
"""The last few segment schemas `to_columns` read (without their segment facts), with what
it reads from their metadata: a trainer end reads many segments of one schema."""


def _reading(schema: Any) -> tuple[set[str], list[Any]]:
    """(the varying dims the schema's metadata names; each field, None for a JSON-text one) of
    a segment schema, parsed once per schema: a held one is used when the schema equals it
    field for field, metadata included (the segment's own facts aside)."""
    raw = (schema.metadata or {}).get(b"x-gyre-varying-dims", b"[]")
    bare = schema.remove_metadata()  # the schema's own metadata only; the fields keep theirs
    for held, held_raw, reading in _READINGS:
        if held_raw == raw and held.equals(bare, check_metadata=True):
            return reading
    reading = (set(json.loads(raw)), [None if _is_json(f) else f for f in bare])
    _READINGS[:] = [(bare, raw, reading), *_READINGS[:3]]
    return reading


def _column(array: Any, f: Any, varying: set[str], ragged: bool = False) -> Any:
    import pyarrow as pa

    arrow_type = array.type
    null = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
    if pa.types.is_struct(arrow_type):
        return {child.name: _column(array.field(i), child, varying, ragged)
                for i, child in enumerate(arrow_type)
                if array.field(i).null_count < len(array)}
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        if null is not None:
            return array.to_pylist()
        codes, values = _codes(array)  # a str_ per distinct value, not per step
        return values[codes]
    if pa.types.is_fixed_size_list(arrow_type) or pa.types.is_list(arrow_type):
        return _list_column(array, f, varying, null, ragged)
    values = array.to_numpy(zero_copy_only=False)
    if null is None:
        return values
    if values.dtype.kind == "f":
        return np.where(null, np.nan, values).astype(values.dtype)
    return [None if missing else v for v, missing in zip(values.tolist(), null)]


def _list_column(array: Any, f: Any, varying: set[str], null: np.ndarray | None,
                 ragged: bool = False) -> Any:
    import pyarrow as pa

    n = len(array)
    sizes = []
    inner = array.type
    while pa.types.is_fixed_size_list(inner) or pa.types.is_list(inner):
        sizes.append(inner.list_size if pa.types.is_fixed_size_list(inner) else None)
        inner = inner.value_type
    if None not in sizes:  # fixed sizes throughout: one reshape
        flat = array
        for _ in sizes:
            flat = flat.values if flat.offset == 0 else flat.flatten()
        values = flat.to_numpy(zero_copy_only=False).reshape(n, *sizes)
        if null is None:
            return values
        if values.dtype.kind == "f":
            values = values.copy()
            values[null] = np.nan
            return values
        return [None if missing else v for v, missing in zip(values, null)]
    if sizes.count(None) == 1 and sizes[0] is None:  # one variable dim, then fixed ones
        offsets = array.offsets.to_numpy()
        flat = array.values
        for _ in sizes[1:]:
            flat = flat.values if flat.offset == 0 else flat.flatten()
        values = flat.to_numpy(zero_copy_only=False).reshape(-1, *sizes[1:])
        values = values[offsets[0]:offsets[-1]]
        if ragged and null is None and len(sizes) == 1 and _is_varying(f, varying):
            return contract.Ragged(values, np.diff(offsets).astype(np.int64))
        rows: list[Any] = np.split(values, offsets[1:-1] - offsets[0]) if n else []
        if null is not None:
            rows = [None if missing else row for row, missing in zip(rows, null)]
        if _is_varying(f, varying) or null is not None:
            return rows
        shapes = {r.shape for r in rows}
        return np.stack(rows) if len(shapes) == 1 else rows
    return [None if v is None else np.asarray(v) for v in array.to_pylist()]


def _is_varying(f: Any, varying: set[str]) -> bool:
    """Whether a field's shape holds a dim the model declares varying (a list per step)."""
    raw = (f.metadata or {}).get(b"x-gyre-shape")
    if raw is None:
        return True  # a free-form modality: no declared shape
    try:
        dims = json.loads(raw)
    except ValueError:
        return True
    return any(str(d).lstrip("*") in varying or str(d).startswith("*") for d in dims)
