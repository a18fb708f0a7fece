"""JSON Lines read into Arrow columns by DuckDB's JSON functions (extra `fast`), checked on columns.

Why: pyarrow's JSON reader (`arrowlines`) alone costs as much CPU as a polars validation of the
whole file; DuckDB parses JSON with yyjson for less. A chunk's lines become an Arrow string
array without a copy (the chunk's buffer cut at its newlines: each line keeps its newline, JSON
whitespace), and DuckDB's `json_transform` reads every line into the plan's columns, which then
go through the pyarrow reader's checks (`arrowlines.decode_chunk`, `columnrules.check_columns`).

Like every bulk path it only ever accepts: a chunk steps aside (None: pyarrow's reader, then the
line path, decide and explain) unless its bytes rule out everything DuckDB takes that the line
path refuses. DuckDB casts freely (`"17"` and `2.5` into an integer, a number into a bool,
`true` and `"0.5"` into a float, string elements into a list of floats), keeps the first of
two equal keys, ignores unknown keys and a trailing comma, reads `NaN`, `inf`, `Infinity` and
`1e999` (any case), and makes a null of a value it cannot cast. So:
- integers are read as text (`VARCHAR`: yyjson's text of the literal: `17`, `0` for `-0`,
  `2.0`, `100.0` for `1e2`, `true`, `[1]`, the digits of an integer beyond 64 bits) and cast to
  int64 (uint64 for unsigned dtypes) by pyarrow, strictly: anything but digits fails;
- bools are read as text and must all be `true` or `false`;
- strings are read as JSON text (`JSON`: a string keeps its quotes, `17` has none): each must
  start and end with `"` and hold no backslash (nothing escaped on the way out); the quotes
  are then cut off;
- floats are read as DOUBLE (the literal's value, correctly rounded, as the line path's).

The chunk's bytes are then counted against the columns. B(x): how many bytes `x` the chunk holds
outside the strings the columns hold (the bytes of each string value and of each present key's
name taken off); C: non-null cells; S: string cells; n: lines; L: list values at any depth, E:
their elements; T / F: `true` / `false` bool values (cells and list elements).
- one object per line, each alone on its line, rows == lines, UTF-8 (as `arrowlines`);
- no backslash in the chunk: a string's bytes are its value and `"` only delimits strings;
- `"` count == 2C + 2S: each present field's key and each string cell, nothing else: no null,
  unknown, duplicate or nested key (two quotes each, the key of a cell DuckDB made null too),
  no string where the column is not a string (the quotes DuckDB drops casting `"17"`);
- B(`t`) == T and B(`f`) == F: no `true` / `false` but the bools' (`Infinity`, `inf` add too);
- B(`[`) == L: no array but the list columns' values (nor one nested deeper);
- B(`{`) == n: no object but each line's own;
- B(`,`) == C - n + E - L: no trailing comma (an empty object or list steps aside too).
Each count is the sum of what the chunk's tokens add, and every token the equality does not
expect only adds to it: equal counts leave no room for one. (`:` needs no count: with the
quotes accounted for, every key is a present field's, once.)

Each JSON token in each column kind: what refuses it. `ok`: read exactly; `N`: non-finite or
beyond the range where the dtype holds integers exactly (`columnrules.narrowed`); `cast`: the
strict integer cast fails; `text`: not `true` / `false`; `Q`: no leading quote; `"`, `t/f`,
`[`, `{`, `,`: that count; `null`: DuckDB reads a null, its key's quotes are counted; `E`:
DuckDB errors (the chunk steps aside); `nul`: a null element (`check_columns`).

| token \\ column            | float   | int        | bool    | string | list elements: float/int/bool |
|----------------------------|---------|------------|---------|--------|-------------------------------|
| integer, -0                | ok, N   | ok (range) | text    | Q      | ok, N / ok / text             |
| float: 2.5, 2.0, 1e2, 1E2  | ok, N   | cast       | text    | Q      | ok, N / cast / text           |
| beyond int64, uint64       | N       | cast       | text    | Q      | N / cast / text               |
| NaN nan inf Infinity 1e999 | N, t/f  | cast       | text    | Q      | N / cast / text               |
| true, false                | t/f     | cast, t/f  | ok      | Q, t/f | t/f / cast / ok               |
| string                     | "       | "          | "       | ok     | " / " / "                     |
| null                       | null    | null       | null    | null   | nul                           |
| array                      | null, [ | cast, [    | text, [ | Q, [   | nul, [ / cast, [ / text, [    |
| object                     | null, { | cast, {    | text, { | Q, {   | nul, { / cast, { / text, {    |
| a scalar as the whole list |         |            |         |        | null                          |
| key twice, unknown key     | "       | "          | "       | "      | "                             |
| trailing comma             | ,       | ,          | ,       | ,      | ,                             |
| escape (backslash)         | no backslash in the chunk                                             |
| comment, `'`, `01`, `+1`,  | E                                                                     |
| `.5`, `0x1`, control char  | E                                                                     |

A field of modalities (a ragged plan's `observation`: `token_ids`, `text`; LLM completions) is
read as a struct of its modalities, each read as a field is above, and counted as a line is: its
key, its `{`, its modalities' keys, and the commas between them. DuckDB makes an object of any
value there (a number, a string, a list, `{}`) with every modality null, so each object read
must hold one modality at least, which only a JSON object does; a duplicate, unknown or nested
key inside it adds quotes like one on the line. A list of strings is not read here.

On LLM completions (10,000 of them, 100 MB) DuckDB's reading of a 5 MiB chunk took 17-25 ms of
CPU against pyarrow's reader's 45-73 ms (token ids as text, cast: 23-36 ms).
duckdb and pyarrow are imported inside the functions only; without duckdb this path is off.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
from typing import Any

import numpy as np

from gyre_contract.core._registry import declare_fast_path
from gyre_contract.core._switches import fast_paths_enabled, is_off
from gyre_contract.io import _arrowlines as arrowlines
from gyre_contract.io import _lines as lines
from gyre_contract.io._arrownumpy import valid_mask
from gyre_contract.io._columnrules import COLUMN_RULES
from gyre_contract.io._fastfile import BulkPlan
from gyre_contract.io._lines import Chunk
from gyre_contract.io._raggedcols import RaggedPlan

DUCK_FAST_PATH = declare_fast_path("duck_jsonl", kinds=("field", "step"),
                                   implements=COLUMN_RULES)
"""The rules this path implements (`columnrules`, as `arrowlines`): a chunk that breaks one goes
on."""

CHUNK_FACTOR = 5
"""A chunk of a file read here is this many reads of `lines.CHUNK_BYTES`: 5 MiB (at most
`lines.MAX_LINE_VALUES`, 6 MiB: a larger size would be cut to it). Each query has a fixed cost
(~3 ms) and the two reader threads must overlap: `validate` of 200,000 CartPole lines in a warm
process measured 1.14-1.27x polars' time at 2 MiB chunks, 0.96-1.03x at 4, 0.91-0.92x at 6,
0.98x at 8, 0.95x at 16, 1.49x at 32 (too few chunks to overlap); 5 MiB the same as 6
(0.88-1.02x against 0.83-0.93x, interleaved). Memory in flight grows with the size: peak RSS
198 MB at 2 MiB, 221-231 at 4, 228-250 at 5, 233-261 at 6 (100,000 to 2,000,000 lines); at
6 MiB a file of four chunks (100,000 lines) fills the pipeline less than a long one, and their
peaks differ by 7-11% against 7-9% at 5."""
MIN_FILE_BYTES = 16 * 2**20
"""A file smaller than this is read by pyarrow's reader (`arrowlines`) unless duckdb is imported
already: importing it and opening a database cost ~0.14 s of CPU and ~45 MB once per process,
and a file of fewer than three chunks keeps the two reader threads busy for too short a time
to win that back. (In a fresh process the import is won back from about 50 MB of CartPole
lines; in a process that has imported duckdb, on every file.)"""
READER_KEY = "ducklines.reader"
"""`BulkPlan.extra` key of a plan's reader (None: the plan cannot be read this way)."""

