"""Contract v1.1: the LLM step fields `ref_logprob`, `group_id`, `loss_mask`, `token_reward`.

Each rule is checked on the default model and the pinned `LLMStep`, with the fast paths on and
off (`GYRE_FAST_PATHS=0`): the verdicts and messages must be the same.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import ContractError
from gyre_contract.core._fastpath import fast_validate
from gyre_contract.core._models import RolloutStep
from gyre_contract.core._validate import has_named_dims, validate_episode, validate_step
from gyre_contract.pinned import CartPoleStep, LLMStep

MODELS = [RolloutStep, LLMStep]


@pytest.fixture(params=["fast", "normal"])
def paths(request, monkeypatch):
    monkeypatch.setenv("GYRE_FAST_PATHS", "1" if request.param == "fast" else "0")
    return request.param


def completion(prompt: int, k: int, tokens: int = 8, **changes) -> dict:
    """Completion `k` of prompt `prompt`: one single-turn episode of one step (GRPO)."""
    rng = np.random.default_rng(prompt * 10 + k)
    logprob = (-rng.random(tokens) - 0.01).round(4).tolist()
    record = {
        "observation": {"token_ids": [101, 7, prompt], "text": f"prompt {prompt}"},
        "action": rng.integers(0, 32000, tokens).tolist(), "logprob": logprob,
        "ref_logprob": [v - 0.1 for v in logprob], "group_id": f"prompt-{prompt}",
        "reward": float(k == 0), "step": 0, "episode_id": f"prompt-{prompt}/{k}",
        "terminated": True, "truncated": False, "policy_version": 5}
    record.update(changes)
    return record


def problems(record: dict, model: type) -> list:
    try:
        validate_step(record, model)
    except ContractError as err:
        return err.problems
    return []


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_grpo_records_four_prompts_by_four_completions_hold(model, paths):
    records = [completion(p, k) for p in range(4) for k in range(4)]
    for record in records:
        step = validate_step(record, model)
        assert step.group_id == record["group_id"]
        assert step.ref_logprob.dtype == np.float32 and step.ref_logprob.shape == (8,)
    for p in range(4):  # each completion its own one-step episode
        validate_episode(records[4 * p:4 * p + 1], model)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_loss_mask_and_token_reward_hold_with_the_actions_tokens(model, paths):
    record = completion(0, 0, loss_mask=[True] * 5 + [False] * 3, token_reward=[0.0] * 7 + [1.0])
    step = validate_step(record, model)
    assert step.loss_mask.dtype == np.bool_ and step.loss_mask.tolist()[-3:] == [False] * 3
    assert step.token_reward.dtype == np.float32 and step.token_reward[-1] == 1.0


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_positive_ref_logprob_is_refused(model, paths):
    record = completion(0, 0)
    record["ref_logprob"] = [*record["ref_logprob"][:-1], 0.25]
    found = problems(record, model)
    assert [(p.path, p.rule, p.message) for p in found] == [
        ("ref_logprob", "step.ref_logprob_nonpositive", "positive reference log-probability")]
    assert found[0].got == "max 0.25 in float32[8]"


def test_a_scalar_ref_logprob_follows_the_sign_rule_too(paths):
    record = dict(completion(0, 0), ref_logprob=-1.5)  # [] is allowed beside a token action
    assert problems(record, RolloutStep) == []
    assert [p.rule for p in problems(dict(record, ref_logprob=0.5), RolloutStep)] == [
        "step.ref_logprob_nonpositive"]
    # a continuous action has densities: no sign rule
    continuous = dict(record, action=[0.5, -0.2], logprob=1.3, ref_logprob=2.0)
    assert problems(continuous, RolloutStep) == []


@pytest.mark.parametrize("wire", ["ref_logprob", "loss_mask", "token_reward"])
def test_a_wrong_length_names_the_field_and_both_lengths(wire, paths):
    value = {"ref_logprob": [-0.5] * 7, "loss_mask": [True] * 7, "token_reward": [0.0] * 7}[wire]
    found = problems(completion(0, 0, **{wire: value}), RolloutStep)
    assert len(found) == 1 and found[0].rule == "step.token_fields_shape"
    text = str(found[0])
    assert text.startswith(f"{wire}: not one value per action token: expected ")
    assert "7 values for 8 action tokens" in text
    # the pinned model binds them by its dim A: same path, both lengths
    pinned = problems(completion(0, 0, **{wire: value}), LLMStep)
    assert [(p.path, p.rule, p.expected, p.got.split(" ")[0]) for p in pinned] == [
        (wire, "step.dims_agree", "A=8", "A=7")]


def test_shapes_other_than_the_actions(paths):
    base = completion(0, 0, tokens=2)
    cases = {
        "loss_mask": ([[True, True]], "shape [1, 2] for the action's [2] (bool[1, 2])"),
        "token_reward": (0.5, "1 value for 2 action tokens (float32[])"),
        "ref_logprob": ([[-0.1, -0.1]], "shape [1, 2] for the action's [2] (float32[1, 2])"),
    }
    for wire, (value, got) in cases.items():
        found = problems(dict(base, **{wire: value}), RolloutStep)
        assert [(p.path, p.rule, p.got) for p in found] == [
            (wire, "step.token_fields_shape", got)], wire
    scalar_action = dict(base, action=3, logprob=-0.2, ref_logprob=-0.3)
    found = problems(dict(scalar_action, loss_mask=[True, False]), RolloutStep)
    assert [(p.expected, p.got) for p in found] == [
        ("bool[]", "2 values for 1 action token (bool[2])")]
    assert problems(dict(scalar_action, loss_mask=True, token_reward=0.0), RolloutStep) == []


def test_a_scalar_actions_expected_ref_logprob_is_named_once(paths):
    """Beside a scalar action `[]` is the action's shape: "float32[] or float32[]" said it twice."""
    scalar_action = dict(completion(0, 0, tokens=2), action=3, logprob=-0.2)
    found = problems(dict(scalar_action, ref_logprob=[-0.1, -0.1]), RolloutStep)
    assert [(p.rule, p.expected, p.got) for p in found] == [
        ("step.token_fields_shape", "float32[]", "2 values for 1 action token (float32[2])")]
    found = problems(completion(0, 0, ref_logprob=[-0.5] * 7), RolloutStep)
    assert [p.expected for p in found] == ["float32[] or float32[8]"]


