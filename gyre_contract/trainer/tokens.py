"""Token collation: steps (one generation each) → the columns of a `TokenBatch`, one row per step.

`collate_tokens` takes episodes (`Episode` objects or mappings of columns, as `collate` does) or
a flat list of step records (dicts) or validated step models, and lays each step out as one
row, in input order (episodes in order, their steps in order):

- `prompt_ids` `[B, P]` from `observation.token_ids` (or an integer `observation`), LEFT-padded
  with `pad_id`, and `prompt_mask` `[B, P]` True on real prompt tokens;
- `response_ids` `[B, R]` from `action` (the generated token ids), RIGHT-padded with `pad_id`;
  `response_length` `[B]` the number of action tokens; `response_mask` `[B, R]` True on the
  real tokens where `loss_mask` (when recorded) is True too: tool output spliced into a turn
  stays in `response_ids` and out of the loss;
- the per-token fields (`logprob`, `ref_logprob`, `token_reward`, a per-token `value`, and
  `loss_mask`) `[B, R]`, right-padded with 0 / False; their length must equal the step's
  action length, else a `ContractError` names the episode, the step and both lengths;
- every per-step scalar (`reward`, `step`, `episode_id`, `group_id`, `policy_version`,
  `terminated`, `truncated`, a scalar `value`, `observation.text`, ...) `[B]`.

These column names are the sources a token field map (`"rows": "step"`) names. Without `fields`,
a column that only some inputs carry is left out (a map that names it gets the error); other
per-step arrays (an image modality) are left out unless `fields` names them, and then they must
be per-token. Nothing is filled with a default.

Vectorised: per field, the steps' arrays are concatenated once (one C call), their lengths give
the masks, and one boolean-mask assignment scatters the tokens into the padded array (row-major
order is the concatenation's order). Python runs once per step only to list its arrays. The
padded size is checked against `max_bytes` (default `collation.MAX_BATCH_BYTES`) before
anything padded is allocated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel

from gyre_contract.core.errors import ContractError, MissingFieldError, Problem, describe
from gyre_contract.io.episodes import episode_from_steps
from gyre_contract.trainer import collation
from gyre_contract.trainer.ops import cast_array

TOKEN_FIELDS: tuple[str, ...] = ("logprob", "ref_logprob", "token_reward", "loss_mask")
"""Per-step fields that must hold one value per action token."""
PER_TOKEN_WHEN_ARRAY: tuple[str, ...] = ("value",)
"""Fields that are per-token when a step holds an array, per-row when it holds a scalar."""
LAYOUT_FIELDS: tuple[str, ...] = ("prompt_ids", "prompt_mask", "response_ids", "response_mask",
                                  "response_length")
"""Keys `collate_tokens` always produces (with `episode_id`)."""
PROMPT_SOURCES: tuple[str, ...] = ("observation.token_ids", "observation")
RESPONSE_SOURCE = "action"
_DTYPES = {"logprob": "float32", "ref_logprob": "float32", "token_reward": "float32",
           "value": "float32", "loss_mask": "bool"}


@dataclass
class _Input:
    """One input: an episode's columns flattened to dotted names (a flat block of step records
    is one input too), its id for messages, and its number of steps."""

    label: str
    columns: dict[str, Any]
    steps: int
    episode_ids: Any


def collate_tokens(
    items: Iterable[Any],
    *,
    fields: Iterable[str] | None = None,
    pad_id: int = 0,
    max_bytes: int | None = None,
) -> dict[str, np.ndarray]:
    """Lay out every step as one token row (see the module doc); returns the columns by name.

    `items` are episodes (`Episode`, or mappings of columns) or step records (dicts or validated
    step models). `fields` limits the columns produced (the layout keys and `episode_id` always
    come). Raises ContractError on a per-token field whose length differs from the action's,
    MissingFieldError when the prompt, the action or a named field is absent, and
    `BatchTooLargeError` when the padded batch would exceed `max_bytes`.
    """
    inputs = _inputs(list(items))
    wanted = None if fields is None else [f for f in fields if f not in (*LAYOUT_FIELDS,)]
    prompt_name = _prompt_source(inputs)
    prompts = _ragged(inputs, prompt_name)
    responses = _ragged(inputs, RESPONSE_SOURCE)
    _check_ids(prompt_name, prompts[0])
    _check_ids(RESPONSE_SOURCE, responses[0])
    token_names, scalar_names = _plan(inputs, wanted, prompt_name)
    per_token = {name: _ragged(inputs, name) for name in token_names}
    _check_lengths(inputs, responses[1], per_token)
    b = len(prompts[1])
    p = int(prompts[1].max(initial=0))
    r = int(responses[1].max(initial=0))
    _check_size(b, p, r, prompts[1], responses[1], per_token, max_bytes)
    prompt_mask = np.arange(p)[None, :] >= (p - prompts[1])[:, None]
    real = np.arange(r)[None, :] < responses[1][:, None]
    out: dict[str, np.ndarray] = {
        "prompt_ids": _scatter(prompt_name, prompts[0], prompt_mask, "int64", pad_id),
        "prompt_mask": prompt_mask,
        "response_ids": _scatter(RESPONSE_SOURCE, responses[0], real, "int64", pad_id),
        "response_length": responses[1],
    }
    for name, (flat, _) in per_token.items():
        out[name] = _scatter(name, flat, real, _DTYPES.get(name), 0)
    loss_mask = out.get("loss_mask")
    out["response_mask"] = real if loss_mask is None else real & loss_mask
    for name in scalar_names:
        out[name] = _scalars(inputs, name)
    if "episode_id" not in out:
        out["episode_id"] = _episode_ids(inputs)
    return out


# -- inputs ------------------------------------------------------------------------------------

def _inputs(items: list[Any]) -> list[_Input]:
    if not items:
        raise ContractError(Problem("steps", "at least one step", "none", "nothing to collate"))
    steps = [_is_step(x) for x in items]
    if all(steps):
        return [_flat_block(items)]
    if any(steps):
        i = steps.index(not steps[0])
        raise TypeError(f"items[{i}]: give episodes or step records, not both (items[0] is "
                        f"{'a step' if steps[0] else 'an episode'})")
    return [_episode(i, ep) for i, ep in enumerate(items)]


def _is_step(item: Any) -> bool:
    """A step record (a str `episode_id`) or a step model; else an episode of columns."""
    if isinstance(item, BaseModel):
        return True
    return isinstance(item, Mapping) and isinstance(item.get("episode_id"), str)


def _episode(index: int, episode: Any) -> _Input:
    columns = getattr(episode, "columns", None)
    if columns is not None and hasattr(episode, "episode_id"):
        label = str(episode.episode_id)
    elif isinstance(episode, Mapping):
        columns = episode
        ids = columns.get("episode_id")
        if ids is None:
            raise MissingFieldError("episode_id", columns.keys())
        label = str(np.asarray(ids).reshape(-1)[0]) if len(ids) else f"episodes[{index}]"
    else:
        raise TypeError(f"episodes[{index}]: expected an Episode, a mapping of columns or a "
                        f"step record, got {type(episode).__name__}")
    flat = _flatten(columns)
    if RESPONSE_SOURCE not in flat:
        raise MissingFieldError(RESPONSE_SOURCE, flat.keys())
    steps = len(flat[RESPONSE_SOURCE])
    bad = [Problem(f"episodes[{index}].{name}", f"{steps} steps", f"{len(col)} steps",
                   f"episode {label!r}: column length differs")
           for name, col in flat.items() if len(col) != steps]
    if bad:
        raise ContractError(bad)
    return _Input(f"episodes[{index}]", flat, steps, flat.get("episode_id", [label] * steps))


def _flat_block(items: list[Any]) -> _Input:
    """Step records in order as one input: models through `episode_from_steps`, dicts as they
    are (their lists become arrays per step)."""
    if all(isinstance(x, BaseModel) for x in items):
        model = type(items[0])
        if any(type(x) is not model for x in items):
            raise TypeError("step models of one class only (validate them with one model)")
        columns = episode_from_steps(list(enumerate(items)), model).columns
    else:
        records = [x.model_dump(by_alias=True, exclude_none=True) if isinstance(x, BaseModel)
                   else x for x in items]
        columns = {}
        for name in dict.fromkeys(k for rec in records for k in _flatten(rec)):
            columns[name] = [_value(rec, name) for rec in records]
    flat = _flatten(columns)
    if RESPONSE_SOURCE not in flat:
        raise MissingFieldError(RESPONSE_SOURCE, flat.keys())
    return _Input("steps", flat, len(items), flat.get("episode_id"))


def _value(record: Mapping[str, Any], dotted: str) -> Any:
    node: Any = record
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return np.asarray(node) if isinstance(node, list) else node


def _flatten(columns: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, col in columns.items():
        if isinstance(col, Mapping):
            flat.update(_flatten(col, f"{prefix}{key}."))
        elif prefix or key not in collation.SKIPPED_FIELDS:
            flat[prefix + key] = col
    return flat


def _where(inp: _Input, t: int) -> tuple[str, str]:
    """(path prefix, "episode 'x' step n") of step `t` of an input, for messages."""
    path = f"{inp.label}[{t}]" if inp.label == "steps" else f"{inp.label}.steps[{t}]"
    ids, steps = inp.episode_ids, inp.columns.get("step")
    eid = str(ids[t]) if ids is not None else "?"
    step = steps[t] if steps is not None else t
    return path, f"episode {eid!r} step {int(step) if step is not None else t}"


# -- which columns ------------------------------------------------------------------------------

def _prompt_source(inputs: list[_Input]) -> str:
    first = inputs[0].columns
    for name in PROMPT_SOURCES:
        if name in first and _per_step_rank(first[name]) == 1:
            return name
    raise MissingFieldError(PROMPT_SOURCES[0], first.keys())


def _partial(col: Any) -> bool:
    """Whether only some steps carry the column (None on the others)."""
    return not isinstance(col, np.ndarray) and any(x is None for x in col)


def _per_step_rank(col: Any) -> int | None:
    """The rank of one step's value in a column (None when the first step has none)."""
    if isinstance(col, np.ndarray):
        return col.ndim - 1
    first = next((x for x in col if x is not None), None)
    return None if first is None else np.ndim(first)


