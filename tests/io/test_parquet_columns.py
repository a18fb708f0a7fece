"""Parquet checked on its columns (`parquetcols`) = Parquet checked row by row.

Every defect a Parquet file can hold (a null where a value is required, a null inside a list, a
NaN, an empty episode id, a positive logprob for a discrete action, a step gap, a step after the
episode ended, an `info` value) gives the same report with the columnar path on and off
(`GYRE_FAST_PATHS=0`), for a pinned and the unpinned model, with batches small enough that one
file mixes both paths; a clean file is checked without a single row validated.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (extra 'parquet')")
import pyarrow.parquet as pq  # noqa: E402
from test_fast_file import both_ways, cartpole_lines  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))

import orjson  # noqa: E402

from gyre_contract.core._models import RolloutStep  # noqa: E402
from gyre_contract.io._parquet import write_parquet  # noqa: E402
from gyre_contract.io._reading import read_episodes  # noqa: E402
from gyre_contract.io._validation import validate_file  # noqa: E402
from gyre_contract.trainer._collation import collate  # noqa: E402
from gyre_contract.trainer._flatcollate import collate_file  # noqa: E402


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    import gyre_contract.io._parquet as parquet

    monkeypatch.setattr(parquet, "COLUMN_BATCH_ROWS", 16)


def clean_table(base: dict, tmp_path: Path, model: Any) -> Any:
    records = [orjson.loads(raw) for raw in cartpole_lines(dict(base), episodes=14)]
    for record in records:  # the v1.1 fields too: one group per 4 episodes
        number = int(record["episode_id"].split("-")[1])
        record.update(group_id=f"g-{number // 4}", ref_logprob=-0.5)
    path = tmp_path / "clean.parquet"
    write_parquet(path, records, model)
    return pq.read_table(path)


def with_column(table: Any, name: str, change: Any) -> Any:
    values = table.column(name).to_pylist()
    change(values)
    field = table.schema.field(name)
    if None in values:
        field = field.with_nullable(True)  # a writer that did not declare it required
    column = pa.array(values, type=field.type)
    return table.set_column(table.schema.get_field_index(name), field, column)


def set_at(i: int, value: Any) -> Any:
    def change(values: list) -> None:
        values[i] = value
    return change


DEFECTS = {
    "clean": None,
    "null reward": ("reward", set_at(20, None)),
    "nan reward": ("reward", set_at(33, float("nan"))),
    "inf value": ("value", set_at(5, float("inf"))),
    "null in observation": ("observation", set_at(40, [0.1, None, 0.2, 0.3])),
    "nan in observation": ("observation", set_at(41, [0.1, float("nan"), 0.2, 0.3])),
    "empty episode id": ("episode_id", set_at(17, "")),
    "positive logprob": ("logprob", set_at(50, 0.25)),
    "step gap": ("step", set_at(12, 7)),
    "phantom": ("episode_id", set_at(60, "ep-0")),
    "null step": ("step", set_at(3, None)),
    "info": ("info", set_at(9, '{"seed": 3}')),
    "bad info": ("info", set_at(9, '{"seed": 3, "seed": 4}')),
    "next observation": ("next_observation", set_at(30, [0.5, 0.5, 0.5, 0.5])),
    "null logprob": ("logprob", set_at(31, None)),
    "empty group": ("group_id", set_at(26, "")),
    "null group": ("group_id", set_at(27, None)),
    "group versions": ("group_id", set_at(2, "g-3")),
    "positive ref logprob": ("ref_logprob", set_at(44, 0.5)),
}


def _defective(base: dict, tmp_path: Path, model: Any, defect: str) -> Path:
    table = clean_table(base, tmp_path, model)
    if DEFECTS[defect] is not None:
        name, change = DEFECTS[defect]
        table = with_column(table, name, change)
    path = tmp_path / "r.parquet"
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("model_name", ["pinned", "unpinned"])
@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_reports_do_not_depend_on_the_columnar_path(cartpole_record, cartpole_model, tmp_path,
                                                    monkeypatch, model_name, defect):
    model = cartpole_model if model_name == "pinned" else RolloutStep
    path = _defective(cartpole_record, tmp_path, cartpole_model, defect)
    for complete in (False, True):
        fast, normal = both_ways(monkeypatch, lambda c=complete: validate_file(
            path, model, require_complete=c).to_dict())
        assert fast == normal  # a NaN in a float32 list is float32[4] both ways
    if defect == "clean":
        assert fast["holds"]


@pytest.mark.parametrize("model_name", ["pinned", "unpinned"])
def test_a_clean_file_validates_no_row(cartpole_record, cartpole_model, tmp_path, monkeypatch,
                                       model_name):
    import gyre_contract.io._checking as checking

    model = cartpole_model if model_name == "pinned" else RolloutStep
    path = _defective(cartpole_record, tmp_path, cartpole_model, "clean")
    monkeypatch.setenv("GYRE_FAST_PATHS", "1")
    monkeypatch.setattr(checking, "validate_step", None)  # any row validated would fail
    assert validate_file(path, model).ok


@pytest.mark.parametrize("model_name", ["pinned", "unpinned"])
@pytest.mark.parametrize("max_len", [None, 4])
def test_parquet_collates_from_columns_as_episodes(cartpole_record, cartpole_model, tmp_path,
                                                   monkeypatch, model_name, max_len):
    monkeypatch.setenv("GYRE_FAST_PATHS", "1")
    model = cartpole_model if model_name == "pinned" else RolloutStep
    path = _defective(cartpole_record, tmp_path, cartpole_model, "info")
    fields = ["observation", "action", "reward", "value", "terminated", "truncated", "step"]
    found = collate_file(path, model, fields=fields, max_len=max_len)
    assert found is not None
    expected = collate(list(read_episodes(path, model)), fields=fields, max_len=max_len)
    batch, _ = found
    assert list(batch) == list(expected)
    for key in batch:
        assert batch[key].dtype == expected[key].dtype, key
        np.testing.assert_array_equal(batch[key], expected[key], err_msg=key)


@pytest.mark.parametrize("defect", ["clean", "longer observation", "next observation",
                                    "nan reward"])
def test_variable_lists_of_the_unpinned_writer(cartpole_record, tmp_path, monkeypatch, defect):
    """`write_parquet(..., RolloutStep)` writes the observation as a variable list: the length
    its first batch shows is bound, and a batch holding another length goes row by row."""
    import gyre_contract.io._checking as checking

    records = [orjson.loads(raw) for raw in cartpole_lines(dict(cartpole_record), episodes=14)]
    if defect == "longer observation":
        records[37]["observation"] = [0.0] * 5
    elif defect == "next observation":
        records[20]["next_observation"] = [0.5] * 4
    elif defect == "nan reward":
        records[21]["reward"] = float("nan")
    path = tmp_path / "r.parquet"
    write_parquet(path, records, RolloutStep)
    assert pa.types.is_list(pq.read_schema(path).field("observation").type)
    for complete in (False, True):
        fast, normal = both_ways(monkeypatch, lambda c=complete: validate_file(
            path, RolloutStep, require_complete=c).to_dict())
        assert fast == normal
    if defect == "clean":
        monkeypatch.setenv("GYRE_FAST_PATHS", "1")
        monkeypatch.setattr(checking, "validate_step", None)  # no row validated
        assert validate_file(path, RolloutStep).ok
