"""What the diff writes runs: optional trainer fields are not breaking, padding is never silent,
every input of the written map is required by the sampler or named by a warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gyre_contract.schema import diff

ROOT = Path(__file__).resolve().parents[2]
STEP = ROOT / "schemas" / "rollout_step.v1.json"
BATCH = ROOT / "schemas" / "train_batch.v1.json"
PEERS = ROOT / "tests" / "data" / "peers"
SHIPPED = sorted(p for p in [*(ROOT / "schemas").glob("*.json"), *PEERS.glob("*.json")]
                 if "$vocabulary" not in json.loads(p.read_text()))  # not the meta-schema


@pytest.mark.parametrize("schema", SHIPPED, ids=lambda p: p.stem)
def test_a_schema_against_itself_is_all_same(schema: Path) -> None:
    r = diff(schema, schema)
    assert {e.tier for e in r.entries} == {"same"}, r.summary_line()
    assert not [w for w in r.warnings if w.code == "optional_source"]


def sampler(**fields: tuple[str, bool]) -> dict:
    """A sampler schema: name=(dtype, required), per-step scalars."""
    return {"type": "object", "required": [k for k, (_, req) in fields.items() if req],
            "properties": {k: {"x-gyre-dtype": d, "x-gyre-shape": []}
                           for k, (d, _) in fields.items()}}


def test_an_optional_trainer_field_without_a_source_is_reported_not_breaking() -> None:
    no_value = sampler(observation=("float32", True), action=("int64", True),
                       reward=("float32", True), terminated=("bool", True),
                       truncated=("bool", True), logprob=("float32", True),
                       advantage=("float32", True), episode_id=("string", True),
                       policy_version=("int64", True), step=("int64", True))
    r = diff(no_value, BATCH)
    e = r.entry("value")
    assert e.tier == "optional_missing" and "optional in the trainer's schema" in e.reason
    assert r.exit_code() == 0 and r.to_dict()["summary"]["optional_missing"] >= 1
    assert "value" not in r.field_map()["fields"]
    assert "optional without source" in r.summary_line()


def test_gae_is_proposed_only_with_a_value_and_an_optional_one_is_named() -> None:
    base = dict(reward=("float32", True), terminated=("bool", True), truncated=("bool", True))
    trainer = {"type": "object", "required": ["advantages"], "x-gyre-batch-dims": ["B", "T"],
               "properties": {"advantages": {"x-gyre-dtype": "float32",
                                             "x-gyre-shape": ["B", "T"]}}}
    absent = diff(sampler(**base), trainer)
    assert absent.entry("advantages").tier == "missing"
    optional = diff(sampler(**base, value=("float32", False)), trainer)
    assert optional.entry("advantages").conversion.entry["op"] == "gae"
    warning = next(w for w in optional.warnings if w.code == "optional_source")
    assert "advantages" in warning.fields and "marks value optional" in warning.message
    required = diff(sampler(**base, value=("float32", True)), trainer)
    assert "optional_source" not in [w.code for w in required.warnings]


def test_a_padded_trainer_without_a_mask_gets_one_and_a_warning() -> None:
    r = diff(STEP, PEERS / "torchrl_ppo.json", batch_dims="B,T")
    warning = next(w for w in r.warnings if w.code == "padding_unmasked")
    assert "collector.mask" in warning.message
    assert r.field_map()["fields"]["collector.mask"]["op"] == "mask"
    r = diff(STEP, PEERS / "cleanrl_ppo_storage.json", batch_dims="T,N")
    assert r.field_map()["fields"]["mask"]["then"] == [{"op": "transpose", "axes": [1, 0]}]
    assert "padding_unmasked" in [w.code for w in r.warnings]
    # a trainer with its own mask, and a flat one, get no such warning
    for trainer, dims in ((BATCH, None), (PEERS / "sb3_rollout_samples.json", "M")):
        assert "padding_unmasked" not in [w.code for w in diff(STEP, trainer,
                                                                batch_dims=dims).warnings]


def test_a_scalar_action_becomes_m_by_1_for_an_unknown_trailing_dim() -> None:
    from gyre_contract.pinned import CartPoleStep

    old_sb3 = {"type": "object", "required": ["actions"], "properties": {"actions": {
        "type": "array", "items": {"type": "array", "items": {"type": "number"}}}}}
    e = diff(CartPoleStep, old_sb3, batch_dims="M").entry("actions")
    assert e.tier == "needs_conversion"
    assert e.conversion.entry == {"op": "unsqueeze", "from": "action", "axis": -1}


def test_a_shape_of_any_rank_into_a_fixed_size_is_named() -> None:
    """rollout_step's `[*act]` allows a scalar action, which SB3's `[M, 1]` actions cannot take
    as is: the renamed entry would fail `batch --trainer` on such rollouts, so a warning says so;
    a pinned scalar action gets the reshape instead and no warning."""
    from gyre_contract.pinned import CartPoleStep

    sb3 = PEERS / "sb3_rollout_samples.json"
    r = diff(STEP, sb3, batch_dims="M")
    warning = next(w for w in r.warnings if w.code == "open_shape")
    assert warning.fields == ("actions",) and "[*act] -> [1]" in warning.message
    pinned = diff(CartPoleStep, sb3, batch_dims="M")
    assert "open_shape" not in [w.code for w in pinned.warnings]
    assert pinned.entry("actions").conversion.ops == ("reshape",)
