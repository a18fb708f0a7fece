"""A real Gymnasium CartPole-v1 rollout, recorded here, written with write_steps, validated clean."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from models import CartPoleStep

from gyre_contract.core._validate import validate_step
from gyre_contract.io._reading import read_episodes, read_steps
from gyre_contract.io._validation import validate_file
from gyre_contract.io._writer import write_steps

gym = pytest.importorskip("gymnasium")


def record_cartpole(episodes: int, seed: int) -> list[dict[str, Any]]:
    """A plain sampler loop: random policy, TimeLimit 20 (truncations) and falls (terminations)."""
    env = gym.make("CartPole-v1", max_episode_steps=20)
    env.action_space.seed(seed)
    records: list[dict[str, Any]] = []
    obs, _ = env.reset(seed=seed)
    for n in range(episodes):
        for t in range(10_000):
            action = int(env.action_space.sample())
            next_obs, reward, terminated, truncated, _ = env.step(action)
            record = {"observation": obs, "action": action, "logprob": math.log(0.5),
                      "reward": float(reward), "step": t, "episode_id": f"cartpole-{n}",
                      "terminated": bool(terminated), "truncated": bool(truncated),
                      "policy_version": 0}
            if terminated or truncated:
                record["next_observation"] = next_obs  # the true final one, not the reset one
            validate_step(record, CartPoleStep)  # the sampler's hot-loop check
            records.append(record)
            obs = next_obs
            if terminated or truncated:
                obs, _ = env.reset()
                break
    env.close()
    return records


def test_recorded_cartpole_rollout_validates_clean(tmp_path: Path) -> None:
    records = record_cartpole(episodes=30, seed=3)
    path = tmp_path / "cartpole.jsonl"
    assert write_steps(path, records) == len(records)
    report = validate_file(path, CartPoleStep, require_complete=True)
    assert report.ok, report.to_text()
    assert (report.lines, report.steps, report.episodes, report.open_episodes) == (
        len(records), len(records), 30, 0)
    assert report.terminated > 0 and report.truncated > 0
    assert report.terminated + report.truncated == 30
    fields = {f.name: (f.dtype, f.shape) for f in report.fields}
    assert fields["observation"] == ("float32", "[4]")
    assert fields["next_observation"] == ("float32", "[4]")


def test_recorded_rollout_reads_back_as_steps_and_episodes(tmp_path: Path) -> None:
    records = record_cartpole(episodes=10, seed=5)
    path = tmp_path / "cartpole.jsonl"
    write_steps(path, (validate_step(r, CartPoleStep) for r in records))
    steps = list(read_steps(path, CartPoleStep))
    assert len(steps) == len(records)
    assert np.array_equal(steps[0].observation, np.asarray(records[0]["observation"]))
    eps = list(read_episodes(path, CartPoleStep))
    assert [len(e) for e in eps] == [
        sum(r["episode_id"] == f"cartpole-{n}" for r in records) for n in range(10)]
    assert all(len(e) <= 20 and not e.is_open for e in eps)
    assert any(e.truncated and len(e) == 20 for e in eps)
    assert any(e.terminated and len(e) < 20 for e in eps)
    first = eps[0].columns
    assert first["observation"].shape == (len(eps[0]), 4)
    assert first["reward"].dtype == np.float32 and first["reward"].sum() == len(eps[0])


def test_vector_env_rollout_interleaves_and_groups_back(tmp_path: Path) -> None:
    from gyre_contract.harness._recorder import Recorder

    envs = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync",
                        wrappers=[lambda e: gym.wrappers.TimeLimit(e, 15)])
    rng = np.random.default_rng(0)
    recorder = Recorder(envs, lambda obs: rng.integers(0, 2, size=len(obs)), policy_version=0,
                        run_id="vec", seed=11, model=CartPoleStep)
    records = list(recorder.record_episodes(9))
    envs.close()
    ids = [r["episode_id"] for r in records]
    assert ids[:3] != [ids[0]] * 3  # steps of several episodes interleave in the file
    path = tmp_path / "vec.jsonl"
    write_steps(path, records)
    report = validate_file(path, CartPoleStep, require_complete=True)
    assert report.ok, report.to_text()
    assert report.episodes == 9
    eps = list(read_episodes(path, CartPoleStep))
    assert sorted(e.episode_id for e in eps) == sorted(set(ids))
    for e in eps:
        assert e.columns["step"].tolist() == list(range(len(e)))
        assert e.lines == sorted(e.lines)