@pytest.mark.parametrize("wire", ["logprob", "ref_logprob"])
def test_a_positive_float32_log_prob_is_shown_as_written(wire, paths):
    """0.3 read as float32 is 0.30000001192092896 in float64: the message shows 0.3, as the
    contract's examples do, in the list form and the scalar form alike."""
    record = completion(0, 0, tokens=2)
    found = problems(dict(record, **{wire: [-0.1, 0.3]}), RolloutStep)
    assert [p.got for p in found] == ["max 0.3 in float32[2]"]
    found = problems(dict(record, **{wire: 0.3}), RolloutStep)
    assert [p.got for p in found] == ["0.3"]


def test_group_id_is_a_non_empty_string(paths):
    found = problems(completion(0, 0, group_id=""), RolloutStep)
    assert [p.rule for p in found] == ["field.nonempty_string"]
    assert str(found[0]) == "group_id: empty string: expected a non-empty string, got str ''"
    assert [p.rule for p in problems(completion(0, 0, group_id=3), LLMStep)] == ["field.dtype"]


def test_ref_logprob_is_a_field_not_a_typo_of_logprob():
    record = completion(0, 0)
    assert problems(record, RolloutStep) == []
    typo = dict(record, ref_logprb=record.pop("ref_logprob"))
    text = " ".join(str(p) for p in problems(typo, RolloutStep))
    assert "did you mean 'ref_logprob'" in text and "did you mean 'logprob'" not in text


