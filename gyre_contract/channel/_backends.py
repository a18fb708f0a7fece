"""Where a channel lives: a folder (`file://DIR` or a plain path) or a Ray actor (`ray://NS/NAME`).

A backend stores five things and nothing else: the manifest (one JSON object, replaced
atomically under a lock), the segments (immutable bytes, each visible whole or not at all), an
ack record per segment the trainer committed (idempotent: acking twice writes the same record),
a delivery mark per segment handed to a trainer, and each sampler's own running count (for
`channel status`). The ends
(`ends.SamplerEnd`, `ends.TrainerEnd`) hold the semantics: validation, leases, staleness,
backpressure; a backend only moves bytes and records.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gyre_contract.channel._segments import SegmentError, SegmentMeta

try:  # ISA-L's CRC-32 (extra `parquet`): zlib's very checksum at tens of GB/s, not 2
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - the same values, slower
    from zlib import crc32

SEGMENT_ID = re.compile(r"^[0-9]{20}-[A-Za-z0-9_.-]{1,80}-[0-9]{8}$")
"""`<time ns, 20 digits>-<writer>-<seq, 8 digits>`: names sort in the order they were put."""


@dataclass(frozen=True)
class SegmentRef:
    """A visible segment: its id, the CRC-32 of its bytes and their size, and where it is."""

    segment: str
    crc: int
    size: int
    key: Any
    """The backend's own handle: a file name, or a segment id."""
    deliveries: int = 0
    """How often it was handed to a trainer so far."""


def checksum(data: Any) -> int:
    """CRC-32 of a segment's bytes (zlib's; ISA-L's where installed, the same value about 20x
    faster): a segment read back must have the same."""
    return crc32(memoryview(data)) & 0xFFFFFFFF


def verify(ref: SegmentRef, data: Any, where: str) -> Any:
    """`data` when its size and CRC are the segment's, else SegmentError (a corrupt segment)."""
    size = memoryview(data).nbytes
    if size != ref.size and ref.size >= 0:
        raise SegmentError(f"{where}: {size} bytes, the segment was written with {ref.size}")
    crc = checksum(data)
    if crc != ref.crc:
        raise SegmentError(f"{where}: CRC-32 {crc:08x}, the segment was written with "
                           f"{ref.crc:08x} (corrupt)")
    return data


class Backend:
    """The storage of one channel (module doc). Subclasses implement every method."""

    uri: str

    def exists(self) -> bool:
        """Whether a channel (a manifest) is there."""
        raise NotImplementedError

    def create(self, make: Callable[[], dict[str, Any]]) -> None:
        """Make the channel when nothing is there yet (its manifest from `make()`); raise
        NotAChannelError when something else is there."""
        raise NotImplementedError

    def manifest(self) -> dict[str, Any]:
        """The manifest; NotAChannelError when there is no channel."""
        raise NotImplementedError

    def update(self, change: Callable[[dict[str, Any]], Any]) -> Any:
        """Apply `change` to the manifest and replace it atomically, under the channel's lock
        (nothing changes when `change` raises); `change`'s result."""
        raise NotImplementedError

    def write_segment(self, segment: str, data: Any, meta: SegmentMeta) -> SegmentRef:
        """Make a segment visible, whole (written, fsynced, renamed)."""
        raise NotImplementedError

    def pending(self) -> list[SegmentRef]:
        """Visible segments not acked yet, oldest first."""
        raise NotImplementedError

    def pending_count(self) -> int:
        return len(self.pending())

    def read(self, ref: SegmentRef) -> Any:
        """A segment's bytes, checked against its size and CRC (SegmentError otherwise)."""
        raise NotImplementedError

    def ack(self, refs: list[SegmentRef], records: list[dict[str, Any]], epoch: int) -> None:
        """Commit segments (the trainer end of `epoch`'s): their ack records are kept, their
        data may go."""
        raise NotImplementedError

    def acks(self) -> Iterator[dict[str, Any]]:
        """Every ack record, in no particular order."""
        raise NotImplementedError

    def mark_delivered(self, refs: list[SegmentRef], epoch: int, now: float
                       ) -> list[SegmentRef]:
        """Note that these segments were handed to the trainer of `epoch` (for `status`); the
        refs to use from now on (`deliveries` counts this time)."""
        raise NotImplementedError

    def delivered(self) -> dict[str, dict[str, Any]]:
        """Segment id -> its delivery mark (`count`: how often handed over) for the segments
        not acked yet."""
        raise NotImplementedError

    def note_writer(self, writer: str, ledger: dict[str, Any]) -> None:
        """Keep a sampler's own count (`seq`, `steps`, `episodes` put so far), replaced after
        each put: the only witness of a lost last segment."""
        raise NotImplementedError

    def writers(self) -> dict[str, dict[str, Any]]:
        """Writer -> its last ledger."""
        raise NotImplementedError

    def strays(self) -> list[str]:
        """What is in the channel but is not a segment, an ack or a mark (reported, never
        delivered), and unfinished puts."""
        raise NotImplementedError

    def close(self) -> None:
        """Let go of anything held open."""

