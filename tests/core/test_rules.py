"""The rule registry, the naming of field rules and the per-model info object."""

from __future__ import annotations

import pytest

from gyre_contract.core import _registry as registry
from gyre_contract.core._errors import ContractError
from gyre_contract.core._modelinfo import derived_table, forget, model_info
from gyre_contract.core._models import RolloutStep, TrainBatch, field_specs
from gyre_contract.core._registry import Rule
from gyre_contract.core._rules import field_rule
from gyre_contract.core._validate import validate_step
from gyre_contract.pinned import CartPoleStep


def test_rule_names_are_unique_and_start_with_their_kind():
    names = [r.name for r in registry.all_rules()]
    assert len(names) == len(set(names))
    assert {r.kind for r in registry.all_rules()} == set(registry.KINDS)
    with pytest.raises(ValueError, match="registered already"):
        registry.register(registry.get_rule("step.logprob_nonpositive"))
    with pytest.raises(ValueError, match="kind"):
        Rule("logprob_positive", "step", ("m",), None, lambda r, m: r)
    with pytest.raises(KeyError, match="no rule 'step.nope'"):
        registry.get_rule("step.nope")


def test_a_fast_path_cannot_declare_a_rule_that_does_not_exist():
    with pytest.raises(ValueError, match="declares unknown rules: step.nope"):
        registry.declare_fast_path("test_path", ("step",), ["step.nope"])


@pytest.mark.parametrize(("kind", "reason", "rule"), [
    ("missing", "missing required field", "field.required"),
    ("extra_forbidden", "unknown field", "field.unknown"),
    ("model_type", "not an object", "field.object"),
    ("gyre", "not an object", "field.object"),
    ("gyre", "null is not allowed", "field.not_null"),
    ("gyre", "out of range for uint8", "field.dtype"),
    ("gyre", "integer too large to be exact in float32", "field.dtype"),
    ("gyre", "modality 'image': wrong rank", "field.shape"),
    ("gyre", "modality 'image': not finite", "field.finite"),
    ("gyre", "key 'seed': not a JSON scalar", "field.info_scalars"),
    ("gyre_scalar", "empty string", "field.nonempty_string"),
    ("string_type", "Input should be a valid string", "field.dtype"),
])
def test_each_pydantic_error_names_its_field_rule(kind, reason, rule):
    assert field_rule(kind, reason) == rule


def test_problems_of_a_record_name_their_rules(cartpole_record):
    bad = dict(cartpole_record, action=1.5, logprob=0.5, typo=1)
    with pytest.raises(ContractError) as err:
        validate_step(bad, CartPoleStep)
    assert [(p.path, p.rule) for p in err.value.problems] == [
        ("action", "field.dtype"), ("typo", "field.unknown")]
    with pytest.raises(ContractError) as err:
        validate_step(dict(cartpole_record, logprob=0.5), CartPoleStep)
    assert [p.rule for p in err.value.problems] == ["step.logprob_nonpositive"]


def test_model_info_maps_wire_names_and_knows_required_fields():
    info = model_info(RolloutStep)
    assert info.attr("return") == "return_" and info.wire("return_") == "return"
    assert info.attr("reward") == "reward" and "return" in info.wires
    assert info.required >= {"observation", "action", "reward", "step", "episode_id"}
    assert "return" not in info.required and "mask" in model_info(TrainBatch).required


def test_derived_values_are_built_once_and_dropped_by_forget():
    calls = []

    def build(model):
        calls.append(model)
        return len(calls)

    assert model_info(CartPoleStep).derived("test.count", build) == 1
    assert model_info(CartPoleStep).derived("test.count", build) == 1
    assert derived_table("test.count", build)[CartPoleStep] == 1
    forget(CartPoleStep)
    assert model_info(CartPoleStep).derived("test.count", build) == 2
    with pytest.raises(ValueError, match="built by"):
        derived_table("test.count", lambda m: 0)


def test_a_pinned_next_observation_says_so_in_its_role():
    assert field_specs(CartPoleStep)["next_observation"].role == "next_observation"
