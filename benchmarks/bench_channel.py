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
Each throughput figure also gives the ratio of the process's CPU time (user + system) for
ours and for the baseline, round by round: what both sides compute, without the waits of a
shared disk (fsync, unlink), and steadier than wall time on a loaded machine. The target is
the wall-time ratio.

Run: python benchmarks/bench_channel.py           (full sizes, 11 rounds)
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
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from bench_tokens import records
from measure import load_now

from gyre_contract.channel import open_sampler, open_trainer
from gyre_contract.core._tensor import Tensor
from gyre_contract.pinned import CartPoleStep, LLMStep

TARGET = 1.25
ROUNDS = 11
"""Rounds of each throughput figure by default (`main`)."""
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


def ours(ends: tuple[Any, Any], segments: list[Any], rows: list[int]) -> int:
    """Put every segment, then get and ack them one by one; the rows delivered."""
    sampler, trainer = ends
    for steps in segments:
        sampler.put(steps)
    delivered = 0
    for n in rows:
        delivery = trainer.get(rows=n, timeout=10)
        delivered += delivery.steps
        trainer.ack(delivery)
    sampler.close()
    trainer.close()
    return delivered


# -- the baseline: Arrow IPC files by hand, with the same fsync --------------------------------
# The strongest hand-written code we know for the same job: columns to Arrow arrays without a
# Python value per step where the input allows (numpy arrays go in as buffers), one IPC file
# per segment written to a temporary name, fsynced, renamed, the folder fsynced (what a segment
# costs on disk), memory-mapped back, and the trainer's arrays built with whole-array numpy
# (one scatter per field, masks from lengths): the same keys, dtypes and values as the
# trainer's batch (checked before timing). It checks nothing.

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


def _values(source: Any, key: str) -> Any:
    """One column: from step dicts (a list) or from columns (a dict of arrays or lists)."""
    return [s[key] for s in source] if isinstance(source, list) else source[key]


def cartpole_table(source: Any) -> pa.Table:
    """Step dicts (or the same steps as columns) as an Arrow table."""
    obs = np.stack([s["observation"] for s in source]) if isinstance(source, list) else \
        source["observation"]
    return pa.table({
        "observation": pa.FixedSizeListArray.from_arrays(pa.array(obs.reshape(-1)), 4),
        **{k: pa.array(_values(source, k)) for k in
           ("action", "reward", "step", "episode_id", "terminated", "truncated",
            "policy_version")}})


def cartpole_batch(table: pa.Table) -> dict[str, np.ndarray]:
    """[B, T] by hand: each step's row from its episode (Arrow's dictionary encoding, in order
    of first appearance), its column from its step; one scatter per field."""
    ids = table.column("episode_id").combine_chunks().dictionary_encode()
    row = ids.indices.to_numpy()
    t = table.column("step").to_numpy()
    b, nt = len(ids.dictionary), int(t.max()) + 1
    obs = table.column("observation").combine_chunks().flatten().to_numpy().reshape(-1, 4)
    done = table.column("terminated").to_numpy(zero_copy_only=False) | \
        table.column("truncated").to_numpy(zero_copy_only=False)
    out = {}
    for name, values in (("obs", obs), ("action", table.column("action").to_numpy()),
                         ("reward", table.column("reward").to_numpy().astype(np.float32)),
                         ("done", done)):
        array = np.zeros((b, nt, *values.shape[1:]), values.dtype)
        array[row, t] = values
        out[name] = array
    out["mask"] = np.zeros((b, nt), bool)
    out["mask"][row, t] = True
    return out


def ragged(values: Any) -> pa.Array:
    """A list column from one array per step."""
    offsets = np.zeros(len(values) + 1, np.int32)
    np.cumsum([len(v) for v in values], out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(values)))


def token_table(source: Any) -> pa.Table:
    prompts = [s["observation"]["token_ids"] for s in source] if isinstance(source, list) else \
        [o["token_ids"] for o in source["observation"]]
    return pa.table({
        "prompt": ragged(prompts), "action": ragged(_values(source, "action")),
        "logprob": ragged(_values(source, "logprob")),
        **{k: pa.array(_values(source, k)) for k in
           ("reward", "step", "episode_id", "terminated", "truncated", "policy_version")}})