def test_token_dims_leave_a_scalar_action_model_without_named_dims():
    """CartPoleStep inherits the token fields as `*name`: the action (a scalar) fixes them, so
    the episode rules' bulk form still applies (and a varying shape is a step problem)."""
    assert not has_named_dims(CartPoleStep)
    assert has_named_dims(LLMStep)
    record = {"observation": [0.1] * 4, "action": 1, "logprob": -0.7, "ref_logprob": -0.6,
              "loss_mask": True, "token_reward": 0.5, "reward": 1.0, "step": 0,
              "episode_id": "e", "terminated": True, "truncated": False, "policy_version": 0}
    validate_step(record, CartPoleStep)
    assert [p.rule for p in problems(dict(record, ref_logprob=[-0.6]), CartPoleStep)] == [
        "step.token_fields_shape"]


def test_the_compiled_path_accepts_the_grpo_records(monkeypatch):
    """Not only the verdict: the compiled path itself takes them (no fallback)."""
    monkeypatch.setenv("GYRE_FAST_PATHS", "1")
    for record in [completion(p, k, loss_mask=[True] * 8, token_reward=[0.0] * 8)
                   for p in range(4) for k in range(4)]:
        for model in MODELS:
            assert fast_validate(record, model) is not None, model.__name__
            assert fast_validate(dict(record, ref_logprob=None), model) is None  # a null


LENGTH = st.one_of(st.none(), st.integers(0, 7))
"""A token field's length: None = as many as the action's tokens (the valid case)."""


@settings(max_examples=80, deadline=None)
@given(tokens=st.integers(1, 6), lengths=st.lists(LENGTH, min_size=3, max_size=3),
       signs=st.lists(st.booleans(), min_size=1, max_size=6))
def test_the_compiled_path_accepts_exactly_what_the_explaining_path_accepts(tokens, lengths,
                                                                           signs):
    record = completion(1, 2, tokens=tokens)
    ref_len, mask_len, reward_len = (tokens if n is None else n for n in lengths)
    record["ref_logprob"] = [(0.1 if s else -0.1) for s in (signs * 7)[:ref_len]]
    record["loss_mask"] = [True] * mask_len
    record["token_reward"] = [0.5] * reward_len
    for model in MODELS:
        with pytest.MonkeyPatch.context() as m:
            m.setenv("GYRE_FAST_PATHS", "0")
            explained = problems(record, model)
            m.setenv("GYRE_FAST_PATHS", "1")  # on here even when CI runs with it off
            fast = fast_validate(record, model)
        assert (fast is not None) == (explained == []), (model.__name__, explained)


def conversation(lengths=(5, 7)) -> list[dict]:
    """One multi-turn conversation: one step per turn, the generated lengths differ per turn."""
    turns = []
    for i, n in enumerate(lengths):
        turns.append({"observation": {"token_ids": list(range(3 + i))}, "action": list(range(n)),
                      "logprob": [-0.5] * n, "ref_logprob": [-0.6] * n, "reward": 0.0,
                      "step": i, "episode_id": "conv-1", "policy_version": 0,
                      "terminated": i == len(lengths) - 1, "truncated": False})
    return turns


def test_a_multi_turn_conversation_names_the_fields_and_the_remedy(paths):
    """The default model keeps the action's dims within an episode (a control action changing
    shape is a bug); token turns of different lengths are named field by field, with the model
    that allows them."""
    with pytest.raises(ContractError) as err:
        validate_episode(conversation(), RolloutStep)
    found = err.value.problems
    assert [p.path for p in found] == ["steps[1].action", "steps[1].logprob",
                                       "steps[1].ref_logprob"]
    assert all(p.rule == "episode.dims_fixed" for p in found)
    assert all("--model gyre_contract.pinned:LLMStep" in p.message
               and "varying_dims" in p.message for p in found)
    assert "5" in found[0].expected and "7" in found[0].got
    validate_episode(conversation(), LLMStep)


def test_a_control_action_changing_shape_is_named_without_the_token_remedy(paths):
    steps = [dict(s, action=[0.5] * n, logprob=-1.0, ref_logprob=-1.0)
             for s, n in zip(conversation(), (2, 3))]
    with pytest.raises(ContractError) as err:
        validate_episode(steps, RolloutStep)
    assert [p.path for p in err.value.problems] == ["steps[1].action"]
    assert "LLMStep" not in err.value.problems[0].message
