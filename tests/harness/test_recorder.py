"""The recorder on real Gymnasium CartPole-v1 envs, checked against a manual single-env replay."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from gyre_contract.core._errors import ContractError
from gyre_contract.core._validate import validate_episode
from gyre_contract.harness._recorder import Recorder, TurnRecorder
from gyre_contract.io._reading import episodes_from_records
from gyre_contract.pinned import LLMStep

MAX_STEPS = 15
SEED = 7
LOG_HALF = float(np.log(np.float32(0.5)))


class CountSteps(gym.Wrapper):
    """Counts the sub-env's real `step` calls: each must become exactly one record."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        return self.env.step(action)


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)


def counted_cartpole() -> gym.Env:
    return CountSteps(cartpole())


def vector(mode: AutoresetMode, n: int = 3) -> SyncVectorEnv:
    return SyncVectorEnv([counted_cartpole for _ in range(n)], autoreset_mode=mode)


def random_policy(n: int | None, seed: int = 0) -> Callable[[Any], dict[str, Any]]:
    """Uniform random actions with their log-prob; batched when `n` is given."""
    rng = np.random.default_rng(seed)

    def policy(obs: Any) -> dict[str, Any]:
        if n is None:
            return {"action": int(rng.integers(2)), "logprob": np.float32(LOG_HALF)}
        return {"action": rng.integers(2, size=n), "logprob": np.full(n, LOG_HALF, np.float32)}

    return policy


def value_fn(obs: np.ndarray) -> float:
    return float(obs[0] + 10.0)


