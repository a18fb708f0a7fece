"""Rollout files: JSON Lines of step records (docs/contract.md §3), written whole-line, read streaming.

Why: rollout files come from crashed samplers, concurrent writers and other teams. Writing
never leaves half a record unless the process dies mid-`write`, and reading never loses a line
without saying so: every line that is not a valid record is a problem with its line number.

Wire format: one JSON object per line, UTF-8, `\\n` line ends. What the reader decides:
- CRLF line ends are accepted (`\\r` is JSON whitespace); a UTF-8 byte-order mark is a problem
  (JSON forbids writing one and a plain `orjson.loads` per line fails on it) but the rest of the
  line is still checked;
- a blank line, bytes that are not UTF-8, text that is not JSON, JSON that is not an object,
  `NaN` / `Infinity`, a duplicate key, an integer beyond int64/uint64, a line longer than
  `MAX_LINE_BYTES` and a record with more than `MAX_RECORD_KEYS` keys are each a problem on
  their line, never a traceback;
- a last line with no newline that does not parse is a *truncated line* (a writer cut
  mid-write). `allow_partial_tail=True` skips it and reports how many bytes were left
  unchecked, which is also how to check a file that is still being appended to.
"""

from __future__ import annotations

import gc
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import orjson
from pydantic import BaseModel

from gyre_contract.core.dims import FLOAT_DTYPES, dtype_name, format_shape, numpy_dtype
from gyre_contract.core.errors import ContractError, InputError, Problem, SchemaError, describe
from gyre_contract.core.models import AnyObservation, RolloutStep, field_specs
from gyre_contract.core.tensor import TensorSpec
from gyre_contract.core.validate import EpisodeTracker, iter_validated_steps, validate_step
from gyre_contract.io.parquet import (
    is_parquet,
    read_parquet_episodes,
    read_parquet_steps,
    validate_parquet,
    write_parquet,
)

MAX_LINE_BYTES = 128 * 2**20
"""A longer line is reported (`line too long`) and skipped, so memory stays bounded."""

MAX_RECORD_KEYS = 10_000
"""A record with more keys (through nested objects) is reported (`too many keys`) and not
validated key by key, so time and memory stay bounded."""
_MANY_KEYS_BYTES = 4 * MAX_RECORD_KEYS  # a shorter line cannot hold that many keys ("":0,)

CHUNK_BYTES = 2**20
"""Bytes read from the file at a time."""

WRITE_BATCH_BYTES = 2**20
"""`write_steps` hands the OS whole lines in batches of about this many bytes."""

_BOM = b"\xef\xbb\xbf"
_DUMPS_OPTIONS = orjson.OPT_SERIALIZE_NUMPY
_INT_MIN, _UINT_MAX = -(2**63), 2**64 - 1
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_INT64_DIGITS = b"0" * 19  # an integer literal this long may not fit in 64 bits
_INDEX = re.compile(r"\[\d+\]")
_NUMBER = re.compile(r"-?[0-9][0-9.eE+-]*")


# -- writing ---------------------------------------------------------------------------------

def write_steps(
    path: str | os.PathLike[str],
    steps: Iterable[BaseModel | Mapping[str, Any]],
    *,
    append: bool = False,
    fsync: bool = False,
) -> int:
    """Write step records as JSON Lines; return how many were written.

    Accepts validated models (written by wire name, absent optional fields left out) or plain
    dicts (written as they are: validate them with `validate_step` first). numpy arrays and
    scalars are serialised by orjson. A record holding `None`, NaN or an infinity is refused
    with ContractError before anything of it is written: JSON would carry it as `null`.

    Guarantee: each record is serialised completely before it is written, and the OS only ever
    receives whole lines (batches of lines, one `write` call each, about `WRITE_BATCH_BYTES`).
    When the function returns or raises, every line serialised so far has been handed to the
    OS; with `fsync=True` it is also on disk. A process killed during a `write` call can leave
    at most one partial last line, which the reader reports as a truncated line. With
    `append=True` the file is opened in O_APPEND mode, so on a local Linux file system lines
    from several processes appending at once never interleave within a line.
    """
    if is_parquet(path):
        if append:
            raise InputError(f"cannot append to a Parquet file: {os.fspath(path)}; write one "
                             "file per shard")
        return write_parquet(path, steps, fsync=fsync)
    count = 0
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        raise InputError(f"cannot open {os.fspath(path)} for writing: {err.strerror}") from None
    buffer = bytearray()
    try:
        for index, step in enumerate(steps):
            buffer += _serialise(step, index)
            count += 1
            if len(buffer) >= WRITE_BATCH_BYTES:
                _write_all(fd, buffer)
                buffer.clear()
    finally:
        try:
            if buffer:
                _write_all(fd, buffer)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    return count


def _serialise(step: BaseModel | Mapping[str, Any], index: int) -> bytes:
    record = step.to_record() if hasattr(step, "to_record") else step
    if isinstance(record, BaseModel):
        record = record.model_dump(by_alias=True, exclude_none=True)
    if not isinstance(record, Mapping):
        raise TypeError(f"steps[{index}]: expected a model or a dict, got {type(step).__name__}")
    try:
        line = orjson.dumps(record, option=_DUMPS_OPTIONS, default=_jsonable)
    except TypeError as err:
        raise TypeError(f"steps[{index}]: cannot serialise as JSON: {err}") from None
    if b"null" in line:
        problems = [p.under(f"steps[{index}]") for p in _unwritable(record, "")]
        if problems:
            raise ContractError(problems)
    return line + b"\n"


