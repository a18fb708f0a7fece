"""`gyre-contract demo --llm`: the token policy and its task, the GRPO loss and its gradient,
recording generations, sampling one version ahead, and the demo's stages and exit codes."""

from __future__ import annotations

import functools
import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyre_contract.cli._app import run
from gyre_contract.core._errors import ContractError, Problem
from gyre_contract.harness import _llmdemo as llmdemo
from gyre_contract.harness._llmdemo import (
    AdditionStep,
    GroupSampler,
    OneAheadSampler,
    group_advantages,
    reward_rose,
    run_llm_demo,
    verl_actor_schema,
)
from gyre_contract.harness._recorder import TurnRecorder
from gyre_contract.harness._runlog import RunLog
from gyre_contract.harness._tokenpolicy import (
    BOS,
    EOS,
    GRPO_KEYS,
    PAD,
    AdditionTask,
    TokenPolicy,
    decode,
    encode,
    operands,
)
from gyre_contract.io import validate_file, write_steps
from gyre_contract.pinned import LLMStep

TASK = AdditionTask()


# -- the task --------------------------------------------------------------------------------

def test_task_prompts_answers_and_rewards():
    assert TASK.prompt(7, 8) == [BOS, *encode("7+8=")] and decode(TASK.prompt(7, 8)) == "<bos>7+8="
    assert TASK.answer(7, 8) == [*encode("15"), EOS] and TASK.answer(2, 3) == [*encode("5"), EOS]
    assert TASK.reward(7, 8, [*encode("15"), EOS]) == 1.0
    assert TASK.reward(7, 8, encode("15")) == pytest.approx(0.5 * 2 / 3)  # no <eos>: not exact
    assert TASK.reward(7, 8, [*encode("1"), EOS]) == pytest.approx(0.5 / 3)
    assert TASK.reward(2, 3, [*encode("5"), EOS, EOS]) == pytest.approx(0.5)
    assert AdditionTask(partial_credit=False).reward(7, 8, encode("15")) == 0.0
    assert len(set(TASK.problems())) == 100
    with pytest.raises(ValueError, match="cannot encode 'x'"):
        encode("x")


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 9), st.integers(0, 9),
       st.lists(st.integers(EOS, 14), min_size=0, max_size=3))
def test_reward_is_one_exactly_for_the_answer_and_partial_credit_at_most_half(a, b, tokens):
    reward = TASK.reward(a, b, tokens)
    if tokens == TASK.answer(a, b):
        assert reward == 1.0
    else:
        assert 0.0 <= reward <= 0.5  # 0.5: every answer token right, then extra tokens
        right = sum(x == y for x, y in zip(tokens, TASK.answer(a, b), strict=False))
        assert reward == pytest.approx(0.5 * right / len(TASK.answer(a, b)))


def test_operands_read_left_padded_prompts_and_refuse_right_padded_ones():
    prompts = np.array([[PAD, *TASK.prompt(3, 9)], [*TASK.prompt(0, 0), PAD][::1]])
    with pytest.raises(ValueError, match="1 prompt rows do not end in 'a\\+b=' \\(row 1"):
        operands(prompts)
    a, b = operands(np.array([[PAD, *TASK.prompt(3, 9)], [PAD, *TASK.prompt(0, 4)]]))
    assert a.tolist() == [3, 0] and b.tolist() == [9, 4]


# -- the policy and the GRPO loss --------------------------------------------------------------

