"""Parquet rollout files: round trip, the Arrow schema and its x-gyre metadata, one problem per
disagreeing column, and the same verdicts as JSON Lines on the same data."""

from __future__ import annotations

import json

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (extra 'parquet')")
pq = pytest.importorskip("pyarrow.parquet")

from gyre_contract.core._errors import ContractError, InputError, SchemaError  # noqa: E402
from gyre_contract.core._models import RolloutStep  # noqa: E402
from gyre_contract.core._validate import validate_step  # noqa: E402
from gyre_contract.io._parquet import (  # noqa: E402
    is_parquet,
    read_parquet_episodes,
    read_parquet_steps,
    to_arrow_schema,
    validate_parquet,
    write_parquet,
)
from gyre_contract.io._validation import validate_file  # noqa: E402
from gyre_contract.io._writer import write_steps  # noqa: E402


def cartpole_episode(eid: str, n: int, *, version: int = 0) -> list[dict]:
    return [{"observation": [0.1 * i, -0.2, 0.03, 0.4], "action": i % 2, "logprob": -0.69,
             "value": 0.5, "reward": 1.0, "step": i, "episode_id": eid,
             "terminated": i == n - 1, "truncated": False, "policy_version": version,
             "info": {"env": "CartPole-v1", "seed": i}}
            for i in range(n)]


def llm_records() -> list[dict]:
    return [
        {"observation": {"token_ids": [101, 2023, 2003], "text": "2+2="}, "action": [1016, 102],
         "logprob": [-0.1, -0.05], "reward": 1.0, "step": 0, "episode_id": "p/0",
         "terminated": True, "truncated": False, "policy_version": 3},
        {"observation": {"token_ids": [7, 8, 9, 10, 11]}, "action": [5], "logprob": [-0.3],
         "reward": 0.0, "step": 0, "episode_id": "p/1", "terminated": True, "truncated": False,
         "policy_version": 3},
    ]


def same_record(a: dict, b: dict) -> None:
    """Equal records; a float32 scalar read back is the float32 nearest the value written."""
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            same_record(a[key], b[key])
        elif isinstance(a[key], float):
            assert np.float32(a[key]) == np.float32(b[key])
        else:
            np.testing.assert_array_equal(a[key], b[key])


# -- round trip ----------------------------------------------------------------------------------

def test_cartpole_round_trip_gives_the_validated_steps_back(tmp_path, cartpole_model):
    records = cartpole_episode("a", 5) + cartpole_episode("b", 3)
    path = tmp_path / "r.parquet"
    assert write_parquet(path, records, cartpole_model) == 8
    steps = list(read_parquet_steps(path, cartpole_model))
    assert len(steps) == 8
    for record, step in zip(records, steps):
        same_record(validate_step(record, cartpole_model).to_record(), step.to_record())
    assert steps[0].observation.dtype == np.float32 and steps[0].observation.flags.writeable
    assert steps[2].info == {"env": "CartPole-v1", "seed": 2}


def test_llm_round_trip_keeps_modalities_varying_lengths_and_absent_fields(tmp_path, llm_model):
    path = tmp_path / "llm.parquet"
    write_parquet(path, llm_records(), llm_model)
    first, second = read_parquet_steps(path, llm_model)
    assert first.observation.text == "2+2=" and second.observation.text is None
    assert second.observation.token_ids.tolist() == [7, 8, 9, 10, 11]
    assert first.action.tolist() == [1016, 102] and second.logprob.dtype == np.float32
    assert first.value is None and "value" not in second.to_record()


def test_models_are_written_under_their_own_class(tmp_path, cartpole_model):
    steps = [validate_step(r, cartpole_model) for r in cartpole_episode("a", 3)]
    path = tmp_path / "m.parquet"
    write_parquet(path, steps, fsync=True)
    assert pq.read_schema(path).metadata[b"x-gyre-model"] == b"CartPoleStep"