def _jsonable(value: Any) -> Any:
    """orjson's fallback for numpy values it does not take natively (strings, non-contiguous)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, exclude_none=True)
    raise TypeError(f"type {type(value).__name__} is not JSON serialisable")


def _unwritable(value: Any, path: str) -> list[Problem]:
    """Values JSON would turn into `null`: None, NaN and infinities (in floats or arrays)."""
    if value is None:
        return [Problem(path, "a value (null is never valid in a record)", "None",
                        "None cannot be written")]
    if isinstance(value, float) and not np.isfinite(value):
        return [Problem(path, "a finite number", repr(value), "non-finite float cannot be written")]
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind == "f":
        if not np.isfinite(value).all():
            return [Problem(path, "finite numbers", describe(value),
                            "non-finite float cannot be written")]
        return []
    if isinstance(value, BaseModel):
        value = value.model_dump(by_alias=True, exclude_none=True)
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _unwritable(v, _join(path, str(k)))]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _unwritable(v, f"{path}[{i}]")]
    return []


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# -- reading lines ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Overlong:
    """Stands in for a line longer than MAX_LINE_BYTES (its bytes were not kept)."""

    size: int


class _LineSource:
    """Splits a binary file into lines, in blocks, in bounded memory.

    Iterating yields lists of complete lines (without `\\n`). After the iteration, `tail` holds
    the bytes after the last newline (None when the file ends with a newline or is empty).
    """

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self.tail: bytes | _Overlong | None = None

    def __iter__(self) -> Iterator[list[bytes | _Overlong]]:
        pending: list[bytes] = []
        pending_size = 0
        skipped = -1  # >= 0 while inside an over-long line: bytes dropped so far
        read = self._handle.read
        while block := read(CHUNK_BYTES):
            parts: list[Any] = block.split(b"\n")
            last = parts.pop()
            if parts:
                first = parts[0]
                if len(block) <= MAX_LINE_BYTES:
                    lines = parts  # the usual case: no line of the chunk can be over-long
                else:
                    lines = [p if len(p) <= MAX_LINE_BYTES else _Overlong(len(p)) for p in parts]
                if skipped >= 0:
                    lines[0] = _Overlong(skipped + len(first))
                    skipped = -1
                elif pending:
                    size = pending_size + len(first)
                    lines[0] = (_Overlong(size) if size > MAX_LINE_BYTES
                                else b"".join([*pending, first]))
                pending, pending_size = [], 0
                yield lines
            if skipped >= 0:
                skipped += len(last)
            elif last:
                pending.append(last)
                pending_size += len(last)
                if pending_size > MAX_LINE_BYTES:
                    skipped, pending, pending_size = pending_size, [], 0
        if skipped >= 0:
            self.tail = _Overlong(skipped)
        elif pending:
            self.tail = b"".join(pending)


def _open(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a rollout file for reading, or raise InputError (exit 2 in the CLI)."""
    name = os.fspath(path)
    if os.path.isdir(name):
        raise InputError(f"is a directory, not a rollout file: {name}")
    try:
        return open(name, "rb", buffering=0)
    except FileNotFoundError:
        raise InputError(f"no such file: {name}") from None
    except OSError as err:
        raise InputError(f"cannot read {name}: {err.strerror}") from None


@dataclass(frozen=True, slots=True)
class _Parsed:
    """What one line gave: a record (a dict) or the problems that stop it being one."""

    line: int
    record: dict[str, Any] | None
    problems: list[Problem]


class _Lines:
    """Parses a rollout file line by line: the layer below model validation.

    `for item in _Lines(path)` yields a `_Parsed` per line whose record is not clean and yields
    a bare `(line, record)` tuple for a clean one (the hot path allocates nothing more).
    After iterating: `lines` (lines seen), `tail_bytes` (bytes of a partial tail skipped).
    """

    def __init__(self, path: str | os.PathLike[str], *, allow_partial_tail: bool) -> None:
        self.path = path
        self.allow_partial_tail = allow_partial_tail
        self.lines = 0
        self.tail_bytes = 0
        self._tail_bytes_left: bytes | _Overlong | None = None

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]] | _Parsed]:
        for first, block in self.blocks():
            yield from self.parse(first, block)
        item = self.tail_item()
        if item is not None:
            yield item

    def blocks(self) -> Iterator[tuple[int, list[bytes | _Overlong]]]:
        """(number of the first line, the lines) of each block of complete lines, unparsed.

        A caller that checks a block in bulk takes it whole; otherwise it calls `parse`. After
        the blocks, `tail_item()` gives the bytes after the last newline, if any.
        """
        self._tail_bytes_left = None
        with _open(self.path) as handle:
            source = _LineSource(handle)
            try:
                for block in source:
                    first = self.lines + 1
                    self.lines += len(block)
                    yield first, block
            except OSError as err:
                raise InputError(f"cannot read {os.fspath(self.path)}: {err.strerror}") from None
            self._tail_bytes_left = source.tail

    def parse(self, first: int, block: list[bytes | _Overlong]
              ) -> Iterator[tuple[int, dict[str, Any]] | _Parsed]:
        """Each line of a block: `(line, record)` when clean, else a `_Parsed` (see class doc)."""
        loads, dumps = orjson.loads, orjson.dumps
        n = first - 1
        for raw in block:
            n += 1
            if raw.__class__ is bytes:
                if raw[-1:] == b"\r":
                    raw = raw[:-1]
                try:
                    obj = loads(raw)
                except orjson.JSONDecodeError:
                    yield _parse_failure(raw, n)
                    continue
                try:
                    same = obj.__class__ is dict and dumps(obj) == raw
                except TypeError:  # deeper than orjson writes (255): slow path
                    same = False
                if same:
                    yield (n, obj) if len(raw) < _MANY_KEYS_BYTES else \
                        _key_count_checked(obj, n)
                else:
                    yield _checked(raw, obj, n, [])
            else:
                yield _too_long(raw, n)

    def tail_item(self) -> tuple[int, dict[str, Any]] | _Parsed | None:
        """The bytes after the last newline, once the blocks are read: a line, or None."""
        tail = self._tail_bytes_left
        if tail is None:
            return None
        self._tail_bytes_left = None
        self.lines += 1
        return self._tail(tail, self.lines)

    def _tail(self, tail: bytes | _Overlong, n: int) -> tuple[int, dict[str, Any]] | _Parsed | None:
        """The bytes after the last newline: a record, a blank line, or a truncated line."""
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
        return _Parsed(n, None, [Problem(
            "", "a complete JSON line ending in a newline",
            f"{size} bytes at the end of the file that do not parse, with no newline",
            "truncated line (the writer was cut off mid-write?)", line=n)])


