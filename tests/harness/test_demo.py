"""`gyre-contract demo`: all three stages pass on real CartPole, reproducibly, and leave usable files."""

from __future__ import annotations

import io
import json

import pytest

pytest.importorskip("gymnasium")

from gyre_contract.cli._app import run
from gyre_contract.harness._demo import STAGE3_SEEDS, SoftmaxPolicy, run_demo, stage3_seeds
from gyre_contract.harness._runlog import RunLog


def test_demo_passes_every_stage_and_keeps_its_files(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = run(["demo", "--out-dir", str(tmp_path), "--cycles", "6", "--episodes", "8",
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


def test_stage3_repeats_one_configuration_with_different_seeds(tmp_path):
    """Spread is shown over repeats of one configuration, not over successive training runs."""
    result = run_demo(io.StringIO(), out_dir=tmp_path, cycles=3, seed=5, episodes_per_cycle=8)
    runs = RunLog(tmp_path / "runs.jsonl").read()
    assert len(runs) == STAGE3_SEEDS == 3
    assert len({r.config_key for r in runs}) == 1
    assert [r.run_id for r in runs] == [f"demo-seed{s}" for s in stage3_seeds(5)] == [
        "demo-seed6", "demo-seed7", "demo-seed8"]
    # each run trains a fresh policy: 3 updates from version 0, not versions 8, 16, 24
    assert [r.policy_version for r in runs] == [3, 3, 3]
    # the learning curve of each run is in the log: mean episode length per cycle
    assert [r.curves["mean_episode_length"] for r in runs] != [runs[0].curves["mean_episode_length"]] * 3
    for r, lengths in zip(runs, result.lengths, strict=True):
        assert len(r.curves["mean_episode_length"]) == len(lengths) == 3
        assert r.metrics["mean_episode_length"] == r.curves["mean_episode_length"][-1]
        assert set(r.curves) == {"mean_episode_length", "value_loss"}
    assert (tmp_path / "runs.png").read_bytes()[:4] == b"\x89PNG"


def test_stage1_shows_an_episode_before_validating_and_runs_carry_notes(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = run(["demo", "--out-dir", str(tmp_path), "--cycles", "3", "--episodes", "4",
                "--notes", "demo check"], out, err)
    text = out.getvalue()
    # 3 cycles of 4 episodes are too few for stage 3's learning check; stages 1 and 2 must pass
    assert code in (0, 1) and err.getvalue() == "", text + err.getvalue()
    assert "stage 1 pass, diff pass, stage 2 pass" in text
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
    assert a.lengths == b.lengths and [len(x) for x in a.lengths] == [4] * STAGE3_SEEDS


def test_learner_improves_on_cartpole(tmp_path):
    result = run_demo(io.StringIO(), out_dir=tmp_path, cycles=10, seed=0, episodes_per_cycle=16,
                      plot=False)
    assert result.stages["stage 3"], result.lengths
    for lengths in result.lengths:  # every seed learns
        assert sum(lengths[-3:]) > 1.5 * sum(lengths[:3]), lengths


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


def test_demo_format_json_is_one_object_with_the_learning_curves(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    code = run(["demo", "--out-dir", str(tmp_path), "--cycles", "4", "--episodes", "8",
                "--seed", "3", "--format", "json"], out, err)
    assert err.getvalue() == ""
    report = json.loads(out.getvalue())  # nothing but the report on stdout
    assert code == report["exit_code"] and report["demo"] == "cartpole"
    assert list(report["stages"]) == ["stage 1", "diff", "stage 2", "stage 3"]
    one, two, three = (report["stages"][k] for k in ("stage 1", "stage 2", "stage 3"))
    assert one["ok"] and one["episodes"] == 8 and one["problems"] == 0
    assert two["ok"] and two["weights_unchanged"] and two["rows"] == 8
    assert two["fields"]["obs"][:1] == [8] and two["fields"]["obs"][-1] == 4
    runs = three["runs"]
    assert [r["seed"] for r in runs] == stage3_seeds(3)
    assert sum(len(r["mean_episode_length"]) for r in runs) == 4 * STAGE3_SEEDS
    logged = RunLog(tmp_path / "runs.jsonl").read()
    assert [r.curves["mean_episode_length"] for r in logged] == \
        [r["mean_episode_length"] for r in runs]
    for run_ in runs:
        assert [c["cycle"] for c in run_["cycles"]] == [0, 1, 2, 3]
        assert all(c["episodes"] == 8 for c in run_["cycles"])
        assert [c["metrics"]["policy_version"] for c in run_["cycles"]] == [1, 2, 3, 4]
    assert "runs.jsonl" in report["files"] and report["kept"] is True
