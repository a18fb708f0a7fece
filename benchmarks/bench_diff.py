"""Diff cost as a ratio to a plain read-and-compare of the same two schemas, measured in one run.

The case the old test `test_five_hundred_fields_diff_well_under_100_ms` timed: two schemas of 500
fields each (`[3]` number arrays), half the names shared. `diff` checks both documents (strict
JSON, local `$ref`s only, limits), walks them into field tables and sorts every field into a
tier. The floor is the least any tool pays for the same question: parse both documents from
their JSON text and compare their properties by name with `==` (no dtype, shape or role).
Also timed: the contract's own step schema against its batch schema. Wall time depends on the
machine and its load, so the figure to compare is the ratio; tests assert tiers, never time.

Run: python benchmarks/bench_diff.py [--repeat 15] [--number 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gyre_contract.schema._diffing import diff

ROOT = Path(__file__).resolve().parent.parent
STEP = ROOT / "schemas" / "rollout_step.v1.json"
BATCH = ROOT / "schemas" / "train_batch.v1.json"
FIELDS = 500


def wide_schemas(n: int = FIELDS) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two object schemas of `n` fields; the odd-numbered fields of the second are renamed."""
    props = {f"f{i}": {"type": "array", "items": {"type": "number"}, "minItems": 3,
                       "maxItems": 3} for i in range(n)}
    other = {(f"obs_{i}" if i % 2 else f"f{i}"): v for i, v in enumerate(props.values())}
    return ({"type": "object", "properties": props},
            {"type": "object", "properties": other})


def timed_ms(stmt: Callable[[], object], number: int) -> float:
    """Time of one call of `stmt`, in milliseconds, averaged over `number` calls."""
    return timeit.timeit(stmt, number=number) / number * 1e3


def measure(name: str, sampler: Any, trainer: Any, repeat: int, number: int) -> dict[str, Any]:
    """Time `diff(sampler, trainer)` and the floor on the same two documents, alternating the
    two in every round so both see the same load; the best round of each is kept."""
    texts = [Path(d).read_text() if isinstance(d, Path) else json.dumps(d)
             for d in (sampler, trainer)]
    diff(sampler, trainer)  # warm up: imports and first-use caches are not the steady cost

    def run_diff() -> None:
        diff(sampler, trainer)

    def floor() -> None:
        a, b = (json.loads(text)["properties"] for text in texts)
        _ = {name: a[name] == b.get(name) for name in a}, [name for name in b if name not in a]

    diffs: list[float] = []
    floors: list[float] = []
    for _ in range(repeat):
        diffs.append(timed_ms(run_diff, number))
        floors.append(timed_ms(floor, number * 10))
    return {"case": name, "diff_ms": round(min(diffs), 3),
            "diff_median_ms": round(statistics.median(diffs), 3),
            "floor_ms": round(min(floors), 3), "floor_median_ms": round(statistics.median(floors), 3),
            "ratio": round(min(diffs) / min(floors), 1),
            "counts": diff(sampler, trainer).counts()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--number", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    wide_a, wide_b = wide_schemas()
    results = [measure(f"{FIELDS} fields vs {FIELDS} fields", wide_a, wide_b, args.repeat,
                       args.number),
               measure("rollout_step.v1 vs train_batch.v1", STEP, BATCH, args.repeat, args.number)]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for r in results:
        print(f"{r['case']}: diff {r['diff_ms']:.2f} ms (median {r['diff_median_ms']:.2f}), "
              f"read-and-compare floor {r['floor_ms']:.2f} ms (median {r['floor_median_ms']:.2f}), "
              f"ratio {r['ratio']:.1f}x; tiers {r['counts']}")


if __name__ == "__main__":
    main()
