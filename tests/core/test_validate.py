"""validate_step / validate_episode / validate_batch: verdicts and messages, word for word."""

from __future__ import annotations

import numpy as np
import pytest

from gyre_contract.core._errors import ContractError
from gyre_contract.core._models import RolloutStep
from gyre_contract.core._validate import EpisodeTracker, validate_batch, validate_episode, validate_step


def messages(record: dict, model=None) -> list[str]:
    with pytest.raises(ContractError) as info:
        validate_step(record, model) if model else validate_step(record)
    return [str(p) for p in info.value.problems]


def test_good_cartpole_record_yields_arrays_and_plain_scalars(cartpole_record, cartpole_model):
    step = validate_step(cartpole_record, cartpole_model)
    assert step.observation.dtype == np.float32 and step.observation.shape == (4,)
    assert step.action == 1 and type(step.action) is int
    assert type(step.reward) is float and step.terminated is False
    assert step.to_record()["episode_id"] == "ep-0"


def test_numpy_scalars_from_vector_envs_are_accepted(cartpole_record, cartpole_model):
    record = dict(cartpole_record, reward=np.float32(1.0), terminated=np.bool_(True),
                  step=np.int64(3), action=np.int64(0), observation=np.zeros(4, np.float64))
    step = validate_step(record, cartpole_model)
    assert step.step == 3 and step.terminated is True and step.observation.dtype == np.float32


@pytest.mark.parametrize(("change", "expected"), [
    ({"reward": 1.5e39}, "reward: out of range for float32: expected float32, got float 1.5e+39"),
    ({"reward": float("nan")}, "reward: not finite: expected float32, got float nan"),
    ({"reward": True}, "reward: a bool is not a number: expected float32, got bool true"),
    ({"reward": "1"}, "reward: not a number: expected float32, got str '1'"),
    ({"reward": None}, "reward: null is not allowed: expected float32, got null"),
    ({"step": 1.5}, "step: not an integer: expected int64, got float 1.5"),
    ({"step": "1"}, "step: not a number: expected int64, got str '1'"),
    ({"step": 2**63}, "step: out of range for int64: expected int64, got int 9223372036854775808"),
    ({"terminated": 1}, "terminated: not a bool: expected bool, got int 1"),
    ({"episode_id": ""}, "episode_id: empty string: expected a non-empty string, got str ''"),
    ({"episode_id": np.str_("")},
     "episode_id: empty string: expected a non-empty string, got <U0 ''"),
    ({"action": 1.5}, "action: not an integer: expected int64, got float 1.5"),
    ({"observation": [0.1, 0.2, 0.3]},
     "observation: wrong shape: expected float32[4], got float32[3]"),
    ({"observation": [[0.1, 0.2, 0.3, 0.4]]},
     "observation: wrong rank: expected float32[4], got float32[1, 4]"),
    ({"observation": [0.1, True, 0.3, 0.4]},
     "observation: a bool is not a number: expected float32[4], got list[4]"),
    ({"observation": [0.1, "x", 0.3, 0.4]},
     "observation: not a number: expected float32[4], got string[4]"),
    ({"observation": [0.1, None, 0.3, 0.4]},
     "observation: null is not allowed: expected float32[4], got list[4]"),
    ({"observation": [[0.1], [0.2, 0.3]]},
     "observation: ragged or mixed nested list: expected float32[4], got list[2]"),
    ({"logprob": 0.25},
     "logprob: positive log-probability: expected <= 0 (a discrete action's log-probability), "
     "got 0.25"),
    ({"trunctaed": True}, "trunctaed: unknown field: expected only the fields of CartPoleStep "
                          "(did you mean 'truncated'?), got bool true"),
    ({"info": {"seed": None}}, "info: key 'seed': not a JSON scalar: expected string, integer, "
                               "finite number or bool, got null"),
])
def test_common_messages_word_for_word(cartpole_record, cartpole_model, change, expected):
    assert messages(dict(cartpole_record, **change), cartpole_model) == [expected]


def test_missing_required_field(cartpole_record, cartpole_model):
    del cartpole_record["truncated"]
    assert messages(cartpole_record, cartpole_model) == [
        "truncated: missing required field: expected bool, got nothing"]


