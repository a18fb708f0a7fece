"""`gyre-contract show ROLLOUTS [--episode ID]`: one episode on screen, step by step, before batching.

Exit 0 the episode holds, 1 a step breaks a record or episode rule (listed under the table with
the rule's name), 2 unusable input (no such file, no such episode).
"""

from __future__ import annotations

import argparse
import shutil
from typing import Any, TextIO


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "show", help="print one episode step by step (look before you batch)",
        description="Print one episode of a rollout file: one row per step, the step number "
        "first, then each field (scalars as values, tensors as dtype[shape] with their first "
        "values), marking null and non-finite values, dims that change size from one step to "
        "the next, the end flags, and fields a step does not carry (—). Reading stops at the "
        "episode's end. The steps are checked with the record and episode rules.",
        epilog="exit codes: 0 the episode holds, 1 it breaks a rule (problems listed with "
        "their rule names), 2 unusable input (no such file, no such episode)")
    p.add_argument("rollouts", metavar="ROLLOUTS",
                   help="the rollout file (.jsonl, or .parquet / .pq)")
    p.add_argument("--episode", metavar="ID",
                   help="the episode id to show (default: the first complete episode, i.e. "
                   "the first whose terminated or truncated step is read; the first episode, "
                   "open, when none is complete)")
    p.add_argument("--model", metavar="MODULE:CLASS",
                   help="a pinned step model, as for validate (default: the unpinned "
                   "RolloutStep); only the module named is imported")
    p.add_argument("--width", type=int, metavar="N",
                   help="characters per line of the table (default: the terminal's width); "
                   "columns that do not fit are named under it")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: the table for a person; json: every step's fields as data")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from gyre_contract.cli._common import load_model
    from gyre_contract.core._errors import InputError
    from gyre_contract.core._models import RolloutStep
    from gyre_contract.io._show import show_episode

    if args.width is not None and args.width < 20:
        raise InputError(f"--width must be at least 20, got {args.width}")
    model = load_model(args.model) if args.model else RolloutStep
    width = args.width or shutil.get_terminal_size(fallback=(100, 24)).columns
    view = show_episode(args.rollouts, args.episode, model, width=width)
    out.write(view.render(args.format) + "\n")
    return view.exit_code()
