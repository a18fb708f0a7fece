"""Collation: per-episode columnar arrays → `[B, T, ...]` right-padded arrays plus `mask`.

Each output row is a contiguous run of one episode. An episode longer than `max_len` is split
into several rows; a row cut mid-episode is neither terminated nor truncated at the cut and takes
its bootstrap value (`next_value[b]`) from the next row's first `value`. Per-step arrays are
copied once into a preallocated batch, never stacked step by step (stacking per-step objects costs
~35× more, see benchmarks/README.md).

Output keys:
- every collated column, flattened to dotted names for nested objects (`observation.image`),
  `[B, T, ...]` with its dtype kept; padding holds zeros (`""` for strings), which the mask says
  is not data;
- `mask` `[B, T]`, True on real steps;
- for a column of varying-size arrays (a Python list of T arrays, e.g. token ids), `<name>_mask`
  `[B, T, *varying dims]`, True on real elements; the column is zero-padded to the batch maximum;
- per row: `episode_id` `[B]` (unicode), `policy_version` `[B]` (the *oldest* version among the
  row's steps, since staleness is judged by the oldest data) and `next_value` `[B]` (the value
  after the row's last step: the next row's first `value` for a cut row, else the episode's
  recorded `next_value` on its last step, NaN where none is known);
- for each name in `sparse` (a column only some steps carry, such as `next_observation` on an
  episode's last step), `<name>_present` `[B, T]`, True where the step carries it; the column
  holds NaN (floats) or 0 where it does not.

With `sparse` given (a field map always gives it), every other collated column must be carried
by every step: one that a step lacks raises `MissingFieldError` naming the step, the episode and
the line, never a NaN that a later check would call "not finite".
The per-step `episode_id`, `policy_version` and `next_value` columns are consumed into these; the
free-form `info` column is never collated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any, NamedTuple

import numpy as np

from gyre_contract.core._errors import ContractError, InputError, MissingFieldError, Problem, describe
from gyre_contract.core._text import quoted

ROW_FIELDS: tuple[str, ...] = ("episode_id", "policy_version", "next_value")
"""Per-step columns that collate to one value per row (`[B]`)."""

DERIVED_FIELDS: tuple[str, ...] = ("mask", *ROW_FIELDS)
"""Keys `collate` adds beside the collated columns."""

SKIPPED_FIELDS: tuple[str, ...] = ("info",)
"""Columns that are never collated (free-form per-step objects)."""


MAX_BATCH_BYTES = 4 * 2**30
"""Largest padded batch `collate` allocates (4 GiB), checked before allocating: one long episode
among short ones pads every row to its length (600k steps + 50k one-step episodes: terabytes).
`collate(max_bytes=...)` overrides it per call; the module value is read at call time."""


class BatchTooLargeError(InputError):
    """The padded `[B, T, ...]` batch would exceed the byte limit; the message gives the numbers
    and the remedy (`max_len`, or batches of episodes of similar length). Exit 2 in the CLI."""


class _Episode(NamedTuple):
    """One input episode: its id, its columns flattened to dotted names, its length, and the
    file line of each step when it was read from a file."""

    episode_id: str
    columns: dict[str, Any]
    length: int
    lines: list[int] | None = None


class _Row(NamedTuple):
    """One output row: steps [start, stop) of episode `episode`."""

    episode: int
    start: int
    stop: int


def collate(
    episodes: Iterable[Any],
    *,
    max_len: int | None = None,
    fields: Iterable[str] | None = None,
    varying_dims: Mapping[str, int] | None = None,
    max_bytes: int | None = None,
    sparse: Iterable[str] | None = None,
) -> dict[str, np.ndarray]:
    """Collate episodes (`Episode` objects or mappings of columns) into `[B, T, ...]` arrays.

    `fields` limits the collated columns (a group name such as `observation` selects all its
    modalities); the per-row keys and `mask` are always produced. `varying_dims` maps a
    varying-size column to how many of its leading per-step dims vary (default: all of them);
    its `<name>_mask` then covers only those dims. Before allocating, the padded size is
    estimated: over `max_bytes` (default `MAX_BATCH_BYTES`) raises `BatchTooLargeError`.
    `sparse` names the columns (or groups) only some steps carry, each collated with its
    `<name>_present` mask; given, it makes every other column required on every step
    (`MissingFieldError` naming the step, episode and line). None keeps the columns as the
    episodes hold them (a float absent on a step is NaN there).
    """
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)
                                or max_len < 1):
        raise ValueError(f"max_len must be a positive int, got {max_len!r}")
    eps = [_episode(i, ep) for i, ep in enumerate(episodes)]
    if not eps:
        raise ContractError(Problem("episodes", "at least one episode", "none",
                                    "nothing to collate"))
    groups = None if sparse is None else list(dict.fromkeys(sparse))
    names = _select(eps, fields, groups)
    sparse_names = _members(names, groups or ())
    rows = _plan(eps, max_len)
    nt = max(r.stop - r.start for r in rows)
    limit = MAX_BATCH_BYTES if max_bytes is None else max_bytes
    cell = _bytes_per_step(eps, names, varying_dims, sparse_names)
    if len(rows) * nt * cell > limit:
        raise BatchTooLargeError(_too_large(eps, len(rows), nt, cell, limit))
    out: dict[str, np.ndarray] = {}
    present: dict[str, np.ndarray] = {}
    mask = _mask(rows, nt)
    for name in names:
        if name in sparse_names:
            out[name], present[name] = _collate_sparse(name, eps, rows, nt)
        elif _is_varying(eps[0].columns[name]):
            depth = (varying_dims or {}).get(name)
            out[name], out[f"{name}_mask"] = _collate_varying(name, eps, rows, nt, depth)
        else:
            out[name] = _collate_fixed(name, eps, rows, nt)
            if groups is not None:
                _check_carried(name, out[name], mask, eps, rows)
    for group in groups or ():
        members = [present[n] for n in names if n in sparse_names and _in_group(n, group)]
        out[f"{group}_present"] = np.logical_and.reduce(members) if members else \
            np.zeros_like(mask)
    out["mask"] = mask
    out["episode_id"] = np.array([eps[r.episode].episode_id for r in rows], dtype=np.str_)
    if "policy_version" in eps[0].columns:
        out["policy_version"] = _oldest_versions(eps, rows)
    out["next_value"] = _next_values(eps, rows)
    return out


# -- input episodes ------------------------------------------------------------------------

def _episode(index: int, episode: Any) -> _Episode:
    """Accept an `Episode` (has `.columns` and `.episode_id`) or a plain mapping of columns."""
    columns = getattr(episode, "columns", None)
    if columns is not None and hasattr(episode, "episode_id"):
        episode_id = str(episode.episode_id)
    elif isinstance(episode, Mapping):
        columns = episode
        episode_id = _id_from_columns(index, columns)
    else:
        raise TypeError(f"episodes[{index}]: expected an Episode or a mapping of columns, "
                        f"got {type(episode).__name__}")
    flat = _flatten(columns)
    if not flat:
        raise ContractError(Problem(f"episodes[{index}]", "columns", "no columns", "empty episode"))
    first = flat["reward"] if "reward" in flat else next(iter(flat.values()))
    length = len(first)
    bad = {name: len(col) for name, col in flat.items() if len(col) != length}
    if bad:
        raise ContractError([Problem(f"episodes[{index}].{name}", f"{length} steps", f"{n} steps",
                                     f"episode {quoted(episode_id)}: column length differs")
                             for name, n in bad.items()])
    if length == 0:
        raise ContractError(Problem(f"episodes[{index}]", "at least one step", "0 steps",
                                    f"episode {quoted(episode_id)} is empty"))
    lines = getattr(episode, "lines", None)
    return _Episode(episode_id, flat, length, lines if isinstance(lines, list) else None)


def _id_from_columns(index: int, columns: Mapping[str, Any]) -> str:
    if "episode_id" not in columns:
        raise MissingFieldError("episode_id", columns.keys())
    ids = np.asarray(columns["episode_id"])
    if ids.ndim != 1 or ids.size == 0 or ids.dtype.kind != "U":
        raise ContractError(Problem(f"episodes[{index}].episode_id", "a non-empty string column",
                                    describe(ids), "bad episode_id column"))
    if not _all_equal(ids):
        others = sorted(set(ids.tolist()) - {str(ids[0])})
        raise ContractError(Problem(f"episodes[{index}].episode_id", f"only {quoted(str(ids[0]))}",
                                    f"also {', '.join(map(quoted, others[:3]))}",
                                    "one episode holds several episode ids"))
    return str(ids[0])


def _all_equal(ids: np.ndarray) -> bool:
    """Every string equals the first; compared as code points, which is much faster."""
    if ids.dtype.itemsize == 0:
        return True
    points = ids.view(np.uint32).reshape(len(ids), -1)
    return bool((points == points[0]).all())


def _flatten(columns: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested objects (observation modalities) become dotted names; `info` is left out."""
    flat: dict[str, Any] = {}
    for key, col in columns.items():
        if col.__class__ is np.ndarray:
            flat[prefix + key] = col
        elif isinstance(col, Mapping):
            flat.update(_flatten(col, f"{prefix}{key}."))
        elif prefix or key not in SKIPPED_FIELDS:
            flat[prefix + key] = col
    return flat


