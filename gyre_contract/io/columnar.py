"""A whole rollout file as columns over its steps, for a batch built without episode objects.

Why: `read_episodes` hands over one `Episode` per episode, and collating them costs Python per
episode (~60 µs each: slicing every column, then copying each row). A trainer that wants one
`[B, T, ...]` batch of the whole file needs neither: `read_columns` checks the file with the
same loop as `read_episodes` (`checking.StepChecker`, raising on the first problem with its
line) and keeps each bulk-checked block's arrays as they are (steps checked one by one are put
into arrays once, at the end). The result holds every field as one `[N, ...]` array over the N
steps in file order, the episode of each step as a code into `episode_ids` (dictionary
encoding), and the episodes in the order `read_episodes` yields them.

`read_columns` gives None when the file does not fit columns (a field some steps lack that is
not a float, varying sizes, modalities, a dtype or shape that changes): the caller then reads
episodes; nothing is ever guessed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from operator import ne
from typing import Any

import numpy as np
from pydantic import BaseModel

from gyre_contract.core.dims import numpy_dtype
from gyre_contract.core.modelinfo import model_info
from gyre_contract.core.models import RolloutStep, RolloutStepV1, field_specs
from gyre_contract.core.tensor import TensorSpec
from gyre_contract.io.checking import StepChecker
from gyre_contract.io.fastfile import Block
from gyre_contract.io.lines import Lines
from gyre_contract.io.parquet import ParquetRows, is_parquet


@dataclass
class FileColumns:
    """The valid steps of a file as columns (see module doc)."""

    columns: dict[str, np.ndarray]
    """Wire name -> `[N, ...]` array over the steps (floats NaN where a step lacks the field),
    in the model's field order; `info` and `episode_id` are not among them."""
    episode_ids: list[str]
    """Episode code -> id, in order of first appearance."""
    code: np.ndarray
    """[N] int64: the episode code of each step."""
    episodes: np.ndarray
    """Episode codes in the order `read_episodes` yields them: ended ones by the line of their
    last step, then those still open by first appearance."""
    lengths: np.ndarray
    """[E] int64: steps per episode code."""


class _Sink:
    """Stands where `StepChecker.feed` takes an `EpisodeAssembler`: keeps blocks and steps."""

    takes_blocks = True  # a checked block is kept whole, never taken apart into steps

    def __init__(self) -> None:
        self.chunks: list[Block | list[RolloutStepV1]] = []

    def add(self, n: int, step: RolloutStepV1) -> None:
        last = self.chunks[-1] if self.chunks else None
        if isinstance(last, list):
            last.append(step)
        else:
            self.chunks.append([step])

    def add_block(self, checked: Block, first: int) -> list[Any]:
        self.chunks.append(checked)
        return []


def read_columns(path: str | os.PathLike[str], model: type[RolloutStepV1] = RolloutStep, *,
                 allow_partial_tail: bool = False) -> FileColumns | None:
    """The file's valid steps as columns; raises ContractError on the first problem (as
    `read_episodes`), None when its fields do not fit columns (module doc). A Parquet file
    (`.parquet`, `.pq`) is read a record batch at a time, its rows numbered from 1."""
    sink = _Sink()
    source = ParquetRows(path, model) if is_parquet(path) else \
        Lines(path, allow_partial_tail=allow_partial_tail)
    for _ in StepChecker(model).feed(source, sink):
        pass
    if not sink.chunks:
        return None
    info = model_info(model)
    specs = field_specs(model)
    ids: list[Any] = []
    chunks: list[tuple[int, dict[str, Any]]] = []
    for chunk in sink.chunks:
        if isinstance(chunk, list):
            found = _step_columns(chunk, info, specs)
            ids.append([s.episode_id for s in chunk])
        else:
            found = _block_columns(chunk)
            ids.append(chunk.episode_id)
        if found is None:
            return None
        chunks.append((len(ids[-1]), found))
    columns = {}
    for wire in info.wires:
        if wire in ("episode_id", "info") or not any(wire in found for _, found in chunks):
            continue
        column = _joined([found.get(wire, n) for n, found in chunks], specs.get(wire))
        if column is None:
            return None
        columns[wire] = column
    index: dict[str, int] = {}
    code = np.concatenate([_codes(chunk, index) for chunk in ids])
    n_episodes = len(index)
    rows = np.arange(len(code))
    first = np.full(n_episodes, len(code), np.int64)
    np.minimum.at(first, code, rows)
    last = np.zeros(n_episodes, np.int64)
    np.maximum.at(last, code, rows)
    done = columns["terminated"][last] | columns["truncated"][last]
    ended = np.flatnonzero(done)
    still_open = np.flatnonzero(~done)
    order = np.r_[ended[np.argsort(last[ended], kind="stable")],
                  still_open[np.argsort(first[still_open], kind="stable")]]
    return FileColumns(columns, list(index), code, order.astype(np.int64),
                       np.bincount(code, minlength=n_episodes).astype(np.int64))


