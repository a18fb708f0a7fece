"""A channel in a folder (`file://DIR` or a plain path): embedded, nothing to start.

    DIR/channel.json              the manifest (replaced atomically, under DIR/.channel.lock)
    DIR/segments/<id>.<crc>.arrow each put: written to a hidden temporary name, fsynced,
                                  renamed, the folder fsynced; <crc> is the CRC-32 of its bytes;
                                  renamed <id>.<crc>.d<k>.arrow when handed to a trainer the
                                  k-th time (one rename: the delivery mark of `channel status`)
    DIR/acks/trainer-<epoch>.jsonl each trainer end's commits, one JSON line per segment
                                  (the segment's file then goes, removed by the end's
                                  background thread)
    DIR/writers/<writer>.jsonl    each sampler's own count, one line appended per put

Per segment the file operations are those of an Arrow IPC file written by hand, and few more:
the sampler writes it (a hidden temporary name, write, fsync, rename, the folder fsynced, one
descriptor of the folder held open) and appends one line to its count; the trainer lists the
folder (names it parsed before are not parsed again), reads the file into one aligned buffer,
renames it once (the delivery mark), appends one line to its ack log (the commit) and hands
the file's removal to a thread of its own (`channel._removal`: the `unlink` overlaps the next
`get`; until the file is gone that end never lists the segment as pending; `close` waits for
the removals and raises the first that failed). The logs are appended through descriptors
held open. The manifest is read again only when it was replaced: each end holds the manifest
file it last read open, so that its inode cannot be reused, and compares it with what the name
opens now (one `open` and `fstat`).

Works across hosts on a shared file system within reason: renames are atomic on POSIX file
systems and on NFS; the manifest lock is `fcntl.flock`, which NFS (v4) and most cluster file
systems honour. A folder is a channel when it holds `channel.json`. Opening an end on a path that
does not exist, or on an empty folder (dot-files aside), makes it one; any other folder, or a
file, is not a channel (`NotAChannelError`, exit 2 with the path).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import re
import stat
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from gyre_contract.channel import _contract as contract
from gyre_contract.channel._backends import SEGMENT_ID, Backend, SegmentRef, checksum, verify
from gyre_contract.channel._handshake import NotAChannelError, checked_manifest
from gyre_contract.channel._removal import Removals
from gyre_contract.channel._segments import SegmentError, SegmentGone, SegmentMeta, allocate
from gyre_contract.core._errors import InputError

MANIFEST = "channel.json"
MAX_MANIFEST_BYTES = 64 * 2**20
"""A larger `channel.json` is refused unread (it holds a few schemas and a map)."""
MAX_SEGMENT_BYTES = 16 * 2**30
"""A larger file in `segments/` is refused unread: reported and skipped, never delivered."""
MAX_LOG_LINE_BYTES = 16 * 2**20
"""A longer line in an ack log or a ledger is skipped (one record is a few hundred bytes)."""
LOCK = ".channel.lock"
FOLDERS = ("segments", "acks", "writers")
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | \
    getattr(os, "O_CLOEXEC", 0)
_NAME = re.compile(r"^(?P<segment>.+)\.(?P<crc>[0-9a-f]{8})(?:\.d(?P<count>[1-9][0-9]*))?\.arrow$")


class FileBackend(Backend):
    """The folder layout above; see `backends.Backend` for what each method promises."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.root = Path(path)
        self.uri = os.fspath(path)
        self.segments = self.root / "segments"
        self._segments_dir = os.path.join(self.uri, "segments", "")
        """`segments` as a string ending in a separator: a segment's path is one concatenation
        (a `Path` join parses its parts again, several per segment)."""
        self._acks_dir = os.path.join(self.uri, "acks", "")
        self._writers_dir = os.path.join(self.uri, "writers", "")
        self._manifest_file = os.path.join(self.uri, MANIFEST)
        self._fds: dict[str, int] = {}
        """Descriptors held open: the segments folder (its fsync), the logs this end appends
        to, the manifest last read (`manifest`); closed by `close` or when the end goes."""
        weakref.finalize(self, _close_all, self._fds)
        self._manifest: tuple[tuple[int, ...], dict[str, Any]] | None = None
        """(the identity of the manifest file held open, what it holds)."""
        self._names: dict[str, SegmentRef | None] = {}
        """The segment folder's names at the last listing, parsed (None: not a segment)."""
        self._removals = Removals()
        """The acked segments' files, removed on a thread of this end (`channel._removal`)."""

    def _manifest_path(self) -> Path:
        return self.root / MANIFEST

    def exists(self) -> bool:
        return self._manifest_path().is_file()

    def create(self, make: Callable[[], dict[str, Any]]) -> None:
        if self.exists():
            return
        if self.root.exists() and not self.root.is_dir():
            raise NotAChannelError(f"not a channel: {self.root} is a file")
        if os.path.lexists(self._manifest_path()):
            raise NotAChannelError(f"not a channel: {self._manifest_path()} is not a regular "
                                   "file")
        if self.root.is_dir():
            others = sorted(n for n in os.listdir(self.root)
                            if not n.startswith(".") and n not in FOLDERS)
            if others:
                shown = ", ".join(others[:3]) + (", …" if len(others) > 3 else "")
                raise NotAChannelError(f"not a channel: {self.root} holds other files ({shown}) "
                                       f"and no {MANIFEST}")
        try:
            for folder in FOLDERS:
                (self.root / folder).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise NotAChannelError(f"cannot make a channel at {self.root}: "
                                   f"{err.strerror or err}") from None
        with self._locked():
            if not self.exists():
                self._write_manifest(make())

    def manifest(self) -> dict[str, Any]:
        """The manifest, read again only when the file was replaced (or changed in place) since
        this end last read it; the result is shared: callers never change it. The file read
        last is held open (its inode number cannot be taken by a new file), so one `lstat` of
        the path that finds its identity unchanged is that file: no open per look."""
        if self._manifest is not None:
            with contextlib.suppress(OSError):  # gone or unreadable: the open below says so
                info = os.lstat(self._manifest_file)
                ident = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns,
                         info.st_ctime_ns)
                if self._manifest[0] == ident and "manifest" in self._fds:
                    return self._manifest[1]
        fd = self._open_manifest()
        try:
            info = os.fstat(fd)
            ident = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            if self._manifest is not None and self._manifest[0] == ident:
                os.close(fd)
                return self._manifest[1]
            manifest = self._parse_manifest(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        self._hold("manifest", fd)  # its inode stays ours: no new file can take its number
        self._manifest = (ident, manifest)
        return manifest

    def update(self, change: Callable[[dict[str, Any]], Any]) -> Any:
        with self._locked():
            fd = self._open_manifest()
            try:
                manifest = self._parse_manifest(fd)
            finally:
                os.close(fd)
            result = change(manifest)
            self._write_manifest(manifest)
            return result

    def _open_manifest(self) -> int:
        path = self._manifest_path()
        try:
            return os.open(path, _OPEN_FLAGS)
        except OSError as err:
            if not self.root.is_dir():
                raise NotAChannelError(f"not a channel: {self.root} (no such folder)") from None
            if isinstance(err, FileNotFoundError):
                raise NotAChannelError(f"not a channel: {self.root} (no {MANIFEST})") from None
            raise NotAChannelError(f"not a channel: {path} is unreadable ({err})") from None

    def _parse_manifest(self, fd: int) -> dict[str, Any]:
        path = self._manifest_path()
        try:
            data = json.loads(_read_fd(fd, MAX_MANIFEST_BYTES))
        except (OSError, ValueError) as err:
            raise NotAChannelError(f"not a channel: {path} is unreadable ({err})") from None
        return checked_manifest(data, str(path))

    def _hold(self, key: str, fd: int) -> None:
        old = self._fds.pop(key, None)
        self._fds[key] = fd
        if old is not None:
            os.close(old)

    def close(self) -> None:
        """Wait for the acked segments' removals, let go of what is held open, then raise the
        first removal that failed (OSError; a file already gone is no failure)."""
        try:
            self._removals.close()
        finally:
            self._manifest = None
            _close_all(self._fds)
        self._removals.raise_error()

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        text = json.dumps(manifest, indent=1, ensure_ascii=False, allow_nan=False)
        contract.write_atomic(self._manifest_path(), text.encode("utf-8"))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The channel's lock (`flock` on a file of its own), held for one manifest update."""
        try:
            fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise NotAChannelError(f"cannot lock the channel {self.root}: "
                                   f"{err.strerror or err}") from None
        try:
            with contextlib.suppress(OSError):  # a file system without flock: atomic renames only
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    # -- segments ------------------------------------------------------------------------------

    def write_segment(self, segment: str, data: Any, meta: SegmentMeta) -> SegmentRef:
        crc = checksum(data)
        name = f"{segment}.{crc:08x}.arrow"
        path = self._segments_dir + name
        try:
            folder = self._folder()
        except OSError as err:
            raise InputError(f"cannot write {path}: {err.strerror or err}") from None
        write_file(path, data, folder)
        return SegmentRef(segment, crc, memoryview(data).nbytes, name)

    def _folder(self) -> int:
        """The segments folder, held open for its fsync after each rename."""
        fd = self._fds.get("segments")
        if fd is None:
            fd = self._fds["segments"] = os.open(self.segments, os.O_RDONLY | getattr(
                os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        return fd

    def pending(self) -> list[SegmentRef]:
        """One listing of the folder; a name seen at the last listing is not parsed again; a
        segment this end acked is left out while its file is still there."""
        self._removals.reap()  # first: a removal seen done here is a file the listing lacks
        known, names, removing = self._names, {}, self._removals.acked
        refs = []
        for entry in self._entries(self.segments):
            name = entry.name
            ref = known[name] if name in known else _ref(name)
            names[name] = ref
            if ref is not None and (not removing or ref.segment not in removing):
                refs.append(ref)
        self._names = names  # the names of this listing only: flat in the segments gone
        refs.sort(key=_segment_id)
        return refs

    def pending_count(self) -> int:
        return len(self.pending())

    def read(self, ref: SegmentRef) -> Any:
        """The file's bytes in one Arrow buffer (aligned: its columns are read in place)."""
        path = self._segments_dir + ref.key
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            raise SegmentGone(f"{path}: acked meanwhile") from None
        except OSError as err:
            raise SegmentError(f"{path}: cannot read it ({err.strerror or err})") from None
        try:
            data = _read_fd(fd, MAX_SEGMENT_BYTES, aligned=True)
        except OSError as err:
            raise SegmentError(f"{path}: cannot read it ({err.strerror or err})") from None
        finally:
            os.close(fd)
        return verify(ref, data, path)

    def mark_delivered(self, refs: list[SegmentRef], epoch: int, now: float
                       ) -> list[SegmentRef]:
        """One rename per segment: its name counts its deliveries (`<id>.<crc>.d<k>.arrow`)."""
        out = []
        for ref in refs:
            count = ref.deliveries + 1
            name = f"{ref.segment}.{ref.crc:08x}.d{count}.arrow"
            try:
                os.replace(self._segments_dir + ref.key, self._segments_dir + name)
            except FileNotFoundError:
                raise SegmentGone(f"{self._segments_dir}{ref.key}: acked meanwhile") from None
            out.append(dataclasses.replace(ref, key=name, deliveries=count))
        return out

    def delivered(self) -> dict[str, dict[str, Any]]:
        return {r.segment: {"count": r.deliveries} for r in self.pending() if r.deliveries}

    def ack(self, refs: list[SegmentRef], records: list[dict[str, Any]], epoch: int) -> None:
        """One append to this trainer's ack log (`acks/trainer-<epoch>.jsonl`) for all the
        segments (the commit), then their files go on the background thread (module doc).
        Not fsynced: a power cut may lose the last acks, and those segments are delivered
        again (at least once). Raises the first earlier removal that failed (OSError), once,
        after this commit."""
        lines = b"".join(orjson.dumps(r) + b"\n" for r in records)
        self._append(self._acks_dir, f"trainer-{epoch}.jsonl", lines)
        self._removals.reap()
        if refs:
            self._removals.submit(tuple(ref.segment for ref in refs),
                                  [self._segments_dir + ref.key for ref in refs])
        self._removals.raise_error()

    def _append(self, folder: str, name: str, data: bytes) -> None:
        """Append whole lines in one write to `folder` (ending in a separator) + `name`
        (O_APPEND: a reader sees whole lines or a torn last one, which it skips) through a
        descriptor held open."""
        key = folder + name
        fd = self._fds.get(key)
        if fd is None:
            fd = self._fds[key] = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_APPEND |
                                          getattr(os, "O_CLOEXEC", 0), 0o644)
        _write_all(fd, data)

    def acks(self) -> Iterator[dict[str, Any]]:
        """Every ack record once (a segment acked twice, by a trainer that stopped between its
        ack and the segment's removal and the next one: its first record)."""
        seen: set[str] = set()
        for entry in self._entries(self.root / "acks"):
            if entry.name.endswith(".jsonl"):
                for record in _json_lines(entry.path):
                    segment = record.get("segment")
                    if isinstance(segment, str) and segment not in seen:
                        seen.add(segment)
                        yield record

    def note_writer(self, writer: str, ledger: dict[str, Any]) -> None:
        self._append(self._writers_dir, f"{writer}.jsonl", orjson.dumps(ledger) + b"\n")

    def writers(self) -> dict[str, dict[str, Any]]:
        out = {}
        for entry in self._entries(self.root / "writers"):
            if entry.name.endswith(".jsonl"):
                last = _last_line(entry.path)
                if last is not None:
                    out[entry.name[:-6]] = last
        return out

    def strays(self) -> list[str]:
        found = []
        unfinished = 0
        for entry in self._entries(self.segments, hidden=True):
            if entry.name.startswith("."):
                unfinished += entry.name.endswith(".tmp")
            elif _parse(entry.name) is None:
                found.append(f"{entry.path}: not a segment (foreign file, never delivered)")
        for entry in self._entries(self.root):
            if entry.name not in (*FOLDERS, MANIFEST):
                found.append(f"{entry.path}: not part of a channel")
        if unfinished:
            found.append(f"{self.segments}: {unfinished} unfinished put(s) (hidden temporary "
                         f"files of a sampler killed or out of disk while writing; never "
                         f"delivered, safe to delete)")
        return found

    @staticmethod
    def _entries(folder: Path, hidden: bool = False) -> Iterator[os.DirEntry[str]]:
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    if hidden or not entry.name.startswith("."):
                        yield entry
        except FileNotFoundError:
            return


def _parse(name: str) -> tuple[str, int, int] | None:
    """(segment id, CRC-32, deliveries so far) of a segment's file name, else None."""
    match = _NAME.match(name)
    if match is None or not SEGMENT_ID.match(match["segment"]):
        return None
    return match["segment"], int(match["crc"], 16), int(match["count"] or 0)


def _ref(name: str) -> SegmentRef | None:
    found = _parse(name)
    if found is None:
        return None
    segment, crc, deliveries = found
    return SegmentRef(segment, crc, -1, name, deliveries)


def _segment_id(ref: SegmentRef) -> str:
    return ref.segment


def write_file(path: str, data: Any, folder: int) -> None:
    """Make `path` appear whole: `data` written to a hidden temporary name in the same folder,
    fsynced, renamed, the folder (`folder`, a descriptor) fsynced. A failed write (a full
    disk) leaves no file and raises InputError naming `path`."""
    head, tail = os.path.split(path)
    name = os.path.join(head, f".{tail}.{os.urandom(4).hex()}.tmp")
    tmp: str | None = name
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o644)
    except OSError as err:
        raise InputError(f"cannot write {path}: {err.strerror or err}") from None
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(name, path)
        tmp = None
        try:
            os.fsync(folder)  # the rename itself survives a power cut
        except OSError as err:
            if err.errno != errno.EINVAL:  # EINVAL: this file system cannot sync a folder
                raise
    except OSError as err:
        raise InputError(f"cannot write {path}: {err.strerror or err}") from None
    finally:
        if tmp is not None:  # only when the write failed (or was interrupted)
            with contextlib.suppress(OSError):
                os.remove(tmp)


def _write_all(fd: int, data: Any) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view):]