def _column_problem(name: str, episode_id: str, col: Any) -> Problem | None:
    """Why a column cannot be collated, or None: it must be an array or a list of T arrays."""
    if isinstance(col, np.ndarray) or (isinstance(col, list) and all(
            isinstance(x, np.ndarray) for x in col)):
        return None
    if isinstance(col, list) and any(x is None for x in col):
        absent = [t for t, x in enumerate(col) if x is None]
        return Problem(name, "a value on every step", f"none on steps {_steps_text(absent)}",
                       f"episode {quoted(episode_id)}: only some steps carry {quoted(name)} (record it on "
                       f"every step, or leave it out of fields)")
    got = f"list of {type(col[0]).__name__}" if isinstance(col, list) and col else describe(col)
    return Problem(name, "a numpy array [T, ...] or a list of T arrays", got,
                   f"episode {quoted(episode_id)}: column cannot be collated")


def _steps_text(steps: list[int]) -> str:
    text = ", ".join(map(str, steps[:5]))
    return f"[{text}{', ...' if len(steps) > 5 else ''}]"


def _is_varying(col: Any) -> bool:
    return isinstance(col, list)


def _select(eps: list[_Episode], fields: Iterable[str] | None,
            sparse: list[str] | None = None) -> list[str]:
    """The columns to collate into `[B, T, ...]`, in the first episode's order (a sparse column
    the first episode lacks altogether: in the order of the first episode that has it)."""
    first = eps[0].columns
    available = [n for n in first if n not in ROW_FIELDS]
    if fields is None:
        names = list(available)
        for wanted in sparse or ():
            if not any(_in_group(n, wanted) for n in names):
                names += _carried_anywhere(eps, wanted)
    else:
        names = []
        for field in fields:
            if field in SKIPPED_FIELDS:
                raise ContractError(Problem(field, "a tensor column", "free-form objects",
                                            "info is never collated"))
            if field in DERIVED_FIELDS:
                continue
            group = [n for n in available if _in_group(n, field)]
            base = field.removesuffix("_mask")
            if not group and base != field and _is_varying(first.get(base)):
                group = [base]  # `<name>_mask` comes with its varying column
            if not group and sparse and field in sparse:
                group = _carried_anywhere(eps, field)
            if not group:
                raise MissingFieldError(field, {*first, "mask", "episode_id", "next_value"})
            names += [n for n in group if n not in names]
    _check_same_columns(eps, names, _members(names, sparse or ()), strict=sparse is not None)
    return names