def test_episodes_come_back_as_columns(tmp_path, cartpole_model):
    path = tmp_path / "e.parquet"
    write_parquet(path, cartpole_episode("a", 4) + cartpole_episode("b", 2), cartpole_model)
    a, b = read_parquet_episodes(path, cartpole_model)
    assert (a.episode_id, len(a), b.episode_id, len(b)) == ("a", 4, "b", 2)
    assert a.columns["observation"].shape == (4, 4) and a.lines == [1, 2, 3, 4]


def test_extension_decides_the_format():
    assert is_parquet("shards/a.parquet") and is_parquet("A.PQ")
    assert not is_parquet("a.jsonl")


# -- the Arrow schema ------------------------------------------------------------------------

def test_arrow_schema_of_a_pinned_model_carries_the_x_gyre_facts(cartpole_model):
    schema = to_arrow_schema(cartpole_model)
    obs = schema.field("observation")
    assert obs.type == pa.list_(pa.float32(), 4) and not obs.nullable
    assert obs.metadata[b"x-gyre-dtype"] == b"float32"
    assert json.loads(obs.metadata[b"x-gyre-shape"]) == [4]
    assert obs.metadata[b"x-gyre-role"] == b"observation"
    assert schema.field("action").type == pa.int64()
    assert schema.field("logprob").type == pa.float32() and schema.field("logprob").nullable
    assert schema.field("episode_id").type == pa.string()
    assert schema.field("info").metadata[b"x-gyre-encoding"] == b"json"
    # v1.1 token fields beside a scalar action: one value each, as the action
    assert [schema.field(w).type for w in ("ref_logprob", "loss_mask", "token_reward",
                                            "group_id")] == [pa.float32(), pa.bool_(),
                                                             pa.float32(), pa.string()]
    assert schema.metadata == {b"x-gyre-kind": b"rollout_step", b"x-gyre-version": b"1.1.0",
                               b"x-gyre-model": b"CartPoleStep", b"x-gyre-varying-dims": b"[]"}


def test_arrow_schema_uses_lists_for_symbolic_dims_and_structs_for_modalities(llm_model):
    schema = to_arrow_schema(llm_model)
    assert schema.field("action").type == pa.list_(pa.int64())
    assert json.loads(schema.field("action").metadata[b"x-gyre-shape"]) == ["A"]
    assert [schema.field(w).type for w in ("ref_logprob", "loss_mask", "token_reward")] == [
        pa.list_(pa.float32()), pa.list_(pa.bool_()), pa.list_(pa.float32())]
    obs = schema.field("observation").type
    assert obs == pa.struct([pa.field("token_ids", pa.list_(pa.int64()), nullable=False),
                             pa.field("text", pa.string())])
    assert schema.field("observation").metadata[b"x-gyre-modalities"] == b"PromptObservation"
    assert json.loads(schema.metadata[b"x-gyre-varying-dims"]) == ["P", "A"]


def test_unpinned_model_needs_a_sample_and_says_which_fields():
    with pytest.raises(SchemaError) as info:
        to_arrow_schema(RolloutStep)
    assert str(info.value) == (
        "no Arrow schema for RolloutStepV1: observation: an unpinned observation (float32 "
        "[*obs] or modalities) has no fixed layout; pin the model or pass sample=; action: "
        "dtype is one of int64 or float32; pin it or pass sample=; next_observation: an "
        "unpinned observation (float32 [*obs] or modalities) has no fixed layout; pin the "
        "model or pass sample=")
    schema = to_arrow_schema(RolloutStep, sample=cartpole_episode("a", 1)[0])
    assert schema.field("observation").type == pa.list_(pa.float32())
    assert schema.field("next_observation").type == pa.list_(pa.float32())
    assert schema.field("action").type == pa.int64()


# -- files that disagree with the contract -----------------------------------------------------

