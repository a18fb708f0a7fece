"""Round trip per peer: diff → written map → `batch --trainer` → the arrays the trainer reads.

On the same CartPole rollouts, every layout (TorchRL `[B, T, 1]`, CleanRL time-major `[T, N]`,
SB3, Tianshou and RLlib flat) holds the same real steps and the same advantages.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from gyre_contract.cli._app import run
from gyre_contract.io import read_episodes
from gyre_contract.pinned import CartPoleStep
from gyre_contract.schema import diff
from gyre_contract.trainer import collate, gae

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"
PEERS = ROOT / "tests" / "data" / "peers"
LAYOUTS = {  # peer -> (batch dims, its advantage key or None, its reward key)
    "torchrl_ppo": ("B,T", "advantage", "next.reward"),
    "cleanrl_ppo_storage": ("T,N", None, "rewards"),
    "sb3_rollout_samples": ("M", "advantages", None),
    "tianshou_ppo": ("B", "adv", "rew"),
    "rllib_learner_batch": ("B", "advantages", "rewards"),
}


@pytest.fixture(scope="module")
def reference() -> dict:
    """The collated rollouts and GAE computed on them directly (the written maps' gamma, lam)."""
    cols = collate(list(read_episodes(ROLLOUTS, CartPoleStep)))
    adv, _ = gae(cols["reward"], cols["value"], cols["terminated"], cols["truncated"],
                 cols["mask"], cols["next_value"], gamma=0.99, lam=0.95)
    return {"cols": cols, "advantage": adv}


def roundtrip(peer: str, tmp_path: Path) -> dict[str, np.ndarray]:
    dims = LAYOUTS[peer][0]
    fmap = tmp_path / f"{peer}_map.json"
    fmap.write_text(json.dumps(diff(CartPoleStep, PEERS / f"{peer}.json",
                                    batch_dims=dims).field_map()))
    out, err = io.StringIO(), io.StringIO()
    npz = tmp_path / f"{peer}.npz"
    code = run(["batch", str(ROLLOUTS), "--map", str(fmap), "--trainer",
                str(PEERS / f"{peer}.json"), "--batch-dims", dims, "-o", str(npz),
                "--model", "gyre_contract.pinned:CartPoleStep"], stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    with np.load(npz, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def real_steps(peer: str, arr: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The trainer's array at the real steps, episode by episode (the [B, T] mask order)."""
    kind = LAYOUTS[peer][0]
    if kind == "B,T":
        return arr.reshape(*mask.shape, -1)[mask].reshape(-1)
    if kind == "T,N":
        return arr.T[mask]
    return arr.reshape(-1)  # flat: real steps only, already in that order


@pytest.mark.parametrize("peer", sorted(LAYOUTS))
def test_the_written_map_runs_into_the_trainers_batch(peer, tmp_path, reference) -> None:
    batch = roundtrip(peer, tmp_path)
    schema = json.loads((PEERS / f"{peer}.json").read_text())
    top = {k.split(".")[0] for k in batch}
    assert set(schema["required"]) <= top
    mask = reference["cols"]["mask"]
    _, adv_key, reward_key = LAYOUTS[peer]
    if reward_key is not None:
        np.testing.assert_array_equal(real_steps(peer, batch[reward_key], mask),
                                      reference["cols"]["reward"][mask])
    if adv_key is not None:
        np.testing.assert_allclose(real_steps(peer, batch[adv_key], mask),
                                   reference["advantage"][mask], rtol=1e-6, atol=1e-6)
    if LAYOUTS[peer][0] in ("B,T", "T,N"):  # padded: the map added the mask the trainer needs
        key = "collector.mask" if peer == "torchrl_ppo" else "mask"
        got = batch[key] if peer == "torchrl_ppo" else batch[key].T
        np.testing.assert_array_equal(got, mask)
    else:
        assert len(batch[next(iter(schema["required"]))]) == int(mask.sum())


def test_sb3_gets_discrete_actions_as_m_by_1(tmp_path, reference) -> None:
    batch = roundtrip("sb3_rollout_samples", tmp_path)
    mask = reference["cols"]["mask"]
    assert batch["actions"].shape == (int(mask.sum()), 1)
    np.testing.assert_array_equal(batch["actions"][:, 0], reference["cols"]["action"][mask])
