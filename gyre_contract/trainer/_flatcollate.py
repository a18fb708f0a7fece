"""Collation straight from a file's columns: `[B, T, ...]` with one scatter per field.

`collate_file(path, model, fields=..., max_len=...)` gives what
`collate(read_episodes(path, model), fields=..., max_len=...)` gives (same keys, order, dtypes
and values, tests/trainer/test_flatcollate.py), without an episode object: the file is read as
columns (`io._columnar.read_columns`, episode ids dictionary-encoded), each step's place in the
batch is computed for all steps at once (its episode's row, plus `step // max_len`; its time
index `step % max_len`: the episode rules made `step` count 0, 1, 2, ... within each episode),
each `[B, T, ...]` array is allocated once and filled by one scatter, and the per-row keys
(`episode_id`, oldest `policy_version`, `next_value`) are whole-array reductions.

It gives None whenever the result could differ from collating episodes (a file that does not
fit columns, a field only some steps carry, a padded batch over the byte limit, a field not
found): the caller collates episodes then, which also explains any refusal.

`collate_block(columns, ...)` does the same for a block of step columns held in memory (a
channel's delivery: steps of several episodes, an episode's steps in row order, perhaps only
the rest of an episode begun in an earlier block): what `collate(episodes_of(columns, ids))`
gives, each step's time index its place among its episode's steps in the block.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from gyre_contract.core._models import RolloutStepV1
from gyre_contract.core._switches import fast_paths_enabled
from gyre_contract.io._columnar import FileColumns, read_columns
from gyre_contract.trainer import _collation as collation
from gyre_contract.trainer import _tokens as tokens
from gyre_contract.trainer._collation import DERIVED_FIELDS, ROW_FIELDS, SKIPPED_FIELDS


def collate_file(path: str | os.PathLike[str], model: type[RolloutStepV1], *,
                 fields: Iterable[str] | None = None, max_len: int | None = None,
                 max_bytes: int | None = None, sparse: Iterable[str] | None = None
                 ) -> tuple[dict[str, np.ndarray], int] | None:
    """(the collated batch, the number of episodes) of a JSON Lines or Parquet file, or None
    (module doc).

    Raises ContractError on the first problem of the file, as `read_episodes` does."""
    if not fast_paths_enabled() or model.varying_dims:
        return None
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)
                                or max_len < 1):
        return None  # `collate` explains
    found = read_columns(path, model)
    if found is None:
        return None
    batch = collate_columns(found, fields=fields, max_len=max_len, max_bytes=max_bytes,
                            sparse=sparse)
    return None if batch is None else (batch, len(found.episode_ids))


def collate_block(columns: Mapping[str, Any], *, fields: Iterable[str] | None = None,
                  max_len: int | None = None, max_bytes: int | None = None,
                  sparse: Iterable[str] | None = None,
                  episodes: tuple[np.ndarray, np.ndarray] | None = None
                  ) -> dict[str, np.ndarray] | None:
    """`collate(episodes_of(columns, columns["episode_id"]), ...)` from the block's columns
    (module doc), or None where only episodes can say: a column that is not one array over the
    steps (modalities, lists, values some steps lack but floats), and the cases of
    `collate_file`. `episodes`: (each step's episode code, in order of first appearance; the
    ids by code) when the caller knows them already."""
    if not fast_paths_enabled() or (max_len is not None and (
            isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1)):
        return None
    ids = columns.get("episode_id")
    if not isinstance(ids, np.ndarray) or ids.ndim != 1 or ids.dtype.kind != "U" or not len(ids):
        return None
    arrays = {}
    for name, column in columns.items():
        if name == "episode_id" or name in SKIPPED_FIELDS:
            continue
        if not isinstance(column, np.ndarray) or column.dtype.kind not in "biuf" or \
                column.ndim < 1 or len(column) != len(ids):
            return None
        if column.dtype.kind == "f" and column.size and np.isnan(column).all():
            continue  # no step carries it: an episode holds no such column (`episodes_of`)
        arrays[name] = column
    code, names = episodes if episodes is not None else _first_appearance(ids)
    lengths = np.bincount(code, minlength=len(names))
    order = np.argsort(code, kind="stable")
    position = np.empty(len(code), np.int64)
    position[order] = np.arange(len(code)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    found = FileColumns(arrays, names, code, np.arange(len(names)), lengths)
    return collate_columns(found, fields=fields, max_len=max_len, max_bytes=max_bytes,
                           sparse=sparse, position=position)


def _first_appearance(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each id's code, numbered in order of first appearance; the distinct ids by code)."""
    distinct, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], distinct[order]


