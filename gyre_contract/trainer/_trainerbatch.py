"""A trainer's own batch: the mapped arrays checked against the trainer's schema, ours or foreign
(the batch as the trainer's schema wants it: next to the field map, asking its row layout).

`trainer_schema(source, batch_dims)` reads any JSON Schema (with or without `x-gyre-*` keys), a
Pydantic batch model or a field table, through the field table of `fieldtable`, and refuses one
that cannot describe a batch (no properties, no batch dims) with `SchemaError`.
`TrainerSchema.check(arrays)` then takes what a field map built (`[B, T, ...]` columns under the
trainer's keys) and returns the batch the trainer reads, keys as the schema names them (nested
names joined with `.`), or raises one `ContractError` listing every field that does not fit.

Nothing is filled or promoted: a required field the map did not build is a problem, a dtype is
compared as it is, and every float array of the batch, whatever built it, must be finite on the
real steps (`mask` True; every row of a token batch): a value a map leaves undefined (NaN) is
never let into a batch that says "valid" (`not_finite`, the one place that checks it). A flat
layout (`x-gyre-batch-dims` of one dim, `M` or `T*N`) holds real steps only: the map's `mask`
entry selects them (time-major order for `T*N`), and a flat batch without one is refused, since
padding would become data.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gyre_contract.core._errors import ContractError, Problem, SchemaError
from gyre_contract.schema._fieldtable import (
    UNKNOWN_DIM,
    Dim,
    Field,
    FieldTable,
    SchemaInput,
    as_table,
    shape_text,
)
from gyre_contract.schema._layouts import BATCH_DIMS_SPELLINGS, Layout, layout_of, parse_batch_dims
from gyre_contract.trainer._layouts import EpisodeRows, RowLayout

_JSON_KINDS = {"number": "fiu", "integer": "iu", "bool": "b", "string": "US"}
"""JSON types of a foreign schema and the numpy dtype kinds each accepts."""


@dataclass(frozen=True)
class TrainerSchema:
    """A trainer's batch schema: its field table, batch dims and layout."""

    table: FieldTable
    layout: Layout

    @property
    def name(self) -> str:
        return self.table.name or self.table.title or "trainer schema"

    @property
    def batch_dims(self) -> tuple[str, ...]:
        return self.layout.batch_dims

    def check(self, arrays: Mapping[str, Any], mask: Any = None, *,
              rows: RowLayout | None = None, episode_id: Any = None) -> dict[str, np.ndarray]:
        """The trainer's batch from mapped arrays, or ContractError listing every misfit.

        `rows` is the map's row layout (default: runs of episodes), asked how the trainer's
        schema sees its rows (`RowLayout.fit_trainer`): runs of episodes into a flat layout keep
        their real steps only; token rows (one row per step) are all real, and the one batch dim
        must have the same size in every field. `mask` (the collated `[B, T]` mask) fixes the
        sizes of the batch dims, so a map that left a time-major trainer's arrays batch-major is
        caught even when the sizes agree. Every float array is checked finite under the mask
        (without one: everywhere); `episode_id` (the collated `[B]` ids) lets the message name
        the episodes.
        """
        flat, mask = (rows or EpisodeRows()).fit_trainer(self, flatten_batch(arrays), mask)
        problems: list[Problem] = []
        bound = self._sizes(mask)
        for f in self.table:
            if f.name not in flat:
                if f.required:
                    problems.append(Problem(f.name, _expected(f), "missing",
                                            "the trainer schema requires it; the map builds no "
                                            "such key"))
                continue
            problems += _field_problems(f, flat[f.name], self.batch_dims, bound)
        problems += not_finite(flat, mask, self.layout, episode_id)
        if problems:
            raise ContractError(problems)
        return flat

    def _sizes(self, mask: Any) -> dict[str, int]:
        """The batch dims' sizes the collated mask implies (none without a mask)."""
        if mask is None:
            return {}
        rows, steps = np.shape(mask)
        dims = self.batch_dims
        if self.layout.kind == "flat":
            return {dims[0]: int(np.count_nonzero(mask))}
        sizes = (steps, rows) if self.layout.kind == "time_major" else (rows, steps)
        return dict(zip(dims[:2], sizes, strict=False))

    def real_steps(self, flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Rows of a flat layout: the map's [B, T] columns at the real steps only."""
        if "mask" not in flat:
            raise ContractError(Problem(
                "mask", "the map's mask entry ({\"op\": \"mask\"})", "missing",
                f"the trainer reads a flat batch {shape_text(self.batch_dims)}: real steps are "
                f"selected with the mask, without one padding would become data"))
        mask = flat["mask"]
        time_major = "time-major" in self.layout.text
        keep_mask = "mask" in self.table
        out: dict[str, np.ndarray] = {}
        for key, arr in flat.items():
            if key == "mask" and not keep_mask:
                continue
            if arr.shape[:2] != mask.shape:
                out[key] = arr
            elif time_major:
                out[key] = np.swapaxes(arr, 0, 1)[mask.T]
            else:
                out[key] = arr[mask]
        return out


def not_finite(flat: Mapping[str, np.ndarray], mask: Any, layout: Layout,
               episode_id: Any = None) -> list[Problem]:
    """Float arrays of a trainer's batch holding NaN or inf on real steps, one problem per key
    with the count and the first rows and episodes. Real steps: where `mask` (the collated
    `[B, T]` mask) is True for arrays laid out `[B, T, ...]` (`[T, B, ...]` time-major); every
    entry of a flat layout's arrays (real steps only) and of arrays of another layout; all of
    each array without a mask (token rows: every row is real)."""
    mask = None if mask is None else np.asarray(mask, bool)
    ids = None if episode_id is None else np.asarray(episode_id)
    problems = []
    for key, arr in flat.items():
        if arr.dtype.kind not in "fc" or arr.size == 0:
            continue
        bad = ~np.isfinite(arr)
        if not bad.any():
            continue
        real, row_axis, steps = _real_cells(arr, mask, layout)
        if real is not None:
            bad &= real.reshape(real.shape + (1,) * (arr.ndim - real.ndim))
            if not bad.any():
                continue
            total = int(real.sum()) * (arr.size // real.size)
        else:
            total = arr.size
        where = _bad_rows(bad, row_axis, steps, ids)
        problems.append(Problem(key, "finite values on the real steps (where the mask is True)",
                                f"{int(bad.sum())} of {total} values NaN or infinite{where}",
                                "not finite"))
    return problems


def _real_cells(arr: np.ndarray, mask: np.ndarray | None, layout: Layout
                ) -> tuple[np.ndarray | None, int | None, np.ndarray | None]:
    """(the real cells of `arr`'s leading dims or None for all, the axis of its rows, the
    collated row of each entry of a flat array or None)."""
    if mask is None:
        return None, 0 if arr.ndim else None, None
    if layout.kind == "flat":
        order = np.nonzero(mask.T)[1] if "time-major" in layout.text else np.nonzero(mask)[0]
        return None, None, order if arr.ndim and arr.shape[0] == order.size else None
    if layout.kind == "time_major" and arr.shape[:2] == mask.T.shape:
        return mask.T, 1, None
    if arr.shape[:2] == mask.shape:
        return mask, 0, None
    return None, 0 if arr.ndim and arr.shape[0] == mask.shape[0] else None, None


def _bad_rows(bad: np.ndarray, row_axis: int | None, steps: np.ndarray | None,
              ids: np.ndarray | None) -> str:
    """`, in rows [0, 3, ...] (episodes 'a', 'b', ...)`: where the bad values are."""
    if steps is not None:
        at = np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=1))
        rows = np.unique(steps[at])
        text = f", at steps [{_first(at)}] of the flat batch"
    elif row_axis is not None:
        rows = np.flatnonzero(np.moveaxis(bad, row_axis, 0).reshape(bad.shape[row_axis], -1)
                              .any(axis=1))
        text = f", in rows [{_first(rows)}]"
    else:
        return ""
    if ids is not None and ids.ndim == 1 and rows.size and rows.max() < ids.size:
        names = ", ".join(repr(str(i)) for i in ids[rows[:5]])
        text += f" (episodes {names}{', ...' if rows.size > 5 else ''})"
    return text


