"""The adapters hand the batch to the real libraries unchanged (`pytest -m peers`).

- `to_tensordict` of the batch `FieldMap.batch` builds for TorchRL's schema equals a TensorDict
  built by hand from the raw step records, shares the arrays' memory, and TorchRL's `GAE` and
  `ClipPPOLoss` run on it unchanged with the results they give on the hand-built one; the
  package's GAE in the batch equals TorchRL's `GAE` on the recorded values.
- `to_dataproto` of a GRPO batch (the LLM demo's sampler and numpy policy, the map the diff
  writes against a verl actor schema) feeds verl's `compute_grpo_outcome_advantage`,
  `kl_penalty` and `compute_policy_loss`, which give what the package's ops and its GRPO loss
  give.
- `to_torch` nests the keys and shares memory; strings stay numpy object arrays.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from gyre_contract.adapters import to_dataproto, to_tensordict, to_torch
from gyre_contract.pinned import CartPoleStep
from gyre_contract.schema import diff
from gyre_contract.trainer import FieldMap

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")
pytest.importorskip("torchrl")

pytestmark = [pytest.mark.peers, pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"
TORCHRL = ROOT / "tests" / "data" / "peers" / "torchrl_ppo.json"
GAMMA, LAM = 0.99, 0.95


@pytest.fixture(scope="module")
def batch() -> dict[str, np.ndarray]:
    """TorchRL's batch in one call, from the map the diff writes (it records B,T)."""
    fmap = FieldMap.from_dict(diff(CartPoleStep, TORCHRL, batch_dims="B,T").field_map())
    return fmap.batch(ROLLOUTS, trainer=TORCHRL, model=CartPoleStep)


def by_hand() -> tuple[object, dict]:
    """The TensorDict a TorchRL user builds from the raw records: one padded row per episode in
    order of first appearance, `next.*` from the following step (or the record's
    next_observation / next_value at the end), the padding mask under `collector.mask`; and
    the next state values (0 after a termination) for GAE on the recorded values."""
    from tensordict import TensorDict

    episodes: dict[str, list[dict]] = defaultdict(list)
    for line in ROLLOUTS.read_text().splitlines():
        record = json.loads(line)
        episodes[record["episode_id"]].append(record)
    b, t = len(episodes), max(len(steps) for steps in episodes.values())
    z = {"observation": np.zeros((b, t, 4), np.float32), "action": np.zeros((b, t), np.int64),
         "action_log_prob": np.zeros((b, t), np.float32),
         "state_value": np.zeros((b, t, 1), np.float32),
         "next_observation": np.zeros((b, t, 4), np.float32),
         "reward": np.zeros((b, t, 1), np.float32), "done": np.zeros((b, t, 1), bool),
         "terminated": np.zeros((b, t, 1), bool), "truncated": np.zeros((b, t, 1), bool),
         "mask": np.zeros((b, t), bool), "next_value": np.zeros((b, t, 1), np.float32)}
    for i, steps in enumerate(episodes.values()):
        for k, s in enumerate(steps):
            last = k == len(steps) - 1
            z["observation"][i, k] = s["observation"]
            z["action"][i, k] = s["action"]
            z["action_log_prob"][i, k] = s["logprob"]
            z["state_value"][i, k, 0] = s["value"]
            z["next_observation"][i, k] = s["next_observation"] if last else \
                steps[k + 1]["observation"]
            z["reward"][i, k, 0] = s["reward"]
            z["terminated"][i, k, 0] = s["terminated"]
            z["truncated"][i, k, 0] = s["truncated"]
            z["done"][i, k, 0] = s["terminated"] or s["truncated"]
            z["mask"][i, k] = True
            z["next_value"][i, k, 0] = 0.0 if s["terminated"] else \
                s["next_value"] if last else steps[k + 1]["value"]
    t_ = {k: torch.tensor(v) for k, v in z.items()}
    td = TensorDict({
        "observation": t_["observation"], "action": t_["action"],
        "action_log_prob": t_["action_log_prob"], "state_value": t_["state_value"],
        "next": {"observation": t_["next_observation"], "reward": t_["reward"],
                 "done": t_["done"], "terminated": t_["terminated"],
                 "truncated": t_["truncated"]},
        "collector": {"mask": t_["mask"]}}, batch_size=[b, t])
    return td, t_


