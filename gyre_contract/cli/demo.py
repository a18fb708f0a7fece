"""`gyre-contract demo [--llm] [--out-dir DIR] [--cycles N] [--seed S]`: all three stages, on
CartPole-v1 or (`--llm`) on token rollouts of a tiny numpy language policy trained with GRPO."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any, TextIO

from gyre_contract.cli.conventions import add_out_dir
from gyre_contract.harness.demo import run_demo
from gyre_contract.harness.llmdemo import run_llm_demo

CARTPOLE_CYCLES, LLM_CYCLES = 12, 40
FILES = {"rollouts.jsonl": "stage 1: the sampler's rollouts (validate, show)",
         "sampler.json": "the diff: the sampler's schema",
         "trainer.json": "the diff: the trainer's schema",
         "map.json": "the diff: the field map it wrote (batch --map)",
         "runs.jsonl": "stage 3: one run record per seed (runs)",
         "runs.png": "stage 3: the curves"}
"""The files a demo leaves in its folder, in the order the stages write them."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="the whole left-to-right path on Gymnasium CartPole-v1, or on LLM token "
        "rollouts (--llm)",
        description="Stage 1 (sampler alone), the schema diff, stage 2 (map + collate + one "
        "loss, no update) and stage 3 (train cycles of a small numpy learner), on a real "
        "environment. Needs the demo extra: pip install 'gyre-contract[demo]'. With --llm: "
        "the same path for LLM online RL, numpy only: a tiny token policy answers 'a+b=' "
        "prompts, groups of completions with per-token log-probs and reference log-probs, "
        "a verl-style trainer schema, the GRPO loss, and asynchronous sampling one policy "
        "version ahead of the trainer (max staleness 1).")
    p.add_argument("--llm", action="store_true",
                   help="run the LLM online-RL demo (GRPO on token rollouts; no extra needed)")
    add_out_dir(p, default=None, type=Path,
                help="keep rollouts.jsonl, map.json, runs.jsonl (and runs.png) here "
                "(default: a temporary folder, removed at the end)")
    p.add_argument("--cycles", type=int, default=None,
                   help=f"stage 3 train cycles (updates) per run; stage 3 runs one configuration "
                   f"with 3 seeds (default {CARTPOLE_CYCLES}, with --llm {LLM_CYCLES})")
    p.add_argument("--episodes", type=int, default=None,
                   help="episodes sampled per cycle (default 32; CartPole only: --llm samples "
                   "16 prompts x 8 completions)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed S for the env and the policy; stage 3's runs use S+1, S+2, S+3 "
                   "(default 0)")
    p.add_argument("--notes", default="", metavar="TEXT",
                   help="added to each run record's notes, after what the field map says about "
                   "how the batch was made")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    cycles = args.cycles if args.cycles is not None else (
        LLM_CYCLES if args.llm else CARTPOLE_CYCLES)
    if args.llm and args.episodes is not None:
        print("error: --episodes is for the CartPole demo; --llm samples 16 prompts x 8 "
              "completions per cycle", file=err)
        return 2
    episodes = 32 if args.episodes is None else args.episodes
    if cycles < 1 or episodes < 1:
        print("error: --cycles and --episodes must be >= 1", file=err)
        return 2
    if args.seed < 0:
        print(f"error: --seed must be >= 0, got {args.seed}", file=err)
        return 2
    if args.out_dir is not None:
        code = _run(args, out, args.out_dir, cycles, episodes, plot=True)
        kept = [name for name in FILES if (args.out_dir / name).is_file()]
        out.write(f"\nfiles kept in {args.out_dir}:\n" + "".join(
            f"  {name:<15} {FILES[name]}\n" for name in kept))
        return code
    with tempfile.TemporaryDirectory(prefix="gyre-demo-") as tmp:
        code = _run(args, out, Path(tmp), cycles, episodes, plot=False)
    out.write(f"\nthe files above were in a temporary folder, now removed: --out-dir DIR keeps "
              f"them ({', '.join(FILES)})\n")
    return code


def _run(args: argparse.Namespace, out: TextIO, out_dir: Path, cycles: int, episodes: int,
         *, plot: bool) -> int:
    if args.llm:
        result = run_llm_demo(out, out_dir=out_dir, cycles=cycles, seed=args.seed,
                              notes=args.notes, plot=plot)
    else:
        result = run_demo(out, out_dir=out_dir, cycles=cycles, seed=args.seed,
                          episodes_per_cycle=episodes, plot=plot, notes=args.notes)
    return 0 if result.passed else 1
