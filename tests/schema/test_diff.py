"""The diff engine: tiers, converters, layouts, casts, warnings, the written map, goldens."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import SchemaError
from gyre_contract.core._models import Modalities, RolloutStep, TrainBatch
from gyre_contract.core._tensor import Tensor
from gyre_contract.io._episodes import Episode
from gyre_contract.pinned import CartPoleBatch, LLMStep
from gyre_contract.schema._diffing import diff
from gyre_contract.schema._dtyperules import compare_dtype
from gyre_contract.schema._export import json_schema
from gyre_contract.trainer._fieldmap import FieldMap

ROOT = Path(__file__).resolve().parents[2]
STEP = "schemas/rollout_step.v1.json"
BATCH = "schemas/train_batch.v1.json"
PEERS = "tests/data/peers"
GOLDEN = ROOT / "tests" / "golden"
GAE_FROM = ["reward", "value", "terminated", "truncated", "next_value"]
REPORT_SCHEMA = json.loads((ROOT / "schemas" / "diff_report.v1.json").read_text())
SUITE = Path(__file__).resolve().parents[1] / "data" / "json-schema-test-suite" / "tests" / "draft2020-12"
"""Vendored (see its VENDORED.md); a missing copy fails the tests that read it, never skips them."""


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # report names are the paths given; keep them stable


def tiers(report) -> dict[str, str]:
    return {e.trainer_field: e.tier for e in report.entries if e.trainer_field is not None}


def codes(report) -> list[str]:
    return [w.code for w in report.warnings]


def check_report(report) -> None:
    """Every report validates against its own schema and writes a map FieldMap accepts."""
    jsonschema.validate(report.to_dict(), REPORT_SCHEMA)
    fmap = report.field_map()
    if fmap["fields"]:
        FieldMap.from_dict(fmap)


# -- our own two schemas ------------------------------------------------------------------

def test_step_to_train_batch() -> None:
    r = diff(STEP, BATCH)
    assert tiers(r) == {
        "obs": "renamed", "action": "same", "reward": "same", "done": "needs_conversion",
        "terminated": "same", "truncated": "same", "advantage": "needs_conversion",
        "return": "needs_conversion", "value": "same", "logprob": "same",
        "mask": "needs_conversion", "policy_version": "same", "episode_id": "same",
        "step": "same"}
    assert [e.sampler_fields for e in r.tier("unused")] == [
        ("ref_logprob",), ("entropy",), ("next_observation",), ("return",), ("group_id",),
        ("loss_mask",), ("token_reward",), ("info",)]
    assert r.entry("return").reason == (
        "return = advantage + value (the GAE λ-return, consistent with the trainer's "
        "advantage); the sampler's return is optional, so it is computed here")
    done = r.entry("done")
    assert done.conversion.entry == {"op": "any", "from": ["terminated", "truncated"]}
    assert r.entry("mask").conversion.entry == {"op": "mask"}
    assert r.entry("advantage").conversion.entry == {
        "op": "gae", "from": ["reward", "value", "terminated", "truncated", "next_value"],
        "gamma": 0.99, "lam": 0.95}
    assert codes(r) == ["optional_source"]
    assert r.exit_code() == 0 and r.exit_code(strict=True) == 1
    check_report(r)


def test_the_written_map_builds_a_valid_train_batch(cartpole_model) -> None:
    r = diff(json_schema(cartpole_model), BATCH)
    fmap = FieldMap.from_dict(r.field_map())
    episodes = []
    for k, (n, term) in enumerate([(3, True), (2, False)]):
        episodes.append(Episode(f"ep{k}", {
            "observation": np.zeros((n, 4), np.float32), "action": np.ones(n, np.int64),
            "logprob": np.full(n, -0.7, np.float32), "value": np.zeros(n, np.float32),
            "next_value": np.array([np.nan] * (n - 1) + [0.5], np.float32),
            "reward": np.ones(n, np.float32), "step": np.arange(n),
            "episode_id": np.array([f"ep{k}"] * n), "terminated": np.array([False] * (n - 1) + [term]),
            "truncated": np.array([False] * (n - 1) + [not term]),
            "policy_version": np.zeros(n, np.int64), "entropy": np.zeros(n, np.float32),
        }, None))
    batch = fmap.to_train_batch(episodes)
    assert batch.obs.shape == (2, 3, 4)
    assert batch.done.tolist() == [[False, False, True], [False, True, False]]


# -- properties ----------------------------------------------------------------------------

dims = st.one_of(st.integers(0, 5), st.sampled_from(["B", "T", "N", "*obs", "?"]))
leaf = st.fixed_dictionaries({
    "x-gyre-dtype": st.sampled_from(["float32", "int64", "bool", "string", "uint8", "float64"]),
    "x-gyre-shape": st.lists(dims, max_size=3).filter(lambda s: sum(str(d).startswith("*")
                                                                     for d in s) <= 1),
})
names = st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True)
schemas = st.dictionaries(names, leaf, min_size=1, max_size=12).map(
    lambda props: {"type": "object", "properties": props})


@settings(max_examples=60, deadline=None)
@given(schemas)
def test_diff_of_a_schema_with_itself_is_all_same(doc: dict) -> None:
    r = diff(doc, doc)
    assert {e.tier for e in r.entries} == {"same"}
    assert r.exit_code(strict=True) == 0


@settings(max_examples=40, deadline=None)
@given(st.permutations(["obs", "actions", "rewards", "terminateds", "truncateds", "eps_id",
                        "t", "action_logp", "vf_preds"]))
def test_renames_are_found_whatever_the_field_order(order: list[str]) -> None:
    trainer = json.loads((ROOT / PEERS / "rllib_learner_batch.json").read_text())
    trainer["properties"] = {k: trainer["properties"][k] for k in order}
    r = diff(STEP, trainer, batch_dims="B")
    found = {e.trainer_field: e.sampler_fields for e in r.entries if e.trainer_field}
    assert found == {"obs": ("observation",), "actions": ("action",), "rewards": ("reward",),
                     "terminateds": ("terminated",), "truncateds": ("truncated",),
                     "eps_id": ("episode_id",), "t": ("step",), "action_logp": ("logprob",),
                     "vf_preds": ("value",)}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 4) | st.text(max_size=3)
    | st.sampled_from(["object", "array", "number", "#", "#/$defs/a", "B", "*x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "properties", "items", "$ref", "$defs", "anyOf", "required",
                         "minItems", "maxItems", "x-gyre-dtype", "x-gyre-shape", "x-gyre-role",
                         "x-gyre-batch-dims", "reward", "obs", "done"]), inner, max_size=4),
    max_leaves=16)


@settings(max_examples=150, deadline=None)
@given(json_values, json_values)
def test_hostile_schemas_never_crash_the_engine(a: object, b: object) -> None:
    docs = [{"type": "object", "properties": {"reward": a, "obs": b, "done": a}},
            {"type": "object", "properties": {"rewards": b, "terminated": a}}]
    for sampler, trainer in ((docs[0], docs[1]), (docs[1], docs[0])):
        try:
            r = diff(sampler, trainer)
        except SchemaError:
            continue
        r.to_text()
        jsonschema.validate(r.to_dict(), REPORT_SCHEMA)


def test_json_schema_test_suite_schemas_on_either_side() -> None:
    assert SUITE.is_dir(), f"the vendored JSON-Schema-Test-Suite is missing: {SUITE}"
    ran = 0
    for path in sorted(SUITE.glob("*.json")):
        for case in json.loads(path.read_text()):
            doc = {"type": "object", "properties": {"reward": case["schema"],
                                                    "x": case["schema"]}}
            for sampler, trainer in ((doc, STEP), (STEP, doc), (case["schema"], doc)):
                try:
                    diff(sampler, trainer).to_text()
                    ran += 1
                except SchemaError:
                    pass
    assert ran > 100


def test_five_hundred_fields_sort_into_the_right_tiers() -> None:
    """Half the fields keep their names, half get a name with no role and no same-named source:
    250 same, 250 missing, 250 unused. The speed is measured in benchmarks/bench_diff.py (a
    ratio to a baseline of the same run), never asserted in a test."""
    props = {f"f{i}": {"type": "array", "items": {"type": "number"}, "minItems": 3,
                       "maxItems": 3} for i in range(500)}
    other = {(f"obs_{i}" if i % 2 else f"f{i}"): v for i, v in enumerate(props.values())}
    a = {"type": "object", "properties": props}
    b = {"type": "object", "properties": other, "required": list(other)}
    r = diff(a, b)
    assert r.counts() == {"same": 250, "renamed": 0, "needs_conversion": 0, "missing": 250,
                          "optional_missing": 0, "unused": 250}
    assert {e.trainer_field for e in r.tier("missing")} == {f"obs_{i}" for i in range(1, 500, 2)}


# -- dtype and shape rules -------------------------------------------------------------------

@pytest.mark.parametrize(("s", "t", "cast", "lossless"), [
    ("float32", "float32", None, True), ("float32", "number", None, True),
    ("number", "float64", None, True), ("int32", "integer", None, True),
    ("int32", "int64", "int64", True), ("bool", "float32", "float32", True),
    ("bool", "number", "float32", True), ("bool", "integer", "int64", True),
    ("uint8", "int16", "int16", True), ("float32", "float64", "float64", True),
    ("float64", "float32", "float32", False), ("int64", "int32", "int32", False),
    ("int64", "float32", "float32", False), ("float32", "int64", "int64", False),
    ("number", "integer", "int64", False), (("int64", "float32"), "int64", "int64", False),
])
def test_casts_are_classified(s, t, cast, lossless) -> None:
    fit = compare_dtype(s, t)
    assert (fit.ok, fit.cast_to, fit.lossless) == (True, cast, lossless)


def test_strings_never_become_numbers() -> None:
    fit = compare_dtype("string", "int64")
    assert not fit.ok
    assert fit.why == "string cannot become int64: no cast between string and int"


def doc(**fields) -> dict:
    """A schema of required fields: name=(dtype, shape)."""
    return {"type": "object", "required": list(fields), "properties": {
        k: {"x-gyre-dtype": d, "x-gyre-shape": s} for k, (d, s) in fields.items()}}


def test_narrowing_cast_is_needs_conversion_with_a_warning() -> None:
    r = diff(doc(reward=("float64", [])), doc(reward=("float32", [])))
    e = r.entry("reward")
    assert (e.tier, e.conversion.cast, e.conversion.entry) == (
        "needs_conversion", "lossy", {"from": "reward", "cast": "float32"})
    assert r.warnings[0].message == ("reward <- reward: narrowing cast float64 -> float32 may "
                                     "lose precision or overflow (the map refuses values that "
                                     "do not fit)")


def test_time_major_trainer_needs_a_transpose() -> None:
    r = diff(doc(reward=("float32", []), observation=("float32", [4])),
             doc(rewards=("float32", ["T", "B"]), obs=("float32", ["T", "B", 4])),
             batch_dims="T,B")
    assert r.layout.kind == "time_major"
    assert r.entry("rewards").conversion.entry == {"op": "transpose", "from": "reward",
                                                   "axes": [1, 0]}
    assert r.entry("obs").conversion.entry == {"op": "transpose", "from": "observation",
                                               "axes": [1, 0, 2]}


def test_time_major_with_a_trailing_singleton_is_one_entry_with_then() -> None:
    r = diff(doc(reward=("float64", []), terminated=("bool", []), truncated=("bool", [])),
             doc(rewards=("float32", ["T", "B", 1]), dones=("bool", ["T", "B", 1])),
             batch_dims="T,B")
    assert r.entry("rewards").conversion.entry == {
        "op": "unsqueeze", "from": "reward", "cast": "float32", "axis": -1,
        "then": [{"op": "transpose", "axes": [1, 0, 2]}]}
    assert r.entry("dones").conversion.entry == {
        "op": "any", "from": ["terminated", "truncated"],
        "then": [{"op": "unsqueeze", "axis": -1}, {"op": "transpose", "axes": [1, 0, 2]}]}
    assert "map_incomplete" not in codes(r)
    cols = {"reward": np.array([[1.0, 2.0], [3.0, 0.0]]), "terminated": np.array([[0, 1], [0, 0]], bool),
            "truncated": np.array([[0, 0], [1, 0]], bool), "mask": np.ones((2, 2), bool)}
    out = FieldMap.from_dict(r.field_map()).apply(cols)
    assert out["mask"].shape == (2, 2)  # padding_unmasked: the map adds the mask, time-major
    assert out["rewards"].dtype == np.float32 and out["rewards"].shape == (2, 2, 1)
    np.testing.assert_array_equal(out["rewards"][..., 0], [[1, 3], [2, 0]])
    np.testing.assert_array_equal(out["dones"][..., 0], [[False, True], [True, False]])


def test_what_no_map_entry_can_express_stays_in_map_incomplete() -> None:
    r = diff(doc(value=("float32", [])), doc(value=("float32", []), next_value=("float32", [])))
    assert r.entry("next_value").conversion.entry is None
    assert [w.code for w in r.warnings] == ["map_incomplete"]
    assert r.warnings[0].message == (
        "the written map leaves out next_value, which no map entry can express; write by "
        "hand: next_value: shift by -1 with the row's next_value on the last step: write by hand")
    assert r.field_map()["comment"].endswith("; write by hand: next_value")
    assert "next_value" not in r.field_map()["fields"]


def test_row_columns_read_per_step() -> None:
    r = diff(STEP, doc(episode_id=("string", ["B", "T"]), policy_version=("int64", ["B", "T"]),
                       step=("int64", ["B", "T"])), batch_dims="B,T")
    assert r.entry("episode_id").conversion.entry == {"op": "per_step", "from": "episode_id"}
    assert r.entry("step").tier == "same"
    version = r.entry("policy_version")
    assert version.conversion.entry is None
    assert version.conversion.manual == ("collate keeps one policy_version per row (the oldest of "
                                         "its steps); a per-step version is not in the batch")
    assert [w.fields for w in r.warnings if w.code == "map_incomplete"] == [("policy_version",)]
    per_row = diff(STEP, BATCH)  # TrainBatch reads episode_id and policy_version per row, [B]
    assert per_row.entry("episode_id").tier == per_row.entry("policy_version").tier == "same"


def test_trailing_singleton_needs_a_reshape() -> None:
    r = diff(doc(reward=("float32", [])), doc(reward=("float32", ["B", "T", 1])),
             batch_dims="B,T")
    e = r.entry("reward")
    assert e.tier == "needs_conversion"
    assert e.conversion.entry == {"op": "unsqueeze", "from": "reward", "axis": -1}
    assert e.reason == "add a trailing dim of 1 ([] -> [1] per step)"


def test_flat_layout_is_recognised_once() -> None:
    r = diff(doc(reward=("float32", [])), doc(rewards=("float32", ["M"])), batch_dims="M")
    assert r.layout.kind == "flat"
    assert r.entry("rewards").tier == "renamed"
    assert codes(r) == ["flat_layout"]
    # batch --trainer already keeps the real steps: the warning must not send the user to the mask
    assert "batch --trainer" in r.warnings[0].message and "real steps only" in r.warnings[0].message


def test_fixed_dims_must_agree_and_names_match_any_size() -> None:
    r = diff(doc(obs=("float32", [4])), doc(obs=("float32", [8])))
    e = r.entry("obs")
    assert e.tier == "missing"
    assert e.reason == ("obs has the role observation but per-step shape [4] cannot become "
                        "[8]; no known conversion")
    assert diff(doc(obs=("float32", ["D"])), doc(obs=("float32", [8]))).entry("obs").tier == "same"


def test_rename_override_and_bad_renames() -> None:
    r = diff(doc(a=("float32", []), b=("float32", [])), doc(x=("float32", [])),
             renames={"x": "b"})
    assert (r.entry("x").tier, r.entry("x").sampler_fields) == ("renamed", ("b",))
    assert "renamed by --rename" in r.entry("x").reason
    with pytest.raises(SchemaError) as info:
        diff(STEP, BATCH, renames={"obs": "observaton"})
    assert str(info.value).startswith("--rename obs=observaton: the sampler has no field "
                                      "'observaton'; sampler fields: observation, action")


def test_declared_roles_catch_the_episode_start_trap() -> None:
    trainer = {"type": "object", "properties": {
        "dones": {"type": "boolean", "x-gyre-role": "episode_start"}}}
    r = diff(STEP, trainer)
    e = r.entry("dones")
    assert e.conversion.entry == {"op": "episode_start", "from": "step"}
    assert e.reason.startswith("episode start = the previous step's done")


# -- real libraries against our v1 step schema ---------------------------------------------

def test_cleanrl_collapses_truncation_into_done() -> None:
    r = diff(STEP, f"{PEERS}/cleanrl_ppo_storage.json", batch_dims="T,N")
    assert r.layout.kind == "time_major"
    assert set(tiers(r).values()) == {"needs_conversion"}
    assert r.entry("dones").conversion.text.startswith("any(terminated, truncated)")
    assert codes(r) == ["ambiguous_match", "optional_source", "padding_unmasked",
                        "truncation_collapsed"]
    collapsed = r.warnings[3]
    assert collapsed.message == (
        "the trainer reads only dones, not terminated/truncated, while the sampler records "
        "truncated: time-limit cuts will be trained as terminal (no bootstrap from next_value)")
    assert r.field_map()["fields"]["dones"] == {  # CleanRL stores dones as floats
        "op": "any", "from": ["terminated", "truncated"], "cast": "float32",
        "then": [{"op": "transpose", "axes": [1, 0]}]}
    check_report(r)


def test_rllib_next_observation_is_new_obs() -> None:
    """A per-step `new_obs` is the next step's observation, the recorded (optional)
    next_observation on an episode's last step only: the `next` op, never a rename."""
    r = diff(STEP, f"{PEERS}/rllib_learner_batch.json", batch_dims="B")
    assert r.entry("new_obs").sampler_fields == ("observation", "next_observation")
    assert r.field_map()["fields"]["new_obs"] == {
        "op": "next", "from": ["observation", "next_observation"]}
    assert tiers(r) == {
        "obs": "renamed", "new_obs": "needs_conversion", "actions": "needs_conversion",
        "rewards": "renamed", "terminateds": "renamed", "truncateds": "renamed",
        "eps_id": "needs_conversion", "t": "renamed", "action_logp": "renamed",
        "vf_preds": "renamed", "advantages": "needs_conversion",
        "value_targets": "needs_conversion", "loss_mask": "needs_conversion"}
    assert r.entry("value_targets").conversion.entry["output"] == "return"
    eps_id = r.entry("eps_id")  # collate keeps one episode_id per row; RLlib reads one per step
    assert eps_id.conversion.entry == {"op": "per_step", "from": "episode_id"}
    assert eps_id.reason == "repeat the row's episode_id on each step (collate keeps one per row)"
    assert r.field_map()["fields"]["mask"]["op"] == "mask"  # to select the flat batch's steps
    assert r.entry("actions").conversion.cast == "lossy"
    assert codes(r) == ["optional_source", "flat_layout"]
    check_report(r)