def test_to_tensordict_equals_the_hand_built_tensordict_and_shares_memory(batch) -> None:
    td = to_tensordict(batch)
    hand, _ = by_hand()
    assert td.batch_size == hand.batch_size == torch.Size([8, 40])
    for key in hand.keys(True, True):
        assert td[key].dtype == hand[key].dtype, key
        torch.testing.assert_close(td[key], hand[key], rtol=0, atol=0, msg=str(key))
    assert {"advantage", "value_target"} <= set(td.keys())  # what the map adds: GAE's outputs
    for dotted, array in batch.items():
        tensor = td.get(tuple(dotted.split(".")))
        assert tensor.data_ptr() == array.ctypes.data, dotted
        assert np.shares_memory(tensor.numpy(), array), dotted
    array = batch["next.reward"]
    array[0, 0, 0] += 1.0  # one buffer: a write through numpy is seen by the TensorDict
    assert float(td["next", "reward"][0, 0, 0]) == float(array[0, 0, 0])
    array[0, 0, 0] -= 1.0


def test_torchrl_gae_and_clip_ppo_loss_run_on_it_unchanged(batch) -> None:
    """TorchRL's GAE on the recorded values (`("next", "state_value")` added, which TorchRL's
    PPO schema does not hold) gives the same on both TensorDicts and equals the package's GAE
    that the map wrote; ClipPPOLoss gives the same loss on both."""
    from test_real_trainers import torchrl_loss
    from torchrl.objectives.value import GAE

    td, (hand, raw) = to_tensordict(batch), by_hand()
    mask = hand["collector", "mask"]
    results = []
    for one in (td.clone(), hand.clone()):
        one["next", "state_value"] = raw["next_value"]
        results.append(GAE(gamma=GAMMA, lmbda=LAM, value_network=None)(one))
    for key in ("advantage", "value_target"):
        torch.testing.assert_close(results[0][key][mask], results[1][key][mask], rtol=0, atol=0)
        gap = float((td[key][mask] - results[1][key][mask]).abs().max())
        print(f"\n{key}: max |package's GAE - TorchRL's GAE| = {gap:.3g}")
        torch.testing.assert_close(td[key][mask], results[1][key][mask], rtol=1e-5, atol=1e-4)
    hand.update({"advantage": results[1]["advantage"], "value_target": results[1]["value_target"]})
    loss_ours, loss_theirs = torchrl_loss(td), torchrl_loss(hand)
    print(f"\nTorchRL ClipPPOLoss on to_tensordict: {loss_ours}\n  on the hand-built: {loss_theirs}")
    assert loss_ours == pytest.approx(loss_theirs, rel=1e-5, abs=1e-6)


def test_to_torch_nests_keys_shares_memory_and_keeps_strings() -> None:
    batch = FieldMap.load(ROOT / "examples" / "cartpole_map.json").batch(ROLLOUTS,
                                                                         model=CartPoleStep)
    out = to_torch(batch)
    assert out["episode_id"].dtype == object and out["episode_id"].tolist() == \
        batch["episode_id"].tolist()
    assert out["obs"].data_ptr() == batch["obs"].ctypes.data
    nested = to_torch({"next.reward": batch["reward"], "next.done": batch["done"]})
    assert set(nested) == {"next"} and nested["next"]["reward"].shape == batch["reward"].shape
    assert to_torch(batch, device="cpu")["obs"].device.type == "cpu"


