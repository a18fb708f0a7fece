"""The token layouts of a map of token rows (`"rows": "step"`): padded to fixed widths
(`pad_to`) and packed into micro-batch rows of a token budget (`"layout": "packed"`). A row
that does not fit is refused, named with both lengths: a row is never cut."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from fastpaths import fast_paths, same_arrays
from hypothesis import given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import ContractError, FieldMapError
from gyre_contract.io._writer import write_steps
from gyre_contract.pinned import LLMStep
from gyre_contract.trainer._fieldmap import FieldMap
from gyre_contract.trainer._packing import plan_packing
from gyre_contract.trainer._tokenops import ResponseValues
from gyre_contract.trainer._tokens import collate_tokens

ROW_FIELDS = ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "response_length",
              "logprob", "reward", "episode_id", "policy_version", "step")


def step(episode: str, prompt: list[int], action: list[int], *, reward: float = 1.0,
         group: str = "g", t: int = 0, done: bool = True, **extra: Any) -> dict[str, Any]:
    return {"observation": {"token_ids": prompt}, "action": action,
            "logprob": [-0.25 - 0.125 * i for i in range(len(action))], "reward": reward,
            "step": t, "episode_id": episode, "terminated": done, "truncated": False,
            "policy_version": 1, "group_id": group, **extra}


def records() -> list[dict[str, Any]]:
    """Four single-turn completions of two prompts, of different lengths."""
    return [step("a", [5, 6, 7], [50, 51], reward=1.0, group="p"),
            step("b", [5, 6, 7], [52, 53, 54, 55], reward=0.0, group="p"),
            step("c", [8], [56], reward=0.5, group="q"),
            step("d", [8], [57, 58, 59], reward=0.0, group="q")]


def padded_map(**keys: Any) -> FieldMap:
    return FieldMap.from_dict({"gyre_field_map": 1, "rows": "step", **keys,
                               "fields": {**{k: {"from": k} for k in ROW_FIELDS},
                                          "advantage": {"from": "reward"}}})


# -- padded to fixed widths ------------------------------------------------------------------------

def test_pad_to_fixes_the_widths_and_pads_as_the_longest_row_would():
    free = padded_map().batch(records())
    fixed = padded_map(pad_to={"P": 6, "R": 5}).batch(records())
    assert fixed["prompt_ids"].shape == (4, 6) and fixed["response_ids"].shape == (4, 5)
    assert fixed["prompt_ids"][0].tolist() == [0, 0, 0, 5, 6, 7]           # left-padded
    assert fixed["response_ids"][1].tolist() == [52, 53, 54, 55, 0]        # right-padded
    np.testing.assert_array_equal(fixed["prompt_ids"][:, -3:], free["prompt_ids"])
    np.testing.assert_array_equal(fixed["response_ids"][:, :4], free["response_ids"])
    np.testing.assert_array_equal(fixed["logprob"][:, :4], free["logprob"])
    assert not fixed["response_mask"][:, 4].any() and not fixed["prompt_mask"][:, :3].any()
    only_r = padded_map(pad_to={"R": 7}).batch(records())  # either width alone
    assert only_r["prompt_ids"].shape == (4, 3) and only_r["response_ids"].shape == (4, 7)


def test_a_row_longer_than_its_width_is_refused_with_both_lengths():
    with pytest.raises(ContractError) as err:
        padded_map(pad_to={"P": 2, "R": 3}).batch(records())
    problems = {(p.path, p.expected, p.got) for p in err.value.problems}
    assert problems == {
        ("steps[0].observation.token_ids", "at most 2 tokens (pad_to P = 2)", "3 tokens"),
        ("steps[1].observation.token_ids", "at most 2 tokens (pad_to P = 2)", "3 tokens"),
        ("steps[1].action", "at most 3 tokens (pad_to R = 3)", "4 tokens")}
    assert "episode 'b' step 0: a response of 4 tokens does not fit pad_to R = 3; a row is " \
        "never cut" in str(err.value)


def test_a_refused_row_read_from_a_file_names_its_line(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    write_steps(path, records())
    with pytest.raises(ContractError) as err:
        padded_map(pad_to={"R": 3}).batch(path)
    (problem,) = err.value.problems
    assert problem.line == 2 and problem.got == "4 tokens"
    assert str(problem).startswith("line 2: steps[1].action: episode 'b' step 0")


def test_a_long_refusal_names_ten_rows_and_counts_the_rest():
    many = [step(f"e{i}", [1, 2], [3, 4, 5]) for i in range(25)]
    with pytest.raises(ContractError) as err:
        collate_tokens(many, pad_to={"R": 2})
    assert len(err.value.problems) == 11
    assert err.value.problems[-1].got == "15 more rows longer"
    assert err.value.problems[-1].message == "25 rows do not fit pad_to R = 2"


def test_pad_to_holds_for_the_models_step_records_too():
    steps = [LLMStep.model_validate(r) for r in records()]
    fixed = padded_map(pad_to={"P": 4, "R": 4}).batch(steps)
    assert fixed["prompt_mask"].sum(axis=1).tolist() == [3, 3, 1, 1]
    assert fixed["response_length"].tolist() == [2, 4, 1, 3]


# -- packed into micro-batch rows of a token budget ----------------------------------------------

PACKED_FIELDS = {
    "input_ids": {"from": "input_ids"}, "position_ids": {"from": "position_ids"},
    "pad_mask": {"from": "pad_mask"}, "loss_mask": {"from": "response_mask"},
    "sample_index": {"from": "sample_index"},
    "advantages": {"op": "group_norm", "from": ["reward", "group_id"],
                   "then": [{"op": "per_token"}]},
    "logprobs": {"from": "logprob"}, "episode_id": {"from": "episode_id"},
    "policy_version": {"from": "policy_version"}, "reward": {"from": "reward"},
    "group_id": {"from": "group_id"}}


def packed_map(budget: int = 8, **fields: Any) -> FieldMap:
    return FieldMap.from_dict({"gyre_field_map": 1, "rows": "step", "layout": "packed",
                               "token_budget": budget, "fields": fields or PACKED_FIELDS})


def test_plan_is_first_fit_decreasing_ties_in_input_order():
    plan = plan_packing([5, 7, 2, 4], 8)     # 7 -> row 0; 5 -> row 1; 4 -> row 2; 2 -> row 1
    assert plan.rows == 3 and plan.row.tolist() == [1, 0, 1, 2]
    assert plan.start.tolist() == [0, 0, 5, 0] and plan.used.tolist() == [7, 7, 4]
    assert plan.fill == pytest.approx(18 / 24)
    ties = plan_packing([3, 3, 3, 3], 6)     # equal lengths: placed in input order
    assert ties.row.tolist() == [0, 0, 1, 1] and ties.start.tolist() == [0, 3, 0, 3]
    assert plan_packing([4] * 3, 4).row.tolist() == [0, 1, 2]      # exactly full rows
    with pytest.raises(ValueError, match="1..8 tokens"):
        plan_packing([9], 8)


def test_a_packed_batch_is_every_row_laid_end_to_end():
    rows = padded_map().batch(records())
    b = packed_map().batch(records())
    # lengths a=5, b=7, c=2, d=4 into rows of 8: b | a c | d
    assert b["sample_index"].tolist() == [[1, 1, 1, 1, 1, 1, 1, -1],
                                          [0, 0, 0, 0, 0, 2, 2, -1],
                                          [3, 3, 3, 3, -1, -1, -1, -1]]
    assert b["input_ids"].tolist() == [[5, 6, 7, 52, 53, 54, 55, 0],
                                       [5, 6, 7, 50, 51, 8, 56, 0],
                                       [8, 57, 58, 59, 0, 0, 0, 0]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5, 6, 0],
                                          [0, 1, 2, 3, 4, 0, 1, 0],
                                          [0, 1, 2, 3, 0, 1, 2, 3]]   # the tail: one more run
    np.testing.assert_array_equal(b["pad_mask"], b["sample_index"] >= 0)
    assert b["loss_mask"][1].tolist() == [False] * 3 + [True, True, False, True, False]
    adv = FieldMap.from_dict({"gyre_field_map": 1, "rows": "step", "fields": {  # on the rows
        "a": {"op": "group_norm", "from": ["reward", "group_id"]}}}).build(records())["a"]
    assert b["advantages"][1, 3:5].tolist() == 2 * [adv[0]]       # then on its tokens
    assert b["advantages"][0, 3:7].tolist() == 4 * [adv[1]]
    assert b["advantages"][1, :3].tolist() == [0.0] * 3           # 0 off the response
    np.testing.assert_array_equal(b["logprobs"][0, 3:7], rows["logprob"][1])
    assert b["episode_id"].tolist() == ["a", "b", "c", "d"]        # per sample, row order
    assert b["advantages"].dtype == np.float32 and b["input_ids"].dtype == np.int64


def test_a_sample_longer_than_the_budget_is_refused_naming_it():
    with pytest.raises(ContractError) as err:
        packed_map(budget=6).batch(records())
    (problem,) = err.value.problems
    assert (problem.path, problem.expected, problem.got) == (
        "steps[1]", "1 to 6 tokens (the token budget S = 6)", "7 tokens (3 + 4)")
    assert "episode 'b' step 0: a sample (prompt + response) of 7 tokens does not fit the " \
        "token budget S = 6; a sample is never split" in problem.message
    empty = [step("e", [], [])]
    with pytest.raises(ContractError, match="an empty prompt and response has no token"):
        packed_map().batch(empty)


def test_the_layout_keys_of_a_packed_map():
    fmap = packed_map(budget=4096)
    assert fmap.to_dict()["token_budget"] == 4096 and fmap.layout.token_budget == 4096
    assert fmap.batch_model.__name__ == "PackedBatchV1"
    assert fmap.describe().startswith("token rows packed into micro-batch rows of 4096 tokens")
    for keys, message in [({}, '"layout": "packed" needs "token_budget"'),
                          ({"token_budget": 0}, '"layout": "packed" needs "token_budget"'),
                          ({"token_budget": 8, "pad_to": {"R": 4}},
                           '"pad_to" is not a key of a map with "rows": "step", "layout": '
                           '"packed"')]:
        with pytest.raises(FieldMapError, match=re.escape(message)):
            FieldMap.from_dict({"gyre_field_map": 1, "rows": "step", "layout": "packed",
                                **keys, "fields": PACKED_FIELDS})


def test_a_packed_map_reads_the_response_or_its_own_columns_never_the_prompt():
    with pytest.raises(FieldMapError) as err:
        packed_map(ids={"from": "prompt_ids"},
                   seq={"op": "concat", "from": ["prompt_ids", "response_ids"]},
                   both={"op": "any", "from": ["pad_mask", "response_mask"]})
    text = str(err.value)
    assert "fields.ids: reads ['prompt_ids']: a packed map puts per-token values on the " \
        "response tokens" in text
    assert "fields.seq: reads ['prompt_ids', 'prompt_mask', 'response_length']" not in text
    assert "fields.seq: reads ['prompt_ids'" in text
    assert "fields.both: reads the packed columns ['pad_mask'] and the token rows' " \
        "['response_mask']" in text


def test_a_result_neither_per_token_nor_per_sample_is_refused():
    fmap = packed_map(lead={"from": "logprob", "then": [{"op": "unsqueeze", "axis": 0}]})
    with pytest.raises(ContractError, match="a packed map's entry is per response token or "
                                            "per sample"):
        fmap.build(records())


def unpack(batch: dict[str, np.ndarray], key: str, sample: int) -> np.ndarray:
    """The tokens of one sample, in order: where `sample_index` is that sample."""
    return batch[key][batch["sample_index"] == sample]


lengths = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9)), min_size=1, max_size=24)


def random_rows(lengths: list[tuple[int, int]], budget: int, seed: int, *,
                masked: Any = lambda i: True) -> list[dict[str, Any]]:
    """A step per (prompt, action) length that fits `budget`: random tokens, rewards (often
    equal within a group of 3), `ref_logprob`, and a `loss_mask` on the rows `masked(i)`."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, (p, a) in enumerate(lengths):
        if p + a == 0 or p + a > budget:
            continue
        extra: dict[str, Any] = {"ref_logprob": (-rng.random(a)).round(3).tolist()}
        if masked(i):
            extra["loss_mask"] = (rng.random(a) < 0.7).tolist()
        rows.append(step(f"e{i}", rng.integers(1, 100, p).tolist(),
                         rng.integers(100, 200, a).tolist(), reward=float(rng.integers(0, 3)),
                         group=f"g{i % 3}", **extra))
    return rows