def _checked(raw: bytes, obj: Any, n: int, problems: list[Problem]) -> Any:
    """Slow path for a line that parsed but is not byte-identical to orjson's own output.

    Returns `(n, record)` for a clean record, else a `_Parsed` carrying `problems` and any
    new ones (its record is None when the line cannot be trusted at all)."""
    if obj.__class__ is not dict:
        problems.append(Problem("", "a JSON object {...} per line", describe(obj),
                                "not a JSON object", line=n))
        return _Parsed(n, None, problems)
    counted = _key_count_checked(obj, n)
    if counted.__class__ is _Parsed:
        return _Parsed(n, None, problems + counted.problems)  # type: ignore[union-attr]
    hidden = _hidden_problems(raw, obj)
    if hidden:
        problems += [p.at_line(n) for p in hidden]
        return _Parsed(n, None, problems)
    if problems:
        return _Parsed(n, obj, problems)
    return n, obj


def _key_count_checked(obj: dict[str, Any], n: int) -> Any:
    """`(n, obj)`, or a `_Parsed` problem when the record holds more than MAX_RECORD_KEYS keys."""
    keys, _ = _count_keys(obj)
    if keys <= MAX_RECORD_KEYS:
        return n, obj
    return _Parsed(n, None, [Problem(
        "", f"at most {MAX_RECORD_KEYS} keys per record (counted through nested objects)",
        f"{keys} keys", "too many keys (record not validated)", line=n)])


def _parse_failure(raw: bytes, n: int) -> _Parsed:
    """Explain why orjson refused a line; retry without a BOM so the rest is still checked."""
    if raw.startswith(_BOM):
        bom = Problem("", "UTF-8 without a byte-order mark", "the bytes EF BB BF",
                      "byte-order mark (BOM) at the start of the line", line=n)
        rest = raw[len(_BOM):]
        try:
            obj = orjson.loads(rest)
        except orjson.JSONDecodeError:
            failed = _parse_failure(rest, n)
            return _Parsed(n, None, [bom, *failed.problems])
        return _checked(rest, obj, n, [bom])  # a _Parsed: it carries the BOM problem
    if not raw.strip(b" \t\r"):
        return _blank(n)
    return _Parsed(n, None, [_json_problem(raw, n)])


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


def _blank(n: int) -> _Parsed:
    return _Parsed(n, None, [Problem("", "one JSON object per line", "an empty line",
                                     "blank line", line=n)])


def _too_long(raw: _Overlong, n: int) -> _Parsed:
    return _Parsed(n, None, [Problem("", f"at most {MAX_LINE_BYTES} bytes", f"{raw.size} bytes",
                                     "line too long (not parsed)", line=n)])


# -- what orjson does not say: duplicate keys, integers beyond 64 bits -----------------------

def _hidden_problems(raw: bytes, obj: dict[str, Any]) -> list[Problem]:
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


class _Pairs(dict):
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
                problems.append(Problem(_join(path, key), "each key once per object",
                                        f"{key!r} {count} times (JSON readers keep only one)",
                                        "duplicate key"))
            todo += [(_join(path, k), v) for k, v in reversed(value.items())]
        elif isinstance(value, list):
            todo += [(f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value)))]
        elif isinstance(value, int) and not isinstance(value, bool):
            if not _INT_MIN <= value <= _UINT_MAX:
                problems.append(Problem(path, "an integer within int64 or uint64",
                                        describe(value), "integer too large for 64 bits"))
    return problems


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# -- validated steps -------------------------------------------------------------------------

def read_steps(
    path: str | os.PathLike[str],
    model: type[BaseModel] = RolloutStep,
    *,
    allow_partial_tail: bool = False,
) -> Iterator[BaseModel]:
    """Yield each line as a validated `model` instance, streaming: memory holds one line and
    the episode ids seen, never the file.

    Checks the line (JSON, UTF-8, one object, no duplicate keys), the record (`validate_step`)
    and the episode rules that one step can break (step order, no step after a done step,
    policy_version never decreasing, no dimension jump). Raises ContractError, with line
    numbers, on the first line that breaks any of them: steps already yielded are good, the
    rest of the file is not read. Open episodes at the end are not an error here (a file may
    hold a slice of a run); use `validate_file(..., require_complete=True)` to require them.
    A truncated last line raises unless `allow_partial_tail=True`, which skips it.
    """
    if is_parquet(path):
        yield from read_parquet_steps(path, model)
        return
    yield from iter_validated_steps(_good_lines(path, allow_partial_tail), model)


def _good_lines(path: str | os.PathLike[str], allow_partial_tail: bool
                ) -> Iterator[tuple[int, Any]]:
    """(line, record) of each line, raising ContractError on the first line that is not one."""
    for item in _Lines(path, allow_partial_tail=allow_partial_tail):
        if item.__class__ is not tuple:
            raise ContractError(item.problems)  # type: ignore[union-attr]
        yield item  # type: ignore[misc]


# -- episodes --------------------------------------------------------------------------------

@dataclass
class Episode:
    """One episode as per-episode columns: one `[T, ...]` numpy array per field.

    `columns` maps each record key present to its column: a numpy array `[T, ...]` of the
    validated dtype (`str_` for strings); for a field whose shape holds a varying dim (declared
    in the model's `varying_dims`), a list of T arrays; for an observation of modalities, a dict
    {modality: column}; for `info`, a list of T dicts. A field carried by only some steps
    (typically `next_value` on a truncated last step) is still T long: a float field holds NaN
    on the steps that did not carry it (NaN is never data: the contract requires finite
    floats), any other field is a list with None there. `lines` holds each step's line number.
    """

    episode_id: str
    columns: dict[str, Any]
    lines: list[int] | None = None

    def __len__(self) -> int:
        return len(self.columns["step"])

    @property
    def terminated(self) -> bool:
        return bool(self.columns["terminated"][-1])

    @property
    def truncated(self) -> bool:
        return bool(self.columns["truncated"][-1]) and not self.terminated

    @property
    def is_open(self) -> bool:
        """The last step is neither terminated nor truncated (the file ended mid-episode)."""
        return not (self.columns["terminated"][-1] or self.columns["truncated"][-1])


