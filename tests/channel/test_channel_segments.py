"""Segments: a checked block → Arrow IPC bytes → the same columns and the same batch; anything
else is a SegmentError."""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa
import pytest
from fastpaths import fast_paths
from hypothesis import given, settings
from hypothesis import strategies as st
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


@pytest.mark.parametrize("missing", ["episode_id", "policy_version", "step", "terminated",
                                     "truncated"])
def test_a_segment_without_a_column_every_delivery_reads_is_refused(missing):
    records = episodes("e", 1, length=3)
    checked = RecordBlocks(CartStep).check(records)
    table = segments.decode(segments.encode(checked.columns, checked.n,
                                            to_arrow_schema(CartStep), meta(3)), "x")[0]
    table = table.drop_columns([missing])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(SegmentError, match=f"x: no {missing} column"):
        segments.decode(sink.getvalue(), "x")


def test_completion_model_segments_decode(tmp_path):
    table = round_trip(Completion, completions("c", 3))
    assert table.num_rows == 3


def test_the_checksum_is_zlibs_crc32_whichever_code_computes_it():
    """ISA-L's CRC-32 where installed, zlib's otherwise: the same value, so a segment named by
    one is read back by the other."""
    import zlib

    from gyre_contract.channel import _backends

    data = np.random.default_rng(0).bytes(1_000_003)
    assert _backends.checksum(data) == zlib.crc32(data)
    assert _backends.checksum(pa.py_buffer(data)) == zlib.crc32(data)


def test_a_replaced_manifest_is_read_again_however_often(tmp_path):
    """An end reads the manifest again only when the file was replaced; it holds the one it
    read open, so a new file can never take its inode number and pass for it."""
    from procs import CartStep

    from gyre_contract.channel import open_sampler
    from gyre_contract.channel._filebackend import FileBackend

    open_sampler(tmp_path / "ch", model=CartStep).close()
    reader, writer = FileBackend(tmp_path / "ch"), FileBackend(tmp_path / "ch")
    try:
        for i in range(100, 300):  # one size throughout: only the file tells them apart
            writer.update(lambda m, i=i: m.__setitem__("created", i))
            assert reader.manifest()["created"] == i
            assert reader.manifest() is reader.manifest()  # unchanged: not read again
    finally:
        reader.close()
        writer.close()


def token_block(records, model=LLMStep):
    """A segment of `records` decoded as a delivery's columns (token lists as Ragged)."""
    table = round_trip(model, records)
    codes, ids, _ = segments.row_keys(table)
    return segments.to_columns(table, (codes, ids), ragged=True), (codes, ids)


def per_step_path(fmap, columns, monkeypatch):
    from gyre_contract.trainer._layouts import per_step_columns

    monkeypatch.setenv("GYRE_FAST_PATHS", "0")
    try:
        return fmap.collated(fmap.layout.from_block(per_step_columns(columns)))
    finally:
        monkeypatch.setenv("GYRE_FAST_PATHS", "1")


@pytest.mark.parametrize("case", ["plain", "loss_mask on some", "text on some", "multi-turn"])
def test_token_lists_read_in_place_give_the_per_step_batch(monkeypatch, case):
    """A delivery's token lists as Ragged (no array per step) collate to the very arrays the
    per-step path gives, key for key; the map's batch too."""
    from gyre_contract.channel._contract import Ragged

    monkeypatch.setenv("GYRE_FAST_PATHS", "1")
    records = completions("c", 9, seed=3)
    if case == "loss_mask on some":
        for r in records[::3]:
            r["loss_mask"] = np.ones(len(r["action"]), bool)
            r["loss_mask"][-1] = False
    elif case == "text on some":
        for r in records[::2]:
            r["observation"]["text"] = "2+2="
    elif case == "multi-turn":
        for i, r in enumerate(records):
            r["episode_id"], r["step"] = f"c-{i // 3}", i % 3
            r["terminated"] = i % 3 == 2
    columns, episodes = token_block(records)
    assert isinstance(columns["action"], Ragged)
    assert isinstance(columns["observation"]["token_ids"], Ragged)
    fmap = FieldMap.from_dict(TOKEN_MAP)
    fast = fmap.layout.collate_block(columns, fields=fmap.sources(), episodes=episodes)
    assert fast is not None
    slow = per_step_path(fmap, columns, monkeypatch)
    assert sorted(fast) == sorted(slow)
    for key in slow:
        assert fast[key].dtype == slow[key].dtype, key
        np.testing.assert_array_equal(fast[key], slow[key], err_msg=key)
    batch = fmap.apply(fmap.collated_block(columns, episodes=episodes))
    assert list(batch) == list(fmap.apply(slow))


