"""JSON Lines read straight into Arrow columns by pyarrow's JSON reader, then checked on columns.

Why: the bulk path of `fastfile` decodes each line into a Python object (msgspec, one thread)
and transposes the objects into columns: most of the time of reading a file went into making
objects only to take them apart. pyarrow's C++ JSON reader parses a chunk of lines straight
into typed columns, on several threads, with an explicit schema (the plan's fields, read as
`arrowschema.json_read_type`: floats as float64, integers as int64) and unknown keys an error;
the plan's rules then run on the columns (`columnrules.check_columns`) and the episode rules
vectorised (`EpisodeTracker.add_columns`), as for a Parquet batch.

Like every bulk path it only ever accepts. The reader takes more than JSON Lines allows, and
cannot say some things the line path reports, so a chunk steps aside (None: the next path reads
it, down to the line path, which decides and explains) unless its bytes rule them out:
- one object per line and nothing else: the chunk starts with `{`, every line ends with `}`
  right before its newline and the next starts with `{`, and the reader made one row per line
  (no blank line, no byte-order mark, no two objects on a line, no CR line ends);
- as many `:` in the bytes as keys in the columns, plus the colons inside the string values
  they hold: no `null` (the reader makes a null of an absent field and of a JSON `null` alike)
  and no key written twice (the reader refuses most). A string's colons are counted from its
  value, so a chunk holding `\\u003a` (a colon in the value, none in the bytes: it could stand
  for a null's) counts keys alone. (Counting keys alone sent a chunk with an LLM prompt's text,
  "Question:", line by line: 100 MB of completions whose text holds colons and escaped
  newlines took 3.4-4.7 s to `validate` in a fresh process, 2.1-2.7 s now; 1.9-2.5 s without
  the text);
- UTF-8 throughout (the reader does not check the bytes of strings);
- numbers the reader cannot tell apart from others: NaN and Infinity literals (accepted by the
  reader), and any float at or beyond the range where the dtype holds integers exactly (the
  reader reads `16777217` and `16777217.0` alike: `columnrules.narrowed`);
- a plan with a field bound to floats that refuses integer literals (`BulkPlan.no_ints`) never
  takes this path (the reader reads both as floats);
- whatever the reader refuses (a type that changes, an unknown or duplicate key, an integer
  beyond 64 bits, a float literal in an integer field, bad JSON).
pyarrow (extra `parquet`) is imported inside the functions only; without it this path is off.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from gyre_contract.core._registry import declare_fast_path
from gyre_contract.core._switches import fast_paths_enabled
from gyre_contract.io import _lines as lines
from gyre_contract.io._arrowschema import json_read_type
from gyre_contract.io._columnrules import COLUMN_RULES, check_columns
from gyre_contract.io._fastfile import Block, BulkPlan
from gyre_contract.io._lines import Chunk
from gyre_contract.io._raggedcols import RaggedPlan

ARROW_FAST_PATH = declare_fast_path("arrow_jsonl", kinds=("field", "step"),
                                    implements=COLUMN_RULES)
"""The rules this path implements (`columnrules`): a chunk that breaks one goes on."""

CHUNK_FACTOR = 2
"""A chunk is this many reads of `lines.CHUNK_BYTES` (2 MiB): each is parsed on one helper
thread (`checking` keeps `READERS` chunks in flight) and its columns checked with a few numpy
calls. Larger chunks cost the checking thread no less (measured: 1, 2 and 4 MiB) and take more
memory while parsed (peak RSS of `validate` 173 / 192 / 240 MB at 1 / 2 / 4 MiB)."""
READERS = 2
"""Chunks read into columns at once, each on its own thread, while the one before them is
checked: the reader's own threads split a chunk in blocks at a cost (a tenth more time)."""
READER_KEY = "arrowlines.reader"
"""`BulkPlan.extra` key of a plan's reader (None: the plan cannot be read this way)."""

_OPEN, _CLOSE, _COLON = ord("{"), ord("}"), ord(":")
_ESCAPED_COLON = re.compile(rb"\\u003[aA]")
"""The only escape whose value is a `:` (`\\u003a`): in a chunk holding one, a string's colons
may be more than its bytes hold, so they cannot be counted from its value (`read`)."""


def chunk_bytes() -> int:
    """Bytes of a chunk (`lines.Lines.blocks`)."""
    return CHUNK_FACTOR * lines.CHUNK_BYTES


def usable() -> bool:
    """Whether this path may run: fast paths on, its rules all implemented, pyarrow there."""
    if not fast_paths_enabled() or not ARROW_FAST_PATH.usable():
        return False
    try:
        import pyarrow.json  # noqa: F401
    except ImportError:
        return False
    return True


