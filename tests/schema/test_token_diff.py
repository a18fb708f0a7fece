"""The diff for LLM trainers: token rows ("rows": "step"), the group_id and ref_logprob roles,
group-relative advantages, and the warnings only token trainers have (docs/llm.md §4)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import SchemaError
from gyre_contract.core._models import TrainBatch
from gyre_contract.pinned import LLMStep
from gyre_contract.schema._diffing import diff
from gyre_contract.schema._export import json_schema
from gyre_contract.schema._roles import synonyms
from gyre_contract.schema._tokentrainer import token_rows
from gyre_contract.trainer._fieldmap import FieldMap
from gyre_contract.trainer._layouts import TokenRows

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tests" / "data" / "peers"
MAPS = ROOT / "tests" / "data" / "maps"
REPORT_SCHEMA = json.loads((ROOT / "schemas" / "diff_report.v1.json").read_text())


def sampler(*without: str) -> dict:
    """The pinned LLM step's schema (v1.1: ref_logprob, group_id, loss_mask, token_reward), without
    the named top-level fields."""
    doc = copy.deepcopy(json_schema(LLMStep))
    for name in without:
        del doc["properties"][name]
        if name in doc.get("required", []):
            doc["required"].remove(name)
    return doc


def peer(name: str, drop: tuple[str, ...] = ()) -> dict:
    doc = json.loads((PEERS / f"{name}.json").read_text())
    for key in drop:
        del doc["properties"][key]
        if key in doc["required"]:
            doc["required"].remove(key)
    return doc


def written(name: str) -> dict:
    """A hand-checked map under tests/data/maps, its per-field comments left out."""
    doc = json.loads((MAPS / name).read_text())
    doc["fields"] = {k: {a: v for a, v in spec.items() if a != "comment"}
                     for k, spec in doc["fields"].items()}
    return doc


def codes(report) -> list[str]:
    return [w.code for w in report.warnings]


def warning(report, code: str):
    return next(w for w in report.warnings if w.code == code)


def check(report) -> None:
    """The report validates against its schema; the map it writes is one FieldMap accepts."""
    jsonschema.validate(report.to_dict(), REPORT_SCHEMA)
    fmap = report.field_map()
    if fmap["fields"]:
        assert FieldMap.from_dict(fmap).layout.rows == fmap.get("rows", "episode")


# -- the three trainers: the written map is the hand-checked one -----------------------------------

@pytest.mark.parametrize(("trainer", "map_file"), [
    ("verl_actor_batch", "llm_verl_map.json"),
    ("trl_grpo", "llm_trl_grpo_map.json"),
    ("openrlhf_experience", "llm_openrlhf_map.json"),
])
def test_each_trainer_gets_its_hand_checked_rows_step_map(trainer: str, map_file: str) -> None:
    r = diff(sampler(), PEERS / f"{trainer}.json")
    assert r.layout.kind == "token" and r.exit_code() == 0
    fmap = r.field_map()
    assert fmap["rows"] == "step"
    assert fmap["fields"] == written(map_file)["fields"]
    assert list(fmap["fields"]) == [f for f in peer(trainer)["properties"]]
    check(r)


def test_verl_reads_the_whole_sequence_and_the_group() -> None:
    r = diff(sampler(), PEERS / "verl_actor_batch.json")
    fields = r.field_map()["fields"]
    assert fields["input_ids"] == {"op": "concat", "from": ["prompt_ids", "response_ids"],
                                   "value": 0}
    assert fields["attention_mask"]["output"] == "attention_mask"
    assert fields["attention_mask"]["cast"] == "int64"  # verl's masks are int64, ours bool
    assert fields["position_ids"]["output"] == "position_ids"
    assert fields["uid"] == {"from": "group_id"}
    assert r.entry("uid").sampler_fields == ("group_id",)
    assert fields["ref_log_prob"] == {"from": "ref_logprob"}
    assert fields["advantages"] == {"op": "group_norm", "from": ["reward", "group_id"],
                                    "std": "unbiased", "eps": 1e-6, "singletons": "raw",
                                    "then": [{"op": "per_token"}]}
    # verl's default: no KL in the reward, the sequence reward on the last response token
    assert r.entry("token_level_rewards").sampler_fields == ("reward", "logprob", "ref_logprob")
    mask = r.entry("response_mask")
    assert mask.sampler_fields == ("action", "loss_mask")
    assert "AND loss_mask" in mask.reason
    assert set(codes(r)) == {"optional_source", "recomputed_logprob", "group_split",
                             "staleness_unchecked"}


def test_trl_gets_one_advantage_per_completion_with_its_eps() -> None:
    r = diff(sampler(), PEERS / "trl_grpo.json")
    adv = r.field_map()["fields"]["advantages"]
    assert adv == {"op": "group_norm", "from": ["reward", "group_id"], "std": "unbiased",
                   "eps": 1e-4}
    assert "TRL GRPOTrainer" in r.entry("advantages").reason
    assert r.field_map()["fields"]["prompt_mask"] == {"from": "prompt_mask", "cast": "int64"}


def test_openrlhf_returns_are_the_group_relative_advantages() -> None:
    r = diff(sampler(), PEERS / "openrlhf_experience.json")
    fields = r.field_map()["fields"]
    assert fields["returns"] == fields["advantages"]
    assert fields["advantages"]["eps"] == 1e-9
    assert r.entry("returns").reason.startswith("returns = advantages for a critic-free")
    assert fields["action_mask"] == {"from": "response_mask"}  # bool, as OpenRLHF's


def test_token_level_rewards_put_the_sequence_reward_on_the_last_token() -> None:
    r = diff(sampler(), PEERS / "verl_actor_batch.json")
    assert r.field_map()["fields"]["token_level_rewards"] == {
        "op": "kl_reward", "from": ["reward", "logprob", "ref_logprob"], "beta": 0.0,
        "estimator": "k1"}
    why = r.entry("token_level_rewards").reason
    assert "last real response token" in why and "token_reward is not in it" in why


def test_a_required_token_reward_is_read_as_the_per_token_reward() -> None:
    doc = sampler()
    doc["required"].append("token_reward")
    r = diff(doc, PEERS / "verl_actor_batch.json")
    assert r.field_map()["fields"]["token_level_rewards"] == {"from": "token_reward"}
    r = diff(sampler("ref_logprob"), PEERS / "verl_actor_batch.json")
    assert r.field_map()["fields"]["token_level_rewards"] == {"from": "token_reward"}
    r = diff(sampler("ref_logprob", "token_reward"), PEERS / "verl_actor_batch.json")
    assert r.entry("token_level_rewards").conversion.entry is None  # by hand, said why


def test_a_per_token_kl_field_is_the_kl_op() -> None:
    doc = peer("openrlhf_experience")
    doc["properties"]["kl"] = doc["properties"]["action_log_probs"]
    r = diff(sampler(), doc)
    assert r.field_map()["fields"]["kl"] == {"op": "kl", "from": ["logprob", "ref_logprob"],
                                             "estimator": "k1"}


# -- group_id: never from episode_id ----------------------------------------------------------------

def test_verl_uid_is_never_the_episode_id() -> None:
    """Regression: verl's `uid` used to be matched to the sampler's episode_id, which would have
    normalised every completion against itself."""
    r = diff(sampler("group_id"), PEERS / "verl_actor_batch.json")
    uid = r.entry("uid")
    assert (uid.tier, uid.sampler_fields) == ("missing", ())
    assert "episode_id is never one" in uid.reason
    assert "uid" not in r.field_map()["fields"]
    assert all(e.sampler_fields != ("episode_id",) for e in r.entries if e.trainer_field)
    assert r.exit_code() == 1


def test_uid_is_not_episode_id_in_a_batch_of_episodes_either() -> None:
    """A [B, T] trainer reading `uid` next to an LLM step without a group."""
    doc = {"type": "object", "x-gyre-batch-dims": ["B", "T"], "required": ["uid", "reward"],
           "properties": {"uid": {"type": "array", "items": {"type": "string"}},
                          "reward": {"type": "array", "items": {"type": "array",
                                                                "items": {"type": "number"}}}}}
    r = diff(sampler("group_id"), doc)
    assert r.entry("uid").tier == "missing" and r.entry("uid").sampler_fields == ()


def test_a_same_named_field_of_the_other_role_is_not_taken() -> None:
    """A sampler field named `uid` declared as the episode id does not feed a group id."""
    doc = sampler("group_id")
    doc["properties"]["uid"] = {**doc["properties"]["episode_id"], "x-gyre-role": "episode_id"}
    r = diff(doc, PEERS / "verl_actor_batch.json")
    assert r.entry("uid").tier == "missing"


# -- advantages: GAE only with a value; group_norm with a group; else missing with the reason --------

def test_no_group_and_a_value_leaves_per_token_gae_to_the_trainer() -> None:
    r = diff(sampler("group_id"), PEERS / "verl_actor_batch.json")
    adv = r.entry("advantages")
    assert adv.tier == "needs_conversion" and adv.conversion.entry is None
    assert "GAE" in adv.conversion.manual
    assert "map_incomplete" in codes(r)


def test_no_group_and_no_value_is_missing_with_the_reason() -> None:
    r = diff(sampler("group_id", "value"), PEERS / "trl_grpo.json")
    adv = r.entry("advantages")
    assert adv.tier == "missing"
    assert adv.reason == "no value for GAE and no group_id for a group-relative advantage"


def test_a_batch_of_episodes_without_a_value_gets_group_norm_by_hand() -> None:
    r = diff(sampler("value"), TrainBatch)
    adv = r.entry("advantage")
    assert adv.conversion is not None and adv.conversion.entry is None
    assert adv.sampler_fields == ("reward", "group_id")
    assert '"rows": "step"' in adv.conversion.manual
    assert "gae" not in json.dumps(r.field_map())
    r = diff(sampler("value", "group_id"), TrainBatch)
    assert r.entry("advantage").reason == \
        "no value for GAE and no group_id for a group-relative advantage"


def test_gae_is_proposed_only_where_the_sampler_has_a_value() -> None:
    with_value = diff(sampler(), TrainBatch).entry("advantage")
    assert with_value.conversion.entry["op"] == "gae"
    without = diff(sampler("value"), TrainBatch).entry("advantage")
    assert without.conversion.entry is None and "gae" not in without.conversion.ops


def test_optional_op_inputs_are_named_in_a_warning() -> None:
    r = diff(sampler(), PEERS / "trl_grpo.json")
    opt = warning(r, "optional_source")
    assert "advantages <- group_id" in opt.message
    assert "group_id" in opt.message.split("optional")[0]
    assert "ref_logprob" in opt.message


# -- ref_logprob: never to or from logprob ------------------------------------------------------------

REF_NAMES = ["ref_log_prob", "ref_per_token_logps", "base_action_log_probs", "ref_logps",
             "ref_logprobs", "ref_logprob"]
LOGP_NAMES = ["logprob", "old_log_probs", "action_log_probs", "old_per_token_logps",
              "sampling_per_token_logps", "rollout_log_probs"]


def token_trainer(name: str) -> dict:
    return {"type": "object", "x-gyre-batch-dims": ["B"], "required": ["responses", name],
            "properties": {"responses": {"type": "array", "items": {
                "type": "array", "items": {"type": "integer"}}},
                name: {"type": "array", "items": {"type": "array",
                                                  "items": {"type": "number"}}}}}


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(REF_NAMES), st.booleans())
def test_a_reference_logprob_is_never_fed_by_the_behaviour_logprob(name: str, tokens: bool
                                                                   ) -> None:
    """Without a ref_logprob in the sampler, a trainer's ref field is missing, whatever it is
    called and whatever the layout; no message suggests the logprob."""
    trainer = token_trainer(name) if tokens else {
        "type": "object", "required": [name],
        "properties": {name: {"type": "number"}}}
    r = diff(sampler("ref_logprob"), trainer)
    e = r.entry(name)
    assert e.tier == "missing" and e.sampler_fields == ()
    text = r.to_text()
    assert "did you mean" not in text
    assert "logprob" not in json.dumps(r.field_map()["fields"].get(name, {}))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(LOGP_NAMES))
def test_the_behaviour_logprob_is_never_fed_by_a_reference_logprob(name: str) -> None:
    r = diff(sampler("logprob"), token_trainer(name))
    e = r.entry(name)
    assert e.tier == "missing" and "ref_logprob" not in e.sampler_fields


def test_every_reference_synonym_resolves_away_from_logprob() -> None:
    for name in synonyms("ref_logprob"):
        r = diff(sampler(), token_trainer(name))
        assert r.entry(name).sampler_fields == ("ref_logprob",), name


# -- warnings --------------------------------------------------------------------------------------

def test_a_trainer_that_reads_no_logprob_says_what_is_lost() -> None:
    doc = peer("verl_actor_batch", drop=("old_log_probs", "rollout_log_probs",
                                         "token_level_rewards"))
    r = diff(sampler(), doc)
    w = warning(r, "logprob_unused")
    assert w.fields == ("logprob",)
    assert "recomputes" in w.message and "importance-sampling correction" in w.message
    assert ("logprob",) in [e.sampler_fields for e in r.tier("unused")]
    assert "logprob_unused" not in codes(diff(sampler(), PEERS / "verl_actor_batch.json"))


def test_group_split_names_the_group_relative_fields() -> None:
    r = diff(sampler(), PEERS / "verl_actor_batch.json")
    w = warning(r, "group_split")
    assert w.fields == ("advantages", "uid")
    assert "multiple of the group size" in w.message and "is in neither schema" in w.message
    assert "group_split" not in codes(diff(sampler("group_id", "value"),
                                            PEERS / "trl_grpo.json"))


def test_staleness_is_flagged_when_the_trainer_reads_no_policy_version() -> None:
    r = diff(sampler(), PEERS / "trl_grpo.json")
    w = warning(r, "staleness_unchecked")
    assert w.fields == ("policy_version",) and "--max-staleness K" in w.message
    doc = peer("trl_grpo")
    doc["properties"]["policy_version"] = {"type": "array", "items": {"type": "integer"}}
    assert "staleness_unchecked" not in codes(diff(sampler(), doc))


# -- recognising a token trainer ---------------------------------------------------------------------

def test_a_token_trainer_without_batch_dims_is_read_with_b_assumed() -> None:
    doc = peer("trl_grpo")
    del doc["x-gyre-batch-dims"]
    r = diff(sampler(), doc)
    assert r.layout.kind == "token" and "batch dim B assumed" in r.layout.text
    assert r.field_map()["fields"] == diff(sampler(), PEERS / "trl_grpo.json"
                                           ).field_map()["fields"]


def test_batches_of_episodes_and_steps_are_not_token_rows() -> None:
    assert diff(sampler(), TrainBatch).layout.kind == "batch"
    same = diff(sampler(), sampler())
    assert same.layout.kind == "step" and same.exit_code() == 0 and "rows" not in same.field_map()
    cartpole = diff(ROOT / "schemas" / "rollout_step.v1.json", PEERS / "verl_actor_batch.json")
    assert cartpole.layout.kind == "flat"  # no token ids in the sampler: not token rows


def test_named_dims_say_which_part_of_the_row_a_field_spans() -> None:
    ids = {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
    doc = {"type": "object", "x-gyre-batch-dims": ["B"], "required": ["tokens", "head"],
           "properties": {"tokens": {**ids, "x-gyre-shape": ["B", "L"]},
                          "head": {**ids, "x-gyre-shape": ["B", "P"]}}}
    r = diff(sampler(), doc)
    fields = r.field_map()["fields"]
    assert fields["tokens"]["op"] == "concat"
    assert fields["head"] == {"from": "prompt_ids"}


def test_a_generic_token_trainer_states_the_default_eps() -> None:
    doc = token_trainer("advantages")
    r = diff(sampler(), doc)
    assert r.field_map()["fields"]["advantages"] == {
        "op": "group_norm", "from": ["reward", "group_id"], "std": "unbiased", "eps": 1e-6,
        "then": [{"op": "per_token"}]}


def test_rename_reads_the_named_sampler_field_as_a_token_column() -> None:
    r = diff(sampler(), PEERS / "verl_actor_batch.json",
             renames={"old_log_probs": "ref_logprob"})
    assert r.field_map()["fields"]["old_log_probs"] == {"from": "ref_logprob"}
    assert "renamed by --rename" in r.entry("old_log_probs").reason


def test_token_rows_needs_a_token_sampler() -> None:
    from gyre_contract.schema._fieldtable import as_table
    assert token_rows(as_table(ROOT / "schemas" / "rollout_step.v1.json"),
                      as_table(PEERS / "verl_actor_batch.json")) is None
    found = token_rows(as_table(sampler()), as_table(PEERS / "verl_actor_batch.json"))
    assert found is not None and found[1].kind == "token"


# -- the trainer's own batch from token rows ----------------------------------------------------------

def trl_arrays(rows: int = 3, width: int = 4) -> dict:
    import numpy as np
    ids = np.arange(rows * width, dtype=np.int64).reshape(rows, width)
    return {"prompt_ids": ids, "prompt_mask": np.ones_like(ids), "completion_ids": ids,
            "completion_mask": np.ones_like(ids),
            "advantages": np.zeros(rows, dtype=np.float32)}


def test_token_rows_are_checked_as_they_are() -> None:
    from gyre_contract.trainer._trainerbatch import trainer_schema
    schema = trainer_schema(PEERS / "trl_grpo.json")
    out = schema.check(trl_arrays(), rows=TokenRows())
    assert out["advantages"].shape == (3,)


def test_token_rows_of_different_counts_are_refused() -> None:
    import numpy as np

    from gyre_contract.core._errors import ContractError
    from gyre_contract.trainer._trainerbatch import trainer_schema
    arrays = trl_arrays()
    arrays["advantages"] = np.zeros(2, dtype=np.float32)
    with pytest.raises(ContractError) as err:
        trainer_schema(PEERS / "trl_grpo.json").check(arrays, rows=TokenRows())
    assert "dim B is 2 here but 3 in the batch" in str(err.value)
    with pytest.raises(ContractError, match="one batch dim"):
        trainer_schema(PEERS / "torchrl_ppo.json", "B,T").check(arrays, rows=TokenRows())


def test_a_schema_inferred_from_llm_rollouts_gets_the_same_map(tmp_path) -> None:
    """`gyre-contract infer` on a GRPO file, then the diff: the per-token loss_mask (read as a
    mask by name) still joins the response mask; the map is the hand-checked one."""
    from gyre_contract.io._writer import write_steps
    from gyre_contract.schema._infer import infer_schema

    rows = []
    for k in range(2):
        for g in ("p0", "p1"):
            n = 2 + k + (g == "p1")
            rows.append({"observation": {"token_ids": [1] * (2 + k), "text": g},
                         "action": [7] * n, "logprob": [-0.5] * n, "ref_logprob": [-0.25] * n,
                         "loss_mask": [True] * n, "reward": float(k), "step": 0,
                         "episode_id": f"{g}{k}", "terminated": True, "truncated": False,
                         "policy_version": 0, "group_id": g})
    path = tmp_path / "grpo.jsonl"
    write_steps(path, rows)
    r = diff(infer_schema(path), PEERS / "trl_grpo.json")
    assert r.field_map()["fields"] == written("llm_trl_grpo_map.json")["fields"]
    assert r.entry("completion_mask").sampler_fields == ("action",)
    assert r.entry("tool_mask").sampler_fields == ("action", "loss_mask")


def test_trl_attends_with_its_completion_mask_so_it_holds_the_real_tokens(tmp_path) -> None:
    """TRL concatenates prompt_mask and completion_mask as the attention mask and drops tool
    output from the loss through tool_mask: completion_mask is never the loss mask. A TRL schema
    without tool_mask still gets the real tokens, and the reason says the loss mask is unread."""
    r = diff(sampler(), PEERS / "trl_grpo.json")
    mask = r.entry("completion_mask").conversion.entry
    assert mask == {"op": "pad", "from": "response_ids", "side": "right", "output": "mask",
                    "cast": "int64"}
    assert r.entry("tool_mask").conversion.entry == {"from": "response_mask", "cast": "int64"}
    doc = json.loads((PEERS / "trl_grpo.json").read_text())
    del doc["properties"]["tool_mask"]
    old = tmp_path / "trl_without_tool_mask.json"
    old.write_text(json.dumps(doc))
    r = diff(sampler(), old)
    assert r.entry("completion_mask").conversion.entry == mask
    assert "loss_mask is unused, so spliced tool output would be trained on" in \
        r.entry("completion_mask").reason


OPTIONAL = ("logprob", "ref_logprob", "group_id", "loss_mask", "token_reward", "value",
            "next_value", "entropy", "return", "next_observation")


@settings(max_examples=60, deadline=None)
@given(st.sets(st.sampled_from(OPTIONAL)),
       st.sampled_from(["verl_actor_batch", "trl_grpo", "openrlhf_experience"]))
def test_written_token_maps_are_runnable_by_construction(dropped, trainer) -> None:
    """Whatever optional fields the sampler leaves out: every entry reads fields the sampler
    has, every optional one it reads is named by optional_source, a group never comes from the
    episode, a reference log-prob never from the behaviour one (nor the reverse)."""
    doc = sampler(*sorted(dropped))
    r = diff(doc, PEERS / f"{trainer}.json")
    check(r)
    assert r.field_map()["rows"] == "step"
    required = set(doc["required"])
    optional_named = " ".join(w.message for w in r.warnings if w.code == "optional_source")
    for e in r.entries:
        if e.trainer_field is None or e.tier in ("missing", "optional_missing"):
            continue
        for name in e.sampler_fields:
            top = name.split(".")[0]
            assert top in doc["properties"], (e.trainer_field, name)
            written_entry = e.conversion is None or e.conversion.entry is not None
            if top not in required and written_entry:
                assert top in optional_named, (e.trainer_field, name)
        if e.role == "group_id":
            assert "episode_id" not in e.sampler_fields
        if e.role == "ref_logprob":
            assert "logprob" not in e.sampler_fields
        if e.role == "logprob":
            assert "ref_logprob" not in e.sampler_fields


def test_a_token_trainer_next_to_an_untokenised_sampler_is_told_why() -> None:
    r = diff(ROOT / "schemas" / "rollout_step.v1.json", PEERS / "verl_actor_batch.json")
    w = warning(r, "untokenised_sampler")
    assert w.fields == ("input_ids", "prompts", "responses") and "LLMStep" in w.message
    check(r)
    assert "untokenised_sampler" not in codes(diff(sampler(), PEERS / "verl_actor_batch.json"))
    assert "untokenised_sampler" not in codes(diff(ROOT / "schemas" / "rollout_step.v1.json",
                                                   PEERS / "tianshou_ppo.json", batch_dims="B"))


def test_a_row_field_of_no_known_role_reads_the_same_named_step_field() -> None:
    doc = token_trainer("advantages")
    doc["properties"]["group_id"] = {"type": "array", "items": {"type": "string"},
                                     "x-gyre-role": "other"}
    r = diff(sampler(), doc)
    assert r.field_map()["fields"]["group_id"] == {"from": "group_id"}


def test_a_batch_of_token_rows_of_our_own_reads_its_same_named_columns() -> None:
    """Our own token-row schema (fields named as the token columns): same names are read as
    they are; a per-step value is never spread as a per-token one."""
    ids = {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
    floats = {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}
    doc = {"type": "object", "x-gyre-batch-dims": ["B"],
           "required": ["response_ids", "logprob", "token_reward"],
           "properties": {"response_ids": {**ids, "x-gyre-role": "action"},
                          "logprob": floats, "token_reward": floats, "value": floats,
                          "return": floats}}
    r = diff(sampler(), doc)
    fields = r.field_map()["fields"]
    assert fields["token_reward"] == {"from": "token_reward"}
    assert fields["logprob"] == {"from": "logprob"}
    assert r.entry("value").tier == "optional_missing"
    assert "one value per step" in r.entry("value").reason
    assert fields["return"] == {"from": "return", "then": [{"op": "per_token"}]}


def test_one_logprob_per_row_is_the_sum_over_the_response_tokens() -> None:
    doc = token_trainer("advantages")
    doc["properties"]["sequence_logprob"] = {"type": "array", "items": {"type": "number"},
                                             "x-gyre-role": "logprob"}
    r = diff(sampler(), doc)
    assert r.field_map()["fields"]["sequence_logprob"] == {
        "from": "logprob", "then": [{"op": "sum", "axis": 1}]}
    scalar = sampler()
    scalar["properties"]["logprob"] = {"type": "number", "x-gyre-role": "logprob"}
    assert diff(scalar, doc).field_map()["fields"]["sequence_logprob"] == {"from": "logprob"}


# -- fixed widths: pad_to from the trainer's fixed token dims -------------------------------------

def fixed(doc: dict, widths: dict[str, int | None]) -> dict:
    """`doc` with each named field's token dim fixed at the given width (None: left open)."""
    doc = copy.deepcopy(doc)
    for name, width in widths.items():
        inner = doc["properties"][name]["items"]
        inner.pop("minItems", None)
        inner.pop("maxItems", None)
        if width is not None:
            inner["minItems"] = inner["maxItems"] = width
    return doc


