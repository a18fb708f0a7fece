"""The token layouts of a map of token rows (`"rows": "step"`): padded to fixed widths
(`pad_to`) and packed into micro-batch rows of a token budget (`"layout": "packed"`). A row
that does not fit is refused, named with both lengths: a row is never cut."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gyre_contract.core._errors import ContractError
from gyre_contract.io._writer import write_steps
from gyre_contract.pinned import LLMStep
from gyre_contract.trainer._fieldmap import FieldMap
from gyre_contract.trainer._tokens import collate_tokens

ROW_FIELDS = ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "response_length",
              "logprob", "reward", "episode_id", "policy_version", "step")


def step(episode: str, prompt: list[int], action: list[int], *, reward: float = 1.0,
         group: str = "g", t: int = 0, done: bool = True, **extra: Any) -> dict[str, Any]:
    return {"observation": {"token_ids": prompt}, "action": action,
            "logprob": [-0.25 - 0.125 * i for i in range(len(action))], "reward": reward,
            "step": t, "episode_id": episode, "terminated": done, "truncated": False,
            "policy_version": 1, "group_id": group, **extra}


def records() -> list[dict[str, Any]]:
    """Four single-turn completions of two prompts, of different lengths."""
    return [step("a", [5, 6, 7], [50, 51], reward=1.0, group="p"),
            step("b", [5, 6, 7], [52, 53, 54, 55], reward=0.0, group="p"),
            step("c", [8], [56], reward=0.5, group="q"),
            step("d", [8], [57, 58, 59], reward=0.0, group="q")]


def padded_map(**keys: Any) -> FieldMap:
    return FieldMap.from_dict({"gyre_field_map": 1, "rows": "step", **keys,
                               "fields": {**{k: {"from": k} for k in ROW_FIELDS},
                                          "advantage": {"from": "reward"}}})


# -- padded to fixed widths ------------------------------------------------------------------------

def test_pad_to_fixes_the_widths_and_pads_as_the_longest_row_would():
    free = padded_map().batch(records())
    fixed = padded_map(pad_to={"P": 6, "R": 5}).batch(records())
    assert fixed["prompt_ids"].shape == (4, 6) and fixed["response_ids"].shape == (4, 5)
    assert fixed["prompt_ids"][0].tolist() == [0, 0, 0, 5, 6, 7]           # left-padded
    assert fixed["response_ids"][1].tolist() == [52, 53, 54, 55, 0]        # right-padded
    np.testing.assert_array_equal(fixed["prompt_ids"][:, -3:], free["prompt_ids"])
    np.testing.assert_array_equal(fixed["response_ids"][:, :4], free["response_ids"])
    np.testing.assert_array_equal(fixed["logprob"][:, :4], free["logprob"])
    assert not fixed["response_mask"][:, 4].any() and not fixed["prompt_mask"][:, :3].any()
    only_r = padded_map(pad_to={"R": 7}).batch(records())  # either width alone
    assert only_r["prompt_ids"].shape == (4, 3) and only_r["response_ids"].shape == (4, 7)


def test_a_row_longer_than_its_width_is_refused_with_both_lengths():
    with pytest.raises(ContractError) as err:
        padded_map(pad_to={"P": 2, "R": 3}).batch(records())
    problems = {(p.path, p.expected, p.got) for p in err.value.problems}
    assert problems == {
        ("steps[0].observation.token_ids", "at most 2 tokens (pad_to P = 2)", "3 tokens"),
        ("steps[1].observation.token_ids", "at most 2 tokens (pad_to P = 2)", "3 tokens"),
        ("steps[1].action", "at most 3 tokens (pad_to R = 3)", "4 tokens")}
    assert "episode 'b' step 0: a response of 4 tokens does not fit pad_to R = 3; a row is " \
        "never cut" in str(err.value)


def test_a_refused_row_read_from_a_file_names_its_line(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    write_steps(path, records())
    with pytest.raises(ContractError) as err:
        padded_map(pad_to={"R": 3}).batch(path)
    (problem,) = err.value.problems
    assert problem.line == 2 and problem.got == "4 tokens"
    assert str(problem).startswith("line 2: steps[1].action: episode 'b' step 0")


def test_a_long_refusal_names_ten_rows_and_counts_the_rest():
    many = [step(f"e{i}", [1, 2], [3, 4, 5]) for i in range(25)]
    with pytest.raises(ContractError) as err:
        collate_tokens(many, pad_to={"R": 2})
    assert len(err.value.problems) == 11
    assert err.value.problems[-1].got == "15 more rows longer"
    assert err.value.problems[-1].message == "25 rows do not fit pad_to R = 2"


def test_pad_to_holds_for_the_models_step_records_too():
    steps = [LLMStep.model_validate(r) for r in records()]
    fixed = padded_map(pad_to={"P": 4, "R": 4}).batch(steps)
    assert fixed["prompt_mask"].sum(axis=1).tolist() == [3, 3, 1, 1]
    assert fixed["response_length"].tolist() == [2, 4, 1, 3]
