"""The fast path of validate_step gives exactly the normal path's verdicts, values and messages.

`fastpath.fast_validate` only ever accepts; whatever it accepts, the normal path (the model's own
pydantic validation) must accept too, with equal values of equal types. Random records, good and
bad, in list and numpy form, are run through both.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from gyre_contract.core._errors import ContractError
from gyre_contract.core._fastpath import fast_validate
from gyre_contract.core._models import Modalities, RolloutStep
from gyre_contract.core._tensor import Tensor
from gyre_contract.core._validate import problems_from, validate_step

pytestmark = pytest.mark.usefixtures("fast_paths_on")
"""These tests are about the fast paths: on here even when CI runs with GYRE_FAST_PATHS=0."""


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


class Pixels(Modalities):
    image: Tensor("uint8", [2, 2])
    depth: Tensor("float16", ["H"]) = None


class PixelStep(RolloutStep):
    observation: Pixels
    action: Tensor("float32", ["*act"])


def normal(record: Any, model: type[BaseModel]) -> BaseModel | list[str]:
    """The normal path alone: the instance, or the problems as text."""
    try:
        return model.model_validate(record)
    except ValidationError as err:
        return [str(p) for p in problems_from(err, model)]


def same_value(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
    if isinstance(a, BaseModel):
        return same_instance(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return b != b
    return bool(a == b) if not isinstance(a, np.generic) else a.dtype == b.dtype and a == b


def same_instance(a: BaseModel, b: BaseModel) -> bool:
    return (type(a) is type(b) and a.model_fields_set == b.model_fields_set
            and a.__dict__.keys() == b.__dict__.keys()
            and all(same_value(a.__dict__[k], b.__dict__[k]) for k in a.__dict__)
            and a.model_extra == b.model_extra)


def check_both_paths(record: Any, model: type[BaseModel]) -> None:
    expected = normal(record, model)
    fast = fast_validate(record, model)
    if fast is not None:
        assert isinstance(expected, BaseModel), f"fast path accepted what the normal path refuses: {expected}"
        assert same_instance(fast, expected)
    if isinstance(expected, list):
        with pytest.raises(ContractError) as info:
            validate_step(record, model)
        assert [str(p) for p in info.value.problems] == expected
    else:
        assert same_instance(validate_step(record, model), expected)


# -- the fast path is taken for the usual records ---------------------------------------------

def test_usual_records_take_the_fast_path(cartpole_record, cartpole_model, llm_record, llm_model):
    assert fast_validate(cartpole_record, cartpole_model) is not None
    assert fast_validate(llm_record, llm_model) is not None
    arrays = dict(llm_record, action=np.array([1016, 102]), logprob=np.float32([-0.1, -0.05]),
                  observation={"token_ids": np.array([101, 2023, 2003])})
    assert fast_validate(arrays, llm_model) is not None
    assert fast_validate(dict(cartpole_record, observation=np.zeros(4, np.float32)),
                         cartpole_model) is not None


def test_fast_path_returns_the_normal_types(cartpole_record, cartpole_model, llm_record, llm_model):
    check_both_paths(cartpole_record, cartpole_model)
    check_both_paths(llm_record, llm_model)
    step = fast_validate(cartpole_record, cartpole_model)
    assert type(step.observation) is np.ndarray and type(step.logprob) is float


def test_numpy_arrays_of_the_declared_dtype_are_not_copied(llm_record, llm_model):
    action = np.array([1016, 102], np.int64)
    step = validate_step(dict(llm_record, action=action), llm_model)
    assert step.action is action


@pytest.mark.parametrize("change", [
    {"observation": [2**25, 0, 0, 1]},          # ints in a float tensor: exactness rule
    {"observation": [0.5, 2**25, 0.0, 1.0]},    # mixed: numpy reads float64
    {"observation": [0.5, 2**24, 0.0, 1.0]},    # mixed, within the exact range
    {"observation": [0.5, 16777217.0, 0.0, 1.0]},  # a float: rounded
    {"reward": 2**24 + 1}, {"reward": 2**24}, {"reward": -(2**24 + 1)}, {"value": 2**53 + 1},
    {"reward": np.int64(2**24 + 1)}, {"reward": 16777217.0},
    {"observation": [0.1, True, 0.3, 0.4]},
    {"observation": np.array([0.1, np.nan, 0.3, 0.4])},
    {"observation": np.array([1e39, 0.0, 0.3, 0.4])},  # float64 beyond float32
    {"observation": np.zeros(4, np.int64)},
    {"observation": np.zeros((1, 4), np.float32)},
    {"observation": np.float32(0.5)},
    {"observation": (0.1, 0.2, 0.3, 0.4)},
    {"logprob": 1e-50},                        # rounds to 0 in float32: allowed
    {"logprob": 0.25},
    {"logprob": np.float32(-0.5)},
    {"logprob": 0},
    {"action": np.int64(1)},
    {"action": True},
    {"next_observation": [1.0, 2.0, 3.0, 4.0]},
    {"next_observation": [1.0]},
    {"reward": np.float32(1.0), "terminated": np.bool_(True), "step": np.int64(3)},
    {"info": {"seed": 3, "name": "x"}},
])
def test_edge_records_cartpole(cartpole_record, cartpole_model, change):
    check_both_paths(dict(cartpole_record, **change), cartpole_model)


@pytest.mark.parametrize("change", [
    {"action": []},
    {"action": [], "logprob": [], "loss_mask": [], "ref_logprob": []},
    {"action": np.array([], np.int64), "logprob": np.array([], np.float32)},
    {"logprob": [-(2**24 + 1), -0.5]},
    {"action": [2**63, 1]},
    {"action": [1, 2.0]},
    {"action": np.array([1, 2], np.int32)},
    {"action": np.array([1.0, 2.0])},
    {"logprob": [-0.1]},
    {"logprob": [0.5, -0.1]},
    {"logprob": np.array([-0.1, np.inf], np.float32)},
    {"logprob": np.array([-0.1, -np.inf], np.float32)},
    {"logprob": np.array([-0.1, -0.2])},
    {"logprob": [-1, -2]},
    {"observation": {"token_ids": []}},
    {"observation": {"token_ids": [1, 2], "text": ""}},
    {"observation": {"token_ids": np.array([[1, 2]])}},
    {"observation": {"token_ids": [1, 2], "extra": 1}},
    {"next_observation": {"token_ids": [5]}},
])
def test_edge_records_llm(llm_record, llm_model, change):
    check_both_paths(dict(llm_record, **change), llm_model)


@pytest.mark.parametrize("observation", [
    [0.0, 1.0], [[0.0, 1.0], [2.0, 3.0]], {"image": [[1, 2], [3, 4]], "text": "hi"},
    np.zeros((2, 2), np.float32), {"ids": [1, None]}, 3.5,
])
def test_edge_records_base_model(cartpole_record, observation):
    check_both_paths(dict(cartpole_record, observation=observation, action=[0.5, -0.5],
                          next_observation=observation), RolloutStep)


@pytest.mark.parametrize("change", [
    {}, {"observation": {"image": [[0, 300], [3, 4]]}},
    {"observation": {"image": [[0, 1], [3, 4]], "depth": [1.0, 70000.0]}},
    {"observation": {"image": [[0, 1], [3, 4]], "depth": np.float16([1.0, 2.0])}},
    {"observation": {"image": np.zeros((2, 2), np.uint8)}},
    {"action": 0.5}, {"action": [[0.5], [1.5]]}, {"logprob": [-0.5, 1.0]},
])
def test_edge_records_modalities(cartpole_record, change):
    record = dict(cartpole_record, observation={"image": [[0, 1], [2, 3]]}, action=[0.5, 1.5])
    check_both_paths(dict(record, **change), PixelStep)


# -- random records -------------------------------------------------------------------------

floats = st.one_of(st.floats(width=32, allow_nan=False, allow_infinity=False),
                   st.sampled_from([0.0, -0.0, 1e-50, 1e39, float("nan"), float("inf"), 0.25]))
scalars = st.one_of(floats, st.integers(-3, 3), st.sampled_from([2**24 + 1, 2**63, True, None, "1"]))


def vectors(n: st.SearchStrategy[int]) -> st.SearchStrategy[Any]:
    lists = n.flatmap(lambda k: st.lists(st.one_of(floats, st.integers(-2, 2)), min_size=k,
                                         max_size=k))
    dtypes = st.sampled_from(["float32", "float64", "int64", "int32", "float16"])
    return st.one_of(lists, st.tuples(lists, dtypes).map(lambda p: as_array(*p)))


def as_array(values: list[Any], dtype: str) -> np.ndarray:
    """The values as an array of `dtype` when they fit it, else as numpy reads them."""
    arr = np.array(values)
    with np.errstate(all="ignore"):
        cast = arr.astype(dtype)
    same = cast.astype(arr.dtype) == arr
    return cast if bool(np.all(same | (arr != arr))) else arr


@SETTINGS
@given(observation=st.one_of(vectors(st.sampled_from([3, 4])), scalars),
       logprob=st.one_of(scalars, vectors(st.just(1))),
       action=st.one_of(st.integers(-1, 2), scalars),
       extra=st.dictionaries(st.sampled_from(["reward", "step", "terminated", "value"]), scalars,
                             max_size=2))
def test_random_cartpole_records(cartpole_record, cartpole_model, observation, logprob, action,
                                 extra):
    record = dict(cartpole_record, observation=observation, logprob=logprob, action=action, **extra)
    check_both_paths(record, cartpole_model)


@SETTINGS
@given(tokens=vectors(st.integers(0, 3)), action=vectors(st.integers(0, 3)),
       logprob=vectors(st.integers(0, 3)), as_arrays=st.booleans())
def test_random_llm_records(llm_record, llm_model, tokens, action, logprob, as_arrays):
    record = dict(llm_record, observation={"token_ids": tokens}, action=action, logprob=logprob)
    check_both_paths(record, llm_model)
    if as_arrays:
        record = dict(record, action=np.asarray(action), logprob=np.asarray(logprob))
        check_both_paths(record, llm_model)


# -- the default model: free observation, int64 | float32 action, logprob [] or the action's ----

IMAGE = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)


@pytest.mark.parametrize("change", [
    {},
    {"observation": np.float32([0.1, 0.2, 0.3, 0.4])},
    {"observation": [[0.5, 0.25], [1.0, -2.0]]},               # any fixed rank
    {"observation": [[[0.5], [0.25]], [[1.0], [-2.0]]], "next_observation": [[[1.5], [2.0]],
                                                                               [[0.0], [1.0]]]},
    {"observation": IMAGE, "next_observation": IMAGE},          # an integer image keeps its dtype
    {"observation": np.zeros((2, 3), np.float64)},              # cast once to float32
    {"observation": {"image": IMAGE, "text": "hi", "ids": [1, 2], "feat": [[0.5, 1.5]]}},
    {"action": np.int64(1)}, {"action": 0.5}, {"action": [0.5, -0.5], "logprob": [-0.1, -0.2]},
    {"action": [[1, 2], [3, 4]], "logprob": [[-0.1, -0.2], [-0.3, -0.4]]},
    {"action": np.array([1, 2], np.int64), "logprob": np.float32([-0.1, -0.2])},
    {"action": np.float32([0.5, 1.5]), "logprob": 0.7},         # continuous: logprob may be > 0
    {"action": np.float32(0.5)},
])
def test_usual_default_records_take_the_fast_path(cartpole_record, change):
    record = dict(cartpole_record, **change)
    assert fast_validate(record, RolloutStep) is not None
    check_both_paths(record, RolloutStep)


def test_llm_record_under_the_default_model_takes_the_fast_path(llm_record):
    assert fast_validate(llm_record, RolloutStep) is not None
    check_both_paths(llm_record, RolloutStep)
    step = validate_step(llm_record, RolloutStep)
    assert step.observation["token_ids"].dtype == np.int64 and step.observation["text"] == "2+2="
    assert step.action.dtype == np.int64 and step.logprob.dtype == np.float32


def test_default_model_keeps_numpy_arrays_of_the_declared_dtype(cartpole_record):
    obs, action = np.float32([0.1, 0.2]), np.array([3, 4], np.int64)
    step = validate_step(dict(cartpole_record, observation={"x": obs, "image": IMAGE},
                              action=action, logprob=np.float32([-1.0, -2.0])), RolloutStep)
    assert step.observation["x"] is obs and step.observation["image"] is IMAGE
    assert step.action is action


@pytest.mark.parametrize("observation", [
    [1, 2], [0.5, 1], [1, 0.5], [[0.5], [0.5, 1.0]], [[0.5], 1.0], [[[[[0.5]]]]], [], [[]],
    [0.5, float("nan")], [1e39], [0.5, True], 3.5, 2, None, "text", (0.5, 0.25),
    np.float64([1e39]), np.float64([np.nan]), np.float16([1.0, 2.0]), np.array([True]),
    np.int32([1, 2]), np.uint64([2**63]), np.float32(0.5), np.int64(3), np.array(0.5, np.float32),
    np.array([1.0, 2.0], ">f4"), np.array([1, 2], ">i4"), np.array([1 + 2j]), np.array(["a"]),
    {"token_ids": [1, 2**63]}, {"token_ids": [1, 2**64]}, {"t": [True]}, {"t": []}, {"t": [[]]},
    {"t": [[], [1]]}, {"t": [[1], []]}, {"t": [1, 2.5]}, {"t": [2.5, 1]}, {"t": ""},
    {"t": None}, {"t": 3}, {"t": 0.5}, {1: [1]}, {"t": np.array([1.0, np.nan])},
    {"t": np.float64([0.5])}, {"t": np.array([0.5], ">f4")}, {"t": np.array("x")},
    {"t": np.zeros(2, complex)}, {"t": np.array(3)}, {"t": np.float32(1.0)}, {"t": [[[[[1]]]]]},
    {"t": [1e39]}, {"t": ["a", "b"]}, {}, {"t": np.array([1, 2], object)},
])
def test_edge_observations_default_model(cartpole_record, observation):
    check_both_paths(dict(cartpole_record, observation=observation), RolloutStep)


@pytest.mark.parametrize("action", [
    1, -1, 0.5, True, 2**63, -(2**63) - 1, 2**62, float("nan"), 1e39, [1, 2], [0.5, 1], [1, 0.5],
    [], [[]], [[1, 2], [3]], [[1, 2], [3, 4]], [[0.5]], [[[[[1]]]]], [True], [1, None], "1",
    np.int64(3), np.int32(3), np.float32(0.5), np.float32(np.nan), np.float64(0.5), np.bool_(True),
    np.array([1, 2], np.int32), np.array([1, 2], np.uint64), np.array([2**63], np.uint64),
    np.array([0.5], np.float64), np.array([1e39]), np.array([np.inf], np.float32),
    np.array(1), np.array([True]), np.array([1, 2], ">i8"), np.zeros((2, 0), np.int64),
])
@pytest.mark.parametrize("logprob", [-0.5, 0.5, None, [-0.5], [0.5]])
def test_edge_actions_default_model(cartpole_record, action, logprob):
    record = dict(cartpole_record, action=action, logprob=logprob)
    if logprob is None:
        del record["logprob"]
    check_both_paths(record, RolloutStep)


@pytest.mark.parametrize("change", [
    {"logprob": [-0.1, -0.2], "action": [1, 2, 3]},
    {"logprob": [[-0.1, -0.2]], "action": [1, 2]},
    {"logprob": [[-0.1, -0.2]], "action": [[1, 2]]},
    {"logprob": [[-0.1, 0.2]], "action": [[1, 2]]},
    {"logprob": [[-0.1, 0.2]], "action": [[0.5, 2.5]]},
    {"logprob": np.float32([-0.1, 0.2]), "action": [1, 2]},
    {"logprob": np.float64([-0.1, -0.2]), "action": [1, 2]},
    {"logprob": np.float32(0.5), "action": 1},
    {"logprob": 1e-50}, {"logprob": -1e39}, {"logprob": [-1, -2], "action": [1, 2]},
    {"logprob": np.float64(-0.5)}, {"logprob": np.float64(0.5), "action": 0.5},
    {"ref_logprob": np.float64(-0.25)}, {"ref_logprob": [np.float64(-0.25)], "action": [1]},
    {"logprob": [], "action": []}, {"logprob": [], "action": [1]},
    {"next_observation": [0.5, 0.5, 0.5, 0.5]}, {"next_observation": [0.5]},
    {"next_observation": {"x": [0.5]}},
    {"observation": {"a": [0.5]}, "next_observation": {"b": [0.5]}},
    {"observation": {"a": [0.5]}, "next_observation": {"a": [0.5, 0.5]}},
    {"observation": {"a": [0.5]}, "next_observation": [0.5]},
    {"observation": np.zeros((2, 2), np.float32), "next_observation": np.zeros(4, np.float32)},
    {"observation": IMAGE, "next_observation": IMAGE[:1]},
])
def test_edge_cross_field_default_model(cartpole_record, change):
    check_both_paths(dict(cartpole_record, **change), RolloutStep)


def tensors(elements: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Nested lists of a random shape (rank 0 to 3), sometimes made ragged."""
    def fill(shape: list[int]) -> st.SearchStrategy[Any]:
        if not shape:
            return elements
        return st.lists(fill(shape[1:]), min_size=shape[0], max_size=shape[0])

    shaped = st.lists(st.integers(0, 3), max_size=3).flatmap(fill)
    ragged = st.tuples(shaped, shaped).map(lambda p: [p[0], p[1]])
    return st.one_of(shaped, shaped, shaped, ragged)


