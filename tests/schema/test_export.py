"""JSON Schema export: committed files match the models, and a plain validator agrees with ours."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from gyre_contract.core._errors import ContractError
from gyre_contract.core._models import RolloutStepV1, TrainBatchV1
from gyre_contract.core._validate import validate_step
from gyre_contract.schema._export import drifted_schemas, export_schemas, file_name, json_schema, render

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def test_committed_schemas_match_the_models():
    assert drifted_schemas(SCHEMAS) == [], "run `gyre-contract export` and commit schemas/"


def test_export_writes_exactly_what_check_compares(tmp_path):
    written = export_schemas(tmp_path)
    assert [p.name for p in written] == ["rollout_step.v1.json", "train_batch.v1.json",
                                         "token_batch.v1.json", "gyre_vocabulary.v1.json"]
    assert drifted_schemas(tmp_path) == []
    written[0].write_text(written[0].read_text().replace("float32", "float64", 1))
    assert drifted_schemas(tmp_path) == [written[0]]


def test_top_level_keys():
    doc = json_schema(RolloutStepV1)
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert doc["$id"] == "urn:gyre-contract:rollout_step:1"
    assert (doc["x-gyre-kind"], doc["x-gyre-version"]) == ("rollout_step", "1.1.0")
    assert doc["additionalProperties"] is False
    assert doc["required"] == ["observation", "action", "reward", "step", "episode_id",
                               "terminated", "truncated", "policy_version"]
    batch = json_schema(TrainBatchV1)
    assert batch["$id"] == "urn:gyre-contract:train_batch:1"
    assert batch["x-gyre-batch-dims"] == ["B", "T"]
    assert batch["properties"]["reward"]["x-gyre-shape"] == ["B", "T"]
    Draft202012Validator.check_schema(doc)
    Draft202012Validator.check_schema(batch)


def test_pinned_model_carries_fixed_dims(cartpole_model, llm_model):
    doc = json_schema(cartpole_model)
    assert doc["$id"] == "urn:gyre-contract:rollout_step:1:CartPoleStep"
    obs = doc["properties"]["observation"]
    assert (obs["type"], obs["minItems"], obs["maxItems"]) == ("array", 4, 4)
    assert obs["items"]["type"] == "number" and obs["x-gyre-shape"] == [4]
    assert doc["properties"]["next_observation"]["x-gyre-shape"] == [4]
    assert json_schema(llm_model)["x-gyre-varying-dims"] == ["P", "A"]
    assert file_name(cartpole_model) == "rollout_step.v1.json"
    assert render(doc).endswith("}\n")


def _good(record: dict) -> list[dict]:
    return [record, dict(record, info={"seed": 3, "env": "CartPole-v1"}),
            dict(record, next_observation=record["observation"], next_value=0.25),
            dict(record, observation={"image": [[0, 1], [2, 3]], "text": "hi"})]


def _bad(record: dict) -> list[dict]:
    no_reward = dict(record)
    del no_reward["reward"]
    return [
        no_reward, dict(record, reward=None), dict(record, reward="1"), dict(record, reward=True),
        dict(record, step=1.5), dict(record, step="1"), dict(record, step=2**63),
        dict(record, terminated=0), dict(record, episode_id=""), dict(record, trunctaed=False),
        dict(record, observation=[0.1, None]), dict(record, observation="abc"),
        dict(record, info={"x": None}), dict(record, info={"x": [1]}), dict(record, reward=1e39),
        dict(record, policy_version=-(2**63) - 1), dict(record, value=None),
    ]


@pytest.mark.parametrize("model_name", ["base", "cartpole"])
def test_plain_validator_agrees_wherever_json_schema_can_say(model_name, cartpole_record,
                                                              cartpole_model):
    model = RolloutStepV1 if model_name == "base" else cartpole_model
    validator = Draft202012Validator(json_schema(model))
    for record in _good(cartpole_record)[: 3 if model_name == "cartpole" else 4]:
        assert validator.is_valid(record), record
        validate_step(record, model)
    bad = _bad(cartpole_record)
    if model_name == "cartpole":
        bad += [dict(cartpole_record, observation=[0.1, 0.2, 0.3]),
                dict(cartpole_record, observation=[[0.1, 0.2, 0.3, 0.4]]),
                dict(cartpole_record, action=[1])]
    for record in bad:
        assert not validator.is_valid(record), record
        with pytest.raises(ContractError):
            validate_step(record, model)


def test_what_only_gyre_checks_is_documented(cartpole_record, cartpole_model):
    """Rules JSON Schema cannot express: the plain validator passes, we refuse."""
    validator = Draft202012Validator(json_schema(cartpole_model))
    only_ours = [dict(cartpole_record, logprob=0.5),  # discrete log-prob must be <= 0
                 dict(cartpole_record, observation=[2**25, 0, 0, 0])]  # not exact in float32
    for record in only_ours:
        assert validator.is_valid(record)
        with pytest.raises(ContractError):
            validate_step(record, cartpole_model)


finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)
records = st.fixed_dictionaries(
    {"observation": st.lists(finite, min_size=4, max_size=4), "action": st.integers(0, 1),
     "reward": finite, "step": st.integers(0, 10**6), "episode_id": st.text(min_size=1),
     "terminated": st.booleans(), "truncated": st.booleans(),
     "policy_version": st.integers(0, 2**62)},
    optional={"logprob": st.floats(-50, 0, width=32), "value": finite, "next_value": finite,
              "return": finite, "entropy": finite,
              "info": st.dictionaries(st.text(), st.integers(-5, 5) | st.text() | st.booleans())},
)


@settings(max_examples=60, deadline=None)
@given(records)
def test_round_trip_model_json_model(record):
    from models import CartPoleStep

    step = validate_step(record, CartPoleStep)
    line = orjson.dumps(step.to_record(), option=orjson.OPT_SERIALIZE_NUMPY)
    again = validate_step(orjson.loads(line), CartPoleStep)
    assert again.to_record().keys() == step.to_record().keys()
    assert np.array_equal(again.observation, step.observation)
    assert again.reward == pytest.approx(step.reward, rel=1e-6)
    assert Draft202012Validator(json_schema(CartPoleStep)).is_valid(json.loads(line))


junk = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(list(RolloutStepV1.model_fields) + ["return", "x"]), junk))
def test_random_records_never_crash(record):
    try:
        validate_step(record)
    except ContractError as err:
        assert err.problems and all(p.path is not None for p in err.problems)


dtypes = st.sampled_from(["bool", "int8", "int32", "int64", "uint8", "uint16", "float16",
                          "float32", "float64"])
dims = st.lists(st.integers(0, 5) | st.sampled_from(["N", "K", "*rest"]), max_size=3).filter(
    lambda shape: shape.count("*rest") <= 1)


@settings(max_examples=40, deadline=None)
@given(dtypes, dims, st.sampled_from(["int64", "float32"]), dims.filter(lambda s: "*rest" not in s))
def test_schema_export_then_load_gives_the_models_field_table(tmp_path_factory, obs_dtype,
                                                              obs_shape, act_dtype, act_shape):
    """model → exported file → load_schema → field table: the same dtypes, shapes and roles."""
    from pydantic import create_model

    from gyre_contract.core._models import RolloutStep, field_specs
    from gyre_contract.core._tensor import Tensor
    from gyre_contract.schema._fieldtable import field_table
    from gyre_contract.schema._loading import load_schema

    model = create_model(
        "RandomStep", __base__=RolloutStep,
        observation=(Tensor(obs_dtype, obs_shape, role="observation"), ...),
        action=(Tensor(act_dtype, act_shape, role="action"), ...))
    path = tmp_path_factory.mktemp("schema") / "step.json"
    path.write_text(render(json_schema(model)), encoding="utf-8")
    table = field_table(load_schema(path))
    assert table.kind == "rollout_step"
    for wire, spec in field_specs(model).items():
        if not hasattr(spec, "dtype"):
            continue  # free-form observation objects have no single dtype
        got = table.fields[wire]
        assert got.dtype == spec.dtype, wire
        assert tuple(str(d) for d in got.shape) == tuple(str(d) for d in spec.shape), wire
        assert got.role == spec.role, wire
    assert table.fields["next_observation"].role == "next_observation"