def read_episodes(
    path: str | os.PathLike[str],
    model: type[BaseModel] = RolloutStep,
    *,
    allow_partial_tail: bool = False,
    include_open: bool = True,
) -> Iterator[Episode]:
    """Yield the file's episodes as `Episode` columns, each when its last step arrives.

    Steps of different episodes may interleave (a vector env writes several at once); they are
    grouped by `episode_id`. An episode is yielded when its terminated or truncated step is
    read; episodes still open at the end of the file follow in order of first appearance
    (left out with `include_open=False`). Checks and errors are those of `read_steps`. Memory
    holds the steps of the episodes still open.
    """
    if is_parquet(path):
        yield from read_parquet_episodes(path, model, include_open=include_open)
        return
    open_steps: dict[str, list[Any]] = {}  # (line, step) pairs and bulk-checked _Rows
    lines = _Lines(path, allow_partial_tail=allow_partial_tail)
    tracker = EpisodeTracker(model)
    bulk = _bulk_plan(model)

    def take(item: tuple[int, dict[str, Any]] | _Parsed) -> Episode | None:
        if item.__class__ is not tuple:
            raise ContractError(item.problems)  # type: ignore[union-attr]
        n, record = item  # type: ignore[misc]
        try:
            step = validate_step(record, model)
        except ContractError as err:
            raise ContractError([p.at_line(n) for p in err.problems]) from None
        problems = tracker.add(step, n)
        if problems:
            raise ContractError(problems)
        steps = open_steps.setdefault(step.episode_id, [])
        steps.append((n, step))
        if step.terminated or step.truncated:
            del open_steps[step.episode_id]
            return _episode_of(step.episode_id, steps, model, bulk)
        return None

    for first, block in lines.blocks():
        checked = bulk.decode(block, arrays=True) if bulk is not None else None
        if checked is not None and tracker.add_columns(
                checked.episode_id, checked.step, checked.policy_version, checked.terminated,
                checked.truncated, first):
            yield from _block_episodes(bulk, checked, first, open_steps, model)
            continue
        for item in lines.parse(first, block):
            episode = take(item)
            if episode is not None:
                yield episode
    item = lines.tail_item()
    if item is not None:
        episode = take(item)
        if episode is not None:
            yield episode
    if include_open:
        for eid, steps in open_steps.items():
            yield _episode_of(eid, steps, model, bulk)


@dataclass(frozen=True, slots=True)
class _Rows:
    """Steps of one episode inside a bulk-checked block: the block, the rows, their lines."""

    block: Any  # a fastfile.Block
    rows: Any  # a slice or a list of row indices
    lines: list[int]


def _block_episodes(bulk: Any, checked: Any, first: int, open_steps: dict[str, list[Any]],
                    model: type[BaseModel]) -> list[Episode]:
    """File a bulk-checked block's rows under their episodes; the episodes it ends, in order.

    The cyclic GC is paused meanwhile (not while the caller holds the episodes): building the
    columns allocates many objects that hold no cycle.
    """
    from gyre_contract.io.fastfile import episode_rows

    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        ended = []
        for eid, rows, done in episode_rows(checked):
            numbers = range(first, first + checked.n)[rows] if rows.__class__ is slice else \
                [first + i for i in rows]
            open_steps.setdefault(eid, []).append(_Rows(checked, rows, list(numbers)))
            if done:
                ended.append((numbers[-1], eid))
        return [_episode_of(eid, open_steps.pop(eid), model, bulk) for _, eid in sorted(ended)]
    finally:
        if gc_was_enabled:
            gc.enable()


def _episode_of(episode_id: str, parts: list[Any], model: type[BaseModel], bulk: Any) -> Episode:
    """The episode of steps read one by one, in bulk, or both (then all as model instances)."""
    if all(part.__class__ is _Rows for part in parts):
        lines = parts[0].lines if len(parts) == 1 else [n for p in parts for n in p.lines]
        return bulk.episode(episode_id, [(p.block, p.rows) for p in parts], lines)
    steps: list[tuple[int, BaseModel]] = []
    for part in parts:
        if part.__class__ is not _Rows:
            steps.append(part)
            continue
        rows = part.rows
        indices = range(rows.start, rows.stop) if rows.__class__ is slice else rows
        for i, n in zip(indices, part.lines):
            record = {k: v[i] for k, v in part.block.columns.items() if v[i] is not None}
            steps.append((n, validate_step(record, model)))
    return episode_from_steps(steps, model)


def episode_from_steps(steps: list[tuple[int, BaseModel]], model: type[BaseModel]) -> Episode:
    """Columns of one episode from its validated steps (with their line numbers)."""
    models = [s for _, s in steps]
    wires = _wire_attrs(model)
    columns: dict[str, Any] = {}
    varying = set(getattr(model, "varying_dims", ()))
    specs = field_specs(model)
    for wire, attr in wires.items():
        values = [getattr(s, attr) for s in models]
        if all(v is None for v in values):
            continue
        columns[wire] = _column(wire, values, specs.get(wire), varying)
    return Episode(str(models[0].episode_id), columns, [n for n, _ in steps])


def _wire_attrs(model: type[BaseModel]) -> dict[str, str]:
    cached = model.__dict__.get("__gyre_wire_attrs__")
    if cached is None:
        cached = {info.alias or name: name for name, info in model.model_fields.items()}
        model.__gyre_wire_attrs__ = cached  # type: ignore[attr-defined]
    return cached


def _column(name: str, values: list[Any], spec: Any, varying: set[str]) -> Any:
    """One field's values over T steps → its column (see `Episode`)."""
    present = [v for v in values if v is not None]
    first = present[0]
    if name == "info" or (isinstance(first, dict) and spec is None):
        return values  # free-form objects stay one dict per step
    if isinstance(first, (dict, BaseModel)):
        return _modalities_column(values, spec, varying)
    if len(present) < len(values):
        return _partial_column(values, spec)
    if isinstance(spec, AnyObservation):
        spec = spec.spec
    if isinstance(first, np.ndarray):
        if isinstance(spec, TensorSpec) and any(d.name in varying for d in spec.shape):
            return values
        try:
            return np.stack(values)
        except ValueError:
            shapes = sorted({format_shape(v.shape) for v in values})
            raise ContractError(Problem(name, "one shape over the episode", ", ".join(shapes),
                                        "shape changed within the episode")) from None
    return np.array(values, dtype=_scalar_dtype(first, spec))


