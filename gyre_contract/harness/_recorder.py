"""Record validated rollout step records (docs/contract.md §3) from a Gymnasium env or vector env.

Why: the env side of the handoff breaks in three known ways — the phantom reset step of a vector
env with NEXT_STEP autoreset recorded as a transition, a time-limit cut stored as a termination,
and the reset observation stored where the final one belongs. The recorder keeps `terminated` and
`truncated` apart, never records a reset step, and takes the true final observation of a done
step in every autoreset mode. Gymnasium is an optional extra, imported only when a recorder is made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gyre_contract.adapters._generation import chosen_logprobs
from gyre_contract.core._errors import ContractError, Problem, describe
from gyre_contract.core._models import RolloutStep, RolloutStepV1
from gyre_contract.core._validate import EpisodeTracker, validate_step
from gyre_contract.io._assembly import EpisodeAssembler
from gyre_contract.io._checking import StepChecker
from gyre_contract.io._episodes import Episode

Policy = Callable[[Any], Any]
"""`policy(obs) -> action`, or `-> {"action": a, "logprob": lp, "entropy": h, "value": v}`.

A vector env's policy gets the batched observation `[N, ...]` and returns `[N, ...]` values."""

ValueFn = Callable[[Any], float]
"""`value_fn(obs) -> float`: V(s) of one (unbatched) observation, used for `next_value`."""

POLICY_KEYS = ("action", "logprob", "entropy", "value")


@dataclass(frozen=True, slots=True)
class _Transition:
    """One real transition of one sub-env; `final_obs` is s_{t+1}, the true final obs when done."""

    env_index: int
    reward: float
    terminated: bool
    truncated: bool
    final_obs: Any