def test_torchrl_reward_is_b_t_1_under_next() -> None:
    r = diff(STEP, f"{PEERS}/torchrl_ppo.json", batch_dims="B,T")
    reward = r.entry("next.reward")
    assert (reward.tier, reward.sampler_fields) == ("needs_conversion", ("reward",))
    assert reward.conversion.entry == {"op": "unsqueeze", "from": "reward", "axis": -1}
    nxt = r.entry("next.observation")  # the true final observation is on the last step only
    assert (nxt.tier, nxt.sampler_fields) == ("needs_conversion", ("observation",
                                                                   "next_observation"))
    assert nxt.conversion.entry == {"op": "next", "from": ["observation", "next_observation"]}
    assert r.entry("action_log_prob").sampler_fields == ("logprob",)
    unsqueeze = [{"op": "unsqueeze", "axis": -1}]
    fields = r.field_map()["fields"]
    assert fields["next.done"] == {"op": "any", "from": ["terminated", "truncated"],
                                   "then": unsqueeze}
    assert fields["advantage"] == {"op": "gae", "from": GAE_FROM, "gamma": 0.99, "lam": 0.95,
                                   "then": unsqueeze}
    assert fields["value_target"] == {"op": "gae", "from": GAE_FROM, "gamma": 0.99,
                                      "lam": 0.95, "output": "return", "then": unsqueeze}
    assert r.entry("next.done").conversion.ops == ("any", "unsqueeze")
    assert "truncation_collapsed" not in codes(r)  # TorchRL keeps terminated and truncated
    assert "map_incomplete" not in codes(r)
    check_report(r)