def _scalar_dtype(value: Any, spec: Any) -> np.dtype:
    if isinstance(value, str):
        return np.dtype(np.str_)
    if isinstance(value, np.generic):  # e.g. an int64-or-float32 action validated as np.int64
        return value.dtype
    if isinstance(spec, TensorSpec) and isinstance(spec.dtype, str):
        return numpy_dtype(spec.dtype)
    if isinstance(value, bool):
        return np.dtype(np.bool_)
    return np.dtype(np.int64 if isinstance(value, int) else np.float32)


def _partial_column(values: list[Any], spec: Any) -> Any:
    """A field only some steps carry: NaN where absent for floats, else None in a list."""
    if isinstance(spec, AnyObservation):
        spec = spec.spec
    dtypes = spec.dtypes if isinstance(spec, TensorSpec) else ()
    present = [v for v in values if v is not None]
    shapes = {np.shape(v) for v in present}
    if dtypes and all(d in FLOAT_DTYPES for d in dtypes) and len(shapes) == 1:
        dtype = numpy_dtype(dtypes[0])
        out = np.full((len(values), *shapes.pop()), np.nan, dtype=dtype)
        for i, v in enumerate(values):
            if v is not None:
                out[i] = v
        return out
    return values


def _modalities_column(values: list[Any], spec: Any, varying: set[str]) -> dict[str, Any]:
    """An observation made of modalities → {modality: column}."""
    dicts = [v if v is None or isinstance(v, dict) else _modality_dict(v) for v in values]
    keys: dict[str, None] = {}
    for d in dicts:
        keys.update(dict.fromkeys(d or ()))
    sub_specs = field_specs(spec) if isinstance(spec, type) else {}
    sub_varying = varying | set(getattr(spec, "varying_dims", ()))
    out = {}
    for key in keys:
        column_values = [None if d is None else d.get(key) for d in dicts]
        out[key] = _column(key, column_values, sub_specs.get(key), sub_varying)
    return out


def _modality_dict(value: BaseModel) -> dict[str, Any]:
    attrs = _wire_attrs(type(value))
    return {w: getattr(value, a) for w, a in attrs.items() if getattr(value, a) is not None}


# -- stage 1: validate a whole file ----------------------------------------------------------

MAX_PROBLEM_GROUPS = 200
"""Distinct (path, message) groups kept in a report; further groups are only counted."""

MAX_TRACKED_FIELDS = 4096
"""Distinct field names (and key sets, and dtype/shape pairs) a report keeps track of."""

MAX_LISTED_EXTRA = 20
"""Names that are not in the model listed in the field table; the rest are only counted."""

MAX_PATHS_PER_MESSAGE = 10
"""Past this many paths with one message, further paths share one group with path `*`."""


@dataclass(frozen=True, slots=True)
class FieldSummary:
    """One field of the file: dtype and shape as seen, as declared, and how many records hold it."""

    name: str
    dtype: str
    shape: str
    declared: str
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": self.shape,
                "declared": self.declared, "count": self.count}


@dataclass
class ProblemGroup:
    """Problems with one path (list indices as `[*]`) and one message: a count and examples."""

    path: str
    message: str
    count: int
    examples: list[Problem]

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message, "count": self.count,
                "examples": [p.to_dict() for p in self.examples]}

    def text_lines(self, indent: str) -> list[str]:
        """The group as report text: a heading with its count, then the examples."""
        head = f"{self.path}: {self.message}" if self.path else self.message
        times = "once" if self.count == 1 else f"{self.count} times"
        lines = [f"{indent}{head} ({times})"]
        lines += [f"{indent}  {p}" for p in self.examples]
        if self.count > len(self.examples):
            lines.append(f"{indent}  ... and {self.count - len(self.examples)} more")
        return lines


@dataclass
class FileReport:
    """What `validate_file` found: fields, counts and every problem, grouped.

    Episode counts are None when the episode rules were not applied (JSON Schema mode).
    """

    path: str
    checked_against: str
    lines: int = 0
    records: int = 0
    steps: int = 0
    episodes: int | None = None
    open_episodes: int | None = None
    terminated: int | None = None
    truncated: int | None = None
    policy_versions: list[int] = field(default_factory=list)
    fields: list[FieldSummary] = field(default_factory=list)
    groups: list[ProblemGroup] = field(default_factory=list)
    problem_count: int = 0
    ungrouped: int = 0
    more_fields: int = 0
    partial_tail_bytes: int = 0
    require_complete: bool = False

    @property
    def holds(self) -> bool:
        return self.problem_count == 0

    def exit_code(self) -> int:
        """0 the file holds the contract, 1 it does not (unreadable files raise InputError)."""
        return 0 if self.holds else 1

    def problems(self) -> list[Problem]:
        """The example problems kept, in file order (all of them when no group overflowed)."""
        kept = [p for g in self.groups for p in g.examples]
        return sorted(kept, key=lambda p: (p.line or 0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "checked_against": self.checked_against,
            "holds": self.holds,
            "counts": {
                "lines": self.lines, "records": self.records, "steps": self.steps,
                "episodes": self.episodes, "open_episodes": self.open_episodes,
                "terminated": self.terminated, "truncated": self.truncated,
                "policy_versions": self.policy_versions,
            },
            "fields": [f.to_dict() for f in self.fields],
            "more_fields": self.more_fields,
            "problems": {"count": self.problem_count, "groups": [g.to_dict() for g in self.groups],
                         "ungrouped": self.ungrouped},
            "partial_tail_bytes": self.partial_tail_bytes,
            "require_complete": self.require_complete,
        }

    def to_text(self) -> str:
        out = [f"{self.path}: checked against {self.checked_against}", ""]
        out += _field_table(self.fields)
        if self.more_fields:
            out.append(f"  ... and {self.more_fields} more keys not in the model, not listed")
        out += ["", "counts: " + self._counts_text()]
        if self.partial_tail_bytes:
            out.append(f"partial tail: {self.partial_tail_bytes} bytes after line "
                       f"{self.lines - 1} not checked (no newline yet)")
        out.append("")
        if self.holds:
            out.append("holds: no problems")
            return "\n".join(out)
        out.append(f"problems: {self.problem_count} in {len(self.groups)} "
                   f"group{'s' if len(self.groups) != 1 else ''}")
        for group in self.groups:
            out += group.text_lines("  ")
        if self.ungrouped:
            out.append(f"  ... and {self.ungrouped} more problems of other kinds")
        return "\n".join(out)

    def _counts_text(self) -> str:
        parts = [_plural(self.lines, "line"), _plural(self.steps, "valid step")]
        if self.episodes is None:
            parts.append("episode rules not checked")
        else:
            parts += [f"{_plural(self.episodes, 'episode')} ({self.open_episodes} open, "
                      f"{self.terminated} terminated, {self.truncated} truncated)"]
        versions = self.policy_versions
        if versions:
            shown = ", ".join(map(str, versions[:5])) + (", ..." if len(versions) > 5 else "")
            parts.append(f"policy versions {versions[0]}..{versions[-1]} "
                         f"({len(versions)} seen: {shown})")
        return ", ".join(parts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _field_table(fields: list[FieldSummary]) -> list[str]:
    if not fields:
        return ["fields: none"]
    rows = [("field", "dtype", "shape", "declared", "records")]
    rows += [(f.name, f.dtype, f.shape, f.declared, str(f.count)) for f in fields]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths)) + "  " + r[4].rjust(7)
        for r in rows
    ]


