"""TorchRL on the batch `diff --write-map` and `batch --trainer` make (`pytest -m peers`).

- GAE: TorchRL's own `GAE` module, run on the TensorDict of the mapped batch, equals the same
  module run on TensorDicts built by hand from each episode's records: `next.observation` is the
  next step's observation, and the true final observation on an episode's last step (once it
  was NaN on every step but the last, in a batch reported valid).
- Padding: TorchRL's losses apply `("collector", "mask")` to their `loss_*` terms only.
  `ClipPPOLoss(normalize_advantage=True)` standardises the advantage over the padding too (it
  reads only "shifted_valid" there), and the logged statistics average over it: the loss then
  differs from the loss on the real steps. The remedy the diff's `normalize_over_padding`
  warning gives, passing the real steps `td[td["collector", "mask"]]`, gives exactly the
  real-steps values.

Skipped unless torch, tensordict, torchrl and gymnasium are installed (`.ci/run` does not).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gyre_contract import Recorder, write_steps
from gyre_contract.core._models import RolloutStep
from gyre_contract.harness._stages import half_way
from gyre_contract.io import read_episodes
from gyre_contract.pinned import CartPoleStep
from gyre_contract.schema import diff

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")
pytest.importorskip("torchrl")
gym = pytest.importorskip("gymnasium")

pytestmark = [pytest.mark.peers, pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = ROOT / "examples" / "cartpole_rollouts.jsonl"
TORCHRL = ROOT / "tests" / "data" / "peers" / "torchrl_ppo.json"
SAMPLER = ROOT / "schemas" / "rollout_step.v1.json"
GAMMA, LAM = 0.99, 0.95  # what the written map uses


def critic(n_obs: int):
    from torch import nn
    from torchrl.modules import ValueOperator

    torch.manual_seed(0)
    return ValueOperator(nn.Linear(n_obs, 1), in_keys=["observation"])


def value_of(net, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return net.module(torch.as_tensor(np.asarray(obs, np.float32))).numpy()[..., 0]


def pendulum(tmp_path: Path, net) -> tuple[Path, Path]:
    """Pendulum-v1 on a vector env recorded by `Recorder` (every episode truncated at 200 steps,
    bootstrapped from the final observation), values from `net`; and TorchRL's PPO schema with
    Pendulum's continuous action `[B, T, 1]`."""
    rng = np.random.default_rng(0)

    def policy(obs):
        return {"action": rng.uniform(-2, 2, (len(obs), 1)).astype(np.float32),
                "logprob": np.full(len(obs), -1.4, np.float32),
                "value": value_of(net, obs).astype(np.float32)}

    env = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    recorder = Recorder(env, policy, policy_version=0, seed=0,
                        value_fn=lambda o: float(value_of(net, o[None])[0]))
    path = tmp_path / "pendulum.jsonl"
    write_steps(path, list(recorder.record_episodes(3)))
    schema = json.loads(TORCHRL.read_text())
    schema["properties"]["action"] = {"type": "array", "items": {"type": "array", "items": {
        "type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 1}}}
    trainer = tmp_path / "torchrl_continuous.json"
    trainer.write_text(json.dumps(schema))
    return path, trainer


def mapped(rollouts: Path, trainer: Path, model=None) -> dict[str, np.ndarray]:
    """The trainer's batch as `batch --trainer` makes it, from the map the diff writes."""
    fmap = diff(model or SAMPLER, trainer, batch_dims="B,T").field_map()
    assert fmap["fields"]["next.observation"]["op"] == "next"
    return half_way(rollouts, fmap, model=model, trainer=trainer, batch_dims="B,T").batch


def tensordict(arrays: dict[str, np.ndarray], mask: np.ndarray):
    from tensordict import TensorDict

    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    return TensorDict(tensors, batch_size=list(mask.shape)).unflatten_keys(".")


def torchrl_gae(td, net):
    from torchrl.objectives.value import GAE

    gae = GAE(gamma=GAMMA, lmbda=LAM, value_network=net, average_gae=False)
    with torch.no_grad():
        out = gae(td.exclude("advantage", "value_target", "state_value"))
    return out["advantage"][..., 0].numpy()


def by_hand(path: Path, net, model=None) -> list[np.ndarray]:
    """TorchRL's GAE on each episode alone, its TensorDict built from the records: the next
    observation of step t is step t + 1's, the recorded final one on the last step."""
    out = []
    for ep in read_episodes(path, model or RolloutStep):
        c = ep.columns
        obs = c["observation"].astype(np.float32)
        nxt = np.concatenate([obs[1:], c["next_observation"][-1:]]).astype(np.float32)
        done = (c["terminated"] | c["truncated"])[None, :, None]
        td = tensordict({"observation": obs[None], "next.observation": nxt[None],
                         "next.reward": c["reward"][None, :, None].astype(np.float32),
                         "next.done": done, "next.terminated": c["terminated"][None, :, None]},
                        np.ones((1, len(obs)), bool))
        out.append(torchrl_gae(td, net)[0])
    return out


@pytest.mark.parametrize("case", ["pendulum", "cartpole"])
def test_torchrl_gae_on_the_mapped_batch_equals_it_on_hand_built_episodes(case, tmp_path):
    """Pendulum: all episodes truncated (the bootstrap reads V(final observation)); CartPole:
    episodes of different lengths, terminated and truncated, so rows carry padding."""
    if case == "pendulum":
        net = critic(3)
        rollouts, trainer = pendulum(tmp_path, net)
        batch, model = mapped(rollouts, trainer), None
    else:
        net, rollouts, model = critic(4), CARTPOLE, CartPoleStep
        batch = mapped(rollouts, TORCHRL, model)
    mask = batch["collector.mask"]
    assert np.isfinite(batch["next.observation"][mask]).all()
    on_batch = torchrl_gae(tensordict(batch, mask), net)
    episodes = by_hand(rollouts, net, model)
    assert len(episodes) == mask.shape[0]
    for b, want in enumerate(episodes):
        assert mask[b].sum() == len(want)
        np.testing.assert_allclose(on_batch[b, :len(want)], want, rtol=1e-5, atol=1e-5)
    if case == "pendulum":  # the values came from the same critic: our GAE is TorchRL's
        np.testing.assert_allclose(batch["advantage"][..., 0][mask], on_batch[mask],
                                   rtol=1e-4, atol=1e-4)


# -- padding and normalize_advantage ------------------------------------------------------------

def clip_ppo(td, *, normalize: bool) -> dict[str, float]:
    from tensordict.nn import TensorDictModule
    from torch import nn
    from torchrl.modules import ProbabilisticActor
    from torchrl.objectives import ClipPPOLoss

    torch.manual_seed(0)
    actor = ProbabilisticActor(
        TensorDictModule(nn.Linear(4, 2), in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"], distribution_class=torch.distributions.Categorical,
        return_log_prob=True)
    loss = ClipPPOLoss(actor, critic(4), normalize_advantage=normalize)
    out = loss(td)
    keys = ("loss_objective", "loss_critic", "loss_entropy", "entropy", "kl_approx",
            "clip_fraction")
    return {k: float(out[k].detach()) for k in keys}


def test_normalize_advantage_standardises_over_padding_and_the_real_steps_remedy_it():
    batch = mapped(CARTPOLE, TORCHRL, CartPoleStep)
    mask = batch["collector.mask"]
    assert 0.1 < 1 - mask.mean() < 0.5  # rows of different lengths: padding
    codes = [w.code for w in diff(CartPoleStep, TORCHRL, batch_dims="B,T").warnings]
    assert "normalize_over_padding" in codes
    td = tensordict(batch, mask)
    real_steps = td.exclude(("collector", "mask"))[torch.from_numpy(mask)]
    padded = clip_ppo(td, normalize=True)
    real = clip_ppo(real_steps, normalize=True)
    remedy = clip_ppo(td[td["collector", "mask"]], normalize=True)
    print(f"\nnormalize_advantage=True: padded {padded}\n  real steps {real}\n  "
          f"td[td['collector', 'mask']] {remedy}")
    assert padded["loss_objective"] != pytest.approx(real["loss_objective"], rel=1e-2)
    assert remedy == pytest.approx(real, rel=1e-6, abs=1e-7)
    # without normalisation the loss_* terms are masked, the logged statistics are not
    plain, plain_real = clip_ppo(td, normalize=False), clip_ppo(real_steps, normalize=False)
    for key in ("loss_objective", "loss_critic", "loss_entropy"):
        assert plain[key] == pytest.approx(plain_real[key], rel=1e-5, abs=1e-6), key
    assert plain["entropy"] != pytest.approx(plain_real["entropy"], rel=1e-4)
