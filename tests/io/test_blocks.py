"""`io._blocks.RecordBlocks`: blocks of records validated at once, episode rules across blocks,
all or nothing, the same verdicts and messages with the fast paths on or off."""

from __future__ import annotations

import copy

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
    assert checked.episodes == 3  # coded ids on the fast path, a list of ids off it


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



@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_failed_block_leaves_the_open_episodes_as_they_were(monkeypatch, fast):
    """The trial checker's open episodes are its own: the record path advances an episode past
    a step that fails (`EpisodeTracker.skip`, in place), which must not reach the committed
    state (a trial copy sharing the entries would make the next block look like a gap)."""
    monkeypatch.setenv("GYRE_FAST_PATHS", fast)
    blocks = RecordBlocks(CartPoleStep)
    blocks.check(steps("e", n=1, length=3, end=False))  # steps 0-2, open
    blocks.commit()
    bad = steps("e", n=1, length=2, start=3)
    bad[0]["reward"] = "x"  # step 3 fails: the trial skips past it
    with pytest.raises(ContractError):
        blocks.check(bad)
    blocks.check(steps("e", n=1, length=2, start=3))  # steps 3, 4 follow step 2
    blocks.commit()
    assert blocks.steps == 5


def test_a_trial_copy_of_the_checker_is_independent_and_equal_to_a_deep_copy():
    """`StepChecker.copy` (the per-block trial copy) gives what `copy.deepcopy` gives, and
    changing either side leaves the other as it was."""
    blocks = RecordBlocks(CartPoleStep)
    blocks.check(steps("a", n=3, length=3, end=False) + steps("b", n=2))
    blocks.commit()
    checker = blocks._checker
    checker.tracker._ended.add_many([f"x{i}" for i in range(5000)], list(range(5000)))
    checker.tracker._ended.add("y", 7)  # held in a run and among the recent ones
    checker.tracker.skip("a0", 3, 9)
    checker.group_versions.add("g", 1)
    checker.group_versions.add("g", 2)

    def state(c):
        t = c.tracker
        return (c.records, c.steps, t.steps, t.terminated, t.truncated, set(t.policy_versions),
                {k: copy.copy(v) for k, v in t._open.items()}, t._ended.items(), len(t._ended),
                dict(c.group_versions.first), {k: set(v) for k, v in c.group_versions.mixed.items()})

    deep = copy.deepcopy(checker)
    trial = checker.copy()
    assert state(trial) == state(deep) == state(checker)
    trial.tracker.skip("a0", 4, 10)
    trial.tracker.skip("new", 0, 11)
    trial.tracker.forget_many(["x1", "y"])
    trial.tracker._ended.add("z", 12)
    trial.tracker.policy_versions.add(99)
    trial.group_versions.add("g", 3)
    trial.group_versions.add("h", 1)
    assert state(checker) == state(deep)
    assert state(trial) != state(deep)

def test_ended_ids_are_forgotten_after_their_block_but_caught_within_one():
    blocks = RecordBlocks(CartPoleStep)
    blocks.check(steps("e", n=2))
    blocks.commit()
    blocks.check(steps("e", n=2))  # the ids again, in a later block: not remembered
    twice = steps("f", n=1) + steps("f", n=1)
    with pytest.raises(ContractError, match="step after the episode ended"):
        blocks.check(twice)


@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_block_hashes_no_id_of_the_episodes_it_ends(monkeypatch, fast):
    """Ended ids are forgotten at `commit`: a bulk block keeps (and hashes) none of them, and
    forgetting from an empty set hashes nothing; a step after the end is caught all the same."""
    from gyre_contract.core import _endedids, _validate

    monkeypatch.setenv("GYRE_FAST_PATHS", fast)
    hashed: list[int] = []
    real = _endedids.episode_keys

    def counting(ids):
        hashed.append(len(ids))
        return real(ids)

    monkeypatch.setattr(_endedids, "episode_keys", counting)
    monkeypatch.setattr(_validate, "episode_keys", counting)
    blocks = RecordBlocks(CartPoleStep)
    for prefix in "ab":
        assert blocks.check(steps(prefix, n=3)).bulk is (fast == "1")
        blocks.commit()
    assert (sum(hashed) == 0) is (fast == "1")  # record by record: `add` keeps them in-block
    assert blocks._checker.tracker.episodes == 0
    with pytest.raises(ContractError, match="step after the episode ended"):
        blocks.check(steps("c", n=1) + steps("c", n=1))