@settings(max_examples=60, deadline=None)
@given(lengths=lengths, budget=st.integers(1, 20), seed=st.integers(0, 2**16))
def test_unpacking_by_sample_index_gives_back_every_row_exactly_once(lengths, budget, seed):
    rows = random_rows(lengths, budget, seed)
    if not rows:
        return
    fields = {**PACKED_FIELDS, "advantages": {"op": "rloo", "from": ["reward", "group_id"],
                                              "singletons": "zero", "then": [{"op": "per_token"}]}}
    b = packed_map(budget, **fields).batch(rows)            # validated: the rule holds
    row_adv = padded_map().build(rows)                      # the rows the ops ran on
    rloo = FieldMap.from_dict({"gyre_field_map": 1, "rows": "step", "fields": {
        "a": {"op": "rloo", "from": ["reward", "group_id"], "singletons": "zero"}}}).build(rows)
    assert b["input_ids"].shape[1] == budget
    assert sorted(set(b["sample_index"].ravel().tolist()) - {-1}) == list(range(len(rows)))
    for i, r in enumerate(rows):
        p, a = len(r["observation"]["token_ids"]), len(r["action"])
        assert len(np.unique(np.nonzero(b["sample_index"] == i)[0])) == 1   # one micro-batch row
        assert unpack(b, "input_ids", i).tolist() == r["observation"]["token_ids"] + r["action"]
        assert unpack(b, "position_ids", i).tolist() == list(range(p + a))
        assert unpack(b, "loss_mask", i).tolist() == [False] * p + r["loss_mask"]
        np.testing.assert_array_equal(unpack(b, "logprobs", i)[p:],
                                      row_adv["logprob"][i, :a])
        want = np.where(r["loss_mask"], rloo["a"][i], 0.0).astype(np.float32)
        np.testing.assert_array_equal(unpack(b, "advantages", i)[p:], want)
        assert not unpack(b, "advantages", i)[:p].any()
    assert not b["loss_mask"][~b["pad_mask"]].any()
    assert not b["logprobs"][~b["pad_mask"]].any() and not b["advantages"][~b["pad_mask"]].any()
    assert b["pad_mask"].sum() == sum(len(r["observation"]["token_ids"]) + len(r["action"])
                                      for r in rows)


