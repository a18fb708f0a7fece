"""The token ops (gyre_contract.trainer._tokenops) against references written row by row and group
by group in plain Python, hypothesis properties, and the cases trainers meet: equal rewards,
groups of one, graded rewards, truncated completions, batch scale, no std."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import ContractError, FieldMapError, MissingFieldError
from gyre_contract.trainer import _ops as ops
from gyre_contract.trainer import _tokenops as tokenops
from gyre_contract.trainer._fieldmap import FieldMap

# -- references: plain loops, written from the formulas, not from the implementation --------


def ref_group_norm(r, g, std="unbiased", scale="group", eps=1e-6, singletons="error"):
    members: dict = {}
    for i, key in enumerate(g):
        members.setdefault(key, []).append(i)
    spread = {"unbiased": statistics.stdev, "biased": statistics.pstdev}
    out = [0.0] * len(r)
    for idx in members.values():
        vals = [float(r[i]) for i in idx]
        if len(idx) == 1:
            assert singletons != "error"
            if singletons == "zero":
                continue
            mean, sd = 0.0, 1.0
        else:
            mean = sum(vals) / len(vals)
            sd = spread[std](vals) if std != "none" else None
        if scale == "batch" and std != "none":
            sd = spread[std]([float(x) for x in r])
        for i in idx:
            out[i] = r[i] - mean if std == "none" else (r[i] - mean) / (sd + eps)
    return out


def ref_rloo(r, g, singletons="error"):
    out = []
    for i, key in enumerate(g):
        others = [float(r[j]) for j in range(len(r)) if g[j] == key and j != i]
        if not others:
            out.append(float(r[i]) if singletons == "raw" else 0.0)
        else:
            out.append(float(r[i]) - sum(others) / len(others))
    return out


def ref_kl(lp, ref, mask, estimator):
    out = np.zeros(np.shape(lp))
    for b in range(len(lp)):
        for t in range(len(lp[b])):
            if mask[b][t]:
                d = float(lp[b][t]) - float(ref[b][t])
                out[b, t] = {"k1": d, "k2": d * d / 2,
                             "k3": math.exp(float(ref[b][t]) - float(lp[b][t]))
                             - (float(ref[b][t]) - float(lp[b][t])) - 1}[estimator]
    return out


def ref_kl_reward(reward, lp, ref, mask, length, beta, estimator="k1"):
    out = -beta * ref_kl(lp, ref, mask, estimator)
    for b in range(len(reward)):
        out[b, length[b] - 1] += float(reward[b])
    return out


# -- builders ------------------------------------------------------------------------------

def token_columns(lengths, width, *, seed=0, prompt_lengths=None, prompt_width=4):
    """Token rows as the collation lays them out: prompt left-padded, response right-padded."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, np.int64)
    rows = len(lengths)
    real = np.arange(width) < lengths[:, None]
    prompt_lengths = np.asarray(prompt_lengths if prompt_lengths is not None
                                else rng.integers(1, prompt_width + 1, rows), np.int64)
    prompt_real = np.arange(prompt_width) >= (prompt_width - prompt_lengths)[:, None]
    lp = np.where(real, -rng.uniform(0.01, 3, (rows, width)), 0).astype(np.float32)
    ref = np.where(real, -rng.uniform(0.01, 3, (rows, width)), 0).astype(np.float32)
    return {
        "prompt_ids": np.where(prompt_real, rng.integers(1, 1000, (rows, prompt_width)), 0),
        "prompt_mask": prompt_real,
        "response_ids": np.where(real, rng.integers(1, 1000, (rows, width)), 0),
        "response_mask": real.copy(),
        "response_length": lengths,
        "logprob": lp,
        "ref_logprob": ref,
        "reward": rng.normal(size=rows).astype(np.float32),
    }


def run(name, sources, columns, **args):
    op = ops.get_op(name)
    return ops.run_op(op, [columns[s] for s in sources], columns, args, tuple(sources))


