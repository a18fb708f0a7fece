"""JSON Lines read into Arrow columns by DuckDB's JSON functions (extra `fast`), checked on columns.

Why: pyarrow's JSON reader (`arrowlines`) alone costs as much CPU as a polars validation of the
whole file; DuckDB parses JSON with yyjson for about a third of that. A chunk's lines become an
Arrow string array without a copy (the chunk's buffer, cut at its newlines: each line keeps its
newline, JSON whitespace), and DuckDB's `json_transform` reads every line into the plan's
columns. The columns then go through the same checks as the pyarrow reader's
(`arrowlines.decode_chunk`, `columnrules.check_columns`).

Like every bulk path it only ever accepts: a chunk steps aside (None: pyarrow's reader, then the
line path, decide and explain) unless its bytes rule out everything DuckDB would take that the
line path refuses. DuckDB casts freely (a string `"17"` into an integer, `2.5` into an integer
as 2, a number into a bool, `true` into a number, a string into a number, string elements into
a list of floats), takes the first of two equal keys, a trailing comma, `NaN`, `inf`,
`Infinity` (any case), and makes a null of any value it cannot cast. So columns are read where
a cast would lose what the literal was, and the chunk's bytes are counted against the columns:

- integers are read as text (`VARCHAR`: yyjson's own text of the literal, `2.0` for a float,
  `100.0` for `1e2`, `true`, `[1]`, the digits of an integer beyond 64 bits) and cast to int64
  (uint64 for unsigned dtypes) strictly: anything but an integer's digits fails the cast;
- bools are read as text: every value `true` or `false`, else the chunk steps aside;
- strings are read as JSON text (`JSON`: a string keeps its quotes, `17` does not): every value
  starts with `"` (it was a string) and holds no backslash (nothing was escaped on the way out),
  then the quotes are cut off;
- floats are read as DOUBLE (their literal's value, correctly rounded, as the line path's).

The bytes (B: in the chunk, outside the strings the columns hold, i.e. minus the bytes of each
string value and of each present key's name; C: non-null cells, keys of present fields; S:
string cells; L: list values at any depth; E: their elements; n: lines; T / F: bool cells (and
elements) `true` / `false`):
- one object per line, each alone on its line, rows == lines, UTF-8 (as `arrowlines`);
- no backslash anywhere: a string's bytes are its value (no escapes), `"` only delimits;
- `:` B == C: every key is a present field, once (a null, an unknown key, a duplicate key,
  a nested object's key all add one);
- `"` count == 2C + 2S: no string token outside the string columns (the quotes DuckDB drops
  when it casts `"17"` or `"0.5"` are counted here);
- `t` B == T and `f` B == F: no `true` / `false` outside the bool columns (`Infinity`, `inf`
  add to them too);
- `[` B == L: no array outside the list columns, no list nested deeper than the plan's;
- `{` B == n: no object but each line's own;
- `,` B == C - n + E - L: no trailing comma (nor an empty object or list: both step aside).
Each count is the sum of what its tokens add, and every token the equality does not expect
only adds: equal counts leave no room for one.

What each JSON token does in each column kind (DuckDB's reading; the guard that refuses it):

| token \\ column   | float (DOUBLE)      | int (VARCHAR)      | bool (VARCHAR)   | string (JSON)     | list of float / int / bool elements |
|-------------------|---------------------|--------------------|------------------|-------------------|-------------------------------------|
| integer literal   | its value (accept;  | "17", "0" for -0:  | "1": not true/   | `17`: no `"`      | float: value (accept, `narrowed`);  |
|                   | beyond exact range: | cast (accept); out | false: refused   | first: refused    | int: cast; bool: refused (text)     |
|                   | `narrowed`)         | of int64: cast     |                  |                   |                                     |
| float literal     | value (accept)      | "2.0": cast fails  | refused (text)   | no `"`: refused   | float: accept; int: cast fails      |
| beyond uint64     | 1e20: `narrowed`    | digits: cast fails | refused (text)   | no `"`: refused   | as the scalars                      |
| NaN, Infinity,    | nan/inf: `narrowed` | "nan"/"inf": cast  | refused (text)   | no `"`: refused   | float: `narrowed`; int: cast fails  |
| inf, 1e999        | (and `t`/`f` count) | fails              |                  |                   |                                     |
| true / false      | 1.0 / 0.0: `t`/`f`  | "true": cast fails | accept           | no `"`: refused   | float: `t`/`f` count; int: cast;    |
|                   | count               |                    |                  |                   | bool: accept                        |
| string            | cast or null: `"`   | quotes lost: `"`   | quotes lost: `"` | accept (no `\\`)  | float: cast: `"` count; int, bool:  |
|                   | count               | count              | count            |                   | `"` count                           |
| null              | null: `:` count     | null: `:` count    | null: `:`        | null: `:`         | null element: `check_columns`       |
| array             | null: `:` and `[`   | "[1]": cast, `[`   | text, `[`        | no `"`, `[`       | nested: null element, `[` count     |
| object            | null: `:`/`{` count | text: cast, `{`    | text, `{`        | no `"`, `{`       | null element, `{` count             |
| key twice         | first kept: `:` count (any column)                                                                   |
| unknown key       | ignored: `:` count                                                                                   |
| trailing comma    | ignored: `,` count                                                                                   |
| escape (`\\`)     | decoded: the chunk steps aside (no backslash)                                                        |

A scalar where a list is expected is a null (`:` count); a string column inside lists, a
struct (an observation of modalities) and a ragged plan are not read here (None).
duckdb and pyarrow are imported inside the functions only; without duckdb this path is off.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np

from gyre_contract.core._registry import declare_fast_path
from gyre_contract.core._switches import fast_paths_enabled
from gyre_contract.io import _arrowlines as arrowlines
from gyre_contract.io._columnrules import COLUMN_RULES
from gyre_contract.io._fastfile import BulkPlan
from gyre_contract.io._lines import Chunk
from gyre_contract.io._raggedcols import RaggedPlan

DUCK_FAST_PATH = declare_fast_path("duck_jsonl", kinds=("field", "step"),
                                   implements=COLUMN_RULES)
"""The rules this path implements (`columnrules`, as `arrowlines`): a chunk that breaks one goes
on."""

READER_KEY = "ducklines.reader"
"""`BulkPlan.extra` key of a plan's reader (None: the plan cannot be read this way)."""

