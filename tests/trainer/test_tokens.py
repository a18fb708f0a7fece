"""Token collation (`collate_tokens`) and token field maps (`"rows": "step"`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import ContractError, FieldMapError, InputError, MissingFieldError
from gyre_contract.core._tokens import TokenBatch
from gyre_contract.core._validate import validate_step
from gyre_contract.io._episodes import Episode
from gyre_contract.pinned import LLMStep
from gyre_contract.trainer import _collation as collation
from gyre_contract.trainer._fieldmap import FieldMap
from gyre_contract.trainer._layouts import TokenRows
from gyre_contract.trainer._tokens import collate_tokens


def step(episode: str, t: int, prompt: list[int], action: list[int], *, last: bool = True,
         version: int = 3, **extra: Any) -> dict[str, Any]:
    """A step record: one turn of `episode` with its prompt and generated tokens."""
    return {"observation": {"token_ids": prompt}, "action": action,
            "logprob": [-0.1 * (i + 1) for i in range(len(action))], "reward": float(t),
            "step": t, "episode_id": episode, "terminated": last, "truncated": False,
            "policy_version": version, **extra}


def episode_of(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The records of one episode as a mapping of columns (ragged fields as lists of arrays)."""
    columns: dict[str, Any] = {"observation": {"token_ids": [
        np.asarray(r["observation"]["token_ids"], np.int64) for r in records]}}
    for key in records[0]:
        if key == "observation":
            continue
        values = [r[key] for r in records]
        dtype = np.float32 if isinstance(values[0], float) else None  # as read from a file
        columns[key] = [np.asarray(v) for v in values] if isinstance(values[0], list) \
            else np.asarray(values, dtype)
    return columns


# -- properties ------------------------------------------------------------------------------

lengths = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 7)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(sizes=lengths, pad=st.integers(-1, 3), masked=st.booleans(), seed=st.integers(0, 2**16))
def test_padding_masks_and_the_round_trip_to_the_ragged_lists(sizes, pad, masked, seed):
    rng = np.random.default_rng(seed)
    records = []
    for i, (p, a) in enumerate(sizes):
        extra = {"loss_mask": rng.random(a).round().astype(bool).tolist()} if masked else {}
        records.append(step(f"e{i}", 0, rng.integers(5, 50, p).tolist(),
                            rng.integers(5, 50, a).tolist(), **extra))
    out = collate_tokens(records, pad_id=pad)
    b = len(sizes)
    prompt_lengths = np.array([p for p, _ in sizes])
    action_lengths = np.array([a for _, a in sizes])
    width_p, width_r = int(prompt_lengths.max()), int(action_lengths.max())
    assert out["prompt_ids"].shape == out["prompt_mask"].shape == (b, width_p)
    assert out["response_ids"].shape == out["response_mask"].shape == (b, width_r)
    assert out["logprob"].shape == (b, width_r) and out["logprob"].dtype == np.float32
    assert out["response_length"].tolist() == action_lengths.tolist()
    # left padding: only False then only True; right padding: only True then only False
    assert out["prompt_mask"].sum(axis=1).tolist() == prompt_lengths.tolist()
    assert not (~out["prompt_mask"][:, 1:] & out["prompt_mask"][:, :-1]).any()
    real = np.arange(width_r) < action_lengths[:, None]
    expected_mask = real & out["loss_mask"] if masked else real
    assert (out["response_mask"] == expected_mask).all()
    assert not (out["response_mask"] & ~real).any()
    assert (out["prompt_ids"][~out["prompt_mask"]] == pad).all()
    assert (out["response_ids"][~real] == pad).all() and (out["logprob"][~real] == 0).all()
    for i, record in enumerate(records):  # the round trip
        p, a = sizes[i]
        assert out["prompt_ids"][i, width_p - p:].tolist() == record["observation"]["token_ids"]
        assert out["response_ids"][i, :a].tolist() == record["action"]
        assert out["logprob"][i, :a].tolist() == pytest.approx(record["logprob"])
        if masked:
            assert out["loss_mask"][i, :a].tolist() == record["loss_mask"]
    assert out["episode_id"].tolist() == [f"e{i}" for i in range(b)]
    assert out["reward"].dtype == np.float32 and out["step"].dtype == np.int64


