"""`gyre-contract export [--out-dir DIR] [--check]`: write the JSON Schemas, or fail on drift."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from gyre_contract.cli._conventions import add_out_dir


def add_parser(sub: Any) -> None:
    p = sub.add_parser("export", help="write the JSON Schemas of the contract's models",
                       description="Write schemas/rollout_step.v1.json, "
                       "schemas/train_batch.v1.json, schemas/token_batch.v1.json and the x-gyre "
                       "vocabulary meta-schema "
                       "schemas/gyre_vocabulary.v1.json; --check fails (exit 1) on drift, and exit 2 when "
                       "the folder is missing (run it in a checkout).")
    add_out_dir(p, default="schemas", help="the folder to write (default: schemas)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if a file differs from the models or is missing "
                   "(each listed as drifted or missing), 2 if the folder itself is missing")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from gyre_contract.cli._common import emit
    from gyre_contract.core._errors import InputError
    from gyre_contract.schema._export import drifted_schemas, export_schemas

    if args.check:
        folder = Path(args.out_dir)
        if not folder.is_dir():  # nothing to compare: not a drift, an unusable input
            what = "not a folder" if folder.exists() else "no such folder"
            raise InputError(f"{what}: {folder} (export --check compares the schemas committed "
                             f"there with the models; run it in the repository's root, or "
                             f"name the folder with --out-dir DIR)")
        stale = drifted_schemas(folder)
        missing = [p for p in stale if not p.exists()]
        fix = f"(run `gyre-contract export --out-dir {args.out_dir}`)"
        lines = [f"{'missing' if p in missing else 'drifted'}: {p} {fix}" for p in stale]
        report = {"ok": not stale, "drifted": [str(p) for p in stale],
                  "missing": [str(p) for p in missing]}
        emit(out, args.format, report, lines or [f"schemas in {args.out_dir} match the models"])
        return 1 if stale else 0
    written = export_schemas(args.out_dir)
    emit(out, args.format, {"written": [str(p) for p in written]},
         [f"wrote {p}" for p in written])
    return 0