def test_a_trainer_with_fixed_token_dims_gets_a_pad_to_map() -> None:
    r = diff(sampler(), PEERS / "verl_fixed_width.json")
    fmap = r.field_map()
    assert (fmap["rows"], fmap["layout"], fmap["pad_to"]) == ("step", "padded", {"P": 16, "R": 32})
    assert "fixed widths P=16, R=32 (pad_to)" in r.layout.text
    assert FieldMap.from_dict(fmap).layout.pad_to == {"P": 16, "R": 32}
    assert "map_incomplete" not in codes(r)
    assert "pad_to" not in diff(sampler(), PEERS / "verl_actor_batch.json").field_map()
    check(r)


RESPONSE_FIELDS = ("responses", "response_mask", "old_log_probs", "rollout_log_probs",
                   "ref_log_prob", "token_level_rewards", "advantages")


def test_the_sequence_width_gives_the_width_the_schema_leaves_open() -> None:
    doc = fixed(peer("verl_fixed_width"), {"prompts": None})  # P from L - R
    assert diff(sampler(), doc).field_map()["pad_to"] == {"P": 16, "R": 32}
    doc = fixed(peer("verl_fixed_width"), dict.fromkeys(RESPONSE_FIELDS))  # R from L - P
    assert diff(sampler(), doc).field_map()["pad_to"] == {"P": 16, "R": 32}
    doc = fixed(peer("verl_actor_batch"), {"responses": 8})  # one width alone
    assert diff(sampler(), doc).field_map()["pad_to"] == {"R": 8}


