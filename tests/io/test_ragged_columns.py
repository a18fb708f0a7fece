"""LLM steps (ragged token lists, modalities) checked on Arrow columns (`raggedcols`) = the record
path, and the token batch built from a file's columns = the one built from its step objects.

A JSON Lines file of `LLMStep` records is read into Arrow columns (`arrowlines`) and checked by
`RaggedPlan.check`; its Parquet twin's record batches too. Each case is a clean file with one
broken line among clean ones: the columns must take the clean file and refuse the broken one,
and the report with the fast paths on must equal the report with them off. `read_token_columns`
and `collate_token_columns` must give `collate_tokens(read_steps(...))` exactly, or its error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from fastpaths import fast_paths, report_both_ways
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import ContractError, MissingFieldError
from gyre_contract.core._models import RolloutStep
from gyre_contract.io import _arrowlines as arrowlines
from gyre_contract.io import _raggedcols as raggedcols
from gyre_contract.io._raggedcols import ragged_plan
from gyre_contract.io._reading import numbered_steps, read_steps
from gyre_contract.io._tokencolumns import read_token_columns
from gyre_contract.pinned import CartPoleStep, LLMStep
from gyre_contract.trainer._tokens import collate_token_columns, collate_tokens

pa = pytest.importorskip("pyarrow")


pytestmark = pytest.mark.usefixtures("fast_paths_on")
"""These tests are about the fast paths: on here even when CI runs with GYRE_FAST_PATHS=0."""


@pytest.fixture
def taken(monkeypatch) -> list[bool]:
    """Per block `RaggedPlan.check` was given: whether it took it."""
    found: list[bool] = []
    check = raggedcols.RaggedPlan.check

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        block = check(self, *args, **kwargs)
        found.append(block is not None)
        return block

    monkeypatch.setattr(raggedcols.RaggedPlan, "check", spy)
    return found


def completion(i: int, prompt: int = 5, response: int = 3, **fields: Any) -> dict[str, Any]:
    action = [100 + i + k for k in range(response)]
    return {"observation": {"token_ids": list(range(1, prompt + 1)), "text": "2+2="},
            "action": action, "logprob": [-0.5] * response, "ref_logprob": [-0.25] * response,
            "reward": float(i % 2), "step": 0, "episode_id": f"c{i}", "group_id": f"g{i // 4}",
            "terminated": True, "truncated": False, "policy_version": 1, **fields}


def line(i: int = 5, **fields: Any) -> bytes:
    return orjson.dumps(completion(i, **fields))


CLEAN = [line(i, prompt=3 + i % 5, response=1 + i % 7) for i in range(12)]
AT = 5


def write(tmp_path: Path, lines: list[bytes], name: str = "llm.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def both_ways(path: Path, model: type = LLMStep) -> dict[str, Any]:
    return report_both_ways(path, model)


def test_a_plan_for_ragged_models_only():
    assert ragged_plan(LLMStep) is not None
    assert ragged_plan(RolloutStep) is None  # a free observation: bound per file, or records
    assert ragged_plan(CartPoleStep) is None  # it has a plan of fixed shapes (`fastfile`)
    with fast_paths(False):
        assert ragged_plan(LLMStep) is None


def test_the_columns_take_a_clean_file(tmp_path, taken):
    found = both_ways(write(tmp_path, CLEAN))
    assert found["holds"] and taken == [True]
    assert any(f["name"] == "observation.token_ids" for f in found["fields"])


CASES = {
    "logprob shorter than the action": line(logprob=[-0.5, -0.5]),
    "ref_logprob longer than the action": line(ref_logprob=[-0.5] * 4),
    "loss_mask of another length": line(loss_mask=[True]),
    "next prompt of another length": line(next_observation={"token_ids": [1, 2]}),
    "null text": line(observation={"token_ids": [1], "text": None}),
    "text not a string": line(observation={"token_ids": [1], "text": 5}),
    "no token ids": line(observation={"text": "x"}),
    "an unknown modality": line(observation={"token_ids": [1], "image": [1]}),
    "observation a list": line(observation=[1, 2]),
    "action a scalar": line(action=7, logprob=-0.5, ref_logprob=-0.5),
    "a float token id": line(action=[1, 2.5, 3]),
    "a bool token id": line(action=[1, True, 3]),
    "a token id beyond 64 bits": line(action=[1, 2, 3]).replace(b"[1,2,3]",
                                                                  b"[1,2,18446744073709551616]"),
    "a null token id": line(action=[1, None, 3]),
    "positive logprob": line(logprob=[-0.5, 0.5, -0.5]),
    "positive ref_logprob": line(ref_logprob=[-0.5, 0.5, -0.5]),
    "logprob beyond float32's exact range": line(logprob=[-0.5, -16777217, -0.5]),
    "empty group id": line(group_id=""),
    "empty episode id": line(episode_id=""),
    "info": line(info={"seed": 1}),
    "null optional field": line(value=None),
    "missing reward": orjson.dumps({k: v for k, v in completion(AT).items() if k != "reward"}),
    "NaN in logprob": line().replace(b'"logprob":[-0.5,', b'"logprob":[NaN,'),
    "duplicate key in the observation": line().replace(b'{"token_ids":',
                                                       b'{"text":"a","token_ids":'),
    "blank line": b"",
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_block_it_cannot_take_exactly_steps_aside(tmp_path, case, taken):
    lines = [*CLEAN[:AT], CASES[case], *CLEAN[AT + 1:]]
    both_ways(write(tmp_path, lines))
    assert taken in ([], [False]), case  # refused (or not readable as columns at all)


def test_a_step_after_its_end_is_the_record_paths_report(tmp_path, taken, monkeypatch):
    """The episode rules on a block of ragged records: the columns hold, the tracker refuses
    the block (`EpisodeTracker.add_columns`), the records explain."""
    from gyre_contract.core._validate import EpisodeTracker

    added = []
    add_columns = EpisodeTracker.add_columns

    def spy(self: Any, *args: Any, **kwargs: Any) -> bool:
        added.append(add_columns(self, *args, **kwargs))
        return added[-1]

    monkeypatch.setattr(EpisodeTracker, "add_columns", spy)
    lines = [*CLEAN[:AT], line(0), *CLEAN[AT + 1:]]  # episode c0 again, after it ended
    found = both_ways(write(tmp_path, lines))
    assert not found["holds"] and taken == [True] and added == [False]
    both_ways(write(tmp_path, CLEAN))
    assert added[-1] is True


# -- Parquet twins ---------------------------------------------------------------------------

def parquet_twin(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    from gyre_contract.io._parquet import write_parquet

    path = tmp_path / "llm.parquet"
    write_parquet(path, records, LLMStep)
    return path


def test_a_parquet_file_of_completions_is_checked_on_columns(tmp_path, taken):
    records = [orjson.loads(raw) for raw in CLEAN]
    found = both_ways(parquet_twin(tmp_path, records))
    assert found["holds"] and taken and all(taken)
    assert found == both_ways(write(tmp_path, CLEAN))


def test_a_parquet_batch_with_a_broken_row_goes_row_by_row(tmp_path, taken):
    records = [orjson.loads(raw) for raw in CLEAN]
    records[AT]["logprob"] = [-0.5] * (len(records[AT]["action"]) + 1)
    table = pa.Table.from_pylist(records)
    path = tmp_path / "foreign.parquet"
    import pyarrow.parquet as pq

    pq.write_table(table, path)
    found = both_ways(path)
    assert not found["holds"]


# -- token batches from columns = from step objects ------------------------------------------

WANTED = ["logprob", "ref_logprob", "reward", "episode_id", "group_id", "policy_version",
          "step", "observation.text"]


def from_objects(path: Path, fields: list[str]) -> Any:
    with fast_paths(False):
        numbered = list(numbered_steps(path, LLMStep))
    try:
        return collate_tokens([s for _, s in numbered], fields=fields,
                              lines=[n for n, _ in numbered])
    except (ContractError, MissingFieldError) as err:
        return type(err).__name__, str(err)


def from_columns(path: Path, fields: list[str]) -> Any:
    found = read_token_columns(path, LLMStep)
    assert found is not None
    try:
        out = collate_token_columns(found, fields=fields)
    except (ContractError, MissingFieldError) as err:
        return type(err).__name__, str(err)
    assert out is not None
    return out


def assert_same(a: Any, b: Any) -> None:
    if isinstance(a, tuple) or isinstance(b, tuple):
        assert a == b
        return
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@st.composite
def completion_files(draw: Any) -> list[bytes]:
    """Completions (single turns, and multi-turn episodes) with optional fields on some steps:
    a loss mask, text, a value, log-probs; now and then a broken one."""
    lines = []
    for e in range(draw(st.integers(1, 6))):
        turns = draw(st.integers(1, 3))
        for t in range(turns):
            response = draw(st.integers(0, 6))
            record = completion(e, prompt=draw(st.integers(0, 5)), response=response,
                                episode_id=f"e{e}", step=t, terminated=t == turns - 1)
            if draw(st.booleans()):
                record["loss_mask"] = draw(st.lists(st.booleans(), min_size=response,
                                                    max_size=response))
            if draw(st.integers(0, 4)) == 0:
                del record["observation"]["text"]
            if draw(st.integers(0, 6)) == 0:
                del record["logprob"]
            if draw(st.integers(0, 3)) == 0:
                record["value"] = draw(st.floats(-5, 5).map(lambda x: round(x, 3)))
            if draw(st.integers(0, 15)) == 0:
                record["ref_logprob"] = [0.5] * response
            lines.append(orjson.dumps(record))
    return lines


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=completion_files(), parquet=st.booleans(),
       fields=st.sampled_from([WANTED, ["reward"], ["value", "loss_mask"], ["token_reward"]]))
def test_token_columns_collate_as_step_objects(tmp_path, lines, parquet, fields):
    path = write(tmp_path, lines)
    if parquet:
        try:
            path = parquet_twin(tmp_path, [orjson.loads(raw) for raw in lines])
        except ContractError:
            return
    try:
        with fast_paths(False):
            list(read_steps(path, LLMStep))
    except ContractError as err:
        with pytest.raises(ContractError) as columns_err:
            read_token_columns(path, LLMStep)
        assert str(columns_err.value) == str(err)
        return
    assert_same(from_columns(path, fields), from_objects(path, fields))


def test_the_completion_corpus_shape(tmp_path):
    """Ragged prompts and responses of realistic lengths, groups of 8: one block on columns."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(64):
        record = completion(i, prompt=int(rng.integers(32, 257)),
                            response=int(rng.integers(64, 1025)), group_id=f"g{i // 8}")
        lines.append(orjson.dumps(record))
    path = write(tmp_path, lines)
    assert_same(from_columns(path, WANTED), from_objects(path, WANTED))


def test_a_file_of_another_model_is_read_as_steps(tmp_path):
    assert read_token_columns(write(tmp_path, CLEAN), RolloutStep) is None
    assert arrowlines.reader_for(ragged_plan(LLMStep)) is not None
