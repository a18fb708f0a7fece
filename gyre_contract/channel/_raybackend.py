"""A channel held by a named Ray actor (`ray://NAMESPACE/NAME`, extra `ray`): the multi-node case.

The actor (detached: it outlives the process that made it, until `destroy()` or the cluster
ends; `num_cpus=0`) holds the manifest, one entry per visible segment (its id, CRC-32, size,
facts and an `ObjectRef`), the ack records and the delivery marks. A segment's Arrow IPC bytes
live in Ray's object store: the sampler hands them to the actor, which puts them there as
their owner, so they outlive a sampler that exits or dies (Ray ties an object to the process
that put it); the actor drops its reference when the segment is acked. A
segment becomes visible in one actor call (whole, or not at all), and the actor runs one call at
a time, so manifest updates are compare-and-swap on its version.

The process must reach a Ray cluster: one started with `ray.init()` in it, or a running one
(`ray start --head`; `RAY_ADDRESS`), joined here with `ray.init(address="auto")`. Ray is
imported inside this module only; the actor's class is this module's, so the cluster's workers
must be able to import gyre_contract (the same environment, or a runtime_env).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from gyre_contract.channel._backends import Backend, SegmentRef, checksum, verify
from gyre_contract.channel._handshake import NotAChannelError, checked_manifest
from gyre_contract.channel._segments import SegmentError, SegmentGone, SegmentMeta
from gyre_contract.core._errors import InputError

_URI = re.compile(r"^ray://(?P<namespace>[A-Za-z0-9_.-]+)/(?P<name>[A-Za-z0-9_.-]+)$")
CAS_TRIES = 1000
"""Manifest updates that lose the race to another process are retried this many times."""


class ChannelActor:
    """The actor's state (module doc); every method is one atomic step."""

    def __init__(self) -> None:
        self.version = 0
        self.manifest: dict[str, Any] | None = None
        self.segments: dict[str, tuple[int, int, dict[str, Any], Any]] = {}
        self.acked: dict[str, dict[str, Any]] = {}
        self.marks: dict[str, dict[str, Any]] = {}
        self.ledgers: dict[str, dict[str, Any]] = {}

    def get_manifest(self) -> tuple[int, dict[str, Any] | None]:
        return self.version, self.manifest

    def create(self, manifest: dict[str, Any]) -> None:
        if self.manifest is None:
            self.manifest, self.version = manifest, self.version + 1

    def replace(self, version: int, manifest: dict[str, Any]) -> bool:
        if version != self.version:
            return False
        self.manifest, self.version = manifest, self.version + 1
        return True

    def add(self, segment: str, crc: int, size: int, meta: dict[str, Any], data: Any) -> None:
        """Own a copy of the segment's bytes in the object store (its owner is this actor, so
        it outlives the sampler that put it) and make the segment visible."""
        import ray

        if segment not in self.acked and segment not in self.segments:
            self.segments[segment] = (crc, size, meta, ray.put(data))

    def pending(self) -> list[tuple[str, int, int, int]]:
        return [(s, crc, size, self.marks.get(s, {}).get("count", 0))
                for s, (crc, size, _, _) in sorted(self.segments.items())]

    def count(self) -> int:
        return len(self.segments)

    def fetch(self, segment: str) -> list[Any] | None:
        found = self.segments.get(segment)
        return None if found is None else [found[3]]

    def meta(self, segment: str) -> dict[str, Any] | None:
        found = self.segments.get(segment)
        return None if found is None else found[2]

    def ack(self, segments: list[str], records: list[dict[str, Any]]) -> None:
        for segment, record in zip(segments, records):
            self.acked.setdefault(segment, record)
            self.segments.pop(segment, None)  # the data goes with the last reference
            self.marks.pop(segment, None)

    def acks(self) -> list[dict[str, Any]]:
        return list(self.acked.values())

    def mark(self, segments: list[str], epoch: int, now: float) -> list[int]:
        counts = []
        for segment in segments:
            mark = self.marks.setdefault(segment, {"count": 0, "first": now})
            mark.update(count=mark["count"] + 1, epoch=epoch, last=now)
            counts.append(mark["count"])
        return counts

    def delivered(self) -> dict[str, dict[str, Any]]:
        return dict(self.marks)

    def note(self, writer: str, ledger: dict[str, Any]) -> None:
        self.ledgers[writer] = ledger

    def writers(self) -> dict[str, dict[str, Any]]:
        return dict(self.ledgers)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError("a ray:// channel needs ray: pip install 'gyre-contract[ray]'") from None
    return ray