# -- verl -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def grpo() -> dict:
    """A GRPO batch from the LLM demo's sampler and policy, under verl's keys, plus verl's
    `token_level_rewards` (the score on the last response token, no KL in the reward)."""
    pytest.importorskip("verl")
    from gyre_contract.harness._llmdemo import AdditionStep, GroupSampler, verl_actor_schema
    from gyre_contract.harness._tokenpolicy import AdditionTask, TokenPolicy

    policy = TokenPolicy(seed=3, lr=0.1)
    sampler = GroupSampler(policy, AdditionTask(), seed=3, run_id="peers", prompts=6, group=4)
    records = sampler.sample(0, policy.weights, 0)
    schema = verl_actor_schema()
    written = diff(AdditionStep, schema).field_map()
    written["fields"]["token_level_rewards"] = {
        "op": "kl_reward", "from": ["reward", "logprob", "ref_logprob"], "beta": 0.0,
        "estimator": "k1"}
    for estimator in ("k2", "k3"):  # the other estimators of the package's kl op
        written["fields"][f"kl_{estimator}"] = {"op": "kl", "from": ["logprob", "ref_logprob"],
                                                "estimator": estimator}
    batch = FieldMap.from_dict(written).batch(records, trainer=schema, model=AdditionStep)
    return {"batch": batch, "policy": policy, "records": records, "map": written}


def test_to_dataproto_holds_the_batch_as_verl_builds_it(grpo) -> None:
    batch = grpo["batch"]
    dp = to_dataproto(batch, meta_info={"temperature": 1.0})
    dp.check_consistency()
    assert dp.batch.batch_size == torch.Size([len(grpo["records"])])
    uid = dp.non_tensor_batch["uid"]
    assert uid.dtype == object and uid.tolist() == [r["group_id"] for r in grpo["records"]]
    assert set(dp.batch.keys()) == set(batch) - {"uid"}
    assert dp.batch["advantages"].data_ptr() == batch["advantages"].ctypes.data
    assert dp.meta_info == {"temperature": 1.0}
    assert len(dp[2:5]) == 3 and dp[2:5].non_tensor_batch["uid"].tolist() == uid[2:5].tolist()


def test_verl_grpo_advantage_and_kl_penalty_equal_the_packages_ops(grpo) -> None:
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, kl_penalty

    assert grpo["map"]["fields"]["advantages"]["op"] == "group_norm"
    dp = to_dataproto(grpo["batch"])
    mask = dp.batch["response_mask"]
    theirs, _ = compute_grpo_outcome_advantage(dp.batch["token_level_rewards"], mask,
                                               dp.non_tensor_batch["uid"], epsilon=1e-6)
    gap = float((theirs - dp.batch["advantages"]).abs().max())
    print(f"\nverl compute_grpo_outcome_advantage vs group_norm: max |diff| {gap:.3g}")
    torch.testing.assert_close(dp.batch["advantages"], theirs.to(torch.float32), rtol=1e-6,
                               atol=2e-6)
    assert grpo["map"]["fields"]["kl"] == {"op": "kl", "from": ["logprob", "ref_logprob"],
                                           "estimator": "k1"}
    real = mask.bool()
    for ours, theirs in (("kl", "kl"), ("kl_k2", "mse"), ("kl_k3", "low_var_kl")):
        want = kl_penalty(dp.batch["old_log_probs"], dp.batch["ref_log_prob"], theirs)
        torch.testing.assert_close(dp.batch[ours][real], want[real], rtol=1e-5, atol=1e-6)
        assert not dp.batch[ours][~real].any()  # 0 off the response tokens


