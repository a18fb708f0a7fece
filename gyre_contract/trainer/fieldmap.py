"""The field map (`map.json`, docs/contract.md §7): a declarative, reviewable recipe from sample columns to
the trainer's batch.

    {"gyre_field_map": 1,
     "fields": {
       "obs":       {"from": "observation"},
       "action":    {"from": "action", "cast": "int64"},
       "done":      {"op": "any", "from": ["terminated", "truncated"]},
       "advantage": {"op": "gae", "from": ["reward", "value", "terminated", "truncated",
                                           "next_value"], "gamma": 0.99, "lam": 0.95},
       "mask":      {"op": "mask"}}}

Ops run *after* collation, on `[B, T, ...]` arrays: `gae` and `discounted_return` need whole rows,
the `mask` and each row's `next_value`, which only exist once episodes are collated. Every source
name refers to a collated column (`observation`, `observation.image`, `reward`, ...) or to a key
`collate` adds (`mask`, `episode_id`, `policy_version`, `next_value`), never to another target.
Only the fields the map names reach the batch. A missing source raises `MissingFieldError`;
nothing is ever filled with a default. Ops come from a fixed registry; a map can never import,
eval, open a file or reach the network. Python code may add ops with `register_op`.

Keys of a field spec: `op` (default `rename`), `from`, the op's own arguments, and:

- `then`: a chain of at most `MAX_THEN` (8) steps run in order on the op's result, each an object
  `{"op": NAME, ...arguments}` whose op takes exactly one input (cast, not, transpose, reshape,
  squeeze, unsqueeze, shift, episode_start, per_step, sum, or a custom op registered with one
  source; `step_ops()` lists them). A step has no `from`: its input is the result so far. Its
  arguments are checked like a field's. TorchRL's `next.done` `[B, T, 1]`:
  `{"op": "any", "from": ["terminated", "truncated"], "then": [{"op": "unsqueeze", "axis": -1}]}`.
- `cast`: a dtype the final result is cast to, losslessly or refused (after `then`).
- `comment`: free text for reviewers.

`and_not` takes two bool fields, `"from": [flag, exclude]`, and gives `flag AND NOT exclude`:
RLDS `truncated` is `{"op": "and_not", "from": ["is_last", "is_terminal"]}` (the last step of an
episode that did not terminate). `per_step` repeats a per-row column (`episode_id` `[B]`) on
each step, `[B, T]`, for a trainer that reads one per step (RLlib's `eps_id`). A map written
without these keys and ops reads as before.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gyre_contract.core.deprecation import renamed_arguments
from gyre_contract.core.dims import DTYPES, FLOAT_EXACT_INT, INT_DTYPES
from gyre_contract.core.errors import (
    ContractError,
    FieldMapError,
    MissingFieldError,
    Problem,
    describe,
)
from gyre_contract.io.jsonfile import JSONFileError, read_json_file
from gyre_contract.trainer.advantages import TRUNCATION_MODES, discounted_returns, gae
from gyre_contract.trainer.collation import DERIVED_FIELDS, collate

FORMAT_VERSION = 1
COMMON_KEYS = ("op", "from", "then", "cast", "comment")
"""Keys every field spec may hold; anything else must be an argument of its op."""
MAX_THEN = 8
"""Steps a `then` chain may hold at most: a map stays short enough to review."""
MAX_MAP_BYTES = 1024 * 1024
"""A larger map file is refused unread (FieldMapError): a map is a short, reviewed file."""

OpFunction = Callable[..., Any]
"""`fn(inputs: list[np.ndarray], columns: Mapping[str, Any], **args) -> np.ndarray`."""

ArgCheck = Callable[[Any], str | None]
"""Returns why an argument value is wrong, or None when it is fine."""


@dataclass(frozen=True)
class Op:
    """One registered op: its function, how many sources it takes, its arguments.

    `sources` is "one", "many" (a list of at least one), "none", or a tuple naming each source
    position (a fixed-length list). `args` maps each argument to its check; `required` lists the
    ones a map must give. `args=None` accepts any arguments (ops registered without a signature).
    """

    name: str
    fn: OpFunction
    sources: str | tuple[str, ...] = "one"
    args: Mapping[str, ArgCheck] | None = field(default_factory=dict)
    required: tuple[str, ...] = ()
    builtin: bool = False


@dataclass(frozen=True)
class Step:
    """One step of a field's `then` chain: a one-input op and its arguments."""

    op: str
    args: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The step as it is written in a map file."""
        return {"op": self.op, **self.args}


@dataclass(frozen=True)
class FieldSpec:
    """One target field of the map: which op, from which sources, with which arguments, then
    which one-input steps, then which cast."""

    target: str
    op: str
    sources: tuple[str, ...]
    args: Mapping[str, Any]
    cast: str | None = None
    comment: str | None = None
    then: tuple[Step, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The spec as it is written in a map file."""
        out: dict[str, Any] = {} if self.op == "rename" else {"op": self.op}
        op = _REGISTRY.get(self.op)
        if self.sources:
            single = op is not None and op.sources in ("one", "none")
            out["from"] = self.sources[0] if single else list(self.sources)
        out.update(self.args)
        if self.then:
            out["then"] = [step.to_dict() for step in self.then]
        if self.cast is not None:
            out["cast"] = self.cast
        if self.comment is not None:
            out["comment"] = self.comment
        return out


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


