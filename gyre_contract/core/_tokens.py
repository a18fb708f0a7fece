"""The LLM part of the contract (v1.1): `TokenBatchV1`, one row per generated turn, and its rules.

A row is one step of the rollout file (one generation): the prompt the model saw, left-padded
to `P`, and the tokens it generated, right-padded to `R`, with one value per token for the
log-probabilities, values and rewards. `response_mask` is True on the tokens the loss counts
(generated, and `loss_mask` True where the sampler recorded one: tool output spliced into a
turn is not counted). Per-row fields are `[B]`. Pin a project's dtypes or extra arrays by
subclassing, as for `TrainBatch`; extra keys are allowed and must lead with `B`. (The token
fields of a *step* — `ref_logprob`, `loss_mask`, `token_reward`, one value per action token —
are field knowledge, in `core._fields`, checked by the step rule `step.token_fields_shape`.)

The rules are those of the registry. A token batch shares three batch rules with `TrainBatch`
(`batch.dims_agree`, `batch.extra_fields_lead_with_b`, `batch.policy_version_fresh`: the dims,
the trainer's own arrays, staleness). Its own rules, registered here, run in two phases of their
own, so that a `TrainBatch` never runs them and a token batch never runs the `[B, T]` rules of
`TrainBatch`:

- `token_shape`: `advantage` is one value per row `[B]` or one per response token `[B, R]`;
- `token_values` (once the shapes hold): the prompt is left-padded (`prompt_mask` False only at
  the start of a row), `response_mask` is False from `response_length` on, float fields are
  finite where `response_mask` is True (a `[B]` float everywhere), and `logprob` / `ref_logprob`
  are <= 0 where `response_mask` is True.

Each rule's `violate` builder breaks a clean token batch (it returns None for any other model:
a `TrainBatch` cannot break a token rule).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import Field

from gyre_contract.core._errors import Problem, describe
from gyre_contract.core._fields import F32, field_specs, record_bindings
from gyre_contract.core._models import BatchModel
from gyre_contract.core._registry import Rule, register, run
from gyre_contract.core._rules import BatchView, rows_text
from gyre_contract.core._tensor import Tensor, TensorSpec

TOKEN_KIND = "token_batch"
"""`gyre_kind` of the token batch models (their subclasses keep it)."""


def is_token_model(model: Any) -> bool:
    """Whether `model` is a token batch model (`TokenBatchV1` or a subclass)."""
    return getattr(model, "gyre_kind", None) == TOKEN_KIND


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
    late = _true_past(mask, length) & ~outside
    if late.any():
        problems.append(Problem("response_mask", "False at positions >= response_length",
                                f"True past the response in {rows_text(late)}",
                                "response_mask True past response_length"))
    return problems


def _true_past(mask: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Per row, whether `mask` is True at some position >= `length`. For a bool mask, one
    `logical_or.reduceat` over the rows laid end to end, each row's tail `[length, R)` one
    span (one pass, no `[B, R]` temporary; a row's reversed `argmax` walks memory backwards,
    several times slower); otherwise position by position."""
    b, r = mask.shape
    if mask.dtype != np.bool_ or not r or not b:
        return np.asarray((mask & (np.arange(r)[None, :] >= length[:, None])).any(axis=1))
    rows = np.arange(b, dtype=np.intp) * r
    start = rows + np.clip(length, 0, r)  # a tail's first cell; a row's end when it has none
    bounds = np.empty(2 * b - 1, np.intp)  # tail i spans [start[i], next row's first cell)
    bounds[0::2] = np.minimum(start, b * r - 1)  # in range: an empty last tail is masked below
    bounds[1::2] = rows[1:]
    spans = np.logical_or.reduceat(mask.reshape(-1), bounds)[0::2]
    return spans & (length < r)  # a tail of no cell: reduceat gave the cell at its start


