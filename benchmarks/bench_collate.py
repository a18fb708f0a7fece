"""Collation cost as a ratio to a plain copy of the same bytes, measured in the same process.

256 episodes x U[100, 200] steps x 64 float32, held as one [L, 64] array per episode (how
`read_episodes` delivers them). The floor is `np.copyto` into a preallocated buffer of the padded
batch's size ([256, 200, 64] float32, 13.1 MB); a second floor copies only the ragged payload.
Goal: collate <= 3x the padded-size copy. Run: python benchmarks/bench_collate.py

`--jsonl` measures the end-to-end path instead: a CartPole-like JSON Lines file -> read_episodes ->
FieldMap (examples/cartpole_map.json) -> validated TrainBatch, as a ratio to an `orjson.loads`
per-line loop over the same file (the parse floor, see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import timeit
from pathlib import Path

import numpy as np
import orjson

from gyre_contract.io._episodes import Episode
from gyre_contract.io._reading import read_episodes
from gyre_contract.io._writer import write_steps
from gyre_contract.trainer._collation import collate
from gyre_contract.trainer._fieldmap import FieldMap

EXAMPLE_MAP = Path(__file__).resolve().parent.parent / "examples" / "cartpole_map.json"

B, T_MAX, T_MIN, D = 256, 200, 100, 64


def episodes(seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate(rng.integers(T_MIN, T_MAX + 1, size=B)):
        out.append({"observation": rng.standard_normal((n, D), dtype=np.float32),
                    "episode_id": np.array([f"ep-{i}"] * n)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--number", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--jsonl", action="store_true",
                        help="measure JSON Lines file -> validated TrainBatch instead")
    args = parser.parse_args()
    if args.jsonl:
        end_to_end(args)
        return

    eps = [Episode(str(e["episode_id"][0]), e) for e in episodes()]
    lengths = np.array([len(e.columns["observation"]) for e in eps])
    t_max = int(lengths.max())
    padded_src = np.random.default_rng(1).standard_normal((B, t_max, D), dtype=np.float32)
    padded_dst = np.empty_like(padded_src)
    payload = int(lengths.sum()) * D
    ragged_src = padded_src.reshape(-1)[:payload].copy()
    ragged_dst = np.empty_like(ragged_src)
    fields = ["observation"]

    out = collate(eps, fields=fields)
    assert out["observation"].shape == (B, t_max, D) and out["observation"].dtype == np.float32

    collate_s, padded_s, ragged_s, ratios = [], [], [], []
    for _ in range(args.repeat):  # interleaved, so machine noise hits both sides alike
        c = timeit.timeit(lambda: collate(eps, fields=fields), number=args.number) / args.number
        p = timeit.timeit(lambda: np.copyto(padded_dst, padded_src), number=args.number)
        r = timeit.timeit(lambda: np.copyto(ragged_dst, ragged_src), number=args.number)
        collate_s.append(c)
        padded_s.append(p / args.number)
        ragged_s.append(r / args.number)
        ratios.append(c / (p / args.number))
    med = statistics.median
    result = {
        "episodes": B, "steps": int(lengths.sum()), "dim": D, "t_max": t_max,
        "padded_mb": padded_src.nbytes / 1e6, "payload_mb": ragged_src.nbytes / 1e6,
        "collate_ms": med(collate_s) * 1e3, "copy_padded_ms": med(padded_s) * 1e3,
        "copy_payload_ms": med(ragged_s) * 1e3,
        "ratio_to_padded_copy": med(ratios),
        "ratio_to_padded_copy_best": min(collate_s) / min(padded_s),
        "ratio_to_payload_copy": med(collate_s) / med(ragged_s),
        "goal": "ratio_to_padded_copy <= 3",
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"collate {B} episodes x U[{T_MIN},{T_MAX}] steps x {D} float32 "
          f"({result['steps']} steps, padded {result['padded_mb']:.1f} MB)")
    print(f"  collate            {result['collate_ms']:.3f} ms")
    print(f"  np.copyto padded   {result['copy_padded_ms']:.3f} ms "
          f"-> ratio {result['ratio_to_padded_copy']:.2f}x median of interleaved pairs, "
          f"{result['ratio_to_padded_copy_best']:.2f}x best vs best (goal <= 3x)")
    print(f"  np.copyto payload  {result['copy_payload_ms']:.3f} ms "
          f"-> ratio {result['ratio_to_payload_copy']:.2f}x")


def write_cartpole_like(path: Path, seed: int = 0) -> int:
    """256 episodes of U[100, 200] CartPole-like steps; the last step terminated or truncated."""
    rng = np.random.default_rng(seed)
    steps = []
    for i, n in enumerate(rng.integers(T_MIN, T_MAX + 1, size=B)):
        truncated = bool(i % 2)
        obs = rng.standard_normal((n, 4), dtype=np.float32).tolist()
        values = rng.standard_normal(n, dtype=np.float32).tolist()
        for t in range(n):
            last = t == n - 1
            rec = {"observation": obs[t], "action": int(t % 2), "logprob": -0.6931,
                   "value": values[t], "reward": 1.0, "step": t, "episode_id": f"ep-{i}",
                   "terminated": last and not truncated, "truncated": last and truncated,
                   "policy_version": 0}
            if last and truncated:
                rec["next_value"] = 0.5
            steps.append(rec)
    return write_steps(path, steps)


def end_to_end(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rollouts.jsonl"
        lines = write_cartpole_like(path)
        fmap = FieldMap.load(EXAMPLE_MAP)

        def floor() -> None:
            with open(path, "rb") as f:
                for line in f:
                    orjson.loads(line)

        def ours() -> None:
            fmap.to_train_batch(read_episodes(path))

        ours()
        ours_s, floor_s, ratios = [], [], []
        for _ in range(max(3, args.repeat // 3)):
            o = timeit.timeit(ours, number=1)
            f = timeit.timeit(floor, number=1)
            ours_s.append(o)
            floor_s.append(f)
            ratios.append(o / f)
        med = statistics.median
        result = {"lines": lines, "bytes": path.stat().st_size, "to_train_batch_s": med(ours_s),
                  "orjson_loop_s": med(floor_s), "ratio_to_orjson_loop": med(ratios)}
    if args.json:
        print(json.dumps(result))
        return
    print(f"JSON Lines -> validated TrainBatch, {lines} steps ({result['bytes'] / 1e6:.1f} MB)")
    print(f"  read_episodes + FieldMap.to_train_batch  {result['to_train_batch_s'] * 1e3:.1f} ms")
    print(f"  orjson.loads per line                    {result['orjson_loop_s'] * 1e3:.1f} ms "
          f"-> ratio {result['ratio_to_orjson_loop']:.1f}x")


if __name__ == "__main__":
    main()