def close(a, b, tol=2e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=tol, atol=tol)


# -- group_norm ----------------------------------------------------------------------------

GROUPED = {"reward": np.array([1, 0, 0, 1, 0.5, 0.25, 0.75, 2, 3], np.float32),
           "group_id": np.array(["p0", "p0", "p0", "p0", "p1", "p1", "p1", "p2", "p2"])}


@pytest.mark.parametrize("std", tokenops.STD_MODES)
@pytest.mark.parametrize("scale", tokenops.SCALES)
@pytest.mark.parametrize("eps", [1e-6, 1e-4, 0.0])
def test_group_norm_matches_the_reference_on_graded_rewards(std, scale, eps):
    got = run("group_norm", ("reward", "group_id"), GROUPED, std=std, scale=scale, eps=eps)
    assert got.dtype == np.float32 and got.shape == (9,)
    close(got, ref_group_norm(GROUPED["reward"], GROUPED["group_id"], std, scale, eps))


def test_group_norm_defaults_are_torch_std_per_group_and_verl_eps():
    got = run("group_norm", ("reward", "group_id"), GROUPED)
    close(got, ref_group_norm(GROUPED["reward"], GROUPED["group_id"], "unbiased", "group", 1e-6))
    # p0 = [1, 0, 0, 1]: mean 0.5, torch.std = sqrt(1/3)
    assert got[0] == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-6), rel=1e-6)


def test_group_norm_of_equal_rewards_is_exactly_zero_and_never_nan():
    columns = {"reward": np.array([0.1, 0.1, 0.1, 0.7, 0.7], np.float32),
               "group_id": np.array(["a", "a", "a", "b", "b"])}
    for eps in (1e-6, 0.0):
        for std in tokenops.STD_MODES:
            got = run("group_norm", ("reward", "group_id"), columns, std=std, eps=eps)
            assert np.array_equal(got, np.zeros(5, np.float32)), (eps, std)


def test_group_norm_of_equal_float64_rewards_is_exactly_zero():
    """float32 rewards give exact group means; float64 ones do not (0.1 * 3 / 3 != 0.1), and
    without the explicit zero an equal group would get ~1e-11 instead of 0."""
    columns = {"reward": np.array([0.1] * 3 + [0.7] * 7),
               "group_id": np.array(list("aaabbbbbbb"))}
    for std in tokenops.STD_MODES:
        for scale in ("group", "batch"):
            got = run("group_norm", ("reward", "group_id"), columns, std=std, scale=scale)
            assert np.array_equal(got, np.zeros(10, np.float32)), (std, scale)


def test_group_norm_with_integer_group_ids_and_unsorted_rows():
    columns = {"reward": np.array([3, 1, 2, 5, 4, 0], np.float32),
               "group_id": np.array([7, 2, 7, 2, 7, 2])}
    got = run("group_norm", ("reward", "group_id"), columns, std="biased")
    close(got, ref_group_norm(columns["reward"], columns["group_id"], "biased"))


def test_groups_of_one_are_an_error_that_names_every_group_capped():
    ids = [f"prompt-{i:02d}" for i in range(15)] + ["pair", "pair"]
    columns = {"reward": np.arange(17, dtype=np.float32), "group_id": np.array(ids)}
    for name in ("group_norm", "rloo"):
        with pytest.raises(ContractError) as err:
            run(name, ("reward", "group_id"), columns)
        text = str(err.value)
        assert text.startswith(f"{name}.group_id: op {name} has no baseline for a group of one")
        assert "15 groups of one row: " in text
        assert '"prompt-00", "prompt-01"' in text and '"prompt-09", ... and 5 more' in text
        assert "prompt-10" not in text and '"pair"' not in text
        assert 'singletons": "raw"' in text


