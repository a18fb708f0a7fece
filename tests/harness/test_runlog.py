from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import ContractError, InputError
from gyre_contract.core._report import Report
from gyre_contract.harness._runlog import (
    MAX_RUN_METRICS,
    RunLog,
    RunRecord,
    RunsReport,
    RunTimer,
    Spread,
    config_key,
    config_label,
    format_summary,
    summarize,
)
from gyre_contract.harness._runplot import plot_runs

STARTED = datetime(2026, 11, 29, 10, 0, tzinfo=timezone.utc)


def fake_clock(readings: Iterable[float]) -> Callable[[], float]:
    it = iter(readings)
    return lambda: next(it)


def run(run_id: str, config: str | dict[str, Any], rollout: float, train: float, total: float,
        n_steps: int = 100, **metrics: float) -> RunRecord:
    return RunRecord(
        run_id=run_id, config=config, rollout_s=rollout, train_s=train, total_s=total,
        n_steps=n_steps, n_episodes=5, batch_shape=(5, 20), policy_version=3, started_at=STARTED,
        metrics=metrics, curves={name: [value * 2, value] for name, value in metrics.items()},
    )


def test_timer_sums_phases_and_counts() -> None:
    # enter 0; rollout 1..3; train 3.5..4; rollout 5..6; exit 10
    timer = RunTimer(clock=fake_clock([0.0, 1.0, 3.0, 3.5, 4.0, 5.0, 6.0, 10.0]))
    with timer:
        with timer.rollout():
            timer.count(steps=40, episodes=2)
        with timer.train():
            pass
        with timer.rollout():
            timer.count(steps=60, episodes=3)
    assert [(p.name, p.start, p.end) for p in timer.phases] == [
        ("rollout", 1.0, 3.0), ("train", 3.5, 4.0), ("rollout", 5.0, 6.0),
    ]
    assert timer.seconds("rollout") == 3.0
    assert timer.seconds("train") == 0.5
    assert timer.phase_count("rollout") == 2
    assert timer.total_s == 10.0
    record = timer.record(run_id="r1", config={"lr": 0.1}, batch_shape=[5, 20], policy_version=1)
    assert (record.rollout_s, record.train_s, record.total_s) == (3.0, 0.5, 10.0)
    assert (record.n_steps, record.n_episodes, record.batch_shape) == (100, 5, (5, 20))
    assert record.started_at.tzinfo is not None


def test_timer_records_a_phase_that_raises() -> None:
    timer = RunTimer(clock=fake_clock([0.0, 1.0, 2.0, 3.0]))
    with timer, pytest.raises(KeyError), timer.train():
        raise KeyError("boom")
    assert [(p.name, p.seconds) for p in timer.phases] == [("train", 1.0)]


def test_timer_rejects_nested_and_outside_phases() -> None:
    timer = RunTimer()
    with pytest.raises(RuntimeError, match="^rollout phase outside `with RunTimer\\(\\)`$"):
        with timer.rollout():
            pass
    with timer, timer.rollout():
        with pytest.raises(RuntimeError, match="^train phase started inside the rollout phase$"):
            with timer.train():
                pass


def test_total_before_the_end_is_an_error() -> None:
    timer = RunTimer()
    with timer, pytest.raises(RuntimeError, match="total_s is known once"):
        timer.total_s  # noqa: B018


def test_runlog_round_trip_whole_lines(tmp_path: Path) -> None:
    log = RunLog(tmp_path / "runs.jsonl")
    records = [run("a", "small", 1.0, 2.0, 3.5), run("b", {"envs": 4, "T": 32}, 0.5, 1.0, 1.75)]
    for record in records:
        log.append(record)
    lines = (tmp_path / "runs.jsonl").read_bytes().splitlines()
    assert len(lines) == 2
    assert orjson.loads(lines[0])["started_at"] == "2026-11-29T10:00:00Z"
    assert orjson.loads(lines[1])["config"] == {"envs": 4, "T": 32}
    assert log.read() == records