class _Groups:
    """Problems grouped by (path with `[*]` for indices, message), first few kept per group."""

    def __init__(self, max_examples: int) -> None:
        self.max_examples = max_examples
        self.groups: dict[tuple[str, str], ProblemGroup] = {}
        self.paths_per_message: Counter[str] = Counter()
        self.count = 0
        self.ungrouped = 0

    def add(self, problems: Iterable[Problem]) -> None:
        for p in problems:
            self.count += 1
            path = _INDEX.sub("[*]", p.path) if "[" in p.path else p.path
            group = self.groups.get((path, p.message))
            if group is None:
                if self.paths_per_message[p.message] >= MAX_PATHS_PER_MESSAGE:
                    path = "*"  # e.g. thousands of distinct unknown keys: one group for the rest
                    group = self.groups.get((path, p.message))
            if group is None:
                if len(self.groups) >= MAX_PROBLEM_GROUPS:
                    self.ungrouped += 1
                    continue
                self.paths_per_message[p.message] += 1
                group = self.groups[(path, p.message)] = ProblemGroup(path, p.message, 0, [])
            group.count += 1
            if len(group.examples) < self.max_examples:
                group.examples.append(p)


class _FieldStats:
    """Which keys the records carry, and the dtypes and shapes their validated values have.

    Memory is bounded: at most MAX_TRACKED_FIELDS distinct names (and key sets) are tracked;
    names beyond that are only counted in `untracked`.
    """

    def __init__(self, model: type[BaseModel] | None) -> None:
        self.model = model
        self.signatures: dict[tuple[str, ...], int] = {}
        self.key_counts: Counter[str] = Counter()
        self.seen: dict[tuple[str, Any, tuple[int, ...]], int] = {}
        self.untracked = 0
        self.known = set(_wire_attrs(model)) if model is not None else set()
        self.extra_kinds: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.specs = field_specs(model) if model is not None else {}
        attrs = _wire_attrs(model) if model is not None else {}
        self.array_fields = [(w, attrs[w]) for w, s in self.specs.items()
                             if not (isinstance(s, TensorSpec) and s.is_scalar)]

    def record(self, record: dict[str, Any]) -> None:
        signature = tuple(record)
        count = self.signatures.get(signature)
        if count is not None:
            self.signatures[signature] = count + 1
        elif len(self.signatures) < MAX_TRACKED_FIELDS and len(record) <= MAX_TRACKED_FIELDS:
            self.signatures[signature] = 1
            for key in signature:
                if key not in self.known and key not in self.extra_kinds:
                    self.extra_kinds[key] = _json_kind(record[key])
        else:
            for key in signature:
                if key in self.key_counts or len(self.key_counts) < MAX_TRACKED_FIELDS:
                    self.key_counts[key] += 1
                else:
                    self.untracked += 1

    def step(self, step: BaseModel) -> None:
        seen = self.seen
        for wire, attr in self.array_fields:
            value = getattr(step, attr)
            if value is None:
                continue
            if value.__class__ is np.ndarray or isinstance(value, np.generic):
                key = (wire, value.dtype, value.shape)
                count = seen.get(key)
                if count is not None:
                    seen[key] = count + 1
                else:
                    self._see(key)
            else:
                self._nested(wire, value)

    def json_record(self, record: dict[str, Any]) -> None:
        """Schema mode: dtype and shape from the JSON values themselves."""
        for key, value in record.items():
            kind, shape = _json_kind(value)
            self._see((key, kind, shape))

    def _nested(self, wire: str, value: Any) -> None:
        items = value.items() if isinstance(value, dict) else _modality_dict(value).items()
        for key, item in items:
            if isinstance(item, (np.ndarray, np.generic)):
                self._see((f"{wire}.{key}", item.dtype, item.shape))
            else:
                self._see((f"{wire}.{key}", _json_kind(item)[0], ()))

    def counted(self, key_counts: Mapping[str, int],
                arrays: Iterable[tuple[str, Any, tuple[int, ...], int]]) -> None:
        """Records checked in bulk: how many carried each key; (wire, dtype, shape, count) of
        their tensors. The same totals as `record` and `step` on each of them."""
        for key, n in key_counts.items():
            if key in self.key_counts or len(self.key_counts) < MAX_TRACKED_FIELDS:
                self.key_counts[key] += n
            else:
                self.untracked += n
        for entry in arrays:
            key, n = entry[:3], entry[3]
            if key in self.seen or len(self.seen) < MAX_TRACKED_FIELDS:
                self.seen[key] = self.seen.get(key, 0) + n

    def _see(self, entry: tuple[str, Any, tuple[int, ...]]) -> None:
        count = self.seen.get(entry)
        if count is not None:
            self.seen[entry] = count + 1
        elif len(self.seen) < MAX_TRACKED_FIELDS:
            self.seen[entry] = 1

    def summaries(self) -> tuple[list[FieldSummary], int]:
        """The field table (model fields first, then at most MAX_LISTED_EXTRA other names) and
        how many names were left out of it."""
        counts = Counter(self.key_counts)
        for keys, n in self.signatures.items():
            for key in keys:
                counts[key] += n
        observed: dict[str, list[tuple[Any, tuple[int, ...], int]]] = {}
        subs: dict[str, list[str]] = {}
        for (name, dtype, shape), n in self.seen.items():
            if name not in observed and "." in name:
                subs.setdefault(name.partition(".")[0], []).append(name)
            observed.setdefault(name, []).append((dtype, shape, n))
        order = list(self.specs) + [w for w in _wire_attrs(self.model) if w not in self.specs] \
            if self.model is not None else []
        known = set(order)
        extra = sorted(k for k in counts if k not in known)
        names = [k for k in order if k in counts] + extra[:MAX_LISTED_EXTRA]
        out = []
        for name in names:
            if name in observed or name not in subs:
                out.append(self._summary(name, counts[name], observed.get(name)))
            for sub in sorted(subs.get(name, ())):
                out.append(self._summary(sub, sum(n for *_, n in observed[sub]), observed[sub]))
        return out, max(0, len(extra) - MAX_LISTED_EXTRA) + self.untracked

    def _summary(self, name: str, count: int, seen: list | None) -> FieldSummary:
        spec = self.specs.get(name)
        declared_dtype, declared = _declared(spec, name, self.model)
        if not seen and name in self.extra_kinds:
            kind, shape = self.extra_kinds[name]
            return FieldSummary(name, f"JSON {kind}", format_shape(shape), declared, count)
        if not seen:  # no record carrying it passed validation
            return FieldSummary(name, declared_dtype or "-", "[]" if declared_dtype else "-",
                                declared, count)
        dtypes = sorted({d if isinstance(d, str) else dtype_name(d) for d, _, _ in seen})
        return FieldSummary(name, " | ".join(dtypes), _shapes_text([s for _, s, _ in seen]),
                            declared, count)


