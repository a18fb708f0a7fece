"""`io._recordcols.check_records`: a block of step dicts checked on columns straight from their
values (the channel's `put` of a flat model), with the verdicts, messages and columns of the
record path; every value it is not sure of makes it give up (None)."""

from __future__ import annotations

import math
from collections import OrderedDict, defaultdict
from typing import Any

import numpy as np
import orjson
import pytest
from fastpaths import fast_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import ContractError
from gyre_contract.core._models import RolloutStep
from gyre_contract.io import _blocks
from gyre_contract.io._binding import bind_plan
from gyre_contract.io._blocks import RecordBlocks
from gyre_contract.io._fastfile import bulk_plan
from gyre_contract.io._recordcols import check_records
from gyre_contract.pinned import CartPoleStep


@pytest.fixture(autouse=True)
def fast_paths_on():
    """These tests are about the fast path: on here even when CI runs with GYRE_FAST_PATHS=0."""
    with fast_paths(True):
        yield


def steps(n: int = 3, length: int = 4, logprob: bool = True) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    out = []
    for e in range(n):
        for t in range(length):
            record = {"observation": rng.random(4).astype(np.float32), "action": t % 2,
                      "reward": 1.0, "step": t, "episode_id": f"e{e}",
                      "terminated": t == length - 1, "truncated": False, "policy_version": 0}
            if logprob:
                record["logprob"] = -0.5
            out.append(record)
    return out


def test_a_clean_block_is_taken_from_its_values():
    records = steps()
    block = check_records(bulk_plan(CartPoleStep), records)
    assert block is not None and block.n == 12
    np.testing.assert_array_equal(block.arrays["observation"],
                                  np.stack([r["observation"] for r in records]))
    assert block.arrays["observation"].dtype == np.float32
    assert block.arrays["reward"].dtype == np.float32 and block.arrays["action"].dtype == np.int64
    assert list(block.episode_id) == [r["episode_id"] for r in records]
    checked = RecordBlocks(CartPoleStep).check(records)
    assert checked.bulk and list(checked.columns)[:3] == ["observation", "action", "logprob"]


def test_an_integer_within_a_float_fields_exact_range_is_taken():
    records = steps()
    records[2]["reward"] = 3  # an int where a float32 goes: exact
    block = check_records(bulk_plan(CartPoleStep), records)
    assert block is not None and block.arrays["reward"][2] == 3.0


def test_an_optional_field_some_records_lack():
    """A float field: NaN where absent; a string field: None where absent."""
    records = steps()
    records[1]["value"] = 0.25
    records[3]["group_id"] = "g"
    block = check_records(bulk_plan(CartPoleStep), records)
    assert block is not None
    assert block.arrays["value"][1] == 0.25 and np.isnan(block.arrays["value"][0])
    assert block.key_counts["value"] == 1
    assert block.lists["group_id"] == [None] * 3 + ["g"] + [None] * 8


def test_keys_the_first_record_lacks():
    """The keys are the first record's unless every key of every record is accounted for:
    another record's optional field is still taken, and an unknown key in a record that lacks
    a field the first one carries (the same number of keys in every record) still gives up."""
    records = steps(logprob=False)
    records[0]["logprob"] = -0.5  # the first record carries a field the others lack
    records[7]["value"] = 0.25  # a field only a later record carries
    block = check_records(bulk_plan(CartPoleStep), records)
    assert block is not None and block.key_counts["value"] == 1
    assert block.arrays["logprob"][0] == -0.5 and np.isnan(block.arrays["logprob"][1])
    swapped = steps()  # every record with 9 keys; one lacks logprob and holds a typo
    del swapped[1]["logprob"]
    swapped[1]["trunctaed"] = True
    assert {len(r) for r in swapped} == {9}
    assert check_records(bulk_plan(CartPoleStep), swapped) is None
    assert_like_the_record_path(CartPoleStep, swapped)
    for first_lacks in (steps(logprob=False), steps()):
        first_lacks[-1]["trunctaed"] = True  # only the last record carries the unknown key
        assert check_records(bulk_plan(CartPoleStep), first_lacks) is None
        assert_like_the_record_path(CartPoleStep, first_lacks)


def bound_records(action: Any) -> list[dict[str, Any]]:
    out = steps(logprob=False)
    for r in out:
        r["action"] = action
    return out