def as_numpy(values: Any, dtype: str) -> Any:
    """`as_array` when numpy can read the values at all, else the values as they are."""
    try:
        with np.errstate(all="ignore"):
            return as_array(values, dtype)
    except (ValueError, TypeError, OverflowError):
        return values


small_ints = st.integers(-3, 3)
leaves = st.sampled_from([floats, small_ints, st.one_of(floats, small_ints, scalars)])
tensor_values = leaves.flatmap(tensors)
numpy_dtypes = st.sampled_from(["float32", "float64", "float16", "int64", "int32", "uint8"])
tensor_forms = st.one_of(tensor_values, st.tuples(tensor_values, numpy_dtypes).map(
    lambda p: as_numpy(*p)))
modalities = st.dictionaries(st.sampled_from(["token_ids", "image", "text"]),
                             st.one_of(tensor_forms, st.text(max_size=3)), max_size=3)
observations = st.one_of(tensor_forms, tensor_forms, modalities)


@SETTINGS
@given(observation=observations, action=tensor_forms, logprob=st.one_of(tensor_forms, floats),
       next_observation=st.one_of(st.none(), observations), same_next=st.booleans(),
       matching_logprob=st.booleans())
def test_random_default_model_records(cartpole_record, observation, action, logprob,
                                      next_observation, same_next, matching_logprob):
    """Any observation, action and logprob, in list and numpy forms: both paths agree."""
    if matching_logprob and isinstance(action, list):  # logprob with the action's dims, often valid
        logprob = (-np.abs(np.asarray(action, dtype=float))).tolist() \
            if _rectangular(action) else logprob
    record = dict(cartpole_record, observation=observation, action=action, logprob=logprob)
    if same_next:
        record["next_observation"] = observation
    elif next_observation is not None:
        record["next_observation"] = next_observation
    check_both_paths(record, RolloutStep)


