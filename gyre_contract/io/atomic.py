"""Atomic output files: write a temporary file in the same folder, fsync it, rename it over the target.

Why: a process killed mid-write, or a full disk, must never destroy the previous good output
(`batch -o`, `infer -o`, `diff --write-map`, `export`, Parquet files). Readers see the old file
or the whole new one, never a part. The temporary file is removed when the write fails.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from gyre_contract.core.errors import InputError

__all__ = ["atomic_path", "atomic_write", "write_bytes_atomic", "write_text_atomic"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, fsync: bool = True) -> Iterator[str]:
    """Yield a fresh temporary path next to `path`; on success it is fsynced and renamed to `path`.

    For writers that take a file name (numpy, pyarrow). On any exception the temporary file is
    removed, `path` is left as it was, and the exception propagates (an OSError as InputError).
    """
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                                   dir=folder)
    except OSError as exc:
        raise InputError(f"cannot write {target}: {exc.strerror or exc}") from None
    os.close(fd)
    try:
        try:
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
            raise InputError(f"cannot write {target}: {exc.strerror or exc}") from None
    finally:
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