def _in_group(name: str, group: str) -> bool:
    """`name` is the column `group` or one of its modalities (`group.image`)."""
    return name == group or name.startswith(f"{group}.")


def _members(names: list[str], groups: Iterable[str]) -> set[str]:
    """The collated columns that belong to one of the sparse `groups`."""
    groups = list(groups)
    return {n for n in names if any(_in_group(n, g) for g in groups)}


def _carried_anywhere(eps: list[_Episode], group: str) -> list[str]:
    """The columns of `group` in the first episode that has any (a sparse column the first
    episode never carries); MissingFieldError when no episode carries it at all."""
    for ep in eps:
        found = [n for n in ep.columns if n not in ROW_FIELDS and _in_group(n, group)]
        if found:
            return found
    raise MissingFieldError(group, {*eps[0].columns, "mask", "episode_id", "next_value"},
                            "no step of any episode carries it")


def _check_same_columns(eps: list[_Episode], names: list[str], sparse: Set[str] = frozenset(),
                        *, strict: bool = False) -> None:
    """Every episode has each column, of one kind. A `sparse` column may be absent on any step
    (`_collate_sparse` checks it); with `strict`, a column some step lacks is MissingFieldError."""
    problems = []
    for name in names:
        if name in sparse:
            continue
        if strict:
            _check_list_carried(name, eps[0])
        problem = _column_problem(name, eps[0].episode_id, eps[0].columns[name])
        if problem is not None:
            problems.append(problem.under("episodes[0]"))
    if problems:
        raise ContractError(problems)
    for name in names:
        if name in sparse:
            continue
        fixed = eps[0].columns[name].__class__ is np.ndarray
        for i, ep in enumerate(eps):
            col = ep.columns.get(name)
            if fixed and col.__class__ is np.ndarray:
                continue  # the common case, checked cheaply
            if col is None:
                if strict:
                    raise _missing(name, ep, 0)
                problems.append(Problem(f"episodes[{i}].{name}", f"a {quoted(name)} column like "
                                        f"episode {quoted(eps[0].episode_id)}", "no such column",
                                        f"episode {quoted(ep.episode_id)} lacks a column"))
                continue
            if strict:
                _check_list_carried(name, ep)
            if (problem := _column_problem(name, ep.episode_id, col)) is not None:
                problems.append(problem.under(f"episodes[{i}]"))
            elif _is_varying(col) != _is_varying(eps[0].columns[name]):
                problems.append(Problem(f"episodes[{i}].{name}", _kind(eps[0].columns[name]),
                                        _kind(col),
                                        f"episode {quoted(ep.episode_id)}: column kind differs"))
    if problems:
        raise ContractError(problems)


