"""A channel in a folder (`file://DIR` or a plain path): embedded, nothing to start.

    DIR/channel.json              the manifest (replaced atomically, under DIR/.channel.lock)
    DIR/segments/<id>.<crc>.arrow each put: written to a hidden temporary name, fsynced,
                                  renamed, the folder fsynced; <crc> is the CRC-32 of its bytes;
                                  renamed <id>.<crc>.d<k>.arrow when handed to a trainer the
                                  k-th time (one rename: the delivery mark of `channel status`)
    DIR/acks/trainer-<epoch>.jsonl each trainer end's commits, one JSON line per segment
                                  (the segment's file then goes)
    DIR/writers/<writer>.jsonl    each sampler's own count, one line appended per put

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gyre_contract.channel import _contract as contract
from gyre_contract.channel._backends import SEGMENT_ID, Backend, SegmentRef, checksum, verify
from gyre_contract.channel._handshake import NotAChannelError, checked_manifest
from gyre_contract.channel._segments import SegmentError, SegmentGone, SegmentMeta

MANIFEST = "channel.json"
MAX_MANIFEST_BYTES = 64 * 2**20
"""A larger `channel.json` is refused unread (it holds a few schemas and a map)."""
MAX_SEGMENT_BYTES = 16 * 2**30
"""A larger file in `segments/` is refused unread: reported and skipped, never delivered."""
MAX_LOG_LINE_BYTES = 16 * 2**20
"""A longer line in an ack log or a ledger is skipped (one record is a few hundred bytes)."""
LOCK = ".channel.lock"
FOLDERS = ("segments", "acks", "writers")
_NAME = re.compile(r"^(?P<segment>.+)\.(?P<crc>[0-9a-f]{8})(?:\.d(?P<count>[1-9][0-9]*))?\.arrow$")


class FileBackend(Backend):
    """The folder layout above; see `backends.Backend` for what each method promises."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.root = Path(path)
        self.uri = os.fspath(path)
        self.segments = self.root / "segments"

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
        path = self._manifest_path()
        if not self.root.is_dir():
            raise NotAChannelError(f"not a channel: {self.root} (no such folder)")
        try:
            data = json.loads(_read_regular(path, MAX_MANIFEST_BYTES))
        except FileNotFoundError:
            raise NotAChannelError(f"not a channel: {self.root} (no {MANIFEST})") from None
        except (OSError, ValueError) as err:
            raise NotAChannelError(f"not a channel: {path} is unreadable ({err})") from None
        return checked_manifest(data, str(path))

    def update(self, change: Callable[[dict[str, Any]], Any]) -> Any:
        with self._locked():
            manifest = self.manifest()
            result = change(manifest)
            self._write_manifest(manifest)
            return result

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
        contract.write_atomic(self.segments / name, data)
        return SegmentRef(segment, crc, memoryview(data).nbytes, name)

    def pending(self) -> list[SegmentRef]:
        refs = []
        for entry in self._entries(self.segments):
            found = _parse(entry.name)
            if found is not None:
                segment, crc, deliveries = found
                refs.append(SegmentRef(segment, crc, -1, entry.name, deliveries))
        refs.sort(key=lambda r: r.segment)
        return refs

    def pending_count(self) -> int:
        return sum(1 for e in self._entries(self.segments) if _parse(e.name) is not None)

    def read(self, ref: SegmentRef) -> Any:
        path = self.segments / ref.key
        try:
            data = _read_regular(path, MAX_SEGMENT_BYTES)
        except FileNotFoundError:
            raise SegmentGone(f"{path}: acked meanwhile") from None
        except OSError as err:
            raise SegmentError(f"{path}: cannot read it ({err.strerror or err})") from None
        return verify(ref, data, str(path))

    def mark_delivered(self, refs: list[SegmentRef], epoch: int, now: float
                       ) -> list[SegmentRef]:
        """One rename per segment: its name counts its deliveries (`<id>.<crc>.d<k>.arrow`)."""
        out = []
        for ref in refs:
            count = ref.deliveries + 1
            name = f"{ref.segment}.{ref.crc:08x}.d{count}.arrow"
            try:
                os.replace(self.segments / ref.key, self.segments / name)
            except FileNotFoundError:
                raise SegmentGone(f"{self.segments / ref.key}: acked meanwhile") from None
            out.append(dataclasses.replace(ref, key=name, deliveries=count))
        return out

    def delivered(self) -> dict[str, dict[str, Any]]:
        return {r.segment: {"count": r.deliveries} for r in self.pending() if r.deliveries}

    def ack(self, refs: list[SegmentRef], records: list[dict[str, Any]], epoch: int) -> None:
        """One append to this trainer's ack log (`acks/trainer-<epoch>.jsonl`) for all the
        segments, then their files go. Not fsynced: a power cut may lose the last acks, and
        those segments are delivered again (at least once)."""
        lines = b"".join(json.dumps(r, allow_nan=False).encode("utf-8") + b"\n"
                         for r in records)
        _append(self.root / "acks" / f"trainer-{epoch}.jsonl", lines)
        for ref in refs:
            with contextlib.suppress(FileNotFoundError):
                (self.segments / ref.key).unlink()

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
        _append(self.root / "writers" / f"{writer}.jsonl", json.dumps(ledger).encode() + b"\n")

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


def _read_regular(path: Path, limit: int) -> bytes:
    """A regular file's bytes, at most `limit` of them (OSError otherwise): a FIFO, a device or
    a huge file placed in the channel is refused unread, never a hang or unbounded memory."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if info.st_size > limit:
            raise OSError(errno.EFBIG, f"{info.st_size} bytes, more than {limit}")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"more than {limit} bytes")
    return data


def _append(path: Path, data: bytes) -> None:
    """Append whole lines in one write (O_APPEND): a reader sees whole lines or a torn last
    one, which it skips."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
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


def _read_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None
