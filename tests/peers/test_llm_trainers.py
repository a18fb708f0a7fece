"""The token ops give the numbers of the real LLM trainers on the same inputs (`pytest -m peers`).

verl's `core_algos` (GRPO and RLOO outcome advantages, `kl_penalty`), its `apply_kl_penalty`
(`token_level_rewards`) and `compute_position_id_with_mask`; TRL's GRPOTrainer advantages (every
`scale_rewards`), its per-token KL and RLOOTrainer's leave-one-out baseline, run as TRL's own
source lines (they sit inside the trainers' methods, so the lines are taken from the installed
trainer and run on our inputs). Skipped unless torch, trl and verl are installed; `.ci/peers`
(run by `.ci/run`) installs them in a second venv, with torch pinned to its CPU build, and fails
on any skip:

    bash .ci/peers                      # or, in that venv:
    $GYRE_PEERS_VENV/bin/python -m pytest -m peers tests/peers/test_llm_trainers.py -s

`-s` prints the largest difference of each comparison and the versions compared.
"""

from __future__ import annotations

import inspect
import textwrap
import types

import numpy as np
import pytest

from gyre_contract.trainer import _ops as ops

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")

pytestmark = [pytest.mark.peers, pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::FutureWarning")]

TOL = 2e-6
"""float32 throughout: the trainers compute in float32, the ops in float64 then round."""
GENERATIONS = 4


def report(what: str, ours: np.ndarray, theirs: np.ndarray) -> float:
    """Print the largest difference and fail beyond float32 rounding (TOL, or 1e-6 relative)."""
    import verl

    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape
    worst = float(np.max(np.abs(ours - theirs))) if ours.size else 0.0
    print(f"\n{what}: max |ours - theirs| = {worst:.3g} (torch {torch.__version__}, trl "
          f"{trl.__version__}, verl {verl.__version__})")
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=TOL)
    return worst


def run(name: str, sources: tuple[str, ...], columns: dict, **args) -> np.ndarray:
    op = ops.get_op(name)
    return ops.run_op(op, [columns[s] for s in sources], columns, args, sources)


def batch(seed: int = 0, prompts: int = 6, width: int = 7) -> dict[str, np.ndarray]:
    """GENERATIONS completions per prompt, in TRL's order (a group's rows are consecutive):
    binary, graded and equal rewards, completions cut short (response_length < width)."""
    rng = np.random.default_rng(seed)
    rows = prompts * GENERATIONS
    reward = rng.choice([0.0, 0.25, 0.5, 1.0], rows).astype(np.float32)
    reward[:GENERATIONS] = 1.0  # a group whose rewards are all equal: advantage 0
    reward[GENERATIONS:2 * GENERATIONS] = rng.normal(size=GENERATIONS)
    length = rng.integers(1, width + 1, rows)
    mask = np.arange(width) < length[:, None]
    logprob = -rng.uniform(0.01, 4, (rows, width))  # the policy near its reference:
    ref = np.minimum(logprob + rng.normal(0, 0.5, (rows, width)), 0)  # verl's clamps stay shut
    return {
        "reward": reward,
        "group_id": np.repeat([f"uid-{i}" for i in range(prompts)], GENERATIONS),
        "response_length": length.astype(np.int64),
        "response_mask": mask,
        "logprob": np.where(mask, logprob, 0).astype(np.float32),
        "ref_logprob": np.where(mask, ref, 0).astype(np.float32),
    }


def scores_at_last_token(cols: dict) -> torch.Tensor:
    """verl's token_level_scores: the sequence reward on the last response token."""
    out = np.zeros(cols["response_mask"].shape, np.float32)
    out[np.arange(len(out)), cols["response_length"] - 1] = cols["reward"]
    return torch.tensor(out)


def trl_lines(cls: type, method: str, first: str, last: str) -> str:
    """The lines of `cls.method` from the one containing `first` to the next containing `last`."""
    lines = inspect.getsource(getattr(cls, method)).splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if first in line)
        end = next(i for i in range(start, len(lines)) if last in lines[i])
    except StopIteration:
        pytest.skip(f"this TRL's {cls.__name__}.{method} no longer holds {first!r} .. {last!r}")
    return textwrap.dedent("\n".join(lines[start:end + 1]))