def _codes(ids: Any, index: dict[str, int]) -> np.ndarray:
    """Each id's code in `index` (new ids get the next codes), a run of equal ids at a time."""
    n = len(ids)
    changes = np.fromiter(map(ne, ids[1:], ids[:-1]), bool, max(n - 1, 0))
    starts = np.r_[0, np.flatnonzero(changes) + 1]
    codes = [index.setdefault(ids[i], len(index)) for i in starts.tolist()]
    return np.repeat(np.array(codes, np.int64), np.diff(np.r_[starts, n]))


def _block_columns(block: Block) -> dict[str, Any] | None:
    if block.arrays is None:
        return None
    out = {}
    for wire, array in block.arrays.items():
        if wire in ("episode_id", "info"):
            continue
        if array is None:
            values = block.lists.get(wire)
            if values is None or None in values or not all(v.__class__ is str for v in values):
                return None  # a non-float field some lines lack: episodes decide
            array = np.array(values, dtype=np.str_)
        out[wire] = array
    return out


def _step_columns(steps: list[RolloutStepV1], info: Any, specs: dict[str, Any]
                  ) -> dict[str, Any] | None:
    out = {}
    for wire in info.wires:
        if wire in ("episode_id", "info"):
            continue
        attr = info.attr(wire)
        values = [getattr(s, attr) for s in steps]
        missing = sum(v is None for v in values)
        if missing == len(values):
            continue
        if any(isinstance(v, (dict, BaseModel, list)) for v in values):
            return None
        present = [v for v in values if v is not None]
        spec = specs.get(wire)
        if isinstance(spec, TensorSpec) and spec.dtype == "string":
            if missing:
                return None
            out[wire] = np.array(values, dtype=np.str_)
            continue
        if isinstance(spec, TensorSpec) and len(spec.dtypes) == 1:
            dtype: np.dtype | None = numpy_dtype(spec.dtypes[0])  # a scalar: a Python number
        else:
            dtypes = {getattr(v, "dtype", None) for v in present}
            if len(dtypes) != 1 or None in dtypes:
                return None  # kinds that differ between steps: episodes decide
            dtype = dtypes.pop()
        try:
            array = np.array(present, dtype=dtype)
        except ValueError:
            return None  # shapes that differ: episodes decide
        if array.dtype.kind in "OU" or array.ndim == 0:
            return None
        if missing:
            if array.dtype.kind != "f":
                return None
            full = np.full((len(values), *array.shape[1:]), np.nan, array.dtype)
            full[[i for i, v in enumerate(values) if v is not None]] = array
            array = full
        out[wire] = array
    return out


def _joined(pieces: list[Any], spec: Any) -> np.ndarray | None:
    """One field's pieces (arrays, or the number of steps of a chunk without it) as one array."""
    arrays = [p for p in pieces if p.__class__ is np.ndarray]
    first = arrays[0]
    if any(a.shape[1:] != first.shape[1:] or a.dtype != first.dtype
           and not a.dtype.kind == first.dtype.kind == "U" for a in arrays):
        return None  # another dtype or shape somewhere: episodes decide (strings: the widest)
    if len(arrays) < len(pieces):  # chunks without the field
        if first.dtype.kind != "f":
            return None
        pieces = [np.full((p, *first.shape[1:]), np.nan, first.dtype)
                  if p.__class__ is not np.ndarray else p for p in pieces]
    if isinstance(spec, TensorSpec) and isinstance(spec.dtype, str) and spec.dtype != "string" \
            and first.dtype != numpy_dtype(spec.dtype) and len(spec.dtypes) == 1:
        return None
    return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