def test_a_disagreeing_arrow_schema_is_one_problem_per_column(tmp_path, cartpole_model):
    table = pa.table({
        "observation": pa.array([[[0.0] * 4]], pa.list_(pa.list_(pa.float64()))),
        "action": pa.array(["left"]),
        "next_observation": pa.array([[0.0] * 3], pa.list_(pa.float32(), 3)),
        "step": pa.array([0]), "episode_id": pa.array(["a"]), "terminated": pa.array([True]),
        "truncated": pa.array([False]), "policy_version": pa.array([0]),
        "trunctaed": pa.array([False]),
    })
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    expected = [
        "observation: column has the wrong rank: expected float32[4], got float64[?, ?]",
        "action: column has the wrong dtype: expected int64, got string",
        "next_observation: column has the wrong size: expected float32[4], got float32[3]",
        "reward: missing required column: expected float32, got no such column",
        "trunctaed: unknown column: expected only the fields of CartPoleStep (did you mean "
        "'truncated'?), got a column of bool",
    ]
    report = validate_parquet(path, cartpole_model)
    assert [str(p) for p in report.problems()] == expected
    assert (report.lines, report.records, report.episodes, report.exit_code()) == (1, 0, None, 1)
    with pytest.raises(ContractError) as info:
        list(read_parquet_steps(path, cartpole_model))
    assert [str(p) for p in info.value.problems] == expected


def test_another_record_kind_is_named(tmp_path, cartpole_model):
    schema = to_arrow_schema(cartpole_model).with_metadata({b"x-gyre-kind": b"train_batch"})
    path = tmp_path / "k.parquet"
    pq.write_table(schema.empty_table(), path)
    report = validate_parquet(path, cartpole_model)
    assert [str(p) for p in report.problems()] == [
        "file holds another kind of record: expected x-gyre-kind 'rollout_step', got "
        "'train_batch'",
        "no records: expected at least one step record, got an empty file"]


def test_wider_integer_and_float_columns_are_checked_value_by_value(tmp_path, cartpole_model):
    record = cartpole_episode("a", 1)[0]
    table = pa.table({k: [json.dumps(v) if k == "info" else v] for k, v in record.items()})
    assert table.schema.field("reward").type == pa.float64()
    path = tmp_path / "wide.parquet"
    pq.write_table(table, path)
    assert validate_parquet(path, cartpole_model).ok


