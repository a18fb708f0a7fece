"""Your own sampler and your own `train_step`, taken through gyre-contract's three stages.

The demo (`gyre-contract demo`) ships its own learner; this file is what you copy when you
already have a sampler and a trainer. Replace the two marked parts with yours:

- YOUR SAMPLER: a policy function the `Recorder` calls on a Gymnasium env (here a linear
  softmax on CartPole-v1, with a linear value baseline for bootstrapping time-limit cuts);
- YOUR TRAINER: `train_step(batch) -> metrics`, a plain function on a dict of numpy arrays
  (here REINFORCE with a learned baseline: Monte-Carlo advantages, λ = 1, plain SGD, and a
  ridge regression of V(s) on the returns).

Then the stages run unchanged:

1. stage 1, the sampler alone: record episodes, `write_steps`, `validate_file`;
   the diff: the sampler's schema (`json_schema` of its pinned step model) against the trainer's
   (`batch_schema` of one batch as the trainer reads it today), and `field_map()` to map.json;
2. stage 2, half way: `half_way` maps and collates the rollouts, validates the TrainBatch and
   calls your loss once, with no update;
3. stage 3, the full loop: `full_loop` runs sample → map → train cycles, checks counts,
   timestamps and policy versions, and appends the run to runs.jsonl (a `RunLog`).

Run: `python examples/own_trainer.py [--out DIR] [--cycles N] [--episodes N] [--seed S]`
(about 2 s; needs gymnasium: `pip install -e '.[demo]'`). Exit code 0 when every stage passes.
DIR keeps rollouts.jsonl, sampler.json, trainer.json, map.json and runs.jsonl; each run appends
one line to runs.jsonl, so `gyre-contract runs DIR/runs.jsonl` shows the spread over runs. The
CLI's stage 2 takes this file's `loss`:
`gyre-contract batch DIR/rollouts.jsonl --map DIR/map.json --loss examples/own_trainer.py:loss`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gyre_contract import (
    ContractError,
    Recorder,
    RunLog,
    diff,
    full_loop,
    half_way,
    json_schema,
    validate_file,
    write_steps,
)
from gyre_contract.io import Episode
from gyre_contract.pinned import CartPoleStep
from gyre_contract.trainer import batch_schema

GAMMA, LAM = 0.99, 1.0  # λ = 1: the advantage is G_t − V(s_t), REINFORCE with a baseline
ENV_ID, N_ENVS = "CartPole-v1", 4
STAGE1_TIME_LIMIT = 30  # short, so stage 1 sees both endings: terminated and truncated
STAGE3_TIME_LIMIT = 200


# -- YOUR SAMPLER: the policy the Recorder calls ---------------------------------------------

@dataclass
class LinearAgent:
    """A linear softmax policy over CartPole's 4 observations and a linear value baseline.

    `version` counts updates: the recorder stamps it on every step as `policy_version`.
    """

    seed: int
    lr: float = 4.0  # a large step: the advantages are normalised
    version: int = 0
    weights: np.ndarray = field(default_factory=lambda: np.zeros((5, 2)))
    baseline: np.ndarray = field(default_factory=lambda: np.zeros(5))
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def probs(self, obs: np.ndarray) -> np.ndarray:
        logits = features(obs) @ self.weights
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def value(self, obs: np.ndarray) -> np.ndarray:
        return features(obs) @ self.baseline

    def act(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        """The recorder's policy: batched observations `[N, 4]` in, action/logprob/value out."""
        p = self.probs(obs)
        action = (self.rng.random(len(p)) < p[:, 1]).astype(np.int64)
        return {"action": action,
                "logprob": np.log(p[np.arange(len(p)), action]).astype(np.float32),
                "value": self.value(obs).astype(np.float32)}

    def value_of_one(self, obs: np.ndarray) -> float:
        """V(s) of one observation: the recorder's `value_fn`, for `next_value` on a cut."""
        return float(self.value(np.asarray(obs)[None])[0])


def features(obs: np.ndarray) -> np.ndarray:
    obs = np.asarray(obs, dtype=np.float64)
    return np.concatenate([obs, np.ones(obs.shape[:-1] + (1,))], axis=-1)


def make_envs(time_limit: int) -> Any:
    import gymnasium as gym

    return gym.make_vec(ENV_ID, num_envs=N_ENVS, vectorization_mode="sync",
                        max_episode_steps=time_limit)


def make_recorder(envs: Any, agent: LinearAgent, seed: int, run_id: str) -> Recorder:
    """Validated step records from the envs: ids, step counters, policy versions, bootstraps."""
    return Recorder(envs, agent.act, policy_version=lambda: agent.version,
                    value_fn=agent.value_of_one, run_id=run_id, seed=seed, model=CartPoleStep)