_COUNTED = tuple(map(ord, '",[{tf'))
"""The bytes counted against the columns (module doc), in this order (`_counts`)."""
_QUOTE, _COMMA, _BRACKET, _BRACE, _TRUE, _FALSE = range(len(_COUNTED))
_READ_AS = {"f": "DOUBLE", "i": "VARCHAR", "u": "VARCHAR", "b": "VARCHAR"}
_DUCKDB: list[bool] = []
_DATABASE: list[Any] = []
_DATABASE_LOCK = threading.Lock()


def _database() -> Any:
    """One in-memory DuckDB for the process, one thread per query (the chunks are read on
    `arrowlines.READERS` threads already, each with its own cursor): one database rather than
    one per thread costs less to open and less memory."""
    with _DATABASE_LOCK:
        if not _DATABASE:
            import duckdb

            _DATABASE.append(duckdb.connect(config={"threads": 1}))
        return _DATABASE[0]


SWITCH = "GYRE_DUCKDB"
"""The environment variable; `0` keeps this path off (pyarrow's reader reads every chunk: less
memory, the same verdicts), read when a file is chosen (`chosen`)."""


def usable() -> bool:
    """Whether this path may run: fast paths on, not switched off (`SWITCH`), its rules all
    implemented, duckdb and pyarrow there."""
    if not _allowed():
        return False
    if not _DUCKDB:
        try:
            import duckdb  # noqa: F401
        except ImportError:
            _DUCKDB.append(False)
        else:
            _DUCKDB.append(True)
    return _DUCKDB[0]


