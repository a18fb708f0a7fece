"""Files and batches without `--model`, as ratios to hand-written baselines in the same process.

Figures (targets in brackets):
- `validate` of a CartPole JSON Lines file against the unpinned `RolloutStep` / an
  `orjson.loads` loop over its lines [<= 2x];
- `batch FILE --map examples/cartpole_map.json` (`half_way`, no model) / a hand-written
  `pyarrow.json.read_json` + numpy padding + GAE of the same fields [<= 1.5x];
- Parquet -> TrainBatch (`half_way` on the Parquet twin) / `pq.read_table` + the same numpy
  [<= 1.5x];
- `validate` of the Parquet twin / `validate` of the JSON Lines file (same steps) [<= 1.2x];
- peak RSS (`VmHWM`) of a fresh process validating `--rss-lines` lines / one validating
  100,000 lines [<= 1.25x].

Ours and the baseline alternate (ours, baseline, ours, ...); a figure is the median of the
per-round ratios (a load spike on a shared machine hits both sides of a round). The corpus is
`benchmarks/corpus.py`'s (real CartPole-v1 episodes, 8 to 200 steps, cached) when it is there,
else the generator below (geometric lengths, 9 to 200 steps).

    python benchmarks/bench_files.py --quick      # 200k lines, 3 rounds
    python benchmarks/bench_files.py              # 1M lines for validate, 200k for batches
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parent.parent
MAP = ROOT / "examples" / "cartpole_map.json"


def cartpole_file(path: Path, lines: int, seed: int = 0) -> None:
    """CartPole-like steps: episodes of 9..200 steps (geometric, capped at 200 = truncated)."""
    rng = np.random.default_rng(seed)
    out, e, n = open(path, "wb"), 0, 0
    with out:
        while n < lines:
            length = int(min(200, max(9, rng.geometric(1 / 25) + 8)))
            length = min(length, lines - n)
            obs = rng.standard_normal((length, 4)).round(4)
            for t in range(length):
                last = t == length - 1
                record = {"observation": obs[t].tolist(), "action": int(rng.integers(2)),
                          "logprob": -round(float(rng.random()), 4) - 0.01,
                          "value": round(float(rng.standard_normal()), 3), "reward": 1.0,
                          "step": t, "episode_id": f"ep-{e}",
                          "terminated": last and length < 200 and n + length < lines,
                          "truncated": last and not (length < 200 and n + length < lines),
                          "policy_version": e // 50}
                if record["truncated"]:
                    record["next_value"] = 0.5
                out.write(orjson.dumps(record) + b"\n")
            n += length
            e += 1


def corpus_file(folder: Path, lines: int, fmt: str = "jsonl") -> Path:
    """The realistic corpus (`benchmarks/corpus.py`: real CartPole episodes, cached) when it
    is there, else a file of the generator above (written to `folder`)."""
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from corpus import cartpole_corpus  # type: ignore[import-not-found]
    except ImportError:
        cartpole_corpus = None
    if cartpole_corpus is not None:
        return Path(cartpole_corpus(lines, fmt))
    path = folder / f"cartpole-{lines}.jsonl"
    if not path.exists():
        cartpole_file(path, lines)
    if fmt == "parquet":
        twin = path.with_suffix(".parquet")
        parquet_twin(path, twin)
        return twin
    return path


def parquet_twin(jsonl: Path, target: Path) -> None:
    from gyre_contract.io._parquet import write_parquet
    from gyre_contract.pinned import CartPoleStep

    with open(jsonl, "rb") as f:
        write_parquet(target, (orjson.loads(line) for line in f), CartPoleStep)


# -- baselines -----------------------------------------------------------------------------

def orjson_loop(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        for line in f:
            orjson.loads(line)
            n += 1
    return n


def batch_from_table(table: Any, gamma: float = 0.99, lam: float = 0.95) -> dict[str, Any]:
    """What a careful engineer writes by hand: dictionary-encode ids, scatter into [B, T],
    GAE over rows with a loop over time."""
    import pyarrow.compute as pc

    ids = pc.dictionary_encode(table.column("episode_id")).combine_chunks()
    code, step = ids.indices.to_numpy(), table.column("step").to_numpy()
    lengths = np.bincount(code, minlength=len(ids.dictionary))
    b, t = len(lengths), int(lengths.max())

    def pad(values: np.ndarray) -> np.ndarray:
        out = np.zeros((b, t, *values.shape[1:]), values.dtype)
        out[code, step] = values
        return out

    obs = table.column("observation").combine_chunks().flatten().to_numpy()
    batch = {"obs": pad(obs.reshape(len(code), -1)),
             "action": pad(table.column("action").to_numpy()),
             "logprob": pad(table.column("logprob").to_numpy().astype(np.float32)),
             "terminated": pad(table.column("terminated").to_numpy(zero_copy_only=False)),
             "truncated": pad(table.column("truncated").to_numpy(zero_copy_only=False))}
    reward = pad(table.column("reward").to_numpy().astype(np.float32))
    value = pad(table.column("value").to_numpy().astype(np.float32))
    mask = np.arange(t)[None, :] < lengths[:, None]
    bootstrap = np.zeros(b)
    recorded = table.column("next_value").to_numpy(zero_copy_only=False).astype(np.float64)
    known = ~np.isnan(recorded)
    bootstrap[code[known]] = recorded[known]
    v_next = np.zeros((b, t))
    v_next[:, :-1] = value[:, 1:]
    v_next[np.arange(b), lengths - 1] = bootstrap
    v_next[batch["terminated"]] = 0.0
    delta = np.where(mask, reward + gamma * v_next - value, 0.0)
    adv, running = np.zeros((b, t)), np.zeros(b)
    for i in range(t - 1, -1, -1):
        running = np.where(mask[:, i], delta[:, i] + gamma * lam * running, 0.0)
        adv[:, i] = running
    batch.update(reward=reward, value=value, mask=mask, advantage=adv.astype(np.float32),
                 done=batch["terminated"] | batch["truncated"],
                 **{"return": (adv + value).astype(np.float32)})
    return batch


def hand_jsonl(path: Path) -> dict[str, Any]:
    import pyarrow.json as pj

    return batch_from_table(pj.read_json(path))


def hand_parquet(path: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    return batch_from_table(pq.read_table(path))


# -- ours ----------------------------------------------------------------------------------

def validate(path: Path) -> Any:
    from gyre_contract.io._validation import validate_file

    report = validate_file(path)
    assert report.ok, report.to_text()
    return report


def batch(path: Path) -> Any:
    from gyre_contract.harness._stages import half_way

    return half_way(path, MAP)


def rounds(ours: Callable[[], Any], base: Callable[[], Any], n: int) -> dict[str, float]:
    ratios, a, b = [], [], []
    for _ in range(n):
        t0 = time.perf_counter()
        ours()
        t1 = time.perf_counter()
        base()
        t2 = time.perf_counter()
        a.append(t1 - t0)
        b.append(t2 - t1)
        ratios.append((t1 - t0) / (t2 - t1))
    return {"ratio": statistics.median(ratios), "ours_s": statistics.median(a),
            "baseline_s": statistics.median(b)}


def peak_rss(path: Path) -> int:
    """VmHWM (kB) of a fresh process validating `path`."""
    code = ("import sys; from gyre_contract.io._validation import validate_file; "
            "assert validate_file(sys.argv[1]).ok; "
            "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         env={**os.environ})
    if out.returncode:
        raise RuntimeError(out.stderr)
    return int(out.stdout.strip())


class Figures(dict):
    """Figures by name, each printed as soon as it is measured."""

    def __setitem__(self, name: str, f: dict[str, Any]) -> None:
        super().__setitem__(name, f)
        verdict = "PASS" if f["ratio"] <= f["target"] else "FAIL"
        ours = f"{f['ours_s']:.2f} s" if "ours_s" in f else f"{f['ours_kb'] / 1024:.0f} MB"
        base = f"{f['baseline_s']:.2f} s" if "baseline_s" in f else \
            f"{f['baseline_kb'] / 1024:.0f} MB"
        print(f"{name:36s} {f['ratio']:6.2f}x  <= {f['target']}  {verdict}  "
              f"ours {ours}, baseline {base} ({f['lines']:,} lines)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--validate-lines", type=int)
    parser.add_argument("--batch-lines", type=int, default=200_000)
    parser.add_argument("--rss-lines", type=int, default=2_000_000)
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    args = parser.parse_args()
    n_rounds = args.rounds or (3 if args.quick else 5)
    big = args.validate_lines or (200_000 if args.quick else 1_000_000)
    figures: dict[str, Any] = Figures()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        small = corpus_file(folder, args.batch_lines)
        large = corpus_file(folder, big)
        twin = corpus_file(folder, args.batch_lines, "parquet")
        validate(small), batch(small), hand_jsonl(small), hand_parquet(twin)  # imports, caches
        figures["validate_jsonl_vs_orjson"] = dict(
            rounds(lambda: validate(large), lambda: orjson_loop(large), n_rounds),
            lines=big, target=2.0)
        figures["batch_jsonl_vs_pyarrow_numpy"] = dict(
            rounds(lambda: batch(small), lambda: hand_jsonl(small), n_rounds),
            lines=args.batch_lines, target=1.5)
        figures["batch_parquet_vs_read_table_numpy"] = dict(
            rounds(lambda: batch(twin), lambda: hand_parquet(twin), n_rounds),
            lines=args.batch_lines, target=1.5)
        figures["validate_parquet_vs_jsonl"] = dict(
            rounds(lambda: validate(twin), lambda: validate(small), n_rounds),
            lines=args.batch_lines, target=1.2)
        if not args.quick:
            base, long = corpus_file(folder, 100_000), corpus_file(folder, args.rss_lines)
            kb_small, kb_large = peak_rss(base), peak_rss(long)
            figures["rss_validate"] = {"ratio": kb_large / kb_small, "ours_kb": kb_large,
                                       "baseline_kb": kb_small, "lines": args.rss_lines,
                                       "target": 1.25}
    failed = any(f["ratio"] > f["target"] for f in figures.values())
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