def _plan(inputs: list[_Input], wanted: list[str] | None, prompt: str
          ) -> tuple[list[str], list[str]]:
    """(per-token fields, per-row fields) to collate, in the first input's column order."""
    first = inputs[0].columns
    common = [n for n in first if all(n in inp.columns and not _partial(inp.columns[n])
                                      for inp in inputs)]
    names = common if wanted is None else wanted
    taken = {prompt, RESPONSE_SOURCE}
    tokens, scalars = [], []
    for name in names:
        if name in taken:
            continue
        lacking = [inp for inp in inputs if name not in inp.columns]
        if lacking:
            if len(lacking) == len(inputs):
                raise MissingFieldError(name, {*first, *LAYOUT_FIELDS})
            raise ContractError([Problem(f"{inp.label}.{name}", f"a {name!r} column",
                                         "no such column", f"{inp.label} lacks {name!r}")
                                 for inp in lacking])
        rank = _per_step_rank(first[name])
        if name in TOKEN_FIELDS and rank == 0:
            path, where = _where(inputs[0], 0)
            raise ContractError(Problem(f"{path}.{name}", "one value per action token",
                                        "one value per step",
                                        f"{where}: {name} is one value per step, not per token"))
        if rank == 0 or rank is None:
            scalars.append(name)
        elif name in TOKEN_FIELDS or name in PER_TOKEN_WHEN_ARRAY or wanted is not None:
            tokens.append(name)
    return tokens, scalars