def test_sb3_rollout_samples() -> None:
    r = diff(STEP, f"{PEERS}/sb3_rollout_samples.json", batch_dims="M")
    assert tiers(r) == {"observations": "renamed", "actions": "renamed",
                        "old_values": "renamed", "old_log_prob": "renamed",
                        "advantages": "needs_conversion", "returns": "needs_conversion"}
    assert "recomputed_logprob" not in codes(r)  # SB3 stores the behaviour log-prob
    check_report(r)


def test_tianshou_recomputes_the_logprob() -> None:
    r = diff(STEP, f"{PEERS}/tianshou_ppo.json", batch_dims="B")
    assert r.entry("obs_next").sampler_fields == ("observation", "next_observation")
    assert r.entry("adv").conversion.ops == ("gae",)
    assert "recomputed_logprob" in codes(r)
    check_report(r)


# LLM token trainers (verl, TRL, OpenRLHF): tests/schema/test_token_diff.py


# -- per-token fields into a per-step trainer (LLM rollouts) -----------------------------------

def test_llm_step_logprob_is_the_masked_sum_of_its_token_logprobs() -> None:
    r = diff(LLMStep, TrainBatch)
    e = r.entry("logprob")
    assert (e.tier, e.sampler_fields) == ("needs_conversion", ("logprob",))
    assert e.conversion.entry == {"op": "masked_sum", "from": ["logprob", "logprob_mask"],
                                  "axis": 2}
    assert e.conversion.ops == ("masked_sum",) and e.conversion.cast is None
    assert e.reason == ("one logprob per step = the sum of logprob over its real elements "
                        "(varying dim A; logprob_mask drops the padding): the whole sequence's "
                        "log-prob")
    summed = r.warnings[codes(r).index("summed_elements")]
    assert summed.message == (
        "logprob <- logprob: the trainer reads one logprob per step, so the map sums logprob "
        "over A; the per-element values are not in the batch (a token-level loss needs them: "
        "add a key such as token_logprob {\"from\": \"logprob\"} to the map); the sampler's "
        "loss_mask is not applied: tokens it marks False (spliced tool output) count in the sum, "
        "which a token trainer (\"rows\": \"step\") keeps out")
    assert codes(r) == ["summed_elements", "optional_source"]
    assert r.counts()["missing"] == 0 and r.exit_code() == 0
    check_report(r)