def _batch(policy, seed=0, n=12):
    """A batch in verl's keys, sampled by perturbed weights (ratios away from 1, some clipped)."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 10, n), rng.integers(0, 10, n)
    behaviour = policy.weights + rng.normal(0, 0.3, policy.weights.shape)
    sampled = policy.sample(a, b, rng, behaviour)
    width = max(len(t) for t in sampled.tokens)
    responses, mask = np.zeros((n, width), np.int64), np.zeros((n, width), bool)
    old = np.zeros((n, width), np.float32)
    for i, (tokens, logprob) in enumerate(zip(sampled.tokens, sampled.logprob, strict=True)):
        responses[i, :len(tokens)], mask[i, :len(tokens)], old[i, :len(tokens)] = \
            tokens, True, logprob
    ref = policy.token_logprobs(a, b, responses, policy.reference + rng.normal(
        0, 0.3, policy.weights.shape))
    return {"prompts": np.array([TASK.prompt(x, y) for x, y in zip(a, b, strict=True)]),
            "responses": responses, "response_mask": mask, "old_log_probs": old,
            "ref_log_prob": np.where(mask, ref, 0).astype(np.float32),
            "advantages": np.where(mask, rng.normal(size=(n, 1)), 0).astype(np.float32)}


def test_sampled_logprobs_are_the_policys_own():
    policy = TokenPolicy(seed=1, init_scale=0.5)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 10, 50), rng.integers(0, 10, 50)
    sampled = policy.sample(a, b, np.random.default_rng(1))
    for i, (tokens, logprob) in enumerate(zip(sampled.tokens, sampled.logprob, strict=True)):
        assert 1 <= len(tokens) <= 3 and (tokens[-1] == EOS or len(tokens) == 3)
        assert (tokens[:-1] != EOS).all() and (logprob <= 0).all()
        again = policy.token_logprobs(a[i:i + 1], b[i:i + 1], tokens[None])[0]
        np.testing.assert_allclose(again, logprob, rtol=1e-5, atol=1e-6)
    same = policy.sample(a, b, np.random.default_rng(1))
    assert all(np.array_equal(x, y) for x, y in zip(same.tokens, sampled.tokens, strict=True))


def test_grpo_gradient_matches_finite_differences():
    policy = TokenPolicy(seed=0, init_scale=0.5)
    batch = _batch(policy)
    policy.weights += np.random.default_rng(9).normal(0, 0.1, policy.weights.shape)
    _, grad, stats = policy._loss_and_grad(batch, grad=True)
    assert 0 < stats["clip_fraction"] < 1  # both branches of the PPO min are exercised
    rows = np.argwhere(grad != 0)
    assert len(rows) > 50
    for i, j in rows[np.random.default_rng(0).choice(len(rows), 25, replace=False)]:
        eps = 1e-6
        policy.weights[i, j] += eps
        up = policy.loss(batch)
        policy.weights[i, j] -= 2 * eps
        down = policy.loss(batch)
        policy.weights[i, j] += eps
        assert grad[i, j] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-9)


def test_grpo_loss_at_ratio_one_is_minus_the_token_mean_advantage():
    policy = TokenPolicy(seed=2)
    batch = _batch(policy)
    a, b = operands(batch["prompts"])
    own = policy.token_logprobs(a, b, batch["responses"])
    mask = batch["response_mask"]
    batch["old_log_probs"] = np.where(mask, own, 0)
    batch["ref_log_prob"] = batch["old_log_probs"]  # the reference is the policy: KL 0
    want = -batch["advantages"][mask].mean()
    assert policy.loss(batch) == pytest.approx(want, rel=1e-6)
    # advantages given per row [B] are broadcast over the tokens
    assert policy.loss({**batch, "advantages": batch["advantages"][:, 0]}) == \
        pytest.approx(want, rel=1e-6)
    # k3 >= 0: a reference away from the policy only adds to the loss
    batch["ref_log_prob"] = np.where(mask, own - 0.5, 0)
    assert policy.loss(batch) > want


def test_train_step_is_one_update_and_leaves_a_frozen_reference():
    policy = TokenPolicy(seed=3)
    batch = _batch(policy)
    reference, weights = policy.reference.copy(), policy.weights.copy()
    policy.loss(batch)
    assert np.array_equal(weights, policy.weights)
    metrics = policy.train_step(batch)
    assert metrics["policy_version"] == policy.version == 1
    assert set(metrics) == {"loss", "kl", "clip_fraction", "policy_version"}
    assert not np.array_equal(weights, policy.weights)
    assert np.array_equal(reference, policy.reference)


def test_loss_reads_the_keys_it_is_given():
    policy = TokenPolicy(seed=4, keys={**GRPO_KEYS, "advantage": "adv"})
    batch = _batch(policy)
    value = policy.loss({**{k: v for k, v in batch.items() if k != "advantages"},
                         "adv": batch["advantages"]})
    assert np.isfinite(value)
    with pytest.raises(KeyError, match="adv"):
        policy.loss(batch)


# -- recording generations -----------------------------------------------------------------------

def test_turn_recorder_records_a_group_as_validated_single_turn_episodes(tmp_path):
    version = [3]
    recorder = TurnRecorder(policy_version=lambda: version[0], run_id="r", model=AdditionStep)
    completions = [{"action": np.array(ids), "logprob": np.full(len(ids), -0.5, np.float32),
                    "ref_logprob": np.full(len(ids), -0.7, np.float32),
                    "loss_mask": np.ones(len(ids), bool)}
                   for ids in ([*encode("5"), EOS], [*encode("15"), EOS], encode("123"))]
    records = recorder.group(TASK.prompt(2, 3), completions, [1.0, 0.0, 0.0], text="2+3=")
    assert [r["episode_id"] for r in records] == ["r-0", "r-1", "r-2"]
    assert {r["group_id"] for r in records} == {"r-g0"}
    assert all(r["step"] == 0 and r["terminated"] and r["policy_version"] == 3 for r in records)
    version[0] = 4
    more = recorder.group(TASK.prompt(1, 1), completions[:1], [0.0])
    assert more[0]["group_id"] == "r-g1" and more[0]["policy_version"] == 4
    path = tmp_path / "r.jsonl"
    write_steps(path, records + more)
    report = validate_file(path, AdditionStep, require_complete=True)
    assert report.ok and report.episodes == 4, report.to_text()


def test_turn_recorder_counts_the_turns_of_a_conversation():
    recorder = TurnRecorder(policy_version=0, run_id="chat", model=LLMStep)
    first = recorder.turn([BOS, 5], np.array([6, 7]), reward=0.0, terminated=False)
    assert recorder.open_episodes == ["chat-0"]
    second = recorder.turn([BOS, 5, 6, 7, 9], np.array([8, EOS]), reward=1.0,
                           episode_id=first["episode_id"])
    assert (first["step"], second["step"]) == (0, 1) and recorder.open_episodes == []
    with pytest.raises(ContractError, match="did not start or already ended"):
        recorder.turn([BOS], np.array([EOS]), reward=0.0, episode_id="chat-0")


def test_turn_recorder_refuses_a_record_that_breaks_the_contract():
    recorder = TurnRecorder(policy_version=0, model=AdditionStep)
    bad = {"action": np.array([5, EOS]), "logprob": np.array([-0.1, -0.2], np.float32),
           "ref_logprob": np.array([-0.1], np.float32), "loss_mask": np.ones(2, bool)}
    with pytest.raises(ContractError) as err:
        recorder.group(TASK.prompt(1, 2), [bad], [0.0])
    assert "ref_logprob" in str(err.value)
    assert recorder.n_episodes == 0  # nothing recorded: the next episode is still run-0
    good = {**bad, "ref_logprob": np.array([-0.1, -0.3], np.float32)}
    assert recorder.group(TASK.prompt(1, 2), [good], [0.0])[0]["episode_id"] == "run-0"


# -- sampling one version ahead -------------------------------------------------------------------

def test_group_advantages_normalise_within_each_group():
    records = [{"group_id": g, "episode_id": f"{g}{i}", "reward": r}
               for g, rewards in (("a", [1.0, 0.0, 0.0, 1.0]), ("b", [0.5, 0.5]))
               for i, r in enumerate(rewards)]
    adv = group_advantages(records)
    std = np.std([1, 0, 0, 1], ddof=1)
    assert adv["a0"] == pytest.approx(0.5 / (std + 1e-6)) and adv["a1"] == pytest.approx(-0.5 / (std + 1e-6))
    assert adv["b0"] == adv["b1"] == 0.0


def _loop(seed, cycles, lr=0.1):
    """The async loop without the package's map: verl keys built here from the records."""
    policy = TokenPolicy(seed=seed, lr=lr)
    sampler = GroupSampler(policy, TASK, seed=seed, run_id="t", prompts=8, group=4)
    versions = []
    with OneAheadSampler(sampler) as ahead:
        for _ in range(cycles):
            records = ahead(policy.version)
            versions.append(sorted({r["policy_version"] for r in records}))
            policy.train_step(_verl_batch(records))
    return sampler, ahead, versions, policy