def _read_fd(fd: int, limit: int, aligned: bool = False) -> Any:
    """A regular file's bytes (an open descriptor), at most `limit` of them (OSError
    otherwise): a FIFO, a device or a huge file placed in the channel is refused unread, never
    a hang or unbounded memory. `aligned`: in a `pyarrow.Buffer` (64-byte aligned, what Arrow
    reads columns from in place), else bytes."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EINVAL, "not a regular file")
    size = info.st_size
    if size > limit:
        raise OSError(errno.EFBIG, f"{size} bytes, more than {limit}")
    buffer = allocate(size) if aligned else bytearray(size)
    view, done = memoryview(buffer), 0
    while done < size:
        got = os.readv(fd, [view[done:]])
        if not got:
            raise OSError(errno.EIO, f"{done} bytes where it had {size} (cut short meanwhile)")
        done += got
    if os.read(fd, 1):
        raise OSError(errno.EFBIG, f"more than {size} bytes (written to meanwhile)")
    return buffer if aligned else bytes(buffer)


def _close_all(fds: dict[str, int]) -> None:
    while fds:
        _, fd = fds.popitem()
        with contextlib.suppress(OSError):
            os.close(fd)


def _json_lines(path: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a log, one a line; a torn or overlong line is skipped; a file that
    is not a regular one is not opened."""
    try:
        if not stat.S_ISREG(os.stat(path, follow_symlinks=False).st_mode):
            return
        with open(path, "rb") as f:
            while line := f.readline(MAX_LOG_LINE_BYTES + 1):
                if len(line) > MAX_LOG_LINE_BYTES:
                    while line and not line.endswith(b"\n"):  # skip the rest of it
                        line = f.readline(MAX_LOG_LINE_BYTES)
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a torn last line (a trainer cut off mid-write)
                if isinstance(record, dict):
                    yield record
    except OSError:
        return


def _last_line(path: str) -> dict[str, Any] | None:
    """The last whole JSON line of a writer's ledger (its latest count)."""
    try:
        if not stat.S_ISREG(os.stat(path, follow_symlinks=False).st_mode):
            return None
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            tail = f.read()
    except OSError:
        return None
    for line in reversed(tail.split(b"\n")):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            return record
    return None
