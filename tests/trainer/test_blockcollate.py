"""Collating a block of step columns held in memory (`flatcollate.collate_block`, a channel's
delivery) = collating the episodes `episodes_of` groups them into.

Same keys in the same order, same dtypes and values: episodes interleaved, an episode's steps
beginning anywhere (the rest of one begun in an earlier block), rows cut by max_len, fields
selected, sparse columns; and None (the episodes decide, and explain) where the columns cannot
say the same.
"""

from __future__ import annotations

import numpy as np
import pytest
from fastpaths import same_arrays
from hypothesis import given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import MissingFieldError
from gyre_contract.trainer._collation import collate, episodes_of
from gyre_contract.trainer._fieldmap import FieldMap
from gyre_contract.trainer._flatcollate import collate_block


@pytest.fixture(autouse=True)
def fast_paths_on(monkeypatch):
    monkeypatch.setenv("GYRE_FAST_PATHS", "1")


def block(lengths: list[int], firsts: list[int], seed: int, *, value: str = "all",
          next_value: bool = True) -> dict[str, np.ndarray]:
    """Steps of `len(lengths)` episodes, interleaved at random (each episode's steps in order),
    episode i's steps numbered from `firsts[i]`. `value`: on every step, on none (NaN), or on
    some (NaN elsewhere: a sparse column)."""
    rng = np.random.default_rng(seed)
    owner = np.concatenate([np.full(n, i) for i, n in enumerate(lengths)])
    owner = owner[rng.permutation(len(owner))]
    place = np.zeros(len(owner), np.int64)
    for i in range(len(lengths)):
        place[owner == i] = np.arange(lengths[i]) + firsts[i]
    n = len(owner)
    last = np.zeros(n, bool)
    for i in range(len(lengths)):
        last[np.flatnonzero(owner == i)[-1]] = True
    columns = {
        "observation": rng.random((n, 3), dtype=np.float32),
        "action": rng.integers(0, 4, n),
        "reward": rng.random(n, dtype=np.float32),
        "step": place,
        "episode_id": np.array([f"ep-{i:02d}" for i in owner], dtype=np.str_),
        "terminated": last & (owner % 2 == 0),
        "truncated": last & (owner % 2 == 1),
        "policy_version": rng.integers(3, 6, n),
    }
    if value == "all":
        columns["value"] = rng.random(n, dtype=np.float32)
    elif value == "some":
        columns["value"] = np.where(rng.random(n) < 0.5, rng.random(n, dtype=np.float32),
                                    np.float32(np.nan)).astype(np.float32)
    if next_value:
        columns["next_value"] = np.where(last, np.float32(0.5), np.float32(np.nan)
                                         ).astype(np.float32)
    return columns


FIELDS = [None, ["observation", "action", "reward", "terminated", "value", "policy_version"],
          ["reward", "mask", "step"]]


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=7), seed=st.integers(0, 99),
       firsts=st.lists(st.integers(0, 5), min_size=7, max_size=7),
       max_len=st.sampled_from([None, 1, 3, 7]), fields=st.integers(0, len(FIELDS) - 1),
       value=st.sampled_from(["all", "none"]), next_value=st.booleans(),
       known=st.booleans())
def test_a_block_collates_as_its_episodes(lengths, seed, firsts, max_len, fields, value,
                                          next_value, known):
    columns = block(lengths, firsts, seed, value=value, next_value=next_value)
    wanted = FIELDS[fields]
    if wanted is not None and value == "none":
        wanted = [f for f in wanted if f != "value"]
    episodes = None
    if known:  # codes in order of first appearance, as a channel's segment gives them
        _, first, inverse = np.unique(columns["episode_id"], return_index=True,
                                      return_inverse=True)
        order = np.argsort(first)
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        episodes = (rank[inverse], np.unique(columns["episode_id"])[order])
    found = collate_block(columns, fields=wanted, max_len=max_len, episodes=episodes)
    expected = collate(episodes_of(columns, columns["episode_id"]), fields=wanted,
                       max_len=max_len)
    assert found is not None
    same_arrays(found, expected)


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=6), seed=st.integers(0, 99))
def test_sparse_columns_collate_as_episodes(lengths, seed):
    columns = block(lengths, [0] * len(lengths), seed)
    rng = np.random.default_rng(seed)
    n = len(columns["reward"])
    bonus = rng.random((n, 2), dtype=np.float32)
    bonus[rng.random(n) < 0.5] = np.nan  # only some steps carry it
    bonus[0] = 0.25  # one at least
    columns["bonus"] = bonus
    fields = ["observation", "reward", "bonus"]
    found = collate_block(columns, fields=fields, sparse=["bonus"])
    expected = collate(episodes_of(columns, columns["episode_id"]), fields=fields,
                       sparse=["bonus"])
    assert found is not None
    same_arrays(found, expected)


def test_what_columns_cannot_say_goes_to_episodes():
    columns = block([3, 4], [0, 0], 1, value="some")
    # a float column some steps lack, not named sparse: the episodes raise and name the step
    assert collate_block(columns, fields=["value"], sparse=[]) is None
    with pytest.raises(MissingFieldError):
        collate(episodes_of(columns, columns["episode_id"]), fields=["value"], sparse=[])
    # a sparse column no step carries: the episodes say so
    columns["value"][:] = np.nan
    assert collate_block(columns, fields=["value"], sparse=["value"]) is None
    with pytest.raises(MissingFieldError, match="no step of any episode carries it"):
        collate(episodes_of(columns, columns["episode_id"]), fields=["value"], sparse=["value"])
    # a column that is not one array over the steps (modalities, lists of arrays, strings)
    for name, column in (("observation", {"image": np.zeros((7, 2), np.float32)}),
                         ("observation", [np.zeros(2)] * 7),
                         ("note", np.array(["a"] * 7))):
        assert collate_block({**columns, name: column}) is None
    # ids that are not strings
    assert collate_block({**columns, "episode_id": list(columns["episode_id"])}) is None


def test_fast_paths_off_gives_none(monkeypatch):
    monkeypatch.setenv("GYRE_FAST_PATHS", "0")
    assert collate_block(block([2, 3], [0, 0], 0)) is None


def test_a_map_collates_a_block_as_its_episodes(monkeypatch):
    fmap = FieldMap.from_dict({"gyre_field_map": 1, "fields": {
        "obs": {"from": "observation"}, "reward": {"from": "reward"},
        "done": {"op": "any", "from": ["terminated", "truncated"]}, "mask": {"op": "mask"}}})
    columns = block([4, 2, 5], [2, 0, 1], 7)
    fast = fmap.apply(fmap.collated_block(columns))
    monkeypatch.setenv("GYRE_FAST_PATHS", "0")
    slow = fmap.apply(fmap.collated_block(columns))
    same_arrays(fast, slow)
