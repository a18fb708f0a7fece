"""`gyre-contract batch ROLLOUTS.jsonl --map M.json`: stage 2 (half way) without a training loop.

Reads the rollout file as the map's row layout says (per episode, collated `[B, T, ...]` with a
mask, a TrainBatch; or for token rows step by step, one token row per step, a TokenBatch),
applies the field map, validates the batch, optionally calls the user's loss once, prints keys,
shapes and dtypes, and writes an `.npz` that numpy alone loads (`np.load(path, allow_pickle=False)`).
Exit 0 the batch holds, 1 the contract is violated (a missing field, a bad batch, a failing or
non-finite loss), 2 unusable input or usage.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

from gyre_contract.cli._conventions import BATCH_DIMS_SPELLINGS, OPS_HELP, non_negative_int
from gyre_contract.core._report import FORMATS

if TYPE_CHECKING:
    import numpy as np


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "batch", help="stage 2: rollouts + map -> a validated TrainBatch (.npz)",
        description="Map, collate and validate a rollout file into a TrainBatch (docs/contract.md §4; "
        "a TokenBatch of one row per step for a map with \"rows\": \"step\", docs/llm.md §2), "
        "print its keys, shapes and dtypes, optionally call a loss function once (no update), "
        "and write the batch as an .npz that numpy alone can load (no pickles).",
        epilog="exit codes: 0 holds, 1 contract violated, 2 unusable input")
    p.add_argument("rollouts", metavar="ROLLOUTS.jsonl", help="the rollout file to read")
    p.add_argument("--map", required=True, metavar="M.json", dest="map_path",
                   help="the field map (docs/contract.md §7) from step records to the batch")
    p.add_argument("-o", "--out", metavar="BATCH.npz",
                   help="write the batch here (strings as fixed-width unicode, no object arrays)")
    p.add_argument("--loss", metavar="MODULE:FUNCTION",
                   help="call FUNCTION(batch) once on the batch (a dict of numpy arrays) and "
                   "report the loss; fails on an exception or a non-finite loss. This imports the "
                   "module and so runs its top-level code (prefer MODULE:FUNCTION; a script "
                   "path such as train.py:loss is imported under its own name, so its "
                   "`if __name__ == '__main__':` block does not run). Only the module named "
                   "here is imported; nothing is ever imported because a data or map file "
                   "says so")
    p.add_argument("--ops", action="append", default=[], metavar="MODULE_OR_FILE.py",
                   help=OPS_HELP)
    p.add_argument("--max-len", type=int, metavar="N",
                   help="split episodes longer than N steps into rows of at most N (not with "
                   "\"rows\": \"step\": one row per step)")
    p.add_argument("--model", metavar="MODULE:CLASS",
                   help="a pinned step model used to read the rollouts (default: RolloutStep, or "
                   "LLMStep for a map with \"rows\": \"step\"); "
                   "imported, so its module's top-level code runs, as for validate --model")
    p.add_argument("--current-version", type=non_negative_int, metavar="V",
                   help="the trainer's policy version, a whole number >= 0 (default: the newest "
                   "in the batch)")
    p.add_argument("--max-staleness", type=non_negative_int, metavar="K",
                   help="fail when a row's policy version is older than current - K (K >= 0)")
    p.add_argument("--trainer", metavar="T.json",
                   help="validate the batch against this trainer schema (ours or foreign) instead "
                   "of TrainBatch, and write it under the trainer's own keys (nested names "
                   "joined with '.')")
    p.add_argument("--batch-dims", metavar="DIMS",
                   help="the trainer schema's leading batch dims when neither it "
                   "(x-gyre-batch-dims) nor the map (\"batch_dims\", written by diff) names "
                   f"them: {BATCH_DIMS_SPELLINGS}")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text or json; with json an error too is a JSON object on stdout")
    p.set_defaults(run=run, json_error={"stage": "half_way"})


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from gyre_contract.cli._common import import_ops, load_function, load_model
    from gyre_contract.cli._progress import file_progress
    from gyre_contract.core._errors import InputError
    from gyre_contract.harness._stages import BatchReport, half_way
    from gyre_contract.trainer._fieldmap import FieldMap

    if args.max_len is not None and args.max_len < 1:
        raise InputError(f"--max-len must be at least 1, got {args.max_len}")
    # The ops modules and the loss module first: they may register the custom ops the map uses.
    import_ops(args.ops)
    loss_fn = load_function(args.loss, "--loss") if args.loss else None
    if args.batch_dims is not None and args.trainer is None:
        raise InputError("--batch-dims goes with --trainer (the trainer schema's batch dims)")
    fmap = FieldMap.load(args.map_path)
    model = load_model(args.model) if args.model else None
    with file_progress(args.rollouts, err, args.format):
        # the trainer schema's batch dims: --batch-dims, else its own, else the map's
        stage = half_way(args.rollouts, fmap, loss_fn, max_len=args.max_len,
                         current_version=args.current_version, max_staleness=args.max_staleness,
                         model=model, trainer=args.trainer, batch_dims=args.batch_dims)
    report = BatchReport(stage, output=write_npz(args.out, stage.batch) if args.out else None)
    out.write(report.render(args.format) + "\n")
    return report.exit_code()


def write_npz(path: str | os.PathLike[str], batch: Mapping[str, Any]) -> str:
    """Save arrays (nested dicts as dotted keys) so `np.load(path, allow_pickle=False)` works."""
    from gyre_contract.core._errors import InputError
    from gyre_contract.io._atomic import atomic_write
    from gyre_contract.trainer._trainerbatch import flatten_batch

    flat = flatten_batch(batch)
    for key, arr in flat.items():
        if arr.dtype.kind == "O":
            raise InputError(f"cannot write {key} to .npz without pickles: it holds Python "
                             f"objects ({arr.dtype})")
    target = os.fspath(path)
    if not target.endswith(".npz"):
        target += ".npz"  # what np.savez would do silently; say it
    atomic_write(target, lambda f: _savez(f, flat))  # never half a file, old one kept
    return target


def _savez(f: BinaryIO, arrays: Mapping[str, np.ndarray]) -> None:
    """What `np.savez(f, **arrays)` writes (one `.npy` per key in an uncompressed zip), for any
    key: `np.savez` would take a field named `allow_pickle` as its flag and drop it, and fail
    on one named `file`."""
    import zipfile

    import numpy as np

    with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, arr in arrays.items():
            with zf.open(f"{key}.npy", mode="w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(arr), allow_pickle=False)

