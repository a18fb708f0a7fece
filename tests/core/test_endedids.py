"""Finished-episode ids kept as 128-bit keys (`core/endedids.py`): the same keys in every process,
and one answer from the line path and the bulk path even when two keys collide.

A collision (about n² / 2¹²⁹ for n finished episodes) is simulated by replacing the module's
`episode_key`; the bulk path (`EpisodeTracker.add_columns`) runs on blocks of a few episodes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

import gyre_contract.core._endedids as endedids
import gyre_contract.io._arrowlines as arrowlines
import gyre_contract.io._ducklines as ducklines
import gyre_contract.io._lines as lines
from gyre_contract.core._endedids import episode_key, episode_keys
from gyre_contract.core._models import RolloutStep
from gyre_contract.core._validate import EpisodeTracker
from gyre_contract.io._validation import validate_file

REAL_KEY = endedids.episode_key
COLLIDING = b"\x07" * 16


def record(eid: str, t: int, last: int = 3) -> bytes:
    return orjson.dumps({
        "observation": [0.5, 1.0], "action": 1, "logprob": -0.5, "reward": 0.5, "step": t,
        "episode_id": eid, "terminated": t == last, "truncated": False, "policy_version": 0})


def write(tmp_path: Path, records: list[bytes]) -> Path:
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(records) + b"\n")
    return path


def episodes_in_turn(tmp_path: Path, episodes: int = 6) -> Path:
    return write(tmp_path, [record(f"ep-{e}", t) for e in range(episodes) for t in range(4)])


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few episodes each, and a count of the blocks the bulk path accepted."""
    monkeypatch.setattr(lines, "CHUNK_BYTES", 1500)
    monkeypatch.setattr(arrowlines, "CHUNK_FACTOR", 1)  # the Arrow reader's chunks: as small
    monkeypatch.setattr(ducklines, "CHUNK_FACTOR", 1)  # and DuckDB's, where it reads them
    accepted = []
    add_columns = EpisodeTracker.add_columns

    def counting(self, *args, **kwargs):
        ok = add_columns(self, *args, **kwargs)
        accepted.append(ok)
        return ok

    monkeypatch.setattr(EpisodeTracker, "add_columns", counting)
    return accepted


def collide(monkeypatch, ids: set[str] | None = None) -> None:
    """`ids` (every id when None) all get one key."""
    monkeypatch.setattr(endedids, "episode_key",
                        lambda eid: COLLIDING if ids is None or eid in ids else REAL_KEY(eid))


def test_ids_with_different_keys_are_never_confused(tmp_path):
    assert validate_file(episodes_in_turn(tmp_path), RolloutStep).ok


def test_a_key_is_128_bits_of_blake2b():
    assert episode_key("ep-0").hex() == "c475b1623931b683ff8754b7e2104fc6"
    keys = episode_keys(["ep-0", "ep-1", "é", ""])
    assert keys.shape == (4, 2) and keys.dtype.itemsize == 8
    assert keys[0].tobytes() == episode_key("ep-0") and len(set(map(bytes, keys))) == 4
    assert episode_key("\ud800") != episode_key("")  # a lone surrogate still has a key


KEYS_SCRIPT = """
from gyre_contract.core._endedids import episode_keys
ids = ["ep-0", "cartpole-12", "prompt-17/3", "ünï", ""]
print(episode_keys(ids).tobytes().hex(), hash("ep-0"))
"""


def test_keys_are_the_same_in_every_process():
    """Python's `hash(str)` is salted per process (PYTHONHASHSEED): the keys are not."""
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", KEYS_SCRIPT], check=True, env=env,
                             capture_output=True, text=True)
        outputs.append(out.stdout.split())
    (keys_1, salted_1), (keys_2, salted_2) = outputs
    assert salted_1 != salted_2  # the two processes did hash strings differently
    assert keys_1 == keys_2
    assert keys_1 == episode_keys(["ep-0", "cartpole-12", "prompt-17/3", "ünï", ""]).tobytes().hex()