# -- YOUR TRAINER: train_step(batch) -> metrics, on a dict of numpy arrays --------------------

def trainer_batch_example() -> dict[str, np.ndarray]:
    """One batch exactly as the trainer reads it (keys, dtypes, [B, T, ...] shapes).

    In your repo, take one real batch from your dataloader instead; `batch_schema` turns it
    into the trainer's JSON Schema, which the diff compares with the sampler's.
    """
    b, t = 2, 3
    return {
        "obs": np.zeros((b, t, 4), np.float32), "action": np.zeros((b, t), np.int64),
        "reward": np.zeros((b, t), np.float32), "done": np.zeros((b, t), bool),
        "terminated": np.zeros((b, t), bool), "truncated": np.zeros((b, t), bool),
        "advantage": np.zeros((b, t), np.float32), "return": np.zeros((b, t), np.float32),
        "value": np.zeros((b, t), np.float32), "logprob": np.zeros((b, t), np.float32),
        "mask": np.ones((b, t), bool), "policy_version": np.zeros(b, np.int64),
        "episode_id": np.array(["e0", "e1"]),
    }


def reinforce_loss(agent: LinearAgent, batch: dict[str, np.ndarray]) -> float:
    """−E[log π(a|s)·Â] + ½·E[(V(s) − G)²] over real steps; reads the batch, changes nothing."""
    mask = batch["mask"]
    obs, act = batch["obs"][mask], batch["action"][mask]
    logp = np.log(agent.probs(obs)[np.arange(len(act)), act])
    adv = normalised(batch["advantage"][mask])
    value_error = agent.value(obs) - batch["return"][mask]
    return float(-(logp * adv).mean() + 0.5 * (value_error ** 2).mean())


def loss(batch: dict[str, np.ndarray]) -> float:
    """The loss of a fresh agent, for the CLI's stage 2:
    `gyre-contract batch rollouts.jsonl --map map.json --loss examples/own_trainer.py:loss`."""
    return reinforce_loss(LinearAgent(seed=0), batch)


def make_train_step(agent: LinearAgent) -> Callable[[dict[str, np.ndarray]], dict[str, Any]]:
    """`train_step(batch) -> metrics`: one SGD step of REINFORCE, then refit the baseline."""

    def train_step(batch: dict[str, np.ndarray]) -> dict[str, Any]:
        mask = batch["mask"]
        obs, act = batch["obs"][mask], batch["action"][mask]
        p = agent.probs(obs)
        # the sampler's log-probs must be this policy's: a gap means stale or mislabelled data
        logprob_gap = np.abs(np.log(p[np.arange(len(act)), act]) - batch["logprob"][mask]).max()
        adv = normalised(batch["advantage"][mask])
        grad = features(obs).T @ ((np.eye(2)[act] - p) * adv[:, None]) / len(act)
        agent.weights += agent.lr * grad
        x, returns = features(obs), batch["return"][mask]
        agent.baseline = np.linalg.solve(x.T @ x + 1e-3 * np.eye(5), x.T @ returns)
        agent.version += 1
        return {"mean_length": float(mask.sum(axis=1).mean()),
                "logprob_gap": float(logprob_gap), "policy_version": agent.version}

    return train_step


def normalised(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std() + 1e-8)


# -- the three stages (unchanged for your own sampler and trainer) ----------------------------

def say(text: str = "") -> None:
    print(text, flush=True)


def heading(title: str, criteria: str) -> None:
    say(f"\n=== {title} ===")
    say(f"pass criteria: {criteria}")


OUTCOME = {True: "pass", False: "FAIL", None: "not run"}


def verdict(ok: bool, text: str) -> bool:
    say(f"result: {'PASS' if ok else 'FAIL'} — {text}")
    return ok


def stage1(out: Path, agent: LinearAgent, seed: int, episodes: int) -> bool:
    heading("Stage 1: the sampler alone",
            "every recorded step and episode validates against CartPoleStep")
    path = out / "rollouts.jsonl"
    with closing(make_envs(STAGE1_TIME_LIMIT)) as envs:
        recorder = make_recorder(envs, agent, seed, run_id="stage1")
        try:
            count = write_steps(path, recorder.record_episodes(episodes))
        except ContractError as err:  # the recorder validates each step before it is written
            say(str(err))
            return verdict(False, "a recorded step broke the contract")
    report = validate_file(path, CartPoleStep, require_complete=True)
    say(f"wrote {count} steps to {path}")
    say(report.to_text())
    return verdict(report.ok and report.episodes == episodes,
                   f"{report.steps} steps in {report.episodes} episodes "
                   f"({report.terminated} terminated, {report.truncated} truncated), "
                   f"{report.problem_count} problems")


