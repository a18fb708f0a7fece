"""The token batch: `TokenBatchV1`, one row per generated turn of an LLM (docs/llm.md §2).

A row is one step of the rollout file (one generation): the prompt the model saw, left-padded
to `P`, and the tokens it generated, right-padded to `R`, with one value per token for the
log-probabilities, values and rewards. `response_mask` is True on the tokens the loss counts
(generated, and `loss_mask` True where the sampler recorded one: tool output spliced into a
turn is not counted). Per-row fields are `[B]`. Pin a project's dtypes or extra arrays by
subclassing, as for `TrainBatch`; extra keys are allowed and must lead with `B`.

The rules are those of the registry: the dims (`batch.dims_agree`), the extras
(`batch.extra_fields_lead_with_b`), staleness (`batch.policy_version_fresh`, when asked) and
the token rules of `core._tokenrules`.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import numpy as np
from pydantic import Field

from gyre_contract.core._errors import Problem
from gyre_contract.core._fields import F32, record_bindings
from gyre_contract.core._models import BatchModel
from gyre_contract.core._registry import run
from gyre_contract.core._rules import BatchView
from gyre_contract.core._tensor import Tensor
from gyre_contract.core._tokenrules import TOKEN_KIND


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
