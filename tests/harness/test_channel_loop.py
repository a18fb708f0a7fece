"""`full_loop(channel=...)`: stage 3 through a channel, both ends' counts in the run log."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "channel"))

from procs import CARTPOLE_MAP, CartStep, episodes

from gyre_contract.channel import open_sampler
from gyre_contract.channel._status import channel_status
from gyre_contract.core._errors import ContractError
from gyre_contract.harness._channelloop import CHANNEL_CHECKS
from gyre_contract.harness._runlog import RunLog
from gyre_contract.harness._stages import full_loop


def train(batch):
    assert batch["obs"].shape[-1] == 4 and batch["mask"].any()
    return {"loss": float(np.asarray(batch["advantage"])[batch["mask"]].mean())}


def test_full_loop_through_a_channel_records_both_ends(tmp_path):
    channel, log = tmp_path / "ch", RunLog(tmp_path / "runs.jsonl")
    report = full_loop(lambda v: episodes(f"v{v}", 3, version=v), train, CARTPOLE_MAP, 4,
                       channel=channel, model=CartStep, run_log=log, run_id="through")
    assert report.policy_version == 4 and report.n_steps == 60
    assert all(c.channel["staleness"] == {"0": 15} for c in report.cycles)
    assert report.checks[-len(CHANNEL_CHECKS):] == CHANNEL_CHECKS
    run = log.read()[0]
    assert run.metrics["channel.sampler.steps"] == run.metrics["channel.trainer.acked_steps"] == 60
    assert run.curves["channel.trainer.acked_segments"] == [1, 2, 3, 4]
    assert f"through the channel {channel}" in run.notes
    status = channel_status(channel)
    assert status.ok and status.trainer["version"] == 4 and status.acked["segments"] == 4


def test_an_external_sampler_feeds_the_loop(tmp_path):
    channel = tmp_path / "ch"
    sampler = open_sampler(channel, model=CartStep)
    for v in range(3):
        sampler.put(episodes(f"v{v}", 2, version=0))
    report = full_loop(None, train, CARTPOLE_MAP, 3, max_staleness=3, channel=channel,
                       rows=10, model=CartStep)
    assert [c.n_steps for c in report.cycles] == [10, 10, 10]
    assert [c.staleness for c in report.cycles] == [[0] * 10, [1] * 10, [2] * 10]


def test_stale_rows_fail_the_loop_naming_the_cycle(tmp_path):
    channel = tmp_path / "ch"
    sampler = open_sampler(channel, model=CartStep)
    sampler.put(episodes("old", 2, version=0))
    sampler.put(episodes("older", 2, version=0))
    with pytest.raises(ContractError, match=r"cycles\[1\]\.segments\[.*stale rows"):
        full_loop(None, train, CARTPOLE_MAP, 2, max_staleness=0, channel=channel, rows=10,
                  model=CartStep)


def test_a_batch_that_breaks_the_contract_never_reaches_train_fn(tmp_path):
    def sample(version):
        steps = episodes(f"v{version}", 2, version=version)
        steps[-1]["terminated"] = False  # the last episode never ends: GAE cannot bootstrap
        return steps

    called = []
    with pytest.raises(ContractError, match="next_value"):
        full_loop(sample, lambda b: called.append(b), CARTPOLE_MAP, 1, channel=tmp_path / "ch",
                  model=CartStep)
    assert not called