def test_one_group_of_one_is_named():
    columns = {"reward": np.array([1, 2, 3], np.float32), "group_id": np.array(["a", "a", "z"])}
    with pytest.raises(ContractError, match='1 group of one row: "z"'):
        run("group_norm", ("reward", "group_id"), columns)


@pytest.mark.parametrize("std", tokenops.STD_MODES)
@pytest.mark.parametrize("scale", tokenops.SCALES)
def test_groups_of_one_raw_as_verl_or_zero(std, scale):
    columns = {"reward": np.array([2.0, 1.0, 3.0, -4.0], np.float32),
               "group_id": np.array(["solo", "g", "g", "other"])}
    for singletons in ("raw", "zero"):
        got = run("group_norm", ("reward", "group_id"), columns, std=std, scale=scale,
                  singletons=singletons)
        close(got, ref_group_norm(columns["reward"], columns["group_id"], std, scale, 1e-6,
                                  singletons))
    raw = run("group_norm", ("reward", "group_id"), columns, singletons="raw")
    assert raw[0] == pytest.approx(2.0 / (1 + 1e-6))  # verl: mean 0, std 1
    zero = run("group_norm", ("reward", "group_id"), columns, singletons="zero")
    assert zero[0] == 0 and zero[3] == 0


def test_group_norm_refuses_bad_columns():
    with pytest.raises(ContractError, match=r"per-row column \[B\].*got float32\[2, 3\]"):
        run("group_norm", ("reward", "group_id"),
            {"reward": np.zeros((2, 3), np.float32), "group_id": np.array(["a", "a"])})
    with pytest.raises(ContractError, match=r"group_norm.group_id: .*got string\[3\]"):
        run("group_norm", ("reward", "group_id"),
            {"reward": np.zeros(2, np.float32), "group_id": np.array(["a", "a", "b"])})
    with pytest.raises(ContractError, match=r"finite rewards, got 1 not finite \(rows 1\)"):
        run("group_norm", ("reward", "group_id"),
            {"reward": np.array([0, np.nan], np.float32), "group_id": np.array(["a", "a"])})
    with pytest.raises(ContractError, match="strings or integers"):
        run("group_norm", ("reward", "group_id"),
            {"reward": np.zeros(2, np.float32), "group_id": np.array([0.5, 0.5])})


def test_group_norm_of_an_empty_batch_is_empty():
    got = run("group_norm", ("reward", "group_id"),
              {"reward": np.zeros(0, np.float32), "group_id": np.zeros(0, "<U1")})
    assert got.shape == (0,) and got.dtype == np.float32


groups = st.lists(st.integers(2, 6), min_size=1, max_size=6)
rewards = st.floats(-100, 100, allow_nan=False, width=32)


@st.composite
def grouped(draw):
    sizes = draw(groups)
    ids = [f"g{k}" for k, n in enumerate(sizes) for _ in range(n)]
    order = draw(st.permutations(range(len(ids))))
    r = draw(st.lists(rewards, min_size=len(ids), max_size=len(ids)))
    return (np.array(r, np.float32), np.array([ids[i] for i in order]))


@settings(max_examples=60, deadline=None)
@given(grouped(), st.sampled_from(tokenops.STD_MODES))
def test_property_group_norm_has_mean_zero_in_every_group(data, std):
    r, g = data
    adv = run("group_norm", ("reward", "group_id"), {"reward": r, "group_id": g}, std=std)
    for key in set(g.tolist()):
        scale = max(1.0, float(np.abs(r[g == key]).max())) if std == "none" else 1.0
        assert abs(float(adv[g == key].astype(np.float64).mean())) <= 1e-4 * scale
    close(adv, ref_group_norm(r, g, std), tol=1e-4)