def _allowed() -> bool:
    """`usable` but for duckdb: fast paths on, not switched off, its rules all implemented,
    pyarrow there."""
    return fast_paths_enabled() and not is_off(os.environ.get(SWITCH)) \
        and DUCK_FAST_PATH.usable() and arrowlines.usable()


def _counts(codes: np.ndarray) -> np.ndarray:
    """How many of each `_COUNTED` byte `codes` holds (compared a block at a time:
    `lines.BYTE_BLOCK`)."""
    found = np.zeros(len(_COUNTED), np.int64)
    for _, block, equal in lines.byte_blocks(codes):
        for i, c in enumerate(_COUNTED):
            np.equal(block, c, out=equal)
            found[i] += np.count_nonzero(equal)
    return found


class DuckLines:
    """DuckDB's `json_transform` set up for one plan (module doc); one connection per thread."""

    def __init__(self, plan: BulkPlan | RaggedPlan) -> None:
        self.plan = plan
        self.kinds = _kinds(plan)
        """Wire -> (dtype kind, list rank), or, for a field of modalities (a struct), modality
        -> (kind, rank)."""
        self.fields = frozenset(w for w in self.kinds if w in plan.required)
        self._queries: dict[frozenset[str], str] = {}
        self._local = threading.local()

    def _query(self, fields: frozenset[str]) -> str:
        """The query reading `fields` (in the plan's order) from each line of `gyre_chunk_lines`."""
        query = self._queries.get(fields)
        if query is None:
            spec = {w: ({c: _read_as(*k) for c, k in kind.items()} if isinstance(kind, dict)
                        else _read_as(*kind))
                    for w, kind in self.kinds.items() if w in fields}
            query = self._queries[fields] = (  # one struct column (`_fields`): unnest costs
                "SELECT json_transform(line, "  # ~0.8 ms more a 5 MiB chunk
                f"'{json.dumps(spec, separators=(',', ':'))}') AS s FROM gyre_chunk_lines")
        return query

    def _connection(self) -> Any:
        """This thread's cursor on the process's one in-memory DuckDB (`_database`)."""
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = _database().cursor()
        return con

    def read(self, chunk: Chunk) -> Any:
        """The chunk's columns as an Arrow table (the types `arrowlines.ArrowLines.read` gives)
        when DuckDB reads it and its bytes rule out what DuckDB takes that the line path refuses
        (module doc), else None."""
        import pyarrow as pa

        if not DUCK_FAST_PATH.usable():
            return None
        codes = arrowlines.object_lines(chunk)
        if codes is None:
            return None  # not one object per line, each alone on its line, in UTF-8
        raw, ends = chunk.raw, chunk.newlines
        n = len(ends)
        if raw.find(b"\\") >= 0:
            return None  # an escape: a string's bytes would not be its value
        offsets = np.empty(n + 1, np.int32)
        offsets[0] = 0
        offsets[1:] = ends + 1
        lines = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                       pa.py_buffer(raw)])
        source = pa.table({"line": lines})
        fields = self.fields
        while True:
            table = self._read(source, fields, codes, n)
            more = fields if table is not None else fields | {
                w for w in self.kinds if w not in fields and b'"' + w.encode() + b'":' in raw}
            if more == fields:
                return table
            fields = self.fields = self.fields | more  # a field not read yet: read it too

    def _read(self, source: Any, fields: frozenset[str], codes: np.ndarray, n: int) -> Any:
        """The chunk (`source`: a table of its lines) read as `fields` and checked against its
        bytes, or None."""
        con = self._connection()
        con.register("gyre_chunk_lines", source)  # this thread's cursor only: not a Python
        # variable found by name in a frame (DuckDB's replacement scan), nothing left to chance
        try:
            result = con.sql(self._query(fields)).to_arrow_table()
        except Exception:  # duckdb.Error: bad JSON, a duplicate key, ... the next path decides
            return None
        finally:
            con.unregister("gyre_chunk_lines")
        table = _fields(result)
        if table.num_rows != n or table.column_names != [w for w in self.kinds if w in fields]:
            return None
        return self._columns(table, codes, n)

    def _columns(self, table: Any, codes: np.ndarray, n: int) -> Any:
        """The table with each column as the plan's checks take it, when the chunk's bytes agree
        with the columns (module doc); else None."""
        import pyarrow as pa

        expected = np.zeros(len(_COUNTED), np.int64)  # outside the strings the columns hold
        expected[_BRACE], expected[_COMMA] = n, -n
        inside = np.zeros(len(_COUNTED), np.int64)  # in those strings (values, keys' names)
        out = {}
        for wire, column in zip(table.column_names, table.columns):
            kind = self.kinds[wire]
            array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
            if isinstance(kind, dict):
                read = _struct(array, kind, expected, inside)
            else:
                read = _value(array, kind[0], kind[1], expected, inside)
            if read is None:
                return None
            _key(wire, len(array) - array.null_count, expected, inside)
            out[wire] = read
        if not (_counts(codes) - inside == expected).all():
            return None  # a token no column holds (module doc)
        return pa.table(out)


