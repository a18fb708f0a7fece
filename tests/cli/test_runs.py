from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gyre_contract.cli._app import run
from gyre_contract.harness._runlog import RunLog, RunRecord

STARTED = datetime(2026, 11, 29, 10, 0, tzinfo=timezone.utc)


def record(run_id: str, config: str, rollout: float, train: float, total: float) -> RunRecord:
    return RunRecord(
        run_id=run_id, config=config, rollout_s=rollout, train_s=train, total_s=total,
        n_steps=200, n_episodes=10, batch_shape=(10, 20), policy_version=5, started_at=STARTED,
    )


@pytest.fixture
def runs_file(tmp_path: Path) -> Path:
    log = RunLog(tmp_path / "runs.jsonl")
    for r in [record("1", "4x32", 1.0, 2.0, 4.0), record("2", "4x32", 2.0, 1.0, 5.0),
              record("3", "8x16", 0.5, 0.5, 2.0)]:
        log.append(r)
    return log.path


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_runs_text_table(runs_file: Path) -> None:
    code, out, err = cli("runs", str(runs_file))
    assert (code, err) == (0, "")
    assert out == "\n".join([
        f"{runs_file}: 3 runs, 2 configurations",
        "",
        "config  runs  metric           min   median      max",
        "4x32    2     rollout_s      1.000    1.500    2.000",
        "              train_s        1.000    1.500    2.000",
        "              total_s        4.000    4.500    5.000",
        "              steps_per_s   40.000   45.000   50.000",
        "8x16    1     rollout_s      0.500    0.500    0.500",
        "              train_s        0.500    0.500    0.500",
        "              total_s        2.000    2.000    2.000",
        "              steps_per_s  100.000  100.000  100.000",
    ]) + "\n"


def test_runs_json_and_plot(runs_file: Path, tmp_path: Path) -> None:
    plot = tmp_path / "runs.png"
    code, out, err = cli("runs", str(runs_file), "--plot", str(plot), "--format", "json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["runs"] == 3
    assert report["plot"] == str(plot)
    assert [c["config"] for c in report["configs"]] == ["4x32", "8x16"]
    assert report["configs"][0]["rollout_s"] == {"min": 1.0, "median": 1.5, "max": 2.0}
    assert report["configs"][1]["steps_per_s"] == {"min": 100.0, "median": 100.0, "max": 100.0}
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_runs_bad_line_exits_1_with_its_line_number(runs_file: Path) -> None:
    with runs_file.open("a") as f:
        f.write('{"run_id": "4"}\n')
    code, out, err = cli("runs", str(runs_file))
    assert (code, out) == (1, "")
    assert err.splitlines()[0] == "error: 9 problems:"
    assert "  line 4: config: missing field: expected a string or an object, got nothing" in err


def test_runs_missing_or_empty_file_exits_2(tmp_path: Path) -> None:
    code, out, err = cli("runs", str(tmp_path / "nope.jsonl"))
    assert (code, out) == (2, "")
    assert err == f"error: cannot read run log {tmp_path / 'nope.jsonl'}: No such file or directory\n"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert cli("runs", str(empty)) == (2, "", f"error: no runs in {empty}\n")


def test_runs_as_a_real_subprocess(runs_file: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "gyre_contract", "runs", str(runs_file)],
                          capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith(f"{runs_file}: 3 runs, 2 configurations\n")


@pytest.fixture
def metrics_file(tmp_path: Path) -> Path:
    """Two seeds of one configuration and one of another, each with a loss per cycle."""
    log = RunLog(tmp_path / "metrics.jsonl")
    for run_id, config, curve in [("s1", "lr=0.1", [0.9, 0.5, 0.25]), ("s2", "lr=0.1", [1.0, 0.5, 0.5]),
                                  ("s3", "lr=0.3", [0.8, float("nan"), 0.1])]:
        timer_record = record(run_id, config, 1.0, 1.0, 2.0)
        curves = {"loss": [None if c != c else c for c in curve]}
        log.append(timer_record.model_copy(update={"curves": curves,
                                                   "metrics": {"loss": curve[-1]}}))
    return log.path


def test_runs_shows_the_users_metrics(metrics_file: Path) -> None:
    code, out, err = cli("runs", str(metrics_file))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[7] == "              loss            0.25    0.375      0.5"
    assert lines[-1] == "              loss             0.1      0.1      0.1"
    code, out, err = cli("runs", str(metrics_file), "--format", "json")
    configs = json.loads(out)["configs"]  # strict JSON: json.loads would take NaN, so check it
    assert "NaN" not in out and "Infinity" not in out
    assert configs[0]["metrics"] == {"loss": {"min": 0.25, "median": 0.375, "max": 0.5, "runs": 2}}


def test_runs_plots_a_learning_curve(metrics_file: Path, tmp_path: Path) -> None:
    plot = tmp_path / "curve.png"
    code, out, err = cli("runs", str(metrics_file), "--plot", str(plot), "--curve", "loss",
                         "--format", "json")
    assert (code, err) == (0, "")
    assert (json.loads(out)["plot"], json.loads(out)["curve"]) == (str(plot), "loss")
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_runs_curve_usage_errors_exit_2(metrics_file: Path, tmp_path: Path) -> None:
    assert cli("runs", str(metrics_file), "--curve", "loss") == (
        2, "", "error: --curve needs --plot P.png\n")
    plot = tmp_path / "curve.png"
    assert cli("runs", str(metrics_file), "--plot", str(plot), "--curve", "reward") == (
        2, "", f"error: --curve reward: no run in {metrics_file} has a curve of it; curves: "
        "loss\n")
    assert not plot.exists()
    code, out, err = cli("runs", str(metrics_file), "--plot", str(tmp_path / "no" / "p.png"))
    assert (code, out) == (2, "") and err.startswith("error: ") and len(err.splitlines()) == 1
