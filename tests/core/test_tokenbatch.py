"""TokenBatch v1: the model, every rule failing on a batch crafted to break it, the schema file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gyre_contract
from gyre_contract.core import _registry as registry
from gyre_contract.core._errors import ContractError
from gyre_contract.core._tokens import TokenBatch, TokenBatchV1
from gyre_contract.core._validate import validate_batch
from gyre_contract.schema._export import json_schema, render

ROOT = Path(__file__).resolve().parents[2]


def clean() -> dict[str, Any]:
    """B=3: row 0 has one prompt token of padding and a 2-token response, row 1 a 4-token
    response whose last token is tool output (loss_mask False), row 2 an empty response."""
    response_mask = np.array([[True, True, False, False], [True, True, True, False],
                              [False, False, False, False]])
    return {
        "prompt_ids": np.array([[0, 5, 6], [7, 8, 9], [1, 2, 3]]),
        "prompt_mask": np.array([[False, True, True], [True, True, True], [True, True, True]]),
        "response_ids": np.array([[11, 12, 0, 0], [13, 14, 15, 16], [0, 0, 0, 0]]),
        "response_mask": response_mask,
        "response_length": np.array([2, 4, 0]),
        "logprob": np.where(response_mask, -0.5, 0.0).astype(np.float32),
        "ref_logprob": np.where(response_mask, -0.25, 0.0).astype(np.float32),
        "advantage": np.zeros(3, np.float32),
        "reward": np.array([1.0, 0.0, 0.5], np.float32),
        "group_id": np.array(["g0", "g0", "g1"]),
        "episode_id": np.array(["a", "b", "c"]),
        "policy_version": np.array([4, 4, 3]),
        "step": np.array([0, 1, 0]),
    }


def problems(batch: dict[str, Any], **options: Any) -> list[tuple[str | None, str]]:
    try:
        validate_batch(batch, TokenBatch, **options)
    except ContractError as err:
        return [(p.rule, p.path) for p in err.problems]
    return []


def edited(key: str, index: Any, value: Any, batch: dict[str, Any] | None = None
           ) -> dict[str, Any]:
    batch = dict(clean() if batch is None else batch)
    array = np.array(batch[key])
    array[index] = value
    batch[key] = array
    return batch


def test_the_model_and_its_names():
    assert TokenBatch is TokenBatchV1 is gyre_contract.TokenBatch is gyre_contract.core.TokenBatchV1
    assert (TokenBatch.gyre_kind, TokenBatch.batch_dims) == ("token_batch", ("B",))
    batch = validate_batch(clean(), TokenBatch)
    assert isinstance(batch, TokenBatchV1)
    assert batch.arrays()["response_length"].tolist() == [2, 4, 0]
    assert validate_batch(clean(), batch_model=TokenBatch).step.tolist() == [0, 1, 0]


def test_optional_fields_and_a_per_token_advantage():
    batch = {k: v for k, v in clean().items() if k not in ("ref_logprob", "group_id")}
    batch["advantage"] = np.where(batch["response_mask"], 0.5, 0.0).astype(np.float32)
    batch["value"] = np.zeros((3, 4), np.float32)
    batch["token_reward"] = np.zeros((3, 4), np.float32)
    batch["return"] = np.zeros((3, 4), np.float32)
    assert problems(batch) == []


def test_padding_may_hold_anything_the_rules_ignore():
    batch = edited("logprob", (0, 3), np.nan)            # padding: not checked
    batch = edited("ref_logprob", (1, 3), 3.0, batch)    # tool token (response_mask False)
    assert problems(batch) == []


def test_a_missing_required_field_is_a_field_problem():
    batch = {k: v for k, v in clean().items() if k != "response_length"}
    assert problems(batch) == [("field.required", "response_length")]


@pytest.mark.parametrize(("rule", "batch"), [
    ("batch.dims_agree", edited("prompt_mask", (0, 0), True) | {
        "prompt_mask": np.ones((3, 4), bool)}),
    ("batch.dims_agree", clean() | {"reward": np.zeros(4, np.float32)}),
    ("batch.extra_fields_lead_with_b", clean() | {"weights": np.ones(2)}),
    ("batch.advantage_per_row_or_token", clean() | {"advantage": np.zeros((3, 3), np.float32)}),
    ("batch.advantage_per_row_or_token", clean() | {"advantage": np.zeros((3, 4, 1), np.float32)}),
    ("batch.prompt_padding_at_start", edited("prompt_mask", (1, 2), False)),   # right-padded
    ("batch.prompt_padding_at_start", edited("prompt_mask", (1, 1), False)),   # a hole
    ("batch.response_mask_within_length", edited("response_mask", (0, 2), True)),
    ("batch.response_mask_within_length", edited("response_length", 2, 5)),
    ("batch.response_mask_within_length", edited("response_length", 2, -1)),
    ("batch.finite_under_response_mask", edited("logprob", (1, 1), np.inf)),
    ("batch.finite_under_response_mask", edited("logprob", (1, 1), -np.inf)),  # min, not max
    ("batch.finite_under_response_mask", edited("ref_logprob", (0, 0), np.nan)),
    ("batch.finite_under_response_mask", edited("reward", 2, np.nan)),         # [B]: everywhere
    ("batch.finite_under_response_mask", edited("advantage", 2, np.nan)),
    ("batch.token_logprob_nonpositive", edited("logprob", (0, 1), 0.1)),
    ("batch.token_logprob_nonpositive", edited("ref_logprob", (1, 2), 0.1)),
], ids=lambda x: x if isinstance(x, str) else "")
def test_every_rule_fails_on_a_crafted_batch(rule, batch):
    found = problems(batch)
    assert found and {r for r, _ in found} == {rule}, found
    assert rule in {r.name for r in registry.all_rules("batch")}


def test_messages_name_the_rows_and_both_sides():
    with pytest.raises(ContractError) as err:
        validate_batch(edited("response_mask", (0, 3), True), TokenBatch)
    text = str(err.value)
    assert "response_mask: response_mask True past response_length" in text
    assert "rows [0]" in text
    with pytest.raises(ContractError) as err:
        validate_batch(clean() | {"advantage": np.zeros((3, 3), np.float32)}, TokenBatch)
    assert "expected float32[3] (one per row) or float32[3, 4] (one per response token), " \
           "got float32[3, 3]" in str(err.value)
    with pytest.raises(ContractError) as err:  # float32 0.3 in its own dtype, not 0.30000001...
        validate_batch(edited("ref_logprob", (1, 2), 0.3), TokenBatch)
    assert "ref_logprob: positive log-probability: expected <= 0 where response_mask is True " \
           "(a token's log-probability), got max 0.3 in rows [1]" in str(err.value)


def test_staleness_refuses_old_rows_naming_their_episode():
    found = problems(clean(), max_staleness=0)
    assert found == [("batch.policy_version_fresh", "policy_version[2]")]
    with pytest.raises(ContractError, match=r"got 3 \(episode 'c'\)"):
        validate_batch(clean(), TokenBatch, max_staleness=0)
    assert problems(clean(), max_staleness=1) == []
    assert problems(clean(), max_staleness=1, current_version=6) != []


def test_the_train_batch_rules_never_run_on_a_token_batch_and_back():
    """A TokenBatch has no `mask`: the `[B, T]` rules are not its own (and vice versa), nor
    are the packed batch's."""
    phases = {r.phase for r in registry.all_rules("batch")}
    assert {"shape", "values", "staleness", "token_shape", "token_values",
            "packed_values"} == phases
    batch = clean()
    assert problems(batch) == []
    for rule in registry.all_rules("batch"):
        if rule.phase in ("values", "packed_values"):
            assert rule.violate(batch, TokenBatch) is None, rule.name