def _dtype(value: Any) -> str | None:
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
    trainer that reads one per step. Padding steps hold 0 / "" (the mask says they are not data)."""
    x, mask = np.asarray(inputs[0]), _need(columns, "mask")
    if x.ndim == 0 or x.shape[0] != mask.shape[0]:
        raise ContractError(Problem("per_step", f"a per-row column [{mask.shape[0]}, ...]",
                                    describe(x), "cannot repeat on each step"))
    out = np.broadcast_to(x[:, None], (x.shape[0], mask.shape[1], *x.shape[1:]))
    where = mask.reshape(mask.shape + (1,) * (x.ndim - 1))
    return np.where(where, out, np.zeros((), x.dtype))


def _episode_start(inputs: list[Any], columns: Mapping[str, Any]) -> np.ndarray:
    """True on an episode's first step (step == 0): SB3 `episode_starts`, RLDS `is_first`."""
    return (inputs[0] == 0) & _need(columns, "mask")


def _gae(inputs: list[Any], columns: Mapping[str, Any], *, gamma: float, lam: float,
         truncation: str = "bootstrap", output: str = "advantage") -> np.ndarray:
    reward, value, terminated, truncated, next_value = inputs
    adv, ret = gae(reward, value, terminated, truncated, _need(columns, "mask"), next_value,
                   gamma=gamma, lam=lam, truncation=truncation,  # type: ignore[arg-type]
                   episode_id=columns.get("episode_id"))
    return adv if output == "advantage" else ret


def _discounted(inputs: list[Any], columns: Mapping[str, Any], *, gamma: float,
                truncation: str = "bootstrap") -> np.ndarray:
    reward, terminated, truncated, next_value = inputs
    return discounted_returns(reward, terminated, truncated, _need(columns, "mask"), next_value,
                              gamma=gamma, truncation=truncation,  # type: ignore[arg-type]
                              episode_id=columns.get("episode_id"))


def _mask_op(inputs: list[Any], columns: Mapping[str, Any]) -> np.ndarray:
    """The collated `mask`, or the mask named in `from` (e.g. a varying column's own mask)."""
    return inputs[0] if inputs else _need(columns, "mask")


def _need(columns: Mapping[str, Any], name: str) -> Any:
    if name not in columns:
        raise MissingFieldError(name, columns.keys())
    return columns[name]


_GAE_SOURCES = ("reward", "value", "terminated", "truncated", "next_value")
_RETURN_SOURCES = ("reward", "terminated", "truncated", "next_value")
_TRUNCATION = _choice(*TRUNCATION_MODES)