class RayBackend(Backend):
    """The actor above; see `backends.Backend` for what each method promises."""

    def __init__(self, uri: str) -> None:
        match = _URI.match(uri)
        if match is None:
            raise NotAChannelError(f"not a channel URI: {uri} (expected ray://NAMESPACE/NAME, "
                                   "letters, digits, '_', '.', '-')")
        self.uri = uri
        self.namespace, self.name = match["namespace"], match["name"]
        self.ray = _ray()
        if not self.ray.is_initialized():
            try:
                self.ray.init(address=os.environ.get("RAY_ADDRESS", "auto"),
                              namespace=self.namespace, log_to_driver=False,
                              logging_level="WARNING")
            except ConnectionError as err:
                raise NotAChannelError(f"no Ray cluster for {uri}: start one (ray start "
                                       f"--head) or call ray.init() first ({err})") from None
        self._actor: Any = None

    def _handle(self, create: bool = False) -> Any:
        if self._actor is not None:
            return self._actor
        try:
            self._actor = self.ray.get_actor(self.name, namespace=self.namespace)
        except ValueError:
            if not create:
                raise NotAChannelError(f"not a channel: {self.uri} (no such Ray actor)") from None
            actor = self.ray.remote(num_cpus=0)(ChannelActor)
            self._actor = actor.options(name=self.name, namespace=self.namespace,
                                        lifetime="detached", get_if_exists=True).remote()
        return self._actor

    def _call(self, method: str, *args: Any) -> Any:
        return self.ray.get(getattr(self._handle(), method).remote(*args))

    def exists(self) -> bool:
        try:
            return self._call("get_manifest")[1] is not None
        except NotAChannelError:
            return False

    def create(self, make: Callable[[], dict[str, Any]]) -> None:
        actor = self._handle(create=True)
        self.ray.get(actor.create.remote(make()))

    def manifest(self) -> dict[str, Any]:
        manifest = self._call("get_manifest")[1]
        if manifest is None:
            raise NotAChannelError(f"not a channel: {self.uri} (an actor without a manifest)")
        return checked_manifest(manifest, self.uri)

    def update(self, change: Callable[[dict[str, Any]], Any]) -> Any:
        for _ in range(CAS_TRIES):
            version, manifest = self._call("get_manifest")
            if manifest is None:
                raise NotAChannelError(f"not a channel: {self.uri}")
            manifest = copy.deepcopy(checked_manifest(manifest, self.uri))
            result = change(manifest)
            if self._call("replace", version, manifest):
                return result
        raise RuntimeError(f"{self.uri}: the manifest changed {CAS_TRIES} times during one update")

    def write_segment(self, segment: str, data: Any, meta: SegmentMeta) -> SegmentRef:
        crc = checksum(data)
        size = memoryview(data).nbytes
        self._call("add", segment, crc, size, meta.to_json(), np.frombuffer(data, np.uint8))
        return SegmentRef(segment, crc, size, segment)

    def pending(self) -> list[SegmentRef]:
        return [SegmentRef(s, crc, size, s, count)
                for s, crc, size, count in self._call("pending")]

    def pending_count(self) -> int:
        return int(self._call("count"))

    def read(self, ref: SegmentRef) -> Any:
        refs = self._call("fetch", ref.segment)
        if refs is None:
            raise SegmentGone(f"{self.uri}: segment {ref.segment} acked meanwhile")
        try:
            data = self.ray.get(refs[0])
        except self.ray.exceptions.RayError as err:
            raise SegmentError(f"{self.uri}: segment {ref.segment}: its object is lost "
                               f"({type(err).__name__})") from None
        return verify(ref, data, f"{self.uri}: segment {ref.segment}")

    def ack(self, refs: list[SegmentRef], records: list[dict[str, Any]], epoch: int) -> None:
        self._call("ack", [r.segment for r in refs], records)

    def acks(self) -> Iterator[dict[str, Any]]:
        yield from self._call("acks")

    def mark_delivered(self, refs: list[SegmentRef], epoch: int, now: float
                       ) -> list[SegmentRef]:
        counts = self._call("mark", [r.segment for r in refs], epoch, now)
        return [dataclasses.replace(r, deliveries=c) for r, c in zip(refs, counts)]

    def delivered(self) -> dict[str, dict[str, Any]]:
        return dict(self._call("delivered"))

    def note_writer(self, writer: str, ledger: dict[str, Any]) -> None:
        self._call("note", writer, ledger)

    def writers(self) -> dict[str, dict[str, Any]]:
        return dict(self._call("writers"))

    def strays(self) -> list[str]:
        return []  # nothing but segments can be put in the actor

    def destroy(self) -> None:
        """End the actor: the channel and every segment in it are gone."""
        try:
            self.ray.kill(self._handle())
        except NotAChannelError:
            pass
        self._actor = None
