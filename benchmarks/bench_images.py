"""Image observations on disk: bytes per step and `validate_file` steps/s, JSON Lines vs Parquet.

    python benchmarks/bench_images.py [--steps 60] [--height 400] [--width 600] [--json out.json]

Writes `--steps` steps of one episode whose observation (and next_observation) is a random
`uint8 [H, W, 3]` image, unpinned (`RolloutStep`), once as JSON Lines and once as Parquet
(extra `parquet`), then validates each file (what `gyre-contract validate` runs) and prints
bytes per step, steps per second and the observation's dtype as read back. The figures of
docs/rollout-files.md#images come from this script; timings are for reading, not a verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gyre_contract import read_steps, validate_step, write_steps
from gyre_contract.io._validation import validate_file


def _steps(n: int, height: int, width: int) -> list:
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(n + 1)]
    return [validate_step({"observation": frames[i], "next_observation": frames[i + 1],
                           "action": 1, "reward": 1.0, "step": i, "episode_id": "img-0",
                           "terminated": i == n - 1, "truncated": False, "policy_version": 0})
            for i in range(n)]


def measure(path: Path, steps: list) -> dict:
    write_steps(path, steps)
    started = time.perf_counter()
    report = validate_file(path)
    seconds = time.perf_counter() - started
    assert report.ok, report.to_text()
    first = next(iter(read_steps(path)))
    return {"format": path.suffix.lstrip("."), "bytes_per_step": os.path.getsize(path) // len(steps),
            "validate_steps_per_s": round(len(steps) / seconds, 1),
            "observation_dtype_read_back": str(first.observation.dtype)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="steps in the episode (default 60)")
    parser.add_argument("--height", type=int, default=400, help="image height (default 400)")
    parser.add_argument("--width", type=int, default=600, help="image width (default 600)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args(argv)
    steps = _steps(args.steps, args.height, args.width)
    with tempfile.TemporaryDirectory(prefix="gyre-images-") as tmp:
        rows = [measure(Path(tmp) / f"images.{ext}", steps) for ext in ("jsonl", "parquet")]
    print(f"{args.steps} steps of uint8 [{args.height}, {args.width}, 3] "
          "(observation and next_observation)")
    for row in rows:
        print(f"{row['format']:8} {row['bytes_per_step']:>10,} bytes/step  "
              f"{row['validate_steps_per_s']:>7} steps/s  read back as "
              f"{row['observation_dtype_read_back']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
