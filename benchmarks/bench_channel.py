"""The channel: put + get throughput against plain Arrow IPC files by hand, latency, memory.

Throughput (one process, interleaved rounds, the ratio is the median of the per-round ratios):
- ours: a sampler end puts the records segment by segment into a `file://` channel (validated
  in bulk, Arrow IPC, temporary name, fsync, rename, folder fsync), then a trainer end gets
  them segment by segment as the trainer's batch (map, collation, trainer-schema check) and
  acks each;
- baseline: the same records written by hand as Arrow IPC files with the same fsync
  (`pa.array` per column, `ipc.new_file`, fsync, rename, folder fsync), read back and padded
  into the same arrays by hand (numpy scatter for CartPole, the row-slice loop for tokens);
  nothing is checked.
Two corpora: CartPole steps (50-step episodes, segments of 1,000 steps) and 10,000 LLM
completions (prompt 32-256, response 64-1,024 tokens, log-uniform; segments of 1,000
completions). A third figure times ours without the validation at `put` (the bulk check
replaced by the columns it hands over) to show what the transport alone costs.

Latency (two OS processes): a sampler process puts a segment every 20 ms; the trainer process
gets each (`get(timeout=...)`) and acks it; p50/p99 of (get returned − put returned), wall
clock, same machine.

Memory: one process puts, gets and acks many small segments; its resident memory (VmRSS) after
the first 10% of segments and at the end (flat: the ratio stays near 1).

Every figure is printed with the load average at its start and end (the machine is shared).

Run: python benchmarks/bench_channel.py           (full sizes, 5 rounds)
     python benchmarks/bench_channel.py --quick   (a tenth, 3 rounds)
     python benchmarks/bench_channel.py --json    (one JSON object)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from bench_tokens import records

from gyre_contract.channel import open_sampler, open_trainer
from gyre_contract.core._tensor import Tensor
from gyre_contract.pinned import CartPoleStep, LLMStep

TARGET = 1.25
CARTPOLE_MAP = {"gyre_field_map": 1, "fields": {
    "obs": {"from": "observation"}, "action": {"from": "action"}, "reward": {"from": "reward"},
    "done": {"op": "any", "from": ["terminated", "truncated"]}, "mask": {"op": "mask"}}}
CARTPOLE_TRAINER = {"title": "bench trainer", "x-gyre-batch-dims": ["B", "T"],
                    "type": "object", "properties": {
    "obs": {"x-gyre-dtype": "float32", "x-gyre-shape": ["B", "T", 4]},
    "action": {"x-gyre-dtype": "int64", "x-gyre-shape": ["B", "T"]},
    "reward": {"x-gyre-dtype": "float32", "x-gyre-shape": ["B", "T"]},
    "done": {"x-gyre-dtype": "bool", "x-gyre-shape": ["B", "T"]},
    "mask": {"x-gyre-dtype": "bool", "x-gyre-shape": ["B", "T"]}},
    "required": ["obs", "action", "reward", "done", "mask"]}
TOKEN_MAP = {"gyre_field_map": 1, "rows": "step", "fields": {
    **{k: {"from": k} for k in ("prompt_ids", "prompt_mask", "response_ids", "response_mask",
                                "response_length", "logprob", "reward", "episode_id",
                                "policy_version", "step")},
    "advantage": {"from": "reward"}}}


class Completion(LLMStep):
    """An LLM generation with its per-token log-probs always recorded."""

    logprob: Tensor("float32", ["A"], role="logprob", description="per-token log-probs")


# -- corpora -----------------------------------------------------------------------------------

def cartpole(n: int, length: int = 50, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    obs = rng.random((n, 4), dtype=np.float32)
    return [{"observation": obs[i], "action": i % 2, "reward": 1.0, "step": i % length,
             "episode_id": f"e{seed}-{i // length}", "terminated": i % length == length - 1,
             "truncated": False, "policy_version": 0} for i in range(n)]


def completions(n: int) -> list[dict[str, Any]]:
    """`benchmarks/bench_tokens.py`'s completions: prompt 32-256, response 64-1,024 tokens."""
    return records(n)


def chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


# -- ours ----------------------------------------------------------------------------------------

def open_ends(folder: Path, kind: str) -> tuple[Any, Any]:
    """A fresh channel's sampler and trainer ends for a corpus (`ChannelWarning`s ignored:
    CartPoleStep marks fields optional that nothing here reads)."""
    shutil.rmtree(folder, ignore_errors=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "cartpole":
            return (open_sampler(folder, model=CartPoleStep),
                    open_trainer(folder, map=CARTPOLE_MAP, trainer=CARTPOLE_TRAINER))
        return open_sampler(folder, model=Completion), open_trainer(folder, map=TOKEN_MAP)


def ours(folder: Path, segments: list[list[dict[str, Any]]], kind: str) -> int:
    """Put every segment, then get and ack them one by one; the rows delivered."""
    sampler, trainer = open_ends(folder, kind)
    for steps in segments:
        sampler.put(steps)
    rows = 0
    for steps in segments:
        delivery = trainer.get(rows=len(steps), timeout=10)
        rows += delivery.steps
        trainer.ack(delivery)
    return rows


# -- the baseline: Arrow IPC files by hand, with the same fsync --------------------------------

def write_ipc(path: Path, table: pa.Table) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with pa.OSFile(str(tmp), "wb") as f, pa.ipc.new_file(f, table.schema) as writer:
        writer.write_table(table)
    fd = os.open(tmp, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def cartpole_table(steps: list[dict[str, Any]]) -> pa.Table:
    obs = np.stack([s["observation"] for s in steps])
    return pa.table({
        "observation": pa.FixedSizeListArray.from_arrays(pa.array(obs.reshape(-1)), 4),
        **{k: pa.array([s[k] for s in steps]) for k in
           ("action", "reward", "step", "episode_id", "terminated", "truncated",
            "policy_version")}})


def cartpole_batch(table: pa.Table) -> dict[str, np.ndarray]:
    """[B, T] by hand: each step's row from its episode id, its column from its step."""
    ids = np.asarray(table.column("episode_id").to_pylist())
    _, first, row = np.unique(ids, return_index=True, return_inverse=True)
    t = table.column("step").to_numpy()
    b, nt = len(first), int(t.max()) + 1
    out = {"mask": np.zeros((b, nt), bool)}
    out["mask"][row, t] = True
    obs = table.column("observation").combine_chunks().flatten().to_numpy().reshape(-1, 4)
    for name, values in (("obs", obs), ("action", table.column("action").to_numpy()),
                         ("reward", table.column("reward").to_numpy().astype(np.float32)),
                         ("done", table.column("terminated").to_numpy(zero_copy_only=False))):
        array = np.zeros((b, nt, *values.shape[1:]), values.dtype)
        array[row, t] = values
        out[name] = array
    return out


def ragged(values: list[np.ndarray], arrow_type: Any) -> pa.Array:
    offsets = np.concatenate([[0], np.cumsum([len(v) for v in values])]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(values)),
                                    type=arrow_type)


def token_table(steps: list[dict[str, Any]]) -> pa.Table:
    return pa.table({
        "prompt": ragged([s["observation"]["token_ids"] for s in steps], pa.list_(pa.int64())),
        "action": ragged([s["action"] for s in steps], pa.list_(pa.int64())),
        "logprob": ragged([s["logprob"] for s in steps], pa.list_(pa.float32())),
        **{k: pa.array([s[k] for s in steps]) for k in
           ("reward", "step", "episode_id", "terminated", "truncated", "policy_version")}})


def token_batch(table: pa.Table) -> dict[str, np.ndarray]:
    """The padding loop of benchmarks/bench_tokens.py, on the columns read back."""
    def rows(name: str) -> list[np.ndarray]:
        column = table.column(name).combine_chunks()
        offsets = column.offsets.to_numpy()
        return np.split(column.values.to_numpy(), offsets[1:-1])

    prompts, actions, logprobs = rows("prompt"), rows("action"), rows("logprob")
    b, p, a = len(actions), max(map(len, prompts)), max(map(len, actions))
    prompt_ids, prompt_mask = np.zeros((b, p), np.int64), np.zeros((b, p), bool)
    response_ids, response_mask = np.zeros((b, a), np.int64), np.zeros((b, a), bool)
    logprob = np.zeros((b, a), np.float32)
    for i in range(b):
        prompt, n = prompts[i], len(actions[i])
        prompt_ids[i, p - len(prompt):] = prompt
        prompt_mask[i, p - len(prompt):] = True
        response_ids[i, :n] = actions[i]
        response_mask[i, :n] = True
        logprob[i, :n] = logprobs[i]
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "response_ids": response_ids,
            "response_mask": response_mask, "logprob": logprob,
            "reward": table.column("reward").to_numpy().astype(np.float32)}