def test_runlog_bad_lines_are_listed_with_line_numbers(tmp_path: Path) -> None:
    good = orjson.dumps(run("a", "small", 1.0, 2.0, 3.5).model_dump(mode="json")).decode()
    missing = orjson.loads(good)
    del missing["train_s"]
    wrong = orjson.loads(good) | {"n_steps": "100", "total_s": 0, "extra": 1}
    path = tmp_path / "runs.jsonl"
    lines = [good, "", "{not json", orjson.dumps(missing).decode(), orjson.dumps(wrong).decode(),
             "[1, 2]"]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ContractError) as info:
        RunLog(path).read()
    assert str(info.value) == "\n".join([
        "6 problems:",
        "  line 3: bad line: expected a JSON object, got invalid JSON (unexpected character, "
            "expected a string key)",
        "  line 4: train_s: missing field: expected a finite number >= 0, got nothing",
        "  line 5: total_s: bad value: expected a finite number > 0, got int 0",
        "  line 5: n_steps: bad value: expected an integer >= 0, got str '100'",
        "  line 5: extra: unknown field: expected a RunRecord field, got int 1",
        "  line 6: bad line: expected a JSON object, got list[2]",
    ])


def test_runlog_rejects_lossy_and_non_finite_values(tmp_path: Path) -> None:
    good = run("a", "small", 1.0, 2.0, 3.5).model_dump(mode="json")
    path = tmp_path / "runs.jsonl"
    bad = good | {"policy_version": True, "batch_shape": [5, 2.5], "rollout_s": -1.0}
    path.write_bytes(orjson.dumps(bad) + b"\n")
    with pytest.raises(ContractError) as info:
        RunLog(path).read()
    assert [str(p) for p in info.value.problems] == [
        "line 1: rollout_s: bad value: expected a finite number >= 0, got float -1.0",
        "line 1: batch_shape.1: bad value: expected a list of integers, got float 2.5",
        "line 1: policy_version: bad value: expected an integer, got bool true",
    ]


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(st.sampled_from([b"\n", b"\r", b"\r\n", b"a", b"{}", b" ", b"\x0b"]),
                     max_size=20).map(b"".join), chunk=st.integers(1, 8))
def test_runlog_numbers_lines_as_splitlines_read_in_blocks(data, chunk, tmp_path, monkeypatch):
    """Read a block at a time (never the whole file), numbered as the whole file's
    `bytes.splitlines` numbers it: a lone CR ends a line, CRLF is one end."""
    import gyre_contract.io._lines as lines

    monkeypatch.setattr(lines, "CHUNK_BYTES", chunk)
    path = tmp_path / "runs.jsonl"
    path.write_bytes(data)
    assert list(RunLog(path).numbered_lines()) == list(enumerate(data.splitlines(), start=1))


def test_a_run_log_line_of_too_many_values_is_reported_unparsed(tmp_path, monkeypatch):
    import gyre_contract.io._lines as lines

    monkeypatch.setattr(lines, "MAX_LINE_VALUES", 50)
    good = orjson.dumps(run("a", "small", 1.0, 2.0, 3.5).model_dump(mode="json"))
    crowded = orjson.dumps(orjson.loads(good) | {"config": {"x": [[]] * 40}})
    path = tmp_path / "runs.jsonl"
    path.write_bytes(good + b"\n" + crowded + b"\n")
    with pytest.raises(ContractError) as info:
        RunLog(path).scan()
    assert [str(p) for p in info.value.problems] == [
        "line 2: too many values (not parsed): expected at most 50 values per line (each ',' "
        f"':' '[' '{{' outside strings), got 112 in {len(crowded)} bytes"]


def test_runlog_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="^cannot read run log .*nope.jsonl: No such file"):
        RunLog(tmp_path / "nope.jsonl").read()


def test_config_key_is_order_independent() -> None:
    assert config_key({"b": 1, "a": [1, 2]}) == config_key({"a": [1, 2], "b": 1})
    assert config_key({"b": 1, "a": 2}) == '{"a":2,"b":1}'
    assert config_key("cartpole-4x32") == "cartpole-4x32"


