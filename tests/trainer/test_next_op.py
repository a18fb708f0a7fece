"""The `next` op and sparse sources: a per-step next observation from the observations of an
episode and the final observation a sampler records on its last step only, computed (never
filled) on every path; a source some step lacks is `MissingFieldError` naming where."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import Field

from gyre_contract.core._errors import ContractError, MissingFieldError
from gyre_contract.core._models import RolloutStep
from gyre_contract.core._tensor import Tensor
from gyre_contract.io import read_episodes, write_steps
from gyre_contract.trainer import collate
from gyre_contract.trainer._fieldmap import FieldMap

NEXT = {"op": "next", "from": ["observation", "next_observation"]}


def steps(episode: str, n: int, *, end: str = "terminated", final: bool = True, start: int = 0,
          dim: int = 3, kind: type = float) -> list[dict]:
    """Records of one episode whose observation at step t is `start + t` in every element; its
    last step carries `next_observation` = `start + n` when `final`."""
    out = []
    for t in range(n):
        last = t == n - 1
        rec = {"observation": [kind(start + t)] * dim, "action": 0, "logprob": -0.5,
               "value": 0.1, "reward": 1.0, "step": t, "episode_id": episode,
               "terminated": last and end == "terminated", "truncated": last and end == "truncated",
               "policy_version": 0}
        if last and final:
            rec["next_observation"] = [kind(start + n)] * dim
        out.append(rec)
    return out


def write(path: Path, *episodes: list[dict]) -> Path:
    write_steps(path, [r for ep in episodes for r in ep])
    return path


def fmap(**extra) -> FieldMap:
    return FieldMap.from_dict({"gyre_field_map": 1, "fields": {
        "obs": {"from": "observation"}, "next_obs": NEXT, "mask": {"op": "mask"}, **extra}})


def expected_next(lengths: list[int], starts: list[float], nt: int, dim: int = 3) -> np.ndarray:
    out = np.zeros((len(lengths), nt, dim), np.float32)
    for b, (n, s) in enumerate(zip(lengths, starts)):
        out[b, :n] = (s + 1 + np.arange(n))[:, None]
    return out


@pytest.fixture
def rollouts(tmp_path: Path) -> Path:
    return write(tmp_path / "r.jsonl", steps("a", 5), steps("b", 2, end="truncated", start=10),
                 steps("c", 3, end="open", start=20))


def test_next_is_the_following_observation_and_the_final_one_on_the_last_step(rollouts):
    batch = fmap().build(read_episodes(rollouts))
    assert np.array_equal(batch["next_obs"], expected_next([5, 2, 3], [0, 10, 20], 5))
    assert np.isfinite(batch["next_obs"]).all()
    assert np.array_equal(batch["next_obs"][:, :-1][batch["mask"][:, 1:]],
                          batch["obs"][:, 1:][batch["mask"][:, 1:]])


def test_the_file_columns_path_gives_the_same_batch(rollouts, monkeypatch):
    monkeypatch.setenv("GYRE_FAST_PATHS", "1")  # the path under test, even when CI turns it off
    m = fmap()
    flat = m.collated_file(rollouts, RolloutStep)
    assert flat is not None  # the sparse column does not send it to episodes
    episodes = m.collated(read_episodes(rollouts))
    assert list(flat[0]) == list(episodes)
    for key in episodes:
        assert np.array_equal(flat[0][key], episodes[key], equal_nan=key != "episode_id"), key
    assert "next_observation_present" in episodes
    assert episodes["next_observation_present"].sum() == 3


def test_a_row_cut_by_max_len_takes_the_next_rows_first_observation(rollouts):
    batch = fmap().build(read_episodes(rollouts), max_len=2)
    whole = fmap().build(read_episodes(rollouts))
    assert np.array_equal(batch["next_obs"][batch["mask"]], whole["next_obs"][whole["mask"]])


@pytest.mark.parametrize("end", ["open", "terminated", "truncated"])
def test_an_episode_whose_last_step_lacks_the_final_observation_fails_naming_it(tmp_path, end):
    path = write(tmp_path / "r.jsonl", steps("a", 4), steps("lost", 3, end=end, final=False),
                 steps("c", 2))
    m = fmap(done={"op": "any", "from": ["terminated", "truncated"]})
    with pytest.raises(ContractError) as err:
        m.build(read_episodes(path))
    text = str(err.value)
    assert "next_observation" in text and "'lost' (row " in text and f", {end})" in text
    assert "1 episode:" in text and "'a'" not in text and "nothing is filled" in text


def test_an_observation_of_integers_works_too(tmp_path):
    """A non-float observation (a grid position, pixels) has no NaN to mark a step without the
    final observation: the presence mask says where it is, on every path."""
    path = tmp_path / "ints.jsonl"
    write_steps(path, steps("a", 4, kind=int) + steps("b", 2, start=7, kind=int))
    m = fmap()
    batch = m.build(read_episodes(path, GridStep))
    assert batch["next_obs"].dtype == batch["obs"].dtype == np.int64
    assert np.array_equal(batch["next_obs"], expected_next([4, 2], [0, 7], 4).astype(np.int64))
    assert m.collated_file(path, GridStep) is None  # not columns: episodes decide


class GridStep(RolloutStep):
    observation: Tensor("int64", [3], role="observation") = Field(...)


def test_modalities_are_followed_one_by_one():
    def episode(eid: str, n: int) -> dict:
        img = np.arange(n, dtype=np.float32)[:, None] + 0.5
        state = np.arange(n, dtype=np.int64)[:, None]
        final_img = np.full((n, 1), np.nan, np.float32)
        final_img[-1] = n + 0.5
        return {"observation": {"img": img, "state": state},
                "next_observation": {"img": final_img, "state": [None] * (n - 1) + [np.array([n])]},
                "reward": np.ones(n, np.float32), "episode_id": np.array([eid] * n),
                "terminated": np.arange(n) == n - 1, "truncated": np.zeros(n, bool)}
    m = FieldMap.from_dict({"gyre_field_map": 1, "fields": {"next_obs": NEXT}})
    batch = m.build([episode("a", 3), episode("b", 2)])
    assert np.array_equal(batch["next_obs"]["img"][0, :, 0], [1.5, 2.5, 3.5])
    assert np.array_equal(batch["next_obs"]["state"][1, :, 0], [1, 2, 0])


def test_the_op_describes_itself_and_takes_no_then_position():
    assert "next_obs ← the next step's observation (next_observation on an episode's last " \
           "step)" in fmap().describe()
    assert fmap().sparse_sources() == ["next_observation"]
    both = fmap(raw={"from": "next_observation"})  # read whole too: required on every step
    assert both.sparse_sources() == []


# -- a source some step lacks -----------------------------------------------------------------

def test_a_source_some_step_lacks_is_missing_with_step_episode_and_line(tmp_path):
    records = steps("a", 3) + steps("b", 4, start=10)
    del records[5]["logprob"]  # episode b, step 2, line 6
    path = tmp_path / "r.jsonl"
    write_steps(path, records)
    m = FieldMap.from_dict({"gyre_field_map": 1, "fields": {"logprob": {"from": "logprob"}}})
    with pytest.raises(MissingFieldError) as err:
        m.build(read_episodes(path))
    assert str(err.value).startswith(
        "missing sample field: logprob on step 2 of episode 'b' (line 6), have [action, ")
    assert "logprob" not in str(err.value).split("have [")[1]
    assert err.value.problems[0].line == 6 and isinstance(err.value, KeyError)


def test_a_non_float_source_some_step_lacks_is_missing_too():
    eps = [{"x": [np.int64(1), None, np.int64(3)], "reward": np.ones(3, np.float32),
            "episode_id": np.array(["e"] * 3)}]
    with pytest.raises(MissingFieldError, match=r"x on step 1 of episode 'e'"):
        collate(eps, fields=["x"], sparse=())
    out = collate(eps, fields=["x"], sparse=["x"])
    assert out["x"].tolist() == [[1, 0, 3]] and out["x_present"].tolist() == [[True, False, True]]


def test_reading_next_observation_whole_says_to_use_next(rollouts):
    m = FieldMap.from_dict({"gyre_field_map": 1, "fields": {"nobs": {"from": "next_observation"}}})
    with pytest.raises(MissingFieldError) as err:
        m.build(read_episodes(rollouts))
    assert "on step 0 of episode 'a' (line 1)" in str(err.value)
    assert json.dumps(NEXT) in str(err.value)


def test_collate_without_sparse_keeps_the_columns_as_they_are(rollouts):
    """A direct `collate` (no map) is unchanged: a float absent on a step is NaN there."""
    out = collate(read_episodes(rollouts), fields=["next_observation"])
    assert np.isnan(out["next_observation"][0, 0]).all() and "next_observation_present" not in out