def _kinds(plan: BulkPlan | RaggedPlan) -> dict[str, Any]:
    """`DuckLines.kinds` of a plan, in the order of its fields."""
    if isinstance(plan, RaggedPlan):
        out: dict[str, Any] = {}
        for wire, leaves in plan.by_wire().items():
            kinds = {leaf.child: (leaf.dtype.kind, int(leaf.list)) for leaf in leaves}
            out[wire] = kinds if leaves[0].child is not None else kinds[None]
        return out
    return {wire: (plan.dtypes[wire].kind, len(plan.shapes[wire]))
            for wire, _, _, _ in plan.fields if wire in plan.dtypes}


def _read_as(kind: str, rank: int) -> str:
    """The DuckDB type a value of `kind` and list `rank` is read as (module doc)."""
    return ("JSON" if kind == "U" else _READ_AS[kind]) + "[]" * rank


def _key(name: str, cells: int, expected: np.ndarray, inside: np.ndarray) -> None:
    """What `cells` present keys `name` add to the counts: two quotes and a comma (before the
    next key, or in place of the object's first: `expected[_COMMA]` starts at minus the
    objects) each, and the counted bytes of the name itself."""
    expected[_QUOTE] += 2 * cells
    expected[_COMMA] += cells
    inside += cells * np.array([name.count(chr(c)) for c in _COUNTED], np.int64)


