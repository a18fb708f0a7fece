"""The rules of a token batch (`TokenBatchV1`, one row per generated turn), in the rule registry.

A token batch shares three batch rules with `TrainBatch` (`batch.dims_agree`,
`batch.extra_fields_lead_with_b`, `batch.policy_version_fresh`: the dims, the trainer's own
arrays, staleness). Its own rules run in two phases of their own, so that a `TrainBatch` never
runs them and a token batch never runs the `[B, T]` rules of `TrainBatch`:

- `token_shape`: `advantage` is one value per row `[B]` or one per response token `[B, R]`;
- `token_values` (once the shapes hold): the prompt is left-padded (`prompt_mask` False only at
  the start of a row), `response_mask` is False from `response_length` on, float fields are
  finite where `response_mask` is True (a `[B]` float everywhere), and `logprob` / `ref_logprob`
  are <= 0 where `response_mask` is True.

Each rule's `violate` builder breaks a clean token batch (it returns None for any other model:
a `TrainBatch` cannot break a token rule).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gyre_contract.core._errors import Problem, describe
from gyre_contract.core._fields import field_specs
from gyre_contract.core._registry import Rule, register
from gyre_contract.core._rules import BatchView
from gyre_contract.core._tensor import TensorSpec

TOKEN_KIND = "token_batch"
"""`gyre_kind` of the token batch models (their subclasses keep it)."""


def is_token_model(model: Any) -> bool:
    """Whether `model` is a token batch model (`TokenBatchV1` or a subclass)."""
    return getattr(model, "gyre_kind", None) == TOKEN_KIND


def rows_text(bad_rows: np.ndarray) -> str:
    """`rows [0, 3, ...]`: the rows of a batch where `bad_rows` is True (the first five)."""
    rows = np.flatnonzero(bad_rows)
    shown = ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")
    return f"rows [{shown}]"


# -- finders ---------------------------------------------------------------------------------


def _advantage_shape(view: BatchView) -> list[Problem]:
    advantage = view.arrays.get("advantage")
    mask = view.arrays.get("response_mask")
    if not isinstance(advantage, np.ndarray) or not isinstance(mask, np.ndarray):
        return []
    if advantage.shape in (mask.shape[:1], mask.shape):
        return []
    b, r = mask.shape
    return [Problem("advantage", f"float32[{b}] (one per row) or float32[{b}, {r}] (one per "
                    f"response token)", describe(advantage),
                    "advantage is neither [B] nor [B, R]")]


def _prompt_left_padded(view: BatchView) -> list[Problem]:
    mask = view.arrays["prompt_mask"]
    late = (~mask[:, 1:] & mask[:, :-1]).any(axis=1)
    if not late.any():
        return []
    return [Problem("prompt_mask", "False then only True along each row (left padding)",
                    rows_text(late), "prompt padding after a real token")]


def _response_within_length(view: BatchView) -> list[Problem]:
    mask, length = view.arrays["response_mask"], view.arrays["response_length"]
    r = mask.shape[1]
    problems = []
    outside = (length < 0) | (length > r)
    if outside.any():
        problems.append(Problem("response_length", f"0..{r} (R, the padded response length)",
                                f"{int(length[outside][0])} in {rows_text(outside)}",
                                "response_length out of range"))
    # a row whose length is out of range has that one problem: every position is "past" -1
    late = (mask & (np.arange(r)[None, :] >= length[:, None])).any(axis=1) & ~outside
    if late.any():
        problems.append(Problem("response_mask", "False at positions >= response_length",
                                f"True past the response in {rows_text(late)}",
                                "response_mask True past response_length"))
    return problems


def _finite(view: BatchView) -> list[Problem]:
    mask = view.mask
    problems = []
    for wire, spec in field_specs(view.model).items():
        value = view.arrays.get(wire)
        if not isinstance(spec, TensorSpec) or not isinstance(value, np.ndarray) \
                or value.dtype.kind != "f":
            continue
        finite = np.isfinite(value)
        if value.shape == mask.shape:
            bad = (mask & ~finite).any(axis=1)
            where = "finite values where response_mask is True"
        else:
            bad = ~finite.reshape(value.shape[0], -1).all(axis=1)
            where = "finite values on every row"
        if bad.any():
            problems.append(Problem(wire, where, f"non-finite values in {rows_text(bad)}",
                                    "not finite"))
    return problems


LOGPROB_FIELDS = ("logprob", "ref_logprob")


def _logprob_sign(view: BatchView) -> list[Problem]:
    mask = view.mask
    problems = []
    for name in LOGPROB_FIELDS:
        value = view.arrays.get(name)
        if not isinstance(value, np.ndarray) or value.shape != mask.shape:
            continue
        positive = mask & (value > 0) & np.isfinite(value)  # inf: `not finite` says it
        if positive.any():
            top = str(value[positive].max())  # its own dtype: float32 0.3 reads 0.3
            problems.append(Problem(name, "<= 0 where response_mask is True (a token's "
                                    "log-probability)", f"max {top} in "
                                    f"{rows_text(positive.any(axis=1))}",
                                    "positive log-probability"))
    return problems


# -- violating builders ------------------------------------------------------------------------


def _token_only(change: Any) -> Any:
    """A builder that breaks a clean token batch with `change(batch)`, and nothing else."""
    def build(batch: dict[str, Any], model: Any) -> dict[str, Any] | None:
        return change(dict(batch)) if is_token_model(model) else None
    return build


def _edited(key: str, index: Any, item: Any) -> Any:
    def change(batch: dict[str, Any]) -> dict[str, Any]:
        value = np.array(batch[key])
        value[index] = item
        batch[key] = value
        return batch
    return change


def _advantage_over_prompt(batch: dict[str, Any]) -> dict[str, Any]:
    b, p = np.shape(batch["prompt_ids"])
    batch["advantage"] = np.zeros((b, p + np.shape(batch["response_ids"])[1]), np.float32)
    return batch


def _mask_past_length(batch: dict[str, Any]) -> dict[str, Any]:
    length = np.array(batch["response_length"])
    row = int(np.argmin(length))  # a row with padding after its response
    mask = np.array(batch["response_mask"])
    mask[row, length[row]] = True
    batch["response_mask"] = mask
    return batch


TOKEN_RULES = [
    Rule("batch.advantage_per_row_or_token", "batch", ("advantage is neither [B] nor [B, R]",),
         _advantage_shape, _token_only(_advantage_over_prompt), phase="token_shape",
         doc="a token batch's advantage is [B] (one per row) or [B, R] (one per token)"),
    Rule("batch.prompt_padding_at_start", "batch", ("prompt padding after a real token",),
         _prompt_left_padded, _token_only(_edited("prompt_mask", (0, -1), False)),
         phase="token_values", doc="prompt_mask is False then only True along each row"),
    Rule("batch.response_mask_within_length", "batch",
         ("response_mask True past response_length", "response_length out of range"),
         _response_within_length, _token_only(_mask_past_length), phase="token_values",
         doc="response_mask is False at positions >= response_length (<= R)"),
    Rule("batch.finite_under_response_mask", "batch", ("not finite",), _finite,
         _token_only(_edited("logprob", (0, 0), np.nan)), phase="token_values",
         doc="a token batch's floats are finite where response_mask is True, [B] ones everywhere"),
    Rule("batch.token_logprob_nonpositive", "batch", ("positive log-probability",),
         _logprob_sign, _token_only(_edited("logprob", (0, 0), 0.5)), phase="token_values",
         doc="logprob and ref_logprob are <= 0 where response_mask is True"),
]

for _rule in TOKEN_RULES:
    register(_rule)