def _verl_batch(records):
    n, width = len(records), max(len(r["action"]) for r in records)
    out = {"prompts": np.array([r["observation"]["token_ids"] for r in records]),
           "responses": np.zeros((n, width), np.int64), "response_mask": np.zeros((n, width), bool),
           "old_log_probs": np.zeros((n, width), np.float32),
           "ref_log_prob": np.zeros((n, width), np.float32)}
    for i, r in enumerate(records):
        k = len(r["action"])
        out["responses"][i, :k], out["response_mask"][i, :k] = r["action"], True
        out["old_log_probs"][i, :k], out["ref_log_prob"][i, :k] = r["logprob"], r["ref_logprob"]
    adv = np.array(list(group_advantages(records).values()), np.float32)
    out["advantages"] = np.where(out["response_mask"], adv[:, None], 0).astype(np.float32)
    return out


def test_the_sampler_runs_one_version_behind_the_trainer():
    sampler, ahead, versions, policy = _loop(seed=5, cycles=6)
    assert ahead.staleness == [0, 1, 1, 1, 1, 1]
    assert versions == [[0], [0], [1], [2], [3], [4]]
    assert policy.version == 6
    assert len(sampler.rewards) == 7  # the batch sampled during the last update is not trained on


def test_sampling_ahead_is_deterministic_per_seed():
    first, _, _, p1 = _loop(seed=6, cycles=4)
    second, _, _, p2 = _loop(seed=6, cycles=4)
    other, _, _, _ = _loop(seed=7, cycles=4)
    assert first.rewards == second.rewards and np.array_equal(p1.weights, p2.weights)
    assert first.rewards != other.rewards