@settings(max_examples=60, deadline=None)
@given(grouped())
def test_property_rloo_is_n_over_n_minus_1_times_the_centred_reward(data):
    r, g = data
    adv = run("rloo", ("reward", "group_id"), {"reward": r, "group_id": g})
    close(adv, ref_rloo(r, g), tol=1e-4)
    for key in set(g.tolist()):
        rg = r[g == key].astype(np.float64)
        n = rg.size
        expected = n / (n - 1) * (rg - rg.mean())
        np.testing.assert_allclose(adv[g == key], expected, rtol=1e-4,
                                   atol=1e-4 * max(1.0, float(np.abs(rg).max())))


# -- rloo ----------------------------------------------------------------------------------

def test_rloo_matches_the_reference_and_handles_singletons():
    close(run("rloo", ("reward", "group_id"), GROUPED), ref_rloo(*GROUPED.values()))
    columns = {"reward": np.array([2.0, 1.0, 3.0, 5.0, 5.0], np.float32),
               "group_id": np.array(["solo", "g", "g", "eq", "eq"])}
    for singletons in ("raw", "zero"):
        got = run("rloo", ("reward", "group_id"), columns, singletons=singletons)
        close(got, ref_rloo(columns["reward"], columns["group_id"], singletons))
    got = run("rloo", ("reward", "group_id"), columns, singletons="raw")
    assert got[0] == 2.0 and got[3] == 0.0 and got[4] == 0.0


# -- kl ------------------------------------------------------------------------------------

@pytest.mark.parametrize("estimator", tokenops.ESTIMATORS)
def test_kl_matches_the_reference_on_truncated_completions(estimator):
    columns = token_columns([5, 2, 0, 3], 5)
    columns["response_mask"][0, 1:3] = False  # tool output spliced into the turn
    got = run("kl", ("logprob", "ref_logprob"), columns, estimator=estimator)
    assert got.dtype == np.float32 and got.shape == (4, 5)
    close(got, ref_kl(columns["logprob"], columns["ref_logprob"], columns["response_mask"],
                      estimator))
    assert np.all(got[~columns["response_mask"]] == 0)


finite_lp = st.floats(-20, 0, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.data())
def test_property_kl_estimators(rows, width, data):
    lengths = data.draw(st.lists(st.integers(0, width), min_size=rows, max_size=rows))
    columns = token_columns(lengths, width)
    values = st.lists(finite_lp, min_size=rows * width, max_size=rows * width)
    columns["logprob"] = np.array(data.draw(values), np.float32).reshape(rows, width)
    columns["ref_logprob"] = np.array(data.draw(values), np.float32).reshape(rows, width)
    mask = columns["response_mask"]
    k1 = run("kl", ("logprob", "ref_logprob"), columns, estimator="k1")
    k2 = run("kl", ("logprob", "ref_logprob"), columns, estimator="k2")
    k3 = run("kl", ("logprob", "ref_logprob"), columns, estimator="k3")
    diff = columns["logprob"].astype(np.float64) - columns["ref_logprob"]
    close(k1[mask], diff[mask], tol=1e-5)
    close(k2[mask], 0.5 * diff[mask] ** 2, tol=1e-4)
    assert np.all(k3 >= 0) and np.all(k2 >= 0)
    for k in (k1, k2, k3):
        assert np.all(k[~mask] == 0)


def test_kl_needs_the_estimator_and_the_response_mask():
    with pytest.raises(FieldMapError, match='op "kl" needs argument "estimator"'):
        FieldMap.from_dict({"gyre_field_map": 1, "fields": {
            "kl": {"op": "kl", "from": ["logprob", "ref_logprob"]}}})
    columns = token_columns([2, 1], 3)
    del columns["response_mask"]
    with pytest.raises(MissingFieldError) as err:
        run("kl", ("logprob", "ref_logprob"), columns, estimator="k3")
    assert str(err.value).startswith(
        "missing sample field: response_mask (op kl reads it: the tokens the policy generated, "
        "[B, R] bool), have [logprob, prompt_ids, ")


