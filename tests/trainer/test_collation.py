"""collate: per-episode columns → [B, T, ...] + mask, splitting, varying dims, modalities."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gyre_contract.core._errors import ContractError, MissingFieldError
from gyre_contract.io._episodes import Episode
from gyre_contract.trainer._collation import collate


def columns(eid: str, n: int, *, end: str = "terminated", obs_dim: int = 3,
            version: int = 0, next_value: float | None = None) -> dict:
    """One episode's columns as `read_episodes` produces them."""
    last = np.zeros(n, bool)
    last[-1] = True
    nv = np.full(n, np.nan, np.float32)
    if next_value is not None:
        nv[-1] = next_value
    return {
        "observation": np.arange(n * obs_dim, dtype=np.float32).reshape(n, obs_dim),
        "action": np.arange(n, dtype=np.int64) % 2,
        "reward": np.ones(n, np.float32),
        "value": np.arange(n, dtype=np.float32) / 10,
        "next_value": nv,
        "step": np.arange(n, dtype=np.int64),
        "episode_id": np.array([eid] * n),
        "terminated": last & (end == "terminated"),
        "truncated": last & (end == "truncated"),
        "policy_version": np.full(n, version, np.int64),
        "info": [{"k": 1}] * n,
    }


def test_pads_right_and_keeps_dtypes():
    out = collate([Episode("a", columns("a", 3)), Episode("b", columns("b", 5))])
    assert out["observation"].shape == (2, 5, 3) and out["observation"].dtype == np.float32
    assert out["action"].dtype == np.int64 and out["terminated"].dtype == np.bool_
    np.testing.assert_array_equal(out["mask"], [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(out["observation"][0, :3], columns("a", 3)["observation"])
    assert not out["observation"][0, 3:].any() and not out["terminated"][0, 3:].any()
    assert out["episode_id"].tolist() == ["a", "b"] and out["episode_id"].dtype.kind == "U"
    assert "info" not in out


def test_plain_mappings_are_accepted_and_take_their_id_from_the_column():
    out = collate([columns("x", 2), columns("y", 2)])
    assert out["episode_id"].tolist() == ["x", "y"]


def test_mapping_without_episode_id_names_it():
    cols = columns("x", 2)
    del cols["episode_id"]
    with pytest.raises(MissingFieldError, match=re.escape("missing sample field: episode_id, have [")):
        collate([cols])


def test_max_len_splits_rows_keeping_episode_id_step_and_bootstrap():
    out = collate([Episode("a", columns("a", 5, end="truncated", next_value=7.0))], max_len=2)
    assert out["reward"].shape == (3, 2)
    assert out["episode_id"].tolist() == ["a", "a", "a"]
    np.testing.assert_array_equal(out["step"], [[0, 1], [2, 3], [4, 0]])
    np.testing.assert_array_equal(out["mask"], [[1, 1], [1, 1], [1, 0]])
    # cut rows bootstrap from the next row's first value; the last row from the recorded next_value
    np.testing.assert_allclose(out["next_value"], [0.2, 0.4, 7.0])
    # a cut is neither terminated nor truncated; the episode's own end stays on its last step
    assert not out["truncated"][:2].any() and out["truncated"][2, 0]


def test_next_value_is_nan_where_unknown():
    out = collate([Episode("a", columns("a", 2)), Episode("b", columns("b", 2, end="open"))])
    assert np.isnan(out["next_value"]).all() and out["next_value"].dtype == np.float32


def test_next_value_keeps_the_value_dtype_never_promoted():
    cols = columns("a", 5, end="truncated", next_value=7.0)
    cols["value"] = cols["value"].astype(np.float64) + 1e-12
    cols["next_value"] = cols["next_value"].astype(np.float64)
    out = collate([Episode("a", cols)], max_len=2)
    assert out["next_value"].dtype == np.float64
    assert out["next_value"][0] == cols["value"][2]  # exact: no round trip through float32


def test_policy_version_of_a_row_is_its_oldest():
    cols = columns("a", 4)
    cols["policy_version"] = np.array([3, 4, 4, 5])
    out = collate([Episode("a", cols)], max_len=2)
    np.testing.assert_array_equal(out["policy_version"], [3, 4])
    assert out["policy_version"].shape == (2,)


def test_varying_dims_pad_to_batch_max_with_their_own_mask():
    a, b = columns("a", 2), columns("b", 1)
    a["tokens"] = [np.array([1, 2], np.int64), np.array([3, 4, 5], np.int64)]
    b["tokens"] = [np.array([9], np.int64)]
    out = collate([Episode("a", a), Episode("b", b)])
    assert out["tokens"].shape == (2, 2, 3) and out["tokens"].dtype == np.int64
    np.testing.assert_array_equal(out["tokens"][0], [[1, 2, 0], [3, 4, 5]])
    np.testing.assert_array_equal(out["tokens_mask"],
                                  [[[1, 1, 0], [1, 1, 1]], [[1, 0, 0], [0, 0, 0]]])


def test_varying_dims_mask_only_the_leading_varying_dims():
    a = columns("a", 2)
    a["emb"] = [np.ones((2, 4), np.float32), np.ones((3, 4), np.float32)]
    out = collate([Episode("a", a)], varying_dims={"emb": 1})
    assert out["emb"].shape == (1, 2, 3, 4) and out["emb_mask"].shape == (1, 2, 3)
    a["emb"][1] = np.ones((3, 5), np.float32)
    with pytest.raises(ContractError, match="a non-varying dim changed"):
        collate([Episode("a", a)], varying_dims={"emb": 1})


def test_modalities_collate_per_key_to_dotted_names():
    a, b = columns("a", 2), columns("b", 3)
    for cols, n in ((a, 2), (b, 3)):
        cols["observation"] = {"image": np.zeros((n, 2, 2), np.uint8),
                               "text": np.array(["hi"] * n)}
    b["observation"]["text"] = np.array(["hello"] * 3)
    out = collate([Episode("a", a), Episode("b", b)])
    assert out["observation.image"].shape == (2, 3, 2, 2)
    assert out["observation.image"].dtype == np.uint8
    assert out["observation.text"].tolist() == [["hi", "hi", ""], ["hello"] * 3]


def test_fields_selects_columns_and_groups():
    a = columns("a", 2)
    a["observation"] = {"image": np.zeros((2, 1), np.float32), "depth": np.zeros((2, 1))}
    out = collate([a], fields=["observation", "reward", "mask"])
    assert sorted(out) == ["episode_id", "mask", "next_value", "observation.depth",
                           "observation.image", "policy_version", "reward"]


def test_missing_field_message_is_exact():
    with pytest.raises(MissingFieldError) as err:
        collate([{"episode_id": np.array(["a"]), "reward": np.ones(1, np.float32)}],
                fields=["rew"])
    assert str(err.value) == "missing sample field: rew, have [episode_id, mask, next_value, reward]"


def test_mismatched_dtype_between_episodes_is_an_error():
    a, b = columns("a", 2), columns("b", 2)
    b["action"] = b["action"].astype(np.float32)
    with pytest.raises(ContractError) as err:
        collate([a, b])
    assert str(err.value) == ("episodes[1].action: episode 'b': dtype differs: expected int64 "
                              "(as episode 'a'), got float32")


def test_mismatched_shape_and_missing_column_between_episodes():
    with pytest.raises(ContractError, match=re.escape("episode 'b': per-step shape differs")):
        collate([columns("a", 2), columns("b", 2, obs_dim=4)])
    b = columns("b", 2)
    del b["value"]
    with pytest.raises(ContractError, match=re.escape("episode 'b' lacks a column")):
        collate([columns("a", 2), b])


def test_partial_non_float_column_is_named():
    a = columns("a", 2)
    a["next_observation"] = [None, {"image": np.zeros(2)}]
    with pytest.raises(ContractError) as err:
        collate([a])
    assert str(err.value) == (
        "episodes[0].next_observation: episode 'a': only some steps carry 'next_observation' "
        "(record it on every step, or leave it out of fields): expected a value on every step, "
        "got none on steps [0]")
    assert "next_observation" not in str(collate([a], fields=["reward"]))


def test_bad_inputs():
    with pytest.raises(ContractError, match="nothing to collate"):
        collate([])
    with pytest.raises(ValueError, match="max_len must be a positive int, got 0"):
        collate([columns("a", 1)], max_len=0)
    bad = columns("a", 3)
    bad["reward"] = bad["reward"][:2]
    with pytest.raises(ContractError, match="column length differs"):
        collate([bad])
    with pytest.raises(TypeError, match=r"episodes\[0\]: expected an Episode or a mapping"):
        collate([42])