# -- verl ----------------------------------------------------------------------------------

@pytest.mark.parametrize("scaled", [True, False])
@pytest.mark.parametrize("function", ["compute_grpo_outcome_advantage",
                                      "compute_grpo_vectorized_outcome_advantage"])
def test_group_norm_then_per_token_is_verl_grpo(function, scaled):
    cols = batch()
    cols["group_id"][-1] = "alone"  # verl: a group of one keeps its score (mean 0, std 1)
    theirs, _ = getattr(core_algos, function)(
        scores_at_last_token(cols), torch.tensor(cols["response_mask"], dtype=torch.float32),
        np.array(cols["group_id"], dtype=object), epsilon=1e-6, norm_adv_by_std_in_grpo=scaled)
    cols["advantage"] = run("group_norm", ("reward", "group_id"), cols, eps=1e-6,
                            std="unbiased" if scaled else "none", singletons="raw")
    ours = run("per_token", ("advantage",), cols)
    if function.startswith("compute_grpo_vectorized"):  # its group of one is 0/(0 + eps)
        ours, theirs = ours[:-1], theirs[:-1]
    report(f"verl {function} scaled={scaled}", ours, theirs.numpy())


def test_rloo_then_per_token_is_verl_rloo():
    cols = batch(1)
    cols["group_id"][-1] = "alone"
    theirs, _ = core_algos.compute_rloo_outcome_advantage(
        scores_at_last_token(cols), torch.tensor(cols["response_mask"], dtype=torch.float32),
        np.array(cols["group_id"], dtype=object))
    cols["advantage"] = run("rloo", ("reward", "group_id"), cols, singletons="raw")
    ours = run("per_token", ("advantage",), cols)
    report("verl compute_rloo_outcome_advantage", ours, theirs.numpy())


@pytest.mark.parametrize(("ours", "theirs"), [("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl")])
def test_kl_is_verl_kl_penalty(ours, theirs):
    cols = batch(2)
    mine = run("kl", ("logprob", "ref_logprob"), cols, estimator=ours)
    verl = core_algos.kl_penalty(torch.tensor(cols["logprob"]), torch.tensor(cols["ref_logprob"]),
                                 theirs) * torch.tensor(cols["response_mask"])
    report(f"verl kl_penalty {theirs}", mine, verl.numpy())


def test_k3_differs_from_verl_only_where_verl_clamps():
    """verl clamps the log-ratio to ±20 and low_var_kl to ±10; our k3 does not."""
    lp = np.array([[-0.5, -30.0, -1.0]], np.float32)
    ref = np.array([[-0.4, -0.1, -14.0]], np.float32)
    cols = {"logprob": lp, "ref_logprob": ref, "response_mask": np.ones((1, 3), bool)}
    mine = run("kl", ("logprob", "ref_logprob"), cols, estimator="k3")
    verl = core_algos.kl_penalty(torch.tensor(lp), torch.tensor(ref), "low_var_kl").numpy()
    assert abs(mine[0, 0] - verl[0, 0]) <= TOL
    assert verl[0, 1] == 10 and mine[0, 1] > 1e12  # ref - logp = 29.9: exp(29.9)
    assert verl[0, 2] == 10 and mine[0, 2] == pytest.approx(12.0)  # ref - logp = -13


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_kl_reward_is_verl_apply_kl_penalty(estimator):
    ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")
    from verl import DataProto

    cols = batch(3)
    data = DataProto.from_dict(tensors={
        "response_mask": torch.tensor(cols["response_mask"], dtype=torch.float32),
        "token_level_scores": scores_at_last_token(cols),
        "old_log_probs": torch.tensor(cols["logprob"]),
        "ref_log_prob": torch.tensor(cols["ref_logprob"])})
    name = {"k1": "kl", "k3": "low_var_kl"}[estimator]
    data, _ = ray_trainer.apply_kl_penalty(data, core_algos.FixedKLController(0.05), name)
    mine = run("kl_reward", ("reward", "logprob", "ref_logprob"), cols, beta=0.05,
               estimator=estimator)
    theirs = data.batch["token_level_rewards"].numpy()
    report(f"verl apply_kl_penalty {name}", mine, theirs)