def test_the_committed_schema_is_the_models():
    path = ROOT / "schemas" / "token_batch.v1.json"
    assert path.read_text(encoding="utf-8") == render(json_schema(TokenBatchV1))
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["$id"] == "urn:gyre-contract:token_batch:1"
    assert (doc["x-gyre-kind"], doc["x-gyre-batch-dims"]) == ("token_batch", ["B"])
    assert doc["required"] == ["prompt_ids", "prompt_mask", "response_ids", "response_mask",
                               "response_length", "logprob", "advantage", "reward",
                               "episode_id", "policy_version", "step"]
    assert doc["properties"]["prompt_ids"]["x-gyre-shape"] == ["B", "P"]
    assert doc["properties"]["advantage"]["x-gyre-shape"] == ["B", "*adv"]
    assert doc.get("additionalProperties", True) is not False  # a trainer's own arrays are allowed


def test_a_negative_response_length_is_one_problem_not_two():
    """The root problem only: a length below 0 puts every position "past" it, which is not a
    second finding about response_mask."""
    with pytest.raises(ContractError) as err:  # row 0 has real tokens: all "past" -1
        validate_batch(edited("response_length", 0, -1), TokenBatch)
    assert [p.path for p in err.value.problems] == ["response_length"]
    assert "response_length out of range" in str(err.value)
    with pytest.raises(ContractError) as err:  # row 2 (length 0) has a True of its own
        validate_batch(edited("response_mask", (2, 0), True, edited("response_length", 0, -1)),
                       TokenBatch)
    assert [p.path for p in err.value.problems] == ["response_length", "response_mask"]
    assert "True past the response in rows [2]" in str(err.value)