class Recorder:
    """Wraps a Gymnasium `Env` or `VectorEnv` and yields validated step records (plain dicts).

    Episode ids are `f"{run_id}-{env_index}-{n}"` (n counts the episodes of that sub-env), `step`
    counts from 0 within each episode, and `policy_version` is read from the caller (an int, or a
    callable read once per env step) so a sampler running behind the trainer says so.

    Every record is validated, and the episode rules are applied to what it records (a policy
    whose action is an int on one step and a float on the next raises ContractError).
    Done steps carry `next_observation` (the true final observation). Truncated steps that are not
    terminated, and the last recorded step of an episode left open by `record_steps`, also carry
    `next_value = value_fn(next_observation)` when a `value_fn` is given: that is the bootstrap the
    trainer needs.
    """

    def __init__(
        self,
        env: Any,
        policy: Policy,
        *,
        policy_version: int | Callable[[], int],
        value_fn: ValueFn | None = None,
        run_id: str = "run",
        seed: int | None = None,
        model: type[RolloutStepV1] = RolloutStep,
    ) -> None:
        self.policy = policy
        self.value_fn = value_fn
        self.run_id = run_id
        self.seed = seed
        self.model = model
        self._policy_version = policy_version
        self._driver = _make_driver(env)
        self._tracker = EpisodeTracker(model)  # the episode rules hold for what it records too
        self.num_envs = self._driver.num_envs
        self._obs: Any = None
        self._interrupted = False
        self._episode_counts = [0] * self.num_envs
        self._episode_ids: list[str | None] = [None] * self.num_envs
        self._steps = [0] * self.num_envs
        self.n_steps = 0
        self.n_episodes = 0
        self.n_terminated = 0
        self.n_truncated = 0
        self.env_steps = 0

    @property
    def autoreset_mode(self) -> str:
        """`single` (a plain env), or a vector env's `next_step`, `same_step` or `disabled`."""
        return self._driver.mode

    def record_steps(self, horizon: int) -> Iterator[dict[str, Any]]:
        """Step the env `horizon` times and yield each real transition's record.

        Episodes left open at the end continue, with the same ids, on the next call; their last
        record here carries `next_observation` (and `next_value` with a `value_fn`). The env is
        reset first on the first call, after `record_episodes`, and after a generator that was
        not consumed to its end (its episodes stay open: they are never continued with a gap).
        """
        if self._obs is None or self._interrupted or None in self._episode_ids:
            self._start(range(self.num_envs))
        for k in range(horizon):
            for record, _step in self._step_once(last=k == horizon - 1, restart=lambda i: True):
                yield record

    def record_episodes(self, n: int) -> Iterator[dict[str, Any]]:
        """Reset the env and yield the records of exactly `n` complete episodes.

        Sub-envs stop being recorded once `n` episodes have started; the env keeps stepping until
        every started episode has ended. Open episodes of an earlier `record_steps` are abandoned.
        """
        for record, _step in self._episode_steps(n):
            yield record

    def collect_episodes(self, n: int) -> list[Episode]:
        """`n` complete episodes as `Episode` columns (in order of ending), ready for `collate`.

        The steps go through io's one loop (`StepChecker` → `EpisodeAssembler`), as a file's do:
        episode rules applied, grouped by id.
        """
        checker = StepChecker(self.model)
        assembler = EpisodeAssembler(self.model)
        episodes: list[Episode] = []
        for index, (_record, step) in enumerate(self._episode_steps(n)):
            episode = assembler.add(*checker.step(index, step))
            if episode is not None:
                episode.lines = None  # not read from a file
                episodes.append(episode)
        return episodes

    def _episode_steps(self, n: int) -> Iterator[tuple[dict[str, Any], RolloutStepV1]]:
        started = min(n, self.num_envs)
        self._start(range(started))
        done_before = self.n_episodes

        def restart(env_index: int) -> bool:
            nonlocal started
            if started >= n:
                return False
            started += 1
            return True

        while self.n_episodes - done_before < n:
            yield from self._step_once(last=False, restart=restart)

    def _start(self, recorded: range) -> None:
        seed = self.seed if self._obs is None else None
        self._obs = self._driver.reset(seed)
        self._interrupted = False
        self._episode_ids = [None] * self.num_envs
        for i in recorded:
            self._begin_episode(i)

    def _begin_episode(self, env_index: int) -> None:
        n = self._episode_counts[env_index]
        self._episode_counts[env_index] = n + 1
        self._episode_ids[env_index] = f"{self.run_id}-{env_index}-{n}"
        self._steps[env_index] = 0

    def _step_once(
        self, *, last: bool, restart: Callable[[int], bool],
    ) -> Iterator[tuple[dict[str, Any], RolloutStepV1]]:
        """One env step: every record is built and the state updated before the first yield.

        `restart(env_index)` says whether a sub-env whose episode just ended starts a recorded one.
        """
        output = _split_policy_output(self.policy(self._obs))
        version = self._read_policy_version()
        obs_before = self._obs
        self._obs, transitions = self._driver.step(output["action"])
        self._interrupted = True  # until every record of this step is delivered
        self.env_steps += 1
        index = self._driver.index
        results = []
        for t in transitions:
            episode_id = self._episode_ids[t.env_index]
            if episode_id is None:
                continue
            record = self._record(
                index(obs_before, t.env_index),
                {key: index(value, t.env_index) for key, value in output.items()},
                t, episode_id, version, bootstrap_open=last,
            )
            step = validate_step(record, self.model)
            problems = self._tracker.add(step)
            if problems:
                raise ContractError(problems)
            results.append((record, step))
            self._steps[t.env_index] += 1
            self.n_steps += 1
            if t.terminated or t.truncated:
                self._count_end(t)
                self._tracker.forget(episode_id)  # ids are never reused: memory stays bounded
                self._episode_ids[t.env_index] = None
                if restart(t.env_index):
                    self._begin_episode(t.env_index)
        yield from results
        self._interrupted = False

    def _record(
        self, obs: Any, output: dict[str, Any], t: _Transition, episode_id: str, version: int,
        *, bootstrap_open: bool,
    ) -> dict[str, Any]:
        record: dict[str, Any] = {"observation": _observation(obs),
                                  "action": _plain(output["action"])}
        for key in ("logprob", "entropy", "value"):
            if key in output:
                record[key] = _plain(output[key])
        record["reward"] = t.reward
        record["step"] = self._steps[t.env_index]
        record["episode_id"] = episode_id
        record["terminated"] = t.terminated
        record["truncated"] = t.truncated
        record["policy_version"] = version
        done = t.terminated or t.truncated
        if done or bootstrap_open:
            record["next_observation"] = _observation(t.final_obs)
        needs_bootstrap = not t.terminated and (t.truncated or bootstrap_open)
        if needs_bootstrap and self.value_fn is not None:
            record["next_value"] = float(self.value_fn(t.final_obs))
        return record

    def _count_end(self, t: _Transition) -> None:
        self.n_episodes += 1
        if t.terminated:
            self.n_terminated += 1
        else:
            self.n_truncated += 1

    def _read_policy_version(self) -> int:
        version = self._policy_version
        return version() if callable(version) else version


