"""`gyre-contract diff SAMPLER TRAINER`: sort every trainer field into a tier (docs/contract.md §6)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, TextIO

from gyre_contract.cli._conventions import BATCH_DIMS_SPELLINGS, OPS_HELP

FORMATS = ("text", "json", "markdown")
"""What a diff report renders (`schema._diffreport.FORMATS`, which tests/cli/test_conventions.py
holds this to), spelled here so that the parser imports no schema machinery."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "diff", help="compare a sampler schema with a trainer schema, field by field",
        description="Sort every trainer field into same / renamed / needs_conversion / missing, "
        "list the sampler fields nobody reads (unused), and warn about semantic losses. "
        "Exit 0: nothing missing; 1: something missing (--strict: or any conversion); "
        "2: unusable input.",
        epilog="example: gyre-contract diff schemas/rollout_step.v1.json trainer.json "
        "--batch-dims B,T --write-map map.json")
    p.add_argument("sampler", help="the sampler's JSON Schema (what it writes)")
    p.add_argument("trainer", help="the trainer's JSON Schema (what it reads)")
    p.add_argument("--batch-dims", metavar="DIMS",
                   help="the trainer's leading batch dims for a foreign schema: "
                   f"{BATCH_DIMS_SPELLINGS}; the written map records them")
    p.add_argument("--rename", action="append", default=[], metavar="TRAINER=SAMPLER",
                   help="use this sampler field for this trainer field (repeatable)")
    p.add_argument("--strict", action="store_true", help="exit 1 also when a conversion is needed")
    p.add_argument("--write-map", metavar="FILE",
                   help="write the field map (map.json) that realises the report")
    p.add_argument("--gamma", type=unit_interval, default=0.99,
                   help="discount in the written map, a number in [0, 1]")
    p.add_argument("--lam", type=unit_interval, default=0.95,
                   help="GAE lambda in the written map, a number in [0, 1]")
    p.add_argument("--ops", action="append", default=[], metavar="MODULE_OR_FILE.py",
                   help=OPS_HELP)
    p.add_argument("--format", choices=FORMATS, default="text")
    p.set_defaults(run=run)


def unit_interval(text: str) -> float:
    """An argparse type: a finite number in [0, 1] (what a map's gamma and lam must be), so a
    bad value stops at the flag (exit 2) instead of writing a map that `batch` refuses."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:  # also false for NaN
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text!r}")
    return value


def parse_renames(items: list[str]) -> dict[str, str]:
    from gyre_contract.core._errors import SchemaError

    renames: dict[str, str] = {}
    for item in items:
        trainer, sep, sampler = item.partition("=")
        if not sep or not trainer or not sampler:
            raise SchemaError(f"--rename takes TRAINER=SAMPLER, got {item!r}")
        renames[trainer] = sampler
    return renames


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from gyre_contract.cli._common import import_ops
    from gyre_contract.io._atomic import write_text_atomic
    from gyre_contract.schema._diffing import diff, parse_batch_dims

    import_ops(args.ops)
    batch_dims = parse_batch_dims(args.batch_dims) if args.batch_dims else None
    report = diff(args.sampler, args.trainer, batch_dims=batch_dims,
                  renames=parse_renames(args.rename), gamma=args.gamma, lam=args.lam)
    path = None
    if args.write_map:  # first: a failed write is one error line, not a report and then one
        path = write_text_atomic(args.write_map, json.dumps(report.field_map(), indent=2) + "\n")
    report.strict = args.strict  # the JSON's `exit_code` is the one returned here
    text = report.render(args.format, color=_is_tty(out))
    out.write(text if text.endswith("\n") else text + "\n")
    if path is not None:
        err.write(f"wrote {path}\n")
    return report.exit_code(strict=args.strict)


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
