"""A file of ragged token lists as columns over its steps, for token rows built without objects.

Why: a map of token rows (`trainer._layouts.TokenRows`) lays every step out as one row of
`[B, P]` / `[B, R]` arrays; read as step objects (`read_steps`), a file of 10,000 completions
makes and validates one object per step and one array per token list, only for collation to
concatenate them again. `read_token_columns` checks the file with the same loop as `read_steps`
(`checking.StepChecker`, raising on the first problem with its line) and keeps each block
checked on its columns (`raggedcols`) as it is: a list field as its values one after another
and each step's length (`raggedcols.Ragged`), every other field as one array over the steps
(steps checked one by one are put into the same form, a chunk at a time).

The result holds what the step objects would give collation, field by field (`trainer._tokens
.collate_token_columns` takes it): a column some steps lack is a list with None on them (its
lists as arrays), as the objects' attributes are. None when the model has no ragged plan (the
caller reads steps).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel

from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import RolloutStepV1
from gyre_contract.io._columnar import check_file
from gyre_contract.io._fastfile import Block, CodedIds
from gyre_contract.io._raggedcols import Leaf, Ragged, RaggedPlan, ragged_plan


@dataclass
class TokenColumns:
    """The valid steps of a file as columns, in file order (module doc)."""

    steps: int
    columns: dict[str, Any]
    """Path (`action`, `observation.token_ids`, `reward`, ...) -> its column; only the paths
    some step carries."""
    objects: frozenset[str]
    """The fields of modalities (`observation`): as a whole, only step objects hold them."""
    lines: np.ndarray
    """The file line (a Parquet file's row) of each step, as `numbered_steps` gives them."""


@dataclass
class _Piece:
    """One leaf over a run of steps: values (flat for a list), lengths (lists), presence."""

    values: Any
    lengths: np.ndarray | None
    present: np.ndarray


class _Sink:
    """Stands where `StepChecker.feed` takes an `EpisodeAssembler`: keeps each checked block's
    columns as they are and turns each run of steps checked one by one into the same pieces."""

    takes_blocks = True
    takes_ragged = True

    def __init__(self, plan: RaggedPlan) -> None:
        self.plan = plan
        self.chunks: list[tuple[int, dict[str, _Piece]]] = []
        self.lines: list[np.ndarray] = []
        self._steps: list[BaseModel] = []
        self._lines: list[int] = []

    def add(self, n: int, step: Any) -> None:
        self._steps.append(step)
        self._lines.append(n)
        if len(self._steps) >= _STEP_CHUNK:
            self.flush()

    def add_block(self, checked: Block, first: int) -> list[Any]:
        self.flush()
        self.lines.append(np.arange(first, first + checked.n, dtype=np.int64))
        strings, masks = checked.extra["strings"], checked.extra["masks"]
        pieces = {}
        for leaf in self.plan.leaves:
            mask = masks.get(leaf.path)
            if mask is None:
                continue
            if leaf.dtype.kind == "U":
                values = strings[leaf.path]
                values = values.values if isinstance(values, CodedIds) else values
                pieces[leaf.path] = _Piece(values, None, mask)
            elif leaf.list:
                ragged = checked.ragged[leaf.path]
                pieces[leaf.path] = _Piece(ragged.values, ragged.lengths, mask)
            else:
                pieces[leaf.path] = _Piece(checked.arrays[leaf.path], None,  # type: ignore[index]
                                           mask)
        self.chunks.append((checked.n, pieces))
        return []

    def flush(self) -> None:
        """Turn the steps checked one by one so far into a chunk of pieces."""
        steps, self._steps = self._steps, []
        if self._lines:
            self.lines.append(np.array(self._lines, np.int64))
            self._lines = []
        if steps:
            self.chunks.append((len(steps), {leaf.path: piece for leaf in self.plan.leaves
                                             if (piece := _step_piece(steps, leaf)) is not None}))


_STEP_CHUNK = 4096
"""Steps checked one by one that are turned into columns at a time."""


def _step_piece(steps: list[BaseModel], leaf: Leaf) -> _Piece | None:
    """One leaf of validated steps, as the block of a `RaggedPlan` holds it."""
    attr = model_info(type(steps[0])).attr(leaf.wire)
    values: list[Any] = [getattr(s, attr) for s in steps]
    if leaf.child is not None:
        values = [None if v is None else getattr(v, model_info(type(v)).attr(leaf.child))
                  for v in values]
    present = np.fromiter((v is not None for v in values), bool, len(values))
    if not present.any():
        return None
    held = [v for v in values if v is not None]
    if leaf.dtype.kind == "U":
        return _Piece(values, None, present)
    if leaf.list:
        lengths = np.zeros(len(values), np.int64)
        lengths[present] = [len(v) for v in held]
        flat = np.concatenate(held).astype(leaf.dtype, copy=False) if held \
            else np.zeros(0, leaf.dtype)
        return _Piece(flat, lengths, present)
    out = np.full(len(values), np.nan if leaf.dtype.kind == "f" else 0, leaf.dtype)
    out[present] = np.array(held, dtype=leaf.dtype)
    return _Piece(out, None, present)


def read_token_columns(path: str | os.PathLike[str], model: type[RolloutStepV1], *,
                       allow_partial_tail: bool = False) -> TokenColumns | None:
    """The file's valid steps as columns (module doc); raises ContractError on the first
    problem, as `read_steps` does; None when `model` has no ragged plan. A Parquet file
    (`.parquet`, `.pq`) is read a record batch at a time, its rows numbered from 1."""
    plan = ragged_plan(model)
    if plan is None:
        return None
    sink = _Sink(plan)
    check_file(path, model, sink, allow_partial_tail=allow_partial_tail)
    steps = sum(n for n, _ in sink.chunks)
    columns = {}
    for leaf in plan.leaves:
        pieces = [(n, chunk.get(leaf.path)) for n, chunk in sink.chunks]
        if all(piece is None for _, piece in pieces):
            continue
        columns[leaf.path] = _joined(leaf, pieces)
    lines = np.concatenate(sink.lines) if sink.lines else np.zeros(0, np.int64)
    return TokenColumns(steps, columns, frozenset(plan.objects), lines)


def _joined(leaf: Leaf, pieces: list[tuple[int, _Piece | None]]) -> Any:
    """One leaf's pieces as its column: a `Ragged` (a list every step carries), an array (a
    value every step carries), or one value per step, None where absent (module doc)."""
    present = np.concatenate([np.zeros(n, bool) if p is None else p.present for n, p in pieces])
    held = [p for _, p in pieces if p is not None]
    if leaf.dtype.kind == "U":
        values = [v for n, p in pieces for v in ([None] * n if p is None else p.values)]
        return np.array(values, dtype=np.str_) if present.all() else values
    if leaf.list:
        lengths = np.concatenate([np.zeros(n, np.int64) if p is None else p.lengths
                                  for n, p in pieces])
        flat = np.concatenate([p.values for p in held])
        ragged = Ragged(flat, lengths, None if present.all() else present)
        return ragged if ragged.present is None else ragged.per_record()
    numbers = np.concatenate([np.zeros(n, leaf.dtype) if p is None else p.values
                              for n, p in pieces])
    if present.all():
        return numbers
    return [v if p else None for v, p in zip(numbers.tolist(), present.tolist())]