def baseline(folder: Path, segments: list[list[dict[str, Any]]], kind: str) -> int:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    to_table, to_batch = (cartpole_table, cartpole_batch) if kind == "cartpole" else \
        (token_table, token_batch)
    for i, steps in enumerate(segments):
        write_ipc(folder / f"{i:08d}.arrow", to_table(steps))
    rows = 0
    for i in range(len(segments)):
        path = folder / f"{i:08d}.arrow"
        with pa.memory_map(str(path)) as source:
            batch = to_batch(pa.ipc.open_file(source).read_all())
        rows += int(batch["mask"].sum()) if "mask" in batch else len(batch["reward"])
        path.unlink()
    return rows


# -- measurements --------------------------------------------------------------------------------

def load() -> float:
    return round(os.getloadavg()[0], 2)


def throughput(kind: str, segments: list[list[dict[str, Any]]], rounds: int, tmp: Path,
               no_validation: bool = False) -> dict[str, Any]:
    before = load()
    ours(tmp / "warm", segments[:2], kind)  # imports, plans
    baseline(tmp / "warm-base", segments[:2], kind)
    mine, theirs, ratios = [], [], []
    for _ in range(rounds):
        start = time.perf_counter()
        rows = ours(tmp / "ours", segments, kind)
        mine.append(time.perf_counter() - start)
        start = time.perf_counter()
        rows_base = baseline(tmp / "base", segments, kind)
        theirs.append(time.perf_counter() - start)
        assert rows == rows_base == sum(map(len, segments)), (rows, rows_base)
        ratios.append(mine[-1] / theirs[-1])
    ratio = statistics.median(ratios)
    return {"kind": kind + (" (no validation at put)" if no_validation else ""),
            "segments": len(segments), "steps": sum(map(len, segments)),
            "ours_s": statistics.median(mine), "baseline_s": statistics.median(theirs),
            "ratio": ratio, "ratios": ratios, "target": TARGET, "pass": ratio <= TARGET,
            "load": [before, load()]}


