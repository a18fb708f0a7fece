"""FieldMap: loading and checking map files, the op registry, apply, to_train_batch."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from gyre_contract.core._errors import ContractError, FieldMapError, InputError, MissingFieldError
from gyre_contract.core._models import TrainBatch
from gyre_contract.io._episodes import Episode
from gyre_contract.trainer._collation import collate
from gyre_contract.trainer._fieldmap import FieldMap, cast_array, known_ops, register_op, unregister_op
from gyre_contract.trainer._layouts import EpisodeRows

MAPS = Path(__file__).parents[1] / "data" / "maps"
EXAMPLE = Path(__file__).parents[2] / "examples" / "cartpole_map.json"
KNOWN = ("all, and_not, any, cast, concat, discounted_return, episode_start, gae, group_norm, kl, "
         "kl_reward, mask, masked_sum, next, not, pad, per_step, per_token, rename, reshape, rloo, shift, "
         "squeeze, sum, transpose, unsqueeze")
HINT = "your own op: register_op in Python, or on the command line --ops MODULE_OR_FILE.py"
STEP_OPS = ("cast, episode_start, not, per_step, per_token, reshape, shift, squeeze, sum, "
            "transpose, unsqueeze")
GAE_FROM = ["reward", "value", "terminated", "truncated", "next_value"]


def episode(eid: str, n: int, *, end: str = "terminated", next_value: float | None = None,
            version: int = 0) -> Episode:
    last = np.zeros(n, bool)
    last[-1] = True
    nv = np.full(n, np.nan, np.float32)
    if next_value is not None:
        nv[-1] = next_value
    return Episode(eid, {
        "observation": np.arange(n * 4, dtype=np.float32).reshape(n, 4),
        "action": np.arange(n, dtype=np.int64) % 2,
        "logprob": np.full(n, -0.5, np.float32),
        "reward": np.ones(n, np.float32),
        "value": np.full(n, 0.5, np.float32),
        "next_value": nv,
        "step": np.arange(n, dtype=np.int64),
        "episode_id": np.array([eid] * n),
        "terminated": last & (end == "terminated"),
        "truncated": last & (end == "truncated"),
        "policy_version": np.full(n, version, np.int64),
    })


def one(spec: dict, target: str = "out") -> FieldMap:
    return FieldMap.from_dict({"gyre_field_map": 1, "fields": {target: spec}})


@pytest.fixture
def cols() -> dict:
    return collate([episode("a", 3), episode("b", 2, end="truncated", next_value=2.0)])


# -- loading -------------------------------------------------------------------------------

def test_good_map_loads_and_round_trips():
    fmap = FieldMap.load(MAPS / "good_minimal.json")
    assert list(fmap.fields) == ["obs", "action", "done", "advantage", "mask"]
    data = json.loads((MAPS / "good_minimal.json").read_text())
    assert fmap.to_dict() == data
    assert fmap.sources() == ["observation", "action", "terminated", "truncated", "reward",
                              "value", "next_value", "mask"]


@pytest.mark.parametrize(("name", "message"), [
    ("bad_unknown_op.json",
     f'fields.advantage: unknown op "gea" (did you mean "gae"?); known ops: {KNOWN}; {HINT}'),
    ("bad_wrong_arg.json",
     '2 problems: fields.advantage: op "gae" does not take lambda (did you mean "lam"?); '
     "allowed keys: cast, comment, from, gamma, lam, op, output, then, truncation; "
     'fields.advantage: op "gae" needs argument "lam"'),
    ("bad_json.json",
     "not JSON: Expecting property name enclosed in double quotes at line 1 column 65"),
    ("bad_version.json", "unsupported field-map version 2; this gyre-contract reads version 1"),
    ("bad_duplicate_key.json",
     'not JSON: duplicate key "obs" (JSON readers keep only one)'),
    ("bad_import.json",
     f'2 problems: fields.obs: unknown op "__import__"; known ops: {KNOWN}; {HINT}; '
     f'fields.reward: unknown op "eval"; known ops: {KNOWN}; {HINT}'),
])
def test_bad_map_files_say_what_is_wrong(name, message):
    with pytest.raises(FieldMapError) as err:
        FieldMap.load(MAPS / name)
    assert str(err.value) == f"{MAPS / name}: {message}"


def test_unreadable_map_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read field map"):
        FieldMap.load(tmp_path / "nope.json")


@pytest.mark.parametrize(("data", "message"), [
    ([], "field map: expected a JSON object with keys gyre_field_map and fields, got a list"),
    ({"fields": {"a": {"from": "b"}}},
     'field map: not a field map: no "gyre_field_map" key (expected "gyre_field_map": 1)'),
    ({"gyre_field_map": True, "fields": {"a": {"from": "b"}}},
     "field map: unsupported field-map version true; this gyre-contract reads version 1"),
    ({"gyre_field_map": 1, "fields": {}},
     'field map: "fields" must be a non-empty object mapping each trainer field to its spec, '
     "got an object"),
    ({"gyre_field_map": 1, "fields": {"a": "b"}, "extra": 1},
     "field map: 2 problems: unknown top-level keys ['extra']; allowed: gyre_field_map, fields, "
     'rows, batch_dims, layout, pad_to, token_budget, comment; fields.a: expected an object '
     'such as {"from": "..."}, got the string "b"'),
    ({"gyre_field_map": 1, "fields": {"a": {"op": "any", "from": "x"}}},
     'field map: fields.a: op "any" needs "from" to be a list of field names (a list of field '
     'names), got "x"'),
    ({"gyre_field_map": 1, "fields": {"a": {"op": "gae", "from": ["r"], "gamma": 1.5,
                                            "lam": 0.9}}},
     'field map: 2 problems: fields.a: op "gae" needs 5 sources in "from" (in order: reward, '
     'value, terminated, truncated, next_value), got 1; fields.a: "gamma" must be a number in '
     "[0, 1], got 1.5"),
    ({"gyre_field_map": 1, "fields": {"a": {"from": "x", "cast": "float128"}}},
     "field map: fields.a: cast must be one of bool, int8, int16, int32, int64, uint8, uint16, "
     'uint32, uint64, float16, float32, float64, string, got "float128"'),
    ({"gyre_field_map": 1, "fields": {"a": {"op": "shift", "from": "x", "by": 1}}},
     'field map: fields.a: op "shift" needs argument "fill"'),
    ({"gyre_field_map": 1, "fields": {"a": {"op": "mask", "from": ["m", "n"]}}},
     'field map: fields.a: op "mask" takes at most one source name in "from"'),
    ({"gyre_field_map": 1, "fields": {"a": {"op": "rename"}}},
     'field map: fields.a: op "rename" needs "from" (one field name)'),
])
def test_bad_map_data_messages(data, message):
    with pytest.raises(FieldMapError) as err:
        FieldMap.from_dict(data)
    assert str(err.value) == message


@pytest.mark.parametrize(("top", "message"), [
    ({"batch_dims": "B,T"}, '"batch_dims" must be a list of dim names such as ["B", "T"], '
     '["T", "B"], ["M"], ["T*N"] or ["B"], got "B,T"'),
    ({"batch_dims": ["B", "T,N"]}, '"batch_dims" must be a list of dim names'),
    ({"batch_dims": []}, '"batch_dims" must be a list of dim names'),
    ({"layout": "packed"}, '"layout" of a map with "rows": "episode" must be one of "batch", '
     '"time_major", "flat", got "packed"'),
    ({"batch_dims": ["T", "B"], "layout": "batch"},
     '"layout" "batch" does not fit "batch_dims" [T, B], which is the "time_major" layout'),
    ({"rows": "step", "batch_dims": ["B", "T"]},
     '"batch_dims" of a map with "rows": "step" is one dim (token rows [B, ...]), got [B, T]'),
    ({"rows": "step", "layout": "flat"}, '"layout" of a map with "rows": "step" must be one of '
     '"padded", got "flat"'),
])
def test_bad_recorded_dims_and_layout(top, message):
    with pytest.raises(FieldMapError, match=re.escape(message)):
        FieldMap.from_dict({"gyre_field_map": 1, "fields": {"a": {"from": "b"}}, **top})


def test_recorded_dims_and_layout_round_trip():
    data = {"gyre_field_map": 1, "batch_dims": ["T", "B"], "layout": "time_major",
            "fields": {"a": {"from": "b"}}}
    fmap = FieldMap.from_dict(data)
    assert fmap.layout == EpisodeRows(batch_dims=("T", "B"), name="time_major")
    assert (fmap.layout.batch_dims, fmap.layout.name) == (("T", "B"), "time_major")
    assert fmap.to_dict() == data
    plain = FieldMap.from_dict({"gyre_field_map": 1, "fields": {"a": {"from": "b"}}})
    assert plain.layout == EpisodeRows() and "batch_dims" not in plain.to_dict()


# -- apply ---------------------------------------------------------------------------------

def test_missing_source_is_missing_field_error_with_exact_message(cols):
    fmap = one({"from": "rewards"})
    with pytest.raises(MissingFieldError) as err:
        fmap.apply(cols)
    assert isinstance(err.value, KeyError) and isinstance(err.value, ContractError)
    assert str(err.value) == (
        "missing sample field: rewards, have [action, episode_id, logprob, mask, next_value, "
        "observation, policy_version, reward, step, terminated, truncated, value]")


def test_only_named_targets_reach_the_batch(cols):
    out = FieldMap.from_dict({"gyre_field_map": 1, "fields": {
        "obs": {"from": "observation"}, "m": {"op": "mask"}}}).apply(cols)
    assert sorted(out) == ["m", "obs"]
    assert out["obs"] is cols["observation"]


def test_boolean_ops(cols):
    fmap = FieldMap.from_dict({"gyre_field_map": 1, "fields": {
        "done": {"op": "any", "from": ["terminated", "truncated"]},
        "both": {"op": "all", "from": ["terminated", "truncated"]},
        "alive": {"op": "not", "from": "terminated"}}})
    out = fmap.apply(cols)
    np.testing.assert_array_equal(out["done"], [[0, 0, 1], [0, 1, 0]])
    assert not out["both"].any()
    np.testing.assert_array_equal(out["alive"], ~cols["terminated"])
    with pytest.raises(ContractError, match="op 'any' needs bools"):
        one({"op": "any", "from": ["terminated", "reward"]}).apply(cols)


def test_cast_is_lossless_or_refused(cols):
    out = one({"from": "action", "cast": "float32"}).apply(cols)["out"]
    assert out.dtype == np.float32
    halves = {**cols, "x": np.array([[0.5]], np.float32)}
    with pytest.raises(ContractError) as err:
        one({"op": "cast", "from": "x", "dtype": "int64"}).apply(halves)
    assert str(err.value) == ("cast: cast from float32 to int64 would lose information: values "
                              "with a fractional part: expected values that int64 holds exactly, "
                              "got float32[1, 1]")
    assert cast_array(np.array([1.0, 2.0]), "int64").dtype == np.int64
    with pytest.raises(ContractError, match="values out of range for uint8"):
        cast_array(np.array([300]), "uint8")
    with pytest.raises(ContractError, match="values other than 0 and 1"):
        cast_array(np.array([2]), "bool")
    with pytest.raises(ContractError, match="integers too large to be exact in float32"):
        cast_array(np.array([2**25 + 1]), "float32")


def test_layout_ops(cols):
    obs = cols["observation"]  # [2, 3, 4]
    fmap = FieldMap.from_dict({"gyre_field_map": 1, "fields": {
        "t": {"op": "transpose", "from": "observation", "axes": [0, 1, 2]},
        "r": {"op": "reshape", "from": "observation", "shape": ["B", "T", 2, 2]},
        "u": {"op": "unsqueeze", "from": "reward", "axis": -1},
        "s": {"op": "squeeze", "from": "x", "axis": 2}}})
    out = fmap.apply({**cols, "x": obs[:, :, :1]})
    assert out["r"].shape == (2, 3, 2, 2) and out["u"].shape == (2, 3, 1)
    assert out["s"].shape == (2, 3)
    with pytest.raises(ContractError, match=r"squeeze: cannot squeeze: expected axis 2 of size 1"):
        one({"op": "squeeze", "from": "observation", "axis": 2}).apply(cols)
    with pytest.raises(ContractError, match=r"bad axes: expected a permutation of 0\.\.2"):
        one({"op": "transpose", "from": "observation", "axes": [1, 0]}).apply(cols)


def test_shift_and_episode_start(cols):
    out = FieldMap.from_dict({"gyre_field_map": 1, "fields": {
        "prev_done": {"op": "shift", "from": "terminated", "by": 1, "fill": True},
        "next_reward": {"op": "shift", "from": "step", "by": -1, "fill": -1},
        "start": {"op": "episode_start", "from": "step"}}}).apply(cols)
    np.testing.assert_array_equal(out["prev_done"], [[1, 0, 0], [1, 0, 0]])
    np.testing.assert_array_equal(out["next_reward"], [[1, 2, -1], [1, -1, 0]])
    np.testing.assert_array_equal(out["start"], [[1, 0, 0], [1, 0, 0]])


def test_gae_and_returns_through_the_map(cols):
    fmap = FieldMap.from_dict({"gyre_field_map": 1, "fields": {
        "adv": {"op": "gae", "from": GAE_FROM, "gamma": 1.0, "lam": 1.0},
        "ret": {"op": "gae", "from": GAE_FROM, "gamma": 1.0, "lam": 1.0, "output": "return"},
        "g": {"op": "discounted_return", "from": ["reward", "terminated", "truncated",
                                                  "next_value"], "gamma": 1.0}}})
    out = fmap.apply(cols)
    # row a: rewards 1,1,1 terminated, V=.5 -> G = 3,2,1; row b: 1,1 + bootstrap 2 -> 4,3
    np.testing.assert_allclose(out["g"], [[3, 2, 1], [4, 3, 0]])
    np.testing.assert_allclose(out["ret"], out["g"])
    np.testing.assert_allclose(out["adv"], [[2.5, 1.5, 0.5], [3.5, 2.5, 0]])


def test_gae_without_next_value_names_the_episode_unless_terminal():
    cols = collate([episode("e7", 2, end="truncated")])
    spec = {"op": "gae", "from": GAE_FROM, "gamma": 1.0, "lam": 1.0}
    with pytest.raises(ContractError, match=re.escape(
            "next_value[0]: row 0 (episode 'e7') ends truncated with no bootstrap value")):
        one(spec).apply(cols)
    out = one({**spec, "truncation": "terminal"}).apply(cols)
    np.testing.assert_allclose(out["out"], [[1.5, 0.5]])


def test_group_source_gives_a_dict_of_modalities_and_casts_each():
    ep = episode("a", 2)
    ep.columns["observation"] = {"image": np.zeros((2, 2), np.uint8),
                                 "pos": np.zeros((2, 3), np.float64)}
    cols = collate([ep])
    out = one({"from": "observation", "cast": "float32"}).apply(cols)["out"]
    assert sorted(out) == ["image", "pos"] and out["image"].dtype == np.float32
    with pytest.raises(ContractError, match="op 'any' cannot take a group of modalities"):
        one({"op": "any", "from": ["observation", "terminated"]}).apply(cols)


def test_register_op_adds_a_checked_custom_op(cols):
    def scale(inputs, columns, *, by):
        return inputs[0] * by

    register_op("scale", scale, args=["by"], required=["by"])
    try:
        assert "scale" in known_ops()
        out = one({"op": "scale", "from": "reward", "by": 3}).apply(cols)["out"]
        np.testing.assert_allclose(out[0], [3, 3, 3])
        with pytest.raises(FieldMapError, match='op "scale" needs argument "by"'):
            one({"op": "scale", "from": "reward"})
    finally:
        unregister_op("scale")
    with pytest.raises(FieldMapError, match='unknown op "scale"'):
        one({"op": "scale", "from": "reward", "by": 3})
    with pytest.raises(ValueError, match="op 'gae' is built in and cannot be replaced"):
        register_op("gae", scale)


# -- to_train_batch ------------------------------------------------------------------------

def test_example_map_builds_a_validated_train_batch():
    fmap = FieldMap.load(EXAMPLE)
    eps = [episode("a", 5), episode("b", 7, end="truncated", next_value=1.0, version=1)]
    batch = fmap.to_train_batch(eps, max_len=4)
    assert isinstance(batch, TrainBatch)
    assert batch.obs.shape == (4, 4, 4) and batch.advantage.dtype == np.float32
    assert batch.episode_id.tolist() == ["a", "a", "b", "b"]
    np.testing.assert_array_equal(batch.policy_version, [0, 0, 1, 1])
    np.testing.assert_array_equal(batch.done, batch.terminated | batch.truncated)


def test_to_train_batch_checks_staleness():
    fmap = FieldMap.load(EXAMPLE)
    eps = [episode("old", 2, version=1), episode("new", 2, version=5)]
    with pytest.raises(ContractError, match=re.escape("policy_version[0]: stale policy version")):
        fmap.to_train_batch(eps, current_version=5, max_staleness=2)
    fmap.to_train_batch(eps, current_version=5, max_staleness=4)


def test_to_train_batch_missing_source_names_it():
    fmap = FieldMap.load(EXAMPLE)
    ep = episode("a", 2)
    del ep.columns["logprob"]
    with pytest.raises(MissingFieldError, match=re.escape("missing sample field: logprob, have [")):
        fmap.to_train_batch([ep])


def test_llm_rows_sum_token_logprobs_under_their_own_mask():
    cols = {"logprob": [np.array([-0.5, -0.25], np.float32)], "action": [np.array([7, 8])],
            "reward": np.ones(1, np.float32), "episode_id": np.array(["p/0"])}
    other = {"logprob": [np.array([-1.0], np.float32)], "action": [np.array([9])],
             "reward": np.ones(1, np.float32), "episode_id": np.array(["p/1"])}
    fmap = FieldMap.from_dict({"gyre_field_map": 1, "fields": {
        "logprob": {"op": "masked_sum", "from": ["logprob", "logprob_mask"], "axis": -1},
        "tokens": {"from": "action"},
        "token_mask": {"op": "mask", "from": "action_mask"}}})
    out = fmap.build([cols, other])
    np.testing.assert_allclose(out["logprob"], [[-0.75], [-1.0]])
    assert out["logprob"].dtype == np.float32
    np.testing.assert_array_equal(out["token_mask"], [[[1, 1]], [[1, 0]]])
    with pytest.raises(ContractError, match=r"masked_sum: bad axis: expected a per-step axis"):
        one({"op": "masked_sum", "from": ["logprob", "logprob_mask"], "axis": 1}).build([cols])
    summed = one({"op": "sum", "from": "logprob", "axis": 2}).build([cols])["out"]
    np.testing.assert_allclose(summed, [[-0.75]])


# -- then chains and and_not ---------------------------------------------------------------

UNSQUEEZE = {"op": "unsqueeze", "axis": -1}


def test_then_runs_each_step_after_the_op_and_before_the_cast(cols, tmp_path):
    data = {"gyre_field_map": 1, "fields": {
        "next.done": {"op": "any", "from": ["terminated", "truncated"], "then": [UNSQUEEZE]},
        "dones": {"op": "any", "from": ["terminated", "truncated"],
                  "then": [UNSQUEEZE, {"op": "transpose", "axes": [1, 0, 2]},
                           {"op": "squeeze", "axis": 2}], "cast": "float32"},
        "adv": {"op": "gae", "from": GAE_FROM, "gamma": 1.0, "lam": 1.0,
                "then": [{"op": "cast", "dtype": "float64"}, UNSQUEEZE]}}}
    path = tmp_path / "map.json"
    path.write_text(json.dumps(data))
    fmap = FieldMap.load(path)
    assert fmap.to_dict() == data
    out = fmap.apply(cols)
    done = cols["terminated"] | cols["truncated"]
    assert out["next.done"].dtype == np.bool_ and out["next.done"].shape == (2, 3, 1)
    np.testing.assert_array_equal(out["next.done"][..., 0], done)
    assert out["dones"].dtype == np.float32
    np.testing.assert_array_equal(out["dones"], done.T)
    assert out["adv"].dtype == np.float64
    np.testing.assert_allclose(out["adv"][..., 0], [[2.5, 1.5, 0.5], [3.5, 2.5, 0]])


def test_a_step_that_needs_the_mask_makes_the_map_read_it():
    fmap = one({"op": "not", "from": "terminated",
                "then": [{"op": "shift", "by": 1, "fill": False}]})
    assert fmap.sources() == ["terminated", "mask"]


def test_then_applies_to_each_modality_of_a_group():
    ep = episode("a", 2)
    ep.columns["observation"] = {"image": np.zeros((2, 2), np.uint8),
                                 "pos": np.zeros((2, 3), np.float64)}
    out = one({"from": "observation", "then": [UNSQUEEZE]}).build([ep])["out"]
    assert out["image"].shape == (1, 2, 2, 1) and out["pos"].shape == (1, 2, 3, 1)


def test_a_failing_step_names_its_op(cols):
    with pytest.raises(ContractError) as err:
        one({"from": "reward", "then": [{"op": "squeeze", "axis": -1}]}).apply(cols)
    assert str(err.value) == ("squeeze: cannot squeeze: expected axis -1 of size 1, "
                              "got float32[2, 3]")


def test_per_step_repeats_a_row_column_on_real_steps(cols):
    out = one({"op": "per_step", "from": "episode_id"}).apply(cols)["out"]
    assert out.tolist() == [["a", "a", "a"], ["b", "b", ""]]
    with pytest.raises(ContractError) as err:
        one({"op": "per_step", "from": "reward"}).apply({**cols, "reward": np.ones(5)})
    assert str(err.value) == ("per_step: cannot repeat on each step: expected a per-row column "
                              "[2, ...], got float64[5]")


def test_and_not_keeps_a_flag_unless_the_other_is_set():
    cols = {"is_last": np.array([[0, 0, 1], [0, 1, 1]], bool),
            "is_terminal": np.array([[0, 0, 1], [0, 0, 1]], bool)}
    out = one({"op": "and_not", "from": ["is_last", "is_terminal"]}).apply(cols)["out"]
    np.testing.assert_array_equal(out, [[False, False, False], [False, True, False]])
    with pytest.raises(ContractError, match="op 'and_not' needs bools"):
        one({"op": "and_not", "from": ["is_last", "reward"]}).apply(
            {**cols, "reward": np.ones((2, 3), np.float32)})


@pytest.mark.parametrize(("then", "message"), [
    ([{"op": "unsqeeze", "axis": -1}],
     f'fields.out.then[0]: unknown op "unsqeeze" (did you mean "unsqueeze"?); ops a step may '
     f"use: {STEP_OPS}"),
    ([UNSQUEEZE, {"op": "__import__", "name": "os"}],
     f'fields.out.then[1]: unknown op "__import__"; ops a step may use: {STEP_OPS}'),
    ([{"axis": -1}], f'fields.out.then[0]: a step needs "op"; ops a step may use: {STEP_OPS}'),
    ([{"op": "any"}],
     'fields.out.then[0]: op "any" does not take exactly one input; a step\'s only input is the '
     f"result so far; ops a step may use: {STEP_OPS}"),
    ([{"op": "gae", "gamma": 0.9, "lam": 0.9}],
     'fields.out.then[0]: op "gae" does not take exactly one input; a step\'s only input is '
     f"the result so far; ops a step may use: {STEP_OPS}"),
    ([{"op": "mask"}],
     'fields.out.then[0]: op "mask" does not take exactly one input; a step\'s only input is '
     f"the result so far; ops a step may use: {STEP_OPS}"),
    ([{"op": "rename"}],
     'fields.out.then[0]: op "rename" does nothing in a chain; a step\'s only input is the '
     f"result so far; ops a step may use: {STEP_OPS}"),
    ([{"op": "unsqueeze", "from": "reward", "axis": -1}],
     'fields.out.then[0]: a step takes no "from": its input is the result so far'),
    ([{"op": "cast", "dtype": "float128"}],
     'fields.out.then[0]: "dtype" must be one of bool, int8, int16, int32, int64, uint8, '
     'uint16, uint32, uint64, float16, float32, float64, string, got "float128"'),
    ([{"op": "squeeze", "axes": -1}],
     '2 problems: fields.out.then[0]: op "squeeze" does not take axes (did you mean "axis"?); '
     'allowed keys: axis, op; fields.out.then[0]: op "squeeze" needs argument "axis"'),
    ([{"op": "transpose", "axes": [1, 0], "then": [UNSQUEEZE]}],
     'fields.out.then[0]: op "transpose" does not take then; allowed keys: axes, op'),
    ([UNSQUEEZE] * 9, 'fields.out: "then" must hold 1 to 8 steps, got 9'),
    ([], 'fields.out: "then" must hold 1 to 8 steps, got 0'),
    ({"op": "unsqueeze", "axis": -1},
     'fields.out: "then" must be a list of steps such as [{"op": "unsqueeze", "axis": -1}], '
     "got an object"),
    (["unsqueeze"],
     'fields.out.then[0]: expected an object such as {"op": "unsqueeze", "axis": -1}, '
     'got the string "unsqueeze"'),
])
def test_bad_then_chains_say_what_is_wrong(then, message):
    with pytest.raises(FieldMapError) as err:
        one({"op": "any", "from": ["terminated", "truncated"], "then": then})
    assert str(err.value) == f"field map: {message}"


def test_a_chain_of_eight_steps_is_accepted(cols):
    steps = [UNSQUEEZE, {"op": "squeeze", "axis": -1}] * 4
    out = one({"from": "reward", "then": steps}).apply(cols)["out"]
    np.testing.assert_array_equal(out, cols["reward"])


def test_a_custom_one_input_op_may_be_a_step(cols):
    def double(inputs, columns):
        return inputs[0] * 2

    register_op("double", double)
    try:
        fmap = one({"from": "reward", "then": [{"op": "double"}, UNSQUEEZE]})
        assert fmap.apply(cols)["out"].shape == (2, 3, 1)
    finally:
        unregister_op("double")
    with pytest.raises(FieldMapError, match=r"fields\.out: op 'double' is no longer registered"):
        fmap.apply(cols)