def test_null_in_a_required_column_is_the_null_json_would_be(tmp_path, cartpole_model):
    records = cartpole_episode("a", 3)
    records[2]["reward"] = None
    table = pa.table({k: [r[k] for r in records] for k in records[0] if k != "info"})
    pq.write_table(table, tmp_path / "n.parquet")
    (tmp_path / "n.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    parquet = validate_parquet(tmp_path / "n.parquet", cartpole_model)
    jsonl = validate_file(tmp_path / "n.jsonl", cartpole_model)
    assert [str(p) for p in parquet.problems()] == [
        "line 3: reward: null is not allowed: expected float32, got null"]
    assert [str(p) for p in jsonl.problems()] == [str(p) for p in parquet.problems()]


def test_not_a_parquet_file_is_an_input_error(tmp_path, cartpole_model):
    path = tmp_path / "x.parquet"
    path.write_text("not parquet")
    with pytest.raises(InputError, match=r"^cannot read .*x\.parquet as Parquet: "):
        validate_parquet(path, cartpole_model)
    with pytest.raises(InputError, match=r"^no such file: "):
        validate_parquet(tmp_path / "missing.parquet", cartpole_model)


def test_a_page_whose_bytes_changed_on_disk_is_refused_naming_the_file(tmp_path, cartpole_model):
    """Once written without page checksums and read without checking them: flipped bytes in a
    data page changed observation rows and `validate` said the file holds. Now every page has a
    CRC, checked on read: exit 2, one line naming the file."""
    import io

    from gyre_contract.cli._app import run

    rng = np.random.default_rng(7)
    records = [dict(r, observation=rng.normal(size=4).tolist())
               for r in cartpole_episode("a", 263)]
    path = tmp_path / "good.parquet"
    write_parquet(path, records, cartpole_model)
    assert validate_file(path, cartpole_model).ok
    meta = pq.ParquetFile(path).metadata
    assert all(meta.row_group(0).column(i).path_in_schema for i in range(meta.num_columns))
    chunk = next(meta.row_group(0).column(i) for i in range(meta.num_columns)
                 if meta.row_group(0).column(i).path_in_schema.startswith("observation"))
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    end = start + chunk.total_compressed_size
    clean = pq.read_table(path).column("observation").to_pylist()
    data, bad = path.read_bytes(), tmp_path / "flipped.parquet"
    for pos in range(end - 1, start, -1):  # the first flip a reader that does not verify takes
        flipped = bytearray(data)
        flipped[pos] ^= 0x01
        bad.write_bytes(flipped)
        try:
            silent = pq.ParquetFile(bad).read().column("observation").to_pylist()
        except (pa.ArrowException, OSError):
            continue
        if silent != clean:
            break
    else:
        pytest.fail("no flipped byte changed the observations silently")
    with pytest.raises(InputError, match=r"^cannot read .*flipped\.parquet .*checksum"):
        validate_file(bad, cartpole_model)
    with pytest.raises(InputError, match="checksum"):
        list(read_parquet_episodes(bad, cartpole_model))
    out, err = io.StringIO(), io.StringIO()
    assert run(["validate", str(bad), "--model", "models:CartPoleStep"], out, err) == 2
    assert out.getvalue() == "" and err.getvalue().count("\n") == 1
    assert str(bad) in err.getvalue() and "checksum" in err.getvalue()


def test_writing_refuses_none_and_unknown_keys_before_writing(tmp_path, cartpole_model):
    records = cartpole_episode("a", 2)
    records[1]["value"] = None
    records[1]["trunctaed"] = True
    path = tmp_path / "w.parquet"
    with pytest.raises(ContractError) as info:
        write_parquet(path, records, cartpole_model)
    assert [str(p) for p in info.value.problems] == [
        "steps[1].value: None cannot be written: expected a value (null is never valid in a "
        "record), got None",
        "steps[1].trunctaed: unknown field cannot be written: expected a field of the model (a "
        "column of the file), got bool true"]
    assert not path.exists() and not (tmp_path / "w.parquet.tmp").exists()


def test_a_value_the_column_cannot_hold_names_its_row(tmp_path, cartpole_model):
    records = cartpole_episode("a", 3)
    records[2]["observation"] = [0.0, 0.0, 0.0]
    with pytest.raises(ContractError) as info:
        write_parquet(tmp_path / "w.parquet", records, cartpole_model)
    (problem,) = info.value.problems
    assert problem.path == "steps[2].observation" and problem.expected == "float32[4]"
    assert problem.got == "list[3]"
    assert problem.message.startswith("cannot be written as this column (")


def test_a_scalar_log_prob_after_per_token_ones_names_its_rows_and_why(tmp_path):
    """Under the unpinned model `logprob`/`ref_logprob` may be [] or the action's dims in one
    JSON Lines file; a Parquet column has one layout, settled by the first record: the rows of
    the other rank are refused, each named, with the reason and the way out."""
    def record(i, logprob, ref):
        return {"observation": [0.1, 0.2], "action": [1, 2], "logprob": logprob,
                "ref_logprob": ref, "reward": 0.0, "step": i, "episode_id": "e",
                "terminated": i == 2, "truncated": False, "policy_version": 0}
    records = [record(0, [-0.1, -0.2], [-0.1, -0.2]), record(1, -0.3, -0.3),
               record(2, [-0.1, -0.2], -0.5)]
    for r in records:
        validate_step(r)  # every record is valid on its own
    with pytest.raises(ContractError) as info:
        write_parquet(tmp_path / "w.parquet", records)
    found = info.value.problems
    assert [p.path for p in found] == ["steps[1].logprob", "steps[1].ref_logprob",
                                       "steps[2].ref_logprob"]
    assert found[0].got == "float -0.3" and found[0].expected == "float32[?]"
    assert "steps[0]" in found[0].message and "one layout" in found[0].message
    assert not (tmp_path / "w.parquet").exists()


# -- same verdicts as JSON Lines -----------------------------------------------------------------

def planted_defects() -> list[dict]:
    """Records that parse in both formats but break record and episode rules."""
    records = cartpole_episode("a", 6) + cartpole_episode("b", 4, version=2)
    records += cartpole_episode("c", 3, version=1)[:2]  # open at the end
    records[2]["step"] = 7  # a step gap (two problems: 7 after 1, then 5 after 7)
    records[3]["logprob"] = 0.5  # positive log-probability of a discrete action
    records[4]["observation"] = [0.0, 0.0, 0.0]  # wrong shape
    records[8]["policy_version"] = 1  # policy version decreases within b
    records.insert(10, dict(records[9], step=4))  # a step after b terminated
    return records


@pytest.mark.parametrize("require_complete", [False, True])
def test_parquet_and_jsonl_give_identical_reports(tmp_path, cartpole_model, require_complete):
    records = planted_defects()
    write_steps(tmp_path / "d.jsonl", records)
    write_parquet(tmp_path / "d.parquet", records, RolloutStep, rows_per_group=4)
    jsonl = validate_file(tmp_path / "d.jsonl", cartpole_model, require_complete=require_complete)
    parquet = validate_parquet(tmp_path / "d.parquet", cartpole_model,
                               require_complete=require_complete)
    a, b = jsonl.to_dict(), parquet.to_dict()
    assert a.pop("path").endswith("d.jsonl") and b.pop("path").endswith("d.parquet")
    assert a == b
    assert not parquet.ok and (parquet.lines, parquet.steps) == (13, 11)
    lines = {p.line for p in parquet.problems()}
    assert {3, 4, 5, 9, 11} <= lines and (13 in lines) == require_complete


def test_parquet_and_jsonl_agree_on_llm_records(tmp_path, llm_model):
    records = llm_records()
    records[1]["logprob"] = [-0.3, -0.1]  # two log-probs for one token
    write_steps(tmp_path / "l.jsonl", records)
    write_parquet(tmp_path / "l.parquet", records, llm_model)
    a = validate_file(tmp_path / "l.jsonl", llm_model).to_dict()
    b = validate_parquet(tmp_path / "l.parquet", llm_model).to_dict()
    a.pop("path"), b.pop("path")
    assert a == b and not a["holds"]


def test_cli_validate_reads_a_parquet_file(tmp_path):
    import io
    from pathlib import Path

    from gyre_contract.cli._app import run

    records = planted_defects()
    write_steps(tmp_path / "d.jsonl", records)
    write_parquet(tmp_path / "d.parquet", records, RolloutStep)
    texts = []
    for name in ("d.jsonl", "d.parquet"):
        out, err = io.StringIO(), io.StringIO()
        code = run(["validate", str(tmp_path / name), "--model", "models:CartPoleStep"], out, err)
        assert (code, err.getvalue()) == (1, "")
        texts.append(out.getvalue().split("\n", 1)[1])  # all but the header naming the file
    assert texts[0] == texts[1]
    schema = Path(__file__).resolve().parents[2] / "schemas" / "rollout_step.v1.json"
    out, err = io.StringIO(), io.StringIO()
    code = run(["validate", str(tmp_path / "d.parquet"), "--schema", str(schema)], out, err)
    assert (code, err.getvalue()) == (2, "error: --schema checks JSON Lines records; check a "
                                         "Parquet file against a model (--model)\n")


def test_rollout_functions_choose_parquet_by_extension(tmp_path, cartpole_model):
    from gyre_contract.io._reading import read_episodes, read_steps

    path = tmp_path / "r.parquet"
    assert write_steps(path, [validate_step(r, cartpole_model)
                              for r in cartpole_episode("a", 3)]) == 3
    assert pq.read_schema(path).metadata[b"x-gyre-model"] == b"CartPoleStep"
    assert [s.step for s in read_steps(path, cartpole_model)] == [0, 1, 2]
    (episode,) = read_episodes(path, cartpole_model)
    assert episode.columns["observation"].shape == (3, 4)
    with pytest.raises(InputError, match=r"^cannot append to a Parquet file: .*r\.parquet; "):
        write_steps(path, [], append=True)


# -- one verdict for empty lists, nulls and what the writer would change ------------------------

def test_an_empty_generation_is_read_back_as_written(tmp_path, llm_model, monkeypatch):
    """An LLM sampler's generation of 0 tokens (an immediate stop): `validate_step` took it as a
    numpy array, `write_steps` wrote `"action":[]` and `validate` refused what it wrote (`not an
    integer ... got float64[0]`). Now one verdict on every path: JSON Lines both ways, the
    Parquet file `write_parquet` writes, one another tool writes (`[]` with no type: list<null>),
    and the CLI."""
    import io

    from gyre_contract.cli._app import run

    empty = dict(llm_records()[0], action=np.array([], np.int64), logprob=np.array([], np.float32),
                 observation={"token_ids": np.array([], np.int64)})
    steps = [validate_step(r, llm_model) for r in (empty, llm_records()[1])]
    write_steps(tmp_path / "e.jsonl", steps)
    assert b'"action":[]' in (tmp_path / "e.jsonl").read_bytes()
    write_parquet(tmp_path / "e.parquet", steps, llm_model)
    records = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    pq.write_table(pa.table({k: [r.get(k) for r in records] for k in records[0]}),
                   tmp_path / "foreign.parquet")
    assert pq.read_schema(tmp_path / "foreign.parquet").field("logprob").type \
        == pa.list_(pa.float64())
    pq.write_table(pa.table({k: [records[0][k]] for k in records[0]}), tmp_path / "one.parquet")
    assert pq.read_schema(tmp_path / "one.parquet").field("action").type == pa.list_(pa.null())
    for switch in ("1", "0"):
        monkeypatch.setenv("GYRE_FAST_PATHS", switch)
        for name in ("e.jsonl", "e.parquet", "foreign.parquet", "one.parquet"):
            report = validate_file(tmp_path / name, llm_model)
            assert report.ok, (name, [str(p) for p in report.problems()])
        back = next(iter(read_parquet_steps(tmp_path / "one.parquet", llm_model)))
        assert back.action.dtype == np.int64 and back.action.shape == (0,)
        out, err = io.StringIO(), io.StringIO()
        assert run(["validate", str(tmp_path / "e.jsonl"), "--model",
                    "gyre_contract.pinned:LLMStep"], out, err) == 0, out.getvalue()


def test_a_null_is_refused_and_an_absent_field_is_absent_in_both_formats(tmp_path, cartpole_model):
    """JSON can say a field is absent (no key) or null; Parquet only that a cell is null, which
    is how it says absent (`write_parquet` writes a null cell for every absent optional field).
    So: a missing key and a null cell in an optional column are the same (absent, valid); JSON
    `null` is refused, and so is `None` by both writers, so that no twin of it is ever written;
    a null in a required column is refused in both formats
    (docs/rollout-files.md#nulls-absent-fields-and-empty-lists)."""
    records = cartpole_episode("a", 3)
    absent = [dict(r) for r in records]
    del absent[1]["logprob"]
    write_steps(tmp_path / "absent.jsonl", absent)
    write_parquet(tmp_path / "absent.parquet", absent, cartpole_model)
    assert pq.read_table(tmp_path / "absent.parquet").column("logprob").null_count == 1
    assert validate_file(tmp_path / "absent.jsonl", cartpole_model).ok
    assert validate_file(tmp_path / "absent.parquet", cartpole_model).ok
    null = [dict(r) for r in records]
    null[1]["logprob"] = None
    (tmp_path / "null.jsonl").write_text("".join(json.dumps(r) + "\n" for r in null))
    assert [str(p) for p in validate_file(tmp_path / "null.jsonl", cartpole_model).problems()] \
        == ["line 2: logprob: null is not allowed: expected float32, got null"]
    for write in (write_steps, lambda path, steps: write_parquet(path, steps, cartpole_model)):
        with pytest.raises(ContractError, match=r"steps\[1\]\.logprob: None cannot be written"):
            write(tmp_path / "w.parquet", null)
    table = pa.table({k: [r.get(k) for r in null] for k in null[0] if k != "info"})
    pq.write_table(table, tmp_path / "null.parquet")  # another tool: the null is a null cell
    assert validate_file(tmp_path / "null.parquet", cartpole_model).ok  # read as absent


@pytest.mark.parametrize(("change", "why"), [
    ({"action": 1.5}, "not an integer"),  # once written as 1
    ({"reward": True}, "a bool is not a number"),  # once written as 1.0
    ({"reward": 3.5e38}, "out of range for the column's float width: it would be written as an "
                         "infinity"),  # once inf, read back as `not finite`
    ({"observation": [0.1, 0.2, 0.3, -1e39]}, "out of range for the column's float width"),
    ({"reward": 2**24 + 1}, "Integer value 16777217 is outside of the range exactly "
                            "representable"),
])
def test_write_parquet_refuses_what_its_column_would_change(tmp_path, cartpole_model, change, why):
    """`write_parquet` writes dicts as they are, and pyarrow changed some on the way into their
    column, silently: the Parquet file then held a valid record where the JSON Lines file of the
    same records does not. Refused now, naming the row, before anything is written."""
    records = cartpole_episode("a", 3)
    records[2].update(change)
    with pytest.raises(ContractError) as info:
        write_parquet(tmp_path / "w.parquet", records, cartpole_model)
    (problem,) = info.value.problems
    assert problem.path == f"steps[2].{next(iter(change))}"
    assert problem.message.startswith(f"cannot be written as this column ({why}")
    assert not (tmp_path / "w.parquet").exists()
    write_steps(tmp_path / "w.jsonl", records)
    assert not validate_file(tmp_path / "w.jsonl", cartpole_model).ok


def test_an_unpinned_column_keeps_the_first_records_dtype_and_modalities(tmp_path):
    """The unpinned model settles a column from the first record: an integer action after float
    ones (JSON Lines keeps it int64, the column would make it float32) and a modality the first
    record lacks (once dropped silently) are refused, each named."""
    base = {"observation": [0.1, 0.2], "reward": 0.0, "step": 0, "terminated": True,
            "truncated": False, "policy_version": 0}
    floats = [dict(base, action=[0.5], episode_id="a"), dict(base, action=[1], episode_id="b")]
    with pytest.raises(ContractError) as info:
        write_parquet(tmp_path / "w.parquet", floats)
    assert [p.path for p in info.value.problems] == ["steps[1].action"]
    assert "one dtype, here float32 as settled by steps[0]" in info.value.problems[0].message
    texts = [dict(base, action=[1], episode_id="a", observation={"token_ids": [1]}),
             dict(base, action=[1], episode_id="b", observation={"token_ids": [2], "text": "x"})]
    with pytest.raises(ContractError) as info:
        write_parquet(tmp_path / "w.parquet", texts)
    assert str(info.value).startswith("steps[1].observation: cannot be written as this column "
                                      "('text' is not a field of the column: it would be dropped)")