def without_validation(kind: str, segments: list[list[dict[str, Any]]], rounds: int,
                       tmp: Path) -> dict[str, Any]:
    """Ours with `put`'s bulk check replaced by the columns it would hand over (the columns
    computed once beforehand): the transport alone."""
    from gyre_contract.channel import _contract
    from gyre_contract.io._blocks import RecordBlocks

    model = CartPoleStep if kind == "cartpole" else Completion
    checked = {}
    for steps in segments:
        checker = RecordBlocks(model)
        checked[id(steps[0])] = checker.check(steps)

    class Checked(RecordBlocks):
        def check(self, steps: Any) -> Any:  # type: ignore[override]
            self._trial = (self._checker, checked[id(steps[0])])
            return checked[id(steps[0])]

    real = _contract.RecordBlocks
    _contract.RecordBlocks = Checked  # type: ignore[misc]
    try:
        return throughput(kind, segments, rounds, tmp, no_validation=True)
    finally:
        _contract.RecordBlocks = real  # type: ignore[misc]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def memory(segments: int, tmp: Path) -> dict[str, Any]:
    before = load()
    sampler, trainer = open_ends(tmp / "memory", "cartpole")
    marks = {}
    for i in range(segments):
        sampler.put(cartpole(100, length=50, seed=i))
        trainer.ack(trainer.get(rows=100, timeout=10))
        if i + 1 in (segments // 10, segments):
            marks[i + 1] = rss_mb()
    first, last = marks[segments // 10], marks[segments]
    return {"segments": segments, "rss_mb_at": {str(k): round(v, 1) for k, v in marks.items()},
            "ratio": last / first, "load": [before, load()]}


LATENCY_SAMPLER = """
import json, sys, time, warnings
sys.path.insert(0, {here!r})
from bench_channel import cartpole
from gyre_contract.channel import open_sampler
from gyre_contract.pinned import CartPoleStep
warnings.simplefilter("ignore")
end = open_sampler({uri!r}, model=CartPoleStep)
done = {{}}
for i in range({n}):
    meta = end.put(cartpole(200, seed=i))
    done[meta.segment] = time.time()
    time.sleep(0.02)
print(json.dumps(done))
"""


def latency(n: int, tmp: Path) -> dict[str, Any]:
    before = load()
    folder = tmp / "latency"
    _, trainer = open_ends(folder, "cartpole")
    code = LATENCY_SAMPLER.format(here=str(Path(__file__).parent), uri=str(folder), n=n)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    got = {}
    while len(got) < n:
        delivery = trainer.get(rows=1, timeout=60)
        now = time.time()
        for segment in delivery.segments:
            got[segment] = now
        trainer.ack(delivery)
    out, _ = proc.communicate(timeout=60)
    put = json.loads(out)
    lags = sorted((got[s] - put[s]) * 1e3 for s in put)
    return {"segments": n, "p50_ms": float(np.percentile(lags, 50)),
            "p99_ms": float(np.percentile(lags, 99)), "max_ms": lags[-1],
            "load": [before, load()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes, 3 rounds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    scale, rounds = (10, 3) if args.quick else (1, args.rounds)
    results: dict[str, Any] = {"python": sys.version.split()[0], "pyarrow": pa.__version__,
                               "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="gyre-bench-channel-") as name:
        tmp = Path(name)
        cart = chunks(cartpole(200_000 // scale), 1000)
        llm = chunks(completions(10_000 // scale), 1000 // scale if scale > 1 else 1000)
        results["cartpole"] = throughput("cartpole", cart, rounds, tmp)
        results["cartpole_transport"] = without_validation("cartpole", cart, rounds, tmp)
        results["llm"] = throughput("llm", llm, rounds, tmp)
        results["llm_transport"] = without_validation("llm", llm, rounds, tmp)
        results["latency"] = latency(200 // scale, tmp)
        results["memory"] = memory(2000 // scale, tmp)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for key in ("cartpole", "cartpole_transport", "llm", "llm_transport"):
        r = results[key]
        print(f"{r['kind']}: {r['steps']} steps in {r['segments']} segments: put+get "
              f"{r['ours_s'] * 1e3:.0f} ms, Arrow IPC by hand {r['baseline_s'] * 1e3:.0f} ms, "
              f"{r['ratio']:.2f}x (rounds {', '.join(f'{x:.2f}' for x in r['ratios'])}; target "
              f"<= {TARGET}: {'PASS' if r['pass'] else 'FAIL'}), load {r['load']}")
    lat = results["latency"]
    print(f"latency put returned -> get returned, two processes, {lat['segments']} segments: "
          f"p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms, max {lat['max_ms']:.1f} ms, "
          f"load {lat['load']}")
    mem = results["memory"]
    print(f"memory over {mem['segments']} segments (put + get + ack, one process): VmRSS "
          f"{mem['rss_mb_at']} MB, last / first {mem['ratio']:.2f}, load {mem['load']}")


if __name__ == "__main__":
    main()
