"""The examples run as a user runs them, every stage passes, and the files they leave are
accepted by the CLI."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from gyre_contract.cli import run
from gyre_contract.core.errors import ContractError
from gyre_contract.trainer.fieldmap import known_ops

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue() + err.getvalue()


def test_own_trainer_passes_all_three_stages_as_a_script(tmp_path):
    pytest.importorskip("gymnasium")
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", str(EXAMPLES / "own_trainer.py"),
         "--out", str(tmp_path), "--cycles", "6", "--episodes", "8", "--seed", "2"],
        capture_output=True, text=True, timeout=60, check=False)
    text = done.stdout
    assert done.returncode == 0, text + done.stderr
    for heading in ("=== Stage 1", "=== Diff", "=== Stage 2", "=== Stage 3"):
        assert heading in text
    assert text.count("result: PASS") == 4 and "FAIL" not in text
    assert "ALL STAGES PASS: stage 1 pass, diff pass, stage 2 pass, stage 3 pass" in text
    assert "stage 3 (full loop): 6 cycles" in text
    for name in ("rollouts.jsonl", "sampler.json", "trainer.json", "map.json", "runs.jsonl"):
        assert (tmp_path / name).is_file(), name
    # the files are what the CLI reads
    rollouts = str(tmp_path / "rollouts.jsonl")
    assert cli("validate", rollouts, "--model", "gyre_contract.pinned:CartPoleStep",
               "--require-complete")[0] == 0
    assert cli("diff", str(tmp_path / "sampler.json"), str(tmp_path / "trainer.json"))[0] == 0
    code, out = cli("batch", rollouts, "--map", str(tmp_path / "map.json"),
                    "--model", "gyre_contract.pinned:CartPoleStep")
    assert code == 0 and "the batch is a valid TrainBatch" in out
    code, out = cli("runs", str(tmp_path / "runs.jsonl"))
    assert code == 0 and "1 configuration" in out


def test_own_trainer_step_updates_and_loss_does_not():
    own = load_example("own_trainer")
    agent = own.LinearAgent(seed=0)
    batch = own.trainer_batch_example()
    batch["action"][0, 1] = 1
    batch["advantage"][0] = [1.0, -1.0, 0.5]
    batch["logprob"][:] = np.log(0.5)  # a fresh agent picks each action with p = 0.5
    weights = agent.weights.copy()
    assert np.isfinite(own.reinforce_loss(agent, batch)) and np.array_equal(weights, agent.weights)
    metrics = own.make_train_step(agent)(batch)
    assert metrics["policy_version"] == 1 and agent.version == 1
    assert metrics["logprob_gap"] < 1e-6  # the recorded log-probs are the agent's own
    assert not np.array_equal(weights, agent.weights)


def test_llm_rollout_passes_stages_1_and_2(tmp_path, capsys):
    llm = load_example("llm_rollout")
    ops_before = known_ops()
    assert llm.main(["--out", str(tmp_path), "--prompts", "3", "--group", "4"]) == 0
    text = capsys.readouterr().out
    assert text.count("result: PASS") == 2 and "FAIL" not in text
    assert "BOTH STAGES PASS: stage 1 pass, stage 2 pass" in text
    assert "12 episodes (0 open, 12 terminated, 0 truncated)" in text
    assert known_ops() == ops_before  # the example's op does not leak into the registry
    for name in ("rollouts.jsonl", "map.json"):
        assert (tmp_path / name).is_file(), name
    code, out = cli("validate", str(tmp_path / "rollouts.jsonl"), "--model",
                    "gyre_contract.pinned:LLMStep", "--require-complete")
    assert code == 0 and "action                 int64    [2..11]" in out


def test_fake_generator_is_deterministic_with_logprobs_at_most_zero():
    llm = load_example("llm_rollout")
    gen = llm.FakeGenerator(seed=5)
    tokens, logprobs = gen.generate([1, 7, 8], 0)
    again, _ = gen.generate([1, 7, 8], 0)
    assert np.array_equal(tokens, again) and tokens[-1] == llm.EOS
    assert tokens.dtype == np.int64 and logprobs.dtype == np.float32
    assert len(tokens) == len(logprobs) and (logprobs <= 0).all()
    lengths = {len(gen.generate([1, 7, 8], s)[0]) for s in range(20)}
    assert len(lengths) > 1  # generation lengths vary: the varying dim A


def test_group_advantage_normalises_within_a_prompt_and_refuses_cut_rows():
    llm = load_example("llm_rollout")
    reward = np.array([[1.0], [0.0], [0.0], [0.0]], np.float32)
    prompt = np.array([[[1, 9, 0]], [[1, 9, 0]], [[1, 8, 8]], [[1, 8, 8]]])
    prompt_mask = np.array([[[True, True, False]]] * 4)
    step = np.zeros((4, 1), np.int64)
    columns = {"mask": np.ones((4, 1), bool)}
    adv = llm.group_advantage([reward, prompt, prompt_mask, step], columns)
    assert np.allclose(adv[:, 0], [1.0, -1.0, 0.0, 0.0], atol=1e-5)
    with pytest.raises(ContractError) as err:
        llm.group_advantage([reward, prompt, prompt_mask, step + np.array([[0], [1], [0], [0]])],
                            columns)
    assert str(err.value) == ("group_advantage: a row without its first prompt cannot be "
                              "grouped: expected rows that start at step 0, got rows [1] "
                              "start later")


def test_own_trainer_reports_a_broken_train_step_and_exits_1(tmp_path, capsys, monkeypatch):
    pytest.importorskip("gymnasium")
    own = load_example("own_trainer")
    real = own.make_train_step

    def skipping_versions(agent):
        step = real(agent)

        def train_step(batch):
            metrics = step(batch)
            agent.version += 1  # a trainer that counts two updates per step
            return {**metrics, "policy_version": agent.version}
        return train_step

    monkeypatch.setattr(own, "make_train_step", skipping_versions)
    code = own.main(["--out", str(tmp_path), "--cycles", "2", "--episodes", "4"])
    text = capsys.readouterr().out
    assert code == 1
    assert ("cycles[0].policy_version: policy_version did not advance by one update: "
            "expected 1 (one update after 0), got 2") in text
    assert "result: FAIL — the loop broke the contract" in text
    assert "SOME STAGES FAILED: stage 1 pass, diff pass, stage 2 pass, stage 3 FAIL" in text


def test_llm_rollout_reports_a_bad_sampler_and_exits_1(tmp_path, capsys, monkeypatch):
    llm = load_example("llm_rollout")
    real = llm.FakeGenerator.generate

    def positive_logprobs(self, prompt, sample):
        tokens, logprobs = real(self, prompt, sample)
        return tokens, -logprobs  # a sign slip: log-probs above 0

    monkeypatch.setattr(llm.FakeGenerator, "generate", positive_logprobs)
    assert llm.main(["--out", str(tmp_path), "--prompts", "1", "--group", "2"]) == 1
    text = capsys.readouterr().out
    assert "records[0].logprob: positive log-probability: expected <= 0" in text
    assert "result: FAIL — a generation broke the contract before it was written" in text
    assert "SOME STAGES FAILED: stage 1 FAIL, stage 2 not run" in text
    assert not (tmp_path / "map.json").exists()