def test_packed_rows_over_the_batch_limit_are_refused_before_they_are_allocated():
    from gyre_contract.trainer._collation import BatchTooLargeError

    with pytest.raises(BatchTooLargeError, match=r"packed token batch \[M=1, S=1000000000000\] "
                                                 r"would take 22.7 TiB .* a smaller token_budget"):
        packed_map(budget=10**12).batch(records())


def test_a_packed_file_on_two_threads_gives_the_batch_of_its_records(tmp_path, monkeypatch):
    """A file takes its own way (the tokens kept flat by the collation, the fills and the
    per-token scatters on two threads); the batch is the records' one, array for array."""
    from gyre_contract.trainer import _packing, _tokens

    rng = np.random.default_rng(3)
    rows = []
    for i in range(24):
        action = rng.integers(100, 200, rng.integers(1, 8)).tolist()
        rows.append(step(f"e{i}", rng.integers(1, 100, rng.integers(1, 6)).tolist(), action,
                         reward=float(rng.random()), group=f"g{i % 4}",
                         loss_mask=(rng.random(len(action)) < 0.7).tolist()))
    fmap = packed_map(16, **PACKED_FIELDS, ref_logprobs={"from": "logprob"})
    serial = fmap.batch(rows)
    path = tmp_path / "rows.jsonl"
    write_steps(path, rows)
    monkeypatch.setattr(_tokens, "PARALLEL_CELLS", 0)
    monkeypatch.setattr(_packing, "PARALLEL_CELLS", 0)
    kept: list[dict[str, Any]] = []
    real_pack = _packing.pack_columns

    def pack_columns(columns, budget, **options):
        kept.append({**(options.get("flats") or {}), "padded": {
            k for k in ("prompt_ids", "response_ids") if k in columns}})
        return real_pack(columns, budget, **options)

    monkeypatch.setattr("gyre_contract.trainer._layouts.pack_columns", pack_columns)
    with fast_paths(True):  # the file's own way, GYRE_FAST_PATHS=0 or not
        threaded = fmap.batch(path)
    # no gather from [B, R]: the ids are never padded, as the map reads neither
    assert kept and set(kept[0]) == {"prompt_ids", "response_ids", "padded"}
    assert kept[0]["padded"] == set()
    assert serial.keys() == threaded.keys()
    for key, value in serial.items():
        assert np.array_equal(value, threaded[key]), key