def test_kl_refuses_a_non_finite_estimate():
    columns = token_columns([2, 2], 2)
    columns["logprob"][1, 1] = -np.inf
    with pytest.raises(ContractError, match=r"1 token not finite \(first: row 1, token 1"):
        run("kl", ("logprob", "ref_logprob"), columns, estimator="k1")


def test_kl_names_the_non_finite_token_in_plain_numbers():
    columns = token_columns([2, 2], 2)
    columns["logprob"][1, 1] = -np.inf
    with pytest.raises(ContractError) as err:
        run("kl", ("logprob", "ref_logprob"), columns, estimator="k1")
    assert "logprob -inf, ref_logprob " in str(err.value)
    assert "np.float32" not in str(err.value) and "1 token not finite" in str(err.value)


@pytest.mark.parametrize("op", ["kl", "kl_reward"])
def test_a_k3_estimate_beyond_float32_is_refused_not_inf(op):
    """exp(ref − logp) is finite in float64 for a log-ratio of 100 but not in the float32 output:
    the op refuses it, naming the token, instead of returning inf."""
    columns = token_columns([2, 2], 2)
    columns["logprob"][0, 1], columns["ref_logprob"][0, 1] = -100.5, -0.5
    sources = ("logprob", "ref_logprob") if op == "kl" else ("reward", "logprob", "ref_logprob")
    args = {"estimator": "k3"} if op == "kl" else {"estimator": "k3", "beta": 1.0}
    with pytest.raises(ContractError, match=r"1 token not finite \(first: row 0, token 1: "
                                            r"logprob -100.5, ref_logprob -0.5\)"):
        run(op, sources, columns, **args)
    columns["logprob"][0, 1] = -60.5  # exp(60) ≈ 1.1e26 fits in float32
    assert np.isfinite(run(op, sources, columns, **args)).all()


# -- kl_reward -----------------------------------------------------------------------------

@pytest.mark.parametrize("estimator", tokenops.ESTIMATORS)
def test_kl_reward_matches_verl_token_level_rewards_reference(estimator):
    columns = token_columns([6, 3, 1, 4], 6, seed=1)
    got = run("kl_reward", ("reward", "logprob", "ref_logprob"), columns, beta=0.05,
              estimator=estimator)
    assert got.dtype == np.float32 and got.shape == (4, 6)
    close(got, ref_kl_reward(columns["reward"], columns["logprob"], columns["ref_logprob"],
                             columns["response_mask"], columns["response_length"], 0.05,
                             estimator))
    # truncated completions: the reward sits at response_length - 1, nothing after it
    assert np.all(got[1, 3:] == 0) and got[2, 0] != 0 and np.all(got[2, 1:] == 0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.floats(0, 2),
       st.sampled_from(tokenops.ESTIMATORS), st.integers(0, 2**16))
def test_property_kl_reward_sums_to_the_reward_minus_beta_times_the_sequence_kl(
        lengths, beta, estimator, seed):
    columns = token_columns(lengths, 6, seed=seed)
    got = run("kl_reward", ("reward", "logprob", "ref_logprob"), columns, beta=beta,
              estimator=estimator)
    kl = run("kl", ("logprob", "ref_logprob"), columns, estimator=estimator)
    expected = columns["reward"].astype(np.float64) - beta * kl.astype(np.float64).sum(axis=1)
    close(got.astype(np.float64).sum(axis=1), expected, tol=1e-4)
    assert np.all(got[~columns["response_mask"]] == 0)


def test_kl_reward_with_beta_zero_is_the_reward_on_the_last_token():
    columns = token_columns([3, 1], 4)
    got = run("kl_reward", ("reward", "logprob", "ref_logprob"), columns, beta=0)
    expected = np.zeros((2, 4), np.float32)
    expected[0, 2], expected[1, 0] = columns["reward"]
    assert np.array_equal(got, expected)


