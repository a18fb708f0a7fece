"""The two record formats of the contract: `RolloutStepV1` (one step) and `TrainBatchV1` (arrays).

Pin a project's shapes by subclassing, Pydantic-style::

    class CartPoleStep(RolloutStep):
        observation: Tensor("float32", [4], role="observation")
        action: Tensor("int64", [], role="action")

`next_observation` follows a pinned `observation` unless the subclass pins it too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import core_schema

from gyre_contract.core.dims import (
    CastError,
    bind_dims,
    format_shape,
    format_size,
    parse_shape,
    to_array,
)
from gyre_contract.core.errors import Problem, describe
from gyre_contract.core.tensor import Tensor, TensorSpec, gyre_error, tensor_spec_of

F32 = "float32"


class GyreModel(BaseModel):
    """Shared configuration: unknown keys are errors, values are never coerced loosely."""

    model_config = ConfigDict(
        extra="forbid",
        arbitrary_types_allowed=True,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
        frozen=False,
        revalidate_instances="never",
        defer_build=True,  # core schemas are built on first use: `import gyre_contract` stays light
    )

    gyre_kind: ClassVar[str] = ""
    gyre_version: ClassVar[str] = ""
    varying_dims: ClassVar[tuple[str, ...]] = ()
    batch_dims: ClassVar[tuple[str, ...]] = ()

    def to_record(self) -> dict[str, Any]:
        """The record as a plain dict keyed by wire names, absent optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True)


class Modalities(GyreModel):
    """Base for a pinned observation made of named modalities (`image`, `token_ids`, `text`)."""


class AnyObservation:
    """An observation of the base models: a float32 tensor, or an object of named modalities.

    Modalities are free-form (dtype inferred losslessly: ints → int64, floats → float32); in a
    batch each modality starts with the batch dims.
    """

    def __init__(self, role: str, lead: tuple[str, ...] = ()) -> None:
        self.lead = lead
        self.spec = TensorSpec(F32, parse_shape([*lead, "*obs"]), role)

    def validate(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {key: self._modality(key, item) for key, item in value.items()}
        return self.spec.validate(value)

    def _modality(self, key: str, value: Any) -> Any:
        if isinstance(value, str) and not self.lead:
            return value
        try:
            arr = to_array(value, "auto")
        except CastError as err:
            raise _modality_error(key, err.reason, "a tensor or a string", err.got) from None
        if arr.ndim < len(self.lead):
            lead = format_shape(parse_shape(self.lead))
            raise _modality_error(key, "wrong rank", f"a tensor {lead[:-1]}, ...]", describe(arr))
        return arr

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            self.validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                _jsonable_observation, when_used="json"),
        )

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return self.json_schema()

    def json_schema(self, defs: dict[str, Any] | None = None) -> dict[str, Any]:
        tensor = _strip_x(self.spec.json_schema(defs))
        modality = {"anyOf": [{"type": "string"}, tensor]} if not self.lead else tensor
        objects = {"type": "object", "additionalProperties": modality}
        return {"anyOf": [tensor, objects],
                "description": "a float32 tensor, or an object of named modalities",
                "x-gyre-dtype": F32, "x-gyre-shape": [*self.lead, "*obs"],
                "x-gyre-role": self.spec.role}


def _strip_x(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if not k.startswith("x-gyre")}


def _modality_error(key: str, reason: str, expected: str, got: str) -> Exception:
    """A gyre error whose message names the modality (pydantic's location stops at the field)."""
    return gyre_error(f"modality {key!r}: {reason}", expected, got)


def _jsonable_observation(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable_observation(v) for k, v in value.items()}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value


