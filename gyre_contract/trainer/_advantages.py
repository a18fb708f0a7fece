"""Advantages and returns over `[B, T]` rows that respect terminated vs truncated (docs/contract.md §4).

Each row is a contiguous run of one episode, right-padded, with `mask` True on real steps.
At a row's last real step the next state's value is `next_value[b]`, unless the step is
`terminated` (no bootstrap: terminated wins over truncated). A row that ends truncated, or is cut
mid-episode, or is still open, needs a finite `next_value`; without one it is an error, unless
`truncation="terminal"` is passed, which treats such a row end as terminal (bootstrap 0). A known
`next_value` is always used, whatever `truncation` says.

The loop runs backwards over T only; every row is computed at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from gyre_contract.core._errors import ContractError, Problem
from gyre_contract.core._text import quoted

Truncation = Literal["bootstrap", "terminal"]
TRUNCATION_MODES: tuple[str, ...] = ("bootstrap", "terminal")


def gae(
    reward: np.ndarray,
    value: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    mask: np.ndarray,
    next_value: np.ndarray,
    *,
    gamma: float,
    lam: float,
    truncation: Truncation = "bootstrap",
    episode_id: Sequence[str] | np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation; returns `(advantage, returns)`, both `[B, T]`.

    δ_t = r_t + γ·(1 − terminated_t)·V_{t+1} − V_t and A_t = δ_t + γλ·A_{t+1} within a row;
    returns = A + V. Padding (mask False) gets 0. `episode_id` ([B]) only improves messages.
    """
    _check_rate("gamma", gamma)
    _check_rate("lam", lam)
    rows = _Rows.check(reward, terminated, truncated, mask, next_value, truncation, episode_id,
                       value=value)
    assert rows.value is not None  # checked with the values given
    adv = _backward(rows, rows.value, gamma, gamma * lam)
    returns = np.where(rows.mask, adv + rows.value, 0.0)
    dtype = rows.out_dtype
    return adv.astype(dtype), returns.astype(dtype)


def discounted_returns(
    reward: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    mask: np.ndarray,
    next_value: np.ndarray,
    *,
    gamma: float,
    truncation: Truncation = "bootstrap",
    episode_id: Sequence[str] | np.ndarray | None = None,
) -> np.ndarray:
    """Discounted returns G_t = r_t + γ·G_{t+1} within a row, `[B, T]`, same end rules as `gae`.

    At a row's last real step G_{t+1} is `next_value[b]` unless the step is terminated.
    """
    _check_rate("gamma", gamma)
    rows = _Rows.check(reward, terminated, truncated, mask, next_value, truncation, episode_id)
    zeros = np.zeros_like(rows.reward)
    return _backward(rows, zeros, gamma, gamma).astype(rows.out_dtype)


def _backward(rows: _Rows, value: np.ndarray, gamma: float, decay: float) -> np.ndarray:
    """A_t = δ_t + decay·A_{t+1}, with V_{t+1} from the row or its bootstrap value."""
    nb, nt = rows.reward.shape
    v_next = np.zeros((nb, nt), dtype=np.float64)
    v_next[:, :-1] = value[:, 1:]
    has_steps = rows.lengths > 0
    ends = np.flatnonzero(has_steps)
    v_next[ends, rows.lengths[ends] - 1] = rows.bootstrap[ends]
    v_next[rows.terminated] = 0.0
    delta = v_next  # δ = r + γ·V_{t+1} − V_t, in place (the same operations, in the same order)
    delta *= gamma
    delta += rows.reward
    delta -= value
    delta[~rows.mask] = 0.0
    # time-major: each step of the recursion reads and writes one contiguous row of B, in place
    # in the output (A_t = decay·A_{t+1} + δ_t, from A_T = 0). The mask is checked to be a
    # prefix of each row, so a row's padding (δ = 0, after its last real step) stays exactly 0
    # from A_T = 0 on: nothing to clear step by step
    delta_t = np.ascontiguousarray(delta.T)
    adv_t = np.empty((nt, nb), dtype=np.float64)
    after = np.zeros(nb, dtype=np.float64)
    for t in range(nt - 1, -1, -1):
        here = adv_t[t]
        np.multiply(after, decay, out=here)
        here += delta_t[t]
        after = here
    return adv_t.T  # a view: the caller's cast to the output dtype makes it contiguous