def _check_list_carried(name: str, ep: _Episode) -> None:
    """A column held as a list (not a float) with None on the steps that lack it: the first
    such step is MissingFieldError."""
    col = ep.columns.get(name)
    if isinstance(col, list):
        absent = next((t for t, x in enumerate(col) if x is None), None)
        if absent is not None:
            raise _missing(name, ep, absent)


def _missing(name: str, ep: _Episode, index: int) -> MissingFieldError:
    """`name` is absent on step `index` of `ep`: the error names the step, episode and line,
    and the fields that step does carry."""
    steps = ep.columns.get("step")
    step = int(steps[index]) if isinstance(steps, np.ndarray) and steps.dtype.kind in "iu" \
        else index
    have = {key.split(".")[0] for key, col in ep.columns.items() if _carried(col, index)}
    reason = ""
    if name.split(".")[0] == "next_observation":
        reason = ("a sampler records it on an episode's last step only; the op \"next\" "
                  "computes it for every step: {\"op\": \"next\", \"from\": [\"observation\", "
                  "\"next_observation\"]}")
    line = ep.lines[index] if ep.lines is not None and index < len(ep.lines) else None
    return MissingFieldError(name, have, reason, where=f"on step {step} of episode "
                             f"{quoted(ep.episode_id)}", line=line)


def _carried(col: Any, index: int) -> bool:
    """Whether step `index` carries this column (a float NaN on every element, or None, is
    the mark of a step without it)."""
    if isinstance(col, np.ndarray):
        value = col[index]
        return not (col.dtype.kind == "f" and np.size(value) and np.isnan(value).all())
    if isinstance(col, list):
        return col[index] is not None
    return True


def _check_carried(name: str, out: np.ndarray, mask: np.ndarray, eps: list[_Episode],
                   rows: list[_Row]) -> None:
    """A collated float column must hold a value on every real step: NaN there marks a step
    that lacks the field (`Episode` keeps absent floats as NaN), which is MissingFieldError."""
    if out.dtype.kind != "f" or out.size == 0 or math.prod(out.shape[2:]) == 0:
        return
    cells = out.reshape(*mask.shape, -1)
    if not (np.isnan(cells[..., 0]) & mask).any():
        return  # the common case: one look at each step's first element
    absent = np.isnan(cells).all(axis=-1) & mask  # a NaN among values is not absence
    if absent.any():
        b, t = (int(i) for i in np.argwhere(absent)[0])
        row = rows[b]
        raise _missing(name, eps[row.episode], row.start + t)