def test_all_problems_are_reported_at_once(cartpole_record, cartpole_model):
    record = dict(cartpole_record, reward=float("inf"), step=-0.5, extra=1)
    del record["episode_id"]
    with pytest.raises(ContractError) as info:
        validate_step(record, cartpole_model)
    paths = sorted(p.path for p in info.value.problems)
    assert paths == ["episode_id", "extra", "reward", "step"]
    assert str(info.value).startswith("4 problems:\n  ")


def test_integer_values_beyond_float32_exactness_are_refused(cartpole_record, cartpole_model):
    record = dict(cartpole_record, observation=[2**25, 0, 0, 1])
    assert messages(record, cartpole_model) == [
        "observation: integer too large to be exact in float32: expected float32[4], got int 33554432 "
        "in int64[4]"]


def both_ways(monkeypatch, record: dict, model) -> list[str]:
    """The problems of `record` with the fast paths on; asserts the same with them off."""
    found = []
    for switch in ("1", "0"):
        monkeypatch.setenv("GYRE_FAST_PATHS", switch)
        try:
            validate_step(record, model)
            found.append([])
        except ContractError as err:
            found.append([str(p) for p in err.problems])
    assert found[0] == found[1]
    return found[0]


@pytest.mark.parametrize("pinned", [True, False], ids=["CartPoleStep", "RolloutStep"])
@pytest.mark.parametrize(("change", "expected"), [
    ({"reward": 2**24 + 1}, "reward: integer too large to be exact in float32: expected float32, "
                            "got int 16777217"),
    ({"reward": -(2**24 + 1)}, "reward: integer too large to be exact in float32: expected "
                               "float32, got int -16777217"),
    ({"reward": 123456789012345678}, "reward: integer too large to be exact in float32: expected "
                                     "float32, got int 123456789012345678"),
    ({"value": 2**53 + 1}, "value: integer too large to be exact in float32: expected float32, "
                           "got int 9007199254740993"),
    ({"reward": np.int64(2**24 + 1)}, "reward: integer too large to be exact in float32: "
                                      "expected float32, got int64 16777217"),
    ({"observation": [2**24 + 1, 1.5, 2, 3]},
     "observation: integer too large to be exact in float32: expected float32{shape}, got int "
     "16777217 in float64[4]"),
    ({"observation": [0.5, 1.5, 2.0, -(2**40)]},
     "observation: integer too large to be exact in float32: expected float32{shape}, got int "
     "-1099511627776 in float64[4]"),
])
def test_an_integer_a_float32_cannot_hold_is_refused_alone_or_beside_floats(
        cartpole_record, cartpole_model, monkeypatch, pinned, change, expected):
    """Once `reward: 16777217` passed (read as 16777216.0), and so did an integer beyond 2**24
    beside floats in a list (numpy reads the list as float64): refused on both paths, as an
    all-integer list was."""
    model = cartpole_model if pinned else RolloutStep
    shape = "[4]" if pinned else "[*obs]"
    assert both_ways(monkeypatch, dict(cartpole_record, **change), model) == [
        expected.replace("{shape}", shape)]


@pytest.mark.parametrize("change", [
    {"reward": 2**24}, {"reward": -(2**24)}, {"value": 3},
    {"reward": 16777217.0},  # a float: rounded to the float32 nearest, as 0.1 is
    {"observation": [2**24, 1.5, 2, 3]}, {"observation": [16777217.0, 1.5, 2.0, 3.0]},
    {"reward": np.float64(16777217.0)}, {"observation": np.array([2**24, 1, 2, 3])},
])
def test_integers_within_the_exact_range_and_floats_are_accepted(
        cartpole_record, cartpole_model, monkeypatch, change):
    assert both_ways(monkeypatch, dict(cartpole_record, **change), cartpole_model) == []


def test_the_exact_range_follows_the_float_width(cartpole_record, monkeypatch):
    """float64 holds every integer up to 2**53, float16 up to 2**11: the same rule."""
    from pydantic import Field

    from gyre_contract import RolloutStep, Tensor

    class WideStep(RolloutStep):
        value: Tensor("float64", []) = None
        next_value: Tensor("float16", []) = None
        return_: Tensor("float64", [3]) = Field(None, alias="return")

    record = dict(cartpole_record, value=2**53, next_value=2048, **{"return": [2**53, 0.5, 1]})
    assert both_ways(monkeypatch, record, WideStep) == []
    bad = dict(record, value=2**53 + 1, next_value=2049, **{"return": [2**53 + 1, 0.5, 1]})
    assert both_ways(monkeypatch, bad, WideStep) == [
        "value: integer too large to be exact in float64: expected float64, got int "
        "9007199254740993",
        "next_value: integer too large to be exact in float16: expected float16, got int 2049",
        "return: integer too large to be exact in float64: expected float64[3], got int "
        "9007199254740993 in float64[3]"]