@dataclass(frozen=True, slots=True)
class _Rows:
    """Checked inputs in float64 with padding zeroed, plus each row's length and bootstrap value."""

    reward: np.ndarray
    value: np.ndarray | None  # given to `check` by `gae` only
    terminated: np.ndarray
    mask: np.ndarray
    lengths: np.ndarray
    bootstrap: np.ndarray
    out_dtype: np.dtype

    @classmethod
    def check(
        cls,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        mask: np.ndarray,
        next_value: np.ndarray,
        truncation: str,
        episode_id: Sequence[str] | np.ndarray | None,
        *,
        value: np.ndarray | None = None,
    ) -> _Rows:
        if truncation not in TRUNCATION_MODES:
            raise ValueError(f"truncation must be one of {', '.join(map(repr, TRUNCATION_MODES))}"
                             f", got {truncation!r}")
        arrays = {"reward": reward, "terminated": terminated, "truncated": truncated,
                  "mask": mask}
        if value is not None:
            arrays["value"] = value
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        next_value = np.asarray(next_value)
        _check_shapes(arrays, next_value, episode_id)
        _check_kinds(arrays, next_value)
        mask = arrays["mask"]
        names = _row_names(episode_id, mask.shape[0])
        lengths = mask.sum(axis=1)
        mask_problems = _mask_problems(mask, lengths, names)
        if mask_problems:  # row lengths mean nothing until the mask is right
            raise ContractError(mask_problems)
        problems = _finite_problems(arrays, mask, names)
        terminated = arrays["terminated"] & mask
        truncated = arrays["truncated"] & mask
        problems += _mid_row_end_problems(terminated | truncated, lengths, names)
        bootstrap, more = _bootstrap(terminated, truncated, lengths, next_value, truncation, names)
        problems += more
        if problems:
            raise ContractError(problems)
        out_dtype = np.result_type(*(a.dtype for k, a in arrays.items()
                                     if k in ("reward", "value")), np.float32)
        zeroed = {k: np.where(mask, arrays[k], 0).astype(np.float64)
                  for k in ("reward", "value") if k in arrays}
        return cls(reward=zeroed["reward"], value=zeroed.get("value"), terminated=terminated,
                   mask=mask, lengths=lengths, bootstrap=bootstrap, out_dtype=out_dtype)


def _check_rate(name: str, rate: float) -> None:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {rate!r}")


def _check_shapes(arrays: dict[str, np.ndarray], next_value: np.ndarray,
                  episode_id: Sequence[str] | np.ndarray | None) -> None:
    shape = arrays["reward"].shape
    problems = []
    if len(shape) != 2:
        problems.append(Problem("reward", "[B, T]", f"shape {list(shape)}", "wrong rank"))
    for name, arr in arrays.items():
        if name != "reward" and arr.shape != shape:
            problems.append(Problem(name, f"the reward's shape {list(shape)}",
                                    f"{list(arr.shape)}", "shape differs from reward"))
    rows = shape[:1]
    if next_value.shape != rows:
        problems.append(Problem("next_value", f"[B] = {list(rows)}", f"{list(next_value.shape)}",
                                "one bootstrap value per row"))
    if episode_id is not None and len(episode_id) != (rows[0] if rows else 0):
        problems.append(Problem("episode_id", f"[B] = {list(rows)}", f"[{len(episode_id)}]",
                                "one episode id per row"))
    if problems:
        raise ContractError(problems)


def _check_kinds(arrays: dict[str, np.ndarray], next_value: np.ndarray) -> None:
    problems = []
    for name, arr in arrays.items():
        want = "b" if name in ("terminated", "truncated", "mask") else "f"
        if arr.dtype.kind != want:
            expected = "bool" if want == "b" else "a float dtype"
            problems.append(Problem(name, expected, str(arr.dtype), "wrong dtype"))
    if next_value.dtype.kind != "f":
        problems.append(Problem("next_value", "a float dtype (NaN where unknown)",
                                str(next_value.dtype), "wrong dtype"))
    if problems:
        raise ContractError(problems)


def _row_names(episode_id: Sequence[str] | np.ndarray | None, n: int) -> _RowNames:
    return _RowNames(episode_id)