class TurnRecorder:
    """Records an LLM sampler's generations as validated step records: one generation is one step.

    The LLM counterpart of `Recorder`, with no environment object: the sampler calls `turn` for
    each generation (or `group` for the n completions of one prompt) and gets back the record,
    validated as `model` and checked by the episode rules. A call without `episode_id` starts a
    new episode, `f"{run_id}-{n}"`; a multi-turn conversation passes the id of its first turn's
    record to the next turn, with `terminated=False` until its last turn. `step` counts the
    turns of each episode; `policy_version` is read from the caller once per call (an int or a
    callable), so a sampler running behind the trainer says so. A `group` gets the group id
    `f"{run_id}-g{k}"` unless it is given one.

    A generation cut by the length limit (vLLM `finish_reason == "length"`) is `truncated=True`,
    and then not terminated unless said so. Log-probs may be given as an inference engine
    returns them per position, a dict `{token_id: logprob}` or `{token_id: Logprob(logprob=...)}`
    (vLLM's `CompletionOutput.logprobs`): the generated token's log-prob is taken at each
    position (nothing is imported from the engine; any object with a `logprob` attribute does).
    """

    def __init__(self, *, policy_version: int | Callable[[], int], run_id: str = "run",
                 model: type[RolloutStepV1] = RolloutStep) -> None:
        self.run_id = run_id
        self.model = model
        self._policy_version = policy_version
        self._tracker = EpisodeTracker(model)
        self._steps: dict[str, int] = {}
        self.n_episodes = 0
        self.n_groups = 0
        self.n_steps = 0

    def turn(self, prompt_ids: Any, action: Any, *, reward: float, logprob: Any = None,
             episode_id: str | None = None, terminated: bool | None = None,
             truncated: bool = False, text: str | None = None, **fields: Any) -> dict[str, Any]:
        """Record one generation: `prompt_ids` in (observation.token_ids, with `text` if given),
        the generated ids `action` out; `fields` adds optional step fields by wire name
        (`ref_logprob`, `group_id`, `loss_mask`, `token_reward`, `info`, ...). `terminated`
        defaults to `not truncated`: a generation cut by the length limit is truncated only."""
        version = self._read_policy_version()
        done = not truncated if terminated is None else terminated
        return self._record(prompt_ids, action, reward, logprob, episode_id, done,
                            truncated, text, version, fields)

    def group(self, prompt_ids: Any, completions: Iterable[Mapping[str, Any]],
              rewards: Iterable[float], *, group_id: str | None = None,
              text: str | None = None) -> list[dict[str, Any]]:
        """Record the completions of one prompt, one single-turn episode each, under one
        `group_id` and one policy version. Each completion is a mapping with `action` and any
        of `logprob`, `ref_logprob`, `loss_mask`, `token_reward`, and `truncated` (True for a
        completion cut by the length limit: then not terminated) or `terminated`. `rewards`
        holds one reward per completion."""
        completions, rewards = list(completions), list(rewards)
        if len(rewards) != len(completions):
            raise ContractError(Problem(
                "rewards", f"{len(completions)} rewards (one per completion)",
                f"{len(rewards)} rewards for {len(completions)} completions",
                "group: rewards and completions differ in length"))
        for i, completion in enumerate(completions):
            if not isinstance(completion, Mapping):
                raise TypeError(f"group: completions[{i}] must be a mapping with 'action' (the "
                                f"generated ids), got {type(completion).__name__}")
            if "action" not in completion:
                raise ContractError(Problem(f"completions[{i}].action", "the generated token ids",
                                            f"keys [{', '.join(map(str, completion))}]",
                                            "group: a completion without its action"))
        version = self._read_policy_version()
        gid = f"{self.run_id}-g{self.n_groups}" if group_id is None else group_id
        self.n_groups += 1
        records = []
        for i, (completion, reward) in enumerate(zip(completions, rewards, strict=True)):
            extra = dict(completion)
            action = extra.pop("action")
            logprob = extra.pop("logprob", None)
            truncated = bool(extra.pop("truncated", False))
            terminated = bool(extra.pop("terminated", not truncated))
            try:
                records.append(self._record(prompt_ids, action, reward, logprob, None,
                                            terminated, truncated, text, version,
                                            {**extra, "group_id": gid}))
            except ContractError as err:
                raise err.under(f"completions[{i}]") from None
        return records

    @property
    def open_episodes(self) -> list[str]:
        """Ids of the conversations started and not yet ended."""
        return sorted(self._steps)

    def _record(self, prompt_ids: Any, action: Any, reward: float, logprob: Any,
                episode_id: str | None, terminated: bool, truncated: bool, text: str | None,
                version: int, fields: Mapping[str, Any]) -> dict[str, Any]:
        new = episode_id is None
        if episode_id is None:
            episode_id = f"{self.run_id}-{self.n_episodes}"
        elif episode_id not in self._steps:
            raise ContractError(Problem(
                "episode_id", f"one of the open episodes {self.open_episodes}", repr(episode_id),
                "a later turn names an episode this recorder did not start or already ended"))
        observation: dict[str, Any] = {"token_ids": _plain(np.asarray(prompt_ids))}
        if text is not None:
            observation["text"] = text
        record: dict[str, Any] = {"observation": observation, "action": _plain(action)}
        if logprob is not None:
            record["logprob"] = _plain(chosen_logprobs("logprob", logprob, action))
        if fields.get("ref_logprob") is not None:
            fields = {**fields, "ref_logprob": chosen_logprobs("ref_logprob",
                                                               fields["ref_logprob"], action)}
        record.update({"reward": float(reward), "step": self._steps.get(episode_id, 0),
                       "episode_id": episode_id, "terminated": bool(terminated),
                       "truncated": bool(truncated), "policy_version": version})
        record.update({key: _plain(value) for key, value in fields.items()})
        step = validate_step(record, self.model)
        problems = self._tracker.add(step)
        if problems:
            raise ContractError(problems)
        self.n_steps += 1
        self.n_episodes += new
        if terminated or truncated:
            self._steps.pop(episode_id, None)
            self._tracker.forget(episode_id)
        else:
            self._steps[episode_id] = record["step"] + 1
        return record

    def _read_policy_version(self) -> int:
        version = self._policy_version
        return version() if callable(version) else version