_OPEN, _CLOSE = ord("{"), ord("}")
_COUNTED = tuple(map(ord, ':",[{tf'))
"""The bytes counted against the columns (module doc), in the order `_Counts` holds them."""
_READ_AS = {"f": "DOUBLE", "i": "VARCHAR", "u": "VARCHAR", "b": "VARCHAR"}
_DUCKDB: list[bool] = []


def usable() -> bool:
    """Whether this path may run: fast paths on, its rules all implemented, duckdb and pyarrow
    there."""
    if not fast_paths_enabled() or not DUCK_FAST_PATH.usable() or not arrowlines.usable():
        return False
    if not _DUCKDB:
        try:
            import duckdb  # noqa: F401
        except ImportError:
            _DUCKDB.append(False)
        else:
            _DUCKDB.append(True)
    return _DUCKDB[0]


def _counts(codes: np.ndarray) -> np.ndarray:
    return np.array([np.count_nonzero(codes == c) for c in _COUNTED], np.int64)


class DuckLines:
    """DuckDB's `json_transform` set up for one plan (module doc); one connection per thread."""

    def __init__(self, plan: BulkPlan) -> None:
        self.plan = plan
        self.kinds = {wire: (plan.dtypes[wire].kind, len(plan.shapes[wire]))
                      for wire, _, _, _ in plan.fields if wire in plan.dtypes}
        self.fields = frozenset(w for w in self.kinds if w in plan.required)
        self._queries: dict[frozenset[str], str] = {}
        self._local = threading.local()

    def _query(self, fields: frozenset[str]) -> str:
        """The query reading `fields` (in the plan's order) from each line of `gyre_chunk_lines`."""
        query = self._queries.get(fields)
        if query is None:
            spec = {w: ("JSON" if kind == "U" else _READ_AS[kind]) + "[]" * rank
                    for w, (kind, rank) in self.kinds.items() if w in fields}
            query = self._queries[fields] = (
                "SELECT unnest(json_transform(line, "
                f"'{json.dumps(spec, separators=(',', ':'))}')) FROM gyre_chunk_lines")
        return query

    def _connection(self) -> Any:
        con = getattr(self._local, "con", None)
        if con is None:
            import duckdb

            con = self._local.con = duckdb.connect(config={"threads": 1})
        return con

    def read(self, chunk: Chunk) -> Any:
        """The chunk's columns as an Arrow table (the types `arrowlines.ArrowLines.read` gives)
        when DuckDB reads it and its bytes rule out what DuckDB takes that the line path refuses
        (module doc), else None."""
        import pyarrow as pa

        if not DUCK_FAST_PATH.usable():
            return None
        ends = chunk.newlines
        n = len(ends)
        if not n:
            return None
        raw = chunk.raw
        codes = np.frombuffer(raw, np.uint8)
        if codes[0] != _OPEN or not (codes[ends - 1] == _CLOSE).all() \
                or not (codes[ends[:-1] + 1] == _OPEN).all():
            return None  # not one object per line, each alone on its line
        if raw.find(b"\\") >= 0:
            return None  # an escape: a string's bytes would not be its value
        if not raw.isascii():
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return None
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
        gyre_chunk_lines = source  # noqa: F841  (the query reads it by name: DuckDB's
        # replacement scan, the cheapest way in: a third of the fixed cost of `from_arrow`)
        try:
            table = con.sql(self._query(fields)).to_arrow_table()
        except Exception:  # duckdb.Error: bad JSON, a duplicate key, ... the next path decides
            return None
        if table.num_rows != n or table.column_names != [w for w in self.kinds if w in fields]:
            return None
        return self._columns(table, codes, n)

    def _columns(self, table: Any, codes: np.ndarray, n: int) -> Any:
        """The table with each column as the plan's checks take it, when the chunk's bytes agree
        with the columns (module doc); else None."""
        import pyarrow as pa

        expected = np.zeros(len(_COUNTED), np.int64)  # : " , [ { t f outside known strings
        expected[4] = n
        expected[2] = -n
        inside = np.zeros(len(_COUNTED), np.int64)
        out = {}
        for wire, column in zip(table.column_names, table.columns):
            kind, rank = self.kinds[wire]
            array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
            cells = len(array) - array.null_count
            if cells:
                expected[0] += cells
                expected[1] += 2 * cells
                expected[2] += cells
                inside += cells * np.array([wire.count(chr(c)) for c in _COUNTED], np.int64)
            levels = []
            leaf = array
            for _ in range(rank):
                lists = len(leaf) - leaf.null_count
                levels.append(leaf)
                expected[3] += lists
                leaf = leaf.flatten()
                expected[2] += len(leaf) - lists
            if kind == "U":
                if rank:
                    return None
                leaf = _strings(leaf, inside)
                if leaf is None:
                    return None
                expected[1] += 2 * cells
            elif kind in "iu":
                leaf = _integers(leaf, pa.int64() if kind == "i" else pa.uint64())
            elif kind == "b":
                leaf = _bools(leaf, expected)
            if leaf is None:
                return None
            out[wire] = _relisted(levels, leaf)
        if not (_counts(codes) - inside == expected).all():
            return None  # a token no column holds (module doc)
        return pa.table(out)


