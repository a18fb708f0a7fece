"""The channel between real OS processes (`procs.py` run with `subprocess`), on every backend:
every step exactly once, a refused map, a sampler killed mid-put, a trainer killed before its
ack, stale rows, two samplers, a full disk. Each starts Python processes: marked slow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from procs import CARTPOLE_MAP, CartStep, episodes

from gyre_contract.channel import open_sampler, open_trainer
from gyre_contract.channel._status import channel_status

PROCS = Path(__file__).resolve().parent / "procs.py"
ROOT = Path(__file__).resolve().parents[2]


def child_env(uri: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(PROCS.parent),
                                         env.get("PYTHONPATH", "")])
    if uri.startswith("ray://"):
        import ray

        env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address  # this test's cluster only
    return env


def start(uri: str, role: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(PROCS), role, "--uri", uri, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env(uri))


def finish(proc: subprocess.Popen, code: int = 0) -> list[dict]:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == code, f"exit {proc.returncode}\n{err}"
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def wait_for(proc: subprocess.Popen, key: str) -> dict:
    """Read the child's lines until one carries `key`."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{") and key in (data := json.loads(line)):
            return data
    raise AssertionError(f"the child ended without saying {key!r}: {proc.stderr.read()}")


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)  # reaps it and closes its pipes
    assert proc.returncode == -signal.SIGKILL


def expected(prefix: str, puts: int, per_put: int) -> list[str]:
    return sorted(f"{prefix}{i}-{e}" for i in range(puts) for e in range(per_put))


pytestmark = pytest.mark.slow


def test_two_processes_move_every_step_exactly_once(uri):
    open_sampler(uri, model=CartStep)  # the channel exists before either child starts
    sampler = start(uri, "sampler", "--puts", "6", "--episodes", "4", "--prefix", "s")
    trainer = start(uri, "trainer", "--steps", "120", "--rows", "30")
    assert finish(sampler)[-1]["counts"]["steps"] == 120
    got = finish(trainer)[-1]
    assert sorted(got["episodes"]) == expected("s", 6, 4)  # each once: no loss, no repeat
    status = channel_status(uri)
    assert status.ok, status.problems
    assert status.put == {"segments": 6, "steps": 120, "episodes": 24}
    assert status.acked["steps"] == 120 and status.pending["segments"] == 0


def test_a_trainer_process_exiting_after_its_last_ack_leaves_no_acked_file(uri):
    """The file backend removes acked files on a thread of the trainer end; a process that
    exits (without `close`) right after its last ack, its removals slowed, still removes them
    all: nothing is delivered twice, the counts agree, the folder holds no segment."""
    sampler = open_sampler(uri, model=CartStep)
    for i in range(4):
        sampler.put(episodes(f"s{i}", 2, length=5))
    got = finish(start(uri, "trainer", "--steps", "40", "--rows", "10", "--slow-removal"))[-1]
    assert sorted(got["episodes"]) == expected("s", 4, 2)
    status = channel_status(uri)
    assert status.ok, status.problems
    assert status.acked["segments"] == 4 and status.pending["segments"] == 0
    if not uri.startswith("ray://"):
        assert os.listdir(Path(uri) / "segments") == []
    again = open_trainer(uri, map=CARTPOLE_MAP)
    with pytest.raises(TimeoutError):
        again.get(timeout=0.3)


def test_a_trainer_whose_map_needs_a_field_the_sampler_never_writes_is_refused(uri):
    finish(start(uri, "sampler", "--puts", "1"))
    bad = json.dumps({"gyre_field_map": 1, "fields": {
        "obs": {"from": "observation"}, "adv": {"from": "advantage"}, "mask": {"op": "mask"}}})
    proc = start(uri, "trainer", "--steps", "1", "--map", bad)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 2
    assert "map.fields.adv: the map reads advantage, which the sampler never writes" in err
    status = channel_status(uri)
    assert status.trainer is None and status.pending["segments"] == 1  # nothing moved