def completions(n: int = 6, lists: bool = False) -> list[dict]:
    """LLM steps as a sampler hands them over: numpy arrays (or, with `lists`, JSON lists)."""
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        prompt, response = rng.integers(0, 50_000, 3 + i), rng.integers(0, 50_000, 1 + i % 4)
        logprob = -rng.random(len(response), dtype=np.float32)
        record = {"observation": {"token_ids": prompt}, "action": response, "logprob": logprob,
                  "reward": float(i % 2), "step": 0, "episode_id": f"c{i}",
                  "group_id": f"g{i // 2}", "terminated": True, "truncated": False,
                  "policy_version": 3}
        if i % 3 == 0:
            record["observation"]["text"] = "2+2="
            record["loss_mask"] = np.ones(len(response), bool)
        if lists:
            record = {k: v.tolist() if isinstance(v, np.ndarray) else v
                      for k, v in record.items()}
            record["observation"] = {k: v.tolist() if isinstance(v, np.ndarray) else v
                                     for k, v in record["observation"].items()}
        out.append(record)
    return out


def same_columns(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for key in a:
        left, right = a[key], b[key]
        if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
            np.testing.assert_array_equal(np.asarray(left), np.asarray(right), err_msg=key)
            continue
        assert len(left) == len(right), key
        for x, y in zip(left, right):
            if isinstance(x, dict):
                assert list(x) == list(y), key
                for k in x:
                    np.testing.assert_array_equal(x[k], y[k], err_msg=f"{key}.{k}")
            else:
                assert type(x) is type(y) or isinstance(x, np.ndarray), key
                np.testing.assert_array_equal(x, y, err_msg=key)
                if isinstance(x, np.ndarray):
                    assert x.dtype == y.dtype, key


@pytest.mark.parametrize("lists", [False, True], ids=["arrays", "lists"])
def test_llm_steps_are_checked_on_columns(monkeypatch, lists):
    """Ragged token lists of any length: checked on columns (from the arrays as they are, or
    from the JSON of lists), the same columns the record path gives."""
    monkeypatch.setenv("GYRE_FAST_PATHS", "1")
    checked = RecordBlocks(LLMStep).check(completions(lists=lists))
    monkeypatch.setenv("GYRE_FAST_PATHS", "0")
    normal = RecordBlocks(LLMStep).check(completions(lists=lists))
    assert checked.bulk and not normal.bulk
    same_columns(checked.columns, normal.columns)
    assert list(checked.episode_id) == list(normal.episode_id)
    assert checked.ended_ids == normal.ended_ids
    observation = checked.columns["observation"][0]
    assert list(observation) == ["token_ids", "text"] and observation["token_ids"].dtype == np.int64


class Name(str):
    """A str subclass: the record path decides what it is."""


BROKEN = {
    "a logprob per token but one": lambda r: r.update(logprob=r["logprob"][:-1]),
    "a positive logprob": lambda r: r.update(logprob=np.abs(r["logprob"])),
    "a NaN logprob": lambda r: r["logprob"].__setitem__(0, np.nan),
    "float token ids": lambda r: r.update(action=r["action"].astype(np.float64)),
    "bool token ids": lambda r: r.update(action=r["action"] > 0),
    "a list of token ids with a bool": lambda r: r.update(action=[1, True]),
    "no token ids": lambda r: r.update(observation={"text": "x"}),
    "a null reward": lambda r: r.update(reward=None),
    "a numpy reward": lambda r: r.update(reward=np.float32(0.5)),
    "an empty episode id": lambda r: r.update(episode_id=""),
    "an unknown key": lambda r: r.update(trunctaed=True),
    "info": lambda r: r.update(info={"seed": 1}),
    "a step after the end": lambda r: r.update(episode_id="c0"),
    "an episode id of a str subclass": lambda r: r.update(episode_id=Name("c4")),
    "a numpy str group id": lambda r: r.update(group_id=np.str_("g2")),
    "a 0-D array of token ids": lambda r: r.update(action=np.array(7)),
    "a 2-D array of token ids": lambda r: r.update(action=r["action"][None, :]),
    "a 2-D array of prompt ids": lambda r: r["observation"].update(
        token_ids=r["observation"]["token_ids"].reshape(1, -1)),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_llm_block_gives_the_record_paths_problems(monkeypatch, case):
    messages = []
    for fast in ("1", "0"):
        monkeypatch.setenv("GYRE_FAST_PATHS", fast)
        records = completions()
        BROKEN[case](records[4])
        try:
            checked = RecordBlocks(LLMStep).check(records)
        except ContractError as err:
            messages.append(str(err))
        else:
            messages.append(("holds", checked.bulk))
    assert messages[0] == messages[1] or messages == [("holds", True), ("holds", False)], case


@pytest.mark.parametrize("shape", [(1, -1), (-1, 1)], ids=["one row", "one column"])
def test_every_step_with_a_2d_array_gives_the_record_paths_problems(monkeypatch, shape):
    """Arrays of one ndim join without complaint: a block of only 2-D ones is still refused on
    columns and explained by the record path."""
    messages = []
    for fast in ("1", "0"):
        monkeypatch.setenv("GYRE_FAST_PATHS", fast)
        records = completions()
        for record in records:
            record["action"] = record["action"].reshape(shape)
        with pytest.raises(ContractError) as err:
            RecordBlocks(LLMStep).check(records)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