def test_summarize_groups_by_config_with_min_median_max() -> None:
    records = [
        run("1", {"T": 32, "envs": 4}, 1.0, 2.0, 4.0, n_steps=400),
        run("2", "other", 3.0, 3.0, 6.0, n_steps=60),
        run("3", {"envs": 4, "T": 32}, 2.0, 1.0, 5.0, n_steps=400),
        run("4", {"envs": 4, "T": 32}, 4.0, 6.0, 10.0, n_steps=400),
    ]
    first, second = summarize(records)
    assert (first.config, first.runs, first.n_steps) == ('{"T":32,"envs":4}', 3, 1200)
    assert first.spreads == {
        "rollout_s": Spread(1.0, 2.0, 4.0),
        "train_s": Spread(1.0, 2.0, 6.0),
        "total_s": Spread(4.0, 5.0, 10.0),
        "steps_per_s": Spread(40.0, 80.0, 100.0),
    }
    assert (second.config, second.runs) == ("other", 1)
    assert format_summary([second]).splitlines()[-1] == "              steps_per_s  10.000  10.000  10.000"
    assert second.spreads["steps_per_s"] == Spread(10.0, 10.0, 10.0)
    assert first.to_dict()["total_s"] == {"min": 4.0, "median": 5.0, "max": 10.0}


def test_runs_report_follows_the_report_protocol() -> None:
    records = [run("1", "a", 1.0, 2.0, 4.0), run("2", "b", 3.0, 0.25, 5.0)]
    report = RunsReport.of("runs.jsonl", records)
    assert isinstance(report, Report) and report.ok and report.warnings == []
    assert (report.exit_code(), report.exit_code(strict=True)) == (0, 0)
    data = report.to_dict()
    assert (data["path"], data["runs"], data["plot"]) == ("runs.jsonl", 2, None)
    assert data["configs"] == [s.to_dict() for s in summarize(records)]
    assert orjson.loads(report.render("json")) == data
    assert report.render("text") == report.to_text() == "\n".join([
        "runs.jsonl: 2 runs, 2 configurations", "", format_summary(summarize(records))])
    one = RunsReport.of("r.jsonl", records[:1], plot="p.png").to_text().splitlines()
    assert (one[0], one[-1]) == ("r.jsonl: 1 run, 1 configuration", "plot: p.png")


def test_format_summary_is_an_aligned_table() -> None:
    records = [run("1", "a", 1.0, 2.0, 4.0), run("2", "a", 3.0, 0.25, 5.0)]
    assert format_summary(summarize(records)) == "\n".join([
        "config  runs  metric          min  median     max",
        "a       2     rollout_s     1.000   2.000   3.000",
        "              train_s       0.250   1.125   2.000",
        "              total_s       4.000   4.500   5.000",
        "              steps_per_s  20.000  22.500  25.000",
    ])


def test_plot_runs_writes_a_png(tmp_path: Path) -> None:
    records = [run(str(i), "a" if i % 2 else "b", 1.0 + i, 2.0 * i, 10.0 + i) for i in range(6)]
    out = plot_runs(records, tmp_path / "runs.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5_000


def test_plot_runs_needs_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="^plot_runs needs at least one run$"):
        plot_runs([], tmp_path / "runs.png")


# -- the user's metrics ---------------------------------------------------------------------

def test_timer_keeps_numeric_metrics_per_cycle() -> None:
    timer = RunTimer(clock=fake_clock([0.0, 1.0]))
    with timer:
        timer.add_metrics({"loss": 0.5, "len": np.float32(20.0), "steps": np.int64(7),
                           "policy_version": 1, "done": True, "name": "x", "grad": np.zeros(3)})
        timer.add_metrics({"loss": float("nan"), "len": 30, "kl": 0.01, "policy_version": 2})
        timer.add_metrics({"loss": 0.25, "len": float("inf"), "huge": 10**400})
    record = timer.record(run_id="r", config="c", batch_shape=(1, 1), policy_version=3)
    assert record.curves == {"loss": [0.5, None, 0.25], "len": [20.0, 30.0, None],
                             "steps": [7.0, None, None], "kl": [None, 0.01, None],
                             "huge": [None, None, None]}
    assert record.metrics == {"loss": 0.25}  # the last cycle's finite values, nothing filled in
    assert record.cycles == 3
    chosen = timer.record(run_id="r", config="c", batch_shape=(1, 1), policy_version=3,
                          metrics={"return": 200.0})
    assert chosen.metrics == {"return": 200.0} and chosen.curves == record.curves
    with pytest.raises(ValueError, match=f"^more than {MAX_RUN_METRICS} metric names"):
        timer.add_metrics({f"m{i}": 1.0 for i in range(MAX_RUN_METRICS)})