_REGISTRY: dict[str, Op] = {
    op.name: op for op in (
        Op("rename", _rename, builtin=True),
        Op("cast", _cast_op, args={"dtype": _dtype}, required=("dtype",), builtin=True),
        Op("any", _any, "many", builtin=True),
        Op("all", _all, "many", builtin=True),
        Op("not", _not, builtin=True),
        Op("and_not", _and_not, ("flag", "exclude"), builtin=True),
        Op("transpose", _transpose, args={"axes": _int_list}, required=("axes",), builtin=True),
        Op("reshape", _reshape, args={"shape": _shape}, required=("shape",), builtin=True),
        Op("squeeze", _squeeze, args={"axis": _int}, required=("axis",), builtin=True),
        Op("unsqueeze", _unsqueeze, args={"axis": _int}, required=("axis",), builtin=True),
        Op("shift", _shift, args={"by": _nonzero_int, "fill": _scalar}, required=("by", "fill"),
           builtin=True),
        Op("episode_start", _episode_start, builtin=True),
        Op("per_step", _per_step, builtin=True),
        Op("sum", _sum, args={"axis": _int}, required=("axis",), builtin=True),
        Op("masked_sum", _masked_sum, ("values", "mask"), args={"axis": _int},
           required=("axis",), builtin=True),
        Op("gae", _gae, _GAE_SOURCES,
           args={"gamma": _rate, "lam": _rate, "truncation": _TRUNCATION,
                 "output": _choice("advantage", "return")},
           required=("gamma", "lam"), builtin=True),
        Op("discounted_return", _discounted, _RETURN_SOURCES,
           args={"gamma": _rate, "truncation": _TRUNCATION}, required=("gamma",), builtin=True),
        Op("mask", _mask_op, "none", builtin=True),
    )
}


def known_ops() -> list[str]:
    """Names of every op a map may use, sorted."""
    return sorted(_REGISTRY)


