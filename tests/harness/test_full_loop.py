"""Stage 3 on a real env: Recorder → FieldMap → TrainBatch → a train step, cycle after cycle."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from gyre_contract.core._errors import ContractError
from gyre_contract.core._models import RolloutStep, TrainBatch
from gyre_contract.core._report import Report
from gyre_contract.core._tensor import Tensor
from gyre_contract.harness._recorder import Recorder
from gyre_contract.harness._runlog import RunLog
from gyre_contract.harness._stages import FULL_LOOP_CHECKS, full_loop
from gyre_contract.io._episodes import Episode
from gyre_contract.trainer._fieldmap import FieldMap

MAP = {
    "gyre_field_map": 1,
    "fields": {
        "obs": {"from": "observation"},
        "action": {"from": "action"},
        "reward": {"from": "reward"},
        "done": {"op": "any", "from": ["terminated", "truncated"]},
        "terminated": {"from": "terminated"},
        "truncated": {"from": "truncated"},
        "advantage": {"op": "gae", "from": ["reward", "value", "terminated", "truncated",
                                            "next_value"], "gamma": 0.99, "lam": 0.95},
        "value": {"from": "value"},
        "logprob": {"from": "logprob"},
        "mask": {"op": "mask"},
        "policy_version": {"from": "policy_version"},
        "episode_id": {"from": "episode_id"},
    },
}
LOG_HALF = float(np.log(np.float32(0.5)))


class Sampler:
    """A CartPole sampler whose policy is tagged with the version it is asked for."""

    def __init__(self, episodes_per_cycle: int = 4, seed: int = 3, run_id: str = "run") -> None:
        env = SyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=20)] * 2,
                            autoreset_mode=AutoresetMode.NEXT_STEP)
        self.rng = np.random.default_rng(seed)
        self.version = -1
        self.per_cycle = episodes_per_cycle
        self.recorder = Recorder(env, self.policy, policy_version=lambda: self.version,
                                 value_fn=lambda obs: 0.5, run_id=run_id, seed=seed)

    def policy(self, obs: np.ndarray) -> dict[str, Any]:
        n = len(obs)
        return {"action": self.rng.integers(2, size=n), "logprob": np.full(n, LOG_HALF),
                "value": np.zeros(n, np.float32)}

    def __call__(self, version: int) -> list[Episode]:
        self.version = version
        return self.recorder.collect_episodes(self.per_cycle)


def train_step(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    """A stand-in update: a policy-gradient style loss over the masked steps."""
    mask = batch["mask"]
    loss = -float((batch["logprob"] * batch["advantage"])[mask].mean())
    return {"loss": loss, "masked": int(mask.sum())}


@pytest.fixture
def field_map() -> FieldMap:
    return FieldMap.from_dict(MAP)


def test_full_loop_runs_checks_and_logs(field_map: FieldMap, tmp_path: Path) -> None:
    sampler = Sampler()
    log = RunLog(tmp_path / "runs.jsonl")
    report = full_loop(sampler, train_step, field_map, cycles=3, run_log=log, run_id="t1",
                       config={"envs": 2, "episodes": 4})
    assert [c.cycle for c in report.cycles] == [0, 1, 2]
    assert [c.policy_version for c in report.cycles] == [0, 1, 2]
    assert report.policy_version == 3
    for cycle in report.cycles:
        assert cycle.n_episodes == cycle.n_ended == 4
        assert cycle.batch_shape[0] == 4
        assert cycle.metrics["masked"] == cycle.n_steps
        assert cycle.rollout_s > 0 and cycle.train_s > 0
    assert report.n_steps == sampler.recorder.n_steps
    assert report.n_episodes == sampler.recorder.n_episodes == 12
    (run,) = log.read()
    assert run == report.run
    assert (run.run_id, run.n_steps, run.n_episodes, run.policy_version) == (
        "t1", report.n_steps, 12, 3)
    assert run.total_s >= run.rollout_s + run.train_s
    assert run.batch_shape == report.cycles[-1].batch_shape
    assert report.to_dict()["cycles"][1]["policy_version"] == 1


def test_full_loop_logs_the_trainers_metrics_per_cycle(field_map: FieldMap, tmp_path: Path) -> None:
    """The run log keeps each numeric metric per cycle (the learning curve) and its last value."""
    log = RunLog(tmp_path / "runs.jsonl")
    report = full_loop(Sampler(), train_step, field_map, cycles=3, run_log=log)
    (run,) = log.read()
    assert run.curves == {"loss": [c.metrics["loss"] for c in report.cycles],
                          "masked": [float(c.metrics["masked"]) for c in report.cycles]}
    assert run.metrics == {"loss": report.cycles[-1].metrics["loss"],
                           "masked": float(report.cycles[-1].n_steps)}
    assert run.cycles == 3


def test_a_stale_episode_is_caught_and_named(field_map: FieldMap) -> None:
    sampler = Sampler()
    kept: list[Episode] = []

    def sample(version: int) -> list[Episode]:
        episodes = sampler(version)
        if version == 0:
            kept.append(episodes.pop())  # an episode held back, like a slow queue would
        if version == 2:
            episodes.append(kept[0])
        return episodes

    with pytest.raises(ContractError) as info:
        full_loop(sample, train_step, field_map, cycles=3)
    stale = kept[0].episode_id
    assert str(info.value) == (
        f"cycles[2].policy_version[4]: stale policy version: expected 2..2 (current 2, "
        f"max_staleness 0), got 0 (episode {stale!r})")
    report = full_loop(serve_at_cycle_2(kept[0]), train_step, field_map, cycles=3,
                       max_staleness=2)
    assert report.policy_version == 3
    assert report.cycles[2].n_episodes == 5


def serve_at_cycle_2(stale: Episode) -> Callable[[int], list[Episode]]:
    """A fresh sampler that adds the held-back version-0 episode at version 2."""
    sampler = Sampler(run_id="again")

    def sample(version: int) -> list[Episode]:
        episodes = sampler(version)
        return [*episodes, stale] if version == 2 else episodes

    return sample


def test_a_sampler_that_ignores_the_version_is_caught(field_map: FieldMap) -> None:
    sampler = Sampler()
    batches: list[list[Episode]] = []

    def frozen(version: int) -> list[Episode]:
        batches.append(sampler(0))
        return batches[-1]

    with pytest.raises(ContractError) as info:
        full_loop(frozen, train_step, field_map, cycles=2)
    problems = info.value.problems
    assert len(problems) == 4
    assert {p.got for p in problems} == {f"0 (episode {e.episode_id!r})" for e in batches[1]}
    assert {p.message for p in problems} == {"stale policy version"}
    assert problems[0].path == "cycles[1].policy_version[0]"


def test_one_version_behind_passes_only_with_staleness_1(field_map: FieldMap) -> None:
    sampler = Sampler()

    def lagging(version: int) -> list[Episode]:
        return sampler(max(version - 1, 0))

    assert full_loop(lagging, train_step, field_map, cycles=3, max_staleness=1).policy_version == 3
    with pytest.raises(ContractError, match="stale policy version"):
        full_loop(lagging, train_step, field_map, cycles=3, start_version=3)


class DroppingMap:
    """A broken trainer-side mapping that loses the last episode."""

    def __init__(self, inner: FieldMap) -> None:
        self.inner = inner
        self.layout = inner.layout
        self.dropped: list[Episode] = []

    def to_train_batch(self, episodes: list[Any], **kwargs: Any) -> Any:
        self.dropped.append(episodes[-1])
        return self.inner.to_train_batch(episodes[:-1], **kwargs)


def test_lost_steps_and_episodes_are_caught(field_map: FieldMap) -> None:
    sampler = Sampler()
    broken = DroppingMap(field_map)
    with pytest.raises(ContractError) as info:
        full_loop(sampler, train_step, broken, cycles=1)
    (lost,) = broken.dropped
    total = sampler.recorder.n_steps
    assert [str(p) for p in info.value.problems] == [
        f"cycles[0].mask: mask count differs from the steps sampled: expected {total} real "
        f"steps (as sampled), got {total - len(lost)}",
        f"cycles[0].episode_id: episodes in the batch differ from the episodes sampled: expected "
        f"the 4 episodes sampled, got 3 (missing [{lost.episode_id!r}], not sampled [])",
    ]


def test_an_update_that_does_not_advance_the_version_is_caught(field_map: FieldMap) -> None:
    def stuck(batch: dict[str, np.ndarray]) -> dict[str, Any]:
        return {"policy_version": 0}

    with pytest.raises(ContractError) as info:
        full_loop(Sampler(), stuck, field_map, cycles=2)
    assert str(info.value) == (
        "cycles[0].policy_version: policy_version did not advance by one update: expected 1 "
        "(one update after 0), got 0")


def test_timestamps_out_of_order_are_caught(field_map: FieldMap) -> None:
    def clock() -> Iterator[float]:
        yield from [0.0, 1.0, 2.0, 1.5, 3.0]  # train starts before the rollout ended
        while True:
            yield 10.0

    ticks = clock()
    with pytest.raises(ContractError) as info:
        full_loop(Sampler(), train_step, field_map, cycles=1, clock=lambda: next(ticks))
    assert str(info.value) == (
        "cycles[0].timestamps: timestamps out of order: expected rollout end <= train start, "
        "got rollout end 2.0 > train start 1.5")


def test_an_episode_sampled_twice_is_caught(field_map: FieldMap) -> None:
    sampler = Sampler()

    sampled: list[Episode] = []

    def twice(version: int) -> list[Episode]:
        sampled.extend(sampler(version))
        return [*sampled, sampled[1]]

    with pytest.raises(ContractError) as info:
        full_loop(twice, train_step, field_map, cycles=1)
    assert str(info.value) == (
        "cycles[0].sample: episode sampled twice: expected each episode once, got repeated "
        f"ids [{sampled[1].episode_id!r}]")


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="^cycles must be >= 1, got 0$"):
        full_loop(Sampler(), train_step, FieldMap.from_dict(MAP), cycles=0)
    with pytest.raises(ValueError, match="^max_staleness must be >= 0, got -1$"):
        full_loop(Sampler(), train_step, FieldMap.from_dict(MAP), cycles=1, max_staleness=-1)


def test_step_records_from_any_sampler_are_accepted(field_map: FieldMap) -> None:
    sampler = Sampler()

    def records(version: int) -> list[dict[str, Any]]:
        sampler.version = version
        return list(sampler.recorder.record_episodes(3))

    report = full_loop(records, train_step, field_map, cycles=2)
    assert [c.n_episodes for c in report.cycles] == [3, 3]
    assert report.n_steps == sampler.recorder.n_steps


def test_map_as_a_dict_or_file_and_long_episodes_split(tmp_path: Path) -> None:
    path = tmp_path / "map.json"
    path.write_text(json.dumps(MAP))
    for fmap in (MAP, path, str(path)):
        report = full_loop(Sampler(), train_step, fmap, cycles=1, max_len=8)
        (cycle,) = report.cycles
        assert cycle.batch_shape[1] == 8
        assert cycle.batch_shape[0] > cycle.n_episodes  # split rows, same episodes counted
        assert cycle.metrics["masked"] == cycle.n_steps


def test_report_text_lists_cycles_and_checks(field_map: FieldMap) -> None:
    report = full_loop(Sampler(), train_step, field_map, cycles=2)
    lines = report.to_text().splitlines()
    assert lines[0] == (f"stage 3 (full loop): 2 cycles, {report.n_steps} steps, 8 episodes, "
                        "policy version 2")
    assert lines[1].split() == ["cycle", "version", "episodes", "steps", "batch", "rollout_s",
                                "train_s", "loss", "masked"]
    first = report.cycles[0]
    assert lines[2].split()[:5] == ["0", "0", "4", str(first.n_steps),
                                    "x".join(map(str, first.batch_shape))]
    assert lines[4:] == [f"ok: {check}" for check in FULL_LOOP_CHECKS]
    assert report.to_dict()["stage"] == "full_loop"


def test_train_fn_returns_metrics_or_none(field_map: FieldMap) -> None:
    report = full_loop(Sampler(), lambda batch: None, field_map, cycles=1)
    assert report.cycles[0].metrics == {}
    with pytest.raises(TypeError, match="^train_fn must return a mapping of metrics or None, "
                       "got float$"):
        full_loop(Sampler(), lambda batch: 0.5, field_map, cycles=1)


def test_loop_and_cycle_reports_follow_the_report_protocol(field_map: FieldMap) -> None:
    report = full_loop(Sampler(), train_step, field_map, cycles=2)
    assert isinstance(report, Report) and report.ok and report.warnings == []
    assert (report.exit_code(), report.exit_code(strict=True)) == (0, 0)
    assert json.loads(report.render("json")) == report.to_dict()
    assert report.render("text") == report.to_text()
    cycle = report.cycles[1]
    assert isinstance(cycle, Report) and cycle.ok and cycle.exit_code() == 0
    assert json.loads(cycle.render("json")) == cycle.to_dict()
    assert cycle.to_text() == (
        f"cycle 1: policy version 1, {cycle.n_episodes} episodes ({cycle.n_ended} ended), "
        f"{cycle.n_steps} steps, batch {'x'.join(map(str, cycle.batch_shape))}, rollout "
        f"{cycle.rollout_s:.3f} s, train {cycle.train_s:.3f} s")


def test_full_loop_takes_the_step_model_and_the_batch_model(field_map: FieldMap) -> None:
    sampler = Sampler()

    def records(version: int) -> list[dict[str, Any]]:
        sampler.version = version
        return list(sampler.recorder.record_episodes(2))

    class NarrowStep(RolloutStep):
        observation: Tensor("float32", [3], role="observation")

    class NarrowBatch(TrainBatch):
        obs: Tensor("float32", ["B", "T", 3], role="observation")

    with pytest.raises(ContractError, match=r"observation: wrong shape"):
        full_loop(records, train_step, field_map, cycles=1, model=NarrowStep)
    with pytest.raises(ContractError, match=r"obs: wrong shape: expected float32\[B, T, 3\]"):
        full_loop(records, train_step, field_map, cycles=1, batch_model=NarrowBatch)


def test_run_notes_say_how_the_batch_was_made(field_map: FieldMap, tmp_path: Path) -> None:
    log = RunLog(tmp_path / "runs.jsonl")
    full_loop(Sampler(), train_step, field_map, cycles=1, run_log=log, notes="lr 3e-4 ")
    full_loop(Sampler(), train_step, MAP, cycles=1, run_log=log)
    first, second = log.read()
    made = ("obs ← observation; done ← terminated OR truncated; advantage by GAE γ=0.99 "
            "λ=0.95, truncation "
            "bootstrapped from next_value; mask from padding")
    assert first.notes == made + "; lr 3e-4"
    assert second.notes == made


FOREIGN_TRAINER = {  # a trainer reading its own names, time-major, no x-gyre keys
    "type": "object", "required": ["observations", "actions", "advantages", "log_probs"],
    "properties": {
        "observations": {"type": "array", "items": {"type": "array", "items": {
            "type": "array", "items": {"type": "number"}}}},
        "actions": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        "advantages": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "log_probs": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "valid": {"type": "array", "items": {"type": "array", "items": {"type": "boolean"}}}}}
FOREIGN_MAP = {"gyre_field_map": 1, "fields": {
    "observations": {"from": "observation", "then": [{"op": "transpose", "axes": [1, 0, 2]}]},
    "actions": {"from": "action", "then": [{"op": "transpose", "axes": [1, 0]}]},
    "advantages": {"op": "gae", "from": ["reward", "value", "terminated", "truncated",
                                         "next_value"], "gamma": 0.99, "lam": 0.95,
                   "then": [{"op": "transpose", "axes": [1, 0]}]},
    "log_probs": {"from": "logprob", "then": [{"op": "transpose", "axes": [1, 0]}]},
    "valid": {"op": "mask", "then": [{"op": "transpose", "axes": [1, 0]}]}}}


def foreign_train_step(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    """A trainer that was never renamed: its own keys, time-major [T, B]."""
    valid = batch["valid"]
    assert batch["observations"].shape[:2] == valid.shape and "obs" not in batch
    loss = -float((batch["log_probs"] * batch["advantages"])[valid].mean())
    return {"loss": loss, "masked": int(valid.sum())}


def test_full_loop_runs_a_trainer_with_its_own_names() -> None:
    sampler = Sampler()
    report = full_loop(sampler, foreign_train_step, FOREIGN_MAP, cycles=2,
                       trainer=FOREIGN_TRAINER, batch_dims="T,B")
    assert report.policy_version == 2
    assert [c.metrics["masked"] for c in report.cycles] == [c.n_steps for c in report.cycles]
    with pytest.raises(ValueError, match="not both"):
        full_loop(sampler, foreign_train_step, FOREIGN_MAP, cycles=1,
                  trainer=FOREIGN_TRAINER, batch_dims="T,B", batch_model=TrainBatch)


def test_full_loop_with_a_trainer_schema_still_catches_a_stale_episode() -> None:
    sampler = Sampler()
    kept: list[Episode] = []

    def sample(version: int) -> list[Episode]:
        episodes = sampler(version)
        if version == 0:
            kept.append(episodes.pop())
        if version == 1:
            episodes.append(kept[0])
        return episodes

    with pytest.raises(ContractError, match="stale policy version"):
        full_loop(sample, foreign_train_step, FOREIGN_MAP, cycles=2, trainer=FOREIGN_TRAINER,
                  batch_dims="T,B")