def token_batch(table: pa.Table) -> dict[str, np.ndarray]:
    """The token rows by hand: masks from the lengths (prompts left-padded, responses
    right-padded), one scatter of the flat values per field."""
    def flat(name: str) -> tuple[np.ndarray, np.ndarray]:
        column = table.column(name).combine_chunks()
        return column.values.to_numpy(), np.diff(column.offsets.to_numpy())

    prompts, prompt_length = flat("prompt")
    actions, length = flat("action")
    logprobs, _ = flat("logprob")
    b, p, a = len(length), int(prompt_length.max()), int(length.max())
    prompt_mask = np.arange(p) >= (p - prompt_length)[:, None]
    response_mask = np.arange(a) < length[:, None]
    prompt_ids, response_ids = np.zeros((b, p), np.int64), np.zeros((b, a), np.int64)
    logprob = np.zeros((b, a), np.float32)
    prompt_ids[prompt_mask] = prompts
    response_ids[response_mask] = actions
    logprob[response_mask] = logprobs
    reward = table.column("reward").to_numpy().astype(np.float32)
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "response_ids": response_ids,
            "response_mask": response_mask, "response_length": length.astype(np.int64),
            "logprob": logprob, "advantage": reward.copy(), "reward": reward,
            "episode_id": table.column("episode_id").to_numpy(zero_copy_only=False).astype(str),
            "policy_version": table.column("policy_version").to_numpy(),
            "step": table.column("step").to_numpy()}


def by_hand(kind: str) -> tuple[Any, Any]:
    return (cartpole_table, cartpole_batch) if kind == "cartpole" else (token_table, token_batch)


def baseline(folder: Path, sources: list[Any], kind: str) -> int:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    to_table, to_batch = by_hand(kind)
    for i, source in enumerate(sources):
        write_ipc(folder / f"{i:08d}.arrow", to_table(source))
    rows = 0
    for i in range(len(sources)):
        path = folder / f"{i:08d}.arrow"
        with pa.memory_map(str(path)) as source:
            batch = to_batch(pa.ipc.open_file(source).read_all())
        rows += int(batch["mask"].sum()) if "mask" in batch else len(batch["reward"])
        path.unlink()
    return rows


def same_arrays(kind: str, segment: list[dict[str, Any]], tmp: Path) -> None:
    """The baseline builds the trainer's batch: the same keys, dtypes, shapes and values."""
    sampler, trainer = open_ends(tmp / "same", kind)
    sampler.put(segment)
    mine = trainer.get(rows=len(segment), timeout=10).batch
    to_table, to_batch = by_hand(kind)
    theirs = to_batch(to_table(segment))
    assert sorted(mine) == sorted(theirs), (sorted(mine), sorted(theirs))
    for key, value in mine.items():
        assert value.dtype == theirs[key].dtype and np.array_equal(value, theirs[key]), key
    sampler.close()
    trainer.close()


# -- measurements --------------------------------------------------------------------------------

def load() -> dict[str, Any]:
    """The 1-minute load average and the cores other processes keep busy (`measure.load_now`)."""
    now = load_now()
    return {"load1": now.load1, "others": now.others, "free_cores": round(now.free_cores, 2)}


def throughput(kind: str, segments: list[list[dict[str, Any]]], rounds: int, tmp: Path,
               transport: bool = False) -> dict[str, Any]:
    """`put` + `get` + `ack` of every segment against the baseline, interleaved; opening the
    channel (the handshake, once per run) is timed on its own. `transport`: `put` takes the
    checked columns computed beforehand (the validation left out), and the baseline starts
    from the same columns."""
    before = load()
    same_arrays(kind, segments[0], tmp)
    rows = [len(s) for s in segments]
    sources: list[Any] = segments
    patch = nullcontext()
    if transport:
        blocks, patch = checked_beforehand(kind, segments)
        sources = [b.columns for b in blocks]
    with patch:
        ours(open_ends(tmp / "warm", kind), segments[:2], rows[:2])  # imports, plans
        baseline(tmp / "warm-base", sources[:2], kind)
        mine, theirs, ratios, opening, cpu = [], [], [], [], []
        for _ in range(rounds):
            start = time.perf_counter()
            ends = open_ends(tmp / "ours", kind)
            opening.append(time.perf_counter() - start)
            start, cpu_start = time.perf_counter(), time.process_time()
            delivered = ours(ends, segments, rows)
            mine.append(time.perf_counter() - start)
            cpu_mine = time.process_time() - cpu_start
            start, cpu_start = time.perf_counter(), time.process_time()
            delivered_base = baseline(tmp / "base", sources, kind)
            theirs.append(time.perf_counter() - start)
            cpu.append(cpu_mine / (time.process_time() - cpu_start))
            assert delivered == delivered_base == sum(rows), (delivered, delivered_base)
            ratios.append(mine[-1] / theirs[-1])
    ratio = statistics.median(ratios)
    return {"kind": kind + (" (transport: no validation at put)" if transport else ""),
            "segments": len(segments), "steps": sum(rows),
            "ours_s": statistics.median(mine), "baseline_s": statistics.median(theirs),
            "open_s": statistics.median(opening),
            "ratio": ratio, "ratios": ratios, "target": TARGET, "pass": ratio <= TARGET,
            "cpu_ratio": statistics.median(cpu), "cpu_ratios": cpu,
            "load": [before, load()]}


