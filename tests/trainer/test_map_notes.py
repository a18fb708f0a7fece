"""Run notes from the map: each op describes itself, `FieldMap.describe` says how the batch is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from gyre_contract.pinned import CartPoleBatch, CartPoleStep
from gyre_contract.schema import diff, json_schema
from gyre_contract.trainer._fieldmap import FieldMap, known_ops, register_op, unregister_op
from gyre_contract.trainer._ops import get_op

EXAMPLE = Path(__file__).parents[2] / "examples" / "cartpole_map.json"
GAE_FROM = ["reward", "value", "terminated", "truncated", "next_value"]


def fmap(**fields: object) -> FieldMap:
    return FieldMap.from_dict({"gyre_field_map": 1, "fields": fields})


def test_example_map_notes() -> None:
    assert FieldMap.load(EXAMPLE).describe() == (
        "obs ← observation; done ← terminated OR truncated; advantage by GAE γ=0.99 λ=0.95, "
        "truncation bootstrapped from next_value; return by GAE (advantage + value) γ=0.99 "
        "λ=0.95, truncation bootstrapped from next_value; mask from padding")


def test_notes_of_a_map_the_diff_writes(tmp_path: Path) -> None:
    sampler, trainer = json_schema(CartPoleStep), json_schema(CartPoleBatch)
    written = diff(sampler, trainer, gamma=0.9, lam=0.8).field_map()
    notes = FieldMap.from_dict(written).describe()
    assert "done ← terminated OR truncated" in notes
    assert "advantage by GAE γ=0.9 λ=0.8, truncation bootstrapped from next_value" in notes
    assert "mask from padding" in notes


def test_every_builtin_op_describes_itself() -> None:
    for name in known_ops():
        op = get_op(name)
        assert op is not None and op.describe is not None, name


@pytest.mark.parametrize(("spec", "text"), [
    ({"from": "reward"}, "x ← reward"),
    ({"from": "action", "cast": "int64"}, "x ← action as int64"),
    ({"op": "all", "from": ["a", "b"]}, "x ← a AND b"),
    ({"op": "not", "from": "terminated"}, "x ← NOT terminated"),
    ({"op": "and_not", "from": ["is_last", "is_terminal"]}, "x ← is_last AND NOT is_terminal"),
    ({"op": "any", "from": ["terminated", "truncated"], "then": [{"op": "unsqueeze", "axis": -1}]},
     "x ← terminated OR truncated, then unsqueeze axis=-1"),
    ({"op": "episode_start", "from": "step"}, "x ← step == 0 (first step of an episode)"),
    ({"op": "shift", "from": "observation", "by": -1, "fill": 0.0},
     "x ← observation shifted by -1 steps within each row (else 0)"),
    ({"op": "masked_sum", "from": ["logprob", "logprob_mask"], "axis": 2},
     "x ← sum of logprob over axis 2 where logprob_mask"),
    ({"op": "gae", "from": GAE_FROM, "gamma": 0.99, "lam": 0.95, "truncation": "terminal"},
     "x by GAE γ=0.99 λ=0.95, truncation treated as termination (no bootstrap)"),
    ({"op": "discounted_return", "from": ["reward", "terminated", "truncated", "next_value"],
      "gamma": 0.97}, "x by discounted return γ=0.97, truncation bootstrapped from next_value"),
    ({"op": "mask", "from": "logprob_mask"}, "x ← logprob_mask"),
])
def test_op_descriptions(spec: dict, text: str) -> None:
    assert fmap(x=spec).describe() == text


def test_a_same_name_copy_says_nothing() -> None:
    assert fmap(reward={"from": "reward"}, done={"op": "any", "from": ["terminated"]}
                ).describe() == "done ← terminated"


def test_a_custom_op_describes_itself_or_is_named() -> None:
    register_op("clip", lambda inputs, columns, *, low: inputs[0], args=["low"])
    register_op("scale", lambda inputs, columns, *, by: inputs[0], args=["by"],
                describe=lambda target, sources, args: f"{target} ← {sources[0]} × {args['by']}")
    try:
        notes = fmap(a={"op": "clip", "from": "reward", "low": -1.5},
                     b={"op": "scale", "from": "reward", "by": 2}).describe()
        assert notes == "a ← clip(reward, low=-1.5); b ← reward × 2"
    finally:
        unregister_op("clip")
        unregister_op("scale")