def _relisted(levels: list[Any], leaf: Any) -> Any:
    """`leaf` inside the list levels it was flattened from (outermost first)."""
    import pyarrow as pa

    for level in reversed(levels):
        leaf = pa.ListArray.from_arrays(level.offsets, leaf,
                                        mask=level.is_null() if level.null_count else None)
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
    expected[5] += trues
    expected[6] += falses
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

    def read(self, chunk: Chunk) -> Any:
        table = self.duck.read(chunk)
        return table if table is not None else self.arrow.read(chunk)


def reader_for(plan: BulkPlan | RaggedPlan) -> Any:
    """The reader of a chunk of `plan` into columns: DuckDB's then pyarrow's when this path may
    run and the plan is simple enough (a `BulkPlan` without strings inside lists), else pyarrow's
    alone (`arrowlines.reader_for`: None when the plan cannot be read into columns)."""
    arrow = arrowlines.reader_for(plan)
    if arrow is None or not isinstance(plan, BulkPlan) or not usable():
        return arrow
    if READER_KEY not in plan.extra:
        simple = all(plan.dtypes[w].kind in "fiubU"
                     and not (plan.dtypes[w].kind == "U" and plan.shapes[w])
                     for w, _, _, _ in plan.fields if w in plan.dtypes)
        plan.extra[READER_KEY] = Chained(DuckLines(plan), arrow) if simple else None
    return plan.extra[READER_KEY] or arrow