def test_kl_reward_refuses_empty_responses_and_a_missing_length():
    columns = token_columns([3, 0, 0], 4)
    with pytest.raises(ContractError, match=r"2 empty responses \(rows 1, 2\)"):
        run("kl_reward", ("reward", "logprob", "ref_logprob"), columns, beta=0.1)
    del columns["response_length"]
    with pytest.raises(MissingFieldError, match=r"response_length \(op kl_reward reads it"):
        run("kl_reward", ("reward", "logprob", "ref_logprob"), columns, beta=0.1)
    columns = token_columns([3, 5], 4)
    columns["response_length"] = np.array([3, 5])
    with pytest.raises(ContractError, match=r"counts in \[0, 4\].*1 rows outside \(rows 1\)"):
        run("kl_reward", ("reward", "logprob", "ref_logprob"), columns, beta=0.1)


# -- per_token -----------------------------------------------------------------------------

def test_per_token_spreads_a_row_value_under_the_response_mask():
    columns = token_columns([3, 1, 0], 4)
    columns["response_mask"][0, 1] = False
    columns["adv"] = np.array([0.5, -1.0, 2.0], np.float32)
    got = run("per_token", ("adv",), columns)
    expected = [[0.5, 0, 0.5, 0], [-1, 0, 0, 0], [0, 0, 0, 0]]
    assert got.dtype == np.float32 and np.array_equal(got, np.array(expected, np.float32))
    with pytest.raises(ContractError, match=r"per-row column \[B\]"):
        run("per_token", ("logprob",), columns)


# -- pad -----------------------------------------------------------------------------------

def test_pad_moves_the_prompt_right_and_gives_its_mask():
    columns = token_columns([1], 2, prompt_lengths=[2, 4, 0], prompt_width=4)
    columns["prompt_ids"] = np.array([[0, 0, 5, 6], [1, 2, 3, 4], [0, 0, 0, 0]])
    got = run("pad", ("prompt_ids",), columns, side="right", value=-1)
    assert got.tolist() == [[5, 6, -1, -1], [1, 2, 3, 4], [-1, -1, -1, -1]]
    mask = run("pad", ("prompt_ids",), columns, side="right", output="mask")
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]


def test_pad_lays_a_response_column_left_by_its_length_keeping_tool_tokens():
    columns = token_columns([3, 1], 4)
    columns["response_mask"][0, 1] = False  # a tool token is still a token of the layout
    got = run("pad", ("response_ids",), columns, side="left", value=7)
    ids = columns["response_ids"]
    assert got.tolist() == [[7, *ids[0, :3]], [7, 7, 7, ids[1, 0]]]
    lp = run("pad", ("logprob",), columns, side="left", value=0)
    assert lp[0, 1:].tolist() == columns["logprob"][0, :3].tolist()


def test_pad_value_must_fit_the_dtype_and_pad_needs_a_named_source():
    columns = token_columns([2], 3)
    with pytest.raises(ContractError, match="a pad value that int64 holds exactly"):
        run("pad", ("response_ids",), columns, side="left", value=0.5)
    with pytest.raises(MissingFieldError, match=r"tokens_mask \(op pad reads it"):
        run("pad", ("tokens",), {**columns, "tokens": columns["response_ids"]}, side="left")
    with pytest.raises(FieldMapError) as err:
        FieldMap.from_dict({"gyre_field_map": 1, "fields": {"x": {
            "from": "prompt_ids", "then": [{"op": "pad", "side": "left"}]}}})
    text = str(err.value)
    assert "does not take exactly one input" not in text
    assert '"prompt_mask"' in text and "no name" in text and "mask" in text
    assert '{"from": "prompt_ids", "op": "pad", "side": "left"}' in text
    with pytest.raises(FieldMapError) as err:  # after another step: no name to look by at all
        FieldMap.from_dict({"gyre_field_map": 1, "fields": {"x": {
            "from": "prompt_ids", "then": [{"op": "cast", "dtype": "int64"},
                                           {"op": "pad", "side": "left"}]}}})
    assert "no name" in str(err.value) and "_mask" in str(err.value)