def test_verl_policy_loss_equals_the_packages_grpo_loss(grpo) -> None:
    from verl.trainer.ppo.core_algos import agg_loss, compute_policy_loss, kl_penalty

    from gyre_contract.harness._tokenpolicy import operands

    batch, policy = grpo["batch"], grpo["policy"]
    policy.train_step(batch)  # the weights move: the ratios are no longer 1
    a, b = operands(batch["prompts"])
    dp = to_dataproto(batch)
    new = torch.tensor(policy.token_logprobs(a, b, batch["responses"]), dtype=torch.float32)
    mask = dp.batch["response_mask"].float()
    adv, old = dp.batch["advantages"], dp.batch["old_log_probs"]
    ratio = torch.exp(new - old)
    assert not bool(((ratio > 3.0) & (adv < 0) & mask.bool()).any())  # no dual-clip: PPO's own
    pg, clipfrac, _, _ = compute_policy_loss(old, new, adv, mask, cliprange=policy.clip,
                                             loss_agg_mode="token-mean")
    kl = agg_loss(kl_penalty(new, dp.batch["ref_log_prob"], "low_var_kl"), mask, "token-mean")
    theirs = float(pg + policy.beta * kl)
    ours = policy.loss(batch)
    print(f"\nGRPO loss: package {ours:.8f}, verl {theirs:.8f} (clip fraction {float(clipfrac):.3f})")
    assert float(clipfrac) > 0  # the clip is exercised
    assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-6)


# -- the stages hand the container over -------------------------------------------------------

def test_half_way_hands_torchrls_loss_a_tensordict(batch) -> None:
    """TorchRL's ClipPPOLoss is the loss function itself: no glue between stage 2 and it."""
    from test_real_trainers import torchrl_loss

    from gyre_contract.harness import half_way

    fmap = FieldMap.from_dict(diff(CartPoleStep, TORCHRL, batch_dims="B,T").field_map())
    seen = []

    def loss(td):
        seen.append(td)
        return torchrl_loss(td)["loss_objective"]

    report = half_way(ROLLOUTS, fmap, loss, model=CartPoleStep, trainer=TORCHRL,
                      container="tensordict")
    assert isinstance(seen[0], tensordict.TensorDict)
    assert seen[0].batch_size == torch.Size([8, 40])  # the trainer schema's batch dims B, T
    assert report.loss == pytest.approx(torchrl_loss(to_tensordict(batch))["loss_objective"])
    assert isinstance(report.batch["observation"], np.ndarray)  # the report keeps the arrays


def test_half_way_hands_a_nested_dict_of_tensors() -> None:
    from gyre_contract.harness import half_way

    def loss(t):
        assert isinstance(t["obs"], torch.Tensor) and t["episode_id"].dtype == object
        return (t["advantage"] * t["mask"]).sum() / t["mask"].sum()

    report = half_way(ROLLOUTS, ROOT / "examples" / "cartpole_map.json", loss,
                      model=CartPoleStep, container="torch")
    arrays = report.batch
    want = (arrays["advantage"] * arrays["mask"]).sum() / arrays["mask"].sum()
    assert report.loss == pytest.approx(float(want), rel=1e-6)


def test_full_loop_hands_verl_a_dataproto(grpo) -> None:
    """Two GRPO cycles whose train function is verl's own code on a DataProto."""
    from verl import DataProto
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from gyre_contract.harness import full_loop
    from gyre_contract.harness._llmdemo import AdditionStep, GroupSampler, verl_actor_schema
    from gyre_contract.harness._tokenpolicy import AdditionTask, TokenPolicy

    policy = TokenPolicy(seed=5)
    sampler = GroupSampler(policy, AdditionTask(), seed=5, run_id="loop", prompts=4, group=4)
    gaps = []

    def train(data):
        assert isinstance(data, DataProto) and data.non_tensor_batch["uid"].dtype == object
        theirs, _ = compute_grpo_outcome_advantage(data.batch["token_level_rewards"],
                                                   data.batch["response_mask"],
                                                   data.non_tensor_batch["uid"], epsilon=1e-6)
        gaps.append(float((theirs - data.batch["advantages"]).abs().max()))
        return {"gap": gaps[-1]}

    report = full_loop(lambda v: sampler.sample(v, policy.weights, v), train, grpo["map"],
                       cycles=2, model=AdditionStep, trainer=verl_actor_schema(),
                       container="dataproto")
    assert len(report.cycles) == 2 and len(gaps) == 2 and max(gaps) < 2e-6