@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_collision_reads_as_a_step_after_the_end_on_either_path(tmp_path, monkeypatch,
                                                                   small_blocks, fast):
    """What a collision costs (the documented rate): the second id's steps read as steps after
    the first ended, naming its last line, the same on every run."""
    collide(monkeypatch)
    monkeypatch.setenv("GYRE_FAST_PATHS", fast)
    report = validate_file(episodes_in_turn(tmp_path), RolloutStep)
    assert not report.ok
    first = report.problems()[0]
    assert (first.line, first.rule) == (5, "episode.no_step_after_end")
    assert first.got == "step 0 of episode 'ep-1', which ended at line 4"


def test_a_collision_gives_one_report_either_way(tmp_path, monkeypatch, small_blocks):
    collide(monkeypatch)
    path = episodes_in_turn(tmp_path)
    reports = []
    for fast in ("1", "0"):
        monkeypatch.setenv("GYRE_FAST_PATHS", fast)
        reports.append(validate_file(path, RolloutStep).to_dict())
    assert reports[0] == reports[1]


@pytest.mark.parametrize("fast", ["1", "0"])
def test_an_open_episode_is_never_read_as_ended(tmp_path, monkeypatch, small_blocks, fast):
    """ep-0 is open while ep-1, whose key is the same, ends: ep-0's later steps are its own."""
    collide(monkeypatch, {"ep-0", "ep-1"})
    monkeypatch.setenv("GYRE_FAST_PATHS", fast)
    records = [record("ep-0", 0, last=20)]
    records += [record(f"ep-{e}", t) for e in (1, 2, 3, 4) for t in range(4)]
    records += [record("ep-0", t, last=20) for t in range(1, 21)]
    report = validate_file(write(tmp_path, records), RolloutStep)
    assert report.ok, report.to_text()
    if fast == "1":
        assert True in small_blocks  # some block went the bulk way, after ep-1 ended


def test_many_keys_at_once_make_a_run_that_answers_like_a_dict():
    ended = endedids.EndedEpisodes()
    ended.add("first", None)  # held in the dict, flushed before the run is pushed
    ids = [f"req-{i}" for i in range(3 * endedids._DIRECT)]
    ended.add_many(ids[:endedids._DIRECT], range(endedids._DIRECT))
    ended.add_keys(episode_keys(ids[endedids._DIRECT:]), range(endedids._DIRECT, len(ids)))
    assert len(ended) == len(ids) + 1 and "first" in ended and ended.line("first") is None
    assert all(ended.line(eid) == i for i, eid in enumerate(ids))
    assert not ended.any_of(["req-x", "first-"]) and ended.any_of(["req-x", ids[-1]])
    ended.discard(ids[7])
    assert ids[7] not in ended and len(ended) == len(ids)
    assert ended.items() == sorted([(episode_key("first"), None)] + [
        (episode_key(eid), i) for i, eid in enumerate(ids) if i != 7])


@pytest.mark.parametrize("seed", range(4))
def test_discarding_many_at_once_is_discarding_each(seed):
    """`discard_many` (a committed block forgetting its ended ids) leaves exactly what
    `discard` one by one leaves: ids in the buffer and in runs, unknown ids, ids twice."""
    rng = np.random.default_rng(seed)
    ids = [f"ep-{i}" for i in range(int(rng.integers(1, 3000)))]
    sizes = rng.integers(1, 1500, 6).tolist()  # runs of several sizes, then a buffer
    one, many = endedids.EndedEpisodes(), endedids.EndedEpisodes()
    for ended in (one, many):
        start = 0
        for size in sizes:
            chunk = ids[start:start + size]
            ended.add_many(chunk, list(range(start, start + len(chunk))))
            start += size
        for i, eid in enumerate(ids[start:start + 10]):
            ended.add(eid, start + i)  # a few in the buffer
    gone = [ids[i] for i in rng.integers(0, len(ids), len(ids) // 2).tolist()] + ["never"]
    for eid in gone:
        one.discard(eid)
    many.discard_many(gone)
    assert many.items() == one.items() and len(many) == len(one)
    assert all(eid not in many for eid in gone)
