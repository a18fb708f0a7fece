"""The tensor field's spelling: `Annotated[<type>, Tensor(...)]`, what a type checker reads.

The type before the spec must say what a validated value is (checked when the class is built);
the bare `field: Tensor(...)` of earlier versions still runs, as the same field.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import numpy as np
import numpy.typing as npt
import pytest

from gyre_contract import RolloutStep, Tensor, TrainBatch, validate_step
from gyre_contract.core import SchemaError
from gyre_contract.core._fields import field_specs
from gyre_contract.core._tensor import TensorSpec
from gyre_contract.pinned import CartPoleStep, LLMStep
from gyre_contract.schema import json_schema

RECORD = {"observation": [0.1, 0.2, 0.3, 0.4], "action": 1, "reward": 1.0, "step": 0,
          "episode_id": "e", "terminated": False, "truncated": False, "policy_version": 3,
          "logprob": -0.5}


class AnnotatedStep(RolloutStep):
    observation: Annotated[np.ndarray, Tensor("float32", [4], role="observation")]
    action: Annotated[int, Tensor("int64", [], role="action")]
    logprob: Annotated[float | None, Tensor("float32", [], role="logprob")] = None


class BareStep(RolloutStep):  # the spelling before 0.3: runs, but no type checker reads it
    observation: Tensor("float32", [4], role="observation")
    action: Tensor("int64", [], role="action")
    logprob: Tensor("float32", [], role="logprob") = None


def test_tensor_returns_the_spec() -> None:
    spec = Tensor("float32", ["B", 4], role="observation", finite=False)
    assert isinstance(spec, TensorSpec)
    assert (spec.dtype, spec.role, spec.finite) == ("float32", "observation", False)


@pytest.mark.parametrize("model", [AnnotatedStep, BareStep, CartPoleStep])
def test_validated_values_have_the_annotated_types(model: type[RolloutStep]) -> None:
    step = validate_step(RECORD, model)
    assert type(step.observation) is np.ndarray and step.observation.dtype == np.float32
    assert type(step.action) is int
    assert type(step.reward) is float and type(step.logprob) is float
    assert type(step.step) is int and type(step.episode_id) is str
    assert type(step.terminated) is bool and type(step.policy_version) is int
    assert step.next_observation is None and step.value is None


def test_bare_and_annotated_spellings_are_one_field() -> None:
    assert field_specs(BareStep) == field_specs(AnnotatedStep)
    bare, annotated = json_schema(BareStep), json_schema(AnnotatedStep)
    assert bare["properties"] == annotated["properties"] and bare["required"] == annotated["required"]
    info = BareStep.model_fields["observation"]
    assert info.annotation is np.ndarray and isinstance(info.metadata[0], TensorSpec)
    assert BareStep.model_fields["action"].annotation is int


def test_null_is_refused_whatever_the_optional_type() -> None:
    for model in (AnnotatedStep, BareStep):
        with pytest.raises(Exception, match="logprob"):
            validate_step({**RECORD, "logprob": None}, model)


@pytest.mark.parametrize("annotation", [
    np.ndarray, np.ndarray | None, Optional[np.ndarray], npt.NDArray[np.int64], Any,  # noqa: UP045
    np.ndarray | np.generic,
])
def test_an_array_spec_takes_any_ndarray_type(annotation: Any) -> None:
    class Step(RolloutStep):
        action: Annotated[annotation, Tensor("int64", ["A"], role="action")]

    assert field_specs(Step)["action"].shape[0].name == "A"


@pytest.mark.parametrize(("annotation", "spec", "wanted"), [
    (np.ndarray, Tensor("float32", [], role="reward"), "float"),
    (float, Tensor("float32", [4], role="reward"), "np.ndarray"),
    (float | None, Tensor("int64", [], role="reward"), "int"),
    (int, Tensor("bool", [], role="reward"), "bool"),
    (bytes, Tensor("string", [], role="reward"), "str"),
])
def test_a_type_the_spec_does_not_yield_is_refused(annotation: Any, spec: TensorSpec,
                                                    wanted: str) -> None:
    with pytest.raises(SchemaError, match=rf"field 'reward'.*write Annotated\[{wanted}, Tensor"):
        class Step(RolloutStep):
            reward: Annotated[annotation, spec]


def test_none_outside_annotated_is_refused() -> None:
    """`Annotated[...] | None` would hide the spec from pydantic: the field would take null."""
    with pytest.raises(SchemaError, match=r"write the None inside"):
        class Step(RolloutStep):
            logprob: Annotated[float, Tensor("float32", [], role="logprob")] | None = None

    with pytest.raises(SchemaError, match=r"write the None inside"):
        class Batch(TrainBatch):
            value: Optional[Annotated[np.ndarray, Tensor("float32", ["B", "T"])]] = None  # noqa: UP045


def test_pinned_models_spell_their_types() -> None:
    """What a type checker reads of the shipped models is what validation yields."""
    fields = LLMStep.model_fields
    assert fields["action"].annotation is np.ndarray
    assert fields["logprob"].annotation == np.ndarray | None
    assert CartPoleStep.model_fields["observation"].annotation is np.ndarray
    assert CartPoleStep.model_fields["next_observation"].annotation is np.ndarray
    assert field_specs(CartPoleStep)["next_observation"].role == "next_observation"