def _rectangular(value: Any) -> bool:
    try:
        arr = np.asarray(value, dtype=float)
    except (ValueError, TypeError, OverflowError):
        return False
    return bool(np.isfinite(arr).all())


masks = st.one_of(st.lists(st.booleans(), max_size=4),
                  st.lists(st.booleans(), max_size=4).map(np.array),
                  st.booleans(), st.sampled_from([[1, 0], [True, None], np.zeros(2, np.int8)]))
token_fields = st.fixed_dictionaries({}, optional={
    "ref_logprob": st.one_of(vectors(st.integers(0, 4)), floats),
    "loss_mask": masks, "token_reward": st.one_of(vectors(st.integers(0, 4)), floats),
    "group_id": st.sampled_from(["prompt-1", "", 3, None])})


@SETTINGS
@given(tokens=vectors(st.integers(0, 4)), action=vectors(st.integers(0, 4)),
       logprob=vectors(st.integers(0, 4)), text=st.one_of(st.none(), st.text(max_size=4)),
       extra=token_fields)
def test_random_llm_records_default_model(llm_record, tokens, action, logprob, text, extra):
    """LLM records (with the v1.1 token fields) under the default model: both paths agree."""
    observation = {"token_ids": tokens} if text is None else {"token_ids": tokens, "text": text}
    check_both_paths(dict(llm_record, observation=observation, action=action, logprob=logprob,
                          **extra), RolloutStep)