def bound_plan(action: Any) -> Any:
    """The default model's plan bound from lines whose action is `action`."""
    lines = [orjson.dumps(r, option=orjson.OPT_SERIALIZE_NUMPY) for r in bound_records(action)]
    plan = bind_plan(RolloutStep, lines)
    assert plan is not None
    return plan


GIVE_UP = {
    "a bool where an int goes": lambda r: r.update(action=True),
    "a bool where a float goes": lambda r: r.update(reward=True),
    "an int where a bool goes": lambda r: r.update(terminated=0),
    "an int beyond float32's exact range": lambda r: r.update(reward=2**24 + 1),
    "an int beyond int64": lambda r: r.update(action=2**64),
    "a float beyond float32's exact range": lambda r: r.update(reward=1e30),
    "a NaN reward": lambda r: r.update(reward=math.nan),
    "an inf reward": lambda r: r.update(reward=-math.inf),
    "a NaN in the observation": lambda r: r["observation"].__setitem__(1, np.nan),
    "a float64 observation": lambda r: r.update(observation=r["observation"].astype(np.float64)),
    "a big-endian observation": lambda r: r.update(observation=r["observation"].astype(">f4")),
    "an observation of 5": lambda r: r.update(observation=np.zeros(5, np.float32)),
    "an observation [1, 4]": lambda r: r.update(observation=np.zeros((1, 4), np.float32)),
    "an observation [4, 1]": lambda r: r.update(observation=np.zeros((4, 1), np.float32)),
    "a 0-d observation": lambda r: r.update(observation=np.float32(0.5).reshape(())),
    "a float16 observation": lambda r: r.update(observation=r["observation"].astype(np.float16)),
    "an observation as a list": lambda r: r.update(observation=[0.0, 0.0, 0.0, 0.0]),
    "a masked observation": lambda r: r.update(observation=np.ma.masked_array(
        np.zeros(4, np.float32))),
    "a numpy scalar reward": lambda r: r.update(reward=np.float32(1.0)),
    "a numpy scalar action": lambda r: r.update(action=np.int64(1)),
    "a null logprob": lambda r: r.update(logprob=None),
    "a positive logprob": lambda r: r.update(logprob=0.5),
    "an empty episode id": lambda r: r.update(episode_id=""),
    "an int episode id": lambda r: r.update(episode_id=7),
    "a record without its step": lambda r: r.pop("step"),
    "a record without its reward": lambda r: r.pop("reward"),
    "an unknown key": lambda r: r.update(trunctaed=True),
    "info": lambda r: r.update(info={"seed": 1}),
    "a bool field one record carries": lambda r: r.update(loss_mask=True),
}


@pytest.mark.parametrize("case", list(GIVE_UP))
def test_each_value_it_is_not_sure_of_gives_up(case):
    """The fast path gives up, and the block gets the record path's verdict and message."""
    records = steps()
    GIVE_UP[case](records[5])
    assert check_records(bulk_plan(CartPoleStep), records) is None, case
    assert_like_the_record_path(CartPoleStep, records)


def test_tensors_whose_sizes_only_add_up_give_up():
    """Observations of 3 and 5 values hold the 8 of two steps of 4: each step's shape is
    checked, not the block's total."""
    records = steps()
    records[4]["observation"] = np.zeros(3, np.float32)
    records[5]["observation"] = np.zeros(5, np.float32)
    assert check_records(bulk_plan(CartPoleStep), records) is None
    assert_like_the_record_path(CartPoleStep, records)


def test_a_field_no_record_carries_when_required():
    records = steps()
    for r in records:
        del r["step"]
    assert check_records(bulk_plan(CartPoleStep), records) is None
    assert_like_the_record_path(CartPoleStep, records)


def test_a_mapping_other_than_a_dict_gives_up():
    """A defaultdict would make up the value a record lacks; any other mapping: the record
    path reads it."""
    records = steps()
    lacking = defaultdict(int, records[5])
    del lacking["step"]
    records[5] = lacking
    assert check_records(bulk_plan(CartPoleStep), records) is None
    assert "step" not in lacking
    records[5] = OrderedDict(steps()[5])
    assert check_records(bulk_plan(CartPoleStep), records) is None


def test_an_int_where_a_bound_float_action_goes_gives_up():
    """The default model bound to a float action (it would read an int as int64)."""
    plan = bound_plan(0.5)
    records = bound_records(0.5)
    assert check_records(plan, records) is not None
    records[5]["action"] = 1
    assert check_records(plan, records) is None


