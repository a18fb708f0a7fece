"""Packed token rows: every row's prompt + response concatenated into micro-batch rows of exactly
`S` tokens (the token budget), what flash-attention varlen kernels read (prime-rl, verl
`use_remove_padding`, OpenRLHF `packing_samples`, slime). docs/llm.md §4 "Packed rows".

`plan_packing(lengths, budget)` places the samples first-fit-decreasing: longest first (ties in
input order: the sort is stable), each into the first micro-batch row with room for all of it;
a sample is never split, so a sample longer than the budget cannot be placed (collation refuses
it first, naming it). Deterministic: the same lengths give the same rows.

`pack_columns(columns, plan)` lays the collated token rows (`collate_tokens`: `prompt_ids`
left-padded with `prompt_mask`, `response_ids` right-padded with `response_length`) out as
`[M, S]`: `input_ids` (each sample's prompt then response, `pad_id` after the last sample),
`position_ids` (0 at each sample's first token; the tail padding is one more run from 0),
`pad_mask` (True on real tokens), `sample_index` (the token row each token comes from, −1 on
padding); and per sample `[B]`: `sample_row`, `sample_start`, `sample_length` (where each sample
lies: its micro-batch row, first column and number of tokens). `ResponseTokens.scatter` puts a
per-response-token column `[B, R, ...]` (what the map's ops give: `per_token` advantages,
`logprob`, `kl`, `response_mask`) at its tokens' positions, 0 (False) elsewhere; a column held
as its real tokens alone (`tokenops.ResponseValues`: from a file, what the map only renames or
spreads by `per_token`) goes there as it is, with no `[B, R]` made or read.

Vectorised: one boolean selection per column gives every real token in sample order, one
`np.repeat` gives each token's destination, one assignment writes them; `position_ids` and
`sample_index` are one `np.repeat` each over the runs (samples and tails) in cell order. Only
the placement loops over samples in Python (one numpy search over the open rows per sample).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from gyre_contract.trainer import _collation as collation
from gyre_contract.trainer._tokenops import ResponseValues

PACKED_TOKEN_COLUMNS: tuple[str, ...] = ("input_ids", "position_ids", "pad_mask", "sample_index")
"""The `[M, S]` columns packing makes (a map renames them into the batch)."""
PACKED_SAMPLE_COLUMNS: tuple[str, ...] = ("sample_row", "sample_start", "sample_length")
"""The `[B]` columns packing makes: where each sample lies in the packed rows."""
PACKED_COLUMNS = PACKED_TOKEN_COLUMNS + PACKED_SAMPLE_COLUMNS
PARALLEL_CELLS = 1 << 22
"""`[B, R]` cells (all columns together) from which `ResponseTokens.scatter_all` runs on two
threads: below it, starting them costs more than it saves."""
_PACKED_CELL_BYTES = 8 + 8 + 8 + 1
"""Bytes per packed cell of the columns packing makes (input_ids, position_ids, sample_index,
pad_mask), for the size check before allocating."""


@dataclass(frozen=True)
class PackPlan:
    """Where each sample goes: micro-batch row and first column, in rows of `budget` tokens."""

    budget: int
    rows: int
    row: np.ndarray
    """`[B]` int64: the micro-batch row of each sample."""
    start: np.ndarray
    """`[B]` int64: the column of each sample's first token in its row."""
    length: np.ndarray
    """`[B]` int64: each sample's tokens (prompt + response)."""

    @property
    def used(self) -> np.ndarray:
        """`[M]` int64: the real tokens of each micro-batch row."""
        return np.bincount(self.row, weights=self.length, minlength=self.rows).astype(np.int64)

    @property
    def fill(self) -> float:
        """Real tokens over the packed cells: tokens / (rows × budget)."""
        cells = self.rows * self.budget
        return float(self.length.sum()) / cells if cells else 0.0


def plan_packing(lengths: Any, budget: int) -> PackPlan:
    """First-fit-decreasing placement of samples of `lengths` tokens (each 1..`budget`) into
    rows of `budget` tokens; ties keep input order. ValueError on a length out of range (the
    collation refuses such a sample first, naming it)."""
    length = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if length.size and (length.min() < 1 or length.max() > budget):
        raise ValueError(f"every sample must hold 1..{budget} tokens (the token budget), got "
                         f"{int(length.min())}..{int(length.max())}")
    n = length.size
    order = np.argsort(-length, kind="stable")
    room = np.empty(n, np.int64)  # the room left in each open row: at most one row per sample
    row = np.empty(n, np.int64)
    start = np.empty(n, np.int64)
    rows = 0
    for i, size in zip(order.tolist(), length[order].tolist(), strict=True):
        at = int((room[:rows] >= size).argmax()) if rows else 0  # the method: no wrapper
        if not rows or room[at] < size:
            at, rows = rows, rows + 1
            room[at] = budget
        row[i] = at
        start[i] = budget - room[at]
        room[at] -= size
    return PackPlan(budget, rows, row, start, length)