def checked_beforehand(kind: str, segments: list[list[dict[str, Any]]]) -> tuple[list[Any], Any]:
    """Each segment's checked block, computed once, and a patch that makes every `put` take
    it instead of validating (the tracker's bookkeeping left out too): the transport alone."""
    from gyre_contract.channel import _contract
    from gyre_contract.io._blocks import RecordBlocks

    model = CartPoleStep if kind == "cartpole" else Completion
    blocks = [RecordBlocks(model).check(steps) for steps in segments]
    checked = {id(steps[0]): block for steps, block in zip(segments, blocks)}

    class Checked(RecordBlocks):
        def check(self, steps: Any) -> Any:  # type: ignore[override]
            return checked[id(steps[0])]

        def commit(self) -> None:
            pass

    @contextmanager
    def patch() -> Iterator[None]:
        real = _contract.RecordBlocks
        _contract.RecordBlocks = Checked  # type: ignore[misc]
        try:
            yield
        finally:
            _contract.RecordBlocks = real  # type: ignore[misc]

    return blocks, patch()


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
        if i + 1 in (segments // 10, segments // 2, segments):
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
    """Steady state: the trainer end first gets one segment put from its own process (the
    first `get` of a process loads pyarrow's kernels: a few hundred milliseconds once)."""
    before = load()
    folder = tmp / "latency"
    sampler, trainer = open_ends(folder, "cartpole")
    sampler.put(cartpole(200, seed=10**6))
    trainer.ack(trainer.get(rows=1, timeout=10))
    sampler.close()
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
            "p90_ms": float(np.percentile(lags, 90)),
            "p99_ms": float(np.percentile(lags, 99)), "max_ms": lags[-1],
            "load": [before, load()]}


FIGURES = ("cartpole", "cartpole_transport", "llm", "llm_transport", "latency", "memory")


def load_text(pair: list[dict[str, Any]]) -> str:
    a, b = pair
    return (f"load {a['load1']:.1f}-{b['load1']:.1f}, free cores {a['free_cores']:.1f}-"
            f"{b['free_cores']:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes, 3 rounds")
    # 11 rounds: single rounds span 0.5-2.2x (the completions figure times 10 segments a
    # round, each a few fsyncs on a shared disk); the median of 5 moved by 0.4x between runs
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--only", nargs="+", choices=FIGURES, default=FIGURES,
                        help="these figures only")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    scale, rounds = (10, 3) if args.quick else (1, args.rounds)
    results: dict[str, Any] = {"python": sys.version.split()[0], "pyarrow": pa.__version__,
                               "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="gyre-bench-channel-") as name:
        tmp = Path(name)
        cart = chunks(cartpole(200_000 // scale), 1000)
        llm = chunks(completions(10_000 // scale), 1000 // scale if scale > 1 else 1000)
        for key in args.only:
            if key in ("cartpole", "cartpole_transport", "llm", "llm_transport"):
                corpus, kind = (cart, "cartpole") if key.startswith("cart") else (llm, "llm")
                results[key] = throughput(kind, corpus, rounds, tmp,
                                          transport=key.endswith("transport"))
            elif key == "latency":
                results[key] = latency(200 // scale, tmp)
            else:
                results[key] = memory(2000 // scale, tmp)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for key in FIGURES[:4]:
        if key in results:
            r = results[key]
            print(f"{r['kind']}: {r['steps']} steps in {r['segments']} segments: put+get "
                  f"{r['ours_s'] * 1e3:.0f} ms (open {r['open_s'] * 1e3:.0f} ms), Arrow IPC by "
                  f"hand {r['baseline_s'] * 1e3:.0f} ms, {r['ratio']:.2f}x (rounds "
                  f"{', '.join(f'{x:.2f}' for x in r['ratios'])}; target <= {TARGET}: "
                  f"{'PASS' if r['pass'] else 'FAIL'}); CPU time {r['cpu_ratio']:.2f}x (rounds "
                  f"{', '.join(f'{x:.2f}' for x in r['cpu_ratios'])}), {load_text(r['load'])}")
    if "latency" in results:
        lat = results["latency"]
        print(f"latency put returned -> get returned, two processes, {lat['segments']} "
              f"segments: p50 {lat['p50_ms']:.1f} ms, p90 {lat['p90_ms']:.1f} ms, p99 "
              f"{lat['p99_ms']:.1f} ms, max "
              f"{lat['max_ms']:.1f} ms, {load_text(lat['load'])}")
    if "memory" in results:
        mem = results["memory"]
        print(f"memory over {mem['segments']} segments (put + get + ack, one process): VmRSS "
              f"{mem['rss_mb_at']} MB, last / first {mem['ratio']:.2f}, "
              f"{load_text(mem['load'])}")


if __name__ == "__main__":
    main()