def test_a_problem_in_token_lists_is_explained_by_the_per_step_path(monkeypatch):
    """Where collating from the columns raises, the per-step path decides and its message
    (naming the episode and the step) is the one raised."""
    from gyre_contract.core._errors import ContractError

    records = completions("c", 4, seed=5)
    fmap = FieldMap.from_dict({"gyre_field_map": 1, "rows": "step", "fields": {
        "prompt_ids": {"from": "prompt_ids"}, "response_ids": {"from": "response_ids"},
        "ref": {"from": "ref_logprob"}}})
    for r in records[::2]:  # a per-token field the map reads, on some steps only
        r["ref_logprob"] = -np.ones(len(r["action"]), np.float32)
    columns, episodes = token_block(records, Completion)
    assert fmap.layout.collate_block(columns, fields=fmap.sources(), episodes=episodes) is None
    with pytest.raises(ContractError) as fast:
        fmap.collated_block(columns, episodes=episodes)
    with pytest.raises(ContractError) as slow:
        per_step_path(fmap, columns, monkeypatch)
    assert str(fast.value) == str(slow.value) and "episode 'c-1' step 0" in str(fast.value)
    assert "episodes[0].steps[1].ref_logprob" in str(fast.value)


# -- a segment encoded from a checked block's own columns ---------------------------------------

def encoded(columns, checked, model, sample):
    data = segments.encode(columns, checked.n, to_arrow_schema(model, sample=sample),
                           meta(checked.n))
    return pa.ipc.open_file(data).read_all()


def with_text_and_refs(records):
    """Completions where some prompts carry their text and some steps a ref_logprob."""
    for i, r in enumerate(records):
        if i % 3:
            r["observation"]["text"] = f"prompt {i}"
        if i % 2:
            r["ref_logprob"] = r["logprob"] - 0.1
    return records