def test_a_plain_field_is_worded_as_every_other(llm_record, llm_model, monkeypatch):
    """`text: str` of `PromptObservation` is a plain pydantic field: once its problems read
    pydantic's `Input should be a valid string: expected str`."""
    def text(value: object) -> list[str]:
        observation = {"token_ids": [1, 2], "text": value}
        return both_ways(monkeypatch, dict(llm_record, observation=observation), llm_model)

    assert text(5) == ["observation.text: not a string: expected string, got int 5"]
    assert text(None) == ["observation.text: null is not allowed: expected string, got null"]
    assert text([1]) == ["observation.text: not a string: expected string, got list[1]"]
    assert text("2+2=") == []


def test_an_empty_list_takes_the_declared_dtype(llm_record, llm_model, monkeypatch):
    """A generation that stopped at once: `action: []` of `LLMStep` (once: accepted as a numpy
    array, refused as a JSON list with `not an integer ... got float64[0]`)."""
    record = dict(llm_record, action=[], logprob=[], ref_logprob=[], loss_mask=[],
                  token_reward=[], observation={"token_ids": []})
    assert both_ways(monkeypatch, record, llm_model) == []
    step = validate_step(record, llm_model)
    assert (step.action.dtype, step.observation.token_ids.dtype, step.loss_mask.dtype,
            step.logprob.dtype) == (np.int64, np.int64, np.bool_, np.float32)
    assert step.action.shape == (0,)
    arrays = dict(record, action=np.array([], np.int64), observation={"token_ids": np.array(
        [], np.int64)}, loss_mask=np.array([], bool))
    assert both_ways(monkeypatch, arrays, llm_model) == []


def test_an_empty_list_where_a_value_is_declared_is_a_shape_problem(
        cartpole_record, cartpole_model, monkeypatch):
    assert both_ways(monkeypatch, dict(cartpole_record, action=[]), cartpole_model) == [
        "action: not a number: expected int64, got list[0]"]
    assert both_ways(monkeypatch, dict(cartpole_record, observation=[]), cartpole_model) == [
        "observation: wrong shape: expected float32[4], got float32[0]"]


def test_uint8_range(cartpole_record):
    from gyre_contract import Modalities, RolloutStep, Tensor

    class Pixels(Modalities):
        image: Tensor("uint8", [2, 2])

    class PixelStep(RolloutStep):
        observation: Pixels

    good = dict(cartpole_record, observation={"image": [[0, 255], [3, 4]]})
    assert validate_step(good, PixelStep).observation.image.dtype == np.uint8
    bad = dict(cartpole_record, observation={"image": [[0, 300], [3, 4]]})
    assert messages(bad, PixelStep) == [
        "observation.image: out of range for uint8: expected uint8[2, 2], got int64[2, 2]"]


def test_base_model_accepts_modalities_and_tensors(cartpole_record):
    step = validate_step(dict(cartpole_record, observation={"image": np.zeros((2, 2, 3), np.uint8),
                                                            "text": "hi", "ids": [1, 2]}))
    assert step.observation["image"].dtype == np.uint8
    assert step.observation["ids"].dtype == np.int64
    assert messages(dict(cartpole_record, observation={"ids": [1, None]})) == [
        "observation: modality 'ids': null is not allowed: expected a tensor or a string, "
        "got list[2]"]


def test_llm_record_binds_token_dims(llm_record, llm_model):
    step = validate_step(llm_record, llm_model)
    assert step.action.tolist() == [1016, 102] and step.logprob.dtype == np.float32
    assert messages(dict(llm_record, logprob=[-0.1]), llm_model) == [
        "logprob: dim A disagrees with an earlier field: expected A=2, got A=1 (float32[1])"]