def test_a_row_from_the_future_names_the_upper_bound_only():
    """current 2, max_staleness 5: the window's lower bound is below 0; a newer row's message
    says what it broke (at most the current version), never "expected -3..2"."""
    batch = edited("policy_version", 0, 3)
    with pytest.raises(ContractError) as err:
        validate_batch(batch, TokenBatch, current_version=2, max_staleness=5)
    text = str(err.value)
    assert "policy version from the future: expected at most 2 (current 2, max_staleness 5), " \
           "got 3" in text
    assert "-3" not in text


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.integers(0, 9), st.data())
def test_true_past_the_length_is_judged_as_position_by_position(b, r, data):
    """`response_mask True past response_length` from each row's last True gives the rows the
    plain position-by-position comparison gives (any mask, lengths in and out of range)."""
    from gyre_contract.core._tokens import _true_past

    mask = np.array(data.draw(st.lists(st.lists(st.booleans(), min_size=r, max_size=r),
                                       min_size=b, max_size=b)), bool).reshape(b, r)
    length = np.array(data.draw(st.lists(st.integers(-2, r + 2), min_size=b, max_size=b)),
                      np.int64)
    plain = (mask & (np.arange(r)[None, :] >= length[:, None])).any(axis=1)
    assert np.array_equal(_true_past(mask, length), plain)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**16), rows=st.integers(1, 4), width=st.integers(1, 9),
       spread=st.sampled_from([2, 9, 2**62]))
def test_moved_positions_flag_the_rows_the_running_count_does(seed, rows, width, spread):
    """The cell-by-cell look (0 at a run's start, one more than the cell before elsewhere) flags
    exactly the rows whose positions differ from each run's count, also beyond 0..S-1."""
    from gyre_contract.core._tokens import moved_positions

    rng = np.random.default_rng(seed)
    starts = rng.random((rows, width)) < 0.3
    starts[:, 0] = True
    cell = np.arange(rows * width).reshape(rows, width)
    within = cell - np.maximum.accumulate(np.where(starts, cell, 0).reshape(-1)).reshape(
        rows, width)
    position = within.copy()
    hits = rng.random((rows, width)) < 0.2
    position[hits] = rng.integers(-spread, spread, int(hits.sum()))
    if spread > 9 and position.size > 1:  # a wrap-around: MAX then MIN differ by 1 mod 2**64
        position.reshape(-1)[:2] = [2**63 - 1, -(2**63)]
    expected = position != within
    got = moved_positions(position, starts)
    assert got.any(axis=1).tolist() == expected.any(axis=1).tolist()
