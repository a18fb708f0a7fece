"""The two record formats of the contract: `RolloutStepV1` (one step) and `TrainBatchV1` (arrays).

Pin a project's shapes by subclassing, Pydantic-style::

    class CartPoleStep(RolloutStep):
        observation: Annotated[np.ndarray, Tensor("float32", [4], role="observation")]
        action: Annotated[int, Tensor("int64", [], role="action")]

`next_observation` follows a pinned `observation` unless the subclass pins it too. The rules
the validators apply are those of the registry (`core._rules`), each once.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from gyre_contract.core import _modelinfo as modelinfo
from gyre_contract.core._errors import Problem
from gyre_contract.core._fields import (  # noqa: F401  (re-exported: the models' building blocks)
    F32,
    AnyObservation,
    GyreModel,
    JsonScalars,
    Modalities,
    field_specs,
    record_bindings,
)
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._registry import run
from gyre_contract.core._rules import BatchView
from gyre_contract.core._tensor import Tensor, TensorSpec


class RolloutStepV1(GyreModel):
    """One time step of one episode, as a sampler writes it (docs/contract.md §3)."""

    gyre_kind: ClassVar[str] = "rollout_step"
    gyre_version: ClassVar[str] = "1.1.0"

    # The type before each Tensor is what a validated value is (docs/contract.md §3): a plain
    # Python scalar for shape [], else an ndarray; `Any` where a pinned subclass decides
    # (`*act` is a scalar int for CartPole, an ndarray of token ids for an LLM).
    observation: Annotated[Any, AnyObservation("observation")] = Field(
        description="s_t: a float32 tensor, or an object of named modalities")
    action: Annotated[Any, Tensor(
        ("int64", F32), ["*act"], role="action",
        description="the action actually executed (LLM: the generated token ids)")]
    logprob: Annotated[Any, Tensor(
        F32, ["*logp"], role="logprob",
        description="log pi(a|s) under policy_version; [] or the action's dims")] = None
    ref_logprob: Annotated[Any, Tensor(
        F32, ["*ref_logprob"], role="ref_logprob",
        description="log-prob under the frozen reference policy (KL); [] or the action's dims; "
                    "never a behaviour logprob")] = None
    entropy: Annotated[float | None, Tensor(
        F32, [], role="entropy", description="policy entropy at s_t")] = None
    value: Annotated[float | None, Tensor(
        F32, [], role="value", description="critic estimate V(s_t)")] = None
    next_value: Annotated[float | None, Tensor(
        F32, [], role="next_value",
        description="V(s_{t+1}); needed on a truncated or unfinished last step")] = None
    next_observation: Annotated[Any, AnyObservation("next_observation")] = Field(
        None, description="s_{t+1}; on a truncated last step the true final observation")
    reward: Annotated[float, Tensor(F32, [], role="reward", description="immediate reward r_t")]
    return_: Annotated[float | None, Tensor(
        F32, [], role="return", description="discounted return G_t, never merged with reward"
    )] = Field(None, alias="return")
    step: Annotated[int, Tensor(
        "int64", [], role="step", description="0-based index within the episode")]
    episode_id: Annotated[str, Tensor(
        "string", [], role="episode_id", description="non-empty episode id")]
    terminated: Annotated[bool, Tensor(
        "bool", [], role="terminated",
        description="the MDP reached a terminal state: no bootstrap")]
    truncated: Annotated[bool, Tensor(
        "bool", [], role="truncated",
        description="cut short (time limit, budget): bootstrap from next_value")]
    policy_version: Annotated[int, Tensor(
        "int64", [], role="policy_version",
        description="version of the weights that produced this step")]
    group_id: Annotated[str | None, Tensor(
        "string", [], role="group_id",
        description="steps sampled for the same prompt or state (GRPO, RLOO, best-of-n); "
                    "never the episode id")] = None
    loss_mask: Annotated[Any, Tensor(
        "bool", ["*loss_mask"], role="loss_mask",
        description="the action's dims: False on tokens the policy did not generate (tool "
                    "output spliced into a turn)")] = None
    token_reward: Annotated[Any, Tensor(
        F32, ["*token_reward"], role="token_reward",
        description="the action's dims: per-token reward (a process reward model), beside the "
                    "scalar reward")] = None
    info: Annotated[dict[str, Any] | None, JsonScalars()] = Field(
        None, description="free-form JSON scalars")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A pinned `observation` pins `next_observation` too, unless the subclass says otherwise."""
        annotations = cls.__dict__.get("__annotations__", {})
        if "observation" in annotations and "next_observation" not in annotations:
            annotations["next_observation"] = annotations["observation"]
            if "next_observation" not in cls.__dict__:
                cls.next_observation = Field(
                    None, description="s_{t+1}; on a truncated last step the true final observation")
        super().__init_subclass__(**kwargs)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """A `next_observation` copied from `observation` says so in its role."""
        super().__pydantic_init_subclass__(**kwargs)
        info = cls.model_fields["next_observation"]
        info.metadata = [replace(m, role="next_observation") if isinstance(m, TensorSpec) else m
                         for m in info.metadata]
        modelinfo.forget(cls)  # field specs derived before the role was set are stale

    @model_validator(mode="after")
    def _cross_field_rules(self) -> RolloutStepV1:
        problems = step_cross_problems(self)
        if problems:
            raise PydanticProblems(problems)
        return self


