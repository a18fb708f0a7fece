"""The file backend removes an acked segment's file on a thread of the trainer end
(`channel._removal`): the ack record is the commit, and until the file is gone the end never
delivers that segment again, `channel status` counts it as acked (not pending, not twice),
`close` waits for the removals and raises one that failed. The process test (the trainer's
process exits without `close`, its removals slowed) is in test_channel_processes.py."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from procs import CARTPOLE_MAP, CartStep, episodes

from gyre_contract.channel import open_sampler, open_trainer
from gyre_contract.channel._status import channel_status


def removals_of_segments(monkeypatch, action):
    """`os.unlink` of a segment file runs `action(path)` first (other files as they were)."""
    real = os.unlink

    def unlink(path, *args, **kwargs):
        if f"{os.sep}segments{os.sep}" in os.fspath(path):
            action(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)


def test_an_acked_segment_is_never_delivered_again_while_its_file_is_still_there(
        tmp_path, monkeypatch):
    gate = threading.Event()
    removals_of_segments(monkeypatch, lambda path: gate.wait(60))
    folder = tmp_path / "ch"
    sampler = open_sampler(folder, model=CartStep)
    trainer = open_trainer(folder, map=CARTPOLE_MAP)
    metas = [sampler.put(episodes(f"p{i}", 2, length=3)) for i in range(2)]
    try:
        first = trainer.get(rows=1, timeout=5)
        trainer.ack(first)
        assert len(os.listdir(folder / "segments")) == 2  # the acked one's file is still there
        second = trainer.get(timeout=0.5)
        assert second.segments == (metas[1].segment,)  # not the acked one again
        trainer.ack(second)
        with pytest.raises(TimeoutError):
            trainer.get(timeout=0.2)
        assert len(os.listdir(folder / "segments")) == 2
        status = channel_status(folder)  # both files there, both acked: counted once, as acked
        assert status.ok, status.problems
        assert status.acked["segments"] == 2 and status.acked["steps"] == 12
        assert status.pending == {"segments": 0, "steps": 0, "in_flight": 0}
        assert status.put["segments"] == 2
    finally:
        gate.set()
    trainer.close()  # waits for the removals
    assert os.listdir(folder / "segments") == []
    assert channel_status(folder).ok


def test_close_raises_a_removal_that_failed_once_and_the_ack_stands(tmp_path, monkeypatch):
    def refuse(path):
        raise PermissionError(13, "Permission denied", os.fspath(path))

    removals_of_segments(monkeypatch, refuse)
    folder = tmp_path / "ch"
    sampler = open_sampler(folder, model=CartStep)
    trainer = open_trainer(folder, map=CARTPOLE_MAP)
    meta = sampler.put(episodes("p", 2, length=3))
    trainer.ack(trainer.get(timeout=5))
    with pytest.raises(PermissionError, match="Permission denied"):
        trainer.close()
    trainer.close()  # raised once
    log = folder / "acks" / f"trainer-{trainer.epoch}.jsonl"
    assert [json.loads(line)["segment"] for line in log.read_text().splitlines()] == \
        [meta.segment]  # the commit was made before the removal
    assert len(os.listdir(folder / "segments")) == 1
    with pytest.raises(TimeoutError):  # this end never delivers it again
        trainer.get(timeout=0.2)
    status = channel_status(folder)
    assert status.ok and status.acked["segments"] == 1 and status.pending["segments"] == 0


def test_a_failed_removal_is_raised_by_the_next_ack_after_its_commit(tmp_path, monkeypatch):
    failed = threading.Event()

    def refuse(path):
        failed.set()
        raise PermissionError(13, "Permission denied", os.fspath(path))

    removals_of_segments(monkeypatch, refuse)
    folder = tmp_path / "ch"
    sampler = open_sampler(folder, model=CartStep)
    trainer = open_trainer(folder, map=CARTPOLE_MAP)
    metas = [sampler.put(episodes(f"p{i}", 2, length=3)) for i in range(2)]
    trainer.ack(trainer.get(rows=1, timeout=5))
    second = trainer.get(timeout=5)
    assert failed.wait(10)
    trainer.backend._removals.close()  # the thread's result is in (no wait on timing)
    with pytest.raises(PermissionError):
        trainer.ack(second)
    log = Path(folder, "acks", f"trainer-{trainer.epoch}.jsonl")
    assert [json.loads(line)["segment"] for line in log.read_text().splitlines()] == \
        [m.segment for m in metas]  # the second ack committed before the error was raised
    with pytest.raises(PermissionError):  # the second segment's removal failed too
        trainer.close()


def test_status_counts_a_segment_acked_and_gone_while_it_reads(tmp_path, monkeypatch):
    """A segment acked (and its file removed) right after `channel status` read the acks is
    counted once, never missing: status lists the segments first, and looks at the acks again
    for one whose file went."""
    from gyre_contract.channel import _filebackend

    folder = tmp_path / "ch"
    sampler = open_sampler(folder, model=CartStep)
    trainer = open_trainer(folder, map=CARTPOLE_MAP)
    sampler.put(episodes("p", 2, length=3))
    acks = _filebackend.FileBackend.acks

    def ack_meanwhile(self):  # the trainer acks (and removes) as the acks are read
        yield from acks(self)
        if not trainer.counts.acked_segments:
            trainer.ack(trainer.get(timeout=5))
            trainer.close()

    monkeypatch.setattr(_filebackend.FileBackend, "acks", ack_meanwhile)
    status = channel_status(folder)
    assert status.ok, status.problems
    assert status.acked["segments"] == 1 and status.pending["segments"] == 0