def test_concat_position_ids_are_verl_compute_position_id_with_mask():
    from verl.utils.model import compute_position_id_with_mask

    rng = np.random.default_rng(4)
    p_len, r_len = rng.integers(0, 6, 9), rng.integers(0, 5, 9)
    cols = {"prompt_ids": np.where(np.arange(5) >= 5 - p_len[:, None], 9, 0),
            "prompt_mask": np.arange(5) >= 5 - p_len[:, None],
            "response_ids": np.where(np.arange(4) < r_len[:, None], 7, 0),
            "response_length": r_len.astype(np.int64)}
    attention = run("concat", ("prompt_ids", "response_ids"), cols, output="attention_mask")
    mine = run("concat", ("prompt_ids", "response_ids"), cols, output="position_ids")
    theirs = compute_position_id_with_mask(torch.tensor(attention.astype(np.int64))).numpy()
    assert report("verl compute_position_id_with_mask", mine, theirs) == 0


# -- TRL -----------------------------------------------------------------------------------

@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_group_norm_is_trl_grpo_advantages(scale_rewards):
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import nanstd

    code = trl_lines(GRPOTrainer, "_generate_and_score_completions",
                     "mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations)",
                     "is_std_zero = torch.isclose(std_rewards")
    cols = batch(5)
    space = {"torch": torch, "nanstd": nanstd, "num_generations": GENERATIONS,
             "rewards": torch.tensor(cols["reward"]),
             "self": types.SimpleNamespace(scale_rewards=scale_rewards)}
    exec(code, space)  # TRL's own lines, on our rewards
    theirs = space["advantages"].numpy()
    args = {"none": {"std": "none"}, "group": {}, "batch": {"scale": "batch"}}[scale_rewards]
    mine = run("group_norm", ("reward", "group_id"), cols, eps=1e-4, **args)
    report(f"TRL GRPO scale_rewards={scale_rewards}", mine, theirs)


def test_rloo_is_trl_rloo_advantages():
    from trl.trainer.rloo_trainer import RLOOTrainer
    from trl.trainer.utils import nanstd

    code = trl_lines(RLOOTrainer, "_generate_and_score_completions",
                     "grouped_rewards = rewards.view(-1, num_generations)",
                     "advantages = torch.nan_to_num(advantages")
    cols = batch(6)
    space = {"torch": torch, "nanstd": nanstd, "num_generations": GENERATIONS,
             "rewards": torch.tensor(cols["reward"]),
             "self": types.SimpleNamespace(normalize_advantages=False)}
    exec(code, space)
    mine = run("rloo", ("reward", "group_id"), cols)
    report("TRL RLOO", mine, space["advantages"].numpy())


def test_kl_k3_is_trl_grpo_per_token_kl():
    cols = batch(7)
    space = {"torch": torch, "ref_per_token_logps": torch.tensor(cols["ref_logprob"]),
             "per_token_logps": torch.tensor(cols["logprob"])}
    exec(trl_kl_statement(), space)
    theirs = (space["per_token_kl"] * torch.tensor(cols["response_mask"])).numpy()
    mine = run("kl", ("logprob", "ref_logprob"), cols, estimator="k3")
    report("TRL GRPO per_token_kl", mine, theirs)


def trl_kl_statement() -> str:
    """TRL GRPOTrainer's `per_token_kl = (...)` statement, as its source spells it."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    lines = inspect.getsource(GRPOTrainer._compute_loss).splitlines()
    start = next((i for i, line in enumerate(lines) if "per_token_kl = (" in line), None)
    if start is None:
        pytest.skip("this TRL's GRPOTrainer._compute_loss no longer spells per_token_kl = (...)")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == ")")
    return textwrap.dedent("\n".join(lines[start:end + 1]))