def _split_policy_output(output: Any) -> dict[str, Any]:
    """The policy's output as {"action": ..., optional "logprob"/"entropy"/"value"}."""
    if isinstance(output, tuple):
        raise ContractError(Problem(
            path="policy", expected="an action or a dict with keys among "
            + ", ".join(POLICY_KEYS), got=f"tuple of {len(output)}",
            message="policy output is ambiguous (return {'action': a, 'logprob': lp})",
        ))
    if not isinstance(output, Mapping):
        return {"action": output}
    unknown = sorted(set(output) - set(POLICY_KEYS))
    if unknown or "action" not in output:
        raise ContractError(Problem(
            path="policy", expected="a dict with 'action' and optional "
            + ", ".join(POLICY_KEYS[1:]), got=describe(dict(output)),
            message="bad policy output keys",
        ))
    return dict(output)


def _plain(value: Any) -> Any:
    """Numpy scalars become Python scalars (JSON-ready); dicts recurse; arrays are copied, since
    an env (or a vector env with `copy=False`) may reuse its observation buffer on the next step."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.item() if value.ndim == 0 else value.copy()
    return value


def _observation(obs: Any) -> Any:
    """An observation as the record holds it: a Tuple space's tuple becomes named modalities
    `"0"`, `"1"`, ... (its components may differ in dtype and shape), anything else `_plain`."""
    if isinstance(obs, tuple):
        return {str(i): _plain(part) for i, part in enumerate(obs)}
    return _plain(obs)


def _index(tree: Any, i: int) -> Any:
    """Row `i` of a batched value: an array, a dict of them (a Dict space), or a tuple of them (a
    Tuple space: env `i`'s tuple, never the tuple's `i`-th component)."""
    if isinstance(tree, Mapping):
        return {key: _index(value, i) for key, value in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_index(value, i) for value in tree)
    return tree[i]


def _same(tree: Any, i: int) -> Any:
    return tree


class _SingleDriver:
    """A plain `Env`: resets itself after a done step, so `final_obs` is the step's own obs."""

    mode = "single"
    num_envs = 1
    index = staticmethod(_same)

    def __init__(self, env: Any) -> None:
        self.env = env

    def reset(self, seed: int | None) -> Any:
        obs, _info = self.env.reset(seed=seed)
        return obs

    def step(self, action: Any) -> tuple[Any, list[_Transition]]:
        obs, reward, terminated, truncated, _info = self.env.step(action)
        t = _Transition(0, float(reward), bool(terminated), bool(truncated), obs)
        if terminated or truncated:
            obs, _info = self.env.reset()
        return obs, [t]