def by_env(records: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Records of each sub-env in order (episode ids are run-<env>-<n>)."""
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        out[int(r["episode_id"].split("-")[1])].append(r)
    return out


def replay(records: list[dict[str, Any]], seed: int) -> int:
    """Replays one sub-env's records on a fresh single env seeded alike; returns episodes ended.

    Every observation, reward and flag must match, and a done step's `next_observation` must be
    the true final observation of that manual run.
    """
    env = cartpole()
    obs, _ = env.reset(seed=seed)
    ended = 0
    for r in records:
        np.testing.assert_array_equal(r["observation"], obs)
        obs, reward, terminated, truncated, _ = env.step(r["action"])
        assert (r["reward"], r["terminated"], r["truncated"]) == (reward, terminated, truncated)
        if "next_observation" in r:
            np.testing.assert_array_equal(r["next_observation"], obs)
        if terminated or truncated:
            ended += 1
            obs, _ = env.reset()
    env.close()
    return ended


def check_episode_rules(records: list[dict[str, Any]], *, complete: bool = False) -> None:
    validate_episode(records, require_complete=complete)
    per_episode: dict[str, list[int]] = defaultdict(list)
    for r in records:
        per_episode[r["episode_id"]].append(r["step"])
    for steps in per_episode.values():
        assert steps == list(range(len(steps)))


def check_bootstrap_fields(records: list[dict[str, Any]]) -> None:
    for r in records:
        if r["truncated"] and not r["terminated"]:
            assert r["next_value"] == value_fn(r["next_observation"])
        if r["terminated"]:
            assert "next_observation" in r
            assert "next_value" not in r


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP,
                                  AutoresetMode.DISABLED])
def test_vector_env_records_match_a_manual_run(mode: AutoresetMode) -> None:
    horizon = 80
    env = vector(mode)
    recorder = Recorder(env, random_policy(3), policy_version=4, value_fn=value_fn,
                        run_id="run", seed=SEED)
    records = list(recorder.record_steps(horizon))
    check_episode_rules(records)
    check_bootstrap_fields(records)
    assert recorder.n_terminated > 0
    assert recorder.n_truncated > 0
    assert all(r["reward"] == 1.0 for r in records)  # a phantom reset step has reward 0
    assert {r["policy_version"] for r in records} == {4}
    ended = 0
    for env_index, env_records in by_env(records).items():
        ended += replay(env_records, SEED + env_index)
        assert len(env_records) == env.envs[env_index].steps
        if mode != AutoresetMode.NEXT_STEP:
            assert len(env_records) == horizon
    assert ended == recorder.n_episodes == recorder.n_terminated + recorder.n_truncated
    assert recorder.n_steps == len(records)
    assert recorder.env_steps == horizon
    if mode == AutoresetMode.NEXT_STEP:  # one env step per reset is not a transition
        assert len(records) < 3 * horizon


def test_same_step_truncation_keeps_the_final_obs_not_the_reset_obs() -> None:
    recorder = Recorder(vector(AutoresetMode.SAME_STEP, n=2), random_policy(2, seed=3),
                        policy_version=0, value_fn=value_fn, seed=SEED)
    records = list(recorder.record_steps(60))
    truncated = [i for i, r in enumerate(records) if r["truncated"] and not r["terminated"]]
    assert truncated
    for env_records in by_env(records).values():
        for i, r in enumerate(env_records[:-1]):
            if r["terminated"] or r["truncated"]:
                next_first = env_records[i + 1]
                assert next_first["step"] == 0
                assert not np.array_equal(r["next_observation"], next_first["observation"])


def test_single_env_episodes_are_complete_and_replayable() -> None:
    recorder = Recorder(cartpole(), random_policy(None), policy_version=1, value_fn=value_fn,
                        run_id="solo", seed=SEED)
    records = list(recorder.record_episodes(12))
    check_episode_rules(records, complete=True)
    check_bootstrap_fields(records)
    ids = list(dict.fromkeys(r["episode_id"] for r in records))
    assert ids == [f"solo-0-{n}" for n in range(12)]
    assert replay(records, SEED) == 12 == recorder.n_episodes
    assert recorder.n_terminated > 0
    assert recorder.n_truncated > 0
    assert recorder.autoreset_mode == "single"


def test_vector_record_episodes_gives_exactly_n_complete_episodes() -> None:
    recorder = Recorder(vector(AutoresetMode.NEXT_STEP, n=4), random_policy(4), policy_version=0,
                        seed=SEED)
    records = list(recorder.record_episodes(6))
    check_episode_rules(records, complete=True)
    assert len({r["episode_id"] for r in records}) == 6 == recorder.n_episodes
    more = list(recorder.record_episodes(2))
    check_episode_rules(more, complete=True)
    assert not {r["episode_id"] for r in more} & {r["episode_id"] for r in records}
    assert recorder.n_episodes == 8


def test_record_episodes_with_fewer_episodes_than_envs() -> None:
    recorder = Recorder(vector(AutoresetMode.SAME_STEP, n=4), random_policy(4), policy_version=0,
                        seed=SEED)
    records = list(recorder.record_episodes(2))
    check_episode_rules(records, complete=True)
    assert sorted({r["episode_id"] for r in records}) == ["run-0-0", "run-1-0"]


def test_open_episodes_carry_a_bootstrap_and_continue_on_the_next_call() -> None:
    recorder = Recorder(vector(AutoresetMode.NEXT_STEP, n=2), random_policy(2), policy_version=0,
                        value_fn=value_fn, seed=SEED)
    first = list(recorder.record_steps(5))  # shorter than any CartPole episode can be
    assert [r["episode_id"] for r in first[-2:]] == ["run-0-0", "run-1-0"]
    for r in first[-2:]:
        assert not (r["terminated"] or r["truncated"])
        assert r["next_value"] == value_fn(r["next_observation"])
    assert all("next_observation" not in r for r in first[:-2])
    second = list(recorder.record_steps(30))
    check_episode_rules(first + second)
    assert second[0]["episode_id"] == "run-0-0"
    assert second[0]["step"] == 5
    np.testing.assert_array_equal(second[0]["observation"], first[-2]["next_observation"])


def test_policy_version_is_read_from_a_callable_each_step() -> None:
    versions = iter(range(100))
    recorder = Recorder(cartpole(), random_policy(None), policy_version=lambda: next(versions),
                        seed=SEED)
    records = list(recorder.record_steps(6))
    assert [r["policy_version"] for r in records] == [0, 1, 2, 3, 4, 5]


def test_plain_action_policy_and_float_obs_types() -> None:
    recorder = Recorder(cartpole(), lambda obs: int(obs[2] > 0), policy_version=0, seed=SEED)
    records = list(recorder.record_episodes(1))
    assert records[-1]["truncated"]  # the pole-angle policy balances past the time limit
    assert len(records) == MAX_STEPS
    assert set(records[0]) == {"observation", "action", "reward", "step", "episode_id",
                               "terminated", "truncated", "policy_version"}
    assert records[0]["observation"].dtype == np.float32
    assert type(records[0]["action"]) is int


def test_tuple_policy_output_is_refused() -> None:
    recorder = Recorder(cartpole(), lambda obs: (1, -0.7), policy_version=0, seed=SEED)
    with pytest.raises(ContractError) as info:
        next(recorder.record_steps(1))
    assert str(info.value) == (
        "policy: policy output is ambiguous (return {'action': a, 'logprob': lp}): expected an "
        "action or a dict with keys among action, logprob, entropy, value, got tuple of 2")


def test_unknown_policy_output_key_is_refused() -> None:
    recorder = Recorder(cartpole(), lambda obs: {"action": 1, "log_prob": -0.7},
                        policy_version=0, seed=SEED)
    with pytest.raises(ContractError) as info:
        next(recorder.record_steps(1))
    assert str(info.value) == (
        "policy: bad policy output keys: expected a dict with 'action' and optional logprob, "
        "entropy, value, got object with keys [action, log_prob]")


def test_invalid_step_is_raised_by_validation() -> None:
    recorder = Recorder(cartpole(), lambda obs: {"action": 1, "logprob": 0.5},
                        policy_version=0, seed=SEED)
    with pytest.raises(ContractError, match="positive log-probability"):
        next(recorder.record_steps(1))


def test_not_an_env_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="^expected a gymnasium Env or VectorEnv, got dict$"):
        Recorder({}, lambda obs: 0, policy_version=0)


def test_importing_the_recorder_does_not_import_gymnasium() -> None:
    code = "import sys, gyre_contract.harness._recorder; print('gymnasium' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_collect_episodes_gives_columns_ready_for_collate() -> None:
    from gyre_contract.trainer._collation import collate

    recorder = Recorder(vector(AutoresetMode.NEXT_STEP, n=2), random_policy(2), policy_version=2,
                        value_fn=value_fn, seed=SEED)
    episodes = recorder.collect_episodes(5)
    assert len(episodes) == 5 == len({e.episode_id for e in episodes})
    for e in episodes:
        assert e.lines is None
        assert not e.is_open
        assert e.columns["observation"].shape == (len(e), 4)
        assert e.columns["observation"].dtype == np.float32
        assert e.columns["action"].dtype == np.int64
        assert list(e.columns["step"]) == list(range(len(e)))
        if e.truncated:
            assert e.columns["next_value"][-1] == value_fn(e.columns["next_observation"][-1])
    batch = collate(episodes)
    assert batch["mask"].sum() == sum(len(e) for e in episodes)
    assert list(batch["policy_version"]) == [2] * 5


def test_episodes_from_records_groups_interleaved_steps() -> None:
    recorder = Recorder(vector(AutoresetMode.SAME_STEP, n=3), random_policy(3), policy_version=0,
                        value_fn=value_fn, seed=SEED)
    records = list(recorder.record_steps(30))
    episodes = episodes_from_records(records)
    assert sum(len(e) for e in episodes) == len(records)
    assert [e.episode_id for e in episodes] == list(dict.fromkeys(r["episode_id"] for r in records))
    assert sum(not e.is_open for e in episodes) == recorder.n_episodes
    first = [r for r in records if r["episode_id"] == episodes[0].episode_id]
    np.testing.assert_array_equal(episodes[0].columns["observation"],
                                  np.stack([r["observation"] for r in first]))


def test_episodes_from_records_refuses_a_phantom_step() -> None:
    recorder = Recorder(cartpole(), random_policy(None), policy_version=0, seed=SEED)
    records = list(recorder.record_episodes(1))
    phantom = dict(records[-1], step=len(records), reward=0.0, terminated=False, truncated=False)
    del phantom["next_observation"]
    with pytest.raises(ContractError) as info:
        episodes_from_records([*records, phantom])
    (problem,) = info.value.problems
    assert problem.path == f"records[{len(records)}].episode_id"
    assert problem.message == "step after the episode ended (a phantom reset transition?)"


def test_an_abandoned_generator_never_leaves_a_gap() -> None:
    recorder = Recorder(vector(AutoresetMode.NEXT_STEP, n=3), random_policy(3), policy_version=0,
                        seed=SEED)
    stream = recorder.record_steps(10)
    taken = [next(stream) for _ in range(4)]  # the second env step is only half delivered
    stream.close()
    rest = list(recorder.record_steps(10))
    check_episode_rules(taken + rest)
    assert [r["episode_id"] for r in rest[:3]] == ["run-0-1", "run-1-1", "run-2-1"]
    assert [r["step"] for r in rest[:3]] == [0, 0, 0]


def test_a_record_that_fails_validation_leaves_the_recorder_usable() -> None:
    version: list[Any] = [0]
    recorder = Recorder(cartpole(), random_policy(None), policy_version=lambda: version[0],
                        seed=SEED)
    stream = recorder.record_steps(5)
    assert [r["step"] for r in (next(stream), next(stream))] == [0, 1]
    version[0] = 1.5  # not an int64: the third record fails validation
    with pytest.raises(ContractError, match="^policy_version: "):
        next(stream)
    version[0] = 2
    rest = list(recorder.record_steps(3))
    assert [(r["episode_id"], r["step"]) for r in rest] == [("run-0-1", 0), ("run-0-1", 1),
                                                            ("run-0-1", 2)]


def test_continuous_actions_on_pendulum() -> None:
    env = SyncVectorEnv([lambda: gym.make("Pendulum-v1", max_episode_steps=12)] * 2,
                        autoreset_mode=AutoresetMode.SAME_STEP)
    rng = np.random.default_rng(0)

    def policy(obs: np.ndarray) -> dict[str, Any]:
        return {"action": rng.uniform(-2, 2, size=(2, 1)).astype(np.float32),
                "logprob": np.full((2, 1), -1.4, np.float32)}

    recorder = Recorder(env, policy, policy_version=0, value_fn=lambda obs: 0.25, seed=SEED)
    records = list(recorder.record_episodes(3))
    check_episode_rules(records, complete=True)
    assert len(records) == 36  # Pendulum never terminates: every episode is truncated at 12
    assert recorder.n_truncated == 3
    assert records[0]["action"].dtype == np.float32
    assert records[0]["action"].shape == (1,)
    assert all(r["next_value"] == 0.25 for r in records if r["truncated"])


def test_dict_observations_are_recorded_per_modality() -> None:
    from gymnasium import spaces
    from gymnasium.wrappers import TransformObservation

    def make() -> gym.Env:
        env = cartpole()
        space = spaces.Dict({"state": env.observation_space,
                             "x": spaces.Box(-5.0, 5.0, (1,), np.float32)})
        return TransformObservation(env, lambda o: {"state": o, "x": o[:1].copy()}, space)

    recorder = Recorder(SyncVectorEnv([make] * 2), random_policy(2), policy_version=0, seed=SEED)
    records = list(recorder.record_episodes(2))
    check_episode_rules(records, complete=True)
    first, last = records[0], records[-1]
    assert set(first["observation"]) == {"state", "x"}
    assert first["observation"]["state"].shape == (4,)
    assert first["observation"]["x"][0] == first["observation"]["state"][0]
    assert last["next_observation"]["x"][0] == last["next_observation"]["state"][0]


def test_episodes_from_records_goes_through_the_one_io_loop() -> None:
    """No grouping loop of its own: io's `StepChecker` and `EpisodeAssembler` do it, so a record
    that fails validation still advances its episode, as in a file (no second problem)."""
    import inspect

    from gyre_contract.harness import _recorder as module
    source = inspect.getsource(module)
    assert "episode_from_steps" not in source and "EpisodeAssembler(" in source
    recorder = Recorder(cartpole(), random_policy(None), policy_version=0, seed=SEED)
    records = list(recorder.record_episodes(1))
    assert len(records) >= 3
    records[1] = dict(records[1], reward=None)
    with pytest.raises(ContractError) as info:
        episodes_from_records(records)
    assert [(p.path, p.rule) for p in info.value.problems] == [("records[1].reward",
                                                                "field.not_null")]


def test_a_failed_record_of_any_mapping_type_still_advances_its_episode() -> None:
    """The records are `Mapping`s: a read-only one that fails validation advances its episode as
    a dict does (it was left unread, and the next step was blamed for the gap)."""
    from types import MappingProxyType

    recorder = Recorder(cartpole(), random_policy(None), policy_version=0, seed=SEED)
    records = list(recorder.record_episodes(1))
    assert len(records) >= 3
    records[1] = dict(records[1], reward="bad")
    for wrap in (dict, MappingProxyType):
        with pytest.raises(ContractError) as info:
            episodes_from_records([wrap(r) for r in records])
        assert [p.path for p in info.value.problems] == ["records[1].reward"], wrap


# -- Tuple observation spaces (reliability round 2) -----------------------------------------------

def blackjack_row(obs: tuple) -> dict[str, int]:
    """What the record holds for one Blackjack observation: its components as modalities."""
    return {str(k): int(part) for k, part in enumerate(obs)}


def replay_blackjack(records: list[dict[str, Any]], seed: int) -> int:
    """`replay` for Blackjack: each record against a fresh single env seeded alike."""
    env = gym.make("Blackjack-v1")
    obs, _ = env.reset(seed=seed)
    ended = 0
    for r in records:
        assert r["observation"] == blackjack_row(obs)
        obs, reward, terminated, truncated, _ = env.step(r["action"])
        assert (r["reward"], r["terminated"], r["truncated"]) == (reward, terminated, truncated)
        if terminated or truncated:
            assert r["next_observation"] == blackjack_row(obs)
            ended += 1
            obs, _ = env.reset()
    return ended


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP,
                                  AutoresetMode.DISABLED])
@pytest.mark.parametrize("n", [3, 4])
def test_a_tuple_observation_space_records_each_envs_own_row(n: int, mode: AutoresetMode,
                                                             tmp_path) -> None:
    """SyncVectorEnv of Blackjack-v1 (a Tuple space) once recorded the three player sums as env
    0's observation, and 4 envs raised IndexError: `tree[i]` took the i-th component."""
    from gyre_contract.io._reading import read_episodes
    from gyre_contract.io._validation import validate_file
    from gyre_contract.io._writer import write_steps

    env = SyncVectorEnv([lambda: gym.make("Blackjack-v1") for _ in range(n)],
                        autoreset_mode=mode)
    rng = np.random.default_rng(1)
    recorder = Recorder(env, lambda obs: rng.integers(2, size=n), policy_version=0, seed=SEED)
    records = list(recorder.record_steps(12))
    assert recorder.n_episodes > n  # Blackjack episodes are short: resets are crossed
    check_episode_rules(records)
    assert set(records[0]["observation"]) == {"0", "1", "2"}
    ended = sum(replay_blackjack(rs, SEED + i) for i, rs in by_env(records).items())
    assert ended == recorder.n_episodes
    path = tmp_path / "blackjack.jsonl"
    write_steps(path, records)
    assert validate_file(path).ok
    first = next(iter(read_episodes(path)))
    assert first.columns["observation"]["0"].dtype == np.int64


def test_a_single_env_tuple_observation_is_recorded_as_modalities_too() -> None:
    recorder = Recorder(gym.make("Blackjack-v1"), lambda obs: 0, policy_version=0, seed=SEED)
    records = list(recorder.record_episodes(3))
    assert replay_blackjack(records, SEED) == 3
    episodes = recorder.collect_episodes(2)
    assert set(episodes[0].columns["observation"]) == {"0", "1", "2"}


class NestedTuple(gym.Env):
    """An env whose Tuple observation holds a Tuple: refused, never recorded half right."""

    def __init__(self, space: gym.Space) -> None:
        self.observation_space = space
        self.action_space = gym.spaces.Discrete(2)


@pytest.mark.parametrize("space", [
    gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Tuple((gym.spaces.Discrete(3),)))),
    gym.spaces.Tuple((gym.spaces.Dict({"a": gym.spaces.Discrete(2)}),)),
    gym.spaces.Dict({"a": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(2)))}),
], ids=["tuple-in-tuple", "dict-in-tuple", "tuple-in-dict"])
def test_a_nested_tuple_space_is_refused_clearly(space: gym.Space) -> None:
    with pytest.raises(TypeError, match=r"nests a Tuple or Dict inside a Tuple or Dict; .*"
                                        r"FlattenObservation"):
        Recorder(NestedTuple(space), lambda obs: 0, policy_version=0)
    vec = SyncVectorEnv([lambda: NestedTuple(space)])
    with pytest.raises(TypeError, match="nests a Tuple or Dict"):
        Recorder(vec, lambda obs: np.zeros(1, np.int64), policy_version=0)


