"""`channel_status(uri)`: both ends' fingerprints and counts, and whether they agree.

The sampler's side is what each segment says about its writer (segments are numbered 1, 2, 3,
... per writer, and each carries the steps its writer had put so far) and each writer's own
count, kept after each put (the only witness of a lost last segment; one that lags by a put,
a sampler killed between its segment and its count, is not a disagreement); the trainer's side is its
ack records (steps kept, steps dropped as stale, the staleness of the kept ones) and delivery
marks. The counts disagree (exit 1) when a writer's segment is missing (a gap in its numbers,
or a segment that cannot be read), when a writer's running total differs from the steps of its
segments, or when an ack's kept + dropped steps differ from its segment's steps — so that
acked + dropped + pending = put holds exactly when the counts agree. Files that are not part of
the channel, and puts a killed sampler left unfinished, are listed, never counted.

Every pending segment is read whole and its CRC checked, so a corrupt one is a disagreement, not a
pending count. A segment that has an ack record is acked, not pending, even while its file is
still there (the trainer end removes it after the ack, on a thread of its own, or stopped in
between). The segments are listed before the acks are read, so that one acked and removed in
between is found among the acks. Memory: ack records and segments are read one at a time and
added up (an id per segment kept).
"""

from __future__ import annotations

import datetime
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gyre_contract.channel._locate import open_backend
from gyre_contract.channel._segments import SegmentError, SegmentGone, SegmentMeta, read_meta
from gyre_contract.core._report import Report

MAX_LISTED = 20
"""Problems and strays listed at most (the count says how many more)."""


@dataclass
class _Writer:
    segments: int = 0
    steps: int = 0
    seqs: set[int] = field(default_factory=set)
    last_seq: int = 0
    claimed_steps: int = 0


@dataclass
class ChannelStatus(Report):
    """What `gyre-contract channel status` prints (module doc)."""

    uri: str
    sampler: dict[str, Any] | None
    trainer: dict[str, Any] | None
    accepted: list[str]
    put: dict[str, int]
    delivered: dict[str, int]
    acked: dict[str, int]
    pending: dict[str, int]
    dropped: dict[str, int]
    staleness: dict[int, int]
    times: dict[str, float | None]
    writers: int
    problems: list[str]
    strays: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def warnings(self) -> list[Any]:
        return list(self.strays)

    def to_dict(self) -> dict[str, Any]:
        return {"channel": self.uri, "ok": self.ok, "sampler": self.sampler,
                "trainer": self.trainer, "accepted_fingerprints": self.accepted,
                "put": self.put, "delivered": self.delivered, "acked": self.acked,
                "pending": self.pending, "dropped_stale": self.dropped,
                "staleness": {str(k): v for k, v in sorted(self.staleness.items())},
                "times": self.times, "writers": self.writers,
                "problems": self.problems[:MAX_LISTED], "problem_count": len(self.problems),
                "strays": self.strays[:MAX_LISTED], "stray_count": len(self.strays)}

    def to_text(self) -> str:
        s, t = self.sampler or {}, self.trainer or {}
        lines = [f"channel {self.uri}",
                 f"  sampler fingerprint {s.get('fingerprint', '-')} ({s.get('model', 'no sampler yet')})",
                 f"  trainer fingerprint {t.get('fingerprint', '-')}"
                 + (f" (epoch {t.get('epoch')}, version {t.get('version')})" if t else
                    " (no trainer yet)")]
        if len(self.accepted) > 1:
            lines.append(f"  sampler fingerprints accepted: {len(self.accepted)}")
        rows = [("", "segments", "steps", "episodes"),
                ("put", self.put["segments"], self.put["steps"], self.put["episodes"]),
                ("delivered", self.delivered["segments"], self.delivered["steps"], "-"),
                ("acked", self.acked["segments"], self.acked["steps"], self.acked["episodes"]),
                ("pending", self.pending["segments"], self.pending["steps"], "-"),
                ("dropped as stale", self.dropped["segments"], self.dropped["steps"],
                 self.dropped["episodes"])]
        widths = [max(len(str(r[i])) for r in rows) for i in range(4)]
        lines += ["  " + "  ".join(str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i])
                                   for i, c in enumerate(r)) for r in rows]
        lines.append(f"  redelivered segments: {self.delivered['redelivered']}, writers: "
                     f"{self.writers}, in flight (delivered, not acked): "
                     f"{self.pending['in_flight']}")
        hist = ", ".join(f"{k}: {v}" for k, v in sorted(self.staleness.items())) or "-"
        lines.append(f"  staleness of the steps trained on (versions behind: steps): {hist}")
        lines.append("  " + ", ".join(f"{k.replace('_', ' ')} {_when(v)}"
                                      for k, v in self.times.items()))
        lines += [f"  stray: {x}" for x in self.strays[:MAX_LISTED]]
        if self.problems:
            lines += [f"  DISAGREE: {p}" for p in self.problems[:MAX_LISTED]]
            more = len(self.problems) - MAX_LISTED
            lines += [f"  ... and {more} more"] if more > 0 else []
        else:
            lines.append("  counts agree: every writer's segments are here, acked + dropped + "
                         "pending = put")
        return "\n".join(lines)


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def channel_status(uri: str | os.PathLike[str]) -> ChannelStatus:
    """Add up the channel at `uri` (NotAChannelError when it is not one)."""
    backend = open_backend(uri)
    try:
        manifest = backend.manifest()
        return _status(backend, manifest)
    finally:
        backend.close()