@st.composite
def padded_rows(draw):
    rows, width = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(0, width), min_size=rows, max_size=rows))
    ids = draw(st.lists(st.integers(1, 50_000), min_size=rows * width, max_size=rows * width))
    return np.array(lengths), np.array(ids, np.int64).reshape(rows, width)


@settings(max_examples=60, deadline=None)
@given(padded_rows(), st.integers(-1, 3))
def test_property_pad_round_trip_left_right_left(data, value):
    lengths, raw = data
    width = raw.shape[1]
    left_mask = np.arange(width) >= (width - lengths)[:, None]
    left = np.where(left_mask, raw, value)
    columns = {"q_ids": left, "q_mask": left_mask}
    right = run("pad", ("q_ids",), columns, side="right", value=value)
    right_mask = run("pad", ("q_ids",), columns, side="right", value=value, output="mask")
    assert np.array_equal(right_mask, np.arange(width) < lengths[:, None])
    for b in range(len(lengths)):  # the same tokens, in order, on the other side
        assert right[b, : lengths[b]].tolist() == left[b, width - lengths[b]:].tolist()
    back = run("pad", ("r_ids",), {"r_ids": right, "r_mask": right_mask}, side="left",
               value=value)
    assert np.array_equal(back, left)


# -- concat --------------------------------------------------------------------------------

def ref_concat(columns, value=0):
    """verl's input_ids, attention_mask, position_ids, row by row."""
    ids, att, pos = [], [], []
    p_width, r_width = columns["prompt_ids"].shape[1], columns["response_ids"].shape[1]
    for b in range(len(columns["prompt_ids"])):
        prompt = [int(t) for t, m in zip(columns["prompt_ids"][b], columns["prompt_mask"][b])
                  if m]
        response = [int(t) for t in columns["response_ids"][b][: columns["response_length"][b]]]
        row_ids = [value] * (p_width - len(prompt)) + prompt + response + \
            [value] * (r_width - len(response))
        row_att = [0] * (p_width - len(prompt)) + [1] * (len(prompt) + len(response)) + \
            [0] * (r_width - len(response))
        count, row_pos = 0, []
        for m in row_att:
            count += m
            row_pos.append(max(count - 1, 0))
        ids.append(row_ids)
        att.append(row_att)
        pos.append(row_pos)
    return ids, att, pos


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 5)), min_size=1, max_size=5),
       st.integers(0, 2))
def test_property_concat_is_verl_input_ids_with_position_ids(lengths, value):
    columns = token_columns([r for _, r in lengths], 5, prompt_lengths=[p for p, _ in lengths])
    ids = run("concat", ("prompt_ids", "response_ids"), columns, value=value)
    att = run("concat", ("prompt_ids", "response_ids"), columns, output="attention_mask")
    pos = run("concat", ("prompt_ids", "response_ids"), columns, output="position_ids")
    ref_ids, ref_att, ref_pos = ref_concat(columns, value)
    assert ids.tolist() == ref_ids and att.astype(int).tolist() == ref_att
    assert pos.tolist() == ref_pos and pos.dtype == np.int64 and att.dtype == np.bool_
    for b in range(len(lengths)):  # real tokens are numbered 0, 1, 2, ... in order
        assert pos[b][att[b]].tolist() == list(range(int(att[b].sum())))


def test_concat_needs_both_masks():
    columns = token_columns([2], 3)
    del columns["prompt_mask"]
    with pytest.raises(MissingFieldError, match=r"prompt_mask \(op concat reads it"):
        run("concat", ("prompt_ids", "response_ids"), columns)


# -- through a field map -------------------------------------------------------------------