def _value(array: Any, kind: str, rank: int, expected: np.ndarray, inside: np.ndarray) -> Any:
    """One column of values (a list of `rank` levels) as the plan's checks take it, its lists'
    and strings' bytes added to the counts; None when a value is not what the line path reads
    there."""
    import pyarrow as pa

    levels, leaf = [], array
    for _ in range(rank):
        lists = len(leaf) - leaf.null_count
        levels.append(leaf)
        leaf = leaf.flatten()
        expected[_BRACKET] += lists
        expected[_COMMA] += len(leaf) - lists
    if kind == "U":
        read = None if rank else _strings(leaf, inside)
        expected[_QUOTE] += 2 * (len(array) - array.null_count)
    elif kind in "iu":
        read = _integers(leaf, pa.int64() if kind == "i" else pa.uint64())
    elif kind == "b":
        read = _bools(leaf, expected)
    else:
        read = leaf
    if read is None:
        return None
    return array if read is leaf else _relisted(levels, read)


def _struct(array: Any, kinds: dict[str, tuple[str, int]], expected: np.ndarray,
            inside: np.ndarray) -> Any:
    """A field of modalities (an object of lists and strings) as a struct of columns the plan's
    checks take, its objects' bytes added to the counts; None when one is not read exactly.
    DuckDB makes an object of any value (a number, a list, `{}`) with every modality null: each
    present object must hold one modality at least, which only a JSON object can."""
    import pyarrow as pa

    if not pa.types.is_struct(array.type) or \
            [array.type.field(i).name for i in range(array.type.num_fields)] != list(kinds):
        return None
    objects = len(array) - array.null_count
    expected[_BRACE] += objects
    expected[_COMMA] -= objects
    held = np.zeros(len(array), bool)
    children = []
    for (name, (kind, rank)), child in zip(kinds.items(), array.flatten()):
        read = _value(child, kind, rank, expected, inside)  # nulls where the object is absent
        if read is None:
            return None
        _key(name, len(child) - child.null_count, expected, inside)
        if child.null_count < len(child):
            held |= valid_mask(child)
        children.append(read)
    if np.count_nonzero(held) != objects:
        return None  # `{}`, or a value that is not an object
    return pa.StructArray.from_arrays(children, list(kinds),
                                      mask=array.is_null() if array.null_count else None)


def _fields(table: Any) -> Any:
    """The table of the fields of a query's one struct column (a row's null struct: its fields
    null; a line is an object, `object_lines`, so DuckDB gives none)."""
    import pyarrow as pa

    column = table.column(0)
    struct = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return pa.Table.from_arrays(struct.flatten(), names=[f.name for f in struct.type])


def _relisted(levels: list[Any], leaf: Any) -> Any:
    """`leaf` inside the list levels it was flattened from (outermost first)."""
    import pyarrow as pa

    for level in reversed(levels):
        offsets = np.frombuffer(level.buffers()[1], np.int32)[
            level.offset:level.offset + len(level) + 1]
        offsets = offsets - offsets[0]  # `flatten` starts at the level's first value
        leaf = pa.ListArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), len(offsets), [None, pa.py_buffer(offsets)]),
            leaf, mask=level.is_null() if level.null_count else None)
    return leaf


