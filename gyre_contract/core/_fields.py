"""The building blocks of the record models: base model, observation and `info` field types.

Also what every path needs to read a model's tensor fields (`field_specs`), to bind the named
dims of one record (`record_bindings`), the kind of a field's value (what may change from step
to step) and the token fields of a step (contract v1.1: one value per generated token, like
`logprob`). Lower than `rules` and `models`, so that the rules can be written once against these
helpers and the models can be driven by the rules.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict
from pydantic_core import core_schema

from gyre_contract.core._dims import (
    CastError,
    bind_dims,
    format_shape,
    format_size,
    parse_shape,
    to_array,
)
from gyre_contract.core._errors import Problem, describe
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._tensor import TensorSpec, check_annotation, gyre_error, tensor_spec_of
from gyre_contract.core._text import quoted

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

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Each tensor field's type is checked against its spec (`check_annotation`). A bare
        `field: Tensor(...)` annotation (the spelling before 0.3, which type checkers cannot
        read) runs as `Annotated[<the type it yields>, Tensor(...)]`."""
        super().__pydantic_init_subclass__(**kwargs)
        for name, info in cls.model_fields.items():
            if isinstance(info.annotation, TensorSpec):
                info.metadata = [info.annotation, *info.metadata]
                info.annotation = info.annotation.python_type
            check_annotation(name, info.annotation, info.metadata)

    def to_record(self) -> dict[str, Any]:
        """The record as a plain dict keyed by wire names, absent optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True)


class Modalities(GyreModel):
    """Base for a pinned observation made of named modalities (`image`, `token_ids`, `text`)."""


class AnyObservation:
    """An observation of the base models: a float32 tensor, or an object of named modalities.

    Modalities are free-form (dtype inferred losslessly: an ndarray keeps its dtype, JSON ints
    → int64, floats → float32); in a batch each modality starts with the batch dims. A tensor
    observation is float32, except an integer ndarray (an image as uint8): it keeps its dtype,
    so an image is never widened 4x in memory without a pin (docs/rollout-files.md#images).
    """

    def __init__(self, role: str, lead: tuple[str, ...] = ()) -> None:
        self.lead = lead
        self.spec = TensorSpec(F32, parse_shape([*lead, "*obs"]), role)
        self._integer_specs: dict[str, TensorSpec] = {}

    def validate(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {key: self._modality(key, item) for key, item in value.items()}
        return self.spec_for(value).validate(value)

    def spec_for(self, value: Any) -> TensorSpec:
        """The spec a tensor observation is checked against: float32, or for an integer
        ndarray (numpy, or a numpy integer scalar) the same shape in its own dtype."""
        dtype = getattr(value, "dtype", None)
        if not isinstance(value, (np.ndarray, np.generic)) or dtype is None or dtype.kind not in "iu":
            return self.spec
        name = str(dtype)
        spec = self._integer_specs.get(name)
        if spec is None:
            spec = self._integer_specs[name] = TensorSpec(name, self.spec.shape, self.spec.role)
        return spec

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
    return gyre_error(f"modality {quoted(key)}: {reason}", expected, got)


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
                raise gyre_error(f"key {quoted(key)}: not a JSON scalar", "string, integer, finite "
                                 "number or bool", describe(item))
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(self.validate)

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return self.json_schema()

    def json_schema(self, defs: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"type": "object",
                "additionalProperties": {"anyOf": [{"type": t} for t in ("string", "number", "boolean")]},
                "description": "free-form JSON scalars", "x-gyre-role": "other"}


def _json_scalar(item: Any) -> bool:
    if isinstance(item, float):
        return item == item and item not in (float("inf"), float("-inf"))
    return isinstance(item, (str, int, bool))


def field_specs(model: type[BaseModel]) -> dict[str, Any]:
    """Wire name → TensorSpec / AnyObservation / Modalities subclass, for every tensor field."""
    return model_info(model).derived("field_specs", _field_specs)


def _field_specs(model: type[BaseModel]) -> dict[str, Any]:
    names = model_info(model)
    specs: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        spec = tensor_spec_of(info.metadata) or _observation_spec(info)
        if spec is not None:
            specs[names.wire(name)] = spec
    return specs


def _observation_spec(info: Any) -> Any:
    for item in info.metadata:
        if isinstance(item, AnyObservation):
            return item
    ann = info.annotation
    if isinstance(ann, type) and issubclass(ann, Modalities):
        return ann
    return None


def record_bindings(model: type[GyreModel], values: dict[str, Any]
                    ) -> tuple[dict[str, Any], list[Problem]]:
    """Bind every named dim across the tensor fields of one record; conflicts become problems."""
    bindings: dict[str, Any] = {}
    problems: list[Problem] = []
    for wire, spec in field_specs(model).items():
        value = values.get(wire)
        if value is not None:
            _bind_value(wire, spec, value, bindings, problems)
    return bindings, problems


def _bind_value(path: str, spec: Any, value: Any, bindings: dict[str, Any],
                problems: list[Problem]) -> None:
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
        info = model_info(spec)
        for wire, sub in field_specs(spec).items():
            sub_value = getattr(value, info.attr(wire), None)
            if sub_value is not None:
                _bind_value(f"{path}.{wire}", sub, sub_value, bindings, problems)


def _dim_problem(path: str, name: str, bound: Any, got: Any, value: Any) -> Problem:
    return Problem(path=path, message=f"dim {name} disagrees with an earlier field",
                   expected=f"{name}={format_size(bound)}",
                   got=f"{name}={format_size(got)} ({describe(value)})")


def fields_binding(step: Any, names: set[str]) -> list[tuple[str, str, Any, Any]]:
    """(path, dim, size, value) of each field of `step` binding one of the dims `names`."""
    cls = type(step)
    info = model_info(cls)
    out = []
    for wire in field_specs(cls):
        value = getattr(step, info.attr(wire), None)
        if value is None:
            continue
        bindings, _ = record_bindings(cls, {wire: value})
        for name in sorted(names & bindings.keys()):
            out.append((wire, name, bindings[name], value))
    return out


# -- the kind of a field's value: what may change from step to step ---------------------------

MODALITIES = "modalities"
"""The kind of an observation made of named modalities (any other kind is a dtype name)."""


def kind_fields(model: Any) -> tuple[tuple[str, str], ...]:
    """(wire, attribute) of each field of `model` whose kind may differ from step to step: a
    choice of dtypes (`int64 | float32`), an observation that is a tensor or modalities, or
    modalities holding such a field. Empty for a model where every field has one kind."""
    return model_info(model).derived("kind_fields", _kind_fields)


def _kind_fields(model: Any) -> tuple[tuple[str, str], ...]:
    info = model_info(model)
    return tuple((wire, info.attr(wire)) for wire, spec in field_specs(model).items()
                 if _has_choices(spec))


def _has_choices(spec: Any) -> bool:
    if isinstance(spec, AnyObservation):
        return True
    if isinstance(spec, TensorSpec):
        return len(spec.dtypes) > 1
    return isinstance(spec, type) and issubclass(spec, BaseModel) and bool(kind_fields(spec))


def step_kinds(model: Any, step: Any, fields: tuple[tuple[str, str], ...] | None = None
               ) -> dict[str, tuple[str, Any]]:
    """Path -> (kind, value) of the fields of a validated step whose kind may vary (`fields`,
    default `kind_fields(model)`): a dtype name (`int64`, `float32`, `string`, ...) or
    `MODALITIES`, and each modality's dtype under `field.modality`. What the episode rules
    `episode.structure_fixed` and `episode.dtype_fixed` compare from step to step."""
    out: dict[str, tuple[str, Any]] = {}
    for wire, attr in kind_fields(model) if fields is None else fields:
        value = getattr(step, attr, None)
        if value is not None:
            _add_kinds(wire, value, out)
    return out


def _add_kinds(path: str, value: Any, out: dict[str, tuple[str, Any]]) -> None:
    if isinstance(value, dict):
        out[path] = (MODALITIES, value)
        for key, item in value.items():
            out[f"{path}.{key}"] = (_kind(item), item)
    elif isinstance(value, BaseModel):
        out[path] = (MODALITIES, value)
        for key, item in step_kinds(type(value), value).items():
            out[f"{path}.{key}"] = item
    else:
        out[path] = (_kind(value), value)


def _kind(value: Any) -> str:
    if value.__class__ is str:
        return "string"
    dtype = getattr(value, "dtype", None)
    if not isinstance(dtype, np.dtype):
        return type(value).__name__
    name = _DTYPE_NAMES.get(dtype)
    if name is None:  # `dtype.name` is slow; few dtypes are ever seen
        name = "string" if dtype.kind == "U" else dtype.name
        if len(_DTYPE_NAMES) < 256:
            _DTYPE_NAMES[dtype] = name
    return name


_DTYPE_NAMES: dict[np.dtype, str] = {}


# -- the token fields of a step (contract v1.1) -------------------------------------------------
# `ref_logprob` (the reference policy's log-prob; [] or the action's dims), `loss_mask` and
# `token_reward` (the action's dims) are bound to the action's shape by the registered rule
# `step.token_fields_shape` (`core._rules`); what that rule and the paths that implement it
# share: the problem it reports and the dims the action's shape fixes.

TOKEN_FIELDS = ("ref_logprob", "loss_mask", "token_reward")
"""Step fields with one value per action token (`ref_logprob` may also be one value, [])."""
TOKENS_REASON = "not one value per action token"
TURNS_REASON = ("dimension changed within the episode (token turns of varying length: validate "
                "with --model gyre_contract.pinned:LLMStep, or a model declaring varying_dims)")
"""`episode.dims_fixed` on a token action and its per-token fields (`is_token_turn`)."""


def token_field_problem(wire: str, dtype: str, shape: tuple[int, ...],
                        action_shape: tuple[int, ...]) -> Problem | None:
    """The problem of a token field `wire` of `shape` beside an action of `action_shape`."""
    if shape == action_shape or (wire == "ref_logprob" and shape == ()):
        return None
    expected = f"{dtype}{list(action_shape)}"
    if wire == "ref_logprob" and action_shape:  # beside a scalar action [] is the action's
        expected = f"{dtype}[] or {expected}"
    size, tokens = int(np.prod(shape)), int(np.prod(action_shape))
    if len(shape) <= 1 and len(action_shape) <= 1 and size != tokens:
        got = (f"{size} value{'s' if size != 1 else ''} for {tokens} action "
               f"token{'s' if tokens != 1 else ''}")
    else:
        got = f"shape {list(shape)} for the action's {list(action_shape)}"
    return Problem(wire, expected, f"{got} ({dtype}{list(shape)})", TOKENS_REASON)


def action_bound_dims(model: Any) -> frozenset[str]:
    """Dims of the token fields that their rule fixes from the action's shape (no other field
    names them): the episode rule on dims leaves them to the action's own dims. `ref_logprob`
    ([] or the action's) only when the action is a scalar."""
    specs = field_specs(model)
    action = specs.get("action")
    if not isinstance(action, TensorSpec):
        return frozenset()
    counts: dict[str, int] = {}
    for spec in specs.values():
        inner = spec.spec if isinstance(spec, AnyObservation) else spec
        for dim in getattr(inner, "shape", ()):
            if dim.name:
                counts[dim.name] = counts.get(dim.name, 0) + 1
    out: set[str] = set()
    for wire in TOKEN_FIELDS:
        spec = specs.get(wire)
        if not isinstance(spec, TensorSpec) or len(spec.shape) != 1 or not spec.shape[0].variadic:
            continue
        name = spec.shape[0].name
        if name is None or counts[name] != 1:
            continue
        if wire != "ref_logprob" or not action.shape:
            out.add(name)
    return frozenset(out)


_PER_TOKEN = frozenset({"logprob", *TOKEN_FIELDS})


def is_token_turn(step: Any, paths: set[str]) -> bool:
    """The changed fields are a token action (integer, rank 1) and its per-token fields."""
    action = getattr(step, "action", None)
    return ("action" in paths and paths <= _PER_TOKEN | {"action"}
            and isinstance(action, np.ndarray) and action.ndim == 1
            and np.issubdtype(action.dtype, np.integer))