def _kind(col: Any) -> str:
    return "a list of varying-size arrays" if _is_varying(col) else "one [T, ...] array"


def _plan(eps: list[_Episode], max_len: int | None) -> list[_Row]:
    if max_len is None or all(ep.length <= max_len for ep in eps):
        return [_Row(i, 0, ep.length) for i, ep in enumerate(eps)]
    rows = []
    for i, ep in enumerate(eps):
        rows += [_Row(i, s, min(s + max_len, ep.length)) for s in range(0, ep.length, max_len)]
    return rows


def _bytes_per_step(eps: list[_Episode], names: list[str],
                    varying_dims: Mapping[str, int] | None,
                    sparse: set[str] | None = None) -> int:
    """Bytes one padded `[b, t]` cell takes across the output arrays (mask and per-step
    masks included), from the first episode's dtypes and the largest varying shapes."""
    total = 1  # mask
    for name in names:
        col = eps[0].columns.get(name)
        if sparse and name in sparse:
            dtype, trail = _sparse_template(name, eps)
            total += math.prod(trail) * dtype.itemsize + 1  # and its `_present` mask
        elif _is_varying(col):
            steps = [a for ep in eps for a in ep.columns[name]]
            if not steps:
                continue
            ndim = steps[0].ndim
            biggest = [max(a.shape[d] if a.ndim > d else 0 for a in steps) for d in range(ndim)]
            depth = (varying_dims or {}).get(name, ndim)
            total += int(np.prod(biggest)) * steps[0].dtype.itemsize
            total += int(np.prod(biggest[:max(0, min(depth, ndim))]))
        else:
            col = np.asarray(col)
            widest = max(np.asarray(ep.columns[name]).dtype.itemsize for ep in eps)
            total += int(np.prod(col.shape[1:])) * widest
    return total


def _too_large(eps: list[_Episode], b: int, t: int, cell: int, limit: int) -> str:
    """The refusal: the padded size, how much of it is data, and a `max_len` that fits (the
    largest power of two whose rows are at least half real steps, else the largest that fits)."""
    lengths = np.array([ep.length for ep in eps], dtype=np.int64)
    steps, longest = int(lengths.sum()), int(lengths.max())
    fits = dense = None
    size = 1 << longest.bit_length()
    while size >= 1 and dense is None:
        cells = int(np.ceil(lengths / size).sum()) * min(size, longest)
        if cells * cell <= limit:
            fits = fits or size
            dense = size if 2 * steps >= cells else None
        size >>= 1
    suggested = dense or fits
    remedy = (f"pass max_len (--max-len {suggested}) to split long episodes into rows of at "
              f"most {suggested} steps, or collate episodes of similar length in separate "
              f"batches (buckets)" if suggested is not None else
              "the steps alone exceed the limit: collate fewer episodes per batch")
    return (f"padded batch [B={b}, T={t}] would take {bytes_text(b * t * cell)} "
            f"({steps} real steps fill {100 * steps / (b * t):.2g}% of it), more than "
            f"MAX_BATCH_BYTES = {bytes_text(limit)}; {remedy}")