def _status(backend: Any, manifest: dict[str, Any]) -> ChannelStatus:
    writers: dict[str, _Writer] = {}
    problems: list[str] = []
    strays = backend.strays()
    put = Counter(segments=0, steps=0, episodes=0)
    acked = Counter(segments=0, steps=0, episodes=0)
    dropped = Counter(segments=0, steps=0, episodes=0)
    pending = Counter(segments=0, steps=0, in_flight=0)
    delivered = Counter(segments=0, steps=0, redelivered=0)
    staleness: Counter[int] = Counter()
    times: dict[str, float | None] = dict.fromkeys(("first_put", "last_put", "first_ack",
                                                    "last_ack"))
    listed = backend.pending()  # before the acks: a segment acked and gone meanwhile has its
    marks = backend.delivered()  # ack record there by the time the acks are read
    acked_ids: set[str] = set()

    def count(meta: SegmentMeta) -> None:
        w = writers.setdefault(meta.writer, _Writer())
        if meta.seq in w.seqs:
            problems.append(f"writer {meta.writer}: segment {meta.seq} twice")
        w.seqs.add(meta.seq)
        w.segments += 1
        w.steps += meta.steps
        if meta.seq > w.last_seq:
            w.last_seq, w.claimed_steps = meta.seq, meta.writer_steps
        put.update(segments=1, steps=meta.steps, episodes=meta.episodes)
        _span(times, "first_put", "last_put", meta.started, meta.written)

    def count_ack(record: dict[str, Any]) -> None:
        acked_ids.add(str(record.get("segment")))
        try:
            meta = SegmentMeta.from_json(record.get("meta"), f"ack {record.get('segment')}")
        except SegmentError as err:
            problems.append(str(err))
            return
        count(meta)
        kept, lost = int(record.get("kept_steps", -1)), int(record.get("dropped_steps", -1))
        if kept + lost != meta.steps or kept < 0 or lost < 0:
            problems.append(f"segment {meta.segment}: acked {kept} steps kept + {lost} dropped, "
                            f"but it holds {meta.steps}")
        acked.update(steps=kept)
        if kept:
            acked.update(segments=1, episodes=meta.episodes - int(record.get("dropped_episodes", 0)))
            delivered.update(segments=1, steps=meta.steps)
            delivered.update(redelivered=int(int(record.get("deliveries", 1)) > 1))
        else:
            dropped.update(segments=1)
        dropped.update(steps=lost, episodes=int(record.get("dropped_episodes", 0)))
        staleness.update({int(k): int(v) for k, v in (record.get("staleness") or {}).items()})
        _span(times, "first_ack", "last_ack", record.get("acked_at"), record.get("acked_at"))

    def count_pending(ref: Any) -> bool:
        """Count a listed segment not acked; False when its file went since the listing."""
        try:  # the whole segment, its CRC checked: a corrupt one is never counted as pending
            meta = read_meta(backend.read(ref), f"segment {ref.segment}")
        except SegmentGone:
            return False
        except SegmentError as err:
            problems.append(f"unreadable segment, never delivered: {err}")
            return True
        count(meta)
        pending.update(segments=1, steps=meta.steps)
        mark = marks.get(ref.segment)
        if mark is not None:
            pending.update(in_flight=1)
            delivered.update(segments=1, steps=meta.steps,
                             redelivered=int(int(mark.get("count", 1)) > 1))
        return True

    for record in backend.acks():
        count_ack(record)
    gone = {ref.segment for ref in listed
            if ref.segment not in acked_ids and not count_pending(ref)}
    if gone:  # acked since the listing (its ack record is there now), or renamed (delivered)
        for record in backend.acks():
            segment = record.get("segment")
            if segment in gone and segment not in acked_ids:
                count_ack(record)
        for ref in backend.pending():
            if ref.segment in gone and ref.segment not in acked_ids:
                count_pending(ref)
    for name, ledger in backend.writers().items():
        w = writers.setdefault(name, _Writer())
        said = int(ledger.get("seq", 0))
        if said > w.last_seq:  # the sampler put more than the channel holds
            w.last_seq, w.claimed_steps = said, int(ledger.get("steps", 0))
    for name, w in sorted(writers.items()):
        missing = sorted(set(range(1, w.last_seq + 1)) - w.seqs)
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (" …" if len(missing) > 10 else "")
            problems.append(f"writer {name}: put {w.last_seq} segments, {len(missing)} missing "
                            f"here (seq {shown})")
        elif w.claimed_steps and w.claimed_steps != w.steps:
            problems.append(f"writer {name}: says it put {w.claimed_steps} steps, its segments "
                            f"hold {w.steps}")
    trainer = manifest.get("trainer")
    return ChannelStatus(
        uri=backend.uri,
        sampler=None if manifest.get("sampler") is None else {
            k: manifest["sampler"][k] for k in ("fingerprint", "model", "opened")},
        trainer=None if trainer is None else {
            k: trainer.get(k) for k in ("fingerprint", "epoch", "version", "version_at",
                                        "opened", "batch_dims")},
        accepted=[e["fingerprint"] for e in manifest.get("accepted", [])],
        put=dict(put), delivered=dict(delivered), acked=dict(acked), pending=dict(pending),
        dropped=dict(dropped), staleness=dict(sorted(staleness.items())), times=times,
        writers=len(writers), problems=problems, strays=strays)


def _span(times: dict[str, float | None], first: str, last: str, start: Any, end: Any) -> None:
    if isinstance(start, (int, float)):
        times[first] = start if times[first] is None else min(times[first], start)  # type: ignore[type-var]
    if isinstance(end, (int, float)):
        times[last] = end if times[last] is None else max(times[last], end)  # type: ignore[type-var]