def test_widths_the_diff_cannot_settle_are_left_to_the_map_with_a_warning() -> None:
    unsplit = fixed(peer("verl_fixed_width"), {"prompts": None, **dict.fromkeys(RESPONSE_FIELDS)})
    r = diff(sampler(), unsplit)
    assert "pad_to" not in r.field_map()
    assert "fixes the whole sequence at 48 tokens, but not how it splits" in \
        warning(r, "map_incomplete").message
    clash = fixed(peer("verl_fixed_width"), {"responses": 30})
    r = diff(sampler(), clash)
    assert "pad_to" not in r.field_map()
    assert "response [30, 32]" in warning(r, "map_incomplete").message
    check(r)


# -- packed trainers: "layout": "packed" with a token budget --------------------------------------

def test_a_packed_trainer_gets_a_packed_map() -> None:
    """prime-rl's micro-batch: position_ids and per-token advantages, no prompt/response split."""
    r = diff(sampler(), PEERS / "prime_rl_micro_batch.json")
    fmap = r.field_map()
    assert {k: fmap[k] for k in ("rows", "batch_dims", "layout", "token_budget")} == {
        "rows": "step", "batch_dims": ["M"], "layout": "packed", "token_budget": 64}
    assert fmap["fields"] == {
        "input_ids": {"from": "input_ids"}, "position_ids": {"from": "position_ids"},
        "advantages": {"op": "group_norm", "from": ["reward", "group_id"], "std": "unbiased",
                       "eps": 1e-6, "then": [{"op": "per_token"}]},
        "inference_logprobs": {"from": "logprob"}, "loss_mask": {"from": "response_mask"}}
    assert r.layout.text.startswith("packed token rows [M, S]")
    assert "recomputed_logprob" not in codes(r) and "map_incomplete" not in codes(r)
    assert type(FieldMap.from_dict(fmap).layout).__name__ == "PackedRows"
    check(r)