VERL_LIKE = {"gyre_field_map": 1, "fields": {
    "input_ids": {"op": "concat", "from": ["prompt_ids", "response_ids"]},
    "attention_mask": {"op": "concat", "from": ["prompt_ids", "response_ids"],
                       "output": "attention_mask", "cast": "int64"},
    "advantages": {"op": "group_norm", "from": ["reward", "group_id"],
                   "then": [{"op": "per_token"}]},
    "token_level_rewards": {"op": "kl_reward", "from": ["reward", "logprob", "ref_logprob"],
                            "beta": 0.001},
    "kl": {"op": "kl", "from": ["logprob", "ref_logprob"], "estimator": "k3"},
    "right_prompt": {"op": "pad", "from": "prompt_ids", "side": "right"},
}}


def test_a_map_of_token_ops_reads_the_masks_it_needs_and_describes_itself():
    fmap = FieldMap.from_dict(VERL_LIKE)
    assert fmap.to_dict() == VERL_LIKE  # the map round-trips as written
    assert fmap.sources() == ["prompt_ids", "response_ids", "prompt_mask", "response_length",
                              "reward", "group_id", "response_mask", "logprob", "ref_logprob"]
    columns = token_columns([4, 2, 3, 1], 4)
    columns["group_id"] = np.array(["a", "a", "b", "b"])
    out = fmap.apply(columns)
    assert out["attention_mask"].dtype == np.int64 and out["input_ids"].shape == (4, 8)
    adv = ref_group_norm(columns["reward"], columns["group_id"])
    close(out["advantages"], np.where(columns["response_mask"], np.array(adv)[:, None], 0))
    notes = fmap.describe()
    assert ("advantages ← (reward − mean of its group_id group) / (its group's unbiased std of "
            "reward + 1e-06) (GRPO), then per_token") in notes
    assert ("token_level_rewards ← −0.001·KL k1(logprob, ref_logprob) per response token, plus "
            "reward on the last response token") in notes
    assert "kl ← KL k3 of logprob from ref_logprob per response token" in notes
    assert "right_prompt ← prompt_ids padded on the right with 0" in notes


@pytest.mark.parametrize(("spec", "message"), [
    ({"op": "group_norm", "from": ["reward", "group_id"], "std": "sample"},
     '"std" must be one of "unbiased", "biased", "none", got "sample"'),
    ({"op": "group_norm", "from": ["reward", "group_id"], "eps": -1},
     '"eps" must be a finite number ≥ 0, got -1'),
    ({"op": "rloo", "from": ["reward"]}, 'op "rloo" needs 2 sources in "from"'),
    ({"op": "kl_reward", "from": ["reward", "logprob", "ref_logprob"]},
     'op "kl_reward" needs argument "beta"'),
    ({"op": "pad", "from": "prompt_ids"}, 'op "pad" needs argument "side"'),
    ({"op": "concat", "from": ["prompt_ids", "response_ids"], "output": "mask"},
     '"output" must be one of "ids", "attention_mask", "position_ids", got "mask"'),
])
def test_token_op_arguments_are_checked_when_the_map_loads(spec, message):
    with pytest.raises(FieldMapError, match=message.replace("(", r"\(").replace(")", r"\)")):
        FieldMap.from_dict({"gyre_field_map": 1, "fields": {"x": spec}})


def test_the_token_ops_are_built_in():
    for name in ("group_norm", "rloo", "kl", "kl_reward", "per_token", "pad", "concat"):
        assert ops.get_op(name).builtin
        with pytest.raises(ValueError, match="built in"):
            ops.register_op(name, lambda inputs, columns: inputs[0])


def test_a_custom_op_declares_the_columns_it_reads():
    ops.register_op("masked_count", lambda inputs, columns: columns["response_mask"].sum(1),
                    reads=["response_mask"])
    try:
        fmap = FieldMap.from_dict({"gyre_field_map": 1, "fields": {
            "n": {"op": "masked_count", "from": "reward"}}})
        assert fmap.sources() == ["reward", "response_mask"]
    finally:
        ops.unregister_op("masked_count")
