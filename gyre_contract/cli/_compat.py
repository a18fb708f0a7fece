"""`gyre-contract compat OLD NEW`: can data written under one schema version be read under another."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from gyre_contract.core._report import FORMATS

MODES = ("backward", "forward", "full")
"""`compat`'s modes (`schema._compatibility.MODES`, which tests/cli/test_conventions.py holds
this to), spelled here so that the parser imports no schema machinery."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compat", help="check two versions of one side's schema for breaking changes",
        description="backward: NEW reads data written under OLD; forward: OLD reads data "
        "written under NEW; full: both. Exit 0 compatible, 1 breaking change, 2 bad input.")
    p.add_argument("old", help="the old schema version")
    p.add_argument("new", help="the new schema version")
    p.add_argument("--mode", choices=MODES, default="backward",
                   help="backward (default): NEW reads data written under OLD; forward: OLD "
                   "reads data written under NEW; full: both")
    p.add_argument("--strict", action="store_true",
                   help="accepted like validate's and diff's; a compat report has no warnings, "
                   "so the exit code is the same")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from gyre_contract.schema._compatibility import compat

    report = compat(args.old, args.new, mode=args.mode)
    report.strict = args.strict  # the JSON's `exit_code` is the one returned here
    text = report.render(args.format)
    out.write(text if text.endswith("\n") else text + "\n")
    return report.exit_code(strict=args.strict)