def collate_columns(found: FileColumns, *, fields: Iterable[str] | None = None,
                    max_len: int | None = None, max_bytes: int | None = None,
                    sparse: Iterable[str] | None = None, position: np.ndarray | None = None
                    ) -> dict[str, np.ndarray] | None:
    """`collate` of the episodes `found` holds, from its columns; None as in `collate_file`.
    `position`: each step's place in its episode (default: its `step`, which the episode rules
    make count 0, 1, 2, ... in a whole file)."""
    columns, n = found.columns, len(found.code)
    groups = None if sparse is None else list(dict.fromkeys(sparse))
    names = _names(columns, fields, n, groups or [])
    if names is None:
        return None
    lengths = found.lengths[found.episodes]  # per episode, in batch order
    if max_len is None:
        per_episode = np.ones(len(lengths), np.int64)
        span = int(lengths.max())
    else:
        per_episode = -(-lengths // max_len)
        span = max_len
    first_row = np.zeros(len(found.lengths), np.int64)  # by episode code
    first_row[found.episodes] = np.cumsum(per_episode) - per_episode
    b = int(per_episode.sum())
    step = columns["step"] if position is None else position
    if max_len is None:
        row, t = first_row[found.code], step
    else:
        row, t = first_row[found.code] + step // max_len, step % max_len
    row_lengths = np.bincount(row, minlength=b)
    nt = min(span, int(row_lengths.max()))
    limit = collation.MAX_BATCH_BYTES if max_bytes is None else max_bytes
    cell = 1 + sum(math.prod(columns[name].shape[1:]) * columns[name].dtype.itemsize
                   + (name in (groups or ())) for name in names)
    if b * nt * cell > limit:
        return None  # `collate` raises BatchTooLargeError with its remedy
    out: dict[str, np.ndarray] = {}
    if n and (int(t.min()) < 0 or int(t.max()) >= nt):
        return None  # a place beyond its row (never from a checked file): `collate` decides
    cell_of = row * nt + t  # each step's cell of [B * T], once (numpy would redo it per field)
    fills = []
    for name in names:
        column = columns[name]
        array = np.zeros((b * nt, *column.shape[1:]), column.dtype)
        fills.append((array, cell_of, column))  # one scatter each, large ones on two threads
        out[name] = array.reshape(b, nt, *column.shape[1:])
    tokens.fill_all(fills)
    for name in groups or ():
        present = np.zeros(b * nt, bool)
        present[cell_of] = _carried(columns[name], n)
        out[f"{name}_present"] = present.reshape(b, nt)
    out["mask"] = np.arange(nt)[None, :] < row_lengths[:, None]
    row_episode = np.repeat(found.episodes, per_episode)
    out["episode_id"] = found.episode_ids[row_episode]
    if "policy_version" in columns:
        oldest = np.full(b, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(oldest, row, columns["policy_version"])
        out["policy_version"] = oldest
    next_value = _next_values(columns, row, t, row_lengths, row_episode, b, nt)
    if next_value is None:
        return None
    out["next_value"] = next_value
    return out


def _names(columns: dict[str, np.ndarray], fields: Iterable[str] | None, n: int,
           sparse: list[str]) -> list[str] | None:
    """The collated columns, as `collation._select` orders them; None where it would refuse
    or where some step lacks a column that is not `sparse` (episodes without it make
    `collate` decide, and name the step)."""
    available = [w for w in columns if w not in ROW_FIELDS and w not in SKIPPED_FIELDS]
    if any(name not in available for name in sparse):
        return None  # a group of modalities, or carried by no step: `collate` decides
    if fields is None:
        names = available
    else:
        names = []
        for field in fields:
            if field in DERIVED_FIELDS:
                continue
            if field not in available:
                return None
            if field not in names:
                names.append(field)
    for name in names:
        column = columns[name]
        if name not in sparse and column.dtype.kind == "f" and \
                np.isnan(column.reshape(n, -1)[:, 0]).any():
            return None  # a float NaN marks a step without the field
    return names


def _carried(column: np.ndarray, n: int) -> np.ndarray:
    """[N] bool: the steps that carry a column (a float absent on a step is NaN there)."""
    if column.dtype.kind != "f" or column.size == 0:
        return np.ones(n, bool)
    return ~np.isnan(column.reshape(n, -1)).all(axis=1)


def _next_values(columns: dict[str, np.ndarray], row: np.ndarray, t: np.ndarray,
                 row_lengths: np.ndarray, row_episode: np.ndarray, b: int, nt: int
                 ) -> np.ndarray | None:
    """The bootstrap value after each row (as `collation._next_values`): the next row's first
    `value` for a row cut by max_len, else the recorded `next_value` on the row's last step."""
    value, recorded = columns.get("value"), columns.get("next_value")
    for column in (value, recorded):
        if column is not None and (column.ndim != 1 or column.dtype.kind != "f"):
            return None
    if value is not None and np.isnan(value).any():
        return None  # some episodes without `value`: `collate` decides per episode
    if value is None and recorded is not None and recorded.dtype != np.float32:
        return None  # `collate` takes the first episode's dtype, or float32
    dtype = value.dtype if value is not None else \
        recorded.dtype if recorded is not None else np.dtype(np.float32)
    out = np.full(b, np.nan, dtype)
    if value is None and recorded is None:
        return out  # nothing to bootstrap from: NaN throughout (no pass over the steps)
    last = t == row_lengths[row] - 1  # each row's last step
    last_rows = row[last]
    # the row goes on in the next (np.concatenate, not np.r_: which parses its index each call)
    cut = np.concatenate((row_episode[1:] == row_episode[:-1], [False]))
    if recorded is not None:
        out[last_rows] = recorded[last]
        # an episode whose steps all lack next_value has no such column: NaN there too (same)
    if value is not None and cut.any():
        starts = t == 0
        first_value = np.full(b, np.nan, dtype)
        first_value[row[starts]] = value[starts]
        out[cut] = first_value[np.flatnonzero(cut) + 1]
    return out