# -- the same verdicts and columns as record by record: a hypothesis differential ---------------

def run(model: type, records: list[dict[str, Any]], mode: str) -> Any:
    """(columns, ids, ended, [whether `check_records` took it]) or the error message of one
    `RecordBlocks.check`: mode "fast" (as is), "json" (`check_records` off: the JSON path it
    replaces) or "records" (fast paths off)."""
    with pytest.MonkeyPatch.context() as m, fast_paths(mode != "records"):
        taken: list[bool] = []
        if mode == "json":
            m.setattr(_blocks, "check_records", lambda plan, records: None)
        else:
            def spy(plan: Any, records: Any) -> Any:
                block = check_records(plan, records)
                taken.append(block is not None)
                return block

            m.setattr(_blocks, "check_records", spy)
        blocks = RecordBlocks(model)
        if model is RolloutStep:  # bind its plan on a first clean block, as a put would
            blocks.check(steps(logprob=False))
            blocks.commit()
        try:
            checked = blocks.check(records)
        except ContractError as err:
            return str(err)
        return checked.columns, list(checked.episode_id), checked.ended_ids, taken[-1:]


def assert_like_the_record_path(model: type, records: list[dict[str, Any]]) -> Any:
    fast, json, one_by_one = (run(model, records, mode) for mode in ("fast", "json", "records"))
    if isinstance(one_by_one, str):
        assert fast == json == one_by_one
        return fast
    assert not isinstance(fast, str) and not isinstance(json, str), (fast, json)
    assert fast[1:3] == json[1:3] == one_by_one[1:3]
    assert list(fast[0]) == list(json[0]) == list(one_by_one[0])
    for wire, column in fast[0].items():
        if isinstance(column, np.ndarray):
            assert json[0][wire].dtype == column.dtype, wire  # the JSON path's arrays exactly
            np.testing.assert_array_equal(column, json[0][wire], err_msg=wire)
            values = one_by_one[0][wire]  # the record path's values, as the declared dtype
            expected = np.array([np.full(column.shape[1:], np.nan) if v is None else v
                                 for v in values], dtype=column.dtype)
            np.testing.assert_array_equal(column, expected, err_msg=wire)
        else:  # values (strings; or any column of a block that went record by record)
            for x, y, z in zip(column, json[0][wire], one_by_one[0][wire], strict=True):
                assert type(x) is type(y), wire  # the record path: perhaps a numpy scalar
                if isinstance(x, np.ndarray):
                    assert x.dtype == y.dtype == z.dtype, wire
                    np.testing.assert_array_equal(x, y, err_msg=wire)
                    np.testing.assert_array_equal(x, z, err_msg=wire)
                else:
                    assert x == y == z, wire
    return fast


DROP = "(dropped)"
SUBTLE = [
    ("reward", 3), ("reward", 2**24 - 1), ("reward", 2**24), ("reward", 2**24 + 1),
    ("reward", True), ("reward", 1e30), ("reward", math.nan), ("reward", None),
    ("reward", np.float32(0.5)), ("reward", 0.1), ("logprob", 0.0), ("logprob", 1e-9),
    ("logprob", -1e-45), ("logprob", None), ("value", 0.25), ("value", math.inf),
    ("action", False), ("action", 2**63), ("action", -1), ("action", 1.0),
    ("action", np.int64(1)), ("step", True), ("step", -1), ("step", 99),
    ("terminated", 1), ("truncated", True), ("policy_version", 2**31),
    ("episode_id", ""), ("episode_id", 7), ("episode_id", "e9"), ("episode_id", "e0"),
    ("group_id", "g"), ("group_id", ""), ("group_id", 7), ("observation", np.zeros(4, ">f4")),
    ("observation", np.zeros(4, np.float64)),
    ("observation", np.zeros(3, np.float32)), ("observation", np.full(4, np.nan, np.float32)),
    ("observation", np.full(4, 3e38, np.float32)), ("observation", [0.5, 0.5, 0.5, 0.5]),
    ("next_observation", np.ones(4, np.float32)), ("loss_mask", True), ("trunctaed", True),
    ("info", {"seed": 1}), ("step", DROP), ("reward", DROP), ("logprob", DROP),
]
"""(field, value) edits: valid, subtly invalid, or DROP (the key removed)."""