class ArrowLines:
    """pyarrow's JSON reader set up for one plan: an explicit schema, unknown keys an error.

    The schema holds the fields chunks have shown so far (the required ones at first): the
    reader spends time on every field of its schema, present or not (absent optional token
    fields cost a CartPole file about a tenth more). A chunk with a field not yet in it fails
    with an unexpected field; the fields whose quoted names its bytes hold join the schema and
    the chunk is read again (`fields` only grows, shared by the threads reading chunks).
    """

    def __init__(self, plan: BulkPlan | RaggedPlan) -> None:
        self.plan = plan
        if isinstance(plan, RaggedPlan):
            self.types = plan.json_types()
        else:
            self.types = {wire: json_read_type(plan.dtypes[wire].name
                                               if plan.dtypes[wire].kind != "U" else "string",
                                               len(plan.shapes[wire]))
                          for wire, _, _, _ in plan.fields if wire in plan.dtypes}
        self.fields = frozenset(w for w in self.types if w in plan.required)
        self._options: dict[frozenset[str], Any] = {}

    def _parse_options(self, fields: frozenset[str]) -> Any:
        import pyarrow as pa
        import pyarrow.json as pj

        options = self._options.get(fields)
        if options is None:
            schema = pa.schema([pa.field(w, t) for w, t in self.types.items() if w in fields])
            options = self._options[fields] = pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="error",
                newlines_in_values=False)
        return options

    def read(self, chunk: Chunk) -> Any:
        """The chunk's columns as an Arrow table when the reader takes it and its bytes rule out
        what the columns cannot say (module doc), else None. It may run on another thread
        while an earlier chunk is checked (`checking`). The columns are allocated by the system
        allocator: pyarrow's default one keeps what each thread freed (about 30-50 MB more
        peak memory for `validate`, and no faster here)."""
        import pyarrow as pa
        import pyarrow.json as pj

        codes = object_lines(chunk)
        if codes is None:
            return None
        raw, ends = chunk.raw, chunk.newlines
        longest = int(np.diff(ends, prepend=-1).max())
        options = pj.ReadOptions(use_threads=False, block_size=max(len(raw) + 1, 2 * longest))
        fields, table = self.fields, None
        while table is None:
            try:
                table = pj.read_json(pa.BufferReader(raw), read_options=options,
                                     parse_options=self._parse_options(fields),
                                     memory_pool=pa.system_memory_pool())
            except (pa.ArrowException, ValueError, OverflowError) as err:
                more = self._more_fields(raw, fields) if "unexpected field" in str(err) \
                    else fields
                if more == fields:
                    return None  # the reader refuses the chunk: the next path decides
                fields = self.fields = self.fields | more
        if table.num_rows != len(ends):
            return None
        keys = 0
        for column in table.columns:
            keys += len(column) - column.null_count
            if pa.types.is_struct(column.type):  # the keys of its objects (nulls where absent)
                keys += sum(len(child) - child.null_count for child in column.flatten())
        colons = np.count_nonzero(codes == _COLON)
        if colons != keys and (colons != keys + string_colons(table.columns)
                               or _ESCAPED_COLON.search(raw) is not None):
            return None  # a `null`, a key written twice, or a ':' no column holds
        return table

    def _more_fields(self, raw: bytes | bytearray, fields: frozenset[str]) -> frozenset[str]:
        """`fields` and the plan's other fields whose quoted name `raw` holds."""
        return fields | {w for w in self.types
                         if w not in fields and b'"' + w.encode() + b'"' in raw}


def string_colons(columns: Any) -> int:
    """How many `:` the string values of `columns` (Arrow arrays or chunked arrays) hold, in
    lists and structs too: the colons of a chunk that are inside the strings its columns hold."""
    import pyarrow as pa
    import pyarrow.compute as pc

    found = 0
    for column in columns:
        kind = column.type
        if pa.types.is_struct(kind):
            found += string_colons(column.flatten())
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            found += string_colons([pc.list_flatten(column)])
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
            for array in column.chunks if isinstance(column, pa.ChunkedArray) else [column]:
                found += _colons(array, pa.types.is_large_string(kind)) \
                    if array.null_count == 0 else \
                    int(pc.sum(pc.count_substring(array, ":")).as_py() or 0)
    return found


def _colons(array: Any, large: bool) -> int:
    """The `:` in a string array without nulls: its bytes between its first and last offset."""
    if not len(array):
        return 0
    _, offsets, data = array.buffers()
    wide = np.int64 if large else np.int32
    ends = np.frombuffer(offsets, wide, len(array) + 1, array.offset * np.dtype(wide).itemsize)
    codes = np.frombuffer(data, np.uint8)[ends[0]:ends[-1]]
    return int(np.count_nonzero(codes == _COLON))


def object_lines(chunk: Chunk) -> np.ndarray | None:
    """The chunk's bytes (numpy, no copy) when they are UTF-8 and hold one object per line,
    each alone on its line (it starts with `{`, every line ends with `}` right before its
    newline and the next starts with `{`); else None."""
    ends = chunk.newlines
    if not len(ends):
        return None
    raw = chunk.raw
    codes = np.frombuffer(raw, np.uint8)
    if codes[0] != _OPEN or not (codes[ends - 1] == _CLOSE).all() \
            or not (codes[ends[:-1] + 1] == _OPEN).all():
        return None  # not one object per line, each alone on its line
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return codes


def reader_for(plan: BulkPlan | RaggedPlan) -> ArrowLines | None:
    """The plan's reader, made once; None when the plan cannot be read this way (a field bound to
    floats that refuses integer literals)."""
    if READER_KEY not in plan.extra:
        ok = isinstance(plan, RaggedPlan) or not plan.no_ints
        plan.extra[READER_KEY] = ArrowLines(plan) if ok else None
    reader: ArrowLines | None = plan.extra[READER_KEY]
    return reader


def decode_chunk(plan: BulkPlan | RaggedPlan, table: Any, arrays: bool = False
                 ) -> Block | None:
    """A chunk's lines as a checked `Block`, from the `table` `ArrowLines.read` made of them
    (`columnrules.check_columns`, `RaggedPlan.check`), or None when the chunk steps aside
    (module doc)."""
    if table is None or not ARROW_FAST_PATH.usable():
        return None
    columns = [(name, column.chunk(0) if column.num_chunks == 1 else column.combine_chunks())
               for name, column in zip(table.column_names, table.columns)]
    if isinstance(plan, RaggedPlan):
        return plan.check(columns, table.num_rows, arrays=arrays, widened=True)
    return check_columns(plan, columns, table.num_rows, arrays=arrays, widened=True)
