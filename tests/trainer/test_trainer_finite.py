"""A trainer's own batch is never "valid" with NaN or inf on a real step, whatever map built it:
`TrainerSchema.check` checks every float array under the mask, in every layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gyre_contract.core._errors import ContractError
from gyre_contract.harness._stages import half_way
from gyre_contract.trainer import register_op
from gyre_contract.trainer._ops import unregister_op
from gyre_contract.trainer._trainerbatch import trainer_schema

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"


def schema(dims: list[str]) -> dict:
    field = {"type": "array", "x-gyre-dtype": "float32", "x-gyre-shape": [*dims, 2]}
    return {"type": "object", "x-gyre-kind": "train_batch", "x-gyre-batch-dims": dims,
            "properties": {"x": field, "y": dict(field)}, "required": ["x"]}


MASK = np.array([[True, True, True], [True, False, False]])
IDS = np.array(["ep-a", "ep-b"])


def arrays(layout: str) -> dict[str, np.ndarray]:
    x = np.ones((2, 3, 2), np.float32)
    x[~MASK] = np.nan  # NaN on padding: not data, allowed
    if layout == "time_major":
        x = np.ascontiguousarray(np.swapaxes(x, 0, 1))
    return {"x": x, "mask": MASK}


@pytest.mark.parametrize("layout,dims", [("batch", ["B", "T"]), ("time_major", ["T", "B"]),
                                         ("flat", ["M"])])
def test_nan_on_padding_passes_and_nan_on_a_real_step_is_named(layout, dims):
    ts = trainer_schema(schema(dims))
    ok = arrays(layout)
    ts.check(ok, MASK, episode_id=IDS)
    bad = arrays(layout)
    real = (1, 0) if layout != "time_major" else (0, 1)
    bad["x"][real] = [np.nan, np.inf]
    with pytest.raises(ContractError) as err:
        ts.check(bad, MASK, episode_id=IDS)
    text = str(err.value)
    assert text.startswith("x: not finite: expected finite values on the real steps")
    assert "got 2 of 8 values NaN or infinite" in text and "'ep-b'" in text and "'ep-a'" not in text


def test_extra_keys_of_the_map_are_checked_too():
    """Not only the schema's fields: every float array the batch holds."""
    ts = trainer_schema(schema(["B", "T"]))
    batch = arrays("batch")
    batch["extra"] = np.zeros((2, 3), np.float32)
    batch["extra"][0, 2] = np.nan
    with pytest.raises(ContractError, match=r"extra: not finite.* in rows \[0\] \(episodes 'ep-a'\)"):
        ts.check(batch, MASK, episode_id=IDS)


def test_without_a_mask_every_value_is_real():
    ts = trainer_schema(schema(["B", "T"]))
    with pytest.raises(ContractError, match="got 4 of 12 values"):
        ts.check(arrays("batch"))


def test_a_custom_op_that_leaves_nan_never_makes_a_valid_batch():
    """The map's op is nobody's concern but the user's: the batch is still checked."""
    def holes(inputs, columns):
        out = inputs[0].astype(np.float32)
        out[0, 1] = np.nan
        return out
    register_op("holes", holes)
    try:
        fmap = {"gyre_field_map": 1, "fields": {"x": {"op": "holes", "from": "value"},
                                                 "mask": {"op": "mask"}}}
        trainer = {"type": "object", "x-gyre-batch-dims": ["B", "T"], "properties": {
            "x": {"type": "array", "x-gyre-dtype": "float32", "x-gyre-shape": ["B", "T"]}}}
        with pytest.raises(ContractError) as err:
            half_way(ROLLOUTS, fmap, trainer=trainer)
        assert "x: not finite" in str(err.value) and "(episodes 'cartpole-" in str(err.value)
    finally:
        unregister_op("holes")