def _first(indices: np.ndarray) -> str:
    return ", ".join(map(str, indices[:5].tolist())) + (", ..." if indices.size > 5 else "")


def trainer_schema(source: SchemaInput | TrainerSchema,
                   batch_dims: tuple[str, ...] | list[str] | str | None = None) -> TrainerSchema:
    """A trainer schema from a path, a dict, a Pydantic batch model or a field table.

    `batch_dims` (`"B,T"`, `("T", "N")`, `"M"`) overrides the schema's `x-gyre-batch-dims`.
    Raises SchemaError when the schema cannot describe a batch: no properties, no batch dims.
    """
    if isinstance(source, TrainerSchema):
        if batch_dims is None:
            return source
        source = source.table
    if isinstance(batch_dims, str):
        batch_dims = parse_batch_dims(batch_dims)
    table = as_table(source, tuple(batch_dims) if batch_dims is not None else None)
    name = table.name or table.title or "the trainer schema"
    if not len(table):
        raise SchemaError(f"{name}: the trainer schema has no properties, so it cannot describe "
                          f"a batch")
    if not table.batch_dims:
        raise SchemaError(f"{name}: the trainer schema names no batch dims (x-gyre-batch-dims), "
                          f"so it cannot describe a batch; say which lead its arrays: "
                          f"--batch-dims {BATCH_DIMS_SPELLINGS} (a map that diff wrote "
                          f"records them)")
    return TrainerSchema(table, layout_of(table.batch_dims))