def PydanticProblems(problems: list[Problem]) -> Exception:
    """Cross-field problems travel through pydantic as one error carrying them all."""
    from pydantic_core import PydanticCustomError

    return PydanticCustomError("gyre_problems", "{count} cross-field problems",
                               {"count": len(problems), "problems": problems})


def step_cross_problems(step: RolloutStepV1) -> list[Problem]:
    """The registry's `step` rules (several fields of one record), each problem naming its rule."""
    return run("step", None, step)


RolloutStep = RolloutStepV1


# -- training batch ------------------------------------------------------------------------

class BatchModel(GyreModel):
    """What the trainer-side batches share: extra keys allowed (a trainer's own arrays, leading
    with [B]), the registry's batch rules run once the fields parse (`rule_problems`), and the
    arrays by wire name."""

    model_config = ConfigDict(extra="allow")

    if TYPE_CHECKING:  # every batch model has these fields (declared by each, for pydantic)
        policy_version: np.ndarray
        episode_id: np.ndarray | None

    def rule_problems(self) -> list[Problem]:
        """The registry's rules for this kind of batch (each batch model says which)."""
        raise NotImplementedError

    @model_validator(mode="after")
    def _batch_rules(self) -> BatchModel:
        problems = self.rule_problems()
        if problems:
            raise PydanticProblems(problems)
        return self

    def arrays(self) -> dict[str, Any]:
        """Every field present, by wire name (`return`, not `return_`), extras included."""
        info = model_info(type(self))
        out = {w: getattr(self, info.attr(w)) for w in field_specs(type(self))}
        out.update(self.model_extra or {})
        return {k: v for k, v in out.items() if v is not None}


class TrainBatchV1(BatchModel):
    """Arrays with leading [B, T]; each row a contiguous run of one episode (docs/contract.md §4).

    Float fields may hold NaN or inf under padding; the rules check finiteness where `mask`
    is True. Extra keys are allowed (a trainer's own arrays) but must lead with [B].
    """

    gyre_kind: ClassVar[str] = "train_batch"
    gyre_version: ClassVar[str] = "1.0.0"
    batch_dims: ClassVar[tuple[str, ...]] = ("B", "T")

    obs: Annotated[Any, AnyObservation("observation", ("B", "T"))] = Field(
        description="observations [B, T, *obs], or an object of modalities each [B, T, ...]")
    action: Annotated[np.ndarray, Tensor(
        ("int64", F32), ["B", "T", "*act"], role="action", finite=False,
        description="actions taken")]
    reward: Annotated[np.ndarray, Tensor(
        F32, ["B", "T"], role="reward", finite=False, description="immediate rewards")]
    done: Annotated[np.ndarray, Tensor(
        "bool", ["B", "T"], role="done", description="terminated OR truncated")]
    terminated: Annotated[np.ndarray | None, Tensor(
        "bool", ["B", "T"], role="terminated",
        description="terminal state reached: no bootstrap")] = None
    truncated: Annotated[np.ndarray | None, Tensor(
        "bool", ["B", "T"], role="truncated",
        description="cut short: bootstrap from the next value")] = None
    advantage: Annotated[np.ndarray, Tensor(
        F32, ["B", "T"], role="advantage", finite=False, description="advantage estimates")]
    return_: Annotated[np.ndarray | None, Tensor(
        F32, ["B", "T"], role="return", finite=False, description="return targets"
    )] = Field(None, alias="return")
    value: Annotated[np.ndarray | None, Tensor(
        F32, ["B", "T"], role="value", finite=False, description="critic values")] = None
    logprob: Annotated[np.ndarray, Tensor(
        F32, ["B", "T"], role="logprob", finite=False,
        description="behaviour log-probabilities")]
    mask: Annotated[np.ndarray, Tensor(
        "bool", ["B", "T"], role="mask",
        description="True on real steps; padding only at a row's end")]
    policy_version: Annotated[np.ndarray, Tensor(
        "int64", ["B"], role="policy_version",
        description="version of the weights that produced each row")]
    episode_id: Annotated[np.ndarray | None, Tensor(
        "string", ["B"], role="episode_id", description="episode of each row")] = None
    step: Annotated[np.ndarray | None, Tensor(
        "int64", ["B", "T"], role="step", description="step index within the episode")] = None

    def rule_problems(self) -> list[Problem]:
        """The `batch` rules of the `shape` phase, then (once the shapes hold) `values`."""
        return batch_rule_problems(self)


def batch_rule_problems(batch: TrainBatchV1) -> list[Problem]:
    """The registry's `batch` rules (docs/contract.md §4): one B and T, finite floats under mask,
    flags off-mask False, padding at the end. Values are checked once the shapes hold."""
    arrays = batch.arrays()
    bindings, dim_problems = record_bindings(type(batch), arrays)
    view = BatchView(type(batch), arrays, dict(batch.model_extra or {}), bindings, dim_problems,
                     mask=arrays["mask"])
    problems = run("batch", "shape", view)
    if problems or view.mask.ndim != 2:
        return problems
    return problems + run("batch", "values", view)


TrainBatch = TrainBatchV1
