"""`gyre-contract demo [--out-dir DIR] [--cycles N] [--seed S]`: all three stages on CartPole-v1."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any, TextIO

from gyre_contract.cli.conventions import add_out_dir
from gyre_contract.harness.demo import run_demo


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="the whole left-to-right path on Gymnasium CartPole-v1",
        description="Stage 1 (sampler alone), the schema diff, stage 2 (map + collate + one "
        "loss, no update) and stage 3 (train cycles of a small numpy learner), on a real "
        "environment. Needs the demo extra: pip install 'gyre-contract[demo]'.")
    add_out_dir(p, default=None, type=Path,
                help="keep rollouts.jsonl, map.json, runs.jsonl and runs.png here "
                "(default: a temporary folder, removed at the end)")
    p.add_argument("--cycles", type=int, default=12,
                   help="stage 3 train cycles per run; stage 3 runs one configuration with 3 "
                   "seeds (default 12)")
    p.add_argument("--episodes", type=int, default=32,
                   help="episodes sampled per cycle (default 32)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed S for the env and the policy; stage 3's runs use S+1, S+2, S+3 "
                   "(default 0)")
    p.add_argument("--notes", default="", metavar="TEXT",
                   help="added to each run record's notes, after what the field map says about "
                   "how the batch was made")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.cycles < 1 or args.episodes < 1:
        print("error: --cycles and --episodes must be >= 1", file=err)
        return 2
    if args.out_dir is not None:
        result = run_demo(out, out_dir=args.out_dir, cycles=args.cycles, seed=args.seed,
                          episodes_per_cycle=args.episodes, notes=args.notes)
        return 0 if result.passed else 1
    with tempfile.TemporaryDirectory(prefix="gyre-demo-") as tmp:
        result = run_demo(out, out_dir=Path(tmp), cycles=args.cycles, seed=args.seed,
                          episodes_per_cycle=args.episodes, plot=False, notes=args.notes)
    return 0 if result.passed else 1
