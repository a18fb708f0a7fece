"""The built-in ops of token rows (one row per turn, docs/llm.md §3): group-relative advantages
(`group_norm`, `rloo`), KL estimates (`kl`, `kl_reward`), `per_token`, `pad` and `concat`.

They run on the columns of a map of token rows (`TokenRows`): `reward` and `group_id` `[B]`,
`logprob`, `ref_logprob`, `response_ids`, `response_mask` `[B, R]` (right-padded), `prompt_ids`
and `prompt_mask` `[B, P]` (left-padded), `response_length` `[B]`. A packed map's collation may
hold a response column it only renames (and `response_mask`, when only `per_token` reads it) as
its real tokens alone (`ResponseValues`): `per_token` then spreads over those, never over
`[B, R]`. Each op works on whole arrays with numpy (groups by `np.unique(return_inverse=True)`
and `np.bincount`; no loop over rows) and refuses what it cannot do rightly: a group of one row
under `group_norm`/`rloo` (no baseline) unless the map says what to do with it, a missing
`response_mask`/`response_length`, a reward with no response token to sit on. `TOKEN_OPS`
describes them for the registry in `gyre_contract.trainer._ops`, which builds their `Op`
records.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gyre_contract.core._errors import ContractError, MissingFieldError, Problem, describe
from gyre_contract.core._text import number_text

STD_MODES = ("unbiased", "biased", "none")
"""`group_norm` std: torch.std (n − 1, TRL and verl), numpy's default (n), or no division."""
SCALES = ("group", "batch")
"""`group_norm` scale: each group's own std, or the std of every reward in the batch."""
SINGLETONS = ("error", "raw", "zero")
"""What `group_norm`/`rloo` do with a group of one row: refuse, keep its reward (verl), or 0."""
ESTIMATORS = ("k1", "k2", "k3")
"""KL estimators from the log-ratio d = logp − ref: d, d²/2, exp(−d) + d − 1."""
SIDES = ("left", "right")
OUTPUTS_PAD = ("ids", "mask")
OUTPUTS_CONCAT = ("ids", "attention_mask", "position_ids")
DEFAULT_EPS = 1e-6
"""verl's epsilon; TRL adds 1e-4. A map that must match a trainer states its eps."""
ArgCheck = Callable[[Any], str | None]
"""Returns why an argument value is wrong, or None when it is fine (as the registry's checks)."""

MAX_SHOWN = 10
"""Groups (or rows) an error names at most before it says how many more there are."""
RESPONSE_COLUMNS = frozenset({"response_ids", "response_mask", "logprob", "ref_logprob", "value",
                              "token_reward", "return", "loss_mask", "advantage"})
"""Right-padded `[B, R]` columns whose real tokens are the first `response_length` ones."""


# -- a response column's real tokens -------------------------------------------------------

@dataclass(frozen=True)
class ResponseValues:
    """A right-padded response column `[B, R]` (`RESPONSE_COLUMNS`, `response_mask`) held as
    its real tokens only: each row's first `response_length` values one after another. What a
    packed map's collation keeps of a column that is only renamed or read by `per_token`: the
    packed rows take the real tokens, so the padded `[B, R]` would only be made to be thrown
    away (`padded()` makes it, the same array the padded collation holds)."""

    values: np.ndarray
    """The real tokens in row order, 1-D."""
    lengths: np.ndarray
    """`[B]` int64: each row's real tokens (`response_length`)."""
    width: int
    """R, the padded width."""

    def padded(self) -> np.ndarray:
        """The column as `[B, R]`, 0 (False) after each row's real tokens."""
        out = np.zeros((self.lengths.size, self.width), self.values.dtype)
        out[np.arange(self.width) < self.lengths[:, None]] = self.values
        return out


# -- argument checks -----------------------------------------------------------------------