def bytes_text(n: int) -> str:
    """A byte count for a message: `1.5 GiB`."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


# -- columns -------------------------------------------------------------------------------

def _collate_fixed(name: str, eps: list[_Episode], rows: list[_Row], nt: int,
                   cols: list[np.ndarray] | None = None) -> np.ndarray:
    """Copy each row's slice into one preallocated `[B, T, ...]` array; zero the padding.
    `cols`: each episode's column (default: the episodes' own `name` column)."""
    if cols is None:
        cols = [ep.columns[name] for ep in eps]
    dtype, trail = cols[0].dtype, cols[0].shape[1:]
    if any(c.dtype is not dtype or c.shape[1:] != trail for c in cols):  # cheap test first
        dtype = _common_dtype(name, eps, [c.dtype for c in cols])
        bad = [Problem(f"episodes[{i}].{name}", _shape_text(trail), describe(c),
                       f"episode {quoted(eps[i].episode_id)}: per-step shape differs")
               for i, c in enumerate(cols) if c.shape[1:] != trail]
        if bad:
            raise ContractError(bad)
    out = np.empty((len(rows), nt, *trail), dtype=dtype)
    zeros = np.zeros((nt, *trail), dtype=dtype)
    pieces = []  # each row's steps then its padding, written by one C-level concatenate
    for episode, start, stop in rows:
        col, n = cols[episode], stop - start
        pieces.append(col if n == len(col) else col[start:stop])
        if n < nt:
            pieces.append(zeros[:nt - n])
    np.concatenate(pieces, out=out.reshape(len(rows) * nt, *trail), casting="safe")
    return out


def _collate_sparse(name: str, eps: list[_Episode], rows: list[_Row], nt: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """A column only some steps carry: `[B, T, ...]` (NaN for floats, else 0, where a step does
    not carry it; 0 on padding) and the `[B, T]` mask of the steps that do."""
    dtype, trail = _sparse_template(name, eps)
    absent = np.nan if dtype.kind == "f" else 0
    cols: list[np.ndarray] = []
    presents: list[np.ndarray] = []
    for ep in eps:
        col, n = ep.columns.get(name), ep.length
        present: np.ndarray
        if isinstance(col, np.ndarray):
            present = np.ones(n, bool)
            if col.dtype.kind == "f" and col.size:
                present = np.asarray(~np.isnan(col.reshape(n, -1)).all(axis=1))
        elif isinstance(col, list):
            present = np.fromiter((v is not None for v in col), bool, n)
            values = [np.asarray(v) for v in col if v is not None]
            if any(v.shape != trail for v in values):
                shapes = sorted({_shape_text(v.shape) for v in values})
                raise ContractError(Problem(name, _shape_text(trail), ", ".join(shapes),
                                            f"episode {quoted(ep.episode_id)}: per-step shape "
                                            f"differs"))
            stacked = np.stack(values) if values else np.empty((0, *trail), dtype)
            col = np.full((n, *trail), absent if stacked.dtype.kind == "f" else 0, stacked.dtype)
            col[present] = stacked  # its own dtype: `_collate_fixed` refuses one that differs
        else:
            col = np.full((n, *trail), absent, dtype)
            present = np.zeros(n, bool)
        cols.append(col)
        presents.append(present)
    return (_collate_fixed(name, eps, rows, nt, cols),
            _collate_fixed(f"{name}_present", eps, rows, nt, presents))


def _sparse_template(name: str, eps: list[_Episode]) -> tuple[np.dtype, tuple[int, ...]]:
    """The dtype and per-step shape of a sparse column, from the first step that carries it."""
    for ep in eps:
        col = ep.columns.get(name)
        if isinstance(col, np.ndarray):
            return col.dtype, col.shape[1:]
        for value in col or ():
            if value is not None:
                value = np.asarray(value)
                return value.dtype, value.shape
    raise MissingFieldError(name, eps[0].columns, "no step of any episode carries it")


def _shape_text(trail: tuple[int, ...]) -> str:
    return "[" + ", ".join(["T", *map(str, trail)]) + "]"


def _collate_varying(name: str, eps: list[_Episode], rows: list[_Row], nt: int,
                     depth: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Zero-pad varying-size per-step arrays to the batch maximum, with their own mask."""
    cols = [ep.columns[name] for ep in eps]
    steps = [a for col in cols for a in col]
    ndims = {a.ndim for a in steps}
    if len(ndims) != 1:
        raise ContractError(Problem(name, "per-step arrays of one rank",
                                    f"ranks {sorted(ndims)}", "varying column changes rank"))
    ndim = ndims.pop()
    depth = ndim if depth is None else depth
    if not 0 <= depth <= ndim:
        raise ValueError(f"varying_dims[{name!r}] must be in [0, {ndim}], got {depth}")
    dtype = _common_dtype(name, eps, [a.dtype for col in cols for a in col[:1]])
    odd = [a.dtype for a in steps if a.dtype != dtype and not (a.dtype.kind == dtype.kind == "U")]
    if odd:
        raise ContractError(Problem(name, str(dtype), str(odd[0]), "dtype differs between steps"))
    biggest = tuple(max(a.shape[d] for a in steps) for d in range(ndim))
    fixed = {a.shape[depth:] for a in steps}
    if len(fixed) > 1:
        raise ContractError(Problem(name, f"dims after the first {depth} fixed",
                                    f"shapes {sorted(fixed)[:3]}", "a non-varying dim changed"))
    out = np.zeros((len(rows), nt, *biggest), dtype=dtype)
    elem_mask = np.zeros((len(rows), nt, *biggest[:depth]), dtype=bool)
    for b, row in enumerate(rows):
        for t, arr in enumerate(cols[row.episode][row.start:row.stop]):
            at: tuple[int | slice, ...] = (b, t, *map(slice, arr.shape))
            out[at] = arr
            elem_mask[at[:2 + depth]] = True
    return out, elem_mask


