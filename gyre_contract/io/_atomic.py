"""Atomic output files: write a temporary file in the same folder, fsync it, rename it over the target.

Why: a process killed mid-write, or a full disk, must never destroy the previous good output
(`batch -o`, `infer -o`, `diff --write-map`, `export`, `runs --plot`, Parquet files). Readers see
the old file or the whole new one, never a part. The temporary file is removed when the write
fails or is interrupted (Ctrl-C).

Every write here first asks `output_target` where it goes, so that no output lands where it
would lose something: a symbolic link is written through (its target is replaced, the link
stays); a FIFO, a device or a socket is refused (writing "onto" one would put a regular file in
its place); and, while a command runs under `protect_inputs`, a file that is one of the
command's inputs (the same file after links, by device and inode) is refused.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from gyre_contract.core._errors import InputError
from gyre_contract.io._filekind import special_kind

__all__ = ["atomic_path", "atomic_write", "output_target", "protect_inputs",
           "write_bytes_atomic", "write_text_atomic"]

_INPUTS: contextvars.ContextVar[tuple[tuple[int, int, str], ...]] = contextvars.ContextVar(
    "gyre_contract_inputs", default=())
"""(st_dev, st_ino, name) of each file the running command reads (`protect_inputs`)."""


@contextlib.contextmanager
def protect_inputs(paths: Iterable[str | os.PathLike[str]]) -> Iterator[None]:
    """While the block runs, `output_target` (so every write here) refuses to replace any
    regular file among `paths`, reached by any name (a link, a hard link, `./x`). Names that do
    not exist or are not regular files are ignored: nothing to lose there."""
    found = []
    for path in paths:
        try:
            info = os.stat(path)
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(info.st_mode):
            found.append((info.st_dev, info.st_ino, os.fspath(path)))
    token = _INPUTS.set(_INPUTS.get() + tuple(found))
    try:
        yield
    finally:
        _INPUTS.reset(token)


def output_target(path: str | os.PathLike[str]) -> str:
    """The file a write to `path` replaces: `path` itself, or the file a symbolic link points
    to (the link stays a link). InputError (exit 2 in the CLI) for a folder, a FIFO, a device
    or a socket, and for a file that is one of the running command's inputs."""
    name = os.fspath(path)
    try:
        info = os.stat(name)  # after links
    except FileNotFoundError:
        info = None  # a new file, or a link to one that does not exist yet
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot write {name}: {getattr(exc, 'strerror', None) or exc}") from None
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"cannot write {name}: is a directory")
        kind = special_kind(info.st_mode)
        if kind is not None:
            raise InputError(f"cannot write {name}: not a regular file ({kind}); outputs are "
                             f"written to regular files only")
        for dev, ino, source in _INPUTS.get():
            if (info.st_dev, info.st_ino) == (dev, ino):
                same = "" if os.path.abspath(source) == os.path.abspath(name) else \
                    f" (the same file as {source})"
                raise InputError(f"cannot write {name}: it is an input of this command"
                                 f"{same}, and writing would replace it; name another file")
    return os.path.realpath(name)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, fsync: bool = True) -> Iterator[str]:
    """Yield a fresh temporary path next to `path` (next to a link's target); on success it is
    fsynced and renamed over it (`output_target` says which file that is, or refuses).

    For writers that take a file name (numpy, pyarrow). On any exception the temporary file is
    removed, `path` is left as it was, and the exception propagates (an OSError as InputError).
    """
    named = os.fspath(path)
    target = output_target(named)  # through a link; never a FIFO, a device or an input
    folder = os.path.dirname(target)
    tmp = None
    try:  # one try from mkstemp on: an interrupt (Ctrl-C) at any point leaves no temporary file
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                                       dir=folder)
            os.close(fd)
            yield tmp
            if fsync:
                _fsync_file(tmp)
            os.chmod(tmp, 0o644 & ~_umask())
            os.replace(tmp, target)
            if fsync:
                _fsync_folder(folder)  # the rename itself survives a power cut
        except InputError:
            raise
        except OSError as exc:
            raise InputError(f"cannot write {named}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)  # only still there when the write failed


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], object], *,
                 fsync: bool = True) -> Path:
    """Call `write(f)` on a temporary file next to `path`, then rename it to `path`."""
    with atomic_path(path, fsync=fsync) as tmp, open(tmp, "wb") as f:
        write(f)
        f.flush()
    return Path(path)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, fsync: bool = True) -> Path:
    """Replace `path` with `data` atomically (the previous file stays whole on any failure)."""
    return atomic_write(path, lambda f: f.write(data), fsync=fsync)


def write_text_atomic(path: str | os.PathLike[str], text: str, *, fsync: bool = True) -> Path:
    """Replace `path` with `text` (UTF-8) atomically."""
    return write_bytes_atomic(path, text.encode("utf-8"), fsync=fsync)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folder(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # a folder that cannot be opened for reading: the file itself is on disk
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: this file system cannot sync a folder
            raise
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