CASES = {
    "cartpole": lambda: (CartStep, episodes("e", 4, length=6)),
    "completions": lambda: (Completion, completions("c", 9)),
    "completions, optional parts on some steps": lambda: (
        LLMStep, with_text_and_refs([{**r, "logprob": r["logprob"]} for r in completions("c", 9)])),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_block_encodes_from_its_columns_as_from_its_steps(case):
    """`put` encodes a checked block from the columns it was checked on (token lists as values
    and lengths, modalities as columns, episode ids as codes): the very table its per-step
    columns give. The fast paths are on whatever GYRE_FAST_PATHS says: with them off a block is
    checked step by step, not in bulk, which is not what this test is about."""
    model, records = CASES[case]()
    with fast_paths(True):
        checked = RecordBlocks(model).check(records)
    assert checked.bulk
    kinds = {type(v).__name__ for v in checked.columnar.values()}
    assert "CodedIds" in kinds and (case == "cartpole" or {"Ragged", "Objects"} <= kinds)
    ours = encoded(checked.columnar, checked, model, records[0])
    theirs = encoded(checked.columns, checked, model, records[0])
    assert ours.schema.equals(theirs.schema, check_metadata=True)
    assert ours.equals(theirs)
    if case.endswith("some steps"):
        text = ours.column("observation").combine_chunks().field("text")
        assert text.null_count == 3 and ours.column("ref_logprob").null_count == 5


def test_a_large_segment_is_written_into_a_buffer_of_its_size(monkeypatch):
    """Past `EXACT_BUFFER_BYTES` a segment's file is counted first and written into one buffer
    of exactly its size: the same bytes as through a growing buffer."""
    records = completions("c", 9)
    checked = RecordBlocks(Completion).check(records)
    schema = to_arrow_schema(Completion, sample=records[0])
    grown = segments.encode(checked.columnar, checked.n, schema, meta(checked.n))
    monkeypatch.setattr(segments, "EXACT_BUFFER_BYTES", 0)
    exact = segments.encode(checked.columnar, checked.n, schema, meta(checked.n))
    assert exact.size == grown.size and exact.equals(grown)


@pytest.mark.parametrize("layout", ["contiguous", "a slice from an offset", "strided",
                                    "float32 strided"])
def test_ragged_values_are_encoded_as_they_are_whatever_their_memory_layout(layout):
    """A token list column from one `Ragged` goes to Arrow without a copy of its values: the
    column holds each step's list, whether the values are a slice, a strided view or
    contiguous (and a step with none, and an absent one, stay so)."""
    from gyre_contract.channel._contract import Ragged

    base = np.arange(60, dtype=np.int64)
    values = {"contiguous": base[:12].copy(), "a slice from an offset": base[7:19],
              "strided": base[::4][:12],
              "float32 strided": base.astype(np.float32)[1::3][:12]}[layout]
    lengths = np.array([5, 0, 7, 0], np.int64)
    present = np.array([True, True, True, False])
    kind = pa.float32() if values.dtype == np.float32 else pa.int64()
    field = pa.field("action", pa.list_(kind))
    column = segments._array(field, Ragged(values, lengths, present), 4)
    assert column.to_pylist() == [values[:5].tolist(), [], values[5:].tolist(), None]


def with_facts(raw: bytes) -> pa.Buffer:
    """A one-row Arrow file with the channel's columns and `raw` as its segment facts."""
    table = pa.table({"episode_id": ["a"], "step": [0], "policy_version": [0],
                      "terminated": [True], "truncated": [False]})
    table = table.replace_schema_metadata({segments.META_KEY: raw})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def facts_with(key: str, literal: bytes) -> bytes:
    """A sampler's facts for one step, with `literal` as the JSON text of `key`."""
    raw = orjson.dumps({**meta(1).to_json(), key: "@"})
    return raw.replace(b'"@"', literal)


@pytest.mark.parametrize("raw", [b"{", b"[1, 2]", facts_with("started", b"NaN"),
                                 facts_with("written", b"1e999"), facts_with("seq", b"Infinity")])
def test_facts_that_are_not_strict_json_objects_are_refused(raw):
    """Strict JSON (no NaN or infinity: what a sampler writes), an
    object: else the file is not a segment (skipped and reported, never delivered)."""
    with pytest.raises(SegmentError, match="segment facts"):
        segments.decode(with_facts(raw), "x")
    with pytest.raises(SegmentError, match="segment facts"):
        segments.read_meta(with_facts(raw), "x")


def test_facts_written_by_a_sampler_come_back():
    table, got = segments.decode(with_facts(orjson.dumps(meta(1).to_json())), "x")
    assert got == meta(1) and table.num_rows == 1


def test_columns_come_back_under_their_own_names_and_info_is_left_out():
    """Each column paired with its own field (the schema's order), `info` (JSON text) never
    a column."""
    records = episodes("e", 2, length=3)
    for i, r in enumerate(records):
        r["info"] = {"seed": i}
    from gyre_contract.pinned import CartPoleStep

    table = round_trip(CartPoleStep, records)
    assert "info" in table.column_names
    columns = segments.to_columns(table)
    assert "info" not in columns
    for name in ("action", "step", "reward", "terminated", "policy_version"):
        np.testing.assert_array_equal(columns[name], [r[name] for r in records])
    np.testing.assert_array_equal(columns["observation"],
                                  np.stack([r["observation"] for r in records]))
    assert list(columns["episode_id"]) == [r["episode_id"] for r in records]


def test_columns_follow_each_segments_own_schema_however_they_alternate():
    """What `to_columns` reads from a schema's metadata (the varying dims, a field held as
    JSON text) is that schema's: segments whose schemas differ only there, read in turn, each
    come back as their own metadata says."""
    values = pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float32()))
    text = pa.array(['{"a": 1}', '{"a": 2}'])

    def table(varying: str, json_text: bool) -> pa.Table:
        shape = pa.field("x", values.type, metadata={"x-gyre-shape": '["T"]'})
        note = pa.field("note", pa.string(),
                        metadata={"x-gyre-encoding": "json"} if json_text else None)
        schema = pa.schema([shape, note], metadata={"x-gyre-varying-dims": varying,
                                                    segments.META_KEY: b"{}"})
        return pa.Table.from_arrays([values, text], schema=schema)

    for _ in range(2):
        for varying in ('["T"]', "[]"):
            for json_text in (True, False):
                columns = segments.to_columns(table(varying, json_text))
                assert ("note" in columns) is not json_text
                if varying == "[]":  # a fixed dim: one array
                    assert isinstance(columns["x"], np.ndarray)
                    assert columns["x"].shape == (2, 2)
                else:  # a varying dim: an array per step
                    assert isinstance(columns["x"], list) and len(columns["x"]) == 2
                np.testing.assert_array_equal(np.stack(columns["x"]), [[1, 2], [3, 4]])