@pytest.mark.parametrize("extra", [
    {"ref_logprob": [-0.2, -0.3], "loss_mask": [True, False], "token_reward": [0.0, 1.0],
     "group_id": "prompt-7"},
    {"ref_logprob": -0.2}, {"ref_logprob": np.float32([-0.2, -0.3])},
    {"loss_mask": np.array([True, True])}, {"token_reward": np.float32([0.5, -0.5])},
])
def test_llm_record_with_token_fields_takes_the_fast_path(llm_record, extra):
    record = dict(llm_record, **extra)
    assert fast_validate(record, RolloutStep) is not None
    check_both_paths(record, RolloutStep)


@pytest.mark.parametrize("extra", [
    {"ref_logprob": [-0.2]}, {"ref_logprob": [-0.2, 0.3]}, {"ref_logprob": 0.3},
    {"ref_logprob": [[-0.2, -0.3]]}, {"loss_mask": [True]}, {"loss_mask": True},
    {"token_reward": [0.5, 0.5, 0.5]}, {"token_reward": 0.5}, {"group_id": ""},
])
def test_llm_record_with_broken_token_fields(llm_record, extra):
    check_both_paths(dict(llm_record, **extra), RolloutStep)
    with pytest.raises(ContractError):
        validate_step(dict(llm_record, **extra), RolloutStep)


