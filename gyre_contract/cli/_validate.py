"""`gyre-contract validate ROLLOUTS.jsonl`: stage 1, one side of the contract on real data.

Prints the field list (dtype, shape, how many records carry each field), the counts and every
problem with its line number, grouped. Exit 0 holds, 1 violated, 2 unusable input.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from gyre_contract.io._report import FileReport
    from gyre_contract.io._shards import ShardsReport


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "validate", help="stage 1: check a rollout file line by line",
        description="Check every line of a JSON Lines rollout file against the step model "
        "(or a JSON Schema) and the episode rules. Prints the fields with their dtypes and "
        "shapes, the counts (lines, steps, episodes, open episodes, terminated, truncated, "
        "policy versions) and every problem with its line number, grouped.",
        epilog="exit codes: 0 holds, 1 contract violated (--strict: or a warning), "
        "2 unusable input")
    p.add_argument("rollouts", metavar="ROLLOUTS.jsonl",
                   help="the rollout file to check (.jsonl, or .parquet / .pq), or a "
                   "folder or quoted glob of shard files ('shards/*.jsonl')")
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--model", metavar="MODULE:CLASS",
        help="a pinned step model, e.g. examples.models:CartPoleStep (preferred) or "
        "path/to/models.py:CartPoleStep (default: the unpinned RolloutStep). This imports the "
        "module and so runs its top-level code; a script path is imported under its own name, "
        "so its `if __name__ == '__main__':` block does not run. Only the module named here is "
        "imported (from the current directory or the installed packages): nothing is ever "
        "imported because a data or schema file says so")
    source.add_argument(
        "--schema", metavar="S.json",
        help="check each record against this JSON Schema (Draft 2020-12, local $ref only, "
        "never fetched) instead of a model; episode rules are then not applied")
    p.add_argument("--require-complete", action="store_true",
                   help="an episode whose last step is neither terminated nor truncated is a "
                   "problem (by default it is only counted as open)")
    p.add_argument("--allow-partial-tail", action="store_true",
                   help="skip a last line with no newline that does not parse (a file still "
                   "being written) and report how many bytes were left unchecked, instead of "
                   "reporting it as a truncated line")
    p.add_argument("--max-examples", type=int, default=3, metavar="N",
                   help="problems shown per group of identical problems (default: 3)")
    p.add_argument("--engine", choices=("local", "ray"),
                   help="check a folder or glob of shards (JSON Lines and/or Parquet) and merge "
                   "the reports: 'local' one shard after another in this process, 'ray' in "
                   "parallel on Ray Data (extra 'ray'); a folder or glob alone means 'local'")
    p.add_argument("--address", metavar="ADDR",
                   help="with --engine ray: join this Ray cluster (e.g. 'auto') instead of "
                   "starting a local Ray")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 also on a warning (a group whose steps carry different "
                   "policy versions)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from gyre_contract.cli._common import load_model
    from gyre_contract.cli._progress import file_progress
    from gyre_contract.core._errors import InputError
    from gyre_contract.core._models import RolloutStep
    from gyre_contract.io._shards import is_shard_source, validate_shards
    from gyre_contract.io._validation import validate_file
    from gyre_contract.schema._fieldtable import load_schema

    if args.max_examples < 1:
        raise InputError(f"--max-examples must be at least 1, got {args.max_examples}")
    schema = load_schema(args.schema) if args.schema else None
    model = load_model(args.model) if args.model else RolloutStep
    if args.engine or args.address or is_shard_source(args.rollouts):
        if schema is not None:
            raise InputError("--schema cannot be used with shards; check them against a model "
                             "(--model)")
        if args.address and args.engine != "ray":
            raise InputError("--address needs --engine ray")
        report: ShardsReport | FileReport = validate_shards(
            args.rollouts, model, engine=args.engine or "local", address=args.address,
            require_complete=args.require_complete, allow_partial_tail=args.allow_partial_tail,
            max_examples_per_group=args.max_examples)
    else:
        with file_progress(args.rollouts, err, args.format):
            report = validate_file(
                args.rollouts, model, schema=schema, require_complete=args.require_complete,
                allow_partial_tail=args.allow_partial_tail,
                max_examples_per_group=args.max_examples)
    report.strict = args.strict  # the JSON's `exit_code` is the one returned here
    out.write(report.render(args.format) + "\n")
    return report.exit_code(strict=args.strict)