def register_op(
    name: str,
    fn: OpFunction,
    *,
    sources: str | tuple[str, ...] = "one",
    args: Mapping[str, ArgCheck] | Iterable[str] | None = None,
    required: Iterable[str] = (),
) -> None:
    """Add an op for maps to use: `fn(inputs, columns, **args) -> array`.

    `inputs` are the arrays named by the spec's `from`, `columns` all collated columns. `args`
    names the accepted arguments (a list of names, or a mapping to check functions); None
    accepts any. Built-in ops cannot be replaced; re-registering a custom op replaces it.
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
    _REGISTRY[name] = Op(name, fn, sources, checks, tuple(required))


def unregister_op(name: str) -> None:
    """Remove an op added by `register_op` (built-in ops stay)."""
    op = _REGISTRY.get(name)
    if op is None or op.builtin:
        raise ValueError(f"no custom op named {name!r}")
    del _REGISTRY[name]


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


# -- the map -------------------------------------------------------------------------------

class FieldMap:
    """A checked field map. Build it with `FieldMap.load(path)` or `FieldMap.from_dict(d)`."""

    def __init__(self, fields: Mapping[str, FieldSpec], *, source: str = "field map") -> None:
        self.fields: dict[str, FieldSpec] = dict(fields)
        self.source = source

    def __repr__(self) -> str:
        return f"FieldMap({self.source!r}, fields=[{', '.join(self.fields)}])"

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> FieldMap:
        """Read and check a `map.json` file (InputError if unreadable, FieldMapError if bad).

        Strict JSON: UTF-8, no NaN/Infinity, no duplicate keys, no lone surrogates, at most
        `MAX_MAP_BYTES`. Nothing in the file is imported, evaluated or opened."""
        path = Path(path)
        try:
            data = read_json_file(path, what="field map", max_bytes=MAX_MAP_BYTES,
                                  limit_name="MAX_MAP_BYTES")
        except JSONFileError as err:
            raise FieldMapError(f"{path}: {err}") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "field map") -> FieldMap:
        """Check a map given as parsed JSON; every problem is reported in one FieldMapError."""
        problems: list[str] = []
        fields: dict[str, FieldSpec] = {}
        if not isinstance(data, Mapping):
            raise FieldMapError(f"{source}: expected a JSON object with keys gyre_field_map and "
                                f"fields, got {_json_type(data)}")
        extra = sorted(set(data) - {"gyre_field_map", "fields", "comment"})
        if extra:
            problems.append(f"unknown top-level keys {extra}; allowed: gyre_field_map, fields, "
                            f"comment")
        version = data.get("gyre_field_map")
        if "gyre_field_map" not in data:
            problems.append(f'not a field map: no "gyre_field_map" key (expected '
                            f'"gyre_field_map": {FORMAT_VERSION})')
        elif version != FORMAT_VERSION or isinstance(version, bool):
            problems.append(f"unsupported field-map version {json.dumps(version)}; this "
                            f"gyre-contract reads version {FORMAT_VERSION}")
        specs = data.get("fields")
        if not isinstance(specs, Mapping) or not specs:
            problems.append(f'"fields" must be a non-empty object mapping each trainer field to '
                            f"its spec, got {_json_type(specs)}")
        else:
            for target, spec in specs.items():
                parsed = _parse_spec(target, spec, problems)
                if parsed is not None:
                    fields[target] = parsed
        if problems:
            raise FieldMapError(_render(source, problems))
        return cls(fields, source=source)

    def to_dict(self) -> dict[str, Any]:
        """The map as JSON-ready data (what `load` reads)."""
        return {"gyre_field_map": FORMAT_VERSION,
                "fields": {t: s.to_dict() for t, s in self.fields.items()}}

    def sources(self) -> list[str]:
        """Every source name the map reads, in first-use order (including `mask` for ops)."""
        names: list[str] = []
        for spec in self.fields.values():
            ops = (spec.op, *(step.op for step in spec.then))
            implicit = ("mask",) if _NEEDS_MASK.intersection(ops) else ()
            for name in (*spec.sources, *implicit):
                if name not in names:
                    names.append(name)
        return names

    def apply(self, columns: Mapping[str, Any]) -> dict[str, Any]:
        """Build every target field from collated `[B, T, ...]` columns (see `collate`).

        A source that names a group (`observation` with columns `observation.image`, ...) is a
        dict of its modalities. Only the targets the map names are returned.
        """
        out: dict[str, Any] = {}
        for target, spec in self.fields.items():
            op = self._registered(target, spec.op)
            inputs = [_source(columns, name) for name in spec.sources]
            value = _run(op, inputs, columns, spec.args)
            for step in spec.then:
                value = _run(self._registered(target, step.op), [value], columns, step.args)
            if spec.cast is not None:
                value = cast_array(value, spec.cast)
            out[target] = value
        return out

    def _registered(self, target: str, name: str) -> Op:
        """The op named `name`; a custom op unregistered since the map was checked is an error."""
        op = _REGISTRY.get(name)
        if op is None:
            raise FieldMapError(f"{self.source}: fields.{target}: op {name!r} is no longer "
                                f"registered; known ops: {', '.join(known_ops())}")
        return op

    @renamed_arguments(model="batch_model")
    def to_train_batch(
        self,
        episodes: Iterable[Any],
        *,
        max_len: int | None = None,
        current_version: int | None = None,
        max_staleness: int | None = None,
        batch_model: Any = None,
    ) -> Any:
        """Collate episodes, apply the map, validate the result as a `TrainBatch` (docs/contract.md §4)."""
        batch = self.build(episodes, max_len=max_len)
        return _validate(batch, batch_model, current_version, max_staleness)

    def build(self, episodes: Iterable[Any], *, max_len: int | None = None) -> dict[str, Any]:
        """Collate only the columns the map reads, then apply the map; not validated."""
        wanted = [n for n in self.sources() if n not in DERIVED_FIELDS]
        return self.apply(collate(episodes, max_len=max_len, fields=wanted))


def _validate(batch: Mapping[str, Any], model: Any, current_version: int | None,
              max_staleness: int | None) -> Any:
    from gyre_contract.core.models import TrainBatch
    from gyre_contract.core.validate import validate_batch

    return validate_batch(batch, model or TrainBatch, current_version=current_version,
                          max_staleness=max_staleness)


_NEEDS_MASK = frozenset({"gae", "discounted_return", "mask", "shift", "episode_start",
                         "per_step"})


def _source(columns: Mapping[str, Any], name: str) -> Any:
    if name in columns:
        return columns[name]
    prefix = f"{name}."
    group = {k[len(prefix):]: v for k, v in columns.items() if k.startswith(prefix)}
    if group:
        return group
    raise MissingFieldError(name, columns.keys())


def _run(op: Op, inputs: list[Any], columns: Mapping[str, Any], args: Mapping[str, Any]) -> Any:
    """Run an op; a one-source op applied to a group of modalities runs once per modality."""
    if op.sources == "one" and inputs and isinstance(inputs[0], Mapping):
        return {k: op.fn([v], columns, **args) for k, v in inputs[0].items()}
    groups = [i for i, x in enumerate(inputs) if isinstance(x, Mapping)]
    if groups:
        raise ContractError(Problem(op.name, "arrays", "a group of modalities",
                                    f"op {op.name!r} cannot take a group of modalities"))
    return op.fn(inputs, columns, **args)


# -- parsing -------------------------------------------------------------------------------

def _parse_spec(target: str, spec: Any, problems: list[str]) -> FieldSpec | None:
    where = f"fields.{target}"
    if not target:
        problems.append("fields: a trainer field name must be non-empty")
        return None
    if not isinstance(spec, Mapping):
        problems.append(f'{where}: expected an object such as {{"from": "..."}}, '
                        f"got {_json_type(spec)}")
        return None
    op_name = spec.get("op", "rename")
    op = _REGISTRY.get(op_name) if isinstance(op_name, str) else None
    if op is None:
        problems.append(f"{where}: unknown op {json.dumps(op_name)}{_did_you_mean(op_name, known_ops())}"
                        f"; known ops: {', '.join(known_ops())}")
        return None
    count = len(problems)
    sources = _parse_sources(where, op, spec, problems)
    args = {k: v for k, v in spec.items() if k not in COMMON_KEYS}
    _check_args(where, op, args, problems)
    cast = spec.get("cast")
    if "cast" in spec and (msg := _dtype(cast)):
        problems.append(f"{where}: cast must be {msg}")
    comment = spec.get("comment")
    if "comment" in spec and not isinstance(comment, str):
        problems.append(f"{where}: comment must be a string, got {_json_type(comment)}")
    then = _parse_then(where, spec["then"], problems) if "then" in spec else ()
    if len(problems) > count:
        return None
    return FieldSpec(target, op.name, sources, args, cast, comment, then)


_STEP_EXAMPLE = '{"op": "unsqueeze", "axis": -1}'


def step_ops() -> list[str]:
    """Names of the ops a `then` step may use (one input, not a plain rename), sorted."""
    return sorted(name for name, op in _REGISTRY.items()
                  if op.sources == "one" and name != "rename")


def _parse_then(where: str, raw: Any, problems: list[str]) -> tuple[Step, ...]:
    """Check a `then` chain: a list of 1 to MAX_THEN one-input steps."""
    if not isinstance(raw, list):
        problems.append(f'{where}: "then" must be a list of steps such as [{_STEP_EXAMPLE}], '
                        f"got {_json_type(raw)}")
        return ()
    if not 1 <= len(raw) <= MAX_THEN:
        problems.append(f'{where}: "then" must hold 1 to {MAX_THEN} steps, got {len(raw)}')
        return ()
    steps = [_parse_step(f"{where}.then[{i}]", item, problems) for i, item in enumerate(raw)]
    return tuple(step for step in steps if step is not None)


def _parse_step(where: str, raw: Any, problems: list[str]) -> Step | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: expected an object such as {_STEP_EXAMPLE}, "
                        f"got {_json_type(raw)}")
        return None
    allowed = ", ".join(step_ops())
    name = raw.get("op")
    op = _REGISTRY.get(name) if isinstance(name, str) else None
    if op is None:
        what = f"unknown op {json.dumps(name)}" if "op" in raw else 'a step needs "op"'
        problems.append(f"{where}: {what}{_did_you_mean(name, step_ops())}; ops a step may use: "
                        f"{allowed}")
        return None
    if op.name not in step_ops():
        why = "does nothing in a chain" if op.name == "rename" else \
            "does not take exactly one input"
        problems.append(f'{where}: op "{op.name}" {why}; a step\'s only input is the result so '
                        f"far; ops a step may use: {allowed}")
        return None
    if "from" in raw:
        problems.append(f'{where}: a step takes no "from": its input is the result so far')
        return None
    count = len(problems)
    args = {k: v for k, v in raw.items() if k != "op"}
    _check_args(where, op, args, problems, common=("op",))
    return Step(op.name, args) if len(problems) == count else None


def _parse_sources(where: str, op: Op, spec: Mapping[str, Any], problems: list[str]
                   ) -> tuple[str, ...]:
    raw = spec.get("from")
    if op.sources == "none":
        if raw is None:
            return ()
        if isinstance(raw, str) and raw:
            return (raw,)
        problems.append(f'{where}: op "{op.name}" takes at most one source name in "from"')
        return ()
    if raw is None:
        problems.append(f'{where}: op "{op.name}" needs "from" ({_sources_text(op)})')
        return ()
    if op.sources == "one":
        if isinstance(raw, str) and raw:
            return (raw,)
        problems.append(f'{where}: op "{op.name}" needs "from" to be one field name, '
                        f"got {json.dumps(raw)}")
        return ()
    if not isinstance(raw, list) or not raw or not all(isinstance(s, str) and s for s in raw):
        problems.append(f'{where}: op "{op.name}" needs "from" to be a list of field names '
                        f"({_sources_text(op)}), got {json.dumps(raw)}")
        return ()
    if isinstance(op.sources, tuple) and len(raw) != len(op.sources):
        problems.append(f'{where}: op "{op.name}" needs {len(op.sources)} sources in "from" '
                        f"({_sources_text(op)}), got {len(raw)}")
        return ()
    return tuple(raw)


def _sources_text(op: Op) -> str:
    if isinstance(op.sources, tuple):
        return "in order: " + ", ".join(op.sources)
    return {"one": "one field name", "many": "a list of field names"}.get(op.sources, "")


def _check_args(where: str, op: Op, args: Mapping[str, Any], problems: list[str], *,
                common: Iterable[str] = COMMON_KEYS) -> None:
    if op.args is None:
        return
    unknown = sorted(set(args) - set(op.args))
    if unknown:
        allowed = sorted({*op.args, *common} - ({"from"} if op.sources == "none" else set()))
        hints = "".join(_did_you_mean(u, allowed) for u in unknown)
        problems.append(f'{where}: op "{op.name}" does not take {", ".join(unknown)}{hints}; '
                        f"allowed keys: {', '.join(allowed)}")
    for name in op.required:
        if name not in args:
            problems.append(f'{where}: op "{op.name}" needs argument "{name}"')
    for name, value in args.items():
        check = op.args.get(name)
        if check is not None and (msg := check(value)):
            problems.append(f'{where}: "{name}" must be {msg}')


def _did_you_mean(name: Any, options: Iterable[str]) -> str:
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" (did you mean {json.dumps(close[0])}?)" if close else ""


def _render(source: str, problems: list[str]) -> str:
    if len(problems) == 1:
        return f"{source}: {problems[0]}"
    return f"{source}: {len(problems)} problems: " + "; ".join(problems)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {json.dumps(value)}"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, Mapping) else type(value).__name__


