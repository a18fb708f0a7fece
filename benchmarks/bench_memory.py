"""Peak memory of the CLI on the big inputs of docs/robustness.md ("Memory within the limits").

    python benchmarks/bench_memory.py make lists-line /tmp/m/lists.jsonl         # one input
    python benchmarks/bench_memory.py make run-log /tmp/m/runs.jsonl --n 1080000
    python benchmarks/bench_memory.py run /tmp/m                                 # every figure
    python benchmarks/bench_memory.py run /tmp/m --only lists-line,numbers-line

`make` writes one input (streamed: the generator itself stays small); `run` makes the inputs
that are missing in the folder and runs each command in a fresh process under
`/usr/bin/time -v`, printing its peak RSS ("Maximum resident set size"), exit code and the first
line of its output. The inputs are large (90-250 MB each): they are generated, never committed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
CARTPOLE_MAP = ROOT / "examples" / "cartpole_map.json"
STEP = {"observation": [0.01, -0.02, 0.03, 0.04], "action": 1, "logprob": -0.69, "value": 1.5,
        "reward": 1.0, "step": 0, "episode_id": "a", "terminated": True, "truncated": False,
        "policy_version": 0}
CHUNK = 2**20
"""Values written at a time by the one-line generators."""


def _write(path: Path, parts: Iterator[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for part in parts:
            f.write(part)


def _one_line(before: bytes, item: bytes, n: int, after: bytes) -> Iterator[bytes]:
    """`before` + n times `item` joined by commas + `after`, in pieces."""
    yield before
    done = 0
    while done < n:
        k = min(CHUNK, n - done)
        yield (b"," if done else b"") + b",".join([item] * k)
        done += k
    yield after


def lists_line(n: int) -> Iterator[bytes]:
    """One step whose unknown field `junk` holds n empty lists (3 bytes each)."""
    head = orjson.dumps(STEP)[:-1] + b',"junk":['
    return _one_line(head, b"[]", n, b"]}\n")


def numbers_line(n: int) -> Iterator[bytes]:
    """One valid step whose observation holds n numbers (float32, about 3.7 bytes each)."""
    step = {k: v for k, v in STEP.items() if k != "observation"}
    yield b'{"observation":['
    done, cycle = 0, (b"0.5", b"1", b"-1.25", b"2")
    while done < n:
        k = min(CHUNK, n - done)
        yield (b"," if done else b"") + b",".join(cycle[i % 4] for i in range(k))
        done += k
    yield b"]," + orjson.dumps(step)[1:] + b"\n"


def many_keys(n: int) -> Iterator[bytes]:
    """One record of n keys `"k0":0,...` (refused: too many keys)."""
    yield b"{"
    for start in range(0, n, CHUNK):
        yield (b"," if start else b"") + b",".join(
            b'"k%d":0' % i for i in range(start, min(n, start + CHUNK)))
    yield b"}\n"


def run_log(n: int, configs: int = 8, cycles: int = 0) -> Iterator[bytes]:
    """n runs over `configs` configurations; with `cycles`, each run has curves of 3 metrics."""
    for i in range(n):
        config = {"lr": 10.0 ** -(i % configs), "clip": 0.2} if cycles else f"lr{i % configs}"
        run: dict = {"run_id": f"run-{i}", "config": config,
                     "rollout_s": 1.0 + (i % 97) / 10, "train_s": 2.0 + (i % 89) / 10,
                     "total_s": 3.5 + (i % 83) / 10, "n_steps": 1000 + i % 1000,
                     "n_episodes": 10 + i % 7, "batch_shape": [8, 128], "policy_version": 5,
                     "notes": "", "started_at": "2026-11-30T12:00:00+00:00",
                     "metrics": {"loss": 0.5 + (i % 13) / 100, "return": float(i % 200)}}
        if cycles:
            run["curves"] = {name: [round(0.01 * ((i + c) % 50), 4) for c in range(cycles)]
                             for name in ("loss", "return", "kl")}
            run["metrics"]["kl"] = run["curves"]["kl"][-1]
        yield orjson.dumps(run) + b"\n"


def one_step_episodes(n: int) -> Iterator[bytes]:
    """n CartPole-like episodes of one step each (ids e0, e1, ...)."""
    head, tail = orjson.dumps(STEP).split(b'"episode_id":"a"')
    block = []
    for i in range(n):
        block.append(head + b'"episode_id":"e%d"' % i + tail + b"\n")
        if len(block) == 65536:
            yield b"".join(block)
            block = []
    yield b"".join(block)


# name -> (generator, default n, file name, command after `gyre-contract`)
INPUTS: dict[str, tuple[Callable[[int], Iterator[bytes]], int, str, list[str]]] = {
    "lists-line": (lists_line, 33_000_000, "lists.jsonl", ["validate"]),
    "numbers-line": (numbers_line, 33_000_000, "numbers.jsonl", ["validate"]),
    "million-keys": (many_keys, 1_000_000, "million_keys.jsonl", ["validate"]),
    "million-keys-batch": (many_keys, 1_000_000, "million_keys.jsonl",
                           ["batch", "--map", str(CARTPOLE_MAP)]),
    "run-log-60k": (lambda n: run_log(n, cycles=80), 60_000, "runs_60k.jsonl", ["runs"]),
    "run-log-1m": (run_log, 1_080_000, "runs_1m.jsonl", ["runs"]),
    "episodes-1m": (one_step_episodes, 1_000_000, "episodes_1m.jsonl",
                    ["batch", "--map", str(CARTPOLE_MAP), "-o", "{dir}/episodes_1m.npz"]),
    "episodes-5m": (one_step_episodes, 5_000_000, "episodes_5m.jsonl",
                    ["batch", "--map", str(CARTPOLE_MAP), "-o", "{dir}/episodes_5m.npz"]),
}


def make(name: str, path: Path, n: int | None = None) -> None:
    generate, default, _, _ = INPUTS[name]
    _write(path, generate(default if n is None else n))


def measure(argv: list[str]) -> tuple[int, int, str]:
    """(exit code, peak RSS in bytes, first line of output) of `gyre-contract ARGV`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "gyre_contract", *argv],
                          capture_output=True, text=True, env=env)
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    peak = int(found.group(1)) * 1024 if found else -1
    said = (proc.stdout + proc.stderr).strip().splitlines()
    first = next((line for line in said if "problems" in line or "error" in line or "line 1"
                  in line), said[0] if said else "")
    code = re.search(r"Exit status: (\d+)", proc.stderr)
    return (int(code.group(1)) if code else proc.returncode), peak, first[:160]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("make", help="write one input")
    p.add_argument("name", choices=sorted(INPUTS))
    p.add_argument("path", type=Path)
    p.add_argument("--n", type=int, help="how many values / runs / episodes")
    p = sub.add_parser("run", help="make missing inputs in DIR and measure every command")
    p.add_argument("dir", type=Path)
    p.add_argument("--only", help="comma-separated input names")
    args = parser.parse_args(argv)
    if args.what == "make":
        make(args.name, args.path, args.n)
        return 0
    names = args.only.split(",") if args.only else list(INPUTS)
    print("| input | command | file | exit | peak RSS | says |\n|---|---|---:|---:|---:|---|")
    for name in names:
        _, _, file, command = INPUTS[name]
        path = args.dir / file
        if not path.exists():
            make(name, path)
        argv = [command[0], str(path), *(c.format(dir=args.dir) for c in command[1:])]
        code, peak, first = measure(argv)
        print(f"| {name} | `{' '.join(command[:1])}` | {path.stat().st_size / 2**20:.0f} MiB "
              f"| {code} | {peak / 2**20:.0f} MiB | {first} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
