"""The two ends of a channel: the sampler's (`put`) and the trainer's (`get`, `ack`).

Delivery semantics (docs/channel.md):
- `put` validates a block of steps (the bulk path, every record and episode rule) and writes
  it as one segment, atomically; with `max_pending`, it first waits while that many segments
  are not acked (`TimeoutError` after `timeout`).
- `get` takes whole segments, oldest first, until `rows` steps (one token row per step for a
  map of token rows) are kept, maps them into the trainer's own batch and leases them to this
  end (a second `get` skips them). `ack` commits them; a segment not acked is delivered again
  to the next trainer end (a restart): at least once, and the segment id makes a repeat
  recognisable. Rows older than `current_version - max_staleness` are dropped by episode (an
  episode's steps are never split; a segment with nothing else is committed as dropped at
  once) and counted, or refused (`on_stale="error"`). `TimeoutError` when nothing deliverable
  arrived within `timeout`.
- A file that is not a segment, a segment whose bytes do not match its checksum, and a segment
  whose fingerprint the channel never accepted are reported (`ChannelWarning`, and in
  `channel status`) and skipped, never delivered.
"""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import time
import uuid
import warnings
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gyre_contract.channel import _contract as contract
from gyre_contract.channel import _segments as segments
from gyre_contract.channel._backends import Backend, SegmentRef
from gyre_contract.channel._handshake import (
    accepted_fingerprints,
    join_sampler,
    join_trainer,
    new_manifest,
    sampler_documents,
    trainer_documents,
)
from gyre_contract.channel._locate import open_backend
from gyre_contract.core._errors import ContractError, Problem
from gyre_contract.core._models import RolloutStepV1

POLL_SECONDS = (0.002, 0.05, 0.1)
"""How often a waiting `get` or `put` looks again: every 2 ms (the first value) during the first
0.1 s of a wait (the third), so that a segment put while a trainer waits is picked up within a
few milliseconds; then doubling up to every 50 ms (the second). A look is one listing of the
segments folder (one actor call on Ray)."""
RECENT_DROPS = 65536
"""Episode ids dropped as stale that a trainer end remembers, so that the rest of an episode
put in several segments is dropped too."""


class ChannelWarning(UserWarning):
    """Something in a channel deserves a look: a compatible schema change, a field the map reads
    that the sampler marks optional, a segment skipped as corrupt or foreign."""


