"""Sharded stage-1 validation: Ray Data with 1 and 2 workers against one process, and Parquet
against JSON Lines, on the same CartPole shards. Prints steps/s and the ratios.

    python benchmarks/bench_ray.py [--shards 8] [--steps 10000] [--repeat 3]

One local Ray with 2 CPUs is started once (start-up time printed separately); 1 or 2 workers is
`validate_shards(..., workers=N)`. Every configuration is warmed up once, then the
configurations take turns `--repeat` times, so load from other processes hits all of them
alike; the best time is reported, the median in parentheses. The numbers are the steady state
of a long-running cluster.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

from models import CartPoleStep  # noqa: E402

from gyre_contract.io._parquet import write_parquet  # noqa: E402
from gyre_contract.io._shards import validate_shards  # noqa: E402
from gyre_contract.io._writer import write_steps  # noqa: E402

EPISODE_LEN = 200


def records(shard: int, steps: int) -> list[dict]:
    out = []
    for i in range(steps):
        t = i % EPISODE_LEN
        last = t == EPISODE_LEN - 1 or i == steps - 1
        out.append({"observation": [0.01 * t, -0.02, 0.03, 0.04 * (t % 7)], "action": t % 2,
                    "logprob": -0.69, "value": 0.5, "reward": 1.0, "step": t,
                    "episode_id": f"w{shard}-e{i // EPISODE_LEN}", "terminated": last,
                    "truncated": False, "policy_version": i // 1000})
    return out


def write_all(folder: Path, shards: int, steps: int) -> None:
    for k in range(shards):
        data = records(k, steps)
        write_steps(folder / f"shard-{k:03d}.jsonl", data)
        write_parquet(folder / f"shard-{k:03d}.parquet", data, CartPoleStep)


def _burn(_: int) -> int:
    total = 0
    for i in range(5_000_000):
        total += i
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10000, help="steps per shard")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    total = args.shards * args.steps
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "examples"),
                                                os.environ.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_all(folder, args.shards, args.steps)
        size = {ext: sum(p.stat().st_size for p in folder.glob(f"*.{ext}")) / 2**20
                for ext in ("jsonl", "parquet")}
        print(f"{args.shards} shards x {args.steps} steps = {total} CartPole steps; "
              f"JSON Lines {size['jsonl']:.1f} MiB, Parquet {size['parquet']:.1f} MiB; "
              f"{os.cpu_count()} cores; best (median) of {args.repeat}")
        # The ceiling: 4 CPU-bound jobs in 1 vs 2 plain processes, timed in the same rounds.
        # (The pool is forked before Ray starts, so its processes are plain Python.)
        import multiprocessing

        pool = multiprocessing.Pool(2)
        import ray

        from gyre_contract.io._shards import quiet_ray_data

        start = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level="WARNING")
        quiet_ray_data()
        print(f"  ray.init (local, 2 CPUs): {time.perf_counter() - start:.1f} s")
        runs: dict[tuple[str, str], Callable[[], object]] = {}
        for ext in ("jsonl", "parquet"):
            glob = str(folder / f"*.{ext}")
            runs[("local", ext)] = lambda g=glob: validate_shards(g, CartPoleStep, engine="local")
            for workers in (1, 2):
                runs[(f"ray{workers}", ext)] = lambda g=glob, w=workers: validate_shards(
                    g, CartPoleStep, engine="ray", workers=w)
        runs[("plain", "1 process")] = lambda: [_burn(i) for i in range(4)]
        runs[("plain", "2 processes")] = lambda: pool.map(_burn, range(4))
        for key, run in runs.items():  # warm-up: Ray starts its workers, imports happen
            start = time.perf_counter()
            run()
            if key[0].startswith("ray"):
                print(f"  first run {key[0]} {key[1]}: {time.perf_counter() - start:.1f} s")
        times: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
        for _ in range(args.repeat):  # interleaved, so load from other processes hits all alike
            for key, run in runs.items():
                start = time.perf_counter()
                run()
                times[key].append(time.perf_counter() - start)
        ray.shutdown()
        pool.close()
        pool.join()
        results = {key: min(t) for key, t in times.items()}
        ceiling = results[("plain", "1 process")] / results[("plain", "2 processes")]
        names = {"local": "one process   ", "ray1": "Ray, 1 worker ", "ray2": "Ray, 2 workers"}
        for (engine, ext), t in times.items():
            if engine == "plain":
                continue
            print(f"  {names[engine]} {ext:8} {min(t):6.2f} s ({statistics.median(t):.2f})  "
                  f"{total / min(t):9.0f} steps/s")
        print("ratios (time of the first / time of the second; > 1 means the second is faster):")
        print(f"  ceiling: 4 CPU-bound jobs, 1 process / 2 processes {ceiling:5.2f}")
        for ext in ("jsonl", "parquet"):
            local, one, two = (results[(k, ext)] for k in ("local", "ray1", "ray2"))
            print(f"  {ext:8} one process / Ray 1 worker  {local / one:5.2f}")
            print(f"  {ext:8} one process / Ray 2 workers {local / two:5.2f}")
            print(f"  {ext:8} Ray 1 worker / Ray 2 workers {one / two:5.2f}")
        for engine in ("local", "ray2"):
            ratio = results[(engine, "jsonl")] / results[(engine, "parquet")]
            print(f"  JSON Lines / Parquet ({engine}) {ratio:5.2f}")


if __name__ == "__main__":
    main()