@settings(max_examples=30, deadline=None)
@given(episodes=st.lists(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1,
                                  max_size=4), min_size=1, max_size=5))
def test_episodes_and_their_flat_steps_give_the_same_rows_in_order(episodes):
    records_by_episode = []
    for e, turns in enumerate(episodes):
        records_by_episode.append([
            step(f"e{e}", t, list(range(1, p + 1)), list(range(10, 10 + a)),
                 last=t == len(turns) - 1) for t, (p, a) in enumerate(turns)])
    flat = [r for records in records_by_episode for r in records]
    from_steps = collate_tokens(flat)
    from_episodes = collate_tokens([episode_of(records) for records in records_by_episode])
    assert sorted(from_steps) == sorted(from_episodes)
    for key, value in from_steps.items():
        assert value.dtype == from_episodes[key].dtype, key
        assert value.tolist() == from_episodes[key].tolist(), key
    assert from_steps["step"].tolist() == [r["step"] for r in flat]


# -- the forms of input ------------------------------------------------------------------------

def test_validated_step_models_and_episode_objects():
    records = [step("a", 0, [1, 2], [5, 6, 7], last=False), step("a", 1, [3], [8]),
               step("b", 0, [4, 4, 4], [9, 9])]
    models = [validate_step(r, LLMStep) for r in records]
    out = collate_tokens(models)
    assert out["prompt_ids"].tolist() == [[0, 1, 2], [0, 0, 3], [4, 4, 4]]
    assert out["response_ids"].tolist() == [[5, 6, 7], [8, 0, 0], [9, 9, 0]]
    assert out["policy_version"].dtype == np.int64 and out["reward"].dtype == np.float32
    some = collate_tokens(models, fields=["reward", "logprob"])  # by attribute, these only
    assert sorted(some) == ["episode_id", "logprob", "policy_version", "prompt_ids",
                            "prompt_mask", "response_ids", "response_length", "response_mask",
                            "reward"]  # policy_version comes whenever every step records it
    with pytest.raises(MissingFieldError, match="observation.text"):  # no step records text
        collate_tokens(models, fields=["observation.text"])
    for key, value in some.items():
        assert value.dtype == out[key].dtype and value.tolist() == out[key].tolist(), key
    episode = Episode("a", episode_of(records[:2]))
    again = collate_tokens([episode, Episode("b", episode_of(records[2:]))])
    assert again["response_ids"].tolist() == out["response_ids"].tolist()


def test_info_is_never_collated():
    out = collate_tokens([step("a", 0, [1], [5], info={"seed": 3, "note": "x"})])
    assert not [k for k in out if k.startswith("info")]


def test_a_fixed_width_column_is_a_2d_array():
    columns = episode_of([step("a", 0, [1, 2], [5, 6], last=False), step("a", 1, [3, 4], [7, 8])])
    columns["action"] = np.stack(columns["action"])             # [T, A]: every turn 2 tokens
    columns["logprob"] = np.stack(columns["logprob"]).astype(np.float32)
    out = collate_tokens([columns])
    assert out["response_ids"].tolist() == [[5, 6], [7, 8]]
    assert out["logprob"].shape == (2, 2)


def test_fields_limit_the_columns_and_name_what_is_absent():
    records = [step("a", 0, [1], [5], group_id="g"), step("b", 0, [2], [6])]
    out = collate_tokens(records)
    assert "group_id" not in out  # only some steps carry it: left out without `fields`
    with pytest.raises(ContractError, match=r"steps\[1\].group_id: episode 'b' step 0: only "
                                            r"some steps carry 'group_id'"):
        collate_tokens(records, fields=["group_id"])
    with pytest.raises(MissingFieldError, match="ref_logprob"):
        collate_tokens(records, fields=["ref_logprob"])
    out = collate_tokens(records, fields=["reward"])
    assert sorted(out) == ["episode_id", "policy_version", "prompt_ids", "prompt_mask",
                           "response_ids", "response_length", "response_mask", "reward"]
    unversioned = [{k: v for k, v in r.items() if k != "policy_version"} for r in records]
    assert "policy_version" not in collate_tokens(unversioned[:1] + records[1:], fields=["reward"])