def test_llm_step_obs_is_the_whole_observation_object_never_a_float_cast() -> None:
    r = diff(LLMStep, TrainBatch)
    e = r.entry("obs")
    assert (e.tier, e.sampler_fields) == ("needs_conversion", ("observation",))
    assert e.conversion.entry == {"from": "observation"}
    assert e.conversion.ops == ("rename", "pad") and e.conversion.cast is None
    assert e.sampler_dtype == ("int64", "string")
    assert e.reason == ("pad varying dim P to the batch maximum (the object gains "
                        "token_ids_mask); the trainer's obs takes an object of modalities: all "
                        "of observation (token_ids int64 [P], text string []), dtypes kept")
    assert "int_to_float" not in codes(r)
    unused = [f for u in r.tier("unused") for f in u.sampler_fields]
    assert unused == ["ref_logprob", "entropy", "next_observation.token_ids",
                      "next_observation.text", "return", "group_id", "loss_mask", "token_reward",
                      "info"]
    line = next(x for x in r.to_text().splitlines() if x.startswith("  obs "))
    assert line.split()[1:6] == ["observation", "{token_ids,", "text}", "int64|string",
                                 "(kept)"]


def test_token_ids_cast_to_floats_warn() -> None:
    r = diff(LLMStep, CartPoleBatch)  # obs float32 [B, T, 4]: no object of modalities
    e = r.entry("obs")
    assert e.sampler_fields == ("observation.token_ids",)
    assert e.conversion.cast == "lossy" and e.conversion.entry["cast"] == "float32"
    warning = r.warnings[codes(r).index("int_to_float")]
    assert warning.message == (
        "obs <- observation.token_ids: lossy cast int64 -> float32: integers beyond 2**24 do "
        "not fit (the map refuses them), and integer codes such as token ids or categories "
        "are labels, not quantities: embed them in the trainer rather than reading them as "
        "floats")
    r = diff(doc(reward=("int16", [])), doc(reward=("float32", [])))
    assert r.entry("reward").conversion.cast == "lossless" and codes(r) == []