def test_a_policy_whose_action_changes_dtype_within_an_episode_is_refused() -> None:
    """`collect_episodes` once cast it to the first step's dtype without a word."""
    actions = iter([np.array([1]), np.array([0.5])] * 50)
    recorder = Recorder(gym.make("Pendulum-v1"), lambda obs: next(actions), policy_version=0,
                        seed=SEED)
    with pytest.raises(ContractError) as err:
        recorder.collect_episodes(1)
    assert [(p.rule, str(p)) for p in err.value.problems] == [
        ("episode.dtype_fixed", "action: dtype changed within the episode: expected int64 as "
                                "earlier in the episode, got float32[1]")]


# -- TurnRecorder.group: what an LLM sampler hands over ------------------------------------------

PROMPT = [1, 12, 3]


@dataclass(frozen=True)
class Logprob:
    """Duck-typed like vLLM's `Logprob` (vLLM itself is never imported)."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


def turn_recorder() -> TurnRecorder:
    return TurnRecorder(policy_version=0, run_id="gen", model=LLMStep)


def test_rewards_of_the_wrong_length_name_the_argument_and_both_lengths() -> None:
    """Once a raw `ValueError` from `zip`."""
    completions = [{"action": np.array([5, 2])}, {"action": np.array([6, 2])}]
    with pytest.raises(ContractError) as err:
        turn_recorder().group(PROMPT, completions, [1.0])
    assert str(err.value) == ("rewards: group: rewards and completions differ in length: "
                              "expected 2 rewards (one per completion), got 1 rewards for 2 "
                              "completions")
    with pytest.raises(ContractError, match="completions\\[1\\].action: group: a completion "
                                            "without its action"):
        turn_recorder().group(PROMPT, [completions[0], {"logprob": [-0.1]}], [1.0, 0.0])
    with pytest.raises(TypeError, match="completions\\[0\\] must be a mapping"):
        turn_recorder().group(PROMPT, [np.array([5, 2])], [1.0])


def test_a_completion_cut_by_the_length_limit_is_truncated_not_terminated() -> None:
    """vLLM `finish_reason == "length"`: once it could only be recorded terminated too."""
    recorder = turn_recorder()
    cut, done = recorder.group(PROMPT, [{"action": np.array([5, 6]), "truncated": True},
                                        {"action": np.array([5, 2])}], (r for r in [0.0, 1.0]))
    assert (cut["truncated"], cut["terminated"]) == (True, False)
    assert (done["truncated"], done["terminated"]) == (False, True)
    one = recorder.turn(PROMPT, np.array([7, 7]), reward=0.0, truncated=True)
    assert (one["truncated"], one["terminated"]) == (True, False)
    assert recorder.open_episodes == []  # a truncated episode has ended


def test_vllm_style_per_position_logprob_dicts_give_the_chosen_tokens_logprob() -> None:
    """Once "ragged or mixed nested list"; each position holds the top-k candidates and the
    generated token (not always the most likely one)."""
    action = [5, 9, 2]
    logprobs = [{5: Logprob(-0.1, 1, "a"), 7: Logprob(-2.5, 2, "b")},
                {8: Logprob(-0.3, 1, "c"), 9: Logprob(-1.4, 2, "d")},
                {2: Logprob(-0.05, 1, "</s>")}]
    ref = [{5: -0.2}, {9: -1.0, 8: -0.9}, {2: -0.1}]
    record, = turn_recorder().group(PROMPT, [{"action": np.array(action), "logprob": logprobs,
                                              "ref_logprob": ref}], [1.0])
    assert record["logprob"].tolist() == pytest.approx([-0.1, -1.4, -0.05])
    assert record["ref_logprob"].tolist() == pytest.approx([-0.2, -1.0, -0.1])
    assert record["logprob"].dtype == np.float32


@pytest.mark.parametrize("logprob,message", [
    ([{5: Logprob(-0.1)}, {8: Logprob(-0.3)}], "completions[0].logprob[1]: no log-prob for the "
     "generated token: expected the log-prob of the generated token 9, got token ids [8]"),
    ([{5: Logprob(-0.1)}], "completions[0].logprob: per-position log-probs do not match the "
     "generated tokens: expected 2 positions (one per generated token), got 1 positions"),
    ([{5: Logprob(-0.1)}, -0.3], "completions[0].logprob[1]: per-position log-probs mix dicts"),
    ([{5: Logprob("x")}, {9: -0.3}], "completions[0].logprob[0]: no log-prob for the generated"),
])
def test_per_position_logprobs_that_do_not_fit_name_the_position(logprob, message) -> None:
    with pytest.raises(ContractError) as err:
        turn_recorder().group(PROMPT, [{"action": np.array([5, 9]), "logprob": logprob}], [1.0])
    assert str(err.value).startswith(message)