def test_a_step_without_loss_mask_counts_all_its_tokens():
    records = [step("a", 0, [1], [5, 6], loss_mask=[True, False]), step("b", 0, [2], [6, 7])]
    for fields in (None, ["reward"]):  # loss_mask shapes response_mask even when not asked
        out = collate_tokens(records, fields=fields)
        assert out["response_mask"].tolist() == [[True, False], [True, True]]
        assert out["loss_mask"].tolist() == [[True, False], [True, True]]


# -- refusals --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["logprob", "ref_logprob", "loss_mask", "token_reward"])
def test_a_per_token_field_of_the_wrong_length_names_the_step_and_both_lengths(name):
    good = {"logprob": [-0.1] * 8, "ref_logprob": [-0.2] * 8, "loss_mask": [True] * 8,
            "token_reward": [0.0] * 8}
    bad = dict(good, **{name: good[name][:7]})
    records = [step("a", 0, [1], [5] * 8, last=False, **good),
               step("a", 1, [1], [5] * 8, **bad)]
    with pytest.raises(ContractError) as err:
        collate_tokens(records)
    [problem] = err.value.problems
    assert problem.path == f"steps[1].{name}"
    assert problem.message == f"episode 'a' step 1: {name} has 7 values for 8 action tokens"
    with pytest.raises(ContractError) as err:  # the same as an episode of columns
        collate_tokens([episode_of(records)])
    assert [p.path for p in err.value.problems] == [f"episodes[0].steps[1].{name}"]


def test_a_step_model_that_bypassed_validation_is_still_refused():
    good = validate_step(step("a", 0, [1, 2], [5, 6, 7]), LLMStep)
    forged = LLMStep.model_construct(**{**dict(good), "logprob": np.array([-0.1], np.float32),
                                        "episode_id": "b"})
    with pytest.raises(ContractError, match="episode 'b' step 0: logprob has 1 value for 3 "
                                            "action tokens"):
        collate_tokens([good, forged])


def test_other_refusals():
    with pytest.raises(ContractError, match="nothing to collate"):
        collate_tokens([])
    with pytest.raises(MissingFieldError, match="observation.token_ids"):
        collate_tokens([dict(step("a", 0, [1], [5]), observation={"text": "hi"})])
    with pytest.raises(ContractError, match="logprob is one value per step, not per token"):
        collate_tokens([dict(step("a", 0, [1], [5, 6]), logprob=-0.3)])
    with pytest.raises(ContractError, match="token ids must be integers"):
        collate_tokens([dict(step("a", 0, [1], [5]), action=[0.5])])
    with pytest.raises(ContractError, match="not one 1-D array per step"):
        collate_tokens([dict(step("a", 0, [1], [5]), action=[[5], [6]])])
    with pytest.raises(ValueError, match="pad_id must be an integer"):
        collate_tokens([step("a", 0, [1], [5])], pad_id=0.5)
    with pytest.raises(TypeError, match="not both"):
        collate_tokens([step("a", 0, [1], [5]), episode_of([step("b", 0, [1], [5])])])


def test_the_padded_size_is_checked_before_allocating(monkeypatch):
    records = [step("long", 0, [1] * 10, [5] * 5000)] + [step(f"s{i}", 0, [1], [5])
                                                        for i in range(100)]
    with pytest.raises(collation.BatchTooLargeError) as err:
        collate_tokens(records, max_bytes=100_000)
    assert "padded token batch [B=101, P=10, R=5000]" in str(err.value)
    assert "separate batches (buckets)" in str(err.value)
    monkeypatch.setattr(collation, "MAX_BATCH_BYTES", 100_000)  # the module value, read per call
    with pytest.raises(collation.BatchTooLargeError):
        collate_tokens(records)
    assert collate_tokens(records, max_bytes=10**8)["response_ids"].shape == (101, 5000)