def varying_doc(**fields) -> dict:
    """A sampler schema whose dims A and K vary between steps."""
    return {**doc(**fields), "x-gyre-varying-dims": ["A", "K"]}


def test_two_varying_dims_sum_over_both_and_the_map_computes_it() -> None:
    r = diff(varying_doc(logprob=("float32", ["A", "K"])),
             doc(logprob=("float32", ["B", "T"])), batch_dims="B,T")
    e = r.entry("logprob")
    assert e.conversion.entry == {"op": "masked_sum", "from": ["logprob", "logprob_mask"],
                                  "axis": 3, "then": [{"op": "sum", "axis": 2}]}
    assert e.conversion.text == "masked_sum(logprob, logprob_mask, axis=3); then sum over axis 2"
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    real = np.zeros_like(x, bool)
    real[:, :, :2, :3] = True
    out = FieldMap.from_dict(r.field_map()).apply({"logprob": x, "logprob_mask": real,
                                                   "mask": np.ones((2, 3), bool)})
    np.testing.assert_array_equal(out["logprob"], x[:, :, :2, :3].sum(axis=(2, 3)))


def test_summed_rewards_time_major_and_a_cast() -> None:
    r = diff(varying_doc(reward=("float32", ["A"])), doc(rewards=("float64", ["T", "B"])),
             batch_dims="T,B")
    e = r.entry("rewards")
    assert e.conversion.entry == {"op": "masked_sum", "from": ["reward", "reward_mask"],
                                  "axis": 2, "cast": "float64",
                                  "then": [{"op": "transpose", "axes": [1, 0]}]}
    assert e.conversion.ops == ("masked_sum", "transpose", "cast")
    assert e.reason.endswith("the step's total reward")
    check_report(r)


