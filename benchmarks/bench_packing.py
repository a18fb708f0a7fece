"""Packing token rows into micro-batch rows of a token budget, as a ratio to a vectorised numpy
baseline; and the packing's fill ratio.

10,000 single-turn completions, prompts 32-256 and responses 64-1,024 tokens (log-uniform, the
corpus of bench_tokens.py), in groups of 8. Both sides start from the same token rows: the
collated columns (`collate_tokens`: `prompt_ids` left-padded, `response_ids` right-padded) and
the map's per-token results `[B, R]` (`advantages`: group_norm then per_token; `logprobs`;
`loss_mask` from `response_mask`). Both give the same arrays, checked before anything is timed:
`input_ids`, `position_ids`, `pad_mask`, `sample_index` and the three per-token fields `[M, S]`.

- Ours: what `PackedRows` adds to the padded rows — `pack_columns` (the first-fit-decreasing
  plan, then the layout's own columns), then `PackedRows.arrange` (each `[B, R]` result at its
  tokens' positions).
- Baseline: the numpy a competent engineer writes for the same output, independently: the same
  first-fit-decreasing placement (a stable argsort by length, then one `np.argmax` over the open
  rows per sample: there is no vectorised first fit), then the tokens in one concatenation of
  the prompt and response halves selected by one boolean mask (sample order), each token's
  destination by index arithmetic (`np.repeat` of each sample's first cell plus its offset), one
  scatter per array; positions from the offsets, the tail padding's from its column.

Interleaved rounds (ours, baseline, ours, ...), the ratio is the median of the per-round ratios
(`measure.interleaved`), with the load and the cores other processes keep busy at the start and
the end. Target: <= 1.2x. Fill (tokens / (rows x budget)) is reported for budgets of 2,048, 4,096
(the timed one) and 8,192 tokens. A second figure (information): `FieldMap.batch` of the records
into the packed batch against the padded one (the same map's ops, validated), the cost of
packing in the whole path.

Run: python benchmarks/bench_packing.py            (10,000 completions, 7 rounds)
     python benchmarks/bench_packing.py --quick    (1,000 completions, 3 rounds)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
for _p in (str(HERE.parent), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from baselines import first_fit_decreasing  # noqa: E402
from bench_tokens import records  # noqa: E402
from measure import Figure, interleaved  # noqa: E402

from gyre_contract.trainer._fieldmap import FieldMap  # noqa: E402
from gyre_contract.trainer._layouts import PackedRows  # noqa: E402
from gyre_contract.trainer._packing import PACKED_TOKEN_COLUMNS, pack_columns, plan_packing  # noqa: E402

BUDGET = 4096
TARGET = "<= 1.2"
GROUP = 8
ROW_FIELDS = {"advantages": {"op": "group_norm", "from": ["reward", "group_id"],
                             "then": [{"op": "per_token"}]},
              "logprobs": {"from": "logprob"}, "loss_mask": {"from": "response_mask"},
              "episode_id": {"from": "episode_id"},
              "policy_version": {"from": "policy_version"}}
PER_TOKEN = ("advantages", "logprobs", "loss_mask")


def corpus(n: int) -> list[dict[str, Any]]:
    """The completions of bench_tokens.py, in groups of `GROUP` (one reward each)."""
    out = records(n)
    for i, r in enumerate(out):
        r["group_id"] = f"g{i // GROUP}"
        r["reward"] = float((i * 7) % 5) / 4
    return out


def maps(budget: int) -> tuple[FieldMap, FieldMap, FieldMap]:
    """The map of the rows both sides pack (the token rows and the ops' `[B, R]` results, not
    validated), the padded `TokenBatch` map and the packed one of the whole-path figure."""
    rows = FieldMap.from_dict({"gyre_field_map": 1, "rows": "step", "fields": {
        **ROW_FIELDS, **{k: {"from": k} for k in ("prompt_ids", "prompt_mask", "response_ids",
                                                  "response_length")}}})
    padded = FieldMap.from_dict({"gyre_field_map": 1, "rows": "step", "fields": {
        **{k: {"from": k} for k in ("prompt_ids", "prompt_mask", "response_ids",
                                    "response_mask", "response_length", "logprob", "reward",
                                    "episode_id", "policy_version", "step")},
        "advantage": ROW_FIELDS["advantages"]}})
    packed = FieldMap.from_dict({"gyre_field_map": 1, "rows": "step", "layout": "packed",
                                 "token_budget": budget, "fields": {
                                     **ROW_FIELDS,
                                     **{k: {"from": k} for k in PACKED_TOKEN_COLUMNS}}})
    return rows, padded, packed


# -- ours: what the packed layout adds to the padded rows ------------------------------------------

def ours(rows: dict[str, np.ndarray], budget: int) -> dict[str, np.ndarray]:
    columns = dict(rows)
    columns.update(pack_columns(columns, budget))
    built = {**{k: columns[k] for k in PACKED_TOKEN_COLUMNS},
             **{k: rows[k] for k in PER_TOKEN}}
    reads = {**{k: (k,) for k in PACKED_TOKEN_COLUMNS},
             **{k: ("response_mask",) for k in PER_TOKEN}}
    return PackedRows(token_budget=budget).arrange(built, columns, reads)


# -- the baseline: vectorised numpy, written for this output ----------------------------------------

def baseline(rows: dict[str, np.ndarray], budget: int) -> dict[str, np.ndarray]:
    prompt_mask = rows["prompt_mask"]
    response_length = rows["response_length"]
    prompt = prompt_mask.sum(axis=1)
    length = prompt + response_length
    row, col, m = first_fit_decreasing(length, budget)
    cells = m * budget
    response_real = np.arange(rows["response_ids"].shape[1]) < response_length[:, None]
    real = np.concatenate([prompt_mask, response_real], axis=1)
    tokens = np.concatenate([rows["prompt_ids"], rows["response_ids"]], axis=1)[real]
    sample = np.repeat(np.arange(length.size), length)
    offset = np.arange(tokens.size) - np.repeat(np.cumsum(length) - length, length)
    dest = (row * budget + col)[sample] + offset
    out: dict[str, np.ndarray] = {}
    ids = np.zeros(cells, np.int64)
    ids[dest] = tokens
    index = np.full(cells, -1, np.int64)
    index[dest] = sample
    used = np.bincount(row, weights=length, minlength=m).astype(np.int64)
    column = np.tile(np.arange(budget), m)
    position = column - np.repeat(used, budget)  # the tail: a run from 0 after the last sample
    position[dest] = offset
    out["input_ids"], out["position_ids"] = ids, position
    out["pad_mask"], out["sample_index"] = index >= 0, index
    response_dest = dest[offset >= prompt[sample]]
    for key in PER_TOKEN:
        value = rows[key]
        packed = np.zeros(cells, value.dtype)
        packed[response_dest] = value[response_real]
        out[key] = packed
    return {k: v.reshape(m, budget) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="1,000 completions, 3 rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    n, rounds = (1_000, 3) if args.quick else (args.completions, args.rounds)
    steps = corpus(n)
    row_map, padded, packed = maps(BUDGET)
    rows = row_map.build(steps)  # the token rows and the ops' [B, R] results, as both start
    rows["response_mask"] = rows["loss_mask"]
    mine, theirs = ours(rows, BUDGET), baseline(rows, BUDGET)
    assert sorted(mine) == sorted(theirs)
    for key, value in theirs.items():
        assert mine[key].dtype == value.dtype and np.array_equal(mine[key], value), key
    lengths = rows["prompt_mask"].sum(axis=1) + rows["response_length"]
    fill = {budget: plan_packing(lengths, budget).fill for budget in (2048, 4096, 8192)}
    figure = interleaved(f"pack {n:,} completions into rows of {BUDGET} tokens",
                         lambda: ours(rows, BUDGET), lambda: baseline(rows, BUDGET),
                         "numpy: first-fit-decreasing + one concatenation + index scatter",
                         target=TARGET, rounds=rounds)
    whole = interleaved(f"FieldMap.batch {n:,} completions, packed / padded",
                        lambda: packed.batch(steps), lambda: padded.batch(steps),
                        "the same map, padded rows (information)", rounds=max(3, rounds // 2))
    result = {"completions": n, "tokens": int(lengths.sum()),
              "rows": int(mine["input_ids"].shape[0]), "budget": BUDGET,
              "fill": {str(k): round(v, 4) for k, v in fill.items()},
              "figures": [f.as_dict() for f in (figure, whole)]}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{n:,} completions, {result['tokens']:,} tokens; packed into {result['rows']:,} rows "
          f"of {BUDGET} tokens")
    print("fill (tokens / (rows x budget)): " + ", ".join(
        f"S={k}: {v:.2%}" for k, v in fill.items()))
    for f in (figure, whole):
        print(_line(f))
    if figure.ok is False:
        raise SystemExit(1)


def _line(f: Figure) -> str:
    spread = f"({f.spread[0]:.2f}-{f.spread[1]:.2f})" if f.spread else ""
    return (f"{f.name}: ours {f.ours * 1e3:.0f} ms, baseline {f.base * 1e3:.0f} ms "
            f"({f.base_name}): {f.ratio:.2f}x {spread}, target {f.target or '-'}: "
            f"{f.verdict()}; load {f.load_start:.1f}-{f.load_end:.1f}, cores busy with others "
            f"{f.others:.1f}, free {f.free_cores:.1f} of {f.cores}, {f.rounds} rounds")


if __name__ == "__main__":
    main()