def test_each_segment_names_the_columns_it_carries_and_its_own_facts():
    """Segments of one sampler that carry different fields (an optional one on some puts
    only), written in turn: each file's schema holds exactly its own columns, in the layout's
    order, with the layout's metadata and its own facts."""
    from gyre_contract.pinned import CartPoleStep

    layout = to_arrow_schema(CartPoleStep)
    with_value = episodes("a", 2, length=3)
    without = [{k: v for k, v in r.items() if k != "value"} for r in episodes("b", 1, length=2)]
    blocks = RecordBlocks(CartPoleStep)
    for i, records in enumerate([with_value, without, with_value, without]):
        checked = blocks.check([{**r, "episode_id": f"{r['episode_id']}{i}"} for r in records])
        blocks.commit()
        facts = SegmentMeta(f"0000000000000000000{i}-w-0000000{i}", "w", i + 1, "sha256:x",
                            checked.n, 2, 2, {"0": checked.n}, 1.0, 2.0)
        table, got = segments.decode(segments.encode(checked.columnar, checked.n, layout,
                                                     facts), "x")
        assert got == facts
        assert ("value" in table.column_names) is (records is with_value)
        assert table.column_names == [f.name for f in layout if f.name in table.column_names]
        for name in table.column_names:
            assert table.schema.field(name).equals(layout.field(name), check_metadata=True)
        assert {k: v for k, v in table.schema.metadata.items() if k != segments.META_KEY} == \
            layout.metadata


@settings(max_examples=200, deadline=None)
@given(runs=st.lists(st.tuples(st.sampled_from(["a", "b", "c", "é", "long-episode-id-7", ""]),
                               st.integers(1, 5)), min_size=0, max_size=12),
       cut=st.integers(0, 3), chunked=st.booleans())
def test_episode_codes_are_the_dictionary_codes(runs, cut, chunked):
    """`_codes` gives the codes and values of Arrow's dictionary encoding of the whole column
    (numbered in order of first appearance), for a value that comes back after another, a
    sliced or chunked column, one row, none."""
    values = [v for v, n in runs for _ in range(n)]
    array = pa.array(values, pa.string()).slice(min(cut, len(values)))
    column = pa.chunked_array([array.slice(0, len(array) // 2), array.slice(len(array) // 2)],
                              pa.string()) if chunked else array
    codes, ids = segments._codes(column)
    encoded = array.dictionary_encode()
    assert codes.dtype == np.int64 and ids.dtype.kind == "U"
    assert codes.tolist() == encoded.indices.to_pylist()
    assert ids.tolist() == encoded.dictionary.to_pylist()
    assert ids.dtype == np.array(encoded.dictionary.to_pylist(), dtype=np.str_).dtype