def edited(pinned: bool, edits: list[tuple[int, tuple[str, Any]]]) -> list[dict[str, Any]]:
    records = steps(logprob=pinned)
    for row, (wire, value) in edits:
        if value is DROP:
            records[row].pop(wire, None)
        else:
            records[row][wire] = value
    return records


@pytest.mark.parametrize("pinned", [True, False], ids=["CartPoleStep", "RolloutStep"])
@pytest.mark.parametrize("change", SUBTLE, ids=[f"{w}={v!r:.20}" for w, v in SUBTLE])
def test_each_edit_alone_gets_the_record_paths_verdict_and_columns(change, pinned):
    assert_like_the_record_path(CartPoleStep if pinned else RolloutStep,
                                edited(pinned, [(5, change)]))


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.integers(0, 11), st.sampled_from(SUBTLE)), min_size=1,
                    max_size=3),
       pinned=st.booleans())
def test_blocks_edited_anywhere_get_the_record_paths_verdict_and_columns(edits, pinned):
    assert_like_the_record_path(CartPoleStep if pinned else RolloutStep, edited(pinned, edits))


def test_the_differential_sees_the_fast_path():
    """The clean blocks of the property go the fast path (else it compares nothing new)."""
    for model, logprob in ((CartPoleStep, True), (RolloutStep, False)):
        fast = assert_like_the_record_path(model, steps(logprob=logprob))
        assert fast[3] == [True]


# -- what makes it cheap, kept honest --------------------------------------------------------

def test_the_records_are_read_in_one_pass_without_waking_the_cyclic_gc():
    """All fields are read in one pass (a tuple per record, freed at once), with the cyclic GC
    paused meanwhile: thousands of short-lived tuples set off no collection."""
    import gc

    records = steps(n=250, length=20)
    plan = bulk_plan(CartPoleStep)
    seen: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        block = check_records(plan, records)
    finally:
        gc.callbacks.remove(count)
    assert block is not None and gc.isenabled()
    assert len(seen) <= 1  # a few containers of its own; 5,000 tuples would set off 7


class _CountedId(str):
    """An episode id that counts how often it is hashed (each dict look-up of it)."""

    hashed = 0

    def __hash__(self) -> int:
        _CountedId.hashed += 1
        return super().__hash__()


def test_episode_ids_in_runs_are_looked_up_once_a_run():
    from gyre_contract.io._fastfile import coded_ids

    ids = [_CountedId(f"e{i // 50}") for i in range(1000)]  # 20 runs of 50
    _CountedId.hashed = 0
    coded = coded_ids(ids)
    assert _CountedId.hashed <= 3 * 20
    assert list(coded) == ids and coded.ids == list(dict.fromkeys(ids))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(ids=st.lists(st.sampled_from(["a", "b", "c", "dd", "e"]), max_size=200),
       runs=st.integers(1, 80))
def test_coded_ids_give_the_ids_in_order_of_first_appearance(ids, runs):
    from gyre_contract.io._fastfile import coded_ids

    ids = [x for x in ids for _ in range(runs)][:300]  # runs of any length, or none
    coded = coded_ids(ids)
    assert coded.codes.dtype == np.int64 and len(coded) == len(ids)
    assert coded.ids == list(dict.fromkeys(ids)) and list(coded) == ids


SCALAR_VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                          st.integers(-2**70, 2**70), st.integers(-3, 3),
                          st.sampled_from([np.float32(0.5), np.int64(2), 2**24, 2**24 + 1]))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(held=st.lists(SCALAR_VALUES, min_size=1, max_size=8),
       dtype=st.sampled_from(["float32", "float64", "int64", "int32", "uint8", "bool"]),
       floats_only=st.booleans())
def test_scalars_take_what_the_set_of_types_takes_as_the_same_array(held, dtype, floats_only):
    """`columnrules.scalars` counts the usual type first and reads by `np.fromiter`: the same
    verdict and array as a set of the types and `np.array`."""
    from gyre_contract.io._columnrules import SCALARS, narrowed, scalars

    kind = np.dtype(dtype).kind
    kinds = set(map(type, held))
    expected = None
    if kinds <= SCALARS[kind] and not (floats_only and int in kinds):
        try:
            raw = np.array(held, np.float64 if kind == "f" else np.int64 if kind in "iu"
                           else bool)
        except OverflowError:
            raw = None
        expected = None if raw is None else narrowed(raw, np.dtype(dtype))
    got = scalars(held, np.dtype(dtype), floats_only)
    if expected is None:
        assert got is None
    else:
        assert got is not None and got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