def flatten_batch(batch: Mapping[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
    """Nested mappings become dotted keys (`next.reward`); values become numpy arrays."""
    out: dict[str, np.ndarray] = {}
    for key, value in batch.items():
        if isinstance(value, Mapping):
            out.update(flatten_batch(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = np.asarray(value)
    return out


def _expected(f: Field) -> str:
    return f"{f.dtype_text}{shape_text(f.shape)}"


def _got(arr: np.ndarray) -> str:
    return f"{arr.dtype}{list(arr.shape)}"


def _field_problems(f: Field, arr: np.ndarray, batch_dims: tuple[str, ...],
                    bound: dict[str, int]) -> list[Problem]:
    problems = []
    if not _dtype_fits(f.dtype, arr.dtype):
        problems.append(Problem(f.name, _expected(f), _got(arr), "wrong dtype (never cast here: "
                                "add a cast to the map)"))
    why = _shape_misfit(f.shape, arr.shape, batch_dims, bound)
    if why:
        problems.append(Problem(f.name, _expected(f), _got(arr), why))
    return problems


def _dtype_fits(want: Any, got: np.dtype) -> bool:
    if want is None or want == "object":
        return True
    wants = (want,) if isinstance(want, str) else tuple(want)
    for w in wants:
        kinds = _JSON_KINDS.get(w)
        if kinds is not None and got.kind in kinds:
            return True
        if kinds is None and _dtype_name(got) == w:
            return True
    return False


@functools.lru_cache(maxsize=256)
def _dtype_name(dtype: np.dtype) -> str:
    """`str(dtype)`, which numpy computes in Python each time (a check per field per batch)."""
    return str(dtype)


def _shape_misfit(shape: tuple[Dim, ...] | None, got: tuple[int, ...],
                  batch_dims: tuple[str, ...], bound: dict[str, int]) -> str:
    """Why `got` does not fit `shape` ("" when it does); named dims bind across fields."""
    if shape is None:
        return ""
    dims = list(shape)
    for i, name in enumerate(batch_dims[:len(dims)]):
        if dims[i] == UNKNOWN_DIM:
            dims[i] = name
    variadic = [i for i, d in enumerate(dims) if isinstance(d, str) and d.startswith("*")]
    head = dims[:variadic[0]] if variadic else dims
    if (len(got) < len(head)) if variadic else (len(got) != len(dims)):
        return f"rank {len(got)}, the trainer schema wants {len(dims)}" + \
            (" or more" if variadic else "")
    for want, size in zip(head, got, strict=False):
        if isinstance(want, int) and want != size:
            return f"size {size} where the trainer schema wants {want}"
        if isinstance(want, str) and want != UNKNOWN_DIM:
            if bound.setdefault(want, size) != size:
                return f"dim {want} is {size} here but {bound[want]} in the batch"
    return ""