class _VectorDriver:
    """A `VectorEnv` in any autoreset mode; yields only real transitions, never a reset step."""

    index = staticmethod(_index)

    def __init__(self, env: Any, mode: str) -> None:
        self.env = env
        self.mode = mode
        self.num_envs = int(env.num_envs)
        self._pending_reset = np.zeros(self.num_envs, dtype=bool)

    def reset(self, seed: int | None) -> Any:
        obs, _info = self.env.reset(seed=seed)
        self._pending_reset[:] = False
        return obs

    def step(self, actions: Any) -> tuple[Any, list[_Transition]]:
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        done = np.logical_or(terminated, truncated)
        transitions = [
            _Transition(i, float(rewards[i]), bool(terminated[i]), bool(truncated[i]),
                        self._final_obs(obs, info, i, bool(done[i])))
            for i in range(self.num_envs)
            if not (self.mode == "next_step" and self._pending_reset[i])
        ]
        if self.mode == "next_step":
            self._pending_reset = done
        elif self.mode == "disabled" and done.any():
            obs, _info = self.env.reset(options={"reset_mask": np.asarray(done, dtype=bool)})
        return obs, transitions

    def _final_obs(self, obs: Any, info: Mapping[str, Any], i: int, done: bool) -> Any:
        if self.mode != "same_step" or not done:
            return _index(obs, i)
        if "final_obs" not in info or not info["_final_obs"][i]:
            raise ContractError(Problem(
                path=f"info.final_obs[{i}]", expected="the final observation of a done sub-env",
                got="no final_obs", message="SAME_STEP vector env gave no final observation",
            ))
        return info["final_obs"][i]


def _check_observation_space(space: Any) -> None:
    """Refuse (TypeError) an observation space the record cannot hold as it is: a Tuple nested
    in a Tuple or Dict, or a Dict in a Tuple. A Tuple is recorded as modalities "0", "1", ...; a
    Dict as modalities named by its keys; one level of either, of tensors (or text)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Tuple):
        inner = list(space.spaces)
    elif isinstance(space, spaces.Dict):
        inner = [s for s in space.spaces.values() if isinstance(s, spaces.Tuple)]
    else:
        return
    if any(isinstance(s, (spaces.Tuple, spaces.Dict)) for s in inner):
        raise TypeError(f"observation space {space} nests a Tuple or Dict inside a Tuple or "
                        "Dict; a record holds a tensor or one level of named modalities "
                        "(a Tuple's components as '0', '1', ...): flatten it first, e.g. with "
                        "gymnasium.wrappers.FlattenObservation")


def _make_driver(env: Any) -> _SingleDriver | _VectorDriver:
    import gymnasium
    from gymnasium.vector import AutoresetMode, VectorEnv

    if isinstance(env, (VectorEnv, gymnasium.Env)):
        space = getattr(env, "single_observation_space", None) if isinstance(env, VectorEnv) \
            else getattr(env, "observation_space", None)
        _check_observation_space(space)
    if isinstance(env, VectorEnv):
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        names = {
            AutoresetMode.NEXT_STEP: "next_step",
            AutoresetMode.SAME_STEP: "same_step",
            AutoresetMode.DISABLED: "disabled",
        }
        return _VectorDriver(env, names[AutoresetMode(mode)])
    if isinstance(env, gymnasium.Env):
        return _SingleDriver(env)
    raise TypeError(f"expected a gymnasium Env or VectorEnv, got {type(env).__name__}")
