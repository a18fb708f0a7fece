"""`gyre-contract demo --llm --procs`: the sampler in its own OS process, the same curve."""

from __future__ import annotations

import io
import json

import pytest

from gyre_contract.channel._status import channel_status
from gyre_contract.cli._app import run
from gyre_contract.harness._llmdemo import run_llm_demo
from gyre_contract.harness._procdemo import HOW, publish_weights, train_run_procs, weights_path
from gyre_contract.harness._runlog import RunLog


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return run(list(argv), out, err), out.getvalue(), err.getvalue()


@pytest.mark.slow
def test_two_processes_give_the_same_curve_as_one(tmp_path):
    """Same seeds, same batches, same weights: the curve, the staleness and the accuracies of
    `demo --llm` exactly, with both ends' counts in the run log and agreeing in status."""
    code, out, _ = cli("demo", "--llm", "--procs", "--cycles", "6", "--format", "json",
                       "--out-dir", str(tmp_path / "procs"))
    procs = json.loads(out)
    assert code == 0 and procs["ok"], procs
    one = run_llm_demo(io.StringIO(), out_dir=tmp_path / "one", cycles=6).to_dict()
    for mine, theirs in zip(procs["stages"]["stage 3"]["runs"], one["stages"]["stage 3"]["runs"],
                            strict=True):
        for key in ("seed", "mean_reward", "staleness", "accuracy_before", "accuracy_after",
                    "policy_version", "steps"):
            assert mine[key] == theirs[key], key
    runs = RunLog(tmp_path / "procs" / "runs.jsonl").read()
    assert [r.config["sampler"] for r in runs] == ["process"] * 3
    for record in runs:
        assert record.metrics["channel.trainer.acked_steps"] == 6 * 128
        assert record.metrics["channel.trainer.dropped_steps"] == 0
        assert "through the channel" in record.notes
    for seed in (1, 2, 3):
        status = channel_status(tmp_path / "procs" / f"channel-seed{seed}")
        assert status.ok and status.put["steps"] == status.acked["steps"] == 6 * 128
        assert status.staleness == {0: 128, 1: 5 * 128}


def test_procs_goes_with_llm():
    code, out, err = cli("demo", "--procs")
    assert code == 2 and "--procs goes with --llm" in err


def test_weights_go_by_version_through_a_file(tmp_path):
    import numpy as np

    publish_weights(tmp_path, 3, np.arange(6.0).reshape(2, 3))
    assert np.load(weights_path(tmp_path, 3)).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert not list(tmp_path.glob(".*"))  # written atomically: no temporary file left


@pytest.mark.slow
def test_a_sampler_process_that_dies_fails_stage_3_and_says_so(tmp_path, monkeypatch):
    from gyre_contract.harness import _procdemo as procdemo
    monkeypatch.setattr(procdemo, "WAIT_SECONDS", 3.0)
    monkeypatch.setattr(procdemo, "sampler_process", _dies)
    text = io.StringIO()
    result = run_llm_demo(text, out_dir=tmp_path, cycles=2, seeds=1, train_run=train_run_procs,
                          how=HOW)
    assert not result.ok and result.stages["stage 3"] is False
    assert "the sampler process exited with code 3" in text.getvalue()


def _dies(*args) -> None:
    raise SystemExit(3)
