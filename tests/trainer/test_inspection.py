"""inspect_batch / batch_schema: numpy and duck-typed arrays, tables, a trainer JSON Schema."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import jsonschema
import numpy as np
import pytest

from gyre_contract.core._errors import SchemaError
from gyre_contract.trainer._inspection import FieldInfo, batch_schema, dtype_of, inspect_batch


class FakeDtype:
    """Looks like a torch dtype: no `.kind`, `str()` is `torch.float32`."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __str__(self) -> str:
        return f"torch.{self._name}"


class FakeTensor:
    """Duck-typed tensor: `.shape` is a tuple subclass (like torch.Size), `.dtype` as above."""

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.shape = tuple(shape)
        self.dtype = FakeDtype(dtype)


def numpy_batch() -> dict:
    return {
        "obs": np.zeros((2, 3, 4), np.float32),
        "action": np.zeros((2, 3), np.int64),
        "mask": np.ones((2, 3), bool),
        "policy_version": np.zeros(2, np.int64),
        "episode_id": np.array(["a", "b"]),
    }


def test_inspect_numpy_batch_returns_type_shape_dtype():
    info = inspect_batch(numpy_batch())
    assert info["obs"] == ("ndarray", (2, 3, 4), "float32")
    assert info["episode_id"] == FieldInfo("ndarray", (2,), "string")
    assert str(info).splitlines() == [
        "key             type     shape      dtype",
        "obs             ndarray  [2, 3, 4]  float32",
        "action          ndarray  [2, 3]     int64",
        "mask            ndarray  [2, 3]     bool",
        "policy_version  ndarray  [2]        int64",
        "episode_id      ndarray  [2]        string",
    ]


def test_duck_typed_tensors_without_importing_torch():
    batch = {"obs": FakeTensor((8, 16, 4), "float32"), "act": FakeTensor((8, 16), "int64"),
             "w": FakeTensor((8, 16), "bfloat16"), "n": 3, "name": "x"}
    info = inspect_batch(batch)
    assert info["obs"] == ("FakeTensor", (8, 16, 4), "float32")
    assert info["w"].dtype == "bfloat16"
    assert info["n"] == ("int", (), "int64") and info["name"] == ("str", (), "string")
    assert "torch" not in sys.modules


def test_dtype_names():
    assert dtype_of(np.dtype("<U3")) == "string"
    assert dtype_of(FakeDtype("long")) == "int64"
    assert dtype_of(FakeDtype("bool")) == "bool"


def test_nested_mappings_and_models_and_dataclasses(capsys):
    @dataclass
    class Batch:
        obs: dict
        reward: np.ndarray

    info = inspect_batch(Batch({"image": np.zeros((1, 2, 3), np.uint8)}, np.zeros((1, 2))))
    assert list(info) == ["obs.image", "reward"]
    info.print()
    assert "obs.image  ndarray  [1, 2, 3]  uint8" in capsys.readouterr().out
    with pytest.raises(TypeError, match="expected a mapping, a pydantic model or a dataclass"):
        inspect_batch([1, 2])


def test_unknown_values_are_shown_without_shape():
    info = inspect_batch({"x": object()})
    assert info["x"] == ("object", None, None)
    assert str(info).splitlines()[1] == "x    object  -      -"


def test_batch_schema_names_batch_dims_and_validates_as_json_schema():
    schema = batch_schema(numpy_batch())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["x-gyre-kind"] == "train_batch"
    assert schema["x-gyre-batch-dims"] == ["B", "T"]
    props = schema["properties"]
    assert props["obs"]["x-gyre-shape"] == ["B", "T", 4]
    assert props["obs"]["x-gyre-dtype"] == "float32"
    assert props["obs"]["x-gyre-role"] == "observation"
    assert props["policy_version"]["x-gyre-shape"] == ["B"]
    assert props["episode_id"]["items"] == {"type": "string"}
    assert props["obs"]["items"]["items"] == {
        "type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4}
    instance = {k: v.tolist() for k, v in numpy_batch().items()}
    jsonschema.validate(instance, schema)


def test_batch_schema_from_torch_like_batch_and_custom_dims():
    batch = {"observations": FakeTensor((16, 8, 3), "float32"),
             "actions": FakeTensor((16, 8), "int64")}
    schema = batch_schema(batch, batch_dims=("T", "N"))
    assert schema["x-gyre-batch-dims"] == ["T", "N"]
    assert schema["properties"]["observations"]["x-gyre-shape"] == ["T", "N", 3]
    assert "x-gyre-role" not in schema["properties"]["observations"]


def test_batch_schema_refuses_non_arrays():
    with pytest.raises(SchemaError, match=r"cannot describe x as tensors \(no shape and dtype\)"):
        batch_schema({"x": object()})