class JsonScalars:
    """`info`: an object of JSON scalars (string, integer, finite number, bool); never null."""

    def validate(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise gyre_error("not an object", "an object of JSON scalars", describe(value))
        for key, item in value.items():
            if not isinstance(key, str) or not _json_scalar(item):
                raise gyre_error(f"key {key!r}: not a JSON scalar", "string, integer, finite "
                                 "number or bool", describe(item))
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(self.validate)

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return self.json_schema()

    def json_schema(self, defs: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"type": "object",
                "additionalProperties": {"type": ["string", "integer", "number", "boolean"]},
                "description": "free-form JSON scalars", "x-gyre-role": "other"}


def _json_scalar(item: Any) -> bool:
    if isinstance(item, float):
        return item == item and item not in (float("inf"), float("-inf"))
    return isinstance(item, (str, int, bool))


def field_specs(model: type[BaseModel]) -> dict[str, Any]:
    """Wire name → TensorSpec / AnyObservation / Modalities subclass, for every tensor field."""
    cached = model.__dict__.get("__gyre_specs__")
    if cached is not None:
        return cached
    specs: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        wire = info.alias or name
        spec = tensor_spec_of(info.metadata) or _observation_spec(info)
        if spec is not None:
            specs[wire] = spec
    model.__gyre_specs__ = specs  # type: ignore[attr-defined]
    return specs


def _observation_spec(info: Any) -> Any:
    for item in info.metadata:
        if isinstance(item, AnyObservation):
            return item
    ann = info.annotation
    if isinstance(ann, type) and issubclass(ann, Modalities):
        return ann
    return None


def record_bindings(model: type[GyreModel], values: dict[str, Any]) -> tuple[dict, list[Problem]]:
    """Bind every named dim across the tensor fields of one record; conflicts become problems."""
    bindings: dict[str, Any] = {}
    problems: list[Problem] = []
    for wire, spec in field_specs(model).items():
        value = values.get(wire)
        if value is not None:
            _bind_value(wire, spec, value, bindings, problems)
    return bindings, problems


def _bind_value(path: str, spec: Any, value: Any, bindings: dict, problems: list) -> None:
    if isinstance(spec, AnyObservation):
        if isinstance(value, dict):
            lead = spec.spec.shape[: len(spec.lead)]
            for key, item in value.items():
                if isinstance(item, np.ndarray):
                    for name, bound, got in bind_dims(lead, item.shape[: len(lead)], bindings):
                        problems.append(_dim_problem(f"{path}.{key}", name, bound, got, item))
            return
        spec = spec.spec
    if isinstance(spec, TensorSpec):
        if isinstance(value, np.ndarray):
            for name, bound, got in bind_dims(spec.shape, value.shape, bindings):
                problems.append(_dim_problem(path, name, bound, got, value))
        return
    if isinstance(spec, type) and issubclass(spec, Modalities) and isinstance(value, BaseModel):
        for wire, sub in field_specs(spec).items():
            sub_value = getattr(value, _attr(spec, wire), None)
            if sub_value is not None:
                _bind_value(f"{path}.{wire}", sub, sub_value, bindings, problems)


def _attr(model: type[BaseModel], wire: str) -> str:
    for name, info in model.model_fields.items():
        if (info.alias or name) == wire:
            return name
    return wire


def _dim_problem(path: str, name: str, bound: Any, got: Any, value: Any) -> Problem:
    return Problem(path=path, message=f"dim {name} disagrees with an earlier field",
                   expected=f"{name}={format_size(bound)}",
                   got=f"{name}={format_size(got)} ({describe(value)})")


class RolloutStepV1(GyreModel):
    """One time step of one episode, as a sampler writes it (docs/contract.md §3)."""

    gyre_kind: ClassVar[str] = "rollout_step"
    gyre_version: ClassVar[str] = "1.0.0"

    observation: Annotated[Any, AnyObservation("observation")] = Field(
        description="s_t: a float32 tensor, or an object of named modalities")
    action: Tensor(("int64", F32), ["*act"], role="action",
                   description="the action actually executed (LLM: the generated token ids)")
    logprob: Tensor(F32, ["*logp"], role="logprob",
                    description="log pi(a|s) under policy_version; [] or the action's dims") = None
    entropy: Tensor(F32, [], role="entropy", description="policy entropy at s_t") = None
    value: Tensor(F32, [], role="value", description="critic estimate V(s_t)") = None
    next_value: Tensor(F32, [], role="next_value",
                       description="V(s_{t+1}); needed on a truncated or unfinished last step"
                       ) = None
    next_observation: Annotated[Any, AnyObservation("next_observation")] = Field(
        None, description="s_{t+1}; on a truncated last step the true final observation")
    reward: Tensor(F32, [], role="reward", description="immediate reward r_t")
    return_: Tensor(F32, [], role="return",
                    description="discounted return G_t, never merged with reward") = Field(
        None, alias="return")
    step: Tensor("int64", [], role="step", description="0-based index within the episode")
    episode_id: Tensor("string", [], role="episode_id", description="non-empty episode id")
    terminated: Tensor("bool", [], role="terminated",
                       description="the MDP reached a terminal state: no bootstrap")
    truncated: Tensor("bool", [], role="truncated",
                      description="cut short (time limit, budget): bootstrap from next_value")
    policy_version: Tensor("int64", [], role="policy_version",
                           description="version of the weights that produced this step")
    info: Annotated[dict, JsonScalars()] = Field(None, description="free-form JSON scalars")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A pinned `observation` pins `next_observation` too, unless the subclass says otherwise."""
        annotations = cls.__dict__.get("__annotations__", {})
        if "observation" in annotations and "next_observation" not in annotations:
            annotations["next_observation"] = annotations["observation"]
            if "next_observation" not in cls.__dict__:
                cls.next_observation = Field(  # type: ignore[assignment]
                    None, description="s_{t+1}; on a truncated last step the true final observation")
        super().__init_subclass__(**kwargs)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """A `next_observation` copied from `observation` says so in its role."""
        super().__pydantic_init_subclass__(**kwargs)
        info = cls.model_fields["next_observation"]
        info.metadata = [replace(m, role="next_observation") if isinstance(m, TensorSpec) else m
                         for m in info.metadata]
        cls.__dict__.get("__gyre_specs__") and delattr(cls, "__gyre_specs__")

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
    """Rules that need several fields: dims agree, logprob ≤ 0 for a discrete action."""
    cls = type(step)
    values = {"observation": step.observation, "next_observation": step.next_observation,
              "action": step.action, "logprob": step.logprob}
    values.update({w: getattr(step, _attr(cls, w), None) for w in field_specs(cls)
                   if w not in values})
    _, problems = record_bindings(cls, values)
    problems += _logprob_problems(step)
    problems += _next_observation_problems(step)
    return problems


def _logprob_problems(step: RolloutStepV1) -> list[Problem]:
    logprob, action = step.logprob, step.action
    if logprob is None:
        return []
    problems = []
    lp = np.asarray(logprob)
    act_shape = np.shape(action)
    free = any(d.variadic for d in field_specs(type(step))["logprob"].shape)
    if free and lp.shape not in ((), act_shape):
        problems.append(Problem("logprob", f"float32[] or float32{list(act_shape)}",
                                describe(logprob), "shape is neither [] nor the action's"))
    discrete = np.asarray(action).dtype.kind in "iu"
    if discrete and lp.size and float(lp.max()) > 0:
        problems.append(Problem("logprob", "<= 0 (a discrete action's log-probability)",
                                _max_text(lp), "positive log-probability"))
    return problems


def _max_text(arr: np.ndarray) -> str:
    return f"{float(arr.max())!r}" if arr.ndim == 0 else f"max {float(arr.max())!r} in {describe(arr)}"


def _next_observation_problems(step: RolloutStepV1) -> list[Problem]:
    obs, nxt = step.observation, step.next_observation
    if nxt is None:
        return []
    if isinstance(obs, dict) != isinstance(nxt, dict):
        return [Problem("next_observation", "the same structure as observation",
                        describe(nxt), "structure differs from observation")]
    if isinstance(obs, dict) and set(obs) != set(nxt):
        return [Problem("next_observation", f"modalities [{', '.join(sorted(obs))}]",
                        f"[{', '.join(sorted(nxt))}]", "modalities differ from observation")]
    if isinstance(obs, np.ndarray) and isinstance(nxt, np.ndarray) and obs.shape != nxt.shape:
        return [Problem("next_observation", f"the observation's shape {describe(obs)}",
                        describe(nxt), "shape differs from observation")]
    return []


RolloutStep = RolloutStepV1


# -- training batch ------------------------------------------------------------------------

class TrainBatchV1(GyreModel):
    """Arrays with leading [B, T]; each row a contiguous run of one episode (docs/contract.md §4).

    Float fields may hold NaN or inf under padding; the rules check finiteness where `mask`
    is True. Extra keys are allowed (a trainer's own arrays) but must lead with [B].
    """

    model_config = ConfigDict(extra="allow")

    gyre_kind: ClassVar[str] = "train_batch"
    gyre_version: ClassVar[str] = "1.0.0"
    batch_dims: ClassVar[tuple[str, ...]] = ("B", "T")

    obs: Annotated[Any, AnyObservation("observation", ("B", "T"))] = Field(
        description="observations [B, T, *obs], or an object of modalities each [B, T, ...]")
    action: Tensor(("int64", F32), ["B", "T", "*act"], role="action", finite=False,
                   description="actions taken")
    reward: Tensor(F32, ["B", "T"], role="reward", finite=False, description="immediate rewards")
    done: Tensor("bool", ["B", "T"], role="done", description="terminated OR truncated")
    terminated: Tensor("bool", ["B", "T"], role="terminated",
                       description="terminal state reached: no bootstrap") = None
    truncated: Tensor("bool", ["B", "T"], role="truncated",
                      description="cut short: bootstrap from the next value") = None
    advantage: Tensor(F32, ["B", "T"], role="advantage", finite=False,
                      description="advantage estimates")
    return_: Tensor(F32, ["B", "T"], role="return", finite=False,
                    description="return targets") = Field(None, alias="return")
    value: Tensor(F32, ["B", "T"], role="value", finite=False, description="critic values") = None
    logprob: Tensor(F32, ["B", "T"], role="logprob", finite=False,
                    description="behaviour log-probabilities")
    mask: Tensor("bool", ["B", "T"], role="mask",
                 description="True on real steps; padding only at a row's end")
    policy_version: Tensor("int64", ["B"], role="policy_version",
                           description="version of the weights that produced each row")
    episode_id: Tensor("string", ["B"], role="episode_id", description="episode of each row") = None
    step: Tensor("int64", ["B", "T"], role="step", description="step index within the episode"
                 ) = None

    @model_validator(mode="after")
    def _batch_rules(self) -> TrainBatchV1:
        problems = batch_rule_problems(self)
        if problems:
            raise PydanticProblems(problems)
        return self

    def arrays(self) -> dict[str, Any]:
        """Every field present, by wire name (`return`, not `return_`), extras included."""
        out = {w: getattr(self, _attr(type(self), w)) for w in field_specs(type(self))}
        out.update(self.model_extra or {})
        return {k: v for k, v in out.items() if v is not None}


def batch_rule_problems(batch: TrainBatchV1) -> list[Problem]:
    """§4 rules: one B and T, finite floats under mask, flags off-mask False, padding at the end."""
    arrays = batch.arrays()
    bindings, problems = record_bindings(type(batch), arrays)
    problems += _extra_problems(batch, bindings)
    mask = arrays["mask"]
    if problems or mask.ndim != 2:
        return problems
    problems += _mask_problems(mask)
    problems += _finite_problems(type(batch), arrays, mask)
    problems += _flag_problems(arrays, mask)
    return problems


def _extra_problems(batch: TrainBatchV1, bindings: dict[str, Any]) -> list[Problem]:
    problems = []
    size = bindings.get("B")
    for key, value in (batch.model_extra or {}).items():
        if not isinstance(value, np.ndarray) or value.ndim == 0 or value.shape[0] != size:
            problems.append(Problem(key, f"an array with leading B={size}", describe(value),
                                    "extra batch field is not a [B, ...] array"))
    return problems


def _rows(bad_rows: np.ndarray) -> str:
    rows = np.flatnonzero(bad_rows)
    shown = ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")
    return f"rows [{shown}]"


def _mask_problems(mask: np.ndarray) -> list[Problem]:
    gaps = (mask[:, 1:] & ~mask[:, :-1]).any(axis=1)
    if not gaps.any():
        return []
    return [Problem("mask", "True then only False along each row (padding at the end)",
                    _rows(gaps), "padding before a real step")]


def _finite_problems(model: type[GyreModel], arrays: dict, mask: np.ndarray) -> list[Problem]:
    problems = []
    for wire, spec in field_specs(model).items():
        value = arrays.get(wire)
        if not isinstance(spec, TensorSpec) or spec.finite or not isinstance(value, np.ndarray):
            continue
        if value.dtype.kind != "f" or value.ndim < 2:
            continue
        finite = np.isfinite(value).reshape(value.shape[0], value.shape[1], -1).all(axis=2)
        bad = mask & ~finite
        if bad.any():
            problems.append(Problem(wire, "finite values where mask is True",
                                    f"non-finite values in {_rows(bad.any(axis=1))}",
                                    "not finite"))
    return problems


def _flag_problems(arrays: dict, mask: np.ndarray) -> list[Problem]:
    problems = []
    for flag in ("done", "terminated", "truncated"):
        value = arrays.get(flag)
        if value is not None and (value & ~mask).any():
            problems.append(Problem(flag, "False where mask is False",
                                    f"True on padding in {_rows((value & ~mask).any(axis=1))}",
                                    "flag set on padding"))
    term, trunc, done = arrays.get("terminated"), arrays.get("truncated"), arrays.get("done")
    if term is not None and trunc is not None:
        wrong = mask & (done != (term | trunc))
        if wrong.any():
            problems.append(Problem("done", "terminated OR truncated on every real step",
                                    f"a different value in {_rows(wrong.any(axis=1))}",
                                    "done disagrees with terminated/truncated"))
    return problems


TrainBatch = TrainBatchV1
