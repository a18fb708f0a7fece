"""JSON Lines rollout files, line by line: the layer below model validation (docs/contract.md §3).

Why: rollout files come from crashed samplers, concurrent writers and other teams. Reading never
loses a line without saying so: every line that is not a clean record is a problem with its line
number, never a traceback.

Wire format: one JSON object per line, UTF-8, `\\n` line ends. What the reader decides:
- CRLF line ends are accepted (`\\r` is JSON whitespace); a UTF-8 byte-order mark is a problem
  (JSON forbids writing one and a plain `orjson.loads` per line fails on it) but the rest of the
  line is still checked;
- a blank line, bytes that are not UTF-8, text that is not JSON, JSON that is not an object,
  `NaN` / `Infinity`, a duplicate key, an integer beyond int64/uint64, a line longer than
  `MAX_LINE_BYTES` or holding more than `MAX_LINE_VALUES` values, and a record with more than
  `MAX_RECORD_KEYS` keys are each a problem on their line;
- a last line with no newline that does not parse is a *truncated line* (a writer cut
  mid-write). `allow_partial_tail=True` skips it and reports how many bytes were left
  unchecked, which is also how to check a file that is still being appended to.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol, TypeAlias, overload

import numpy as np
import orjson

from gyre_contract.core._errors import InputError, Problem, describe
from gyre_contract.core._text import quoted
from gyre_contract.io._jsonfile import refuse_devices
from gyre_contract.io._linescan import Counts, scan, surely_json
from gyre_contract.io._progress import reading_observer

MAX_LINE_BYTES = 128 * 2**20
"""A longer line is reported (`line too long`) and skipped, so memory stays bounded."""

MAX_LINE_VALUES = 6 * 2**20
"""A line with more `,` `:` `[` `{` outside strings (about one per value, two per object member)
is reported (`too many values`) and not parsed. Why: parsing makes a Python object per value,
32-120 bytes each whatever the line's bytes (`[],` is 3 bytes and 64 bytes parsed), so it is the
count of values, not the line's length, that bounds the memory a line takes: about 60 MB + 2 x
the line's bytes + 100 bytes a value, under 1 GB at the limits (docs/robustness.md, "The
limits"). 6 Mi values hold a 1024 x 1024 RGBA image as nested lists. Counted in bounded blocks
(`linescan`), only on a line longer than this many bytes (a shorter one cannot hold more)."""

MAX_RECORD_KEYS = 10_000
"""A record with more keys (through nested objects, not into lists; as written, a duplicate
counting each time) is reported (`too many keys`) and not validated key by key. The keys are
counted on the line's bytes (`linescan`), and a line that is surely JSON is refused without
being parsed, so the refusal costs a scan, not a million Python strings."""
_MANY_KEYS_BYTES = 4 * MAX_RECORD_KEYS  # a shorter line cannot hold that many keys ("":0,)

CHUNK_BYTES = 2**20
"""Bytes read from the file at a time."""

_BOM = b"\xef\xbb\xbf"
_INT_MIN, _UINT_MAX = -(2**63), 2**64 - 1
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_INT64_DIGITS = b"0" * 19  # an integer literal this long may not fit in 64 bits
_NUMBER = re.compile(r"-?[0-9][0-9.eE+-]*")


@dataclass(frozen=True, slots=True)
class Overlong:
    """Stands in for a line longer than MAX_LINE_BYTES (its bytes were not kept)."""

    size: int


@dataclass(frozen=True, slots=True)
class Crowded:
    """Stands in for a line holding more than MAX_LINE_VALUES values (not parsed)."""

    size: int
    values: int


def bounded(line: bytes) -> bytes | Crowded:
    """`line`, or a `Crowded` when it holds more than MAX_LINE_VALUES values."""
    if len(line) <= MAX_LINE_VALUES or sum(map(line.count, (b",", b":", b"[", b"{"))) \
            <= MAX_LINE_VALUES:
        return line
    values = scan(line).values
    return line if values <= MAX_LINE_VALUES else Crowded(len(line), values)


class Chunk(Sequence[bytes]):
    """Complete lines read at once, kept as the bytes they were read as (`raw`: each line
    followed by its newline; a bytearray when read straight into it, `LineSource`), split into
    lines (bytes) only when a reader asks for them (`lines`).

    A reader that takes the bytes whole (the Arrow JSON reader, `arrowlines`) never splits
    them; `newlines` (the offset of each newline) lets it check where each line starts and
    ends. Only the count of lines is taken when the chunk is made (on the thread reading the
    file, which every reader waits for); the offsets are found when first asked, on the reader's
    own thread. Indexing and iterating give the lines, as the list `LineSource` yields otherwise
    holds them (without their newline).
    """

    __slots__ = ("raw", "n", "_newlines", "_lines")

    def __init__(self, raw: bytes | bytearray) -> None:
        self.raw = raw
        # a compare and a count over the bytes: a fifth of finding where each newline is
        self.n = _count_newlines(raw)
        """How many lines."""
        self._newlines: np.ndarray | None = None
        self._lines: list[bytes] | None = None

    @property
    def newlines(self) -> np.ndarray:
        found = self._newlines
        if found is None:  # two threads asking at once find the same offsets
            found = self._newlines = newline_offsets(self.raw)
        return found

    @property
    def lines(self) -> list[bytes]:
        if self._lines is None:
            raw = self.raw
            self._lines = (raw if raw.__class__ is bytes else bytes(raw)).split(b"\n")
            self._lines.pop()  # the empty piece after the last newline
        return self._lines

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if self._lines is None and index.__class__ is slice and not index.start \
                and index.step is None and index.stop is not None and 0 < index.stop < self.n:
            # the first lines only (a binder's sample): not the whole chunk split for them
            end, find = -1, self.raw.find
            for _ in range(index.stop):
                end = find(b"\n", end + 1)
            head = bytes(self.raw[:end + 1]).split(b"\n")
            head.pop()
            return head
        return self.lines[index]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.lines)


_NEWLINE = ord("\n")
_FOUND_ONE_BY_ONE = 256
"""Newlines `newline_offsets` finds with `find` before it hands the rest to numpy."""


BYTE_BLOCK = 1 << 18
"""Bytes compared at a time (`byte_blocks`): a chunk's compares a block at a time, in the
cache, into one mask per thread, not a 5 MiB temporary per compare (those, made and freed
between the chunks' buffers, fragmented the heap: `_Buffers`). `validate` of 200,000 CartPole
lines, warm, 15 interleaved rounds, twice: 0.93x and 0.97x the time (the byte counts of
`ducklines`), and flat with the newline counts and offsets in blocks as well (25 rounds)."""
_MASKS = threading.local()


def byte_blocks(codes: np.ndarray, start: int = 0) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(offset, the `BYTE_BLOCK` bytes of `codes` there, a bool mask as long) from `start` on.
    The mask is this thread's own: each block's is the previous one's, overwritten."""
    mask = getattr(_MASKS, "mask", None)
    if mask is None or len(mask) < BYTE_BLOCK:
        mask = _MASKS.mask = np.empty(BYTE_BLOCK, bool)
    for at in range(start, len(codes), BYTE_BLOCK):
        block = codes[at:at + BYTE_BLOCK]
        yield at, block, mask[:len(block)]


def _count_newlines(raw: bytes | bytearray) -> int:
    return sum(int(np.count_nonzero(np.equal(block, _NEWLINE, out=mask)))
               for _, block, mask in byte_blocks(np.frombuffer(raw, np.uint8)))


def newline_offsets(raw: bytes | bytearray) -> np.ndarray:
    """The offset of each newline in `raw`. Why two ways: long lines (LLM completions, a few
    hundred to a 2 MiB chunk) are found one `find` (memchr) at a time in a tenth of the time of
    numpy's compare-and-nonzero over every byte; short lines (CartPole steps, thousands a chunk)
    would cost a Python call each, so after `_FOUND_ONE_BY_ONE` of them numpy does the rest."""
    find, found = raw.find, []
    at = find(b"\n")
    while at >= 0:
        found.append(at)
        if len(found) == _FOUND_ONE_BY_ONE:
            rest = [np.flatnonzero(np.equal(block, _NEWLINE, out=mask)) + offset
                    for offset, block, mask in byte_blocks(np.frombuffer(raw, np.uint8), at + 1)]
            return np.concatenate([np.array(found, np.int64), *rest])
        at = find(b"\n", at + 1)
    return np.array(found, np.int64)


class Readable(Protocol):
    """What `LineSource` reads from: a binary handle, or one that bounds it (`runs`)."""

    def read(self, size: int, /) -> bytes: ...


class LineSource:
    """Splits a binary file into lines, in blocks, in bounded memory.

    Iterating yields lists of complete lines (without `\\n`): bytes, or an `Overlong` or a
    `Crowded` in place of a line that is not to be parsed. After the iteration, `tail` holds
    the bytes after the last newline (None when the file ends with a newline or is empty).
    With `chunk_bytes` (at most `MAX_LINE_VALUES`: a larger size is cut to it), reads are that
    large and a read whose lines are all within the limits is yielded as a `Chunk` (its bytes,
    split only when asked) instead of a list. Given as a function, it is asked before each read:
    a caller may settle the size once the first chunk has shown what the file holds.
    """

    def __init__(self, handle: Readable,
                 chunk_bytes: int | Callable[[], int] | None = None) -> None:
        self._handle = handle
        self._chunk_bytes = chunk_bytes
        self.tail: bytes | Overlong | Crowded | None = None

    def __iter__(self) -> Iterator[list[bytes | Overlong | Crowded] | Chunk]:
        pending = _Pending()
        skipped = -1  # >= 0 while inside an over-long line: bytes dropped so far
        read = self._handle.read
        observer = reading_observer()
        # a chunk is at most as long as a line may be: then none of its lines can be over a limit
        # (a larger size asked for is cut to that, not read line by line)
        chunk_bytes = self._chunk_bytes
        asked = chunk_bytes if callable(chunk_bytes) else None
        size = min(chunk_bytes, MAX_LINE_BYTES, MAX_LINE_VALUES) \
            if isinstance(chunk_bytes, int) and chunk_bytes else CHUNK_BYTES
        whole = chunk_bytes is not None
        readinto = getattr(self._handle, "readinto", None) if whole else None
        buffers = _Buffers()
        while True:
            if asked is not None:
                size = min(asked(), MAX_LINE_BYTES, MAX_LINE_VALUES) or CHUNK_BYTES
            if readinto is not None and skipped < 0 and pending.size <= size:
                # the line's start, then the read, straight into the chunk's own buffer (a
                # longer start is not copied at every read: the line goes on by `read` below)
                start = pending.size
                buffer = buffers.get(start + size)
                if start:
                    buffer[:start] = pending.take()
                with memoryview(buffer) as view, view[start:] as free:
                    got = readinto(free)
                if not got:
                    break
                if observer is not None:
                    observer(got)
                end = start + got
                cut = buffer.rfind(b"\n", start, end) + 1
                if cut and buffer.find(b"\n", start, end) <= MAX_LINE_VALUES:
                    # every line of this read is within the limits: its bytes as they are
                    pending = _Pending()
                    if cut < end:
                        pending.add(bytes(buffer[cut:end]))
                    del buffer[cut:]  # in place: the bytes past `cut` are only dropped
                    yield Chunk(buffer)
                    del buffer  # the chunk's alone: its buffer goes again once it is dropped
                    continue
                block = bytes(buffer[start:end])  # no newline, or a first line too long
            else:
                block = read(size)
                if not block:
                    break
                if observer is not None:
                    observer(len(block))
                if whole and skipped < 0:
                    cut = block.rfind(b"\n") + 1
                    if cut and pending.size + block.find(b"\n") <= MAX_LINE_VALUES:
                        # every line of this read is within the limits: its bytes as they are
                        if pending.size:  # one copy: the line's start, then the read up to `cut`
                            head = pending.take(memoryview(block)[:cut])
                        else:
                            head = block[:cut] if cut < len(block) else block
                        yield Chunk(head)
                        pending = _Pending()
                        if cut < len(block):
                            pending.add(block[cut:])
                        continue
            parts: list[Any] = block.split(b"\n")
            last = parts.pop()
            if parts:
                first = parts[0]
                if len(block) <= min(MAX_LINE_BYTES, MAX_LINE_VALUES):
                    lines = parts  # the usual case: no line of the chunk can be over-long
                else:
                    lines = [bounded(p) if len(p) <= MAX_LINE_BYTES else Overlong(len(p))
                             for p in parts]
                if skipped >= 0:
                    lines[0] = Overlong(skipped + len(first))
                    skipped = -1
                elif pending.size:
                    length = pending.size + len(first)
                    lines[0] = Overlong(length) if length > MAX_LINE_BYTES else \
                        bounded(pending.take(first))
                    pending = _Pending()
                yield lines
            if skipped >= 0:
                skipped += len(last)
            elif last:
                pending.add(last)
                if pending.size > MAX_LINE_BYTES:
                    skipped, pending = pending.size, _Pending()
        if skipped >= 0:
            self.tail = Overlong(skipped)
        elif pending.size:
            self.tail = bounded(pending.take())


class _Buffers:
    """The buffers of one file's chunks, each used again once nothing else holds it.

    Why: a new 5 MiB buffer per chunk (DuckDB's size, `ducklines.CHUNK_FACTOR`) fragments
    glibc's heap while a few chunks are alive at once and smaller arrays are made between them,
    so the peak memory of a long file crept up over its first dozen chunks (`validate` of
    2,000,000 CartPole lines peaked 9-12% over 100,000 lines; mapping each buffer afresh
    instead cost ~15% of the time in page faults). When every kept buffer is still held, a
    new one is made, and kept while fewer than `KEPT` are.

    A buffer is used again only when this pool's reference is the only one (`_alone`): a
    chunk, a memoryview, a numpy or an Arrow array over its bytes each hold a reference, so no
    reader can see its bytes change.
    """

    __slots__ = ("kept",)
    KEPT = 8

    def __init__(self) -> None:
        self.kept: list[bytearray] = []

    def get(self, size: int) -> bytearray:
        """A buffer of `size` bytes (their values are not given: the caller writes them)."""
        kept = self.kept
        for i in range(len(kept) if _COUNTS_TELL else 0):
            if _alone(kept, i):
                buffer = kept[i]
                have = len(buffer)
                if have > size:
                    del buffer[size:]
                elif have < size:  # a chunk is cut at its last newline: a line's length or so
                    buffer.extend(bytes(size - have))
                return buffer
        buffer = bytearray(size)
        if len(kept) < self.KEPT:
            kept.append(buffer)
        return buffer


_COUNTS_TELL = getattr(sys, "_is_gil_enabled", lambda: True)()
"""Reference counts tell whether a buffer is held elsewhere (`_alone`); without the GIL
(free-threaded builds) they are not read that way, and no buffer is used again."""
_PROBE = [bytearray()]
"""A buffer held by this list alone: `_alone` compares with it."""


def _alone(kept: list[bytearray], i: int) -> bool:
    """Nothing but `kept` holds `kept[i]`: its reference count is no more than that of
    `_PROBE[0]`, counted by the same expression (so whatever references the interpreter takes
    or skips while counting are the same on both sides)."""
    return sys.getrefcount(kept[i]) <= sys.getrefcount(_PROBE[0])


class _Pending:
    """The start of a line that goes on in the next read. One piece is kept as it is; more are
    written into one buffer that grows in place (`realloc`), which `BytesIO.getvalue` hands
    over: a long line is never held twice over, as pieces and as their join."""

    __slots__ = ("piece", "buffer", "size")

    def __init__(self) -> None:
        self.piece = b""
        self.buffer: io.BytesIO | None = None
        self.size = 0

    def add(self, piece: bytes) -> None:
        self.size += len(piece)
        if self.buffer is None:
            if not self.piece:
                self.piece = piece
                return
            self.buffer = io.BytesIO()
            self.buffer.write(self.piece)
            self.piece = b""
        self.buffer.write(piece)

    def take(self, end: bytes | memoryview = b"") -> bytes:
        """The line: what was added, then `end`."""
        if self.buffer is None:
            return b"".join((self.piece, end)) if len(end) else self.piece
        self.buffer.write(end)
        return self.buffer.getvalue()


def open_rollout(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a rollout file for reading, or raise InputError (exit 2 in the CLI)."""
    name = os.fspath(path)
    if os.path.isdir(name):
        raise InputError(f"is a directory, not a rollout file: {name}")
    refuse_devices(name, "rollout file")
    try:
        return open(name, "rb", buffering=0)
    except FileNotFoundError:
        raise InputError(f"no such file: {name}") from None
    except OSError as err:
        raise InputError(f"cannot read {name}: {err.strerror}") from None


@dataclass(frozen=True, slots=True)
class Parsed:
    """What one line gave: a record (a dict) or the problems that stop it being one."""

    line: int
    record: dict[str, Any] | None
    problems: list[Problem]


Item: TypeAlias = "tuple[int, dict[str, Any]] | Parsed"
"""What a record source yields per line or row: `(line, record)` when clean, else a `Parsed`."""


def numbered(item: Item) -> tuple[int, dict[str, Any] | None]:
    """(line, record) of any item; the record is None when the line gave none."""
    if isinstance(item, tuple):
        return item
    return item.line, item.record


class Lines:
    """Parses a rollout file line by line: the layer below model validation.

    `for item in Lines(path)` yields a `Parsed` per line whose record is not clean and yields
    a bare `(line, record)` tuple for a clean one (the hot path allocates nothing more).
    After iterating: `lines` (lines seen), `tail_bytes` (bytes of a partial tail skipped).
    """

    def __init__(self, path: str | os.PathLike[str], *, allow_partial_tail: bool) -> None:
        self.path = path
        self.allow_partial_tail = allow_partial_tail
        self.lines = 0
        self.tail_bytes = 0
        self._tail_bytes_left: bytes | Overlong | Crowded | None = None

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]] | Parsed]:
        for first, block in self.blocks():
            yield from self.parse(first, block)
        item = self.tail_item()
        if item is not None:
            yield item

    def blocks(self, chunk_bytes: int | Callable[[], int] | None = None
               ) -> Iterator[tuple[int, list[bytes | Overlong | Crowded] | Chunk]]:
        """(number of the first line, the lines) of each block of complete lines, unparsed.

        A caller that checks a block in bulk takes it whole; otherwise it calls `parse`. After
        the blocks, `tail_item()` gives the bytes after the last newline, if any. With
        `chunk_bytes` (a size, or a function asked before each read), blocks are read that large
        and come as `Chunk`s where they can (`LineSource`): a caller that reads their bytes whole
        never splits them.
        """
        self._tail_bytes_left = None
        with open_rollout(self.path) as handle:
            source = LineSource(handle, chunk_bytes)
            try:
                for block in source:
                    first = self.lines + 1
                    self.lines += len(block)
                    yield first, block
            except OSError as err:
                raise InputError(f"cannot read {os.fspath(self.path)}: {err.strerror}") from None
            self._tail_bytes_left = source.tail

    def parse(self, first: int, block: Sequence[bytes | Overlong | Crowded]
              ) -> Iterator[tuple[int, dict[str, Any]] | Parsed]:
        """Each line of a block: `(line, record)` when clean, else a `Parsed` (see class doc)."""
        return parse_lines(first, block)

    def tail_item(self) -> tuple[int, dict[str, Any]] | Parsed | None:
        """The bytes after the last newline, once the blocks are read: a line, or None."""
        tail = self._tail_bytes_left
        if tail is None:
            return None
        self._tail_bytes_left = None
        self.lines += 1
        return self._tail(tail, self.lines)

    def _tail(self, tail: bytes | Overlong | Crowded, n: int
              ) -> tuple[int, dict[str, Any]] | Parsed | None:
        """The bytes after the last newline: a record, a blank line, or a truncated line (one
        holding too many values to parse: that problem, or skipped as a partial tail)."""
        if tail.__class__ is Crowded and not self.allow_partial_tail:
            return _unparsed(tail, n)
        if isinstance(tail, bytes):
            raw = tail[:-1] if tail[-1:] == b"\r" else tail
            if not raw.strip(b" \t\r"):
                return _blank(n)
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                if raw.startswith(_BOM):
                    parsed = _parse_failure(raw, n)
                    if parsed.record is not None:
                        return parsed
            else:
                return _checked(raw, obj, n, [])
        size = len(tail) if isinstance(tail, bytes) else tail.size
        if self.allow_partial_tail:
            self.tail_bytes = size
            return None
        return Parsed(n, None, [Problem(
            "", "a complete JSON line ending in a newline",
            f"{size} bytes at the end of the file that do not parse, with no newline",
            "truncated line (the writer was cut off mid-write?)", line=n)])


def parse_lines(first: int, block: Sequence[bytes | Overlong | Crowded]
                ) -> Iterator[tuple[int, dict[str, Any]] | Parsed]:
    """Each line of a block (numbered from `first`): `(line, record)` when the line holds a clean
    record, else a `Parsed` with its problems (see `Lines`). Every reader of rollout lines goes
    through here, so every limit holds on every path."""
    loads, dumps, spaced = orjson.loads, orjson.dumps, _python_dumps
    n = first - 1
    for raw in block:
        n += 1
        if isinstance(raw, bytes):
            if raw[-1:] == b"\r":
                raw = raw[:-1]
            many = None if len(raw) < _MANY_KEYS_BYTES else _many_keys(raw)
            if many is not None and surely_json(raw, many):
                yield _too_many_keys(many, n)  # refused on its bytes: no key is made
                continue
            try:
                obj = loads(raw)
            except orjson.JSONDecodeError:
                yield _parse_failure(raw, n)
                continue
            try:
                same = obj.__class__ is dict and (dumps(obj) == raw or spaced(obj) == raw)
            except (TypeError, ValueError, RecursionError):  # deeper than orjson writes
                same = False
            if same:
                yield (n, obj) if many is None else _too_many_keys(many, n)
            else:
                yield _checked(raw, obj, n, [])
        else:
            yield _unparsed(raw, n)


def _python_dumps(obj: dict[str, Any]) -> bytes:
    """The line as Python's `json.dumps` writes it (", " and ": " separators, ASCII escapes):
    a line equal to it holds no duplicate key and no integer orjson changed, like one equal to
    orjson's own output, so files written by `json.dumps` skip the slow exact check."""
    return json.dumps(obj, allow_nan=False).encode()


def _checked(raw: bytes, obj: Any, n: int, problems: list[Problem]) -> Any:
    """Slow path for a line that parsed but is not byte-identical to orjson's own output.

    Returns `(n, record)` for a clean record, else a `Parsed` carrying `problems` and any
    new ones (its record is None when the line cannot be trusted at all)."""
    if obj.__class__ is not dict:
        problems.append(Problem("", "a JSON object {...} per line", describe(obj),
                                "not a JSON object", line=n))
        return Parsed(n, None, problems)
    many = None if len(raw) < _MANY_KEYS_BYTES else _many_keys(raw)
    if many is not None:
        return Parsed(n, None, problems + _too_many_keys(many, n).problems)
    hidden = hidden_problems(raw, obj)
    if hidden:
        problems += [p.at_line(n) for p in hidden]
        return Parsed(n, None, problems)
    if problems:
        return Parsed(n, obj, problems)
    return n, obj


def _many_keys(raw: bytes) -> Counts | None:
    """The counts of a line holding more than MAX_RECORD_KEYS keys (`linescan.Counts.keys`:
    through nested objects, not into lists, as written), else None. Most lines are ruled out
    by their length or their count of `:`, without a scan."""
    if raw.count(b":") <= MAX_RECORD_KEYS:
        return None
    counts = scan(raw)
    return counts if counts.keys > MAX_RECORD_KEYS else None


def _too_many_keys(counts: Counts, n: int) -> Parsed:
    return Parsed(n, None, [Problem(
        "", f"at most {MAX_RECORD_KEYS} keys per record (counted through nested objects)",
        f"{counts.keys} keys", "too many keys (record not validated)", line=n)])


def _parse_failure(raw: bytes, n: int) -> Parsed:
    """Explain why orjson refused a line; retry without a BOM so the rest is still checked."""
    if raw.startswith(_BOM):
        bom = Problem("", "UTF-8 without a byte-order mark", "the bytes EF BB BF",
                      "byte-order mark (BOM) at the start of the line", line=n)
        rest = raw[len(_BOM):]
        try:
            obj = orjson.loads(rest)
        except orjson.JSONDecodeError:
            failed = _parse_failure(rest, n)
            return Parsed(n, None, [bom, *failed.problems])
        return _checked(rest, obj, n, [bom])  # a Parsed: it carries the BOM problem
    if not raw.strip(b" \t\r"):
        return _blank(n)
    return Parsed(n, None, [_json_problem(raw, n)])


def _json_problem(raw: bytes, n: int) -> Problem:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return Problem("", "UTF-8 text", f"byte 0x{raw[err.start]:02X} at column {err.start + 1}",
                       "not UTF-8", line=n)
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        reason = str(err).split(": line ", 1)[0].split(", expected", 1)[0]
        pos = err.pos
    else:  # pragma: no cover - the caller only comes here after a failure
        raise AssertionError("line parsed on the second try")
    column = pos + 1
    rest = text[pos:]
    if pos and text[pos - 1:].startswith("-Infinity"):
        pos, column, rest = pos - 1, column - 1, text[pos - 1:]
    if rest.startswith(("NaN", "Infinity", "-Infinity")):
        word = rest[:rest.index("y") + 1] if "Infinity" in rest[:9] else "NaN"
        return Problem("", "a finite JSON number", f"{word} at column {column}",
                       "NaN/Infinity is not JSON", line=n)
    if reason.startswith("number is infinity"):
        number = _NUMBER.match(rest)
        return Problem("", "a number that fits in float64",
                       f"{_short(number.group()) if number else _snippet(text, pos)} at column "
                       f"{column}",
                       "number too large", line=n)
    if reason.startswith(("recursion limit", "depth limit")):
        return Problem("", "at most 1024 nested levels", f"deeper at column {column}",
                       "nested too deeply", line=n)
    return Problem("", "one JSON object per line", f"{reason} at column {column}"
                   + (f" near {_snippet(text, pos)}" if pos < len(text) else ""),
                   "not valid JSON", line=n)


def _snippet(text: str, pos: int) -> str:
    return repr(text[pos:pos + 12])


def _short(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:37]}... ({len(text)} chars)"


def _blank(n: int) -> Parsed:
    return Parsed(n, None, [Problem("", "one JSON object per line", "an empty line",
                                     "blank line", line=n)])


def _unparsed(raw: Overlong | Crowded, n: int) -> Parsed:
    return Parsed(n, None, [unparsed_problem(raw).at_line(n)])


def unparsed_problem(raw: Overlong | Crowded) -> Problem:
    """The problem of a line left unparsed: too long, or holding too many values."""
    if raw.__class__ is Crowded:
        return Problem("", f"at most {MAX_LINE_VALUES} values per line (each ',' ':' '[' '{{' "
                       "outside strings)", f"{raw.values} in {raw.size} bytes",
                       "too many values (not parsed)")
    return Problem("", f"at most {MAX_LINE_BYTES} bytes", f"{raw.size} bytes",
                   "line too long (not parsed)")


# -- what orjson does not say: duplicate keys, integers beyond 64 bits -----------------------

def hidden_problems(raw: bytes, obj: dict[str, Any]) -> list[Problem]:
    """Duplicate keys (orjson keeps the last) and integers beyond 64 bits (orjson makes floats).

    Cheap sound test first: with no backslash in the line, every `"` delimits a string, so if
    every `:` directly follows a `"`, the count of `":` equals the number of keys written, and
    the object tree holds as many keys only when none is duplicated. Only when that test cannot
    decide is the line parsed again by `json` with hooks.
    """
    if b"\\" not in raw and _INT64_DIGITS not in raw.translate(_DIGITS_TO_ZERO):
        colons = raw.count(b'":')
        if colons == raw.count(b":"):
            keys, objects = _count_keys(obj)
            if keys == colons and objects == raw.count(b"{"):
                return []
    return _exact_check(raw)


def _count_keys(obj: dict[str, Any]) -> tuple[int, int]:
    """Keys and objects reachable through objects only (lists are not entered)."""
    keys, objects, todo = 0, 0, [obj]
    while todo:
        current = todo.pop()
        objects += 1
        keys += len(current)
        todo += [v for v in current.values() if v.__class__ is dict]
    return keys, objects


class _Pairs(dict[str, Any]):
    """A JSON object parsed by `json`, remembering keys it saw more than once."""

    duplicates: dict[str, int]


def _exact_check(raw: bytes) -> list[Problem]:
    flagged = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal flagged
        out = _Pairs(items)
        if len(out) != len(items):
            flagged = True
            out.duplicates = {k: c for k, c in Counter(k for k, _ in items).items() if c > 1}
        return out

    def parse_int(text: str) -> int:
        nonlocal flagged
        value = int(text)
        if not _INT_MIN <= value <= _UINT_MAX:
            flagged = True
        return value

    try:
        tree = json.loads(raw.decode("utf-8"), object_pairs_hook=pairs, parse_int=parse_int)
    except RecursionError:
        return [Problem("", "fewer nested levels", "nesting too deep to check for duplicate keys",
                        "nested too deeply")]
    return _find_hidden(tree) if flagged else []


def _find_hidden(tree: Any) -> list[Problem]:
    problems: list[Problem] = []
    todo: list[tuple[str, Any]] = [("", tree)]
    while todo:
        path, value = todo.pop()
        if isinstance(value, dict):
            for key, count in getattr(value, "duplicates", {}).items():
                problems.append(Problem(join_path(path, key), "each key once per object",
                                        f"{quoted(key)} {count} times (JSON readers keep only one)",
                                        "duplicate key"))
            todo += [(join_path(path, k), v) for k, v in reversed(value.items())]
        elif isinstance(value, list):
            todo += [(f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value)))]
        elif isinstance(value, int) and not isinstance(value, bool):
            if not _INT_MIN <= value <= _UINT_MAX:
                problems.append(Problem(path, "an integer within int64 or uint64",
                                        describe(value), "integer too large for 64 bits"))
    return problems


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


