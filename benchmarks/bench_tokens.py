"""Token rows from a rollout file: JSON Lines -> validated TokenBatch, as a ratio to hand-written numpy.

10,000 single-turn completions (one step each), prompt 32-256 tokens and response 64-1,024
tokens (log-uniform), written once by `write_steps` as `LLMStep` records. Ours: what `half_way`
and `gyre-contract batch --map` do with a token map (`"rows": "step"`): the file read with
`read_steps(path, LLMStep)` (every record and episode rule checked, rows in file order), then
`collate_tokens`, the map, and the validated `TokenBatch`. The
baseline is the code a data engineer would write without the library: an `orjson.loads` loop
over the lines, `np.zeros` for each padded array, and one slice assignment per row and field
(prompt left-padded, response right-padded, masks, per-token log-probs, per-row scalars); it
checks nothing. Both run in the same process, interleaved (ours, baseline, ours, ...); the ratio
is the median of the per-round ratios. Target: <= 2x. A second figure (information) times the
collation alone: the map's `collated` (`collate_tokens` of the columns it reads) on the steps
once read, against the same padding loop run on their numpy arrays.

Run: python benchmarks/bench_tokens.py            (10,000 completions, 5 rounds)
     python benchmarks/bench_tokens.py --quick    (1,000 completions, 3 rounds)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from gyre_contract.io._reading import read_steps
from gyre_contract.io._writer import write_steps
from gyre_contract.pinned import LLMStep
from gyre_contract.trainer._fieldmap import FieldMap

TOKEN_MAP = {"gyre_field_map": 1, "rows": "step", "fields": {
    **{k: {"from": k} for k in ("prompt_ids", "prompt_mask", "response_ids", "response_mask",
                                "response_length", "logprob", "reward", "episode_id",
                                "policy_version", "step")},
    "advantage": {"from": "reward"}}}
TARGET = 2.0


def log_uniform(rng: np.random.Generator, low: int, high: int, size: int) -> np.ndarray:
    return np.exp(rng.uniform(np.log(low), np.log(high + 1), size)).astype(np.int64).clip(low, high)


def records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """`n` completions as step records with numpy arrays (what a sampler hands `write_steps`)."""
    rng = np.random.default_rng(seed)
    prompts = log_uniform(rng, 32, 256, n)
    responses = log_uniform(rng, 64, 1024, n)
    return [{"observation": {"token_ids": rng.integers(0, 50_000, p)},
             "action": rng.integers(0, 50_000, a),
             "logprob": -rng.random(a, dtype=np.float32), "reward": float(i % 2), "step": 0,
             "episode_id": f"c{i}", "terminated": True, "truncated": False,
             "policy_version": 7}
            for i, (p, a) in enumerate(zip(prompts.tolist(), responses.tolist()))]


def ours(path: Path, fmap: FieldMap) -> Any:
    return fmap.to_train_batch(read_steps(path, LLMStep))


def baseline(path: Path) -> dict[str, np.ndarray]:
    """The hand-written version: parse every line, then pad row by row."""
    with open(path, "rb") as f:
        rows = [orjson.loads(line) for line in f]
    b = len(rows)
    p = max(len(r["observation"]["token_ids"]) for r in rows)
    a = max(len(r["action"]) for r in rows)
    prompt_ids = np.zeros((b, p), np.int64)
    prompt_mask = np.zeros((b, p), bool)
    response_ids = np.zeros((b, a), np.int64)
    response_mask = np.zeros((b, a), bool)
    logprob = np.zeros((b, a), np.float32)
    length = np.zeros(b, np.int64)
    reward = np.zeros(b, np.float32)
    version = np.zeros(b, np.int64)
    for i, r in enumerate(rows):
        prompt = r["observation"]["token_ids"]
        n = len(r["action"])
        prompt_ids[i, p - len(prompt):] = prompt
        prompt_mask[i, p - len(prompt):] = True
        response_ids[i, :n] = r["action"]
        response_mask[i, :n] = True
        logprob[i, :n] = r["logprob"]
        length[i] = n
        reward[i] = r["reward"]
        version[i] = r["policy_version"]
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "response_ids": response_ids,
            "response_mask": response_mask, "logprob": logprob, "response_length": length,
            "reward": reward, "policy_version": version,
            "episode_id": np.array([r["episode_id"] for r in rows])}


def baseline_arrays(steps: list[Any]) -> dict[str, np.ndarray]:
    """The same padding loop on steps already read (numpy arrays): the collation floor."""
    b = len(steps)
    p = max(len(s.observation.token_ids) for s in steps)
    a = max(len(s.action) for s in steps)
    prompt_ids, prompt_mask = np.zeros((b, p), np.int64), np.zeros((b, p), bool)
    response_ids, response_mask = np.zeros((b, a), np.int64), np.zeros((b, a), bool)
    logprob = np.zeros((b, a), np.float32)
    for i, s in enumerate(steps):
        prompt, n = s.observation.token_ids, len(s.action)
        prompt_ids[i, p - len(prompt):] = prompt
        prompt_mask[i, p - len(prompt):] = True
        response_ids[i, :n] = s.action
        response_mask[i, :n] = True
        logprob[i, :n] = s.logprob
    return {"prompt_ids": prompt_ids, "response_ids": response_ids, "logprob": logprob,
            "prompt_mask": prompt_mask, "response_mask": response_mask}


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 completions, 3 rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    n, rounds = (1_000, 3) if args.quick else (args.completions, args.rounds)
    fmap = FieldMap.from_dict(TOKEN_MAP)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "completions.jsonl"
        write_steps(path, records(n))
        size = path.stat().st_size
        _, batch = timed(ours, path, fmap)        # warm up both, and check they agree
        _, plain = timed(baseline, path)
        for key, value in plain.items():
            assert np.array_equal(getattr(batch, key), value), key
        tokens = int(plain["prompt_mask"].sum() + plain["response_mask"].sum())
        ratios, mine, theirs = [], [], []
        for _ in range(rounds):
            t_ours, _ = timed(ours, path, fmap)
            t_base, _ = timed(baseline, path)
            mine.append(t_ours)
            theirs.append(t_base)
            ratios.append(t_ours / t_base)
        steps = list(read_steps(path, LLMStep))
        collate_ratios = []
        for _ in range(rounds):
            t_ours, _ = timed(fmap.collated, steps)
            t_base, _ = timed(baseline_arrays, steps)
            collate_ratios.append(t_ours / t_base)
    ratio = statistics.median(ratios)
    result = {"completions": n, "file_mib": round(size / 2**20, 1), "tokens": tokens,
              "batch": [int(d) for d in (*plain["prompt_ids"].shape, plain["response_ids"].shape[1])],
              "ours_s": statistics.median(mine), "baseline_s": statistics.median(theirs),
              "ratio": ratio, "ratios": ratios, "target": TARGET, "pass": ratio <= TARGET,
              "collate_ratio": statistics.median(collate_ratios)}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{n} completions, {result['file_mib']} MiB of JSON Lines, {tokens} tokens, "
          f"batch B={result['batch'][0]} P={result['batch'][1]} R={result['batch'][2]}")
    print(f"ours (read_steps + token map -> TokenBatch): {result['ours_s'] * 1e3:.0f} ms; "
          f"baseline (orjson loop + np.zeros + row slices): {result['baseline_s'] * 1e3:.0f} ms")
    print(f"ratio {ratio:.2f}x (rounds: {', '.join(f'{r:.2f}' for r in ratios)}); target <= "
          f"{TARGET:g}x: {'PASS' if result['pass'] else 'FAIL'}")
    print(f"collation alone (the map's collate_tokens on the steps read / the padding loop on their "
          f"arrays): {result['collate_ratio']:.2f}x (info)")


if __name__ == "__main__":
    main()
