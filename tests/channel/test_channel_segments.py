"""Segments: a checked block → Arrow IPC bytes → the same columns and the same batch; anything
else is a SegmentError."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from procs import CARTPOLE_MAP, TOKEN_MAP, CartStep, Completion, completions, episodes

from gyre_contract.channel import _segments as segments
from gyre_contract.channel._segments import SegmentError, SegmentMeta
from gyre_contract.io._arrowschema import to_arrow_schema
from gyre_contract.io._blocks import RecordBlocks
from gyre_contract.io._reading import episodes_from_records
from gyre_contract.pinned import LLMStep
from gyre_contract.trainer._collation import episodes_of
from gyre_contract.trainer._fieldmap import FieldMap


def meta(n: int) -> SegmentMeta:
    return SegmentMeta("00000000000000000001-w-00000001", "w", 1, "sha256:x", n, 1, 1,
                       {"0": n}, 1.0, 2.0)


def round_trip(model, records):
    checked = RecordBlocks(model).check(records)
    data = segments.encode(checked.columns, checked.n, to_arrow_schema(model, sample=records[0]),
                           meta(checked.n))
    table, facts = segments.decode(data, "test")
    assert facts == meta(checked.n)
    return table


@pytest.mark.parametrize("fast", ["1", "0"])
def test_cartpole_steps_come_back_as_the_same_batch(monkeypatch, fast):
    monkeypatch.setenv("GYRE_FAST_PATHS", fast)
    records = episodes("e", 3, length=4)
    for r in records[:4]:
        del r["value"]  # an optional field absent on one episode: null, then NaN, then left out
    from gyre_contract.pinned import CartPoleStep

    table = round_trip(CartPoleStep, records)
    assert table.column("value").null_count == 4
    columns = segments.to_columns(table)
    eps = episodes_of(columns, columns["episode_id"])
    assert "value" not in eps[0] and eps[1]["value"].dtype == np.float32
    fmap = FieldMap.from_dict({"gyre_field_map": 1, "fields": {
        "obs": {"from": "observation"}, "act": {"from": "action"}, "mask": {"op": "mask"}}})
    ours = fmap.build(eps)
    theirs = fmap.build(episodes_from_records(records, CartPoleStep))
    assert ours.keys() == theirs.keys()
    for key in ours:
        np.testing.assert_array_equal(ours[key], theirs[key])
        assert ours[key].dtype == theirs[key].dtype


def test_token_steps_come_back_as_the_same_token_batch():
    records = completions("c", 7)
    for r in records[::2]:
        r["observation"]["text"] = "a+b="
        r["loss_mask"] = np.ones(len(r["action"]), bool)
        r["loss_mask"][0] = False
    table = round_trip(LLMStep, records)
    columns = segments.to_columns(table)
    assert isinstance(columns["action"], list)  # a varying dim: one array per step
    fmap = FieldMap.from_dict(TOKEN_MAP)
    ours = fmap.build([columns])
    theirs = fmap.build(records)
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key])


def test_the_example_map_runs_on_a_decoded_segment():
    table = round_trip(CartStep, episodes("e", 2, length=3))
    columns = segments.to_columns(table)
    batch = FieldMap.load(CARTPOLE_MAP).build(episodes_of(columns,
                                                                   columns["episode_id"]))
    assert batch["advantage"].shape == (2, 3) and np.isfinite(batch["advantage"]).all()


def test_episodes_keep_the_order_of_their_first_step():
    ids = np.array(["b", "a", "b", "c", "a"])
    eps = episodes_of({"episode_id": ids, "x": np.arange(5)}, ids)
    assert [e["episode_id"][0] for e in eps] == ["b", "a", "c"]
    assert [e["x"].tolist() for e in eps] == [[0, 2], [1, 4], [3]]


@pytest.mark.parametrize("data, message", [
    (b"", "not an Arrow IPC file"),
    (b"ARROW1\x00\x00garbage", "not an Arrow IPC file"),
])
def test_what_is_not_a_segment_is_a_segment_error(data, message):
    with pytest.raises(SegmentError, match=message):
        segments.decode(data, "x")


def test_an_arrow_file_without_facts_is_not_a_segment():
    table = pa.table({"episode_id": ["a"], "step": [0]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(SegmentError, match="without segment facts"):
        segments.decode(sink.getvalue(), "x")


def test_facts_that_do_not_match_the_rows_are_refused():
    records = episodes("e", 1, length=3)
    checked = RecordBlocks(CartStep).check(records)
    data = segments.encode(checked.columns, checked.n, to_arrow_schema(CartStep), meta(99))
    with pytest.raises(SegmentError, match="3 rows but the segment says 99"):
        segments.decode(data, "x")


def test_completion_model_segments_decode(tmp_path):
    table = round_trip(Completion, completions("c", 3))
    assert table.num_rows == 3