def test_base_logprob_is_scalar_or_action_shaped(cartpole_record):
    ok = dict(cartpole_record, action=[0.5, -0.5], logprob=3.0)  # continuous: density may be > 0
    assert validate_step(ok).logprob == np.float32(3.0)
    assert messages(dict(cartpole_record, action=[1, 2], logprob=[-1.0, -2.0, -3.0])) == [
        "logprob: shape is neither [] nor the action's: expected float32[] or float32[2], "
        "got float32[3]"]


def test_next_observation_follows_pinned_observation(cartpole_record, cartpole_model):
    assert messages(dict(cartpole_record, next_observation=[1.0]), cartpole_model) == [
        "next_observation: wrong shape: expected float32[4], got float32[1]"]


def test_not_an_object():
    assert messages([1, 2]) == ["not an object: expected an object, got list[2]"]


def test_validate_step_accepts_an_instance(cartpole_record, cartpole_model):
    step = validate_step(cartpole_record, cartpole_model)
    assert validate_step(step, cartpole_model) is step


# -- episodes -----------------------------------------------------------------------------

def episode(record: dict, n: int, *, last: str = "terminated") -> list[dict]:
    steps = [dict(record, step=i) for i in range(n)]
    if last:
        steps[-1] = dict(steps[-1], **{last: True})
    return steps


def test_good_episodes(cartpole_record, cartpole_model):
    assert len(validate_episode(episode(cartpole_record, 5), cartpole_model)) == 5
    both = episode(cartpole_record, 3)
    both[-1]["truncated"] = True  # Gymnasium allows both; terminated wins
    validate_episode(both, cartpole_model)


def episode_messages(steps: list[dict], model=None, **kw) -> list[str]:
    with pytest.raises(ContractError) as info:
        validate_episode(steps, model, **kw) if model else validate_episode(steps, **kw)
    return [str(p) for p in info.value.problems]


def test_step_gap(cartpole_record, cartpole_model):
    steps = episode(cartpole_record, 4)
    steps[2]["step"] = 3
    steps[3]["step"] = 4
    assert episode_messages(steps, cartpole_model) == [
        "steps[2].step: step does not follow the previous step: expected 2 (previous step + 1), "
        "got 3"]


def test_phantom_step_after_done(cartpole_record, cartpole_model):
    steps = episode(cartpole_record, 3) + [dict(cartpole_record, step=3, reward=0.0)]
    assert episode_messages(steps, cartpole_model) == [
        "steps[3].episode_id: step after the episode ended (a phantom reset transition?): "
        "expected no step after the episode's terminated or truncated step, got step 3 of "
        "episode 'ep-0', which ended"]


def test_policy_version_never_decreases(cartpole_record, cartpole_model):
    steps = episode(cartpole_record, 3)
    steps[0]["policy_version"] = 2
    assert episode_messages(steps, cartpole_model) == [
        "steps[1].policy_version: policy_version decreased: expected >= 2 (never decreases), got 0"]


def test_open_episode_only_an_error_when_completeness_required(cartpole_record, cartpole_model):
    steps = episode(cartpole_record, 3, last="")
    validate_episode(steps, cartpole_model)
    assert episode_messages(steps, cartpole_model, require_complete=True) == [
        "episode_id: open episode: expected a terminated or truncated last step, "
        "got episode 'ep-0' open after step 2"]


def test_first_step_is_zero(cartpole_record, cartpole_model):
    steps = episode(cartpole_record, 3)[1:]
    assert episode_messages(steps, cartpole_model) == [
        "steps[0].step: episode does not start at step 0: expected 0 on an episode's first step, "
        "got 1"]


def test_dimension_jump_unless_varying(cartpole_record, llm_record, llm_model):
    jump = [dict(cartpole_record, step=0, observation=[0.0, 1.0]),
            dict(cartpole_record, step=1, observation=[0.0, 1.0, 2.0], terminated=True)]
    assert episode_messages(jump) == [
        "steps[1].observation: dimension changed within the episode (declare it in varying_dims "
        "if it may): expected obs=[2] as earlier in the episode, got obs=[3] (float32[3])"]
    turns = [dict(llm_record, step=0, terminated=False),
             dict(llm_record, step=1, action=[1, 2, 3], logprob=[-1.0, -1.0, -1.0])]
    validate_episode(turns, llm_model)  # A and P are declared varying