@pytest.mark.parametrize("change", [
    {}, {"observation": [[0.5, 1], [0.5]]}, {"action": [1, 2], "logprob": [-0.5, 0.5]},
    {"observation": {"t": [1, 2.5]}}, {"action": np.float32([np.nan])},
])
def test_switch_off_gives_the_same_verdict(cartpole_record, monkeypatch, change):
    """`GYRE_FAST_PATHS=0`: the explaining path alone; same instance or same messages."""
    record = dict(cartpole_record, **change)

    def outcome() -> Any:
        try:
            return validate_step(record, RolloutStep)
        except ContractError as err:
            return [str(p) for p in err.problems]

    fast = outcome()
    monkeypatch.setenv("GYRE_FAST_PATHS", "0")
    slow = outcome()
    assert type(fast) is type(slow)
    assert fast == slow if isinstance(fast, list) else same_instance(fast, slow)


@pytest.mark.parametrize("value", [np.float32("inf"), np.float32("-inf"), np.float32("nan")])
def test_a_non_finite_numpy_scalar_action_is_refused_without_a_warning(value):
    """The default action (int64 or float32) given as a numpy float32 scalar takes a fast check
    of its own: a NaN or infinity goes to the explaining path, which refuses it, and no numpy
    RuntimeWarning escapes (warnings are errors in this suite)."""
    record = {"observation": [0.1, 0.2], "action": value, "reward": 1.0, "step": 0,
              "episode_id": "a", "terminated": False, "truncated": False, "policy_version": 0}
    with pytest.raises(ContractError) as caught:
        validate_step(record)
    assert [(p.path, p.message) for p in caught.value.problems] == [("action", "not finite")]


