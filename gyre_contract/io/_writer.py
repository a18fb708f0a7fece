"""Writing rollout files: step records as whole JSON Lines (docs/contract.md §3), or Parquet.

Why: a sampler that crashes, or several that append to one file, must never leave half a record
that a reader takes for a whole one. Each record is serialised completely before it is written,
and the OS only ever receives whole lines.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel

from gyre_contract.core._errors import ContractError, InputError, Problem, describe
from gyre_contract.io._lines import join_path
from gyre_contract.io._parquet import is_parquet, write_parquet

WRITE_BATCH_BYTES = 2**20
"""`write_steps` hands the OS whole lines in batches of about this many bytes."""

_DUMPS_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


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
    from several processes appending at once never interleave within a line; and when the file
    ends in a partial line (a writer killed, a full disk), a newline goes first, so the torn
    line stays a line of its own (reported by readers) and the new records stay whole.
    """
    if is_parquet(path):
        if append:
            raise InputError(f"cannot append to a Parquet file: {os.fspath(path)}; write one "
                             "file per shard")
        return write_parquet(path, steps, fsync=fsync)
    count = 0
    try:
        if append:
            fd = open_for_append(path)
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as err:
        raise InputError(f"cannot open {os.fspath(path)} for writing: {err.strerror}") from None
    buffer = bytearray()
    try:
        if append and not ends_with_newline(fd):
            buffer += b"\n"  # a torn last line (a writer cut off) stays alone, ours stays whole
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
        return [p for k, v in value.items() for p in _unwritable(v, join_path(path, str(k)))]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _unwritable(v, f"{path}[{i}]")]
    return []


def ends_with_newline(fd: int) -> bool:
    """True when the regular file `fd` is empty or ends in a newline (so an append starts a line).

    Anything that is not a regular file (a pipe, a terminal) cannot be torn this way: True.
    """
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
        return True
    try:
        return os.pread(fd, 1, info.st_size - 1) == b"\n"
    except OSError:  # opened write-only (see `open_for_append`): cannot tell, add nothing
        return True


def open_for_append(path: str | os.PathLike[str]) -> int:
    """An O_APPEND descriptor that can also read the last byte (write-only if it must be),
    holding an exclusive advisory lock (`flock`) until it is closed.

    The lock makes "does the file end in a newline?" and the append one step: without it, another
    process's append in progress (the file's size grows page by page during a large write) can
    look like a torn line, and a needless newline would land after it as a blank line.
    """
    flags = os.O_CREAT | os.O_APPEND
    try:
        fd = os.open(path, flags | os.O_RDWR, 0o644)
    except PermissionError:
        fd = os.open(path, flags | os.O_WRONLY, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:  # a file system without flock (some network mounts): O_APPEND alone
        pass
    return fd


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]

