"""`gyre-contract infer ROLLOUTS.jsonl | BATCH.npz [-o S.json]`: a schema from real data."""

from __future__ import annotations

import argparse
import json
from contextlib import nullcontext
from typing import Any, TextIO


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "infer", help="infer a JSON Schema from a rollout file or an .npz batch",
        description="For a repo with no schema: read a JSON Lines rollout file (or an .npz "
        "batch) and print a JSON Schema with x-gyre keys, ready to diff. Review it: JSON numbers "
        "carry no width, so floats are `number` and ints `integer`; a field only some lines "
        "carry is optional, and named on stderr with its count (a typo?).")
    p.add_argument("file", help="ROLLOUTS.jsonl or BATCH.npz")
    p.add_argument("-o", "--out", metavar="S.json",
                   help="write the schema here (atomically; never onto the input), not stdout; "
                   "- is stdout")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from gyre_contract.cli._progress import file_progress
    from gyre_contract.core._text import printable
    from gyre_contract.io._atomic import write_text_atomic
    from gyre_contract.schema._infer import infer_schema

    reads_lines = not str(args.file).lower().endswith(".npz")  # an .npz: headers only, no bar
    warnings: list[str] = []
    with file_progress(args.file, err) if reads_lines else nullcontext():
        doc = infer_schema(args.file, warnings=warnings)
    text = json.dumps(doc, indent=2) + "\n"
    if args.out and args.out != "-":
        write_text_atomic(args.out, text)  # the previous file stays whole if this fails
    else:
        out.write(text)
    for warning in warnings:  # not fatal, and after the write: a failed write is one line
        err.write(printable(f"warning: {warning}") + "\n")
    if args.out and args.out != "-":
        err.write(f"wrote {args.out} ({len(doc['properties'])} fields)\n")
    return 0