def test_a_sampler_killed_in_the_middle_of_a_large_put_leaves_nothing_partial(uri):
    proc = start(uri, "sampler", "--puts", "4", "--episodes", "4", "--prefix", "k",
                 "--slow-write")
    proc_puts = [wait_for(proc, "put") for _ in range(3)]  # three whole segments
    wait_for(proc, "writing")  # the fourth is being written: killed in the middle
    kill(proc)
    status = channel_status(uri)
    assert status.ok, status.problems
    assert status.put["segments"] == 3
    if uri.startswith("ray://"):
        assert status.strays == []
    else:
        assert any("1 unfinished put" in s for s in status.strays)
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    got = trainer.get(rows=1000, timeout=2)
    assert sorted(got.segments) == sorted(p["segment"] for p in proc_puts)
    assert sorted(got.batch["episode_id"].tolist()) == expected("k", 3, 4)


def test_a_trainer_killed_after_get_and_before_ack_gets_the_segment_again(uri):
    finish(start(uri, "sampler", "--puts", "2", "--prefix", "r"))
    first = start(uri, "trainer", "--steps", "40", "--hold")
    held = wait_for(first, "ready")["segments"]
    kill(first)
    again = finish(start(uri, "trainer", "--steps", "40"))[-1]
    assert again["segments"] == held
    assert sorted(again["episodes"]) == expected("r", 2, 4)
    assert again["counts"]["redelivered"] == 2
    status = channel_status(uri)
    assert status.ok and status.delivered["redelivered"] == 2 and status.acked["steps"] == 40


def test_stale_rows_are_dropped_and_counted(uri):
    finish(start(uri, "sampler", "--puts", "5", "--versions", "--prefix", "v"))
    got = finish(start(uri, "trainer", "--steps", "100", "--current-version", "4",
                       "--max-staleness", "1"))[-1]
    assert sorted(got["episodes"]) == sorted(f"v{i}-{e}" for i in (3, 4) for e in range(4))
    assert got["counts"]["dropped_steps"] == 60 and got["counts"]["dropped_episodes"] == 12
    status = channel_status(uri)
    assert status.ok, status.problems
    assert status.dropped == {"segments": 3, "steps": 60, "episodes": 12}
    assert status.acked["steps"] + status.dropped["steps"] == status.put["steps"] == 100
    assert status.staleness == {0: 20, 1: 20}


def test_two_samplers_and_one_trainer(uri):
    open_sampler(uri, model=CartStep)
    one = start(uri, "sampler", "--puts", "4", "--prefix", "a")
    two = start(uri, "sampler", "--puts", "3", "--episodes", "2", "--prefix", "b")
    trainer = start(uri, "trainer", "--steps", "110")
    finish(one), finish(two)
    got = finish(trainer)[-1]
    assert sorted(got["episodes"]) == sorted(expected("a", 4, 4) + expected("b", 3, 2))
    status = channel_status(uri)
    assert status.ok and status.writers == 2 and status.put["steps"] == 110


def test_a_full_disk_during_put_leaves_the_channel_readable(tmp_path):
    """A real write refused by the kernel (RLIMIT_FSIZE: EFBIG, as ENOSPC on a full disk)."""
    uri = str(tmp_path / "ch")
    lines = finish(start(uri, "sampler", "--puts", "3", "--episodes", "40", "--prefix", "d",
                         "--fsize", "2000"), code=3)
    assert "File too large" in lines[-1]["failed"] and lines[-1]["put"] == 2
    assert not list((tmp_path / "ch" / "segments").glob(".*"))  # no temporary file left
    status = channel_status(uri)
    assert status.ok and status.put["segments"] == 2 and status.strays == []
    trainer = open_trainer(uri, map=CARTPOLE_MAP)
    assert trainer.get(rows=10_000, timeout=1).steps == 400
