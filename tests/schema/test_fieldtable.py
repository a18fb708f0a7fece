"""Field tables from our schemas, foreign schemas, Pydantic models and real data; unsafe input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from gyre_contract.core._errors import InputError, SchemaError
from gyre_contract.schema import _fieldtable as fieldtable
from gyre_contract.schema import _loading as loading
from gyre_contract.schema._fieldtable import VARIADIC_DIM, field_table, field_table_from_model
from gyre_contract.schema._infer import infer_schema
from gyre_contract.schema._loading import load_schema

ROOT = Path(__file__).resolve().parents[2]
STEP = ROOT / "schemas" / "rollout_step.v1.json"
BATCH = ROOT / "schemas" / "train_batch.v1.json"
SUITE = Path(__file__).resolve().parents[1] / "data" / "json-schema-test-suite" / "tests" / "draft2020-12"
"""Vendored (see its VENDORED.md); a missing copy fails the tests that read it, never skips them."""


def obj(**props: dict) -> dict:
    return {"type": "object", "properties": props}


def test_our_step_schema() -> None:
    table = field_table(STEP)
    assert table.kind == "rollout_step" and table.batch_dims is None and table.closed
    rows = {f.name: (f.dtype, f.shape, f.role, f.required) for f in table}
    assert rows["observation"] == ("float32", ("*obs",), "observation", True)
    assert rows["action"] == (("int64", "float32"), ("*act",), "action", True)
    assert rows["reward"] == ("float32", (), "reward", True)
    assert rows["next_value"] == ("float32", (), "next_value", False)
    assert rows["episode_id"] == ("string", (), "episode_id", True)
    assert rows["info"] == ("object", (), "other", False)


def test_our_batch_schema_has_batch_dims() -> None:
    table = field_table(BATCH)
    assert table.batch_dims == ("B", "T")
    assert table["obs"].shape == ("B", "T", "*obs")
    assert table["policy_version"].shape == ("B",)
    assert field_table(BATCH, batch_dims=("T", "B")).batch_dims == ("T", "B")


def test_fields_that_accept_an_object_of_modalities_say_so() -> None:
    assert [f.name for f in field_table(BATCH) if f.modalities] == ["obs"]
    assert [f.name for f in field_table(STEP) if f.modalities] == [
        "observation", "next_observation"]
    doc = obj(obs={"anyOf": [{"type": "array", "items": {"type": "number"}},
                             {"$ref": "#/$defs/views"}]},
              act={"oneOf": [{"type": "integer"}, {"type": "number"}]})
    doc["$defs"] = {"views": {"type": "object", "additionalProperties": {"type": "array"}}}
    table = field_table(doc)
    assert (table["obs"].modalities, table["act"].modalities) == (True, False)


def test_foreign_nested_arrays_give_shape_and_json_types_give_dtype() -> None:
    doc = obj(
        obs={"type": "array", "minItems": 2, "maxItems": 2,
             "items": {"type": "array", "minItems": 84, "maxItems": 84,
                       "items": {"type": "number"}}},
        tokens={"type": "array", "items": {"type": "integer"}},
        flag={"type": "boolean"}, name={"type": "string"},
        pair={"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}],
              "items": False},
    )
    t = field_table(doc)
    assert (t["obs"].dtype, t["obs"].shape) == ("number", (2, 84))
    assert (t["tokens"].dtype, t["tokens"].shape) == ("integer", ("?",))
    assert (t["flag"].dtype, t["name"].dtype, t["pair"].shape) == ("bool", "string", (2,))
    assert t["obs"].role == "observation" and t["obs"].role_how == "synonym"


def test_nested_objects_flatten_to_dotted_names() -> None:
    doc = obj(next=obj(reward={"type": "number"}, observation={"type": "array",
                                                              "items": {"type": "number"}}),
              observation={"type": "object", "properties": {"image": {"type": "array"}},
                           "required": ["image"]})
    doc["required"] = ["observation"]
    t = field_table(doc)
    assert t.names() == ["next.reward", "next.observation", "observation.image"]
    assert t["next.reward"].role == "reward"
    assert t["next.observation"].role == "next_observation"
    assert t["observation.image"].required and not t["next.reward"].required


def test_null_branches_mean_optional() -> None:
    doc = obj(a={"anyOf": [{"type": "number"}, {"type": "null"}]},
              b={"oneOf": [{"type": "null"}, {"$ref": "#/$defs/v"}]},
              c={"type": ["integer", "null"]})
    doc["$defs"] = {"v": {"type": "array", "items": {"type": "number"}, "minItems": 3,
                          "maxItems": 3}}
    doc["required"] = ["a", "b", "c"]
    t = field_table(doc)
    assert [(f.dtype, f.shape, f.required) for f in t] == [
        ("number", (), False), ("number", (3,), False), ("integer", (), False)]


def test_local_refs_resolve_with_siblings_and_anchors() -> None:
    doc = obj(r={"$ref": "#/$defs/R", "description": "the reward"},
              s={"$ref": "#step"}, u={"allOf": [{"$ref": "#/definitions/U"}]})
    doc["$defs"] = {"R": {"type": "number"}, "S": {"$anchor": "step", "type": "integer"}}
    doc["definitions"] = {"U": {"type": "string"}}
    t = field_table(doc)
    assert (t["r"].dtype, t["r"].description) == ("number", "the reward")
    assert (t["s"].dtype, t["u"].dtype) == ("integer", "string")


@pytest.mark.parametrize("ref", ["https://example.com/s.json", "file:///etc/passwd",
                                 "other.json#/x"])
def test_a_remote_or_file_ref_is_refused_never_fetched(ref: str) -> None:
    with pytest.raises(SchemaError) as info:
        load_schema(obj(x={"$ref": ref}))
    assert str(info.value) == (
        f"schema: #/properties/x: $ref {ref!r} points outside this document; only local refs "
        f"such as '#/$defs/Name' are resolved, and remote or file refs are never fetched")


def test_a_ref_cycle_is_a_schema_error() -> None:
    doc = obj(x={"$ref": "#/$defs/a"})
    doc["$defs"] = {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}
    with pytest.raises(SchemaError, match=r"\$ref cycle: #/\$defs/a -> #/\$defs/b -> #/\$defs/a"):
        field_table(doc)
    tree = obj(node={"$ref": "#/$defs/node"})
    tree["$defs"] = {"node": obj(child={"$ref": "#/$defs/node"})}
    with pytest.raises(SchemaError, match="cycle"):
        field_table(tree)


def test_a_recursive_array_is_any_depth() -> None:
    doc = obj(x={"$ref": "#/$defs/nested"})
    doc["$defs"] = {"nested": {"anyOf": [{"type": "number"},
                                         {"type": "array", "items": {"$ref": "#/$defs/nested"}}]}}
    assert field_table(doc)["x"].shape is not None
    deep = obj(x={"type": "array", "items": {"$ref": "#/$defs/n"}})
    deep["$defs"] = {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}
    assert field_table(deep)["x"].shape == ("?", VARIADIC_DIM)


def test_limits(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(fieldtable, "MAX_FIELDS", 3)
    with pytest.raises(SchemaError, match=r"more than 3 fields \(MAX_FIELDS\)"):
        field_table(obj(a={}, b={}, c={}, d={}))
    monkeypatch.setattr(loading, "MAX_SCHEMA_BYTES", 10)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(obj(a={})))
    with pytest.raises(SchemaError, match=r"more than the limit of 10 \(MAX_SCHEMA_BYTES\)"):
        load_schema(path)
    deep: dict = {"type": "number"}
    for _ in range(80):
        deep = obj(x=deep)
    with pytest.raises(SchemaError, match="MAX_DEPTH"):
        field_table(deep)


def test_unusable_documents(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_schema(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"properties": ')
    with pytest.raises(SchemaError, match="not JSON: Expecting value at line 1 column 16"):
        load_schema(bad)
    with pytest.raises(SchemaError, match="a schema document must be a JSON object, got list"):
        load_schema([])  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="has no 'properties'"):
        field_table({"type": "number"})
    with pytest.raises(SchemaError, match="x-gyre-role 'rewardz' is not a role"):
        field_table(obj(r={"type": "number", "x-gyre-role": "rewardz"}))
    with pytest.raises(SchemaError, match="minItems: expected a non-negative integer"):
        field_table(obj(r={"type": "array", "minItems": "3"}))


def test_from_models() -> None:
    class Plain(BaseModel):
        rewards: list[float]
        eps_id: str

    t = field_table_from_model(Plain)
    assert [(f.name, f.dtype, f.shape, f.role) for f in t] == [
        ("rewards", "number", ("?",), "reward"), ("eps_id", "string", (), "episode_id")]
    from gyre_contract.core._models import RolloutStepV1

    assert field_table_from_model(RolloutStepV1).names() == field_table(STEP).names()


def test_infer_from_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    records = [
        {"observation": {"token_ids": [1, 2, 3]}, "action": [5, 6], "reward": 1.0,
         "terminated": False, "episode_id": "a", "step": 0, "info": {"k": 1}},
        {"observation": {"token_ids": [1]}, "action": [7, 8], "reward": 0,
         "terminated": True, "episode_id": "a", "step": 1},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    doc = infer_schema(path)
    t = field_table(doc)
    rows = {f.name: (f.dtype, f.shape, f.required) for f in t}
    assert rows["observation.token_ids"] == ("integer", ("observation_token_ids_0",), True)
    assert rows["action"] == ("integer", (2,), True)
    assert rows["reward"] == ("number", (), True)
    assert rows["terminated"] == ("bool", (), True)
    assert rows["info"] == ("object", (), False)
    assert doc["x-gyre-varying-dims"] == ["observation_token_ids_0"]
    assert t["terminated"].role == "terminated"


def test_infer_from_npz(tmp_path: Path) -> None:
    path = tmp_path / "b.npz"
    np.savez(path, obs=np.zeros((2, 5, 4), np.float32), done=np.zeros((2, 5), bool),
             policy_version=np.zeros(2, np.int64))
    t = field_table(infer_schema(path))
    assert t.batch_dims == ("B", "T")
    assert [(f.name, f.dtype, f.shape) for f in t] == [
        ("obs", "float32", ("B", "T", 4)), ("done", "bool", ("B", "T")),
        ("policy_version", "int64", ("B",))]


def test_infer_rejects_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n[1]\n')
    with pytest.raises(InputError, match="line 2: a record must be a JSON object, got list"):
        infer_schema(path)
    with pytest.raises(InputError, match="no such file"):
        infer_schema(tmp_path / "none.jsonl")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(max_size=4)
    | st.sampled_from(["object", "array", "number", "integer", "#", "#/$defs/a", "*x", "null"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "properties", "items", "$ref", "$defs", "anyOf", "oneOf",
                         "allOf", "required", "minItems", "maxItems", "x-gyre-dtype",
                         "x-gyre-shape", "x-gyre-role", "a", "b", "prefixItems",
                         "x-gyre-batch-dims", "$anchor"]), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_hostile_schemas_raise_only_schema_error(doc: object) -> None:
    wrapped = {"type": "object", "properties": {"f": doc, "g": doc}}
    for candidate in ([wrapped] if isinstance(doc, str) else [doc, wrapped]):  # a str is a path
        try:
            field_table(candidate)  # type: ignore[arg-type]
        except SchemaError:
            pass


def suite_schemas() -> list[object]:
    assert SUITE.is_dir(), f"the vendored JSON-Schema-Test-Suite is missing: {SUITE}"
    schemas = []
    for path in sorted(SUITE.glob("*.json")):
        schemas += [case["schema"] for case in json.loads(path.read_text())]
    return schemas


def test_every_json_schema_test_suite_schema_is_read_or_refused() -> None:
    read = 0
    for schema in suite_schemas():
        for doc in (schema, {"type": "object", "properties": {"x": schema}}):
            try:
                field_table(doc)  # type: ignore[arg-type]
                read += 1
            except SchemaError:
                pass
    assert read > 100
