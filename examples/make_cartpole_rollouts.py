"""Make examples/cartpole_rollouts.jsonl: a small, real CartPole-v1 rollout, deterministic.

    python examples/make_cartpole_rollouts.py [--out examples/cartpole_rollouts.jsonl]

Gymnasium's CartPole-v1 with a short TimeLimit (40 steps), so the file holds both kinds of
episode end: poles that fall (`terminated`) and runs cut by the time limit (`truncated`, with
the true final observation and a `next_value` to bootstrap from). The policy is a fixed linear
softmax policy, sampled with a seeded generator, so `logprob` is the real log-probability of
the action taken; `value` comes from a fixed hand-written critic (an untrained stand-in, there
only so the file exercises the GAE path of `examples/cartpole_map.json`). The policy version
goes up every three episodes, as it would with a trainer updating the weights.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from models import CartPoleStep  # noqa: E402

from gyre_contract.harness.recorder import Recorder  # noqa: E402
from gyre_contract.io.writer import write_steps  # noqa: E402

SEED = 7
EPISODES = 8
MAX_EPISODE_STEPS = 40
WEIGHTS = np.array([0.0, 0.3, 3.0, 0.8])
"""Logit of "push right": leans the way the pole falls; balances for a while, not for ever."""


def make_policy(rng: np.random.Generator):
    def policy(obs: np.ndarray) -> dict[str, float | int]:
        p_right = 1.0 / (1.0 + math.exp(-float(WEIGHTS @ obs)))
        action = int(rng.random() < p_right)
        p = p_right if action == 1 else 1.0 - p_right
        return {"action": action, "logprob": math.log(max(p, 1e-12)), "value": critic(obs)}
    return policy


def critic(obs: np.ndarray) -> float:
    """Untrained stand-in for V(s): high when the pole is upright and centred, 0 near failure."""
    angle, position = abs(float(obs[2])) / 0.2095, abs(float(obs[0])) / 2.4
    return round(20.0 * max(0.0, 1.0 - max(angle, position)), 4)


def record(out: Path, episodes: int = EPISODES, seed: int = SEED) -> int:
    env = gym.make("CartPole-v1", max_episode_steps=MAX_EPISODE_STEPS)
    recorder: Recorder | None = None

    def policy_version() -> int:
        return recorder.n_episodes // 3 if recorder is not None else 0

    recorder = Recorder(env, make_policy(np.random.default_rng(seed)),
                        policy_version=policy_version, value_fn=critic, run_id="cartpole",
                        seed=seed, model=CartPoleStep)
    written = write_steps(out, recorder.record_episodes(episodes))
    env.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "cartpole_rollouts.jsonl")
    parser.add_argument("--episodes", type=int, default=EPISODES)
    args = parser.parse_args()
    n = record(args.out, args.episodes)
    print(f"wrote {n} steps to {args.out}")


if __name__ == "__main__":
    main()