def _declared(spec: Any, name: str, model: type[BaseModel] | None) -> tuple[str, str]:
    """(dtype of a scalar field, declared shape text) from the model; '' where none is declared."""
    if isinstance(spec, AnyObservation):
        return "", f"{spec.spec.dtype} {format_shape(spec.spec.shape)} or modalities"
    if isinstance(spec, TensorSpec):
        dtype = spec.dtype if isinstance(spec.dtype, str) else " | ".join(spec.dtype)
        return (dtype if spec.is_scalar else ""), f"{dtype} {format_shape(spec.shape)}"
    if isinstance(spec, type):
        return "", f"modalities ({spec.__name__})"
    if model is not None and "." not in name and name in _wire_attrs(model):
        return "object", "object"
    if model is not None and "." in name:
        head, _, key = name.partition(".")
        parent = field_specs(model).get(head)
        if isinstance(parent, type):
            sub = field_specs(parent).get(key)
            if isinstance(sub, TensorSpec):
                return "", f"{sub.dtype} {format_shape(sub.shape)}"
            if key in _wire_attrs(parent):
                return _plain_declared(parent, key)
        return "", ""
    return "", "not in the model" if model is not None else ""


def _plain_declared(model: type[BaseModel], wire: str) -> tuple[str, str]:
    """A modality declared with a plain Python type (`text: str`)."""
    annotation = model.model_fields[_wire_attrs(model)[wire]].annotation
    if annotation is str:
        return "string", "string []"
    return "", getattr(annotation, "__name__", str(annotation))


def _shapes_text(shapes: list[tuple[int, ...]]) -> str:
    distinct = sorted(set(shapes))
    if len(distinct) == 1:
        return format_shape(distinct[0])
    ranks = {len(s) for s in distinct}
    if len(ranks) == 1:
        dims = []
        for axis in zip(*distinct):
            lo, hi = min(axis), max(axis)
            dims.append(str(lo) if lo == hi else f"{lo}..{hi}")
        return "[" + ", ".join(dims) + "]"
    shown = " | ".join(format_shape(s) for s in distinct[:3])
    return shown + (" | ..." if len(distinct) > 3 else "")


def _json_kind(value: Any) -> tuple[str, tuple[int, ...]]:
    """A JSON value's kind and, for nested lists, shape (read along the first elements)."""
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    if isinstance(value, bool):
        kind = "bool"
    elif isinstance(value, int):
        kind = "int"
    elif isinstance(value, float):
        kind = "float"
    elif isinstance(value, str):
        kind = "string"
    elif value is None:
        kind = "null"
    elif isinstance(value, list):
        kind = "list"
    else:
        kind = "object"
    return kind, tuple(shape)


def validate_file(
    path: str | os.PathLike[str],
    model: type[BaseModel] = RolloutStep,
    *,
    schema: Mapping[str, Any] | None = None,
    require_complete: bool = False,
    allow_partial_tail: bool = False,
    max_examples_per_group: int = 3,
) -> FileReport:
    """Stage 1: check every line of a rollout file; return a report, raise only if unreadable.

    Each line is parsed (see the module docstring for what counts as a bad line), validated
    with `validate_step(record, model)`, and fed to an `EpisodeTracker` for the episode rules.
    With `schema` (a JSON Schema document), each record is checked by jsonschema's
    Draft 2020-12 validator instead, and the episode rules are not applied. With
    `require_complete`, an episode still open at the end is a problem. Raises InputError for a
    missing, unreadable or directory path.
    """
    if is_parquet(path):
        if schema is not None:
            raise InputError("--schema checks JSON Lines records; check a Parquet file against "
                             "a model (--model)")
        return validate_parquet(path, model, require_complete=require_complete,
                                max_examples_per_group=max_examples_per_group)
    lines = _Lines(path, allow_partial_tail=allow_partial_tail)
    groups = _Groups(max_examples_per_group)
    stats = _FieldStats(None if schema is not None else model)
    if schema is not None:
        report = _validate_with_schema(lines, schema, groups, stats)
        report.path = os.fspath(path)
    else:
        report = _validate_with_model(lines, model, groups, stats, require_complete)
        report.path = os.fspath(path)
    report.lines = lines.lines
    report.partial_tail_bytes = lines.tail_bytes
    report.require_complete = require_complete
    if lines.lines == 0:
        groups.add([Problem("", "at least one step record", "an empty file", "no records")])
    report.fields, report.more_fields = stats.summaries()
    report.groups = list(groups.groups.values())
    report.problem_count = groups.count
    report.ungrouped = groups.ungrouped
    return report