@pytest.mark.parametrize(("sampler", "why"), [
    (doc(logprob=("float32", ["A"])), "logprob has the role logprob but per-step shape [A] "
     "cannot become []; no known conversion"),  # A is not a varying dim
    (varying_doc(logprob=("float32", [4])), "logprob has the role logprob but per-step shape "
     "[4] cannot become []; no known conversion"),
    (varying_doc(value=("float32", ["A"])), "value has the role value but per-step shape [A] "
     "cannot become []; no known conversion"),  # values do not add up
])
def test_only_varying_dims_of_a_summable_role_are_summed(sampler: dict, why: str) -> None:
    name = next(iter(sampler["properties"]))
    r = diff(sampler, doc(**{name: ("float32", ["B", "T"])}), batch_dims="B,T")
    assert (r.entry(name).tier, r.entry(name).reason) == ("missing", why)


def test_an_object_of_fixed_modalities_is_renamed_and_builds_a_valid_batch() -> None:
    class Camera(Modalities):
        image: Tensor("uint8", [2, 2], role="observation")
        state: Tensor("float32", [3], role="observation")

    class CameraStep(RolloutStep):
        observation: Camera

    r = diff(CameraStep, TrainBatch)
    e = r.entry("obs")
    assert (e.tier, e.sampler_fields, e.conversion.entry) == (
        "renamed", ("observation",), {"from": "observation"})
    n = 3
    episode = Episode("cam", {
        "observation": {"image": np.ones((n, 2, 2), np.uint8),
                        "state": np.zeros((n, 3), np.float32)},
        "action": np.zeros(n, np.int64), "logprob": np.full(n, -0.5, np.float32),
        "value": np.zeros(n, np.float32), "reward": np.ones(n, np.float32),
        "step": np.arange(n), "episode_id": np.array(["cam"] * n),
        "terminated": np.arange(n) == n - 1, "truncated": np.zeros(n, bool),
        "policy_version": np.zeros(n, np.int64)}, None)
    batch = FieldMap.from_dict(r.field_map()).to_train_batch([episode])
    assert batch.obs["image"].dtype == np.uint8 and batch.obs["image"].shape == (1, n, 2, 2)
    assert batch.obs["state"].shape == (1, n, 3)