def test_positions_that_do_not_restart_name_their_micro_batch_rows():
    from gyre_contract.core._tokens import PackedBatch
    from gyre_contract.core._validate import validate_batch

    batch = dict(packed_map().batch(records()))
    position = np.array(batch["position_ids"])
    position[1, 1] += 1  # the second token of row 1 counts on from 2
    with pytest.raises(ContractError, match=r"position_ids: position_ids do not restart at each "
                                            r"sample: .* got other positions in rows \[1\]"):
        validate_batch({**batch, "position_ids": position}, PackedBatch)


def test_a_packed_map_that_reads_the_response_ids_gets_them_padded_and_packed(tmp_path):
    fmap = packed_map(16, **PACKED_FIELDS, tokens={"from": "response_ids"})
    path = tmp_path / "rows.jsonl"
    write_steps(path, records())
    from_file, from_records = fmap.batch(path), fmap.batch(records())
    for key, value in from_records.items():
        assert np.array_equal(value, from_file[key]), key
    for i, r in enumerate(records()):  # each response token at its packed place
        p = len(r["observation"]["token_ids"])
        assert unpack(from_file, "tokens", i)[p:].tolist() == r["action"]


FLAT_MAPS = {  # target -> entry, beside PACKED_FIELDS: which response columns stay flat
    "renames": {"ref_logprobs": {"from": "ref_logprob"}},
    "a kl reads logprob padded": {"kl": {"op": "kl", "from": ["logprob", "ref_logprob"],
                                         "estimator": "k3"}},
    "a cast keeps ref_logprob padded": {"ref_logprobs": {"from": "ref_logprob",
                                                         "cast": "float64"}},
    "the loss mask renamed": {"recorded": {"from": "loss_mask"}},
    "per_token cast": {"wide": {"op": "rloo", "from": ["reward", "group_id"],
                                "singletons": "zero", "then": [{"op": "per_token"}],
                                "cast": "float64"}},
}