def test_action_keeps_its_dtype_within_an_episode(cartpole_record):
    """int on one step, float on the next: once cast to the first step's int64 (issue: round 2)."""
    steps = [dict(cartpole_record, step=0, action=1),
             dict(cartpole_record, step=1, action=1.5, terminated=True)]
    assert episode_messages(steps) == [
        "steps[1].action: dtype changed within the episode: expected int64 as earlier in the "
        "episode, got float32 1.5"]
    assert [p.rule for p in episode_messages_problems(steps)] == ["episode.dtype_fixed"]
    across = [dict(cartpole_record, episode_id="a", action=1, terminated=True),
              dict(cartpole_record, episode_id="b", action=1.5, terminated=True)]
    assert len(validate_episode(across[:1])) == len(validate_episode(across[1:])) == 1


def test_observation_keeps_its_structure_and_modality_dtypes(cartpole_record):
    """A tensor then an object (once a crash in `batch`), a modality whose dtype changes."""
    tensor_then_object = [dict(cartpole_record, step=0, observation=[0.1, 0.2]),
                          dict(cartpole_record, step=1, observation={"x": [0.1, 0.2]},
                               terminated=True)]
    assert episode_messages(tensor_then_object) == [
        "steps[1].observation: structure changed within the episode: expected a tensor as "
        "earlier in the episode, got object with keys [x]"]
    modality = [dict(cartpole_record, step=0, observation={"x": [1, 2], "t": "a"}),
                dict(cartpole_record, step=1, observation={"x": [0.5, 2.0], "t": [1]}),
                dict(cartpole_record, step=2, observation={"x": [3, 4], "t": "b"},
                     terminated=True)]
    assert episode_messages(modality) == [
        "steps[1].observation.x: dtype changed within the episode: expected int64 as earlier in "
        "the episode, got float32[2]",
        "steps[1].observation.t: dtype changed within the episode: expected string as earlier in "
        "the episode, got int64[1]"]


def test_pinned_models_have_no_kind_to_track(cartpole_record, cartpole_model, llm_model):
    from gyre_contract.core._fields import kind_fields
    from gyre_contract.pinned import CartPoleStep, LLMStep

    assert kind_fields(cartpole_model) == kind_fields(CartPoleStep) == ()
    assert kind_fields(LLMStep) == kind_fields(llm_model) == ()


def test_tracker_forgets_an_ended_episode_when_asked(cartpole_record, cartpole_model):
    """What `Recorder` does with each id it ended (it never reuses one): memory stays bounded."""
    tracker = EpisodeTracker(cartpole_model)
    for record in episode(cartpole_record, 2):
        tracker.add(validate_step(record, cartpole_model))
    assert (tracker.episodes, tracker.terminated) == (1, 1)
    tracker.forget("ep-0")
    assert (tracker.episodes, tracker.terminated, tracker.open_episodes) == (0, 1, [])


def episode_messages_problems(steps: list[dict], model=None) -> list:
    with pytest.raises(ContractError) as info:
        validate_episode(steps, model) if model else validate_episode(steps)
    return info.value.problems


def test_tracker_counts_interleaved_episodes(cartpole_record, cartpole_model):
    tracker = EpisodeTracker(cartpole_model)
    a = episode(dict(cartpole_record, episode_id="a"), 3)
    b = episode(dict(cartpole_record, episode_id="b"), 2, last="truncated")
    c = episode(dict(cartpole_record, episode_id="c"), 2, last="")
    for record in [a[0], b[0], a[1], c[0], b[1], a[2], c[1]]:
        assert tracker.add(validate_step(record, cartpole_model)) == []
    assert (tracker.steps, tracker.episodes, tracker.terminated, tracker.truncated) == (7, 3, 1, 1)
    assert tracker.open_episodes == ["c"]
    assert [p.line for p in tracker.finish(require_complete=True)] == [None]


# -- batches ------------------------------------------------------------------------------

def make_batch(B: int = 2, T: int = 3) -> dict:
    mask = np.ones((B, T), bool)
    mask[1, 2] = False
    done = np.zeros((B, T), bool)
    done[0, 2] = done[1, 1] = True
    return {
        "obs": np.zeros((B, T, 4), np.float32), "action": np.zeros((B, T), np.int64),
        "reward": np.ones((B, T), np.float32), "done": done, "terminated": done.copy(),
        "truncated": np.zeros((B, T), bool), "advantage": np.zeros((B, T), np.float32),
        "logprob": np.full((B, T), -0.5, np.float32), "mask": mask,
        "policy_version": np.array([4, 3]), "episode_id": np.array(["a", "b"]),
    }


