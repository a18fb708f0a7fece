"""`io._blocks.RecordBlocks`: blocks of records validated at once, episode rules across blocks,
all or nothing, the same verdicts and messages with the fast paths on or off."""

from __future__ import annotations

import numpy as np
import pytest

from gyre_contract.core._errors import ContractError
from gyre_contract.io._blocks import RecordBlocks
from gyre_contract.pinned import CartPoleStep, LLMStep


def steps(prefix: str, n: int = 3, length: int = 4, start: int = 0, end: bool = True) -> list:
    rng = np.random.default_rng(0)
    return [{"observation": rng.random(4).astype(np.float32), "action": t % 2, "logprob": -0.5,
             "reward": 1.0, "step": t, "episode_id": f"{prefix}{e}",
             "terminated": end and t == start + length - 1, "truncated": False,
             "policy_version": 0}
            for e in range(n) for t in range(start, start + length)]


@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_clean_block_comes_back_as_columns(monkeypatch, fast):
    monkeypatch.setenv("GYRE_FAST_PATHS", fast)
    checked = RecordBlocks(CartPoleStep).check(steps("e"))
    assert checked.bulk is (fast == "1")
    assert checked.n == 12 and checked.ended_ids == ["e0", "e1", "e2"]
    obs = np.asarray(checked.columns["observation"]) if fast == "1" else \
        np.stack(checked.columns["observation"])
    assert obs.shape == (12, 4) and obs.dtype == np.float32
    assert list(checked.columns) == ["observation", "action", "logprob", "reward", "step",
                                     "episode_id", "terminated", "truncated", "policy_version"]


def test_a_bad_block_gives_every_problem_the_same_way_with_fast_paths_off(monkeypatch):
    bad = steps("e")
    bad[1]["reward"] = float("nan")
    bad[5]["step"] = 7
    bad[9]["trunctaed"] = True
    messages = []
    for fast in ("1", "0"):
        monkeypatch.setenv("GYRE_FAST_PATHS", fast)
        with pytest.raises(ContractError) as err:
            RecordBlocks(CartPoleStep).check(bad)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "steps[1].reward" in messages[0] and "steps[5].step" in messages[0]
    assert "steps[9].trunctaed" in messages[0]


def test_an_episode_goes_on_in_the_next_block():
    blocks = RecordBlocks(CartPoleStep)
    blocks.check(steps("e", n=1, length=3, end=False))
    blocks.commit()
    blocks.check(steps("e", n=1, length=2, start=3))  # steps 3, 4: it goes on
    blocks.commit()
    blocks = RecordBlocks(CartPoleStep)
    blocks.check(steps("e", n=1, length=3, end=False))
    blocks.commit()
    with pytest.raises(ContractError, match=r"steps\[0\].step: step does not follow"):
        blocks.check(steps("e", n=1, length=2, start=4))  # step 3 is missing


def test_a_block_checked_but_not_committed_leaves_nothing_behind():
    blocks = RecordBlocks(CartPoleStep)
    first = steps("e", n=1, length=3, end=False)
    blocks.check(first)  # say writing it failed: no commit
    blocks.check(first)  # the same steps again: still the first ones
    blocks.commit()
    assert blocks.steps == 3


def test_a_failed_block_changes_nothing():
    blocks = RecordBlocks(CartPoleStep)
    bad = steps("e", n=1, length=3, end=False)
    bad[2]["reward"] = "x"
    with pytest.raises(ContractError):
        blocks.check(bad)
    with pytest.raises(RuntimeError, match="commit"):
        blocks.commit()
    blocks.check(steps("e", n=1, length=3, end=False))
    blocks.commit()
    assert blocks.steps == 3


def test_ended_ids_are_forgotten_after_their_block_but_caught_within_one():
    blocks = RecordBlocks(CartPoleStep)
    blocks.check(steps("e", n=2))
    blocks.commit()
    blocks.check(steps("e", n=2))  # the ids again, in a later block: not remembered
    twice = steps("f", n=1) + steps("f", n=1)
    with pytest.raises(ContractError, match="step after the episode ended"):
        blocks.check(twice)


def test_llm_steps_go_record_by_record():
    record = {"observation": {"token_ids": [1, 2, 3]}, "action": [4, 5],
              "logprob": [-0.1, -0.2], "reward": 1.0, "step": 0, "episode_id": "c0",
              "terminated": True, "truncated": False, "policy_version": 3}
    checked = RecordBlocks(LLMStep).check([record])
    assert not checked.bulk
    observation = checked.columns["observation"][0]
    assert list(observation) == ["token_ids"]  # a dict of the modalities recorded
    assert observation["token_ids"].dtype == np.int64
    assert observation["token_ids"].tolist() == [1, 2, 3]