def packed_schema(**keys: object) -> dict:
    """A packed trainer that says so (`x-gyre-layout`), its token dims open."""
    token = {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
    number = {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}
    flag = {"type": "array", "items": {"type": "array", "items": {"type": "boolean"}}}
    return {"title": "packed trainer", "type": "object", **keys, "properties": {
        "tokens": {**token, "x-gyre-role": "action"}, "attention_mask": flag,
        "sample_index": token, "advantages": number, "old_log_probs": number,
        "ref_log_prob": number, "action_mask": flag}}


def test_a_schema_that_says_it_is_packed_gets_its_budget() -> None:
    r = diff(sampler(), packed_schema(**{"x-gyre-layout": "packed",
                                         "x-gyre-token-budget": 4096}))
    fmap = r.field_map()
    assert (fmap["layout"], fmap["token_budget"], fmap["batch_dims"]) == ("packed", 4096, ["M"])
    fields = fmap["fields"]
    assert fields["tokens"] == {"from": "input_ids"}
    assert fields["attention_mask"] == {"from": "pad_mask"}
    assert fields["sample_index"] == {"from": "sample_index"}
    assert fields["action_mask"] == {"from": "response_mask"}
    assert fields["ref_log_prob"] == {"from": "ref_logprob"}
    assert FieldMap.from_dict(fmap).layout.token_budget == 4096
    check(r)


def test_a_packed_trainer_without_a_budget_is_told_to_write_one() -> None:
    r = diff(sampler(), packed_schema(**{"x-gyre-layout": "packed"}))
    assert "token_budget" not in r.field_map()
    assert "add \"token_budget\": S to the map" in warning(r, "map_incomplete").message


def test_what_a_schema_says_of_its_layout_wins() -> None:
    doc = peer("prime_rl_micro_batch")
    assert diff(sampler(), doc).field_map()["layout"] == "packed"
    said = diff(sampler(), {**doc, "x-gyre-layout": "padded", "x-gyre-batch-dims": ["B"]})
    assert said.field_map()["layout"] == "padded" and "token_budget" not in said.field_map()
    for name in ("verl_actor_batch", "trl_grpo", "openrlhf_experience"):  # a split: padded
        assert diff(sampler(), PEERS / f"{name}.json").field_map()["layout"] == "padded"
    with pytest.raises(SchemaError, match='x-gyre-layout must be "padded" or "packed"'):
        diff(sampler(), {**doc, "x-gyre-layout": "ragged"})
    with pytest.raises(SchemaError, match="x-gyre-token-budget must be a whole number > 0"):
        diff(sampler(), {**doc, "x-gyre-token-budget": 0})
