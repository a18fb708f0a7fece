"""Hostile or broken things in a channel: reported and skipped, never delivered; a path that is
not a channel is refused with its name (exit 2 in the CLI)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from procs import CARTPOLE_MAP, CartStep, episodes

from gyre_contract.channel import open_sampler, open_trainer
from gyre_contract.channel._ends import ChannelWarning
from gyre_contract.channel._handshake import NotAChannelError
from gyre_contract.channel._status import channel_status
from gyre_contract.cli._app import run


def segment_files(folder: Path) -> list[Path]:
    return sorted((folder / "segments").glob("*.arrow"))


def test_a_corrupt_segment_is_reported_and_skipped(tmp_path):
    folder = tmp_path / "ch"
    sampler = open_sampler(folder, model=CartStep)
    trainer = open_trainer(folder, map=CARTPOLE_MAP)
    sampler.put(episodes("bad", 2))
    sampler.put(episodes("good", 2))
    first = segment_files(folder)[0]
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: the CRC in its name no longer matches
    first.write_bytes(bytes(data))
    with pytest.warns(ChannelWarning, match=r"skipped, never delivered: .*CRC-32 .* \(corrupt\)"):
        got = trainer.get(timeout=5)
    assert {e.split("-")[0] for e in got.batch["episode_id"].tolist()} == {"good"}
    assert len(trainer.problems) == 1
    trainer.ack(got)
    status = channel_status(folder)  # the lost segment: the two ends disagree
    assert not status.ok and status.exit_code() == 1
    assert any("CRC-32" in p for p in status.problems)


def test_a_foreign_file_is_reported_never_delivered(tmp_path):
    folder = tmp_path / "ch"
    sampler = open_sampler(folder, model=CartStep)
    trainer = open_trainer(folder, map=CARTPOLE_MAP)
    sampler.put(episodes("a", 1))
    (folder / "segments" / "notes.txt").write_text("not a segment")
    fake = folder / "segments" / "00000000000000000001-intruder-00000001.0badc0de.arrow"
    fake.write_bytes(b"ARROW1 but not really")
    with pytest.warns(ChannelWarning, match="skipped, never delivered"):
        got = trainer.get(timeout=5)
    assert got.steps == 5
    status = channel_status(folder)
    assert any("notes.txt: not a segment" in s for s in status.strays)
    assert not status.ok  # the fake one claims to be a segment and cannot be read


def test_a_segment_of_another_contract_is_refused_with_both_fingerprints(tmp_path):
    from procs import completions

    from gyre_contract.pinned import LLMStep

    folder, other = tmp_path / "ch", tmp_path / "other"
    open_sampler(folder, model=CartStep)
    trainer = open_trainer(folder, map=CARTPOLE_MAP)
    stranger = open_sampler(other, model=LLMStep)
    stranger.put(completions("x", 2))
    moved = segment_files(other)[0]
    os.replace(moved, folder / "segments" / moved.name)
    mine = json.loads((folder / "channel.json").read_text())["sampler"]["fingerprint"]
    theirs = stranger.fingerprint
    with pytest.warns(ChannelWarning, match=rf"fingerprint {theirs}, but the channel's sampler "
                      rf"fingerprint is {mine} \(refused\)"), pytest.raises(TimeoutError):
        trainer.get(timeout=0.2)


def test_a_fifo_or_a_huge_file_in_the_channel_is_refused_unread(tmp_path, monkeypatch):
    """Never a hang (a FIFO has no writer) or unbounded memory (a file over the limit)."""
    from gyre_contract.channel import _filebackend as filebackend
    folder = tmp_path / "ch"
    sampler = open_sampler(folder, model=CartStep)
    trainer = open_trainer(folder, map=CARTPOLE_MAP)
    sampler.put(episodes("a", 1))
    os.mkfifo(folder / "segments" / "00000000000000000001-fifo-00000001.0badc0de.arrow")
    monkeypatch.setattr(filebackend, "MAX_SEGMENT_BYTES", 10)  # every real segment is larger
    with pytest.warns(ChannelWarning) as seen, pytest.raises(TimeoutError):
        trainer.get(timeout=0.2)
    texts = sorted(str(w.message) for w in seen)
    assert len(texts) == 2
    assert "not a regular file" in texts[0] + texts[1] and "more than 10" in texts[0] + texts[1]
    assert not channel_status(folder).ok


def test_a_manifest_that_is_not_a_regular_file_is_not_a_channel(tmp_path):
    folder = tmp_path / "ch"
    folder.mkdir()
    os.mkfifo(folder / "channel.json")
    with pytest.raises(NotAChannelError, match="channel.json is not a regular file"):
        open_sampler(folder, model=CartStep)
    code = run(["channel", "status", str(folder)], *_io())
    assert code == 2


@pytest.mark.parametrize("make", ["file", "folder with files", "bad manifest"])
def test_a_path_that_is_not_a_channel_is_refused_with_its_name(tmp_path, make):
    target = tmp_path / "x"
    if make == "file":
        target.write_text("hello")
    elif make == "folder with files":
        target.mkdir()
        (target / "rollouts.jsonl").write_text("{}\n")
    else:
        target.mkdir()
        (target / "channel.json").write_text('{"not": "a manifest"}')
    with pytest.raises(NotAChannelError, match=str(target)):
        open_sampler(target, model=CartStep)
    with pytest.raises(NotAChannelError, match=str(target)):
        open_trainer(target, map=CARTPOLE_MAP)
    out, err = _io()
    assert run(["channel", "status", str(target)], out, err) == 2
    assert str(target) in err.getvalue() and "Traceback" not in err.getvalue()


def test_an_empty_or_new_folder_becomes_a_channel(tmp_path):
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "empty", tmp_path / "new" / "deeper"):
        open_sampler(target, model=CartStep)
        assert (target / "channel.json").is_file()
        assert channel_status(target).ok


def test_an_unknown_uri_scheme_is_refused(tmp_path):
    with pytest.raises(NotAChannelError, match="unknown channel URI scheme 's3'"):
        open_sampler("s3://bucket/ch", model=CartStep)


def _io():
    import io

    return io.StringIO(), io.StringIO()


@pytest.mark.parametrize("code", [errno.ENOSPC])
def test_a_full_disk_mid_write_leaves_the_channel_readable(tmp_path, monkeypatch, code):
    """The write of a segment fails half way with ENOSPC (tests/channel/test_channel_processes.py
    has the kernel refuse a real write)."""
    from gyre_contract.channel import _filebackend
    sampler = open_sampler(tmp_path / "ch", model=CartStep)
    sampler.put(episodes("ok", 2))

    def full_disk(fd, data):
        os.write(fd, memoryview(data)[:100])
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(_filebackend, "_write_all", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        sampler.put(episodes("lost", 2))
    monkeypatch.undo()
    assert not list((tmp_path / "ch" / "segments").glob(".*"))
    status = channel_status(tmp_path / "ch")
    assert status.ok and status.put["segments"] == 1
    sampler.put(episodes("lost", 2))  # the disk has room again: the same steps go in whole
    assert channel_status(tmp_path / "ch").put["steps"] == 20
