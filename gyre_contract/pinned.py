"""Pinned models shipped with the package: CartPole, an LLM-style step, and a CartPole batch.

Pin your own environment the same way: subclass `RolloutStep` (or `TrainBatch`) and redeclare
the fields whose dtype or shape you know, each as `Annotated[<what a validated value is>,
Tensor(dtype, shape, ...)]`: `np.ndarray` for a tensor with dims, `float`, `int`, `bool` or `str`
for a scalar (shape `[]`), with `| None` inside the brackets for an optional field.
`next_observation` follows `observation` automatically. On the command line:
`--model gyre_contract.pinned:CartPoleStep`.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import numpy as np
from pydantic import Field

from gyre_contract.core._models import Modalities, RolloutStep, TrainBatch
from gyre_contract.core._tensor import Tensor

__all__ = ["CartPoleStep", "LLMStep", "CartPoleBatch"]


class CartPoleStep(RolloutStep):
    """CartPole-v1: observation float32 [4] (x, x_dot, theta, theta_dot), discrete action."""

    observation: Annotated[np.ndarray, Tensor(
        "float32", [4], role="observation",
        description="cart position, cart velocity, pole angle, pole angular velocity")]
    action: Annotated[int, Tensor(
        "int64", [], role="action", description="0 = push left, 1 = push right")]
    logprob: Annotated[float | None, Tensor(
        "float32", [], role="logprob",
        description="log pi(a|s) of the action under policy_version")] = None


class PromptObservation(Modalities):
    """What the LLM saw: the prompt's token ids (any length) and, optionally, its text."""

    token_ids: Annotated[np.ndarray, Tensor(
        "int64", ["P"], role="observation", description="prompt token ids")]
    # absent is None, null is refused: pydantic never validates the default, so `str` (not
    # `str | None`, which would admit null) is the schema and None the default
    text: str = Field(  # type: ignore[assignment]
        None, description="the prompt as text (optional; never null)")


class LLMStep(RolloutStep):
    """One generation (one turn) as one step: prompt in, generated token ids out, one log-prob
    per token; optionally the reference log-probs, the group, a loss mask and per-token rewards."""

    varying_dims: ClassVar[tuple[str, ...]] = ("P", "A")

    observation: PromptObservation
    action: Annotated[np.ndarray, Tensor(
        "int64", ["A"], role="action", description="generated token ids")]
    logprob: Annotated[np.ndarray | None, Tensor(
        "float32", ["A"], role="logprob",
        description="per-token log-probabilities under policy_version")] = None
    ref_logprob: Annotated[np.ndarray | None, Tensor(
        "float32", ["A"], role="ref_logprob",
        description="per-token log-probabilities under the reference policy")] = None
    group_id: Annotated[str | None, Tensor(
        "string", [], role="group_id",
        description="the prompt's group: completions sampled for one prompt")] = None
    loss_mask: Annotated[np.ndarray | None, Tensor(
        "bool", ["A"], role="loss_mask",
        description="False on tokens the policy did not generate")] = None
    token_reward: Annotated[np.ndarray | None, Tensor(
        "float32", ["A"], role="token_reward", description="per-token reward")] = None


class CartPoleBatch(TrainBatch):
    """A CartPole training batch: obs float32 [B, T, 4], discrete actions int64 [B, T]."""

    obs: Annotated[np.ndarray, Tensor(
        "float32", ["B", "T", 4], role="observation", finite=False, description="observations")]
    action: Annotated[np.ndarray, Tensor(
        "int64", ["B", "T"], role="action", description="actions taken")]
