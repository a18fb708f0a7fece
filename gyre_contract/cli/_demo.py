"""`gyre-contract demo [--llm] [--out-dir DIR] [--cycles N] [--seed S] [--format json]`: all
three stages, on CartPole-v1 or (`--llm`) on token rollouts of a tiny numpy language policy
trained with GRPO. With `--format json` the stage-by-stage text is not printed: stdout holds one
JSON object, the demo's report (`DemoReport.to_dict`)."""

from __future__ import annotations

import argparse
import io
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gyre_contract.cli._conventions import UsageError, add_out_dir
from gyre_contract.core._report import FORMATS

if TYPE_CHECKING:
    from gyre_contract.harness._demoreport import DemoReport

CARTPOLE_CYCLES, LLM_CYCLES = 12, 40
__all__ = ["CARTPOLE_CYCLES", "LLM_CYCLES", "add_parser", "run"]


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
    p.add_argument("--procs", action="store_true",
                   help="with --llm: stage 3 runs the sampler and the trainer as two OS "
                   "processes that meet only through a channel (docs/channel.md); the "
                   "weights go to the sampler by version through a file; same criteria and "
                   "curve (extra parquet: pyarrow)")
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
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text: each stage as it runs, for people (default); json: no stage "
                   "text, one JSON object on stdout when the demo ends: every stage's verdict "
                   "and key figures (counts, times, losses, the curve and staleness of every "
                   "cycle of every seed, the files written)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from gyre_contract.harness._demoreport import FILES

    cycles = args.cycles if args.cycles is not None else (
        LLM_CYCLES if args.llm else CARTPOLE_CYCLES)
    if args.procs and not args.llm:
        raise UsageError("error: --procs goes with --llm (the LLM demo's sampler and trainer "
                         "as two processes)")
    if args.llm and args.episodes is not None:
        raise UsageError("error: --episodes is for the CartPole demo; --llm samples 16 prompts x 8 "
                         "completions per cycle")
    episodes = 32 if args.episodes is None else args.episodes
    if cycles < 1 or episodes < 1:
        raise UsageError("error: --cycles and --episodes must be >= 1")
    if args.seed < 0:
        raise UsageError(f"error: --seed must be >= 0, got {args.seed}")
    text = args.format == "text"
    stages = out if text else io.StringIO()  # --format json: the stage text is not printed
    if args.out_dir is not None:
        result = _run(args, stages, args.out_dir, cycles, episodes, plot=True)
        if text:
            out.write(f"\nfiles kept in {args.out_dir}:\n" + "".join(
                f"  {name:<15} {FILES[name]}\n" for name in result.files))
    else:
        with tempfile.TemporaryDirectory(prefix="gyre-demo-") as tmp:
            result = _run(args, stages, Path(tmp), cycles, episodes, plot=False)
        result.kept = False
        if text:
            out.write(f"\nthe files above were in a temporary folder, now removed: --out-dir "
                      f"DIR keeps them ({', '.join(FILES)})\n")
    if not text:
        out.write(result.render("json") + "\n")
    return result.exit_code()


def _run(args: argparse.Namespace, out: TextIO, out_dir: Path, cycles: int, episodes: int,
         *, plot: bool) -> DemoReport:
    from gyre_contract.harness._demo import run_demo
    from gyre_contract.harness._llmdemo import run_llm_demo

    if args.llm:
        if args.procs:
            from gyre_contract.harness._procdemo import HOW, train_run_procs

            return run_llm_demo(out, out_dir=out_dir, cycles=cycles, seed=args.seed,
                                notes=args.notes, plot=plot, train_run=train_run_procs, how=HOW)
        return run_llm_demo(out, out_dir=out_dir, cycles=cycles, seed=args.seed,
                            notes=args.notes, plot=plot)
    return run_demo(out, out_dir=out_dir, cycles=cycles, seed=args.seed,
                    episodes_per_cycle=episodes, plot=plot, notes=args.notes)