def _common_dtype(name: str, eps: list[_Episode], dtypes: Sequence[np.dtype]) -> np.dtype:
    """Dtypes are kept, never promoted; only string widths may differ (the widest wins)."""
    first = dtypes[0]
    if all(d is first or d == first for d in dtypes):  # `is` first: dtype == is slow
        return first
    if all(d.kind == "U" for d in dtypes):
        return np.result_type(*dtypes)
    i = next(i for i, d in enumerate(dtypes) if d != first)
    raise ContractError(Problem(f"episodes[{i}].{name}", f"{first} (as episode "
                                f"{quoted(eps[0].episode_id)})", str(dtypes[i]),
                                f"episode {quoted(eps[i].episode_id)}: dtype differs"))


# -- per-row keys --------------------------------------------------------------------------

def _mask(rows: list[_Row], nt: int) -> np.ndarray:
    lengths = np.array([r.stop - r.start for r in rows])
    return np.arange(nt)[None, :] < lengths[:, None]


def _oldest_versions(eps: list[_Episode], rows: list[_Row]) -> np.ndarray:
    _check_same_columns(eps, ["policy_version"])
    out = np.empty(len(rows), dtype=np.int64)
    for b, row in enumerate(rows):
        out[b] = eps[row.episode].columns["policy_version"][row.start:row.stop].min()
    return out


def _next_values(eps: list[_Episode], rows: list[_Row]) -> np.ndarray:
    """The bootstrap value after each row: next row's first value when cut, else recorded.

    Its dtype is the episodes' `value` (else `next_value`) dtype, never promoted; float32 when
    neither is a float column (then every entry is NaN, unknown)."""
    out = np.full(len(rows), np.nan, dtype=_value_dtype(eps))
    for b, row in enumerate(rows):
        cols = eps[row.episode].columns
        if row.stop < eps[row.episode].length and "value" in cols:
            out[b] = cols["value"][row.stop]
        elif "next_value" in cols:
            out[b] = cols["next_value"][row.stop - 1]
    return out


def _value_dtype(eps: list[_Episode]) -> np.dtype:
    """The float dtype of the episodes' `value` (else `next_value`) column, float32 if none."""
    for name in ("value", "next_value"):
        col = eps[0].columns.get(name)
        dtype = getattr(col, "dtype", None)
        if dtype is not None and dtype.kind == "f":
            return np.dtype(dtype)
    return np.dtype(np.float32)


# -- step columns of many episodes, grouped -----------------------------------------------------

def episodes_of(columns: Mapping[str, Any], ids: np.ndarray) -> list[dict[str, Any]]:
    """The rows of `columns` (steps of several episodes, as a channel's segments hold them)
    grouped by episode id, in order of first appearance, each episode's steps in row order: one
    mapping of columns per episode, what `collate` takes."""
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    codes = rank[inverse.reshape(-1)]
    order = np.argsort(codes, kind="stable")
    bounds = np.cumsum(np.bincount(codes, minlength=len(first)))[:-1]
    return [_take(columns, rows) for rows in np.split(order, bounds)]


def _take(columns: Mapping[str, Any], rows: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, column in columns.items():
        if isinstance(column, Mapping):
            out[name] = _take(column, rows)
        elif isinstance(column, np.ndarray):
            taken = column[rows]
            if taken.dtype.kind == "f" and np.isnan(taken).all():
                continue  # no step of this episode carries it (as an `Episode` read from a file)
            out[name] = taken
        else:
            picked = [column[i] for i in rows.tolist()]
            strings = picked and all(isinstance(v, str) for v in picked)
            out[name] = np.array(picked, dtype=np.str_) if strings else picked
    return out
