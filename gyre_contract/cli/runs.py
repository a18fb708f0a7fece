"""`gyre-contract runs RUNS.jsonl [--plot P.png]`: min / median / max per configuration."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from gyre_contract.cli.common import UsageError
from gyre_contract.core.errors import InputError
from gyre_contract.core.report import FORMATS
from gyre_contract.harness.runlog import RunLog, RunsReport, plot_runs


def add_parser(sub: Any) -> None:
    p = sub.add_parser("runs", help="summarize a run log (runs.jsonl) per configuration",
                       description="Read runs.jsonl and show, per configuration, the min / median "
                       "/ max of rollout, train and total seconds and of steps per second. "
                       "A bad line exits 1, naming its line number; a torn line (not JSON: a writer "
                       "cut off) is skipped and listed as a warning.")
    p.add_argument("runs", metavar="RUNS.jsonl", help="the run log")
    p.add_argument("--plot", metavar="P.png",
                   help="also draw rollout and train time per run (needs matplotlib)")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    records, torn = RunLog(args.runs).scan()  # a torn line is skipped and reported
    if not records:
        raise InputError(f"no runs in {args.runs}")
    plot = None
    if args.plot:
        _require_matplotlib()
        plot = str(plot_runs(records, args.plot))
    report = RunsReport.of(args.runs, records, plot, torn)
    out.write(report.render(args.format) + "\n")
    return report.exit_code()


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        raise UsageError(
            "--plot needs matplotlib: pip install 'gyre-contract[plot]'") from None