def destinations(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The flat cell of every token of samples of `lengths` tokens placed at flat `starts`, in
    sample order: one `arange` and one `repeat` (token t of sample i: starts[i] + t)."""
    out = np.arange(int(lengths.sum()), dtype=np.int64)
    out += np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return out


class ResponseTokens:
    """The packed positions of every real response token, in sample order: where a per-token
    column `[B, R, ...]` of the token rows goes."""

    def __init__(self, columns: Mapping[str, Any]) -> None:
        length = np.asarray(columns["response_length"], dtype=np.int64)
        mask = columns["response_mask"]
        width = mask.width if isinstance(mask, ResponseValues) else int(np.shape(mask)[1])
        self.rows = len(length)
        self.width = width
        self.length = length
        budget = int(np.shape(columns["input_ids"])[1])
        start = np.asarray(columns["sample_row"]) * budget + columns["sample_start"]
        prompt = np.asarray(columns["sample_length"]) - length
        self.cells = int(np.size(columns["input_ids"]))
        self.shape = tuple(np.shape(columns["input_ids"]))
        self.where = destinations(start + prompt, length)

    @cached_property
    def real(self) -> np.ndarray:
        """`[B, R]` bool: the real response tokens of the padded rows."""
        return np.arange(self.width) < self.length[:, None]

    def fits(self, value: Any) -> bool:
        """Whether `value` is a per-response-token column of these rows (`[B, R, ...]`, or its
        real tokens alone: `ResponseValues`)."""
        if isinstance(value, ResponseValues):
            return value.lengths.size == self.rows and value.width == self.width
        shape = np.shape(value)
        return len(shape) >= 2 and shape[:2] == (self.rows, self.width)

    def scatter(self, value: Any) -> np.ndarray:
        """`value` `[B, R, ...]` at its tokens' packed positions `[M, S, ...]`, 0 elsewhere."""
        return self.scatter_all([value])[0]

    def scatter_all(self, values: list[Any]) -> list[np.ndarray]:
        """`scatter` of each of `values`; many large ones on two threads at once (numpy's
        selection and assignment run without the GIL; each writes its own array)."""
        # a padded column's real tokens are selected; `ResponseValues` holds only them
        flat = [isinstance(v, ResponseValues) for v in values]
        arrays = [v.values if f else np.asarray(v) for v, f in zip(values, flat)]
        outs = [np.zeros((self.cells, *a.shape[1 if f else 2:]), a.dtype)
                for a, f in zip(arrays, flat)]

        def run(i: int) -> None:
            outs[i][self.where] = arrays[i] if flat[i] else arrays[i][self.real]

        if len(arrays) < 2 or self.rows * self.width * len(arrays) < PARALLEL_CELLS:
            for i in range(len(arrays)):
                run(i)
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(2, thread_name_prefix="gyre-pack") as pool:
                for future in [pool.submit(run, i) for i in range(len(arrays))]:
                    future.result()
        return [out.reshape(self.shape + out.shape[1:]) for out in outs]


def pack_columns(columns: Mapping[str, Any], budget: int, *, pad_id: int = 0,
                 max_bytes: int | None = None,
                 flats: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The packed columns (`PACKED_COLUMNS`) of collated token rows, every row placed by
    `plan_packing`. Raises `BatchTooLargeError` when the packed rows would exceed `max_bytes`
    (default `collation.MAX_BATCH_BYTES`). `flats`: the real tokens of `prompt_ids` and
    `response_ids` in row order, when the collation kept them (else they are selected from
    the padded arrays)."""
    flats = flats or {}
    prompt_mask = np.asarray(columns["prompt_mask"])
    prompt = prompt_mask.sum(axis=1, dtype=np.int64)
    response = np.asarray(columns["response_length"], dtype=np.int64)
    plan = plan_packing(prompt + response, budget)
    _check_size(plan, max_bytes)
    cells = plan.rows * budget
    first = plan.row * budget + plan.start
    ids = np.zeros(cells, np.int64) if pad_id == 0 else np.full(cells, pad_id, np.int64)
    prompt_ids = flats.get("prompt_ids")
    ids[destinations(first, prompt)] = np.asarray(columns["prompt_ids"])[prompt_mask] \
        if prompt_ids is None else prompt_ids
    response_ids = flats.get("response_ids")
    if response_ids is None:
        real = np.arange(np.shape(columns["response_ids"])[1]) < response[:, None]
        response_ids = np.asarray(columns["response_ids"])[real]
    ids[destinations(first + prompt, response)] = response_ids
    used = plan.used
    tails = (np.arange(plan.rows) * budget + used)[used < budget]
    # the runs (each sample, each row's tail padding) tile the rows end to end: in cell order,
    # one `np.repeat` of each run's label (its sample, or -1) and of its first cell
    starts = np.concatenate([first, tails])
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    labels = np.concatenate([np.arange(first.size), np.full(tails.size, -1)])[order]
    runs = np.diff(starts, append=cells)
    sample_index = np.repeat(labels, runs)
    position = np.arange(cells, dtype=np.int64)
    position -= np.repeat(starts, runs)
    shape = (plan.rows, budget)
    return {"input_ids": ids.reshape(shape), "position_ids": position.reshape(shape),
            "pad_mask": (sample_index >= 0).reshape(shape),
            "sample_index": sample_index.reshape(shape),
            "sample_row": plan.row, "sample_start": plan.start, "sample_length": plan.length}


def _check_size(plan: PackPlan, max_bytes: int | None) -> None:
    limit = collation.MAX_BATCH_BYTES if max_bytes is None else max_bytes
    size = plan.rows * plan.budget * _PACKED_CELL_BYTES
    if size > limit:
        raise collation.BatchTooLargeError(
            f"packed token batch [M={plan.rows}, S={plan.budget}] would take "
            f"{collation.bytes_text(size)} ({plan.fill:.0%} of it real tokens), more than "
            f"MAX_BATCH_BYTES = {collation.bytes_text(limit)}; a smaller token_budget, or fewer "
            f"rows per batch")