def _finite(view: BatchView) -> list[Problem]:
    mask = view.mask
    problems = []
    for wire, spec in field_specs(view.model).items():
        value = view.arrays.get(wire)
        if not isinstance(spec, TensorSpec) or not isinstance(value, np.ndarray) \
                or value.dtype.kind != "f":
            continue
        if not value.size or np.isfinite(value.min()) and np.isfinite(value.max()):
            continue  # every value finite (a NaN makes the min and max NaN)
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
        if not value.size or value.max() <= 0:
            continue  # nothing positive anywhere (a NaN makes the max NaN: looked at below)
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


# -- the token batch ----------------------------------------------------------------------------

class TokenBatchV1(BatchModel):
    """Token rows: prompt [B, P] left-padded, response [B, R] right-padded, per-row fields [B].

    Float fields may hold NaN or inf on padding; the rules check finiteness where
    `response_mask` is True (a `[B]` float everywhere). Extra keys are allowed (a trainer's own
    arrays) but must lead with [B].
    """

    gyre_kind: ClassVar[str] = TOKEN_KIND
    gyre_version: ClassVar[str] = "1.0.0"
    batch_dims: ClassVar[tuple[str, ...]] = ("B",)

    prompt_ids: Annotated[np.ndarray, Tensor(
        "int64", ["B", "P"], role="observation", description="prompt token ids, left-padded")]
    prompt_mask: Annotated[np.ndarray, Tensor(
        "bool", ["B", "P"], role="mask",
        description="True on real prompt tokens (padding only at the start)")]
    response_ids: Annotated[np.ndarray, Tensor(
        "int64", ["B", "R"], role="action", description="generated token ids, right-padded")]
    response_mask: Annotated[np.ndarray, Tensor(
        "bool", ["B", "R"], role="mask",
        description="True on generated tokens the loss counts (loss_mask True)")]
    response_length: Annotated[np.ndarray, Tensor(
        "int64", ["B"], role="other", description="number of real response tokens of each row")]
    logprob: Annotated[np.ndarray, Tensor(
        F32, ["B", "R"], role="logprob", finite=False,
        description="per-token log-probabilities under the sampling policy")]
    ref_logprob: Annotated[np.ndarray | None, Tensor(
        F32, ["B", "R"], role="ref_logprob", finite=False,
        description="per-token log-probabilities under the reference policy")] = None
    value: Annotated[np.ndarray | None, Tensor(
        F32, ["B", "R"], role="value", finite=False, description="per-token critic values")] = None
    token_reward: Annotated[np.ndarray | None, Tensor(
        F32, ["B", "R"], role="token_reward", finite=False,
        description="per-token rewards (process reward model)")] = None
    return_: Annotated[np.ndarray | None, Tensor(
        F32, ["B", "R"], role="return", finite=False, description="per-token return targets"
    )] = Field(None, alias="return")
    advantage: Annotated[np.ndarray, Tensor(
        F32, ["B", "*adv"], role="advantage", finite=False,
        description="advantages: [B] (one per row) or [B, R] (one per token)")]
    reward: Annotated[np.ndarray, Tensor(
        F32, ["B"], role="reward", finite=False, description="the sequence reward of each row")]
    group_id: Annotated[np.ndarray | None, Tensor(
        "string", ["B"], role="group_id",
        description="the group of each row (samples of one prompt)")] = None
    episode_id: Annotated[np.ndarray, Tensor(
        "string", ["B"], role="episode_id", description="episode of each row")]
    policy_version: Annotated[np.ndarray, Tensor(
        "int64", ["B"], role="policy_version",
        description="version of the weights that produced each row")]
    step: Annotated[np.ndarray, Tensor(
        "int64", ["B"], role="step", description="turn index within the episode")]

    def rule_problems(self) -> list[Problem]:
        """The shared `shape` rules and the `token_shape` ones, then `token_values`."""
        return token_batch_problems(self)


def token_batch_problems(batch: TokenBatchV1) -> list[Problem]:
    """The registry's rules of a token batch: the shared `shape` rules and the `token_shape`
    ones, then (once the shapes hold) the `token_values` ones."""
    arrays = batch.arrays()
    bindings, dim_problems = record_bindings(type(batch), arrays)
    view = BatchView(type(batch), arrays, dict(batch.model_extra or {}), bindings, dim_problems,
                     mask=arrays["response_mask"])
    problems = run("batch", "shape", view) + run("batch", "token_shape", view)
    if problems:
        return problems
    return run("batch", "token_values", view)