# -- a scalar field's schema in the fast plan ----------------------------------------------------

class _FloatChild(float):
    pass


class _IntChild(int):
    pass


class _StrChild(str):
    pass


_SCALAR_INPUTS = [
    0.5, -0.0, 1e-50, 3.4e38, 1e39, float("nan"), float("inf"), -float("inf"), 0, 1, -5,
    2**24, 2**24 + 1, -(2**24 + 1), 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64,
    -(2**63) - 1, True, False, _FloatChild(0.5), _IntChild(3), _StrChild("x"), "x", "",
    np.float16(0.5), np.float32(0.1), np.float64(0.1), np.float64("nan"), np.float32("inf"),
    np.int8(-3), np.int64(2**40), np.uint64(2**64 - 1), np.uint8(7), np.bool_(True),
    np.str_("x"), np.str_(""), np.longdouble(0.5), np.complex64(1), np.datetime64(1, "s"),
    None, [1.0], (1,), {"a": 1}, b"x", np.array(1.0), np.array([1.0]),
]


@pytest.mark.parametrize("dtype", sorted(
    {"bool", "string", "bfloat16", "float16", "float32", "float64", "int8", "int16", "int32",
     "int64", "uint8", "uint16", "uint32", "uint64"}))
def test_a_scalar_in_the_fast_plan_takes_what_the_normal_schema_takes_as_it_takes_it(dtype):
    """`fastforms.scalar_choices` (one left-to-right union) against the schema the model has
    (`tensor.scalar_core_schema`, pydantic's smart union): what the fast one accepts, the normal
    one accepts as the same value of the same type."""
    from pydantic_core import SchemaValidator
    from pydantic_core import ValidationError as CoreError

    from gyre_contract.core._fastforms import scalar_choices
    from gyre_contract.core._tensor import scalar_core_schema

    schema = scalar_core_schema(dtype, "x")
    fast, usual = SchemaValidator(scalar_choices(schema)), SchemaValidator(schema)
    assert scalar_choices(schema)["mode"] == "left_to_right"
    accepted = 0
    for value in _SCALAR_INPUTS:
        try:
            got = fast.validate_python(value)
        except (CoreError, ValueError, TypeError, OverflowError):
            continue
        want = usual.validate_python(value)  # raises, failing the test, if it refuses
        assert same_value(got, want), (value, got, want)
        accepted += 1
    assert accepted >= 3  # each dtype's usual forms: a Python value, numpy scalars