class _RowNames:
    """`names[b]`: how a message names row b (made only for the rows a message names)."""

    def __init__(self, episode_id: Sequence[str] | np.ndarray | None) -> None:
        self.episode_id = episode_id

    def __getitem__(self, b: Any) -> str:
        if self.episode_id is None:
            return f"row {b}"
        return f"row {b} (episode {quoted(str(self.episode_id[b]))})"


def _mask_problems(mask: np.ndarray, lengths: np.ndarray, names: _RowNames) -> list[Problem]:
    """Padding only at a row's end: the mask must be a run of True then a run of False."""
    prefix = np.arange(mask.shape[1])[None, :] < lengths[:, None]
    bad = np.flatnonzero((mask != prefix).any(axis=1))
    return [Problem(f"mask[{b}]", "True on real steps, then False (padding only at the end)",
                    _mask_text(mask[b]), f"{names[b]} has a gap in its mask") for b in bad]


def _mask_text(row: np.ndarray) -> str:
    text = "".join("1" if x else "0" for x in row[:40])
    return text + ("..." if row.size > 40 else "")


def _finite_problems(arrays: dict[str, np.ndarray], mask: np.ndarray,
                     names: _RowNames) -> list[Problem]:
    problems = []
    for name in ("reward", "value"):
        if name not in arrays:
            continue
        bad = mask & ~np.isfinite(arrays[name])
        for b, t in zip(*np.nonzero(bad), strict=True):
            problems.append(Problem(f"{name}[{b}, {t}]", "a finite number on a real step",
                                    repr(float(arrays[name][b, t])),
                                    f"{names[b]}: {name} not finite"))
    return problems


def _mid_row_end_problems(done: np.ndarray, lengths: np.ndarray,
                          names: _RowNames) -> list[Problem]:
    """An episode ends only at its last step, so a row is done at most at its last real step."""
    last = np.where(lengths > 0, lengths - 1, -1)
    mid = done & (np.arange(done.shape[1])[None, :] < last[:, None])
    problems = []
    for b in np.flatnonzero(mid.any(axis=1)):
        t = int(np.flatnonzero(mid[b])[0])
        problems.append(Problem(
            f"terminated/truncated[{b}, {t}]",
            f"an episode end only at the row's last real step ({int(last[b])})",
            f"done at step index {t}",
            f"{names[b]} ends before its last step (a row must hold one episode)"))
    return problems


def _bootstrap(
    terminated: np.ndarray,
    truncated: np.ndarray,
    lengths: np.ndarray,
    next_value: np.ndarray,
    truncation: str,
    names: _RowNames,
) -> tuple[np.ndarray, list[Problem]]:
    """The value after each row's last real step: 0 when terminated, else `next_value[b]`."""
    nb = lengths.shape[0]
    last = np.maximum(lengths - 1, 0)
    ends_terminated = terminated[np.arange(nb), last] & (lengths > 0)
    ends_truncated = truncated[np.arange(nb), last] & (lengths > 0)
    known = np.isfinite(next_value)
    needed = (lengths > 0) & ~ends_terminated
    bootstrap = np.where(needed & known, next_value, 0.0).astype(np.float64)
    if truncation == "terminal":
        return bootstrap, []
    missing = np.flatnonzero(needed & ~known)
    if missing.size == 0:
        return bootstrap, []
    ends = [f"{names[b]} ends " + ("truncated" if ends_truncated[b] else
                                    "neither terminated nor truncated (open, or cut by max_len "
                                    "where the next row's first value is its bootstrap and "
                                    "the rollouts record no value)")
            for b in missing]
    expected = ("a finite next_value to bootstrap from (record next_value on the last step, "
                "or pass truncation=\"terminal\" to treat the row end as terminal)")
    if missing.size == 1:
        b = int(missing[0])
        return bootstrap, [Problem(f"next_value[{b}]", expected, repr(float(next_value[b])),
                                   f"{ends[0]} with no bootstrap value")]
    shown = "; ".join(ends[:3]) + (f"; and {missing.size - 3} more" if missing.size > 3 else "")
    return bootstrap, [Problem("next_value", expected, f"NaN in {missing.size} rows",
                               f"{missing.size} rows end with no bootstrap value: {shown}")]
