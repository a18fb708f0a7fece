"""The package's GAE equals the libraries' own on the CartPole rollouts (`pytest -m peers`):
Stable-Baselines3's `RolloutBuffer.compute_returns_and_advantage` and Tianshou's
`compute_episodic_return`, each fed the real steps as that library's collector would (SB3 adds
γ·V(final observation) to the reward of a time-limit cut; Tianshou masks the next value after a
termination). An episode that ends both terminated and truncated counts as terminated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gyre_contract.io import read_episodes
from gyre_contract.pinned import CartPoleStep
from gyre_contract.trainer import collate, gae

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.peers, pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]

ROLLOUTS = Path(__file__).resolve().parents[2] / "examples" / "cartpole_rollouts.jsonl"
GAMMA, LAM = 0.99, 0.95


@pytest.fixture(scope="module")
def steps() -> dict[str, np.ndarray]:
    """The real steps in row order (episode after episode) with the package's GAE, and each
    step's next value (the next step's value, the recorded next_value after a cut, 0 after a
    termination)."""
    cols = collate(list(read_episodes(ROLLOUTS, CartPoleStep)))
    adv, ret = gae(cols["reward"], cols["value"], cols["terminated"], cols["truncated"],
                   cols["mask"], cols["next_value"], gamma=GAMMA, lam=LAM)
    mask = cols["mask"]
    nxt = np.zeros_like(cols["value"])
    nxt[:, :-1] = cols["value"][:, 1:]
    last = mask.sum(1) - 1
    rows = np.arange(len(last))
    nxt[rows, last] = np.where(cols["terminated"][rows, last], 0.0,
                               np.nan_to_num(cols["next_value"]))
    out = {k: cols[k][mask] for k in ("observation", "action", "reward", "value", "logprob",
                                      "terminated", "truncated")}
    out["start"] = (np.cumsum(mask, axis=1) == 1)[mask]
    out.update(advantage=adv[mask], ret=ret[mask], next_value=nxt[mask],
               end=np.zeros(int(mask.sum()), bool))
    out["end"][np.cumsum(mask.sum(1)) - 1] = True
    return out


def test_sb3_rollout_buffer_gae_equals_the_packages(steps) -> None:
    from gymnasium.spaces import Box, Discrete
    from stable_baselines3.common.buffers import RolloutBuffer

    n = len(steps["reward"])
    buffer = RolloutBuffer(n, Box(-np.inf, np.inf, (4,), np.float32), Discrete(2), device="cpu",
                           gae_lambda=LAM, gamma=GAMMA, n_envs=1)
    cut = steps["end"] & steps["truncated"] & ~steps["terminated"]
    reward = steps["reward"] + GAMMA * np.where(cut, steps["next_value"], 0.0)  # SB3's bootstrap
    for i in range(n):
        buffer.add(steps["observation"][i][None], np.array([[steps["action"][i]]]),
                   np.array([reward[i]]), np.array([steps["start"][i]]),
                   torch.tensor([steps["value"][i]]), torch.tensor([steps["logprob"][i]]))
    buffer.compute_returns_and_advantage(last_values=torch.zeros(1), dones=np.array([True]))
    theirs = buffer.advantages.reshape(-1)
    print(f"\nSB3 RolloutBuffer GAE: max |ours - theirs| = "
          f"{float(np.abs(steps['advantage'] - theirs).max()):.3g}")
    np.testing.assert_allclose(steps["advantage"], theirs, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(steps["ret"], buffer.returns.reshape(-1), rtol=1e-5, atol=1e-4)


def test_tianshou_compute_episodic_return_equals_the_packages(steps) -> None:
    pytest.importorskip("tianshou")
    from tianshou.algorithm.algorithm_base import Algorithm
    from tianshou.data import Batch, ReplayBuffer

    n = len(steps["reward"])
    buffer = ReplayBuffer(n)
    for i in range(n):
        buffer.add(Batch(obs=steps["observation"][i], act=steps["action"][i],
                         rew=steps["reward"][i], terminated=bool(steps["terminated"][i]),
                         truncated=bool(steps["truncated"][i] and not steps["terminated"][i]),
                         obs_next=steps["observation"][i], info={}))
    indices = np.arange(n)
    returns, advantage = Algorithm.compute_episodic_return(
        buffer[indices], buffer, indices, v_s_=steps["next_value"], v_s=steps["value"],
        gamma=GAMMA, gae_lambda=LAM)
    print(f"\nTianshou compute_episodic_return: max |ours - theirs| = "
          f"{float(np.abs(steps['advantage'] - advantage).max()):.3g}")
    np.testing.assert_allclose(steps["advantage"], advantage, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(steps["ret"], returns, rtol=1e-5, atol=1e-4)