def _choice(*options: str) -> ArgCheck:
    def check(value: Any) -> str | None:
        if value in options:
            return None
        return f"one of {', '.join(map(json.dumps, options))}, got {json.dumps(value)}"
    return check


def _non_negative(value: Any) -> str | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value) and value >= 0
    return None if ok else f"a finite number ≥ 0, got {json.dumps(value)}"


def _pad_value(value: Any) -> str | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return None if ok else f"a finite number (the pad id), got {json.dumps(value)}"


# -- columns -------------------------------------------------------------------------------

def mask_column(name: str) -> str:
    """The column that says which entries of the padded column `name` are real: `response_length`
    for the right-padded response columns (`response_ids`, `logprob`, ...), `X_mask` for `X_ids`
    (`prompt_ids` → `prompt_mask`), `name_mask` otherwise."""
    if name in RESPONSE_COLUMNS:
        return "response_length"
    if name.endswith("_ids") and len(name) > 4:
        return name[:-4] + "_mask"
    return name + "_mask"


def _column(columns: Mapping[str, Any], name: str, op: str, why: str) -> np.ndarray:
    if name not in columns:
        raise MissingFieldError(name, columns.keys(), f"op {op} reads it: {why}")
    return np.asarray(columns[name])


def _bad(op: str, what: str, expected: str, got: str, why: str) -> ContractError:
    return ContractError(Problem(f"{op}.{what}" if what else op, expected, got, why))


def _per_row(x: Any, name: str, op: str, rows: int | None = None) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1 or (rows is not None and x.shape[0] != rows):
        size = "B" if rows is None else str(rows)
        raise _bad(op, name, f"a per-row column [{size}] (a map with \"rows\": \"step\")",
                   describe(x), f"op {op} needs one {name} per row")
    return x


def _rewards(x: Any, op: str) -> np.ndarray:
    r = _per_row(x, "reward", op)
    if r.dtype.kind not in "fiu":
        raise _bad(op, "reward", "numbers", describe(r), f"op {op} needs numeric rewards")
    r = r.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(r))
    if bad.size:
        raise _bad(op, "reward", "finite rewards", f"{bad.size} not finite (rows "
                   f"{_listed(bad.tolist())})", f"op {op} would spread them over their groups")
    return r


def response_mask(columns: Mapping[str, Any], op: str, rows: int, width: int | None = None
                  ) -> np.ndarray:
    """The `response_mask` column, checked to be bool `[rows, width]` (any width when None)."""
    mask = _column(columns, "response_mask", op, "the tokens the policy generated, [B, R] bool")
    if mask.dtype != np.bool_ or mask.ndim != 2 or mask.shape[0] != rows or \
            width is not None and mask.shape[1] != width:
        raise _bad(op, "response_mask", f"bool[{rows}, {'R' if width is None else width}]",
                   describe(mask), "the mask must lie over the response tokens")
    return mask


def response_length(columns: Mapping[str, Any], op: str, rows: int, width: int) -> np.ndarray:
    """The `response_length` column `[B]`, checked to lie in `[0, width]`."""
    length = _per_row(_column(columns, "response_length", op,
                              "the number of real response tokens of each row, [B]"),
                      "response_length", op, rows)
    if length.dtype.kind not in "iu":
        raise _bad(op, "response_length", "integers", describe(length), "token counts")
    out = np.flatnonzero((length < 0) | (length > width))
    if out.size:
        raise _bad(op, "response_length", f"counts in [0, {width}] (the response width)",
                   f"{out.size} rows outside (rows {_listed(out.tolist())})",
                   "a length must fit the padded response")
    return length.astype(np.int64)


