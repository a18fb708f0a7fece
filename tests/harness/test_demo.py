"""`gyre-contract demo`: all three stages pass on real CartPole, reproducibly, and leave usable files."""

from __future__ import annotations

import io
import json

import pytest

pytest.importorskip("gymnasium")

from gyre_contract.cli import run
from gyre_contract.harness.demo import SoftmaxPolicy, _split, run_demo


def test_demo_passes_every_stage_and_keeps_its_files(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = run(["demo", "--out", str(tmp_path), "--cycles", "6", "--episodes", "8",
                "--seed", "3"], out, err)
    text = out.getvalue()
    assert code == 0, text + err.getvalue()
    for heading in ("=== Stage 1", "=== Diff", "=== Stage 2", "=== Stage 3"):
        assert heading in text
    assert text.count("result: PASS") == 4 and "ALL STAGES PASS" in text
    for name in ("rollouts.jsonl", "map.json", "runs.jsonl", "sampler.json", "trainer.json"):
        assert (tmp_path / name).is_file(), name
    # the files the demo leaves are accepted by the other commands
    assert run(["validate", str(tmp_path / "rollouts.jsonl"), "--model",
                "gyre_contract.pinned:CartPoleStep"], io.StringIO(), io.StringIO()) == 0
    assert run(["runs", str(tmp_path / "runs.jsonl")], io.StringIO(), io.StringIO()) == 0


def test_stage1_shows_an_episode_before_validating_and_runs_carry_notes(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = run(["demo", "--out", str(tmp_path), "--cycles", "3", "--episodes", "4",
                "--notes", "demo check"], out, err)
    text = out.getvalue()
    assert code == 0, text + err.getvalue()
    shown = text.index("look at one episode first")
    assert text.index("=== Stage 1") < shown < text.index("checked against model CartPoleStep")
    assert "\nstep  observation" in text[shown:] and "ended " in text[shown:]
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    for record in records:
        assert "done ← terminated OR truncated" in record["notes"]
        assert record["notes"].endswith("; demo check")


def test_same_seed_same_learning_curve(tmp_path):
    a = run_demo(io.StringIO(), out_dir=tmp_path / "a", cycles=4, seed=1, episodes_per_cycle=8,
                 plot=False)
    b = run_demo(io.StringIO(), out_dir=tmp_path / "b", cycles=4, seed=1, episodes_per_cycle=8,
                 plot=False)
    assert a.lengths == b.lengths and len(a.lengths) == 4


def test_learner_improves_on_cartpole(tmp_path):
    result = run_demo(io.StringIO(), out_dir=tmp_path, cycles=15, seed=0, episodes_per_cycle=16,
                      plot=False)
    assert result.stages["stage 3"], result.lengths
    assert sum(result.lengths[-5:]) > 1.5 * sum(result.lengths[:5])


def test_loss_is_evaluated_without_an_update():
    import numpy as np

    policy = SoftmaxPolicy(seed=0)
    batch = {"obs": np.zeros((1, 2, 4), np.float32), "action": np.array([[0, 1]]),
             "advantage": np.array([[1.0, -1.0]], np.float32),
             "return": np.array([[1.0, 0.5]], np.float32), "mask": np.ones((1, 2), bool)}
    before = policy.weights.copy()
    assert np.isfinite(policy.loss(batch)) and np.array_equal(before, policy.weights)
    metrics = policy.train_step(batch)
    assert metrics["policy_version"] == 1 and not np.array_equal(before, policy.weights)


def test_cycles_are_shared_over_runs():
    assert _split(24, 3) == [8, 8, 8] and _split(7, 3) == [3, 2, 2] and _split(2, 3) == [1, 1]