def test_rlds_truncated_is_is_last_and_not_is_terminal() -> None:
    r = diff(f"{PEERS}/rlds_steps.json", BATCH)
    e = r.entry("truncated")
    assert e.tier == "needs_conversion"
    assert e.sampler_fields == ("is_last", "is_terminal")
    assert e.reason == "truncated = is_last AND NOT is_terminal (how RLDS and old Gym mark a " \
        "time-limit end)"
    assert e.conversion.entry == {"op": "and_not", "from": ["is_last", "is_terminal"]}
    assert r.entry("terminated").sampler_fields == ("is_terminal",)
    assert r.entry("done").sampler_fields == ("is_last",)
    assert "map_incomplete" not in codes(r)
    check_report(r)


def test_d4rl_timeouts_are_truncated() -> None:
    r = diff(f"{PEERS}/d4rl_qlearning.json", BATCH)
    assert r.entry("truncated").sampler_fields == ("timeouts",)
    assert r.entry("terminated").sampler_fields == ("terminals",)
    assert r.entry("done").conversion.entry["from"] == ["terminals", "timeouts"]
    check_report(r)


# -- golden files ---------------------------------------------------------------------------

GOLDEN_CASES = {
    "step_vs_torchrl": (STEP, f"{PEERS}/torchrl_ppo.json", "B,T"),
    "step_vs_cleanrl": (STEP, f"{PEERS}/cleanrl_ppo_storage.json", "T,N"),
    "step_vs_train_batch": (STEP, BATCH, None),
    "llm_step_vs_train_batch": (LLMStep, TrainBatch, None),
    "llm_step_vs_verl": (LLMStep, f"{PEERS}/verl_actor_batch.json", None),
    "llm_step_vs_trl_grpo": (LLMStep, f"{PEERS}/trl_grpo.json", None),
    "llm_step_vs_openrlhf": (LLMStep, f"{PEERS}/openrlhf_experience.json", None),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_outputs(name: str) -> None:
    sampler, trainer, batch_dims = GOLDEN_CASES[name]
    r = diff(sampler, trainer, batch_dims=batch_dims)
    outputs = {f"{name}.txt": r.to_text(), f"{name}.md": r.render("markdown"),
               f"{name}.json": json.dumps(r.to_dict(), indent=2) + "\n"}
    for file, text in outputs.items():
        path = GOLDEN / file
        if os.environ.get("GYRE_REGEN_GOLDEN"):
            path.write_text(text)
        assert text == path.read_text(), f"{file} drifted; GYRE_REGEN_GOLDEN=1 rewrites it"


def test_colour_only_when_asked() -> None:
    r = diff(STEP, BATCH)
    assert "\x1b[" not in r.to_text()
    assert "\x1b[32m" in r.to_text(color=True)


def test_a_foreign_trainer_without_batch_dims_is_told_to_name_them() -> None:
    """TorchRL's `[B, T, 1]` fields cannot fit per-step shapes until the batch dims are known."""
    peer = Path(__file__).parents[1] / "data" / "peers" / "torchrl_ppo.json"
    step = Path(__file__).parents[2] / "schemas" / "rollout_step.v1.json"
    blind = diff(step, peer)
    codes = {w.code: w for w in blind.warnings}
    assert "no_batch_dims" in codes and "next.reward" in codes["no_batch_dims"].fields
    assert "--batch-dims B,T" in codes["no_batch_dims"].message
    told = diff(step, peer, batch_dims="B,T")
    assert "no_batch_dims" not in {w.code for w in told.warnings}
    assert told.counts()["missing"] == 0


def test_unused_fields_say_whether_the_sampler_always_produces_them() -> None:
    """An optional sampler field (entropy, value, token_reward...) may never be recorded: the
    diff does not call it produced, in text, Markdown or JSON."""
    r = diff(LLMStep, f"{PEERS}/verl_actor_batch.json")
    unused = {e.sampler_fields[0]: e for e in r.tier("unused")}
    assert unused["step"].sampler_required is True
    assert unused["entropy"].sampler_required is False
    assert unused["token_reward"].sampler_required is False
    assert "optional in the sampler's schema" in unused["entropy"].reason
    assert "always produced" in unused["episode_id"].reason
    text = r.to_text()
    required = text.index("UNUSED, REQUIRED (")
    optional = text.index("UNUSED, OPTIONAL (")
    assert required < text.index("  -  ", required) < optional
    assert "produced only when the sampler records them" in text
    assert text[optional:].count("\n  -") == sum(
        1 for e in unused.values() if not e.sampler_required)
    assert "entropy" in text[optional:] and "entropy" not in text[required:optional]
    n_req = sum(1 for e in unused.values() if e.sampler_required)
    assert f"{len(unused)} unused ({n_req} required, {len(unused) - n_req} optional)" in \
        r.summary_line()
    md = r.render("markdown")
    assert "| unused (optional) | `-` | `entropy` |" in md
    assert "| unused (required) | `-` | `step` |" in md
    data = r.to_dict()
    jsonschema.validate(data, REPORT_SCHEMA)
    flags = {e["sampler_fields"][0]: e["sampler_required"] for e in data["entries"]
             if e["tier"] == "unused"}
    assert flags["entropy"] is False and flags["step"] is True
    assert all("sampler_required" not in e for e in data["entries"] if e["tier"] != "unused")