# -- multi-turn ------------------------------------------------------------------------------

def conversation() -> list[dict[str, Any]]:
    """Three turns of one episode; turn 1 splices 2 tokens of tool output into its response."""
    return [
        step("chat", 0, [1, 2, 3], [10, 11], last=False, loss_mask=[True, True]),
        step("chat", 1, [1, 2, 3, 10, 11, 4], [12, 90, 91, 13], last=False,
             loss_mask=[True, False, False, True]),
        step("chat", 2, [1, 2, 3, 10, 11, 4, 12, 90, 91, 13, 5], [14], loss_mask=[True]),
    ]


def test_a_conversation_is_one_episode_each_turn_a_row():
    for source in (conversation(), [episode_of(conversation())]):
        out = collate_tokens(source)
        assert out["episode_id"].tolist() == ["chat"] * 3
        assert out["step"].tolist() == [0, 1, 2]
        assert out["response_ids"][1].tolist() == [12, 90, 91, 13]
        assert out["response_mask"].tolist() == [[True, True, False, False],
                                                 [True, False, False, True],
                                                 [True, False, False, False]]
        assert out["response_length"].tolist() == [2, 4, 1]
        assert out["prompt_mask"].sum(axis=1).tolist() == [3, 6, 11]


# -- token field maps --------------------------------------------------------------------------

TOKEN_MAP = {"gyre_field_map": 1, "rows": "step", "fields": {
    **{k: {"from": k} for k in ("prompt_ids", "prompt_mask", "response_ids", "response_mask",
                                "response_length", "logprob", "reward", "episode_id",
                                "policy_version", "step")},
    "advantage": {"from": "reward"}}}


def test_a_token_map_parses_writes_and_builds_a_token_batch():
    fmap = FieldMap.from_dict(TOKEN_MAP)
    assert isinstance(fmap.layout, TokenRows) and fmap.batch_model is TokenBatch
    assert fmap.to_dict()["rows"] == "step"
    assert FieldMap.from_dict(fmap.to_dict()).layout == TokenRows()
    assert "rows" not in FieldMap.from_dict({**TOKEN_MAP, "rows": "episode"}).to_dict()
    batch = fmap.to_train_batch(conversation(), current_version=3, max_staleness=0)
    assert isinstance(batch, TokenBatch)
    assert batch.response_mask.sum() == 5 and batch.advantage.shape == (3,)
    assert fmap.describe() == "one token row per step; advantage ← reward"
    with pytest.raises(InputError, match="one row per step"):
        fmap.collated(conversation(), max_len=4)


def test_a_bad_rows_value_is_a_map_problem():
    with pytest.raises(FieldMapError, match='"rows" must be "episode"'):
        FieldMap.from_dict({**TOKEN_MAP, "rows": "token"})


def test_a_token_map_refuses_stale_rows_naming_the_episode():
    fmap = FieldMap.from_dict(TOKEN_MAP)
    records = conversation() + [step("old", 0, [1], [5], version=1)]
    with pytest.raises(ContractError, match=r"policy_version\[3\]: stale policy version.*'old'"):
        fmap.to_train_batch(records, current_version=3, max_staleness=1)


@settings(max_examples=40, deadline=None)
@given(sizes=lengths, seed=st.integers(0, 2**16))
def test_every_collated_batch_is_a_valid_token_batch(sizes, seed):
    """Whatever the lengths (empty prompts and responses included), a token map's batch holds."""
    rng = np.random.default_rng(seed)
    records = [step(f"e{i}", 0, rng.integers(1, 9, p).tolist(), rng.integers(1, 9, a).tolist(),
                    loss_mask=(rng.random(a) < 0.8).tolist(), ref_logprob=[-0.5] * a)
               for i, (p, a) in enumerate(sizes)]
    fmap = FieldMap.from_dict({**TOKEN_MAP, "fields": {**TOKEN_MAP["fields"],
                                                       "ref_logprob": {"from": "ref_logprob"}}})
    batch = fmap.to_train_batch(records)
    assert batch.response_mask.sum() == sum(sum(r["loss_mask"]) for r in records)
    assert batch.prompt_mask.sum() == sum(p for p, _ in sizes)