@settings(max_examples=30, deadline=None)
@given(lengths=lengths, budget=st.integers(4, 20), seed=st.integers(0, 2**16),
       masks=st.sampled_from(["none", "some", "all"]), extra=st.sampled_from(sorted(FLAT_MAPS)))
def test_a_packed_file_packs_its_real_tokens_as_padding_then_packing_does(
        tmp_path_factory, lengths, budget, seed, masks, extra):
    """A packed map reading a file keeps the response columns it only renames (and
    `response_mask` under `per_token`) as their real tokens and scatters them once; the batch
    is the one of padding the rows and then packing them (the step objects' way), array for
    array."""
    rows = random_rows(lengths, budget, seed,
                       masked=lambda i: masks == "all" or masks == "some" and i % 2 == 1)
    if not rows or extra == "the loss mask renamed" and not any("loss_mask" in r for r in rows):
        return
    fields = {**PACKED_FIELDS, **FLAT_MAPS[extra],
              "advantages": {"op": "group_norm", "from": ["reward", "group_id"],
                             "singletons": "zero", "then": [{"op": "per_token"}]}}
    fmap = packed_map(budget, **fields)
    path = tmp_path_factory.mktemp("flat") / "rows.jsonl"
    write_steps(path, rows)
    with fast_paths(True):  # GYRE_FAST_PATHS=0 or not
        collated, _ = fmap.collated_file(path, LLMStep)
        flat = fmap.batch(path)
    # the new path is taken (kl reads response_mask padded, as logprob and ref_logprob; a
    # per_token result cast is made padded)
    assert isinstance(collated["response_mask"], ResponseValues) == \
        (extra not in ("a kl reads logprob padded", "per_token cast"))
    assert isinstance(collated.get("ref_logprob"), ResponseValues) == (extra == "renames")
    with fast_paths(False):  # the rows padded, the ops run on [B, R], then packed
        assert fmap.collated_file(path, LLMStep) is None
        padded_then_packed = fmap.batch(path)
    same_arrays(flat, padded_then_packed)
    same_arrays(flat, fmap.batch(rows))