def test_one_ahead_sampler_refuses_a_loop_out_of_step_with_the_policy():
    policy = TokenPolicy(seed=0)
    with OneAheadSampler(GroupSampler(policy, TASK, seed=0, run_id="x", prompts=2, group=2)) as s:
        with pytest.raises(RuntimeError, match="full_loop is at version 3, the policy at 0"):
            s(3)


def test_reward_rose_compares_the_last_third_with_the_first():
    assert reward_rose([0.1, 0.1, 0.2, 0.3, 0.3, 0.4])
    assert not reward_rose([0.3, 0.3, 0.2, 0.3, 0.3, 0.2])


def test_verl_actor_schema_is_one_row_per_generation():
    schema = verl_actor_schema()
    assert schema["x-gyre-batch-dims"] == ["B"]
    assert schema["properties"]["responses"]["x-gyre-shape"] == ["B", "R"]
    assert schema["properties"]["uid"]["x-gyre-role"] == "group_id"
    assert set(schema["required"]) == set(schema["properties"])


def test_the_sampler_refuses_to_fall_further_behind_than_allowed():
    policy = TokenPolicy(seed=0)
    sampler = GroupSampler(policy, TASK, seed=0, run_id="x", prompts=2, group=2)
    with OneAheadSampler(sampler, max_staleness=0) as ahead:
        policy.train_step(_verl_batch(ahead(0)))
        with pytest.raises(ContractError, match=r"cycles\[1\]\.policy_version: the sampler fell "
                           r"too far behind: expected >= 1 \(max_staleness 0 at version 1\), "
                           r"got 0"):
            ahead(1)


# -- the demo, end to end --------------------------------------------------------------------

def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    return run(list(argv), out, err), out.getvalue(), err.getvalue()


def test_demo_llm_passes_every_stage_and_keeps_its_files(tmp_path):
    code, text, err = cli("demo", "--llm", "--out-dir", str(tmp_path), "--cycles", "24",
                          "--seed", "0")
    assert code == 0, text + err
    for heading in ("=== Stage 1", "=== Diff", "=== Stage 2", "=== Stage 3"):
        assert heading in text
    assert text.count("result: PASS") == 4 and "ALL STAGES PASS" in text
    assert "rows=step" in text and "group_norm" in text
    assert "(ids [1, " in text and "np.int64" not in text  # the prompt's ids read as plain ints
    # the run ends by saying where its files are, each with the stage that wrote it
    tail = text[text.index("ALL STAGES PASS"):]
    assert f"files kept in {tmp_path}" in tail and "map.json" in tail and "runs.jsonl" in tail
    for name in ("rollouts.jsonl", "sampler.json", "trainer.json", "map.json", "runs.jsonl"):
        assert (tmp_path / name).is_file(), name
    fmap = json.loads((tmp_path / "map.json").read_text())
    assert fmap["rows"] == "step" and "group_norm" in json.dumps(fmap["fields"]["advantages"])
    # the files the demo leaves are accepted by the other commands
    rollouts = str(tmp_path / "rollouts.jsonl")
    model = "gyre_contract.harness._llmdemo:AdditionStep"
    assert cli("validate", rollouts, "--model", model, "--require-complete")[0] == 0
    code, out, err = cli("batch", rollouts, "--map", str(tmp_path / "map.json"), "--model", model,
                         "--trainer", str(tmp_path / "trainer.json"))
    assert code == 0, out + err
    code, out, _ = cli("runs", str(tmp_path / "runs.jsonl"))
    assert code == 0 and "1 configuration" in out, out