# -- ragged columns ---------------------------------------------------------------------------

def _ragged(inputs: list[_Input], name: str) -> tuple[np.ndarray, np.ndarray]:
    """(every step's values concatenated, each step's length) of a per-step 1-D column."""
    pieces: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    for inp in inputs:
        col = inp.columns[name]
        if isinstance(col, np.ndarray):
            if col.ndim != 2:
                raise _not_ragged(inp, name, col)
            pieces.append(col.reshape(-1))
            lengths.append(np.full(len(col), col.shape[1], np.int64))
            continue
        arrays = [x if x.__class__ is np.ndarray else _step_array(inp, name, t, x)
                  for t, x in enumerate(col)]
        if any(a.ndim != 1 for a in arrays):
            t = next(t for t, a in enumerate(arrays) if a.ndim != 1)
            raise _not_ragged(inp, name, arrays[t], t)
        pieces += arrays
        lengths.append(np.fromiter(map(len, arrays), np.int64, len(arrays)))
    filled = [a for a in pieces if a.size]  # an empty JSON list is float64: it adds nothing
    flat = np.concatenate(filled) if filled else np.zeros(0, np.int64)
    return flat, np.concatenate(lengths)


def _step_array(inp: _Input, name: str, t: int, value: Any) -> np.ndarray:
    if value is None:
        path, where = _where(inp, t)
        raise ContractError(Problem(f"{path}.{name}", "a value on every step", "none",
                                    f"{where}: only some steps carry {name!r}"))
    return np.asarray(value)