def test_runlog_round_trips_metrics_and_reads_logs_without_them(tmp_path: Path) -> None:
    log = RunLog(tmp_path / "runs.jsonl")
    record = run("a", "small", 1.0, 2.0, 3.5, loss=0.5)
    log.append(record)
    old = orjson.loads(orjson.dumps(run("b", "small", 1.0, 2.0, 3.5).model_dump(mode="json")))
    del old["metrics"], old["curves"]  # a run log written before runs kept metrics
    with log.path.open("ab") as f:
        f.write(orjson.dumps(old) + b"\n")
    first, second = log.read()
    assert first == record and first.curves == {"loss": [1.0, 0.5]}
    assert (second.metrics, second.curves) == ({}, {})


def test_runlog_rejects_bad_metrics(tmp_path: Path) -> None:
    good = run("a", "small", 1.0, 2.0, 3.5).model_dump(mode="json")
    path = tmp_path / "runs.jsonl"
    lines = [
        good | {"metrics": {"loss": "low", "ok": True}},
        good | {"curves": {"loss": [1.0, None], "len": [3.0]}},
        good | {"metrics": {f"m{i}": 1.0 for i in range(MAX_RUN_METRICS + 1)}},
        good | {"curves": {"x": ["NaN"]}},
    ]
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    with pytest.raises(ContractError) as info:
        RunLog(path).read()
    assert [str(p) for p in info.value.problems] == [
        "line 1: metrics.loss: bad value: expected an object of metric name -> finite number, "
        "got str 'low'",
        "line 1: metrics.ok: bad value: expected an object of metric name -> finite number, "
        "got bool true",
        "line 2: curves: bad value: expected an object of metric name -> list of finite numbers "
        "or null, one per cycle, all of one length, got curves of lengths [1, 2]",
        f"line 3: metrics: too many metrics: expected at most {MAX_RUN_METRICS} metrics, got "
        f"{MAX_RUN_METRICS + 1} metrics",
        "line 4: curves.x.0: bad value: expected an object of metric name -> list of finite "
        "numbers or null, one per cycle, all of one length, got str 'NaN'",
    ]


def test_summarize_spreads_the_users_metrics_per_configuration() -> None:
    records = [run("1", "a", 1.0, 2.0, 4.0, loss=0.5, length=20.0),
               run("2", "a", 3.0, 0.25, 5.0, loss=0.25),
               run("3", "a", 2.0, 1.0, 4.0, loss=0.125, length=40.0)]
    (summary,) = summarize(records)
    assert summary.metrics == {"loss": Spread(0.125, 0.25, 0.5), "length": Spread(20.0, 30.0, 40.0)}
    assert summary.metric_runs == {"loss": 3, "length": 2}
    assert summary.to_dict()["metrics"] == {
        "loss": {"min": 0.125, "median": 0.25, "max": 0.5, "runs": 3},
        "length": {"min": 20.0, "median": 30.0, "max": 40.0, "runs": 2},
    }
    assert format_summary([summary]).splitlines()[-2:] == [
        "              loss                   0.125    0.25     0.5",
        "              length (2 of 3 runs)      20      30      40",
    ]


def test_a_long_configuration_is_named_by_its_hash() -> None:
    config = {"env": "CartPole-v1", "envs": 8, "lr": 0.05, "episodes_per_cycle": 32}
    key = config_key(config)
    label = config_label(key)
    assert label.startswith("#") and len(label) == 9 and config_label("short") == "short"
    (summary,) = summarize([run("1", config, 1.0, 1.0, 2.0)])
    assert summary.to_dict()["label"] == label
    table = format_summary([summary]).splitlines()
    assert table[1].startswith(f"{label}  1") and table[-1] == f"{label} = {key}"


def test_plot_runs_draws_a_learning_curve(tmp_path: Path) -> None:
    records = [run(str(i), "a" if i % 2 else "b", 1.0, 1.0, 2.0, loss=0.1 * i) for i in range(4)]
    out = tmp_path / "curve.png"
    out.write_bytes(b"old")
    assert plot_runs(records, out, curve="loss", curve_label="loss (nats)") == out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.png"]  # replaced, no temp left
    with pytest.raises(ValueError, match="^no run has a curve of 'reward'; curves: loss$"):
        plot_runs(records, out, curve="reward")
    with pytest.raises(OSError, match="cannot write .*dir.png: No such file or directory"):
        plot_runs(records, tmp_path / "no" / "such" / "dir.png")  # InputError, as every output