def test_reward_rises_and_every_cycle_is_at_most_one_version_stale(tmp_path):
    result = run_llm_demo(io.StringIO(), out_dir=tmp_path, cycles=24, seed=2, seeds=2)
    assert result.passed, result.stages
    assert len(result.rewards) == 2 and all(len(c) == 24 for c in result.rewards)
    for curve, staleness, (before, after) in zip(result.rewards, result.staleness,
                                                 result.accuracy, strict=True):
        assert np.mean(curve[-6:]) > np.mean(curve[:6]) + 0.05
        assert staleness == [0] + [1] * 23
        assert after > before
    runs = RunLog(tmp_path / "runs.jsonl").read()
    assert [r.policy_version for r in runs] == [24, 24]
    assert [r.curves["mean_reward"] for r in runs] == result.rewards


def test_demo_llm_is_deterministic_per_seed(tmp_path):
    first = run_llm_demo(io.StringIO(), out_dir=tmp_path / "a", cycles=4, seed=1, seeds=1)
    again = run_llm_demo(io.StringIO(), out_dir=tmp_path / "b", cycles=4, seed=1, seeds=1)
    other = run_llm_demo(io.StringIO(), out_dir=tmp_path / "c", cycles=4, seed=2, seeds=1)
    assert first.rewards == again.rewards and first.accuracy == again.accuracy
    assert first.rewards != other.rewards
    assert (tmp_path / "a" / "rollouts.jsonl").read_bytes() == \
        (tmp_path / "b" / "rollouts.jsonl").read_bytes()


def test_demo_llm_exits_1_when_the_reward_does_not_rise(tmp_path, monkeypatch):
    frozen = functools.partial(TokenPolicy, lr=0.0)  # a trainer whose updates change nothing
    monkeypatch.setattr(llmdemo, "TokenPolicy", frozen)
    code, text, _ = cli("demo", "--llm", "--cycles", "9", "--seed", "4")
    assert code == 1
    assert "stage 1 pass, diff pass, stage 2 pass, stage 3 FAIL" in text
    assert "result: FAIL" in text
    # without --out-dir the paths printed above are gone at the end: the run says so
    assert "temporary folder, now removed" in text and "--out-dir DIR" in text


@pytest.mark.parametrize("argv, message", [
    (["--episodes", "4"], "--episodes is for the CartPole demo"),
    (["--cycles", "0"], "--cycles and --episodes must be >= 1"),
    (["--seed", "-1"], "--seed must be >= 0"),
])
def test_demo_llm_refuses_bad_arguments_with_exit_2(argv, message):
    code, out, err = cli("demo", "--llm", *argv)
    assert code == 2 and out == "" and message in err


def test_a_failure_of_the_batch_sampled_ahead_is_raised_not_dropped(monkeypatch):
    policy = TokenPolicy(seed=0)
    sampler = GroupSampler(policy, TASK, seed=0, run_id="x", prompts=2, group=2)
    real = sampler.sample

    def breaks_on_the_second(version, weights, index):
        if index == 1:
            raise ContractError(Problem("action", "token ids", "none", "the model died"))
        return real(version, weights, index)

    monkeypatch.setattr(sampler, "sample", breaks_on_the_second)
    ahead = OneAheadSampler(sampler)
    assert len(ahead(0)) == 4  # batch 0; batch 1 is now being sampled, and fails
    with pytest.raises(ContractError, match="the model died"):
        ahead.close()


def test_full_loop_refuses_rows_two_versions_old_under_the_demos_map(tmp_path):
    """The loop's own check, not only the sampler's: rows of v - 2 fail max_staleness=1."""
    result = run_llm_demo(io.StringIO(), out_dir=tmp_path, cycles=1, seed=0, seeds=1)
    assert result.stages["diff"]
    policy = TokenPolicy(seed=0)
    sampler = GroupSampler(policy, TASK, seed=0, run_id="lag", prompts=2, group=2)

    def two_behind(version):
        return sampler.sample(max(version - 2, 0), policy.weights.copy(), version)

    with pytest.raises(ContractError) as err:
        llmdemo.full_loop(two_behind, policy.train_step, tmp_path / "map.json", 3,
                          max_staleness=1, model=AdditionStep, trainer=tmp_path / "trainer.json")
    text = str(err.value)
    assert "cycles[2]" in text and "lag-8" in text, text


# -- --format json and the compact stage 3 ------------------------------------------------------