def test_a_grpo_map_runs_its_token_ops_on_collated_rows():
    """group_norm, kl and per_token on the columns collate_tokens makes, validated as a
    TokenBatch: the advantage per token is the group-normalised reward under response_mask."""
    records = []
    for g, rewards in enumerate(([1.0, 0.0, 1.0], [0.0, 0.0, 1.0])):
        for k, reward in enumerate(rewards):
            a = 2 + k
            records.append(dict(step(f"p{g}/{k}", 0, [1, 2], [5] * a, ref_logprob=[-0.3] * a,
                                     loss_mask=[True] * (a - 1) + [False]),
                                reward=reward, group_id=f"p{g}"))
    fields = {k: {"from": k} for k in ("prompt_ids", "prompt_mask", "response_ids",
                                       "response_mask", "response_length", "logprob",
                                       "ref_logprob", "reward", "group_id", "episode_id",
                                       "policy_version", "step")}
    fields["advantage"] = {"op": "group_norm", "from": ["reward", "group_id"],
                           "then": [{"op": "per_token"}]}
    fields["kl"] = {"op": "kl", "from": ["logprob", "ref_logprob"], "estimator": "k1"}
    batch = FieldMap.from_dict({"gyre_field_map": 1, "rows": "step", "fields": fields}
                               ).to_train_batch(records)
    rewards = np.array([r["reward"] for r in records]).reshape(2, 3)
    expected = (rewards - rewards.mean(1, keepdims=True)) / (rewards.std(1, ddof=1,
                                                                         keepdims=True) + 1e-6)
    mask = batch.response_mask
    assert batch.advantage.shape == mask.shape
    assert np.allclose(batch.advantage[:, 0], expected.reshape(-1), atol=1e-6)
    assert (batch.advantage[~mask] == 0).all() and (batch.model_extra["kl"][~mask] == 0).all()
    assert np.allclose(batch.model_extra["kl"][mask], batch.logprob[mask] + 0.3, atol=1e-6)


def test_a_conversation_read_from_a_file(tmp_path):
    """The 3-turn episode written as LLMStep records, read back as an episode and as steps."""
    from gyre_contract.io._reading import read_episodes, read_steps
    from gyre_contract.io._writer import write_steps

    path = tmp_path / "chat.jsonl"
    write_steps(path, [validate_step(r, LLMStep) for r in conversation()])
    expected = collate_tokens(conversation())
    for source in (list(read_episodes(path, LLMStep)), list(read_steps(path, LLMStep))):
        out = collate_tokens(source)
        for key in ("prompt_ids", "response_ids", "response_mask", "loss_mask", "logprob",
                    "step", "episode_id"):
            assert out[key].tolist() == expected[key].tolist(), key


def test_the_padded_fills_on_two_threads_give_the_rows_of_one(request):
    rng = np.random.default_rng(7)
    records = [step(f"e{i}", 0, rng.integers(5, 50, rng.integers(0, 9)).tolist(),
                    rng.integers(5, 50, a).tolist(), ref_logprob=(-rng.random(a)).tolist(),
                    loss_mask=(rng.random(a) < 0.8).tolist())
               for i, a in enumerate(rng.integers(0, 12, 40).tolist())]
    one = collate_tokens(records, pad_id=-1)
    threads = request.getfixturevalue("fills_on_two_threads")  # from here on: two threads
    two = collate_tokens(records, pad_id=-1)
    assert threads == [5]  # prompt, response, logprob, ref_logprob, loss_mask
    assert one.keys() == two.keys()
    for key, value in one.items():
        assert value.dtype == two[key].dtype and np.array_equal(value, two[key]), key
