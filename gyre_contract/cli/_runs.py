"""`gyre-contract runs RUNS.jsonl [--plot P.png [--curve METRIC]]`: min / median / max per configuration."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from gyre_contract.cli._conventions import UsageError
from gyre_contract.core._report import FORMATS


def add_parser(sub: Any) -> None:
    p = sub.add_parser("runs", help="summarize a run log (runs.jsonl) per configuration",
                       description="Read runs.jsonl and show, per configuration (the record's "
                       "config: a label or an object), the min / median / max over its runs "
                       "(repeats, such as different seeds) of rollout, train and total seconds, "
                       "steps per second, and the final value of each numeric metric the runs "
                       "recorded (loss, mean episode length, ...). A torn line (not JSON: a "
                       "writer cut off) is skipped and listed as a warning. Exit codes: 0 the log reads; "
                       "1 a bad line, named by its line number; 2 a missing or empty file, or "
                       "bad usage.")
    p.add_argument("runs", metavar="RUNS.jsonl", help="the run log")
    p.add_argument("--plot", metavar="P.png",
                   help="also draw a PNG (needs matplotlib): rollout and train time per run, "
                   "or with --curve a learning curve")
    p.add_argument("--curve", metavar="METRIC",
                   help="with --plot: draw METRIC per cycle, one line per run grouped by "
                   "configuration, and its final value per run")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text for a person, json for a program (default text)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from gyre_contract.core._errors import InputError
    from gyre_contract.harness._runlog import RunLog, RunsReport, Summary
    from gyre_contract.harness._runplot import curve_names, plot_runs

    if args.curve is not None and not args.plot:
        raise UsageError("error: --curve needs --plot P.png")
    log = RunLog(args.runs)
    if not args.plot:  # the table alone: a few numbers per run, never the runs themselves
        summary = Summary()
        torn = log.fold(summary.add)  # a torn line is skipped and reported
        if not summary.runs:
            raise InputError(f"no runs in {args.runs}")
        report = RunsReport(path=str(args.runs), runs=summary.runs,
                            summaries=summary.summaries(), torn=torn)
        out.write(report.render(args.format) + "\n")
        return report.exit_code()
    records, torn = log.scan()  # the plot draws every run
    if not records:
        raise InputError(f"no runs in {args.runs}")
    if args.curve is not None and args.curve not in curve_names(records):
        known = ", ".join(curve_names(records)) or "none"
        raise UsageError(f"error: --curve {args.curve}: no run in {args.runs} has a curve of it; "
                         f"curves: {known}")
    _require_matplotlib()
    plot = str(plot_runs(records, args.plot, curve=args.curve))
    report = RunsReport.of(args.runs, records, plot, torn, curve=args.curve)
    out.write(report.render(args.format) + "\n")
    return report.exit_code()


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        raise UsageError(
            "--plot needs matplotlib: pip install 'gyre-contract[plot]'") from None