def _strings(array: Any, inside: np.ndarray) -> Any:
    """String values read as JSON text, without their quotes, when each was a JSON string and
    nothing was escaped; the counted bytes they hold are added to `inside`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if array.type != pa.string():
        array = array.cast(pa.string())
    cells = len(array) - array.null_count
    if not cells:
        return array
    if pc.sum(pc.starts_with(array, '"')).as_py() != cells \
            or pc.sum(pc.ends_with(array, '"')).as_py() != cells \
            or pc.sum(pc.count_substring(array, "\\")).as_py():
        return None  # not a JSON string, or escaped on the way out
    stripped = pc.utf8_slice_codeunits(array, 1, -1)
    offsets = np.frombuffer(stripped.buffers()[1], np.int32)[
        stripped.offset:stripped.offset + len(stripped) + 1]
    data = np.frombuffer(stripped.buffers()[2] or b"", np.uint8)[offsets[0]:offsets[-1]]
    inside += _counts(data)
    return stripped


def _integers(array: Any, to: Any) -> Any:
    """Integer literals read as text, cast strictly; None when one is not an integer's digits
    or beyond 64 bits."""
    import pyarrow as pa

    try:
        return array.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _bools(array: Any, expected: np.ndarray) -> Any:
    """Bool literals read as text, as bools; None when one is not `true` or `false`. Each adds
    its `t` or `f` to `expected`."""
    import pyarrow.compute as pc

    cells = len(array) - array.null_count
    true = pc.equal(array, _text("true"))
    trues = pc.sum(true).as_py() or 0
    falses = pc.sum(pc.equal(array, _text("false"))).as_py() or 0
    if trues + falses != cells:
        return None
    expected[_TRUE] += trues
    expected[_FALSE] += falses
    return true


def _text(value: str) -> Any:
    """`value` as an Arrow string scalar, made from its bytes: pyarrow converting a Python
    string imports pandas when it is installed (a third of a second)."""
    import pyarrow as pa

    data = value.encode()
    offsets = np.array([0, len(data)], np.int32)
    return pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(data)])[0]


class Chained:
    """DuckDB's reading of a chunk, else pyarrow's (`arrowlines.ArrowLines.read`)."""

    def __init__(self, duck: DuckLines, arrow: arrowlines.ArrowLines) -> None:
        self.duck, self.arrow = duck, arrow

    def read(self, chunk: Chunk) -> tuple[Any, bool]:
        """The chunk's table (None: neither reader took it), and whether DuckDB read it (a file
        reader counts the chunks pyarrow took instead: `checking._Columns`)."""
        table = self.duck.read(chunk)
        return (table, True) if table is not None else (self.arrow.read(chunk), False)


def chunk_bytes() -> int:
    """Bytes of a chunk of a file read here (`lines.Lines.blocks`)."""
    return CHUNK_FACTOR * lines.CHUNK_BYTES


def simple(plan: BulkPlan | RaggedPlan) -> bool:
    """Whether DuckDB reads `plan`'s chunks here: numbers, bools, strings and lists of numbers
    or bools, as fields or as the modalities of a field of modalities (a ragged plan's: LLM
    token lists); no list of strings."""
    if isinstance(plan, RaggedPlan):
        return all(leaf.dtype.kind in "fiub" or (leaf.dtype.kind == "U" and not leaf.list)
                   for leaf in plan.leaves)
    return all(
        plan.dtypes[w].kind in "fiubU" and not (plan.dtypes[w].kind == "U" and plan.shapes[w])
        for w, _, _, _ in plan.fields if w in plan.dtypes)


def chosen(path: str | os.PathLike[str], plan: BulkPlan | RaggedPlan) -> bool:
    """Whether the file at `path` is read here (in chunks of `chunk_bytes`): this path may run,
    the plan is `simple` (an unpinned model's: the one its first lines bind), and the file is
    `MIN_FILE_BYTES` or more or duckdb is imported already."""
    return simple(plan) and _large(path) and usable()  # the size first: `usable` imports duckdb


def likely(path: str | os.PathLike[str]) -> bool:
    """Whether the file at `path` may be read here once its first lines bind a plan: what
    `chosen` asks but the plan, duckdb found installed rather than imported. (Its first chunk is
    read at `chunk_bytes` then: a first chunk of pyarrow's size shifts the two readers' turns
    and raised the peak memory of a long file by ~7 MB, 3%.)"""
    if not _large(path):
        return False
    if "duckdb" in sys.modules:
        return usable()
    return _allowed() and importlib.util.find_spec("duckdb") is not None


def _large(path: str | os.PathLike[str]) -> bool:
    """`MIN_FILE_BYTES` or more, or any size once duckdb is imported."""
    if "duckdb" in sys.modules:
        return True
    try:
        return os.stat(path).st_size >= MIN_FILE_BYTES
    except (OSError, ValueError):
        return False  # the reader says what is wrong with the path


def reader_for(plan: BulkPlan | RaggedPlan) -> Any:
    """The reader of a chunk of `plan` into columns: DuckDB's then pyarrow's when this path may
    run and the plan is `simple`, else pyarrow's alone (`arrowlines.reader_for`: None when the
    plan cannot be read into columns)."""
    arrow = arrowlines.reader_for(plan)
    if arrow is None or not usable():
        return arrow
    if READER_KEY not in plan.extra:
        plan.extra[READER_KEY] = Chained(DuckLines(plan), arrow) if simple(plan) else None
    return plan.extra[READER_KEY] or arrow
