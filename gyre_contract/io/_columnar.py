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
from typing import Any

import numpy as np
from pydantic import BaseModel

from gyre_contract.core._dims import numpy_dtype
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import RolloutStep, RolloutStepV1, field_specs
from gyre_contract.core._tensor import TensorSpec
from gyre_contract.io._checking import StepChecker
from gyre_contract.io._fastfile import Block, id_runs
from gyre_contract.io._lines import Lines
from gyre_contract.io._parquet import ParquetRows, is_parquet


@dataclass
class FileColumns:
    """The valid steps of a file as columns (see module doc)."""

    columns: dict[str, np.ndarray]
    """Wire name -> `[N, ...]` array over the steps (floats NaN where a step lacks the field),
    in the model's field order; `info` and `episode_id` are not among them."""
    episode_ids: np.ndarray
    """Episode code -> id (a numpy string array), in order of first appearance."""
    code: np.ndarray
    """[N] int64: the episode code of each step."""
    episodes: np.ndarray
    """Episode codes in the order `read_episodes` yields them: ended ones by the line of their
    last step, then those still open by first appearance."""
    lengths: np.ndarray
    """[E] int64: steps per episode code."""


class _Sink:
    """Stands where `StepChecker.feed` takes an `EpisodeAssembler`: turns each checked block,
    and each run of steps checked one by one, into columns as it comes, so that only the
    columns stay (never a block's lines or step objects), and the episode ids as one string
    per run of steps of one episode (numpy, no Python object per episode: a million one-step
    episodes took 130 MB as a dict of ids). `fits` turns False for good once a chunk does not
    fit columns (the checking goes on: a problem further on must still raise)."""

    takes_blocks = True  # a checked block is kept whole, never taken apart into steps

    def __init__(self, model: type[RolloutStepV1]) -> None:
        self.info, self.specs = model_info(model), field_specs(model)
        self.fits = True
        self.chunks: list[tuple[int, dict[str, Any]]] = []  # (steps, columns) per chunk
        self.runs: list[tuple[np.ndarray, np.ndarray]] = []  # (ids, lengths) of its runs, per chunk
        self._steps: list[RolloutStepV1] = []

    def add(self, n: int, step: RolloutStepV1) -> None:
        if self.fits:
            self._steps.append(step)
            if len(self._steps) >= _STEP_CHUNK:
                self.flush()

    def add_block(self, checked: Block, first: int) -> list[Any]:
        self.flush()
        if self.fits:
            self._keep(_block_columns(checked), checked.episode_id)
        return []

    def flush(self) -> None:
        """Turn the steps read one by one so far into a chunk of columns."""
        steps, self._steps = self._steps, []
        if steps and self.fits:
            self._keep(_step_columns(steps, self.info, self.specs),
                       [s.episode_id for s in steps])

    def _keep(self, found: dict[str, Any] | None, ids: Any) -> None:
        runs = None if found is None else _runs(ids)
        if runs is None:
            self.fits, self.chunks, self.runs = False, [], []
            return
        self.chunks.append((len(ids), found))  # type: ignore[arg-type]
        self.runs.append(runs)

    def codes(self) -> tuple[np.ndarray, np.ndarray]:
        """(the episode code of each step, the ids by code in order of first appearance)."""
        names = np.concatenate([ids for ids, _ in self.runs])
        unique, first, inverse = np.unique(names, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        code = np.empty(len(unique), np.int64)
        code[order] = np.arange(len(unique))
        lengths = np.concatenate([lengths for _, lengths in self.runs])
        return np.repeat(code[inverse.reshape(-1)], lengths), unique[order]


_STEP_CHUNK = 65_536
"""Steps checked one by one that are turned into columns at a time (any run of steps gives the
same columns in pieces as whole: `_joined` refuses what a whole run would refuse)."""


def check_file(path: str | os.PathLike[str], model: type[RolloutStepV1], sink: Any, *,
               allow_partial_tail: bool = False) -> None:
    """Check every step of a rollout file (Parquet a record batch at a time, else JSON Lines)
    into `sink`, which keeps them as it likes (`StepChecker.feed`), then `sink.flush()`; raises
    ContractError on the first problem."""
    source = ParquetRows(path, model) if is_parquet(path) else \
        Lines(path, allow_partial_tail=allow_partial_tail)
    for _ in StepChecker(model).feed(source, sink):
        pass
    sink.flush()


def read_columns(path: str | os.PathLike[str], model: type[RolloutStepV1] = RolloutStep, *,
                 allow_partial_tail: bool = False) -> FileColumns | None:
    """The file's valid steps as columns; raises ContractError on the first problem (as
    `read_episodes`), None when its fields do not fit columns (module doc). A Parquet file
    (`.parquet`, `.pq`) is read a record batch at a time, its rows numbered from 1."""
    sink = _Sink(model)
    check_file(path, model, sink, allow_partial_tail=allow_partial_tail)
    if not sink.fits or not sink.chunks:
        return None
    chunks, specs = sink.chunks, sink.specs
    columns = {}
    for wire in sink.info.wires:
        if wire in ("episode_id", "info") or not any(wire in found for _, found in chunks):
            continue
        # each chunk's piece is let go once joined: the pieces of one field at a time
        column = _joined([found.pop(wire, n) for n, found in chunks], specs.get(wire))
        if column is None:
            return None
        columns[wire] = column
    code, episode_ids = sink.codes()
    n_episodes = len(episode_ids)
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
    return FileColumns(columns, episode_ids, code, order.astype(np.int64),
                       np.bincount(code, minlength=n_episodes).astype(np.int64))


def _runs(ids: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(the id of each run of equal ids, the run's length); None for an id numpy would not keep
    as it is (a trailing NUL, which numpy strings drop: episodes decide)."""
    starts, names = id_runs(ids)
    if any(name.endswith("\0") for name in names):
        return None
    return np.array(names, dtype=np.str_), np.diff(np.r_[starts, len(ids)])


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