def _numbered_record(item: tuple[int, Any] | _Parsed, groups: _Groups) -> tuple[int, Any] | None:
    """(line, record) of a parsed line; a line with problems has them added to `groups` first."""
    if item.__class__ is tuple:
        return item  # type: ignore[return-value]
    groups.add(item.problems)  # type: ignore[union-attr]
    record = item.record  # type: ignore[union-attr]
    return None if record is None else (item.line, record)  # type: ignore[union-attr]


def _skip_lost_step(tracker: EpisodeTracker, record: Any, n: int) -> None:
    """A step that failed validation still advances its episode, when it says which one."""
    if isinstance(record, dict):
        eid, step = record.get("episode_id"), record.get("step")
        if isinstance(eid, str) and isinstance(step, int) and not isinstance(step, bool):
            tracker.skip(eid, step, n)


def _validate_with_model(
    lines: _Lines | Iterable[Any], model: type[BaseModel], groups: _Groups, stats: _FieldStats,
    require_complete: bool,
) -> FileReport:
    tracker = EpisodeTracker(model)
    counts = [0, 0]  # records, steps

    def take(item: tuple[int, dict[str, Any]] | _Parsed) -> None:
        numbered = _numbered_record(item, groups)
        if numbered is None:
            return
        n, record = numbered
        counts[0] += 1
        stats.record(record)
        try:
            step = validate_step(record, model)
        except ContractError as err:
            groups.add(p.at_line(n) for p in err.problems)
            _skip_lost_step(tracker, record, n)
            return
        counts[1] += 1
        stats.step(step)
        problems = tracker.add(step, n)
        if problems:
            groups.add(problems)

    bulk = _bulk_plan(model) if isinstance(lines, _Lines) else None
    gc_was_enabled = gc.isenabled()
    gc.disable()  # nothing is held from line to line: the cyclic GC would only cost time
    try:
        if bulk is None:  # items from any source (Parquet, a Ray shard): one by one
            for item in lines:
                take(item)
        else:
            for first, block in lines.blocks():
                if _take_block(bulk, block, first, tracker, stats):
                    counts[0] += len(block)
                    counts[1] += len(block)
                    continue
                for item in lines.parse(first, block):
                    take(item)
            item = lines.tail_item()
            if item is not None:
                take(item)
    finally:
        if gc_was_enabled:
            gc.enable()
    groups.add(tracker.finish(require_complete))
    return FileReport(
        path="", checked_against=f"model {model.__name__}", records=counts[0], steps=counts[1],
        episodes=tracker.episodes, open_episodes=len(tracker.open_episodes),
        terminated=tracker.terminated, truncated=tracker.truncated,
        policy_versions=sorted(tracker.policy_versions),
    )


def _bulk_plan(model: type[BaseModel]) -> Any:
    """The bulk path of a simple model (`fastfile`), or None: every line goes one by one."""
    from gyre_contract.io.fastfile import bulk_plan  # msgspec: only when a file is read

    return bulk_plan(model)


def _take_block(bulk: Any, block: list[Any], first: int, tracker: EpisodeTracker,
                stats: _FieldStats) -> bool:
    """Check a whole block at once; False (nothing changed) when it must go line by line."""
    checked = bulk.decode(block)
    if checked is None or not tracker.add_columns(
            checked.episode_id, checked.step, checked.policy_version, checked.terminated,
            checked.truncated, first):
        return False
    stats.counted(checked.key_counts, bulk.array_counts(checked))
    return True


def _validate_with_schema(
    lines: _Lines, schema: Mapping[str, Any], groups: _Groups, stats: _FieldStats,
) -> FileReport:
    from referencing.exceptions import Unresolvable

    validator = _schema_validator(schema)
    records = steps = 0
    for item in lines:
        numbered = _numbered_record(item, groups)
        if numbered is None:
            continue
        n, record = numbered
        records += 1
        stats.record(record)
        stats.json_record(record)
        try:
            errors = sorted(validator.iter_errors(record), key=lambda e: list(map(str, e.path)))
        except Unresolvable as err:
            raise SchemaError(f"schema $ref cannot be resolved inside the document: {err}"
                              ) from None
        except RecursionError:  # jsonschema recurses per level of the record and per $ref
            if _depth(record) <= _SHALLOW:
                raise SchemaError("schema: validation never ends: a $ref leads back to itself "
                                  "without descending into the record ($ref cycle)") from None
            groups.add([Problem("", "a record the JSON Schema validator can walk",
                                "nesting too deep to check", "nested too deeply", line=n)])
            continue
        if errors:
            groups.add(_schema_problem(e, n) for e in errors)
        else:
            steps += 1
    title = schema.get("title") or schema.get("$id") or "a JSON Schema"
    return FileReport(path="", checked_against=f"JSON Schema {title}", records=records,
                      steps=steps)


_SHALLOW = 32
"""A record at most this deep cannot exhaust the stack by itself: a RecursionError then means
the schema loops (`{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}`)."""


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value (0 for a scalar), without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, (dict, list)):
            depth += 1
            deepest = max(deepest, depth)
            todo += [(v, depth) for v in (node.values() if isinstance(node, dict) else node)]
    return deepest


def _schema_validator(schema: Mapping[str, Any]) -> Any:
    """Draft 2020-12 validator that resolves `$ref` inside the document only, never fetching."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError as JsonSchemaError
    from referencing import Registry
    from referencing.exceptions import NoSuchResource

    def refuse(uri: str) -> Any:
        raise NoSuchResource(ref=uri)

    try:
        Draft202012Validator.check_schema(schema)
    except JsonSchemaError as err:
        raise SchemaError(f"not a valid Draft 2020-12 schema: {err.message}") from None
    return Draft202012Validator(schema, registry=Registry(retrieve=refuse))


def _schema_problem(error: Any, n: int) -> Problem:
    path = ""
    for part in error.absolute_path:
        path = f"{path}[{part}]" if isinstance(part, int) else _join(path, str(part))
    message = error.message if len(error.message) <= 80 else error.message[:77] + "..."
    expected = f"{error.validator}: {json.dumps(error.validator_value, default=str)}"
    if len(expected) > 80:
        expected = expected[:77] + "..."
    return Problem(path, expected, describe(error.instance), message, line=n)