TokenBatch = TokenBatchV1


# -- packed token rows (v1.2) ---------------------------------------------------------------------
# Every row's prompt + response laid end to end in micro-batch rows of S tokens `[M, S]`, what
# flash-attention varlen kernels read; per-sample fields stay `[B]`, one per token row (sample).
# One rule, `batch.packed_rows_unpack`: unpacking by `sample_index` gives back every row exactly
# once — each sample one run of tokens in one micro-batch row, `position_ids` restarting at 0 at
# each run (the tail padding one more run), `sample_index` −1 exactly on padding, and the loss
# only on real tokens. Its floats are 0 off the tokens, so they are finite everywhere.

PACKED_KIND = "packed_batch"


def moved_positions(position: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """`[M, S]`: True where `position` is not the count of its cell from its run's start
    (`starts`: True at each run's first cell, and at column 0)."""
    width = position.shape[1]
    if position.size and position.dtype.kind in "iu" and position.min() >= 0 \
            and position.max() < width:
        # within 0..S-1 (no difference overflows): 0 at a start, elsewhere one more than the
        # cell before, cell by cell; a row holds its runs' counts exactly when each cell does
        moved = np.not_equal(position, 0)
        step = np.diff(position, axis=1)
        step -= 1
        np.copyto(moved[:, 1:], step.astype(bool), where=~starts[:, 1:])
        return moved
    cell = np.arange(position.size).reshape(position.shape)
    within = cell - np.maximum.accumulate(np.where(starts, cell, 0).reshape(-1)).reshape(
        position.shape)
    return np.not_equal(position, within)


def _packed_rows(view: BatchView) -> list[Problem]:
    arrays = view.arrays
    index, real = arrays["sample_index"], arrays["pad_mask"]
    samples = int(np.shape(arrays["episode_id"])[0])
    off = (real != (index >= 0)) | (index >= samples) | (index < -1)
    if off.any():
        return [Problem("sample_index", f"-1 exactly where pad_mask is False, else the token "
                        f"row 0..{samples - 1} of each token", f"{int(off.sum())} tokens off in "
                        f"{rows_text(off.any(axis=1))}", "sample_index disagrees with pad_mask")]
    problems = []
    starts = np.ones(index.shape, bool)  # a run begins at column 0 and where the sample changes
    starts[:, 1:] = index[:, 1:] != index[:, :-1]
    moved: Any = moved_positions(arrays["position_ids"], starts)
    if moved.any():
        problems.append(Problem("position_ids", "0 at each sample's first token (and at the tail "
                                "padding), then +1 along it", f"other positions in "
                                f"{rows_text(moved.any(axis=1))}",
                                "position_ids do not restart at each sample"))
    runs = np.bincount(index[starts & real], minlength=samples)
    if (runs != 1).any():
        missing, split = np.flatnonzero(runs == 0), np.flatnonzero(runs > 1)
        got = "; ".join(filter(None, [
            f"samples {missing[:5].tolist()} missing" if missing.size else "",
            f"samples {split[:5].tolist()} in several runs" if split.size else ""]))
        problems.append(Problem("sample_index", f"each of the {samples} token rows in one run "
                                "of tokens of one micro-batch row", got,
                                "a row is not unpacked exactly once"))
    leak = arrays["loss_mask"] & ~real
    if leak.any():
        problems.append(Problem("loss_mask", "False where pad_mask is False",
                                f"True on padding in {rows_text(leak.any(axis=1))}",
                                "loss_mask True on padding"))
    return problems


def _packed_only(change: Any) -> Any:
    """A builder that breaks a clean packed batch with `change(batch)`, and nothing else."""
    def build(batch: dict[str, Any], model: Any) -> dict[str, Any] | None:
        return change(dict(batch)) if getattr(model, "gyre_kind", None) == PACKED_KIND else None
    return build


def _sample_split(batch: dict[str, Any]) -> dict[str, Any]:
    index = np.array(batch["sample_index"])
    index[index == 1] = 0  # sample 0 now also where sample 1 was: unpacked twice, 1 never
    batch["sample_index"] = index
    return batch


register(Rule("batch.packed_rows_unpack", "batch",
              ("a row is not unpacked exactly once", "sample_index disagrees with pad_mask",
               "position_ids do not restart at each sample", "loss_mask True on padding"),
              _packed_rows, _packed_only(_sample_split), phase="packed_values",
              doc="unpacking a packed batch by sample_index gives back every row exactly once"))


class PackedBatchV1(BatchModel):
    """Packed token rows: each row's prompt + response in micro-batch rows of S tokens [M, S].

    A sample (a token row) is never split; `sample_index` says which row each token comes from
    (−1 on padding), `position_ids` restart at 0 at each sample. Per-token floats sit at their
    tokens' positions and are 0 elsewhere; per-sample fields are `[B]`. Extra keys are allowed
    and must lead with M (per token) or B (per sample).
    """

    gyre_kind: ClassVar[str] = PACKED_KIND
    gyre_version: ClassVar[str] = "1.0.0"
    batch_dims: ClassVar[tuple[str, ...]] = ("M",)
    extra_dims: ClassVar[tuple[str, ...]] = ("M", "B")

    input_ids: Annotated[np.ndarray, Tensor(
        "int64", ["M", "S"], role="action", description="each sample's prompt then response "
        "tokens, end to end; the pad id after the last sample")]
    position_ids: Annotated[np.ndarray, Tensor(
        "int64", ["M", "S"], role="other", description="0 at each sample's first token, +1 "
        "along it; the tail padding is one more run from 0")]
    pad_mask: Annotated[np.ndarray, Tensor(
        "bool", ["M", "S"], role="mask", description="True on real tokens")]
    loss_mask: Annotated[np.ndarray, Tensor(
        "bool", ["M", "S"], role="loss_mask", description="True on the response tokens the "
        "loss counts (real, and the step's loss_mask)")]
    sample_index: Annotated[np.ndarray, Tensor(
        "int64", ["M", "S"], role="other", description="the token row (sample) of each token, "
        "-1 on padding")]
    advantages: Annotated[np.ndarray, Tensor(
        F32, ["M", "S"], role="advantage", description="per-token advantages, 0 off the "
        "response")]
    logprobs: Annotated[np.ndarray, Tensor(
        F32, ["M", "S"], role="logprob", description="per-token log-probabilities under the "
        "sampling policy, 0 off the response")]
    ref_logprobs: Annotated[np.ndarray | None, Tensor(
        F32, ["M", "S"], role="ref_logprob", description="per-token log-probabilities under "
        "the reference policy, 0 off the response")] = None
    episode_id: Annotated[np.ndarray, Tensor(
        "string", ["B"], role="episode_id", description="episode of each sample")]
    policy_version: Annotated[np.ndarray, Tensor(
        "int64", ["B"], role="policy_version",
        description="version of the weights that produced each sample")]
    reward: Annotated[np.ndarray | None, Tensor(
        F32, ["B"], role="reward", description="the sequence reward of each sample")] = None
    group_id: Annotated[np.ndarray | None, Tensor(
        "string", ["B"], role="group_id", description="the group of each sample")] = None
    step: Annotated[np.ndarray | None, Tensor(
        "int64", ["B"], role="step", description="turn index within the episode")] = None

    def rule_problems(self) -> list[Problem]:
        """The shared `shape` rules, then (once they hold) `packed_values`."""
        arrays = self.arrays()
        bindings, dim_problems = record_bindings(type(self), arrays)
        view = BatchView(type(self), arrays, dict(self.model_extra or {}), bindings,
                         dim_problems, mask=arrays["pad_mask"])
        problems = run("batch", "shape", view)
        return problems or run("batch", "packed_values", view)


PackedBatch = PackedBatchV1
