"""The ops a field map may use (docs/contract.md §7): the registry, each built-in op, and the
lossless cast.

An op (`Op`, docs/field-map.md) is a function `fn(inputs, columns, **args) -> array` run on
collated `[B, T, ...]` arrays, with a declared number of sources and checked arguments. The
registry is fixed except for what Python code adds with `register_op`; a map file can only name
ops, never define them.
`gyre_contract.trainer._fieldmap` parses maps and runs them through `get_op` and `run_op`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gyre_contract.core._dims import DTYPES, FLOAT_EXACT_INT, INT_DTYPES
from gyre_contract.core._errors import (
    ContractError,
    FieldMapError,
    MissingFieldError,
    Problem,
    describe,
)
from gyre_contract.core._text import number_text
from gyre_contract.trainer import _collation as collation
from gyre_contract.trainer._advantages import TRUNCATION_MODES, Truncation, discounted_returns, gae
from gyre_contract.trainer._tokenops import TOKEN_OPS

# -- what an op is ------------------------------------------------------------------------

OpFunction = Callable[..., Any]
"""`fn(inputs: list[np.ndarray], columns: Mapping[str, Any], **args) -> np.ndarray`."""

ArgCheck = Callable[[Any], str | None]
"""Returns why an argument value is wrong, or None when it is fine."""

Describer = Callable[[str, "tuple[str, ...]", Mapping[str, Any]], str]
"""`describe(target, sources, args) -> str`: what an op does to make `target`, in plain terms
("done ← terminated OR truncated"); "" when there is nothing worth saying (a same-name rename)."""

Reads = Callable[["tuple[str, ...]"], "tuple[str, ...]"]
"""`reads(sources) -> column names`: the columns an op reads besides its sources (a token op's
`response_mask`), given the names of its sources (`()` for a `then` step)."""


@dataclass(frozen=True)
class Op:
    """One registered op: its function, how many sources it takes, its arguments.

    `sources` is "one", "many" (a list of at least one), "none", or a tuple naming each source
    position (a fixed-length list). `args` maps each argument to its check; `required` lists the
    ones a map must give. `args=None` accepts any arguments (ops registered without a signature).
    `describe` says in plain terms what the op makes (the run notes, `FieldMap.describe`); an op
    without one is described by its name, sources and arguments. `reads` names the columns the op
    reads besides its sources, so that they are collated too. A `named` op's function also gets
    `sources=` (the names of its sources, e.g. to find a column's mask by its name); such an op
    needs a named source and so cannot be a `then` step. `sparse` lists the positions of sources
    that only some steps carry (`next`'s final observation): they are collated with a
    `<name>_present` mask instead of being required on every step. `groups`: the function takes
    groups of modalities itself (a dict per source), instead of being refused them.
    """

    name: str
    fn: OpFunction
    sources: str | tuple[str, ...] = "one"
    args: Mapping[str, ArgCheck] | None = field(default_factory=dict)
    required: tuple[str, ...] = ()
    builtin: bool = False
    describe: Describer | None = None
    reads: Reads | None = None
    named: bool = False
    sparse: tuple[int, ...] = ()
    groups: bool = False

    def text(self, target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
        """What this op does to make `target` from `sources` with `args`, in plain terms."""
        if self.describe is not None:
            return self.describe(target, sources, args)
        listed = [*sources, *(f"{k}={number_text(v)}" for k, v in args.items())]
        return f"{target} ← {self.name}({', '.join(listed)})"

    def columns_read(self, sources: tuple[str, ...]) -> tuple[str, ...]:
        """The columns this op reads besides `sources` (none unless it declares `reads`)."""
        return self.reads(sources) if self.reads is not None else ()


# -- argument checks -----------------------------------------------------------------------

def _rate(value: Any) -> str | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
    return None if ok else f"a number in [0, 1], got {json.dumps(value)}"


def _choice(*options: str) -> ArgCheck:
    def check(value: Any) -> str | None:
        if value in options:
            return None
        return f"one of {', '.join(map(json.dumps, options))}, got {json.dumps(value)}"
    return check


def check_dtype(value: Any) -> str | None:
    """Why `value` is not a dtype a map may cast to, or None when it is one."""
    if value in DTYPES and value != "bfloat16":
        return None
    known = [d for d in DTYPES if d != "bfloat16"]
    return f"one of {', '.join(known)}, got {json.dumps(value)}"


def _int(value: Any) -> str | None:
    ok = isinstance(value, int) and not isinstance(value, bool)
    return None if ok else f"an integer, got {json.dumps(value)}"


def _nonzero_int(value: Any) -> str | None:
    return _int(value) or (None if value != 0 else "a non-zero integer, got 0")


def _int_list(value: Any) -> str | None:
    ok = isinstance(value, list) and all(_int(v) is None for v in value)
    return None if ok else f"a list of integers, got {json.dumps(value)}"


def _shape(value: Any) -> str | None:
    ok = isinstance(value, list) and all(_int(v) is None or v in ("B", "T") for v in value)
    return None if ok else f'a list of integers, -1, "B" or "T", got {json.dumps(value)}'


def _scalar(value: Any) -> str | None:
    ok = isinstance(value, (bool, int, float, str)) and not (
        isinstance(value, float) and not math.isfinite(value))
    return None if ok else f"a JSON number, bool or string, got {json.dumps(value)}"


# -- built-in ops --------------------------------------------------------------------------

def _rename(inputs: list[Any], columns: Mapping[str, Any]) -> Any:
    return inputs[0]


def _cast_op(inputs: list[Any], columns: Mapping[str, Any], *, dtype: str) -> Any:
    return cast_array(inputs[0], dtype)


def _any(inputs: list[Any], columns: Mapping[str, Any]) -> np.ndarray:
    return np.logical_or.reduce(_bools(inputs, "any"))


def _all(inputs: list[Any], columns: Mapping[str, Any]) -> np.ndarray:
    return np.logical_and.reduce(_bools(inputs, "all"))


def _not(inputs: list[Any], columns: Mapping[str, Any]) -> np.ndarray:
    return ~_bools(inputs, "not")[0]


def _and_not(inputs: list[Any], columns: Mapping[str, Any]) -> np.ndarray:
    """`flag AND NOT exclude`: RLDS truncated = is_last AND NOT is_terminal."""
    flag, exclude = _bools(inputs, "and_not")
    return flag & ~exclude


def _bools(inputs: list[Any], op: str) -> list[np.ndarray]:
    shapes = {x.shape for x in inputs}
    for x in inputs:
        if x.dtype != np.bool_:
            raise ContractError(Problem(op, "bool arrays", describe(x), f"op {op!r} needs bools"))
    if len(shapes) > 1:
        raise ContractError(Problem(op, "arrays of one shape", f"shapes {sorted(shapes)}",
                                    f"op {op!r} needs equal shapes"))
    return inputs


def _transpose(inputs: list[Any], columns: Mapping[str, Any], *, axes: list[int]) -> np.ndarray:
    x = inputs[0]
    if sorted(axes) != list(range(x.ndim)):
        raise ContractError(Problem("transpose", f"a permutation of 0..{x.ndim - 1} (axes of the "
                                    f"whole [B, T, ...] array)", str(axes), "bad axes"))
    return np.ascontiguousarray(np.transpose(x, axes))


def _reshape(inputs: list[Any], columns: Mapping[str, Any], *, shape: list[Any]) -> np.ndarray:
    x = inputs[0]
    sizes = {"B": x.shape[0], "T": x.shape[1] if x.ndim > 1 else None}
    target = [sizes.get(d, d) if isinstance(d, str) else d for d in shape]
    try:
        return x.reshape(target)
    except (ValueError, TypeError) as err:
        raise ContractError(Problem("reshape", f"a shape holding {x.size} elements",
                                    str(shape), f"cannot reshape {describe(x)}: {err}")) from err


def _squeeze(inputs: list[Any], columns: Mapping[str, Any], *, axis: int) -> np.ndarray:
    x = inputs[0]
    if not -x.ndim <= axis < x.ndim or x.shape[axis] != 1:
        raise ContractError(Problem("squeeze", f"axis {axis} of size 1", describe(x),
                                    "cannot squeeze"))
    return np.squeeze(x, axis)


def _unsqueeze(inputs: list[Any], columns: Mapping[str, Any], *, axis: int) -> np.ndarray:
    x = inputs[0]
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise ContractError(Problem("unsqueeze", f"an axis in [{-x.ndim - 1}, {x.ndim}]",
                                    str(axis), "cannot unsqueeze"))
    return np.expand_dims(x, axis)


def _shift(inputs: list[Any], columns: Mapping[str, Any], *, by: int, fill: Any) -> np.ndarray:
    """x[t - by] within each row; steps whose source lies outside the row get the map's `fill`."""
    x, mask = inputs[0], _need(columns, "mask")
    nt = x.shape[1]
    fill_value = cast_array(np.asarray(fill), x.dtype.name if x.dtype.kind != "U" else "string")
    out = np.zeros_like(x)
    src_ok = np.zeros_like(mask)
    if abs(by) < nt:
        dst, src = (slice(by, None), slice(None, nt - by)) if by > 0 else \
            (slice(None, nt + by), slice(-by, None))
        out[:, dst] = x[:, src]
        src_ok[:, dst] = mask[:, src]
    tail = (slice(None), slice(None)) + (None,) * (x.ndim - 2)
    out = np.where(src_ok[tail], out, fill_value)
    return np.where(mask[tail], out, np.zeros((), x.dtype))


def _next(inputs: list[Any], columns: Mapping[str, Any], *,
          sources: tuple[str, ...]) -> Any:
    """The next step's value within each episode (`next.observation` from `observation`):
    x[t + 1] on each real step but a row's last; there, the next row's first x for a row cut by
    `max_len`, else `final` (the recorded `next_observation`) on the episode's last step.
    Padding gets 0. An episode whose last step carries no `final` is an error naming it:
    nothing is filled. `final` may be absent on every other step (its `<name>_present` mask,
    from collation, says where it is). Groups of modalities are taken modality by modality."""
    value, final = inputs
    present = columns.get(f"{sources[1]}_present")
    if isinstance(value, Mapping) or isinstance(final, Mapping):
        if not (isinstance(value, Mapping) and isinstance(final, Mapping)) \
                or set(value) != set(final):
            raise ContractError(Problem(
                "next", f"{sources[1]} with the modalities of {sources[0]}",
                f"{_modalities_text(final)} and {_modalities_text(value)}",
                "the final value must have the structure of the value it follows"))
        return {k: _next_one(value[k], final[k], present, columns, sources, k) for k in value}
    return _next_one(value, final, present, columns, sources)


def _modalities_text(x: Any) -> str:
    return f"modalities [{', '.join(sorted(x))}]" if isinstance(x, Mapping) else describe(x)


def _next_one(value: Any, final: Any, present: Any, columns: Mapping[str, Any],
              sources: tuple[str, ...], modality: str | None = None) -> np.ndarray:
    mask = _need(columns, "mask")
    value, final = np.asarray(value), np.asarray(final)
    name = sources[1] if modality is None else f"{sources[1]}.{modality}"
    if value.shape[:2] != mask.shape or final.shape != value.shape:
        raise ContractError(Problem(name, f"the shape of {sources[0]}, [B, T, ...] with [B, T] "
                                    f"= {list(mask.shape)}", f"{describe(final)} and "
                                    f"{describe(value)}", "next: shapes differ"))
    if final.dtype != value.dtype:
        raise ContractError(Problem(name, f"{sources[0]}'s dtype {value.dtype}",
                                    str(final.dtype), "next: dtypes differ (never promoted)"))
    if present is None:  # columns collated without `sparse`: a float absent on a step is NaN
        present = ~np.isnan(final).reshape(*mask.shape, -1).all(axis=-1) \
            if final.dtype.kind == "f" and final.size else np.ones(mask.shape, bool)
    b_size, t_size = mask.shape
    lengths = mask.sum(axis=1)
    rows, last = np.arange(b_size), np.maximum(lengths - 1, 0)
    cut = np.zeros(b_size, bool)  # a row split by max_len goes on in the next row
    ids = columns.get("episode_id")
    if ids is not None and b_size > 1:
        ids = np.asarray(ids)
        cut[:-1] = (ids[:-1] == ids[1:]) & (lengths[:-1] == t_size)
    ends = (lengths > 0) & ~cut
    lacking = ends & ~np.asarray(present, bool)[rows, last]
    if lacking.any():
        raise _no_final(name, sources, rows[lacking], last, columns)
    out = np.zeros_like(value)
    out[:, :-1] = value[:, 1:]
    out[rows[cut], last[cut]] = value[rows[cut] + 1, 0]
    out[rows[ends], last[ends]] = final[rows[ends], last[ends]]
    tail = mask.reshape(mask.shape + (1,) * (value.ndim - 2))
    return np.where(tail, out, np.zeros((), value.dtype))


def _no_final(name: str, sources: tuple[str, ...], rows: np.ndarray, last: np.ndarray,
              columns: Mapping[str, Any]) -> ContractError:
    """The episodes whose last step carries no final value, named (at most 5 shown)."""
    ids = columns.get("episode_id")
    term, trunc = columns.get("terminated"), columns.get("truncated")
    flags = (term, trunc) if term is not None and trunc is not None \
        and np.shape(term)[:1] == (len(last),) else None
    shown = []
    for b in rows[:5].tolist():
        state = ""
        if flags is not None:
            term, trunc = flags
            t = int(last[b])
            state = ", terminated" if term[b, t] else ", truncated" if trunc[b, t] else ", open"
        episode = f"{str(ids[b])!r} " if ids is not None else ""
        shown.append(f"{episode}(row {b}{state})")
    more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
    return ContractError(Problem(
        name, f"{sources[1]} on the last step of each episode (what follows its last step)",
        f"none on the last step of {len(rows)} episode{'s' if len(rows) != 1 else ''}: "
        f"{', '.join(shown)}{more}",
        f"next: the {sources[0]} after an episode's last step is unknown (nothing is filled: "
        f"record {sources[1]} on that step, as Recorder does on done steps and on the last "
        f"step of record_steps, or leave the episode out of the batch)"))


def _sum(inputs: list[Any], columns: Mapping[str, Any], *, axis: int) -> np.ndarray:
    x = inputs[0]
    _check_axis("sum", x, axis)
    return x.sum(axis=axis, dtype=x.dtype if x.dtype.kind == "f" else None)


def _masked_sum(inputs: list[Any], columns: Mapping[str, Any], *, axis: int) -> np.ndarray:
    """Sum over real elements only, e.g. a sequence's log-prob from per-token log-probs."""
    x, mask = inputs
    _check_axis("masked_sum", x, axis)
    if mask.dtype != np.bool_ or mask.shape != x.shape[:mask.ndim]:
        raise ContractError(Problem("masked_sum", f"a bool mask of shape {list(x.shape)} or a "
                                    f"leading part of it", describe(mask), "bad mask"))
    where = mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
    zero = np.zeros((), x.dtype)
    return np.where(where, x, zero).sum(axis=axis, dtype=x.dtype if x.dtype.kind == "f" else None)


def _check_axis(op: str, x: np.ndarray, axis: int) -> None:
    if not (2 <= axis < x.ndim or 2 - x.ndim <= axis < 0):
        raise ContractError(Problem(op, f"a per-step axis of {describe(x)} (not B or T)",
                                    str(axis), "bad axis"))


def _per_step(inputs: list[Any], columns: Mapping[str, Any]) -> np.ndarray:
    """A per-row column `[B, ...]` (`episode_id`) repeated on each step: `[B, T, ...]` for a
    trainer that reads one per step. Padding steps hold 0 / "" (the mask says they are not data).
    The output is bounded by `MAX_BATCH_BYTES` before it is allocated (each `per_step` in a
    chain multiplies the size by T)."""
    x, mask = np.asarray(inputs[0]), _need(columns, "mask")
    if x.ndim == 0 or x.shape[0] != mask.shape[0]:
        raise ContractError(Problem("per_step", f"a per-row column [{mask.shape[0]}, ...]",
                                    describe(x), "cannot repeat on each step"))
    size = math.prod((*mask.shape, *x.shape[1:])) * x.dtype.itemsize
    if size > collation.MAX_BATCH_BYTES:
        raise collation.BatchTooLargeError(
            f"per_step: {describe(x)} repeated on each of T={mask.shape[1]} steps would take "
            f"{collation.bytes_text(size)}, more than MAX_BATCH_BYTES = "
            f"{collation.bytes_text(collation.MAX_BATCH_BYTES)} (a per_step of a per-step "
            f"column multiplies it by T again: apply per_step to per-row columns [B, ...] only)")
    out = np.broadcast_to(x[:, None], (x.shape[0], mask.shape[1], *x.shape[1:]))
    where = mask.reshape(mask.shape + (1,) * (x.ndim - 1))
    return np.where(where, out, np.zeros((), x.dtype))


def _episode_start(inputs: list[Any], columns: Mapping[str, Any]) -> np.ndarray:
    """True on an episode's first step (step == 0): SB3 `episode_starts`, RLDS `is_first`."""
    step, mask = np.asarray(inputs[0]), _need(columns, "mask")
    if step.shape != mask.shape:  # e.g. policy_version: one value per episode, not per step
        raise FieldMapError(f"episode_start needs a per-step column [B, T] {list(mask.shape)} "
                            f"(the step index), got {describe(step)}")
    return (step == 0) & mask


def _gae(inputs: list[Any], columns: Mapping[str, Any], *, gamma: float, lam: float,
         truncation: Truncation = "bootstrap", output: str = "advantage") -> np.ndarray:
    reward, value, terminated, truncated, next_value = inputs
    memo = getattr(columns, "memo", None)  # one map's advantage and return: GAE runs once
    key = ("gae", *map(id, inputs), gamma, lam, truncation)
    found = None if memo is None else memo.get(key)
    if found is None or any(a is not b for a, b in zip(found[0], inputs)):
        adv, ret = gae(reward, value, terminated, truncated, _need(columns, "mask"), next_value,
                       gamma=gamma, lam=lam, truncation=truncation,
                       episode_id=columns.get("episode_id"))
        if memo is not None:
            memo[key] = (list(inputs), (adv, ret))
    else:
        adv, ret = found[1]
        adv, ret = adv.copy(), ret.copy()  # each target its own array
    return adv if output == "advantage" else ret


def _discounted(inputs: list[Any], columns: Mapping[str, Any], *, gamma: float,
                truncation: Truncation = "bootstrap") -> np.ndarray:
    reward, terminated, truncated, next_value = inputs
    return discounted_returns(reward, terminated, truncated, _need(columns, "mask"), next_value,
                              gamma=gamma, truncation=truncation,
                              episode_id=columns.get("episode_id"))


def _mask_op(inputs: list[Any], columns: Mapping[str, Any]) -> np.ndarray:
    """The collated `mask`, or the mask named in `from` (e.g. a varying column's own mask)."""
    return inputs[0] if inputs else _need(columns, "mask")


def _need(columns: Mapping[str, Any], name: str) -> Any:
    if name not in columns:
        raise MissingFieldError(name, columns.keys())
    return columns[name]



# -- descriptions (the run notes) ------------------------------------------------------------

def _d_rename(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    return "" if sources == (target,) else f"{target} ← {sources[0]}"


def _d_cast(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    return f"{target} ← {sources[0]} as {args['dtype']}"


def _joined(word: str) -> Describer:
    def describe(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
        return f"{target} ← {f' {word} '.join(sources)}"
    return describe


def _d_not(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    return f"{target} ← NOT {sources[0]}"


def _d_and_not(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    return f"{target} ← {sources[0]} AND NOT {sources[1]}"


def _with_args(phrase: str) -> Describer:
    """`phrase` formatted with the source as {src} and the arguments by name."""
    def describe(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
        shown = {k: number_text(v) for k, v in args.items()}
        return f"{target} ← " + phrase.format(src=sources[0] if sources else "", **shown)
    return describe


def _truncation_text(args: Mapping[str, Any], next_value: str) -> str:
    if args.get("truncation", "bootstrap") == "terminal":
        return "truncation treated as termination (no bootstrap)"
    return f"truncation bootstrapped from {next_value}"


def _d_gae(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    what = " (advantage + value)" if args.get("output") == "return" else ""
    return (f"{target} by GAE{what} γ={number_text(args['gamma'])} "
            f"λ={number_text(args['lam'])}, {_truncation_text(args, sources[4])}")


def _d_discounted(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    return (f"{target} by discounted return γ={number_text(args['gamma'])}, "
            f"{_truncation_text(args, sources[3])}")


def _d_next(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    return f"{target} ← the next step's {sources[0]} ({sources[1]} on an episode's last step)"


def _d_mask(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    return f"{target} ← {sources[0]}" if sources else f"{target} from padding"


_GAE_SOURCES = ("reward", "value", "terminated", "truncated", "next_value")
_RETURN_SOURCES = ("reward", "terminated", "truncated", "next_value")
_TRUNCATION = _choice(*TRUNCATION_MODES)

_REGISTRY: dict[str, Op] = {
    op.name: op for op in (
        Op("rename", _rename, builtin=True, describe=_d_rename),
        Op("cast", _cast_op, args={"dtype": check_dtype}, required=("dtype",), builtin=True,
           describe=_d_cast),
        Op("any", _any, "many", builtin=True, describe=_joined("OR")),
        Op("all", _all, "many", builtin=True, describe=_joined("AND")),
        Op("not", _not, builtin=True, describe=_d_not),
        Op("and_not", _and_not, ("flag", "exclude"), builtin=True, describe=_d_and_not),
        Op("transpose", _transpose, args={"axes": _int_list}, required=("axes",), builtin=True,
           describe=_with_args("{src} transposed to axes {axes}")),
        Op("reshape", _reshape, args={"shape": _shape}, required=("shape",), builtin=True,
           describe=_with_args("{src} reshaped to {shape}")),
        Op("squeeze", _squeeze, args={"axis": _int}, required=("axis",), builtin=True,
           describe=_with_args("{src} without its axis {axis}")),
        Op("unsqueeze", _unsqueeze, args={"axis": _int}, required=("axis",), builtin=True,
           describe=_with_args("{src} with a new axis {axis}")),
        Op("shift", _shift, args={"by": _nonzero_int, "fill": _scalar}, required=("by", "fill"),
           builtin=True,
           describe=_with_args("{src} shifted by {by} steps within each row (else {fill})")),
        Op("next", _next, ("value", "final"), builtin=True, describe=_d_next, named=True,
           sparse=(1,), groups=True),
        Op("episode_start", _episode_start, builtin=True,
           describe=_with_args("{src} == 0 (first step of an episode)")),
        Op("per_step", _per_step, builtin=True,
           describe=_with_args("{src} repeated on each step")),
        Op("sum", _sum, args={"axis": _int}, required=("axis",), builtin=True,
           describe=_with_args("sum of {src} over axis {axis}")),
        Op("masked_sum", _masked_sum, ("values", "mask"), args={"axis": _int},
           required=("axis",), builtin=True,
           describe=lambda t, s, a: f"{t} ← sum of {s[0]} over axis {a['axis']} where {s[1]}"),
        Op("gae", _gae, _GAE_SOURCES,
           args={"gamma": _rate, "lam": _rate, "truncation": _TRUNCATION,
                 "output": _choice("advantage", "return")},
           required=("gamma", "lam"), builtin=True, describe=_d_gae),
        Op("discounted_return", _discounted, _RETURN_SOURCES,
           args={"gamma": _rate, "truncation": _TRUNCATION}, required=("gamma",), builtin=True,
           describe=_d_discounted),
        Op("mask", _mask_op, "none", builtin=True, describe=_d_mask),
        # group_norm, rloo, kl, kl_reward, per_token, pad, concat: their functions, checks and
        # descriptions are in tokenops, which imports nothing of the registry
        *(Op(**spec, builtin=True) for spec in TOKEN_OPS),
    )
}


_GENERATION = [0]
"""Bumped by every `register_op` and `unregister_op`: what a map's derived reads are cached
under (`FieldMap.sources`), with the map's own entries."""


def ops_generation() -> int:
    """A number that changes whenever an op is registered, replaced or removed."""
    return _GENERATION[0]


def known_ops() -> list[str]:
    """Names of every op a map may use, sorted."""
    return sorted(_REGISTRY)


def get_op(name: str) -> Op | None:
    """The registered op called `name`, or None when there is none."""
    return _REGISTRY.get(name)


def step_ops() -> list[str]:
    """Names of the ops a `then` step may use (one unnamed input, not a plain rename), sorted."""
    return sorted(name for name, op in _REGISTRY.items()
                  if op.sources == "one" and name != "rename" and not op.named)


def register_op(
    name: str,
    fn: OpFunction,
    *,
    sources: str | tuple[str, ...] = "one",
    args: Mapping[str, ArgCheck] | Iterable[str] | None = None,
    required: Iterable[str] = (),
    describe: Describer | None = None,
    reads: Iterable[str] | Reads = (),
) -> None:
    """Add an op for maps to use: `fn(inputs, columns, **args) -> array`.

    `inputs` are the arrays named by the spec's `from`, `columns` the collated columns. `args`
    names the accepted arguments (a list of names, or a mapping to check functions); None
    accepts any. `describe(target, sources, args) -> str` says what the op makes, for the run
    notes (default: the op's name with its sources and arguments). `reads` names the columns
    the op reads from `columns` besides its sources (`["response_mask"]`, or a function of the
    source names), so that they are collated too. Built-in ops cannot be replaced;
    re-registering a custom op replaces it.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"op name must be an identifier, got {name!r}")
    if name in _REGISTRY and _REGISTRY[name].builtin:
        raise ValueError(f"op {name!r} is built in and cannot be replaced")
    if sources not in ("one", "many", "none") and not (
            isinstance(sources, tuple) and all(isinstance(s, str) for s in sources)):
        raise ValueError(f'sources must be "one", "many", "none" or a tuple of names, '
                         f"got {sources!r}")
    checks: Mapping[str, ArgCheck] | None
    if args is None or isinstance(args, Mapping):
        checks = args
    else:
        checks = {a: (lambda value: None) for a in args}
    read: Reads | None = None
    if callable(reads):
        read = reads
    elif reads:
        names = tuple(reads)
        if not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"reads must name columns (strings), got {names!r}")
        read = lambda _sources: names  # noqa: E731
    _REGISTRY[name] = Op(name, fn, sources, checks, tuple(required), describe=describe,
                         reads=read)
    _GENERATION[0] += 1


def unregister_op(name: str) -> None:
    """Remove an op added by `register_op` (built-in ops stay)."""
    op = _REGISTRY.get(name)
    if op is None or op.builtin:
        raise ValueError(f"no custom op named {name!r}")
    del _REGISTRY[name]
    _GENERATION[0] += 1


# -- casting -------------------------------------------------------------------------------

def cast_array(x: Any, dtype: str) -> Any:
    """Cast an array (or a dict of modality arrays) to `dtype`, refusing any loss of information.

    Floats narrow to a smaller float width by rounding but must not overflow; a float becomes an
    int only when every value is whole and in range; a number becomes a bool only when it is 0/1.
    """
    if isinstance(x, Mapping):
        return {k: cast_array(v, dtype) for k, v in x.items()}
    x = np.asarray(x)
    if dtype == "string":
        if x.dtype.kind != "U":
            raise _cast_error(x, dtype, "only strings are strings")
        return x
    target = np.dtype(dtype)
    if x.dtype == target:
        return x
    kind = x.dtype.kind
    if kind not in "biuf":
        raise _cast_error(x, dtype, "not a number or bool")
    if kind == "f" and not np.isfinite(x).all():
        raise _cast_error(x, dtype, "not finite")
    if dtype == "bool":
        if not np.isin(x, (0, 1)).all():
            raise _cast_error(x, dtype, "values other than 0 and 1")
    elif dtype in INT_DTYPES:
        if kind == "f" and not (x == np.round(x)).all():
            raise _cast_error(x, dtype, "values with a fractional part")
        info = np.iinfo(target)
        if x.size and (x.min() < info.min or x.max() > info.max):
            raise _cast_error(x, dtype, f"values out of range for {dtype}")
    elif kind in "iu" and x.size and np.abs(x.astype(np.float64)).max() > FLOAT_EXACT_INT[dtype]:
        raise _cast_error(x, dtype, f"integers too large to be exact in {dtype}")
    elif kind == "f" and x.size and np.abs(x).max() > np.finfo(target).max:
        raise _cast_error(x, dtype, f"values out of range for {dtype}")
    return x.astype(target)


def _cast_error(x: np.ndarray, dtype: str, why: str) -> ContractError:
    return ContractError(Problem("cast", f"values that {dtype} holds exactly", describe(x),
                                 f"cast from {x.dtype} to {dtype} would lose information: {why}"))


NEEDS_MASK = frozenset({"gae", "discounted_return", "mask", "shift", "episode_start",
                         "per_step", "next"})
"""Ops that read the collated `mask` even when a map does not name it."""


def run_op(op: Op, inputs: list[Any], columns: Mapping[str, Any], args: Mapping[str, Any],
           sources: tuple[str, ...] = ()) -> Any:
    """Run an op; a one-source op applied to a group of modalities runs once per modality.
    `sources` names the inputs; a `named` op gets them (a token op finds a column's mask so)."""
    if op.named:
        if len(sources) != len(inputs):
            raise FieldMapError(f"op {op.name!r} needs its sources named in the map (it finds "
                                f"their masks by name); it cannot be a `then` step")
        args = {**args, "sources": tuple(sources)}
    if op.sources == "one" and inputs and isinstance(inputs[0], Mapping):
        return {k: op.fn([v], columns, **args) for k, v in inputs[0].items()}
    groups = [i for i, x in enumerate(inputs) if isinstance(x, Mapping)]
    if groups and not op.groups:
        raise ContractError(Problem(op.name, "arrays", "a group of modalities",
                                    f"op {op.name!r} cannot take a group of modalities"))
    return op.fn(inputs, columns, **args)