def batch_messages(batch: dict, **kw) -> list[str]:
    with pytest.raises(ContractError) as info:
        validate_batch(batch, **kw)
    return [str(p) for p in info.value.problems]


def test_good_batch_and_nan_padding_is_fine():
    batch = make_batch()
    batch["advantage"][1, 2] = np.nan
    out = validate_batch(batch)
    assert out.obs.shape == (2, 3, 4) and out.arrays()["mask"].sum() == 5


def test_batch_rules_word_for_word():
    batch = make_batch()
    batch["advantage"][0, 1] = np.nan
    assert batch_messages(batch) == [
        "advantage: not finite: expected finite values where mask is True, "
        "got non-finite values in rows [0]"]
    batch = make_batch()
    batch["mask"][0] = [True, False, True]
    batch["done"][0, 2] = batch["terminated"][0, 2] = False
    assert batch_messages(batch) == [
        "mask: padding before a real step: expected True then only False along each row "
        "(padding at the end), got rows [0]"]
    batch = make_batch()
    batch["done"][1, 2] = True
    assert batch_messages(batch)[0] == (
        "done: flag set on padding: expected False where mask is False, got True on padding in rows [1]")
    batch = make_batch()
    batch["truncated"][0, 0] = True
    assert batch_messages(batch) == [
        "done: done disagrees with terminated/truncated: expected terminated OR truncated on every "
        "real step, got a different value in rows [0]"]


def test_batch_dims_bind():
    batch = make_batch()
    batch["reward"] = np.ones((2, 4), np.float32)
    assert batch_messages(batch) == [
        "reward: dim T disagrees with an earlier field: expected T=3, got T=4 (float32[2, 4])"]


def test_missing_batch_field_is_never_filled():
    batch = make_batch()
    del batch["advantage"]
    assert batch_messages(batch) == [
        "advantage: missing required field: expected float32[B, T], got nothing"]


def test_staleness_names_the_episode():
    assert batch_messages(make_batch(), current_version=4, max_staleness=0) == [
        "policy_version[1]: stale policy version: expected 4..4 (current 4, max_staleness 0), "
        "got 3 (episode 'b')"]
    validate_batch(make_batch(), current_version=4, max_staleness=1)
    assert batch_messages(make_batch(), current_version=3, max_staleness=1)[0].startswith(
        "policy_version[0]: policy version from the future")


def test_tracker_skip_keeps_a_lost_step_from_blaming_the_next(cartpole_record, cartpole_model):
    tracker = EpisodeTracker(cartpole_model)
    steps = [validate_step(r, cartpole_model) for r in episode(cartpole_record, 3)]
    assert tracker.add(steps[0], line=1) == []
    tracker.skip("ep-0", 1, line=2)  # line 2 failed validation; its problems were reported
    assert tracker.add(steps[2], line=3) == []
    assert tracker.steps == 2 and tracker.terminated == 1


def test_did_you_mean_is_capped_for_huge_records():
    record = {f"k{i}": 1 for i in range(200)}
    with pytest.raises(ContractError) as info:
        validate_step(record)
    unknown = [p for p in info.value.problems if p.message == "unknown field"]
    assert len(unknown) == 200
    assert unknown[-1].expected == "only the model's fields"


def test_dims_are_fixed_by_the_first_valid_step_after_skipped_ones():
    # a first step that failed validation is only skipped: the next valid step sets the sizes
    tracker = EpisodeTracker()
    record = {"action": 1, "logprob": -0.5, "reward": 1.0, "episode_id": "e",
              "terminated": False, "truncated": False, "policy_version": 0}
    tracker.skip("e", 0, line=1)
    assert tracker.add(validate_step({**record, "observation": [1.0, 2.0], "step": 1}), 2) == []
    jump = tracker.add(validate_step({**record, "observation": [1.0, 2.0, 3.0], "step": 2}), 3)
    assert [(p.rule, p.line) for p in jump] == [("episode.dims_fixed", 3)]