def real_mask(name: str, x: np.ndarray, columns: Mapping[str, Any], op: str) -> np.ndarray:
    """Which entries `[B, W]` of the padded column `name` (`x`) are real, from its mask column
    (`mask_column(name)`). A response column's real tokens are its first `response_length`:
    a `response_mask` may be False inside the response (tool output), which is still a token."""
    if x.ndim < 2:
        raise _bad(op, name, "a padded token column [B, W, ...]", describe(x),
                   f"op {op} lays out padded token rows")
    rows, width = x.shape[:2]
    which = mask_column(name)
    if which == "response_length":
        return np.arange(width) < response_length(columns, op, rows, width)[:, None]
    mask = _column(columns, which, op, f"the real tokens of {name}")
    if mask.dtype != np.bool_ or mask.shape != (rows, width):
        raise _bad(op, which, f"bool[{rows}, {width}] (the mask of {name})", describe(mask),
                   "the mask must lie over the tokens")
    return mask


def _listed(items: list[Any]) -> str:
    shown = ", ".join(_short(v) for v in items[:MAX_SHOWN])
    more = len(items) - MAX_SHOWN
    return f"{shown}, ... and {more} more" if more > 0 else shown


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- groups --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Groups:
    """The groups of a `group_id` column `[B]`: the distinct ids (sorted), each row's group
    index and the size of each group."""

    keys: np.ndarray
    index: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(cls, group_id: Any, rows: int, op: str) -> Groups:
        g = _per_row(group_id, "group_id", op, rows)
        if g.dtype.kind not in "USiu":
            raise _bad(op, "group_id", "strings or integers [B]", describe(g),
                       "a group id names the prompt its rows were sampled for")
        keys, index = np.unique(g, return_inverse=True)
        index = index.reshape(-1)
        return cls(keys, index, np.bincount(index, minlength=keys.size))

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per group, the sum of `values` `[B]`."""
        return np.bincount(self.index, weights=values, minlength=self.keys.size)

    def flat(self, values: np.ndarray) -> np.ndarray:
        """Per row, whether every value of its group is equal (its deviation is exactly 0)."""
        order = np.argsort(self.index, kind="stable")
        starts = np.concatenate(([0], np.cumsum(self.counts)[:-1]))
        ranked = values[order]
        equal = np.maximum.reduceat(ranked, starts) == np.minimum.reduceat(ranked, starts)
        return equal[self.index]

    def lone_rows(self, op: str, singletons: str) -> np.ndarray:
        """Per row, whether it is alone in its group; refused under `singletons="error"`."""
        lone = self.counts == 1
        if singletons == "error" and lone.any():
            keys = [k.item() for k in self.keys[lone]]
            raise ContractError(Problem(
                f"{op}.group_id", "every group_id on at least two rows (a row's baseline is "
                "its group's other rows)",
                f"{len(keys)} group{'s' if len(keys) > 1 else ''} of one row: {_listed(keys)}",
                f"op {op} has no baseline for a group of one; sample several responses per "
                'prompt, or set "singletons": "raw" (keep the reward, as verl) or "zero"'))
        return lone[self.index]


# -- group-relative advantages -------------------------------------------------------------

def group_norm(inputs: list[Any], columns: Mapping[str, Any], *, std: str = "unbiased",
               scale: str = "group", eps: float = DEFAULT_EPS, singletons: str = "error"
               ) -> np.ndarray:
    """GRPO's advantage `[B]` float32: (r − mean of r's group) / (std + eps).

    `std` "unbiased" (n − 1: torch.std, as TRL and verl), "biased" (n) or "none" (no division:
    Dr. GRPO, verl `norm_adv_by_std_in_grpo=False`); `scale` "group" (each group's std) or
    "batch" (the std of every reward in the batch: TRL `scale_rewards="batch"`). A group whose
    rewards are all equal gets exactly 0. A group of one: `singletons` "error", "raw" (mean 0,
    std 1, as verl: r / (1 + eps); under `scale="batch"` r over the batch std + eps) or "zero".
    """
    r = _rewards(inputs[0], "group_norm")
    groups = Groups.of(inputs[1], r.size, "group_norm")
    if r.size == 0:
        return np.zeros(0, np.float32)
    lone = groups.lone_rows("group_norm", singletons)
    counts = groups.counts.astype(np.float64)
    dev = r - (groups.sums(r) / counts)[groups.index]
    dev[groups.flat(r)] = 0.0
    if singletons == "raw":
        dev[lone] = r[lone]  # verl: mean 0 for a group of one
    if std == "none":
        adv = dev
    else:
        ddof = 1 if std == "unbiased" else 0
        if scale == "batch":
            if r.size <= ddof:
                raise _bad("group_norm", "reward", "at least two rows for an unbiased batch std",
                           describe(r), "the std of one value over n − 1 is undefined")
            sd = np.full(r.size, r.std(ddof=ddof))
        else:
            squares = groups.sums(np.where(lone, 0.0, dev) ** 2)
            sd = np.sqrt(squares / np.maximum(counts - ddof, 1.0))[groups.index]
            sd[lone] = 1.0  # verl: std 1 for a group of one
        denom = sd + eps
        adv = np.divide(dev, denom, out=np.zeros_like(dev), where=denom != 0)
    if singletons == "zero":
        adv[lone] = 0.0
    return adv.astype(np.float32)


def rloo(inputs: list[Any], columns: Mapping[str, Any], *, singletons: str = "error"
         ) -> np.ndarray:
    """RLOO's advantage `[B]` float32: r minus the mean of the OTHER rows of its group,
    = n/(n − 1) · (r − group mean). A group of one: `singletons` "error", "raw" (the reward, as
    verl) or "zero". A group whose rewards are all equal gets exactly 0."""
    r = _rewards(inputs[0], "rloo")
    groups = Groups.of(inputs[1], r.size, "rloo")
    if r.size == 0:
        return np.zeros(0, np.float32)
    lone = groups.lone_rows("rloo", singletons)
    n = groups.counts.astype(np.float64)[groups.index]
    others = (groups.sums(r)[groups.index] - r) / np.where(lone, 1.0, n - 1.0)
    adv = r - others
    adv[groups.flat(r)] = 0.0
    adv[lone] = r[lone] if singletons == "raw" else 0.0
    return adv.astype(np.float32)


# -- KL ------------------------------------------------------------------------------------

def kl_estimate(logprob: np.ndarray, ref_logprob: np.ndarray, mask: np.ndarray,
                estimator: str, op: str = "kl") -> np.ndarray:
    """Per-token KL estimate `[B, R]` float64 from d = logp − ref, 0 where `mask` is False:
    k1 = d, k2 = d²/2, k3 = exp(−d) + d − 1 (≥ 0; Schulman's low-variance estimator)."""
    lp, ref = np.asarray(logprob), np.asarray(ref_logprob)
    for name, x in (("logprob", lp), ("ref_logprob", ref)):
        if x.shape != mask.shape or x.dtype.kind != "f":
            raise _bad(op, name, f"floats [{', '.join(map(str, mask.shape))}] like "
                       "response_mask", describe(x), "one log-prob per response token")
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.subtract(lp, ref, dtype=np.float64)
        d[~mask] = 0.0  # padding may hold anything: it must not overflow
        if estimator == "k1":
            k = d
        elif estimator == "k2":
            k = np.square(d)
            k *= 0.5
        else:  # exp only on the response tokens: a padded batch is often half padding
            real = d[mask]
            k = np.zeros_like(d)
            k[mask] = np.maximum(np.expm1(-real) + real, 0.0)
    refuse_non_finite(k, lp, ref, estimator, op)
    return k  # 0 off the mask: d is 0 there, and so is every estimate of it


def refuse_non_finite(k: np.ndarray, logprob: np.ndarray, ref_logprob: np.ndarray,
                      estimator: str, op: str) -> None:
    """Refuse a KL term `k` `[B, R]` with a non-finite entry (only response tokens can have
    one: the rest is 0), naming the first such token and its inputs."""
    if np.isfinite(k).all():
        return
    bad = np.argwhere(~np.isfinite(k))
    b, t = bad[0].tolist()
    raise _bad(op, "", "a finite KL on every response token",
               f"{len(bad)} token{'s' if len(bad) != 1 else ''} not finite (first: row {b}, "
               f"token {t}: logprob {logprob[b, t]}, ref_logprob {ref_logprob[b, t]})",
               f"the {estimator} estimate overflows or its inputs are not finite")


def _as_float32(k: np.ndarray, logprob: np.ndarray, ref_logprob: Any, estimator: str, op: str
                ) -> np.ndarray:
    """`k` in float32, refused where it is finite in float64 but not in float32 (a k3 estimate
    of a log-ratio over about 88)."""
    with np.errstate(over="ignore"):
        out = k.astype(np.float32)
    refuse_non_finite(out, logprob, np.asarray(ref_logprob), estimator, op)
    return out


def kl(inputs: list[Any], columns: Mapping[str, Any], *, estimator: str) -> np.ndarray:
    """The per-token KL estimate `[B, R]` float32 of `logprob` from `ref_logprob`, 0 where
    `response_mask` is False."""
    lp = np.asarray(inputs[0])
    if lp.ndim != 2:
        raise _bad("kl", "logprob", "floats [B, R]", describe(lp), "one log-prob per token")
    mask = response_mask(columns, "kl", *lp.shape)
    return _as_float32(kl_estimate(lp, inputs[1], mask, estimator), lp, inputs[1], estimator,
                       "kl")


def kl_reward(inputs: list[Any], columns: Mapping[str, Any], *, beta: float,
              estimator: str = "k1") -> np.ndarray:
    """verl's `token_level_rewards` `[B, R]` float32: −beta · KL per response token, plus the
    row's sequence reward on its last real token (position `response_length − 1`)."""
    reward = _rewards(inputs[0], "kl_reward")
    lp = np.asarray(inputs[1])
    if lp.ndim != 2 or lp.shape[0] != reward.size:
        raise _bad("kl_reward", "logprob", f"floats [{reward.size}, R]", describe(lp),
                   "one log-prob per response token of each row")
    mask = response_mask(columns, "kl_reward", *lp.shape)
    length = response_length(columns, "kl_reward", *lp.shape)
    empty = np.flatnonzero(length == 0)
    if empty.size:
        raise _bad("kl_reward", "response_length", "at least one response token per row",
                   f"{empty.size} empty responses (rows {_listed(empty.tolist())})",
                   "the sequence reward sits on the last response token; an empty response "
                   "has none")
    penalty = kl_estimate(lp, inputs[2], mask, estimator, "kl_reward")
    out = penalty * -float(beta)
    out += 0.0  # -0.0 off the mask becomes 0.0
    out[np.arange(reward.size), length - 1] += reward
    return _as_float32(out, lp, inputs[2], estimator, "kl_reward")


# -- layout --------------------------------------------------------------------------------

def per_token(inputs: list[Any], columns: Mapping[str, Any]) -> np.ndarray | ResponseValues:
    """A per-row column `[B]` (a sequence advantage) on each response token `[B, R]`, 0 (or
    False, "") where `response_mask` is False. Keeps the dtype. A `response_mask` held as its
    real tokens (`ResponseValues`) gives the result as its real tokens too."""
    x = np.asarray(inputs[0])
    if x.ndim != 1:
        raise _bad("per_token", "", "a per-row column [B]", describe(x),
                   "per_token spreads one value per row over its response tokens")
    held = columns.get("response_mask")
    if isinstance(held, ResponseValues):
        if held.values.dtype == np.bool_ and held.lengths.size == x.size:
            # the same values on the real tokens alone: a row's padding is 0 in [B, R] too
            return ResponseValues(np.where(held.values, np.repeat(x, held.lengths),
                                           np.zeros((), x.dtype)), held.lengths, held.width)
        columns = {**columns, "response_mask": held.padded()}  # refused below, as padded
    mask = response_mask(columns, "per_token", x.size)
    return np.where(mask, x[:, None], np.zeros((), x.dtype))


def _fill(value: Any, dtype: np.dtype, op: str) -> np.ndarray:
    fill = np.asarray(value).astype(dtype)
    if fill.item() != value:
        raise _bad(op, "value", f"a pad value that {dtype} holds exactly", json.dumps(value),
                   "the pad value must not change when cast to the column's dtype")
    return fill


def packed(real: np.ndarray, side: str) -> np.ndarray:
    """The mask `[B, W]` with each row's count of True packed against the `side`."""
    width, count = real.shape[1], real.sum(axis=1)
    pos = np.arange(width)
    return pos >= (width - count)[:, None] if side == "left" else pos < count[:, None]


def relaid(x: np.ndarray, real: np.ndarray, side: str, value: Any, op: str = "pad"
           ) -> tuple[np.ndarray, np.ndarray]:
    """`x` `[B, W, ...]` with its real entries (`real` `[B, W]`) moved to the `side`, in order,
    the rest set to `value`; and the new mask."""
    new = packed(real, side)
    out = np.empty_like(x)
    out[...] = _fill(value, x.dtype, op)
    out[new] = x[real]
    return out, new


def pad(inputs: list[Any], columns: Mapping[str, Any], *, sources: tuple[str, ...], side: str,
        value: float = 0, output: str = "ids") -> np.ndarray:
    """The padded column re-laid out with its real tokens on the other `side` and `value` as
    padding (output "ids"), or the matching mask (output "mask"). Its mask is found by name
    (`mask_column`)."""
    x = np.asarray(inputs[0])
    real = real_mask(sources[0], x, columns, "pad")
    if output == "mask":
        return packed(real, side)
    return relaid(x, real, side, value)[0]


def concat(inputs: list[Any], columns: Mapping[str, Any], *, sources: tuple[str, ...],
           value: float = 0, output: str = "ids") -> np.ndarray:
    """verl's `input_ids` layout: the prompt left-padded, then the response right-padded,
    `[B, P + R]` (output "ids", padding `value`); "attention_mask" is the prompt's mask then the
    response's real tokens (the first `response_length`, tool output included); "position_ids"
    is clip(cumsum(attention_mask) − 1, 0)."""
    prompt, response = np.asarray(inputs[0]), np.asarray(inputs[1])
    if prompt.ndim != 2 or response.ndim != 2 or prompt.shape[0] != response.shape[0]:
        raise _bad("concat", "", "two token columns [B, P] and [B, R]",
                   f"{describe(prompt)} and {describe(response)}", "one prompt per response")
    prompt_real = real_mask(sources[0], prompt, columns, "concat")
    response_real = real_mask(sources[1], response, columns, "concat")
    if output != "ids":
        attention = np.concatenate([packed(prompt_real, "left"), packed(response_real, "right")],
                                   axis=1)
        if output == "attention_mask":
            return attention
        position = np.cumsum(attention, axis=1, dtype=np.int64)
        position -= 1
        return np.maximum(position, 0, out=position)
    dtype = np.result_type(prompt, response)
    return np.concatenate([relaid(prompt.astype(dtype, copy=False), prompt_real, "left", value,
                                  "concat")[0],
                           relaid(response.astype(dtype, copy=False), response_real, "right",
                                  value, "concat")[0]], axis=1)


# -- descriptions (the run notes) ------------------------------------------------------------

def _d_group_norm(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    reward, group = sources
    std, scale = args.get("std", "unbiased"), args.get("scale", "group")
    eps = number_text(args.get("eps", DEFAULT_EPS))
    lone = {"error": "", "raw": ", a group of one keeps its reward (verl)",
            "zero": ", a group of one gets 0"}[args.get("singletons", "error")]
    if std == "none":
        return f"{target} ← {reward} − mean of its {group} group (GRPO, not scaled){lone}"
    of = "its group's" if scale == "group" else "the batch's"
    return (f"{target} ← ({reward} − mean of its {group} group) / ({of} {std} std of {reward}"
            f" + {eps}) (GRPO){lone}")


def _d_rloo(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    lone = {"error": "", "raw": ", a group of one keeps its reward",
            "zero": ", a group of one gets 0"}[args.get("singletons", "error")]
    return f"{target} ← {sources[0]} − mean of the other rows of its {sources[1]} group (RLOO){lone}"


_FORMULA = {"k1": "logp − ref", "k2": "(logp − ref)²/2", "k3": "exp(ref − logp) − (ref − logp) − 1"}


def _d_kl(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    est = args["estimator"]
    return (f"{target} ← KL {est} of {sources[0]} from {sources[1]} per response token "
            f"({_FORMULA[est].replace('logp', sources[0]).replace('ref', sources[1])})")


def _d_kl_reward(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    est = args.get("estimator", "k1")
    return (f"{target} ← −{number_text(args['beta'])}·KL {est}({sources[1]}, {sources[2]}) per "
            f"response token, plus {sources[0]} on the last response token")


def _d_per_token(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    return f"{target} ← {sources[0] if sources else 'it'} on each response token"


def _d_pad(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    what = "the mask of " if args.get("output") == "mask" else ""
    return (f"{target} ← {what}{sources[0]} padded on the {args['side']} with "
            f"{number_text(args.get('value', 0))}")


def _d_concat(target: str, sources: tuple[str, ...], args: Mapping[str, Any]) -> str:
    what = {"ids": "", "attention_mask": "the attention mask of ",
            "position_ids": "the position ids of "}[args.get("output", "ids")]
    return (f"{target} ← {what}{sources[0]} (left-padded) then {sources[1]} (right-padded), "
            f"pad {number_text(args.get('value', 0))}")


def _reads_mask_of(sources: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(mask_column(name) for name in sources))


_SINGLETONS = _choice(*SINGLETONS)
_ESTIMATOR = _choice(*ESTIMATORS)
_RESPONSE_MASK = ("response_mask",)

TOKEN_OPS: tuple[dict[str, Any], ...] = (
    dict(name="group_norm", fn=group_norm, sources=("reward", "group_id"),
         args={"std": _choice(*STD_MODES), "scale": _choice(*SCALES), "eps": _non_negative,
               "singletons": _SINGLETONS}, describe=_d_group_norm),
    dict(name="rloo", fn=rloo, sources=("reward", "group_id"), args={"singletons": _SINGLETONS},
         describe=_d_rloo),
    dict(name="kl", fn=kl, sources=("logprob", "ref_logprob"), args={"estimator": _ESTIMATOR},
         required=("estimator",), describe=_d_kl, reads=lambda s: _RESPONSE_MASK),
    dict(name="kl_reward", fn=kl_reward, sources=("reward", "logprob", "ref_logprob"),
         args={"beta": _non_negative, "estimator": _ESTIMATOR}, required=("beta",),
         describe=_d_kl_reward, reads=lambda s: ("response_mask", "response_length")),
    dict(name="per_token", fn=per_token, describe=_d_per_token, reads=lambda s: _RESPONSE_MASK),
    dict(name="pad", fn=pad, args={"side": _choice(*SIDES), "value": _pad_value,
                                   "output": _choice(*OUTPUTS_PAD)},
         required=("side",), describe=_d_pad, reads=_reads_mask_of, named=True),
    dict(name="concat", fn=concat, sources=("prompt", "response"),
         args={"value": _pad_value, "output": _choice(*OUTPUTS_CONCAT)},
         describe=_d_concat, reads=_reads_mask_of, named=True),
)
"""The token ops as the arguments of their `Op` records: the registry of
`gyre_contract.trainer._ops` lists them as built-ins (this module imports nothing of it)."""
