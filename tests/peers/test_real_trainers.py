"""The mapped batch feeds the real libraries' PPO losses unchanged (`pytest -m peers`).

TorchRL's `ClipPPOLoss` and Stable-Baselines3's `PPO.train` get the batch that `diff --write-map`
and `batch --trainer` make from CartPole rollouts, and must give the same loss as the same
library computes on the real steps only; without the mask (padding taken as data) the loss
differs, which is what `padding_unmasked` warns about. Skipped unless torch, torchrl and
stable-baselines3 are installed; `.ci/peers` (run by `.ci/run`) installs them in a second venv,
with torch pinned to its CPU build, and fails on any skip:

    bash .ci/peers
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gyre_contract.harness._stages import half_way
from gyre_contract.io import read_episodes
from gyre_contract.pinned import CartPoleStep
from gyre_contract.schema import diff
from gyre_contract.trainer import collate, gae

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl")
pytest.importorskip("stable_baselines3")

pytestmark = [pytest.mark.peers, pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"
PEERS = ROOT / "tests" / "data" / "peers"


def mapped(peer: str, dims: str) -> dict[str, np.ndarray]:
    """The trainer's batch as `batch --trainer` makes it, from the map the diff writes."""
    trainer = PEERS / f"{peer}.json"
    fmap = diff(CartPoleStep, trainer, batch_dims=dims).field_map()
    return half_way(ROLLOUTS, fmap, model=CartPoleStep, trainer=trainer, batch_dims=dims).batch


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    """The rollouts collated directly (no map) with GAE: the real steps are `[mask]`."""
    cols = collate(list(read_episodes(ROLLOUTS, CartPoleStep)))
    cols["advantage"], cols["return"] = gae(
        cols["reward"], cols["value"], cols["terminated"], cols["truncated"], cols["mask"],
        cols["next_value"], gamma=0.99, lam=0.95)
    return cols


# -- TorchRL ---------------------------------------------------------------------------------

def torchrl_loss(td) -> dict[str, float]:
    from tensordict.nn import TensorDictModule
    from torch import nn
    from torchrl.modules import ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss

    torch.manual_seed(0)
    actor = ProbabilisticActor(
        TensorDictModule(nn.Linear(4, 2), in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"], distribution_class=torch.distributions.Categorical,
        return_log_prob=True)
    critic = ValueOperator(nn.Linear(4, 1), in_keys=["observation"])
    loss = ClipPPOLoss(actor, critic, normalize_advantage=False)
    out = loss(td)
    return {k: float(out[k]) for k in ("loss_objective", "loss_critic", "loss_entropy")}


def test_torchrl_clip_ppo_loss_on_the_mapped_batch_equals_the_real_steps(reference) -> None:
    from tensordict import TensorDict

    batch = mapped("torchrl_ppo", "B,T")
    assert "action_log_prob" in batch and "collector.mask" in batch
    arrays = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()}
    mask = arrays["collector.mask"]
    td = TensorDict(arrays, batch_size=mask.shape).unflatten_keys(".")
    masked = torchrl_loss(td)
    real = torchrl_loss(td.exclude(("collector", "mask"))[mask])
    unmasked = torchrl_loss(td.exclude(("collector", "mask")))
    print(f"\nTorchRL ClipPPOLoss: masked {masked}\n  real steps only {real}\n"
          f"  unmasked {unmasked}")
    for key in masked:
        assert masked[key] == pytest.approx(real[key], rel=1e-5, abs=1e-6), key
    assert unmasked["loss_critic"] != pytest.approx(real["loss_critic"], rel=1e-3)
    assert real["loss_critic"] > 0


# -- Stable-Baselines3 -----------------------------------------------------------------------

def sb3_loss(samples: dict[str, np.ndarray]) -> dict[str, float]:
    """SB3's own `PPO.train` (one epoch, one minibatch) on these RolloutBufferSamples."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.type_aliases import RolloutBufferSamples

    n = len(samples["advantages"])
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=n, batch_size=n, n_epochs=1, seed=0,
                device="cpu")
    model.set_logger(__import__("stable_baselines3.common.logger",
                                fromlist=["configure"]).configure(None, []))
    data = RolloutBufferSamples(*(torch.as_tensor(np.asarray(samples[k], np.float32))
                                  for k in RolloutBufferSamples._fields))
    model.rollout_buffer.get = lambda batch_size=None: iter([data])
    model.train()
    values = model.logger.name_to_value
    return {k: float(values[f"train/{k}"]) for k in ("loss", "policy_gradient_loss",
                                                     "value_loss", "entropy_loss")}


def test_sb3_ppo_loss_on_the_mapped_batch_equals_the_real_steps(reference) -> None:
    batch = mapped("sb3_rollout_samples", "M")
    mask = reference["mask"]
    assert batch["actions"].shape == (int(mask.sum()), 1)  # Discrete: [M, 1]
    real = {"observations": reference["observation"][mask],
            "actions": reference["action"][mask][:, None],
            "old_values": reference["value"][mask], "old_log_prob": reference["logprob"][mask],
            "advantages": reference["advantage"][mask], "returns": reference["return"][mask]}
    padded = {k: reference[c].reshape(mask.size, *reference[c].shape[2:]) for k, c in (
        ("observations", "observation"), ("old_values", "value"), ("old_log_prob", "logprob"),
        ("advantages", "advantage"), ("returns", "return"))}
    padded["actions"] = reference["action"].reshape(-1, 1)
    on_map, on_real, on_padded = sb3_loss(batch), sb3_loss(real), sb3_loss(padded)
    print(f"\nSB3 PPO: mapped {on_map}\n  real steps only {on_real}\n  padded {on_padded}")
    for key in on_map:
        assert on_map[key] == pytest.approx(on_real[key], rel=1e-5, abs=1e-6), key
    assert on_padded["value_loss"] != pytest.approx(on_real["value_loss"], rel=1e-3)