def diff_stage(out: Path) -> bool:
    heading("Diff: the sampler's schema vs the trainer's",
            "no trainer field is missing; the written map turns rollouts into the batch")
    sampler, trainer = out / "sampler.json", out / "trainer.json"
    sampler.write_text(json.dumps(json_schema(CartPoleStep), indent=2) + "\n", encoding="utf-8")
    schema = batch_schema(trainer_batch_example(), title="my trainer's batch")
    trainer.write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")
    report = diff(sampler, trainer, gamma=GAMMA, lam=LAM)
    say(report.to_text())
    map_path = out / "map.json"
    map_path.write_text(json.dumps(report.field_map(), indent=2) + "\n", encoding="utf-8")
    say(f"field map written to {map_path} (review it, commit it)")
    return verdict(report.exit_code() == 0, report.summary_line())


def stage2(out: Path, agent: LinearAgent) -> bool:
    heading("Stage 2: half way (map + collate + your loss once, no update)",
            "the batch validates as a TrainBatch, the loss is one finite number, "
            "the agent is unchanged")
    before = (agent.weights.copy(), agent.baseline.copy(), agent.version)
    try:
        report = half_way(out / "rollouts.jsonl", out / "map.json",
                          lambda batch: reinforce_loss(agent, batch), model=CartPoleStep)
    except ContractError as err:
        say(str(err))
        return verdict(False, "the batch or the loss broke the contract")
    say(report.to_text())
    unchanged = (np.array_equal(before[0], agent.weights)
                 and np.array_equal(before[1], agent.baseline) and before[2] == agent.version)
    return verdict(unchanged, f"loss {report.loss:.4f}, agent unchanged")


def stage3(out: Path, agent: LinearAgent, seed: int, cycles: int, episodes: int) -> bool:
    heading("Stage 3: the full loop (sample → map → train_step)",
            "every cycle's counts, timestamps and policy versions check out")
    envs = make_envs(STAGE3_TIME_LIMIT)
    recorder = make_recorder(envs, agent, seed + 1, run_id="stage3")

    def sample(version: int) -> list[Episode]:
        if version != agent.version:  # an async sampler would load these weights here
            raise RuntimeError(f"sampler at version {agent.version}, loop asks for {version}")
        return recorder.collect_episodes(episodes)

    log = RunLog(out / "runs.jsonl")
    try:
        report = full_loop(sample, make_train_step(agent), out / "map.json", cycles,
                           max_staleness=0, start_version=agent.version,
                           run_id=f"own-trainer-seed{seed}", run_log=log,
                           config=f"{ENV_ID} {N_ENVS}x{episodes}")  # envs x episodes per cycle
    except ContractError as err:
        say(str(err))
        return verdict(False, "the loop broke the contract")
    finally:
        envs.close()
    say(report.to_text())
    say(f"\nrun log {log.path} (`gyre-contract runs`):")
    say(subprocess.run([sys.executable, "-m", "gyre_contract", "runs", str(log.path)],
                       capture_output=True, text=True, check=True).stdout.rstrip())
    lengths = [c.metrics["mean_length"] for c in report.cycles]
    say("\nmean episode length per cycle: " + " ".join(f"{x:.0f}" for x in lengths))
    return verdict(True, f"{len(report.cycles)} cycles, policy version {report.policy_version}, "
                         f"mean episode length {lengths[0]:.0f} → {lengths[-1]:.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="where the files go (default: a new temp dir)")
    parser.add_argument("--cycles", type=int, default=20, help="stage 3 cycles (default 20)")
    parser.add_argument("--episodes", type=int, default=16, help="episodes per cycle (16)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="gyre-own-trainer-"))
    out.mkdir(parents=True, exist_ok=True)
    say(f"your sampler and trainer on {ENV_ID} through the three stages (files in {out})")
    agent = LinearAgent(seed=args.seed)
    results: dict[str, bool | None] = {"stage 1": stage1(out, agent, args.seed, args.episodes),
                                       "diff": diff_stage(out)}
    results["stage 2"] = stage2(out, agent) if results["diff"] else None
    results["stage 3"] = (stage3(out, agent, args.seed, args.cycles, args.episodes)
                          if results["stage 2"] else None)
    passed = all(results.values())
    say(f"\n{'ALL STAGES PASS' if passed else 'SOME STAGES FAILED'}: "
        + ", ".join(f"{k} {OUTCOME[v]}" for k, v in results.items()))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