@dataclass
class EndCounts:
    """What one end did since it opened (the run log records both ends')."""

    segments: int = 0
    steps: int = 0
    episodes: int = 0
    """Distinct episode ids per segment, summed."""
    acked_segments: int = 0
    acked_steps: int = 0
    dropped_steps: int = 0
    dropped_episodes: int = 0
    redelivered: int = 0
    """Segments this trainer end got that an earlier end had been handed already."""

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class _Poll:
    """The pauses of one wait (`POLL_SECONDS`), never past its deadline."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.start = time.monotonic()
        self.pause = POLL_SECONDS[0]

    def wait(self) -> None:
        now = time.monotonic()
        left = self.pause if self.deadline is None else \
            max(0.0, min(self.pause, self.deadline - now))
        time.sleep(left)
        if now - self.start >= POLL_SECONDS[2]:
            self.pause = min(self.pause * 2, POLL_SECONDS[1])


class _End:
    """What both ends share: their backend, its URI, closing (also as a context manager)."""

    backend: Backend

    @property
    def uri(self) -> str:
        return self.backend.uri

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -- the sampler's end -------------------------------------------------------------------------

class SamplerEnd(_End):
    """A sampler's end of a channel: `put` blocks of steps; read the trainer's version."""

    def __init__(self, backend: Backend, model: type[RolloutStepV1], fingerprint: str, *,
                 max_pending: int | None, timeout: float | None, writer: str | None) -> None:
        self.backend = backend
        self.model = model
        self.fingerprint = fingerprint
        self.max_pending = max_pending
        self.timeout = timeout
        self.writer = writer or _writer_id()
        self.counts = EndCounts()
        self._blocks = contract.RecordBlocks(model)
        self._seq = 0
        self._layout = contract.fixed_layout(model)  # None: each put's first step settles it

    @property
    def trainer_version(self) -> int | None:
        """The version the trainer last published with `set_version` (None before any)."""
        trainer = self.backend.manifest().get("trainer") or {}
        version = trainer.get("version")
        return None if version is None else int(version)

    def put(self, steps: Iterable[Any], *, timeout: float | None = None,
            note: Mapping[str, Any] | None = None) -> segments.SegmentMeta:
        """Validate `steps` (dicts or step models) in bulk and write them as one segment.

        Raises ContractError with every problem (nothing written) when a step breaks the
        contract; waits while `max_pending` segments are not acked, then TimeoutError after
        `timeout` (default: the end's); an OSError (a full disk) leaves the channel as it was.
        `note`: a small JSON object the segment carries to the trainer (`Delivery.notes`): the
        sampler's own figures, such as its batch's mean reward. Returns the segment's facts.
        """
        started = time.time()
        extra = _note(note)
        steps = list(steps)
        checked = self._blocks.check(steps)
        self._wait_for_room(self.timeout if timeout is None else timeout)
        seq = self._seq + 1
        segment = f"{time.time_ns():020d}-{self.writer}-{seq:08d}"
        episodes = checked.episodes
        meta = segments.SegmentMeta(
            segment=segment, writer=self.writer, seq=seq, fingerprint=self.fingerprint,
            steps=checked.n, episodes=episodes, ended=len(checked.ended_ids),
            policy_versions=_version_counts(checked.policy_version),
            started=started, written=time.time(), writer_steps=self.counts.steps + checked.n,
            writer_episodes=self.counts.episodes + episodes, extra=extra)
        layout = self._layout or contract.arrow_layout(self.model, steps[0])
        data = segments.encode(checked.columnar, checked.n, layout, meta)
        self.backend.write_segment(segment, data, meta)
        self._blocks.commit()
        self._note(seq, meta)
        self._seq = seq
        self.counts.segments += 1
        self.counts.steps += checked.n
        self.counts.episodes += episodes
        meta.bytes = memoryview(data).nbytes
        return meta

    def _note(self, seq: int, meta: segments.SegmentMeta) -> None:
        """Keep the sampler's own count in the channel (what shows a lost last segment); the
        segment is there already, so a failure here is a warning, never a failed put."""
        try:
            self.backend.note_writer(self.writer, {
                "seq": seq, "steps": meta.writer_steps, "episodes": meta.writer_episodes,
                "at": meta.written})
        except OSError as err:
            warnings.warn(f"{self.uri}: segment {meta.segment} is in the channel, but the "
                          f"sampler's count could not be kept: {err}", ChannelWarning,
                          stacklevel=3)

    def _wait_for_room(self, timeout: float | None) -> None:
        if self.max_pending is None:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = _Poll(deadline)
        while (pending := self.backend.pending_count()) >= self.max_pending:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"put: {pending} segments of {self.uri} not acked "
                                   f"(max_pending {self.max_pending}) for {timeout} s")
            poll.wait()


def open_sampler(uri: str | os.PathLike[str], model: type[RolloutStepV1] | None = None, *,
                 max_pending: int | None = None, timeout: float | None = 60.0,
                 writer: str | None = None) -> SamplerEnd:
    """Open (or make) the channel at `uri` as a sampler of `model` steps (default RolloutStep).

    Publishes the step schema and its fingerprint; when a trainer is there already, its map is
    checked against the schema first (HandshakeError naming every field when it cannot run; a
    compatible change of the sampler's schema is a ChannelWarning). `max_pending`: `put` waits
    while that many segments are not acked, up to `timeout` seconds (None: forever). `writer`
    names this sampler in segment ids (default: host, pid and a random part).
    """
    if max_pending is not None and max_pending < 1:
        raise ValueError(f"max_pending must be at least 1, got {max_pending}")
    model = model or contract.default_step_model()
    backend = open_backend(uri)
    now = time.time()
    docs = sampler_documents(model)
    backend.create(lambda: new_manifest(now))
    for text in backend.update(lambda m: join_sampler(m, docs, now)):
        warnings.warn(f"{backend.uri}: {text}", ChannelWarning, stacklevel=2)
    return SamplerEnd(backend, model, docs["fingerprint"], max_pending=max_pending,
                      timeout=timeout, writer=writer)


def _version_counts(versions: np.ndarray) -> dict[str, int]:
    """Steps per policy version, JSON keys, in increasing order: a block of one version (the
    usual put) by its min and max, else `np.unique` (a sort of the block)."""
    if len(versions) and versions.min() == versions.max():
        return {str(int(versions[0])): len(versions)}
    found, counts = np.unique(versions, return_counts=True)
    return {str(k): v for k, v in zip(found.tolist(), counts.tolist())}


MAX_NOTE_BYTES = 65536
"""A `put` note larger than this (as JSON) is refused: it travels in every segment's facts."""


def _note(note: Mapping[str, Any] | None) -> dict[str, Any]:
    if note is None:
        return {}
    if not isinstance(note, Mapping):
        raise TypeError(f"note must be a mapping (a JSON object), got {type(note).__name__}")
    try:
        size = len(json.dumps(dict(note), allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"note must be plain JSON (finite numbers): {err}") from None
    if size > MAX_NOTE_BYTES:
        raise ValueError(f"note is {size} bytes as JSON; at most {MAX_NOTE_BYTES}")
    return dict(note)


def _writer_id() -> str:
    host = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:32] or "host"
    return f"{host}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


# -- the trainer's end -------------------------------------------------------------------------

@dataclass
class _Part:
    """One segment of a delivery: where it is, what it says, which rows are kept."""

    ref: SegmentRef
    meta: segments.SegmentMeta
    table: Any
    keep: np.ndarray
    staleness: dict[int, int]
    dropped_episodes: int
    episodes: tuple[np.ndarray, np.ndarray]
    """(each row's episode code, the episode ids by code: `segments.row_keys`)."""


@dataclass
class Delivery:
    """What one `get` hands over: the trainer's own batch and where it came from."""

    batch: dict[str, Any]
    """The trainer's batch under its own keys (nested names joined with '.'), validated."""
    segments: tuple[str, ...]
    steps: int
    """Steps (token rows, for a map of token rows) kept in the batch."""
    episodes: int
    ended: int
    """Episodes whose terminated or truncated step is in the batch."""
    dropped_steps: int
    """Steps dropped as stale by this `get`: in the segments delivered, and in
    `dropped_segments`."""
    dropped_episodes: int
    dropped_segments: tuple[str, ...]
    """Segments this `get` found stale throughout: committed as dropped, not delivered."""
    staleness: dict[int, int]
    """current_version - policy_version -> how many kept steps are that old (empty without a
    current version)."""
    policy_versions: list[int]
    current_version: int | None
    delivered_at: float
    notes: list[dict[str, Any]] = field(default_factory=list)
    """Each delivered segment's `put(note=...)`, in segment order ({} where none)."""
    parts: list[_Part] = field(repr=False, default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The delivery's facts (the batch itself left out)."""
        return {"segments": list(self.segments), "steps": self.steps, "episodes": self.episodes,
                "ended": self.ended,
                "dropped_steps": self.dropped_steps, "dropped_episodes": self.dropped_episodes,
                "dropped_segments": list(self.dropped_segments),
                "staleness": {str(k): v for k, v in sorted(self.staleness.items())},
                "policy_versions": self.policy_versions,
                "current_version": self.current_version, "delivered_at": self.delivered_at}


class TrainerEnd(_End):
    """A trainer's end of a channel: `get` batches, `ack` them, publish the version."""

    def __init__(self, backend: Backend, fmap: Any, schema: Any, fingerprint: str,
                 epoch: int, version: int | None, accepted: list[str]) -> None:
        self.backend = backend
        self.fmap = fmap
        self.schema = schema
        self.fingerprint = fingerprint
        self.epoch = epoch
        self.version = version
        """The version last published (`set_version`), by this end or the one before it."""
        self.counts = EndCounts()
        self.problems: list[str] = []
        """Segments skipped as corrupt or foreign, one line each (also warned)."""
        self._accepted = set(accepted)
        self._leased: set[str] = set()
        self._bad: set[str] = set()
        self._dropped: OrderedDict[str, None] = OrderedDict()
        self._gone: list[_Part] = []
        self._listed: list[SegmentRef] = []
        """Segments the last listing showed that no `get` has looked at yet, oldest first."""
        self.last: Delivery | None = None
        """The last delivery this end made (what a `train_step` that only gets the batch can
        look at: its notes, its staleness)."""

    def get(self, rows: int | None = None, *, current_version: int | None = None,
            max_staleness: int | None = None, timeout: float | None = None,
            on_stale: str = "drop") -> Delivery:
        """Whole segments, oldest first, until `rows` steps are kept (None: whatever is there),
        as the trainer's batch; see the module doc. `current_version` defaults to the version
        last published with `set_version`."""
        if on_stale not in ("drop", "error"):
            raise ValueError(f"on_stale must be 'drop' or 'error', got {on_stale!r}")
        if rows is not None and rows < 1:
            raise ValueError(f"rows must be at least 1, got {rows}")
        current = self.version if current_version is None else current_version
        if max_staleness is not None and (max_staleness < 0 or current is None):
            raise ValueError("max_staleness needs a current version (current_version= or "
                             f"set_version first) and must be >= 0, got {max_staleness}")
        self._check_epoch()
        deadline = None if timeout is None else time.monotonic() + timeout
        parts: list[_Part] = []
        self._gone = []  # segments of this get dropped whole as stale
        seen: set[str] = set()
        kept = 0
        poll = _Poll(deadline)
        # the segments the last listing showed and no get has looked at yet come first: the
        # folder is listed again when they run out (a trainer behind by many segments lists
        # it once for all of them, not once a get)
        fresh = rows is None or not self._listed
        listing = self.backend.pending() if fresh else self._listed
        while True:
            rest: list[SegmentRef] = []
            for i, ref in enumerate(listing):
                if rows is not None and kept >= rows:
                    rest = listing[i:]
                    break
                if ref.segment in self._leased or ref.segment in seen or \
                        ref.segment in self._bad:
                    continue
                seen.add(ref.segment)
                part = self._part(ref, current, max_staleness, on_stale)
                if part is not None:
                    parts.append(part)
                    kept += int(part.keep.sum())
            self._listed = rest
            if parts and (rows is None or kept >= rows):
                break
            if not fresh:  # what the last listing showed ran out: look at the folder now
                fresh, listing = True, self.backend.pending()
                continue
            if deadline is not None and time.monotonic() >= deadline:
                if parts:
                    break
                raise TimeoutError(f"get: nothing deliverable in {self.uri} within {timeout} s "
                                   f"({len(self._leased)} segments leased to this end, not "
                                   f"acked)")
            poll.wait()
            listing = self.backend.pending()
        return self._deliver(parts, current)

    def _part(self, ref: SegmentRef, current: int | None, max_staleness: int | None,
              on_stale: str) -> _Part | None:
        read = self._read(ref)
        if read is None:
            return None
        table, meta = read
        codes, ids, versions = segments.row_keys(table)
        stale = np.zeros(len(codes), bool)
        gone = np.zeros(len(ids), bool)  # by episode code
        if max_staleness is not None:
            assert current is not None
            floor = current - max_staleness
            old = versions < floor
            if old.any() and on_stale == "error":
                raise ContractError(_stale_problems(meta.segment, ids[codes], versions, old,
                                                    floor, current, max_staleness))
            gone[codes[old]] = True
            if self._dropped:  # the rest of an episode dropped in an earlier segment
                gone |= np.fromiter((i in self._dropped for i in ids.tolist()), bool, len(ids))
            if gone.any():
                stale = gone[codes]
                for episode_id in ids[gone].tolist():
                    self._remember_drop(episode_id)
        keep = ~stale
        ages: dict[int, int] = {}
        if current is not None:
            age, count = np.unique(current - versions[keep], return_counts=True)
            ages = dict(zip(age.tolist(), count.tolist()))
        part = _Part(ref, meta, table, keep, ages, int(gone.sum()), (codes, ids))
        if not keep.any():  # nothing to train on: committed as dropped at once
            self._commit([part], time.time(), time.time(), reason="stale")
            self._gone.append(part)
            return None
        return part

    def _read(self, ref: SegmentRef) -> tuple[Any, segments.SegmentMeta] | None:
        where = f"{self.uri}: segment {ref.segment}"
        try:
            table, meta = segments.decode(self.backend.read(ref), where)
            if meta.segment != ref.segment:
                raise segments.SegmentError(f"{where}: its facts name segment {meta.segment}")
            if meta.fingerprint not in self._accepted:
                self._accepted = set(accepted_fingerprints(self.backend.manifest()))
            if meta.fingerprint not in self._accepted:
                raise segments.SegmentError(
                    f"{where}: fingerprint {meta.fingerprint}, but the channel's sampler "
                    f"fingerprint is {_current_sampler(self.backend)} (refused)")
        except segments.SegmentError as err:
            if isinstance(err, segments.SegmentGone):
                return None
            self._bad.add(ref.segment)
            self.problems.append(str(err))
            warnings.warn(f"skipped, never delivered: {err}", ChannelWarning, stacklevel=4)
            return None
        return table, meta

    def _remember_drop(self, episode_id: str) -> None:
        self._dropped[episode_id] = None
        self._dropped.move_to_end(episode_id)
        while len(self._dropped) > RECENT_DROPS:
            self._dropped.popitem(last=False)

    def _deliver(self, parts: list[_Part], current: int | None) -> Delivery:
        if len(parts) == 1 and parts[0].keep.all():
            table, (codes, ids) = parts[0].table, parts[0].episodes
        else:
            table = segments.concat([p.table.filter(p.keep) for p in parts])
            codes, ids, _ = segments.row_keys(table)
        columns = segments.to_columns(table, episodes=(codes, ids), ragged=True)
        batch = contract.trainer_batch(self.fmap, self.schema, columns, episodes=(codes, ids))
        now = time.time()
        refs = [p.ref for p in parts]
        refs = self.backend.mark_delivered(refs, self.epoch, now)
        for part, ref in zip(parts, refs):
            part.ref = ref
        self.counts.redelivered += sum(ref.deliveries > 1 for ref in refs)
        self._leased.update(r.segment for r in refs)
        staleness: Counter[int] = Counter()
        for p in parts:
            staleness.update(p.staleness)
        versions = sorted({int(v) for p in parts for v in p.meta.versions})
        steps = int(sum(p.keep.sum() for p in parts))
        self.counts.segments += len(parts)
        self.counts.steps += steps
        self.counts.episodes += len(ids)
        dropped = [*parts, *self._gone]
        ended = int(np.count_nonzero(np.asarray(columns["terminated"], bool)
                                     | np.asarray(columns["truncated"], bool)))
        delivery = Delivery(batch=batch, segments=tuple(r.segment for r in refs), steps=steps,
                        episodes=len(ids), ended=ended,
                        dropped_steps=int(sum((~p.keep).sum() for p in dropped)),
                        dropped_episodes=sum(p.dropped_episodes for p in dropped),
                        dropped_segments=tuple(p.ref.segment for p in self._gone),
                        staleness=dict(sorted(staleness.items())), policy_versions=versions,
                        current_version=current, delivered_at=now,
                        notes=[dict(p.meta.extra) for p in parts], parts=parts)
        self.last = delivery
        return delivery

    def ack(self, delivery: Delivery) -> None:
        """Commit every segment of `delivery` (again: nothing changes)."""
        parts = [p for p in delivery.parts if p.ref.segment in self._leased]
        if parts:
            self._commit(parts, delivery.delivered_at, time.time(), reason="trained")
        for part in parts:
            self._leased.discard(part.ref.segment)

    def release(self, delivery: Delivery) -> None:
        """Give `delivery`'s segments back without committing them: a later `get` delivers
        them again."""
        for part in delivery.parts:
            self._leased.discard(part.ref.segment)
        self._listed = []  # older than what the last listing showed: the next get lists again

    def _commit(self, parts: list[_Part], delivered: float, now: float, reason: str) -> None:
        records = []
        for part in parts:
            kept = int(part.keep.sum())
            records.append({
                "segment": part.ref.segment, "meta": part.meta.to_json(), "reason": reason,
                "kept_steps": kept, "dropped_steps": int(part.meta.steps - kept),
                "dropped_episodes": part.dropped_episodes,
                "staleness": {str(k): v for k, v in sorted(part.staleness.items())},
                "delivered_at": delivered, "acked_at": now, "epoch": self.epoch,
                "deliveries": part.ref.deliveries, "trainer": self.fingerprint})
            self.counts.acked_segments += 1
            self.counts.acked_steps += kept
            self.counts.dropped_steps += part.meta.steps - kept
            self.counts.dropped_episodes += part.dropped_episodes
        self.backend.ack([p.ref for p in parts], records, self.epoch)

    def set_version(self, version: int) -> None:
        """Publish the trainer's policy version (what `SamplerEnd.trainer_version` reads)."""
        if isinstance(version, bool) or not isinstance(version, (int, np.integer)):
            raise TypeError(f"version must be an int, got {version!r}")

        def publish(manifest: dict[str, Any]) -> None:
            trainer = manifest.get("trainer") or {}
            if trainer.get("epoch") != self.epoch:
                raise _taken_over(self.uri, self.epoch, trainer.get("epoch"))
            trainer.update(version=int(version), version_at=time.time())

        self.backend.update(publish)
        self.version = int(version)

    def _check_epoch(self) -> None:
        trainer = self.backend.manifest().get("trainer") or {}
        if trainer.get("epoch") != self.epoch:
            raise _taken_over(self.uri, self.epoch, trainer.get("epoch"))


def _taken_over(uri: str, mine: int, theirs: Any) -> RuntimeError:
    return RuntimeError(f"{uri}: another trainer end opened the channel (epoch {theirs}, this "
                        f"end's {mine}); this end no longer delivers")


def _current_sampler(backend: Backend) -> str:
    sampler = backend.manifest().get("sampler") or {}
    return str(sampler.get("fingerprint", "none (no sampler opened it)"))


def _stale_problems(segment: str, ids: np.ndarray, versions: np.ndarray, old: np.ndarray,
                    floor: int, current: int, max_staleness: int) -> list[Problem]:
    problems = []
    for episode_id in dict.fromkeys(ids[old].tolist()):
        oldest = int(versions[ids == episode_id].min())
        problems.append(Problem(
            f"segments[{segment}].episode[{episode_id}]",
            f"policy_version >= {floor} (current {current}, max_staleness {max_staleness})",
            str(oldest), "stale rows (on_stale='error')"))
    return problems


def check_trainer(uri: str | os.PathLike[str], map: Any, trainer: Any = None, *,
                  batch_dims: Any = None) -> list[str]:
    """The handshake `open_trainer` would run on the channel at `uri`, without opening it or
    changing anything: its warnings, or HandshakeError (NotAChannelError when there is none)."""
    fmap = contract.load_map(map)
    docs = trainer_documents(fmap, trainer, batch_dims)
    if trainer is not None:
        contract.load_trainer(docs["schema"], batch_dims)
    backend = open_backend(uri)
    try:
        return join_trainer(copy.deepcopy(backend.manifest()), docs, time.time())
    finally:
        backend.close()


def open_trainer(uri: str | os.PathLike[str], map: Any, trainer: Any = None, *,
                 batch_dims: Any = None) -> TrainerEnd:
    """Open (or make) the channel at `uri` as its trainer, reading it through the field map
    `map` (a path, JSON data or `FieldMap`) into `trainer`'s own batch (its JSON Schema, path
    or dict, with `batch_dims` when it names none; None: the map's `TrainBatch`/`TokenBatch`).

    Publishes the documents and their fingerprint; when a sampler is there already, the map is
    checked against its schema first (HandshakeError naming every field the map reads that
    the sampler never writes, or that the trainer requires and the map never builds). A trainer
    end opened earlier stops delivering (the newest is the channel's trainer); the segments it
    did not ack are delivered again.
    """
    fmap = contract.load_map(map)
    schema = None if trainer is None else contract.load_trainer(
        contract.schema_document(trainer), batch_dims)
    docs = trainer_documents(fmap, trainer, batch_dims)
    backend = open_backend(uri)
    now = time.time()
    backend.create(lambda: new_manifest(now))

    def join(manifest: dict[str, Any]) -> tuple[list[str], dict[str, Any], list[str]]:
        found = join_trainer(manifest, docs, now)
        return found, dict(manifest["trainer"]), accepted_fingerprints(manifest)

    found, published, accepted = backend.update(join)
    for text in found:
        warnings.warn(f"{backend.uri}: {text}", ChannelWarning, stacklevel=2)
    version = published.get("version")
    return TrainerEnd(backend, fmap, schema, docs["fingerprint"], int(published["epoch"]),
                      None if version is None else int(version), accepted)

