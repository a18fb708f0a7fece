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

from gyre_contract.cli._app import run
from gyre_contract.trainer._fieldmap import known_ops

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


def test_llm_sampler_passes_stages_1_and_2(tmp_path, capsys):
    llm = load_example("llm_sampler")
    ops_before = known_ops()
    assert llm.main(["--out", str(tmp_path), "--prompts", "3", "--group", "4"]) == 0
    text = capsys.readouterr().out
    assert text.count("result: PASS") == 2 and "FAIL" not in text
    assert "BOTH STAGES PASS: stage 1 pass, stage 2 pass" in text
    assert "12 episodes (0 open, 12 terminated, 0 truncated)" in text
    assert known_ops() == ops_before  # the example registers nothing: group_norm is built in
    for name in ("rollouts.jsonl", "map.json"):
        assert (tmp_path / name).is_file(), name
    rollouts = str(tmp_path / "rollouts.jsonl")
    code, out = cli("validate", rollouts, "--model", "gyre_contract.pinned:LLMStep",
                    "--require-complete")
    assert code == 0 and "group_id" in out and "ref_logprob" in out, out
    code, out = cli("batch", rollouts, "--map", str(tmp_path / "map.json"), "--model",
                    "gyre_contract.pinned:LLMStep")
    assert code == 0, out


def test_my_llm_is_deterministic_and_splices_tool_output_out_of_the_loss():
    llm = load_example("llm_sampler")
    model = llm.MyLLM(seed=5)
    first = model.generate([1, 7, 8], 20)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(first, model.generate([1, 7, 8], 20),
                                                          strict=True))
    assert all(t[-1] == llm.EOS and t.dtype == np.int64 and (lp <= 0).all()
               and lp.dtype == np.float32 and len(t) == len(lp) for t, lp in first)
    assert len({len(t) for t, _ in first}) > 1  # generation lengths vary: the varying dim A
    tokens = np.array([9, llm.TOOL, 7, llm.EOS])
    lp = np.full(4, -0.5, np.float32)
    c = llm.with_tool_output(tokens, lp, lp - 0.1)
    assert c["action"].tolist() == [9, llm.TOOL, *llm.TOOL_OUTPUT, 7, llm.EOS]
    assert c["loss_mask"].tolist() == [True, True, False, False, False, False, True, True]
    assert (c["logprob"][~c["loss_mask"]] == 0).all()
    assert np.array_equal(c["action"][c["loss_mask"]], tokens)
    plain = llm.with_tool_output(tokens[[0, 2, 3]], lp[:3], lp[:3])
    assert plain["loss_mask"].all() and len(plain["action"]) == 3


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


def test_llm_sampler_reports_a_bad_sampler_and_exits_1(tmp_path, capsys, monkeypatch):
    llm = load_example("llm_sampler")
    real = llm.MyLLM.generate

    def positive_logprobs(self, prompt, n):
        return [(tokens, -logprobs) for tokens, logprobs in real(self, prompt, n)]  # sign slip

    monkeypatch.setattr(llm.MyLLM, "generate", positive_logprobs)
    assert llm.main(["--out", str(tmp_path), "--prompts", "1", "--group", "2"]) == 1
    text = capsys.readouterr().out
    assert "logprob: positive log-probability: expected <= 0" in text
    assert "result: FAIL — a completion broke the contract before it was written" in text
    assert "SOME STAGES FAILED: stage 1 FAIL, stage 2 not run" in text
    assert not (tmp_path / "rollouts.jsonl").exists()
