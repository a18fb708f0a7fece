"""The demos' report: verdicts and figures as data, the compact cycle table, first → last."""

from __future__ import annotations

import json

from gyre_contract.core._errors import ContractError, Problem
from gyre_contract.harness._demoreport import (
    DemoReport,
    compact_rows,
    compact_table,
    first_last,
)


def test_a_report_holds_when_every_stage_passed():
    report = DemoReport()
    assert not report.ok and report.exit_code() == 1  # nothing ran: nothing passed
    report.record("stage 1", True, steps=3)
    assert report.ok and report.passed and report.exit_code() == 0
    report.failed("stage 2", ContractError(Problem("batch.reward", "float32", "int64", "cast")))
    data = json.loads(report.render("json"))
    assert data["ok"] is False and data["exit_code"] == 1
    assert data["stages"]["stage 1"] == {"ok": True, "steps": 3}
    assert data["stages"]["stage 2"]["problems"][0]["path"] == "batch.reward"
    assert "stage 1 pass, stage 2 FAIL" in report.to_text()


def test_compact_rows_are_every_fifth_and_the_last():
    assert compact_rows(40) == [0, 5, 10, 15, 20, 25, 30, 35, 39]
    assert compact_rows(6) == [0, 5]
    assert compact_rows(3) == [0, 2]
    assert compact_rows(1) == [0]
    rows = [{"cycle": i, "policy_version": i, "staleness": min(i, 1),
             "metrics": {"mean_reward": i / 10, "loss": 0.5, "kl": 0.0}} for i in range(7)]
    table = compact_table(rows).splitlines()
    assert table[0].split() == ["cycle", "version", "staleness", "mean_reward", "loss", "kl",
                                "clip_fraction"]
    assert [line.split()[0] for line in table[1:]] == ["0", "5", "6"]
    assert table[-1].split()[-1] == "-"  # a metric the trainer did not report


def test_first_last_never_compares_overlapping_cycles():
    curves = [[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]
    assert first_last(curves, 7) == ("first 3 cycles → last 3", "1.00", "5.00")
    assert first_last([c[:4] for c in curves], 4) == ("first 2 cycles → last 2", "0.50", "2.50")
    assert first_last([c[:3] for c in curves], 3) == ("first → last cycle", "0.00", "2.00")
    assert first_last([c[:2] for c in curves], 2)[0] == "first → last cycle"
