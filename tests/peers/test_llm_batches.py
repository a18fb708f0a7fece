"""The batches the written LLM maps produce, fed to the real trainers' own loss code (`pytest -m
peers`; set up as in test_llm_trainers.py).

GRPO step records (4 prompts x 4 completions of varying prompt and response lengths, per-token
log-probs and reference log-probs, groups interleaved) plus one three-turn conversation whose
second turn splices tool output in (`loss_mask` False) go through `diff --write-map` against
each trainer schema under tests/data/peers and `batch --map --trainer -o batch.npz`. The .npz is
loaded with numpy alone and given to verl's `core_algos` (GRPO advantages from
`token_level_rewards`, `response_mask` and `uid`; `compute_policy_loss_vanilla`, `agg_loss`,
`kl_penalty`) and to TRL's `GRPOTrainer._compute_loss` itself (the model's forward replaced by
fixed per-token log-probs). Checked: the advantages the map wrote equal the library's from the
same rewards and groups, and values at masked positions never change a loss.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from gyre_contract.cli._app import run

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")

pytestmark = [pytest.mark.peers, pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tests" / "data" / "peers"
TOL = 2e-6
GRPO_ROWS = 16
REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.5, 0.25, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.3, -0.7, 2.0, 0.1]]
TOOL_TURN = {"action": [12, 90, 91, 13], "loss_mask": [True, False, False, True]}


def records() -> list[dict]:
    rng = np.random.default_rng(7)
    out = []
    for k in range(4):  # the sampler finishes completions in any order: groups interleaved
        for p in range(4):
            prompt = [5 + p + i for i in range(2 + 2 * p)]
            n = int(rng.integers(1, 7))
            lp = -rng.uniform(0.01, 3, n)
            out.append({"observation": {"token_ids": prompt}, "action": rng.integers(5, 999, n).tolist(),
                        "logprob": lp.tolist(),
                        "ref_logprob": np.minimum(lp + rng.normal(0, 0.3, n), 0).tolist(),
                        "group_id": f"prompt-{p}", "reward": REWARDS[p][k], "step": 0,
                        "episode_id": f"prompt-{p}/{k}", "terminated": True, "truncated": False,
                        "policy_version": 3})
    context = [1, 2, 3]
    for t, (action, mask) in enumerate([([10, 11], [True, True]),
                                        (TOOL_TURN["action"], TOOL_TURN["loss_mask"]),
                                        ([14], [True])]):
        lp = [-0.2 - 0.1 * i for i in range(len(action))]
        out.append({"observation": {"token_ids": list(context)}, "action": action, "logprob": lp,
                    "ref_logprob": [x - 0.05 for x in lp], "loss_mask": mask, "group_id": "chat",
                    "reward": float(t == 2), "step": t, "episode_id": "chat",
                    "terminated": t == 2, "truncated": False, "policy_version": 3})
        context = context + action + [50, 51]
    return out


@pytest.fixture(scope="module")
def batches(tmp_path_factory) -> dict[str, dict[str, np.ndarray]]:
    from gyre_contract.pinned import LLMStep
    from gyre_contract.schema import json_schema

    tmp = tmp_path_factory.mktemp("llm")
    step = tmp / "llm_step.json"
    step.write_text(json.dumps(json_schema(LLMStep)))
    rollouts = tmp / "grpo.jsonl"
    rollouts.write_text("".join(json.dumps(r) + "\n" for r in records()))
    out = {}
    for name in ("verl_actor_batch", "trl_grpo", "openrlhf_experience"):
        fmap, npz = tmp / f"{name}.map.json", tmp / f"{name}.npz"
        assert run(["diff", str(step), str(PEERS / f"{name}.json"), "--write-map", str(fmap)]) == 0
        assert run(["batch", str(rollouts), "--map", str(fmap), "--trainer",
                    str(PEERS / f"{name}.json"), "-o", str(npz)]) == 0
        with np.load(npz) as data:
            out[name] = dict(data)
    return out


def report(what: str, ours, theirs) -> None:
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape
    print(f"\n{what}: max |ours - theirs| = {float(np.max(np.abs(ours - theirs))):.3g}")
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=TOL)


def test_verl_batch_layout_and_grpo_advantages(batches):
    from verl.utils.model import compute_position_id_with_mask

    v, recs = batches["verl_actor_batch"], records()
    assert {k: str(a.dtype) for k, a in v.items() if k != "uid"} == {
        **{k: "int64" for k in ("input_ids", "attention_mask", "position_ids", "prompts",
                                "responses", "response_mask")},
        **{k: "float32" for k in ("old_log_probs", "rollout_log_probs", "ref_log_prob",
                                  "token_level_rewards", "advantages")}}
    p, r = v["prompts"].shape[1], v["responses"].shape[1]
    for i, rec in enumerate(recs):
        prompt, action = rec["observation"]["token_ids"], rec["action"]
        mask = [int(m) for m in rec.get("loss_mask", [True] * len(action))]
        assert v["input_ids"][i].tolist() == [0] * (p - len(prompt)) + prompt + action + \
            [0] * (r - len(action))
        assert v["attention_mask"][i].tolist() == [0] * (p - len(prompt)) + \
            [1] * (len(prompt) + len(action)) + [0] * (r - len(action))  # tool output attended
        assert v["response_mask"][i].tolist() == mask + [0] * (r - len(action))
        assert v["uid"][i] == rec["group_id"]
    positions = compute_position_id_with_mask(torch.tensor(v["attention_mask"])).numpy()
    assert (v["position_ids"] == positions).all()
    mask = torch.tensor(v["response_mask"], dtype=torch.float32)
    rewards = torch.tensor(v["token_level_rewards"])
    assert (rewards.sum(-1).numpy() == np.float32([rec["reward"] for rec in recs])).all()
    theirs, _ = core_algos.compute_grpo_outcome_advantage(
        rewards, mask, np.array(v["uid"], dtype=object), epsilon=1e-6)
    report("verl compute_grpo_outcome_advantage on the batch", v["advantages"], theirs.numpy())


def test_verl_losses_never_read_masked_positions(batches):
    v = batches["verl_actor_batch"]
    mask = torch.tensor(v["response_mask"], dtype=torch.float32)
    masked = ~mask.bool()
    assert masked[GRPO_ROWS + 1, 1:3].all()  # the spliced tool output
    old, adv = torch.tensor(v["old_log_probs"]), torch.tensor(v["advantages"])
    ref = torch.tensor(v["ref_log_prob"])
    new = old + torch.tensor(np.random.default_rng(0).normal(0, 0.1, old.shape), dtype=torch.float32)

    def junk(x: torch.Tensor, value: float) -> torch.Tensor:
        return torch.where(masked, torch.tensor(value), x)

    actor = pytest.importorskip("verl.workers.config.actor")
    config = actor.ActorConfig(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2,
                               clip_ratio_c=3.0, strategy="fsdp", ppo_mini_batch_size=4,
                               ppo_micro_batch_size_per_gpu=1, use_dynamic_bsz=False, rollout_n=4)
    loss = core_algos.compute_policy_loss_vanilla(old, new, adv, mask, "token-mean", config)[0]
    again = core_algos.compute_policy_loss_vanilla(junk(old, -80.0), junk(new, 50.0),
                                                   junk(adv, 1e6), mask, "token-mean", config)[0]
    assert torch.isfinite(loss) and float(loss) == float(again)
    for estimator in ("kl", "low_var_kl", "mse"):
        kl = core_algos.kl_penalty(old, ref, estimator)
        for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
            a = core_algos.agg_loss(kl, mask, mode)
            b = core_algos.agg_loss(junk(kl, 1e6), mask, mode)
            assert float(a) == float(b), (estimator, mode)


ATTENDED: list = []  # the attention masks TRL's forward was given


def trl_compute_loss(inputs: dict, per_token_logps: torch.Tensor, loss_type: str) -> float:
    """TRL's own GRPOTrainer._compute_loss; the model's forward gives `per_token_logps`."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    fake = mock.MagicMock()

    def forward(model, input_ids, attention_mask, *a, **k):
        ATTENDED.append(attention_mask)
        return per_token_logps, torch.zeros_like(per_token_logps), None

    fake._get_per_token_logps_and_entropies = forward
    fake.top_entropy_quantile, fake.off_policy_mask_threshold = 1.0, None
    fake.importance_sampling_level, fake.beta, fake.loss_type = "token", 0.04, loss_type
    fake.epsilon_low = fake.epsilon_high = 0.2
    fake.args.delta, fake.args.use_bias_correction_kl = None, False
    fake.use_vllm, fake.model.training = False, False
    fake._entropy_bonus_enabled, fake.aux_loss_enabled = False, False
    fake.max_completion_length = per_token_logps.shape[1]
    fake._metrics = collections.defaultdict(lambda: collections.defaultdict(list))
    fake.accelerator.gather = lambda x: x
    try:
        return float(GRPOTrainer._compute_loss(fake, None, inputs))
    except (AttributeError, TypeError) as error:  # another TRL's trainer state
        pytest.skip(f"this TRL's GRPOTrainer._compute_loss needs more state: {error}")