def test_demo_llm_format_json_is_one_object_with_real_figures(tmp_path):
    code, out, err = cli("demo", "--llm", "--cycles", "7", "--seed", "0", "--format", "json",
                         "--out-dir", str(tmp_path))
    assert err == ""
    report = json.loads(out)  # the whole of stdout is one JSON object: no stage text around it
    assert code == report["exit_code"] == (0 if report["ok"] else 1)
    assert report["demo"] == "llm" and report["cycles"] == 7 and report["kept"] is True
    assert list(report["stages"]) == ["stage 1", "diff", "stage 2", "stage 3"]
    assert all(stage["ok"] == report["ok"] or not stage["ok"]
               for stage in report["stages"].values())
    assert all(stage["seconds"] >= 0 for stage in report["stages"].values())
    one = report["stages"]["stage 1"]
    assert one["generations"] == one["episodes"] == 16 * 8 and one["problems"] == 0
    assert report["stages"]["diff"]["rows"] == "step" and "group_norm" in \
        report["stages"]["diff"]["ops"]
    two = report["stages"]["stage 2"]
    assert np.isfinite(two["loss"]) and two["rows"] == 128 and two["weights_unchanged"]
    three = report["stages"]["stage 3"]
    runs = three["runs"]
    assert [r["seed"] for r in runs] == three["seeds"] == [1, 2, 3]
    assert sum(len(r["mean_reward"]) for r in runs) == 7 * 3  # cycles x seeds
    for one_run in runs:
        cycles = one_run["cycles"]
        assert one_run["staleness"] == [0, 1, 1, 1, 1, 1, 1]
        assert [c["staleness"] for c in cycles] == one_run["staleness"]  # from the batch
        assert [c["cycle"] for c in cycles] == list(range(7))
        assert [c["metrics"]["mean_reward"] for c in cycles] == one_run["mean_reward"]
        assert {"loss", "kl", "clip_fraction"} <= set(cycles[0]["metrics"])
    # the curves are the ones the run log kept
    logged = RunLog(tmp_path / "runs.jsonl").read()
    assert [r.curves["mean_reward"] for r in logged] == [r["mean_reward"] for r in runs]
    assert report["files"] == [n for n in ("rollouts.jsonl", "sampler.json", "trainer.json",
                                           "map.json", "runs.jsonl", "runs.png")
                               if (tmp_path / n).is_file()]


def test_demo_llm_format_json_keeps_exit_1_and_says_which_stage_failed(monkeypatch):
    monkeypatch.setattr(llmdemo, "TokenPolicy", functools.partial(TokenPolicy, lr=0.0))
    code, out, err = cli("demo", "--llm", "--cycles", "6", "--seed", "4", "--format", "json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and report["exit_code"] == 1
    assert report["kept"] is False  # a temporary folder, removed
    assert {k: v["ok"] for k, v in report["stages"].items()} == {
        "stage 1": True, "diff": True, "stage 2": True, "stage 3": False}
    rose = report["stages"]["stage 3"]["reward_rose"]
    assert len(rose) == 3 and not all(rose)  # frozen weights: the reward is noise


def test_stage3_prints_a_compact_table_per_seed_and_the_checks_once(tmp_path):
    text = io.StringIO()
    result = run_llm_demo(text, out_dir=tmp_path, cycles=12, seed=0, seeds=2)
    out = text.getvalue()
    stage3 = out[out.index("=== Stage 3"):]
    assert "rollout_s" not in stage3 and "policy_version  rollout_kl" not in stage3
    header = "cycle  version  staleness  mean_reward"
    assert stage3.count(header) == 2
    table = stage3[stage3.index(header):].split("\n\n")[0].splitlines()
    assert [int(line.split()[0]) for line in table[1:]] == [0, 5, 10, 11]
    assert [int(line.split()[2]) for line in table[1:]] == [0, 1, 1, 1]
    assert stage3.count("ok: every cycle ran to the end") == 1
    assert "mean reward (first 3 cycles → last 3)" in stage3
    rows = result.figures["stage 3"]["runs"][0]["cycles"]
    assert len(rows) == 12  # the full table stays in the report


def test_a_short_run_compares_the_first_cycle_with_the_last(tmp_path):
    text = io.StringIO()
    run_llm_demo(text, out_dir=tmp_path, cycles=3, seed=0, seeds=1)
    assert "mean reward (first → last cycle)" in text.getvalue()
    assert "first 3 cycles" not in text.getvalue()