def _not_ragged(inp: _Input, name: str, value: Any, t: int | None = None) -> ContractError:
    path, where = _where(inp, t or 0)
    what = "one list of tokens per step" if name != RESPONSE_SOURCE else \
        "the generated token ids of each step ([A])"
    return ContractError(Problem(f"{path}.{name}" if t is not None else f"{inp.label}.{name}",
                                 what, describe(value),
                                 f"{where}: {name} is not one 1-D array per step"))


def _check_ids(name: str, flat: np.ndarray) -> None:
    if flat.size and flat.dtype.kind not in "iu":
        raise ContractError(Problem(name, "integer token ids", describe(flat),
                                    f"{name}: token ids must be integers"))


def _check_lengths(inputs: list[_Input], actions: np.ndarray,
                   per_token: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Each per-token field has one value per action token, on every step."""
    problems = []
    for name, (_, lengths) in per_token.items():
        bad = np.flatnonzero(lengths != actions)
        for row in bad.tolist():
            inp, t = _locate(inputs, row)
            path, where = _where(inp, t)
            n, a = int(lengths[row]), int(actions[row])
            values = f"{n} value" + ("s" if n != 1 else "")
            problems.append(Problem(f"{path}.{name}", f"{a} values (one per action token)",
                                    values, f"{where}: {name} has {values} for {a} action "
                                    f"tokens"))
    if problems:
        raise ContractError(problems)


def _locate(inputs: list[_Input], row: int) -> tuple[_Input, int]:
    for inp in inputs:
        if row < inp.steps:
            return inp, row
        row -= inp.steps
    raise IndexError(row)


def _scatter(name: str, flat: np.ndarray, where: np.ndarray, dtype: str | None,
             pad: Any) -> np.ndarray:
    """`flat` laid into an array shaped like `where`, in row-major order; `pad` elsewhere."""
    if dtype is not None and flat.size:
        try:
            flat = cast_array(flat, dtype)
        except ContractError as err:
            raise err.under(name) from None
    elif dtype is not None:
        flat = flat.astype(dtype)
    out = np.full(where.shape, pad, dtype=flat.dtype)
    out[where] = flat
    return out


def _check_size(b: int, p: int, r: int, prompt_lengths: np.ndarray, lengths: np.ndarray,
                per_token: Mapping[str, tuple[np.ndarray, np.ndarray]],
                max_bytes: int | None) -> None:
    limit = collation.MAX_BATCH_BYTES if max_bytes is None else max_bytes
    per_response = 8 + 1 + 1 + sum(max(flat.dtype.itemsize, 4) for flat, _ in per_token.values())
    size = b * (p * 9 + r * per_response)
    if size <= limit:
        return
    real = int(prompt_lengths.sum()) + int(lengths.sum())
    raise collation.BatchTooLargeError(
        f"padded token batch [B={b}, P={p}, R={r}] would take {collation.bytes_text(size)} "
        f"({real} real tokens fill {100 * real / max(b * (p + r), 1):.2g}% of it), more than "
        f"MAX_BATCH_BYTES = {collation.bytes_text(limit)}; collate rows of similar length in "
        f"separate batches (buckets), or fewer rows per batch")


# -- per-row columns --------------------------------------------------------------------------

def _scalars(inputs: list[_Input], name: str) -> np.ndarray:
    parts = []
    for inp in inputs:
        col = inp.columns[name]
        if not isinstance(col, np.ndarray):
            if any(x is None for x in col):
                t = next(t for t, x in enumerate(col) if x is None)
                _step_array(inp, name, t, None)
            col = np.asarray(col)
            if col.dtype.kind == "f":  # Python floats of unvalidated records: float32, lossless
                col = cast_array(col, "float32")
        parts.append(col)
    kinds = {p.dtype.kind for p in parts}
    if len(kinds) > 1 and kinds != {"U"}:
        raise ContractError(Problem(name, f"one dtype ({parts[0].dtype})",
                                    f"dtypes {sorted(str(p.dtype) for p in parts)[:3]}",
                                    f"{name}: dtype differs between inputs"))
    return np.concatenate(parts)


def _episode_ids(inputs: Sequence[_Input]) -> np.ndarray:
    return np.concatenate([np.asarray(inp.episode_ids, dtype=np.str_) for inp in inputs])