def test_trl_grpo_advantages_and_loss(batches):
    from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: F401 (the skip above needs it)

    t = batches["trl_grpo"]
    assert t["advantages"].shape == (len(records()),) and t["advantages"].dtype == np.float32
    rewards = torch.tensor([rec["reward"] for rec in records()[:GRPO_ROWS]])
    by_prompt = rewards.view(4, 4).T  # row k*4 + p -> [p, k]
    mean, std = by_prompt.mean(1, keepdim=True), by_prompt.std(1, keepdim=True)
    theirs = ((by_prompt - mean) / (std + 1e-4)).T.reshape(-1)  # TRL's lines, grouped by uid
    report("TRL GRPO advantages (scale_rewards=group)", t["advantages"][:GRPO_ROWS], theirs.numpy())
    inputs = {k: torch.tensor(t[k]) for k in ("prompt_ids", "prompt_mask", "completion_ids",
                                              "completion_mask", "tool_mask",
                                              "old_per_token_logps", "ref_per_token_logps",
                                              "advantages")}
    # TRL attends with completion_mask, so the spliced tool output stays 1 there; tool_mask
    # takes it out of the loss (TRL's own multi-turn tool handling)
    tool_row = GRPO_ROWS + 1
    assert inputs["completion_mask"][tool_row, :4].tolist() == [1, 1, 1, 1]
    assert inputs["tool_mask"][tool_row, :4].tolist() == [1, 0, 0, 1]
    masked = ~(inputs["completion_mask"] * inputs["tool_mask"]).bool()
    assert masked[tool_row, 1:3].all()
    old = inputs["old_per_token_logps"]
    new = old + torch.tensor(np.random.default_rng(1).normal(0, 0.1, old.shape), dtype=torch.float32)
    junk = dict(inputs, old_per_token_logps=torch.where(masked, torch.tensor(-3.0), old),
                ref_per_token_logps=torch.where(masked, torch.tensor(-5.0),
                                                inputs["ref_per_token_logps"]))
    for loss_type in ("grpo", "bnpo", "dr_grpo"):
        loss = trl_compute_loss(inputs, new, loss_type)
        again = trl_compute_loss(junk, torch.where(masked, torch.tensor(-0.5), new), loss_type)
        assert np.isfinite(loss) and loss == again, loss_type
    attended = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    assert ATTENDED and all(torch.equal(a, attended) for a in ATTENDED)
    assert ATTENDED[0][tool_row, -inputs["completion_ids"].shape[1]:][:4].tolist() == [1] * 4


def test_openrlhf_advantages_are_its_group_norm(batches):
    o = batches["openrlhf_experience"]
    rewards = torch.tensor([rec["reward"] for rec in records()[:GRPO_ROWS]]).view(4, 4).T
    norm = ((rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-9))
    per_row = norm.T.reshape(-1).numpy()
    report("OpenRLHF group_norm", o["advantages"][:GRPO_ROWS],
           np.where(o["action_mask"][:GRPO_ROWS], per_row[:, None], 0))
    assert (o["returns"] == o["advantages"]).all()
