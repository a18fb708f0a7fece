"""The row layout of a field map (`FieldMap.layout`): parsed from the map's layout keys, written
back, and asked by every caller instead of a test of `"rows"`."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from gyre_contract.core._errors import ContractError, FieldMapError
from gyre_contract.core._models import RolloutStep, TrainBatch
from gyre_contract.core._tokens import TokenBatch
from gyre_contract.pinned import LLMStep
from gyre_contract.trainer import _layouts
from gyre_contract.trainer._fieldmap import FieldMap
from gyre_contract.trainer._layouts import EpisodeRows, LayoutError, Need, TokenRows
from gyre_contract.trainer._trainerbatch import trainer_schema

FIELDS = {"advantage": {"from": "reward"}}


def token_map(**keys: Any) -> dict[str, Any]:
    return {"gyre_field_map": 1, "rows": "step", **keys, "fields": FIELDS}


def test_the_default_layout_is_runs_of_episodes():
    fmap = FieldMap.from_dict({"gyre_field_map": 1, "fields": FIELDS})
    assert fmap.layout == EpisodeRows() and isinstance(fmap.layout, EpisodeRows)
    assert (fmap.layout.batch_model, fmap.layout.step_model) == (TrainBatch, RolloutStep)
    assert fmap.layout.to_dict() == {} and fmap.describe() == "advantage ← reward"


def test_token_rows_carry_pad_to_through_the_map():
    data = token_map(batch_dims=["B"], layout="padded", pad_to={"P": 512, "R": 1024})
    fmap = FieldMap.from_dict(data)
    assert isinstance(fmap.layout, TokenRows) and fmap.layout.pad_to == {"P": 512, "R": 1024}
    assert (fmap.layout.batch_model, fmap.layout.step_model) == (TokenBatch, LLMStep)
    assert fmap.to_dict() == data
    assert FieldMap.from_dict({**data, "pad_to": {"R": 8}}).layout.pad_to == {"R": 8}
    assert fmap.describe().startswith("one token row per step; ")
    assert repr(fmap.layout) == "TokenRows(batch_dims=['B'], layout='padded', pad_to={'P': 512, 'R': 1024})"


@pytest.mark.parametrize(("keys", "message"), [
    ({"pad_to": {"Q": 3}}, '"pad_to" must map "P" (the prompt width) and/or "R" (the response '
     'width) to a whole number > 0, such as {"P": 512, "R": 1024}, got {"Q": 3}'),
    ({"pad_to": {"P": 0}}, '"pad_to" must map'),
    ({"pad_to": {"P": True}}, '"pad_to" must map'),
    ({"pad_to": {}}, '"pad_to" must map'),
    ({"pad_to": 512}, '"pad_to" must map'),
    ({"token_budget": 4096}, '"token_budget" is not a key of a map with "rows": "step"'),
    ({"layout": "padded", "token_budget": 4096},
     '"token_budget" is not a key of a map with "rows": "step", "layout": "padded"'),
    ({"layout": "packed"}, '"layout": "packed" needs "token_budget"'),
    ({"layout": "bucketed"}, '"layout" of a map with "rows": "step" must be one of "padded", '
     'got "bucketed"'),
])
def test_bad_token_layout_keys(keys, message):
    with pytest.raises(FieldMapError, match=re.escape(message)):
        FieldMap.from_dict(token_map(**keys))


def test_pad_to_belongs_to_token_rows_only():
    with pytest.raises(FieldMapError, match=re.escape(
            '"pad_to" is not a key of a map with "rows": "episode"')):
        FieldMap.from_dict({"gyre_field_map": 1, "pad_to": {"P": 4}, "fields": FIELDS})
    with pytest.raises(FieldMapError, match=re.escape(
            '"rows" must be "episode" (a run of one episode per row, the default) or "step" '
            '(one token row per step), got "token"')):
        FieldMap.from_dict({"gyre_field_map": 1, "rows": "token", "fields": FIELDS})


def test_a_layout_refuses_what_cannot_be():
    with pytest.raises(LayoutError, match="one dim"):
        TokenRows(batch_dims=("B", "T"))
    with pytest.raises(ValueError, match='does not fit "batch_dims" \\[T, B\\]'):
        EpisodeRows(batch_dims=("T", "B"), name="batch")
    assert EpisodeRows(batch_dims=("T", "B"), name="time_major").to_dict() == {
        "batch_dims": ["T", "B"], "layout": "time_major"}


def test_another_layout_is_one_more_class(monkeypatch):
    """Another layout of token rows (`"layout": "bucketed"`, with a `token_budget`) is a
    subclass listed in `ROW_LAYOUTS`: the parser, `to_dict` and the map take it without a branch
    of their own, as they take `PackedRows`."""

    class BucketedRows(TokenRows):
        names = ("bucketed",)
        keys = ("token_budget",)

        def __init__(self, *, token_budget: int | None = None, **kwargs: Any) -> None:
            self.token_budget = token_budget
            super().__init__(**kwargs)

        def to_dict(self) -> dict[str, Any]:
            return {**super().to_dict(), "token_budget": self.token_budget}

    monkeypatch.setattr(_layouts, "ROW_LAYOUTS", (*_layouts.ROW_LAYOUTS, BucketedRows))
    data = token_map(layout="bucketed", token_budget=4096)
    fmap = FieldMap.from_dict(data)
    assert type(fmap.layout) is BucketedRows and fmap.layout.token_budget == 4096
    assert fmap.to_dict() == data
    assert type(FieldMap.from_dict(token_map()).layout) is TokenRows  # padded stays the default


def columns_of_token_rows() -> dict[str, np.ndarray]:
    return {"response_length": np.array([2, 3]), "response_mask": np.ones((2, 4), bool),
            "prompt_mask": np.ones((2, 1), bool), "episode_id": np.array(["a", "a"]),
            "policy_version": np.array([3, 2]), "group_id": np.array(["g", "h"])}


def test_what_the_callers_ask_of_each_layout():
    episodes, tokens = EpisodeRows(), TokenRows()
    runs = {"mask": np.array([[True, True, False]]), "episode_id": np.array(["a"]),
            "policy_version": np.array([1])}
    assert episodes.row_mask(runs).tolist() == [[True, True, False]]
    assert episodes.shape(runs) == (1, 3) and episodes.stats(runs, None) is None
    assert episodes.count_episodes([object(), object()], runs) == 2
    rows = columns_of_token_rows()
    assert tokens.row_mask(rows).tolist() == [[True], [True]]
    assert tokens.shape(rows) == (2, 4) and tokens.count_episodes([], rows) == 1
    stats = tokens.stats(rows, None)
    assert stats is not None and stats.staleness == (0, 1) and stats.response_tokens == 5
    keys = tokens.row_keys(rows)
    assert keys.policy_version.tolist() == [3, 2] and keys.mask.shape == (2, 1)
    assert episodes.needs("mask") == () and episodes.needs("reward") is None
    assert tokens.needs("policy_version") == () and tokens.needs("mask") is None
    assert tokens.needs("response_ids") == (Need(("observation.token_ids", "observation"), True),
                                            Need(("action",)))
    block = {"episode_id": np.array(["a", "b", "a"]), "x": np.arange(3)}
    assert [e["x"].tolist() for e in episodes.from_block(block)] == [[0, 2], [1]]
    assert tokens.from_block(block) == [block]


def test_the_trainer_schema_asks_the_layout_how_it_sees_the_rows():
    flat_trainer = trainer_schema({"type": "object", "x-gyre-batch-dims": ["M"],
                                   "properties": {"r": {"x-gyre-dtype": "float32",
                                                        "x-gyre-shape": ["M"]}}})
    arrays = {"r": np.array([[1.0, 2.0], [3.0, 0.0]], np.float32),
              "mask": np.array([[True, True], [True, False]])}
    assert flat_trainer.check(arrays, arrays["mask"])["r"].tolist() == [1.0, 2.0, 3.0]
    runs_trainer = trainer_schema({"type": "object", "x-gyre-batch-dims": ["B", "T"],
                                   "properties": {"r": {"x-gyre-dtype": "float32",
                                                        "x-gyre-shape": ["B", "T"]}}})
    with pytest.raises(ContractError, match="one batch dim"):
        runs_trainer.check(arrays, rows=TokenRows())
