"""gae / discounted_returns against a straightforward per-row loop and hand-computed cases."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import ContractError
from gyre_contract.trainer._advantages import discounted_returns, gae

NAN = float("nan")


def reference_gae(rows, gamma, lam, terminal_fallback=False):
    """One row at a time, one step at a time, in plain Python floats: the independent reference.

    rows: list of dicts with lists reward, value, terminated, truncated and a float next_value.
    """
    advantages, returns = [], []
    for row in rows:
        n = len(row["reward"])
        adv = [0.0] * n
        following = 0.0
        for t in reversed(range(n)):
            if row["terminated"][t]:
                v_next = 0.0
            elif t + 1 < n:
                v_next = row["value"][t + 1]
            elif math.isnan(row["next_value"]):
                assert terminal_fallback, "reference needs a next_value"
                v_next = 0.0
            else:
                v_next = row["next_value"]
            delta = row["reward"][t] + gamma * v_next - row["value"][t]
            following = delta + gamma * lam * (following if t + 1 < n else 0.0)
            adv[t] = following
        advantages.append(adv)
        returns.append([a + v for a, v in zip(adv, row["value"], strict=True)])
    return advantages, returns


def pack(rows):
    """Right-pad reference rows into [B, T] arrays with garbage (NaN) in the padding."""
    nb, nt = len(rows), max(len(r["reward"]) for r in rows)
    out = {k: np.full((nb, nt), NAN, np.float32) for k in ("reward", "value")}
    out |= {k: np.zeros((nb, nt), bool) for k in ("terminated", "truncated", "mask")}
    for b, row in enumerate(rows):
        n = len(row["reward"])
        for k in ("reward", "value", "terminated", "truncated"):
            out[k][b, :n] = row[k]
        out["mask"][b, :n] = True
    out["next_value"] = np.array([r["next_value"] for r in rows], np.float32)
    return out


def run_gae(arrays, **kw):
    return gae(arrays["reward"], arrays["value"], arrays["terminated"], arrays["truncated"],
               arrays["mask"], arrays["next_value"], **kw)


def row(reward, value, *, terminated=False, truncated=False, next_value=NAN):
    n = len(reward)
    return {"reward": reward, "value": value,
            "terminated": [False] * (n - 1) + [terminated],
            "truncated": [False] * (n - 1) + [truncated], "next_value": next_value}


def test_terminated_row_by_hand():
    # gamma 0.5, lam 1: deltas 1 + .5*2 - 1 = 1, 2 + 0 - 2 = 0; A = [1 + .5*0, 0]
    arrays = pack([row([1.0, 2.0], [1.0, 2.0], terminated=True)])
    adv, ret = run_gae(arrays, gamma=0.5, lam=1.0)
    np.testing.assert_allclose(adv, [[1.0, 0.0]])
    np.testing.assert_allclose(ret, [[2.0, 2.0]])
    assert adv.dtype == np.float32 and ret.dtype == np.float32


def test_truncated_row_bootstraps_from_next_value():
    # last delta = 2 + .5*4 - 2 = 2; first = 1 + .5*2 - 1 = 1, A0 = 1 + .5*.5*2 = 1.5
    arrays = pack([row([1.0, 2.0], [1.0, 2.0], truncated=True, next_value=4.0)])
    adv, ret = run_gae(arrays, gamma=0.5, lam=0.5)
    np.testing.assert_allclose(adv, [[1.5, 2.0]])
    np.testing.assert_allclose(ret, [[2.5, 4.0]])


def test_terminated_and_truncated_on_one_step_terminated_wins():
    both = pack([row([1.0], [0.5], terminated=True, truncated=True, next_value=100.0)])
    adv, _ = run_gae(both, gamma=0.9, lam=0.9)
    np.testing.assert_allclose(adv, [[0.5]])  # 1 - 0.5, the 100 is never used
    no_next = pack([row([1.0], [0.5], terminated=True, truncated=True)])
    adv, _ = run_gae(no_next, gamma=0.9, lam=0.9)  # no next_value needed
    np.testing.assert_allclose(adv, [[0.5]])


def test_truncated_without_next_value_is_an_error_naming_row_and_episode():
    arrays = pack([row([1.0], [0.0], terminated=True), row([1.0, 1.0], [0.0, 0.0], truncated=True)])
    with pytest.raises(ContractError) as err:
        run_gae(arrays, gamma=0.9, lam=0.9, episode_id=np.array(["a", "b"]))
    assert str(err.value) == (
        "next_value[1]: row 1 (episode 'b') ends truncated with no bootstrap value: expected a "
        "finite next_value to bootstrap from (record next_value on the last step, or pass "
        "truncation=\"terminal\" to treat the row end as terminal), got nan")


def test_many_rows_without_next_value_make_one_short_problem():
    rows = [row([1.0], [0.0], truncated=True) for _ in range(5)]
    with pytest.raises(ContractError) as err:
        run_gae(pack(rows), gamma=0.9, lam=0.9)
    assert len(err.value.problems) == 1
    assert str(err.value).startswith(
        "next_value: 5 rows end with no bootstrap value: row 0 ends truncated; row 1 ends "
        "truncated; row 2 ends truncated; and 2 more: expected a finite next_value")
    assert str(err.value).endswith("got NaN in 5 rows")


def test_open_row_without_next_value_is_an_error():
    arrays = pack([row([1.0], [0.0])])
    with pytest.raises(ContractError, match=re.escape(
            "row 0 ends neither terminated nor truncated (open, or cut by max_len where the next "
            "row's first value is its bootstrap and the rollouts record no value) with no "
            "bootstrap value")):
        run_gae(arrays, gamma=0.9, lam=0.9)
    with pytest.raises(ContractError, match=re.escape("row 0 ends neither")):
        discounted_returns(arrays["reward"], arrays["terminated"], arrays["truncated"],
                           arrays["mask"], arrays["next_value"], gamma=0.9)


def test_truncation_terminal_treats_unknown_end_as_terminal_but_uses_known_next_value():
    arrays = pack([row([1.0, 1.0], [0.0, 0.0], truncated=True),
                   row([1.0, 1.0], [0.0, 0.0], truncated=True, next_value=10.0)])
    adv, _ = run_gae(arrays, gamma=0.5, lam=1.0, truncation="terminal")
    np.testing.assert_allclose(adv, [[1.5, 1.0], [1.0 + 0.5 * 6.0, 6.0]])


def test_cut_row_bootstraps_and_padding_is_zero():
    # a cut row (neither flag) with next_value; a shorter padded row below it
    arrays = pack([row([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], next_value=2.0),
                   row([3.0], [1.0], terminated=True)])
    adv, ret = run_gae(arrays, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(adv, [[5.0, 4.0, 3.0], [2.0, 0.0, 0.0]])
    np.testing.assert_allclose(ret, [[5.0, 4.0, 3.0], [3.0, 0.0, 0.0]])
    g = discounted_returns(arrays["reward"], arrays["terminated"], arrays["truncated"],
                           arrays["mask"], arrays["next_value"], gamma=0.5)
    np.testing.assert_allclose(g, [[2.0, 2.0, 2.0], [3.0, 0.0, 0.0]])  # G = 1 + .5 * 2


def test_discounted_returns_by_hand():
    arrays = pack([row([1.0, 1.0, 1.0], [9.0, 9.0, 9.0], terminated=True),
                   row([1.0, 1.0], [9.0, 9.0], truncated=True, next_value=4.0)])
    g = discounted_returns(arrays["reward"], arrays["terminated"], arrays["truncated"],
                           arrays["mask"], arrays["next_value"], gamma=0.5)
    np.testing.assert_allclose(g, [[1.75, 1.5, 1.0], [2.5, 3.0, 0.0]])


def test_done_before_the_rows_last_step_is_an_error():
    arrays = pack([row([1.0, 1.0], [0.0, 0.0], terminated=True)])
    arrays["terminated"][0] = [True, False]
    with pytest.raises(ContractError, match=re.escape(
            "row 0 ends before its last step (a row must hold one episode)")):
        run_gae(arrays, gamma=0.9, lam=0.9)


def test_mask_gap_is_an_error():
    arrays = pack([row([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], terminated=True)])
    arrays["mask"][0] = [True, False, True]
    with pytest.raises(ContractError) as err:
        run_gae(arrays, gamma=0.9, lam=0.9)
    assert str(err.value) == ("mask[0]: row 0 has a gap in its mask: expected True on real steps, "
                              "then False (padding only at the end), got 101")


def test_non_finite_reward_and_value_are_reported_together():
    arrays = pack([row([1.0, 2.0], [0.0, 0.0], terminated=True)])
    arrays["reward"][0, 0] = NAN
    arrays["value"][0, 1] = float("inf")
    with pytest.raises(ContractError) as err:
        run_gae(arrays, gamma=0.9, lam=0.9)
    assert [p.path for p in err.value.problems] == ["reward[0, 0]", "value[0, 1]"]


def test_bad_shapes_and_dtypes():
    arrays = pack([row([1.0], [0.0], terminated=True)])
    with pytest.raises(ContractError, match="next_value: one bootstrap value per row"):
        gae(arrays["reward"], arrays["value"], arrays["terminated"], arrays["truncated"],
            arrays["mask"], np.zeros((1, 1), np.float32), gamma=0.9, lam=0.9)
    with pytest.raises(ContractError, match="terminated: wrong dtype: expected bool, got float32"):
        gae(arrays["reward"], arrays["value"], arrays["terminated"].astype(np.float32),
            arrays["truncated"], arrays["mask"], arrays["next_value"], gamma=0.9, lam=0.9)
    with pytest.raises(ValueError, match="truncation must be one of 'bootstrap', 'terminal'"):
        run_gae(arrays, gamma=0.9, lam=0.9, truncation="zero")
    with pytest.raises(ValueError, match=re.escape("lam must be a number in [0, 1], got 1.5")):
        run_gae(arrays, gamma=0.9, lam=1.5)


def test_float64_inputs_stay_float64():
    arrays = {k: (v.astype(np.float64) if v.dtype == np.float32 else v)
              for k, v in pack([row([1.0], [0.0], terminated=True)]).items()}
    adv, ret = run_gae(arrays, gamma=0.9, lam=0.9)
    assert adv.dtype == np.float64 and ret.dtype == np.float64


@st.composite
def random_rows(draw):
    n_rows = draw(st.integers(1, 5))
    floats = st.floats(-10, 10, allow_nan=False, width=32)
    rows = []
    for _ in range(n_rows):
        n = draw(st.integers(1, 7))
        end = draw(st.sampled_from(["terminated", "truncated", "both", "cut"]))
        rows.append(row(draw(st.lists(floats, min_size=n, max_size=n)),
                        draw(st.lists(floats, min_size=n, max_size=n)),
                        terminated=end in ("terminated", "both"),
                        truncated=end in ("truncated", "both"),
                        next_value=draw(floats)))
    return rows


@settings(max_examples=60, deadline=None)
@given(rows=random_rows(), gamma=st.floats(0, 1), lam=st.floats(0, 1))
def test_gae_matches_the_per_row_loop(rows, gamma, lam):
    arrays = pack(rows)
    adv, ret = run_gae(arrays, gamma=gamma, lam=lam)
    rows32 = [{**r, **{k: [float(np.float32(x)) for x in r[k]] for k in ("reward", "value")},
               "next_value": float(np.float32(r["next_value"]))} for r in rows]
    ref_adv, ref_ret = reference_gae(rows32, gamma, lam)
    for b, (a, r) in enumerate(zip(ref_adv, ref_ret, strict=True)):
        n = len(a)
        np.testing.assert_allclose(adv[b, :n], a, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(ret[b, :n], r, rtol=1e-5, atol=1e-4)
        assert not adv[b, n:].any() and not ret[b, n:].any()
    g = discounted_returns(arrays["reward"], arrays["terminated"], arrays["truncated"],
                           arrays["mask"], arrays["next_value"], gamma=gamma)
    zero_value = [{**r, "value": [0.0] * len(r["value"])} for r in rows32]
    ref_g, _ = reference_gae(zero_value, gamma, 1.0)
    for b, expected in enumerate(ref_g):
        np.testing.assert_allclose(g[b, :len(expected)], expected, rtol=1e-5, atol=1e-4)


@settings(max_examples=60, deadline=None)
@given(rows=random_rows(), gamma=st.floats(0, 1), lam=st.floats(0, 1))
def test_gae_is_bit_for_bit_the_recursion_and_padding_exactly_zero(rows, gamma, lam):
    """In float64, each advantage is exactly A_t = (γλ)·A_{t+1} + δ_t with δ_t = γ·V_{t+1} + r_t
    − V_t, operation for operation (no step may be reordered or fused), from A = 0 after the
    row's last real step; the padding is +0.0, not -0.0 or garbage."""
    arrays = {k: (v.astype(np.float64) if v.dtype == np.float32 else v)
              for k, v in pack(rows).items()}
    adv, _ = run_gae(arrays, gamma=gamma, lam=lam)
    decay = gamma * lam
    expected = np.zeros_like(adv)
    for b, r in enumerate(rows):
        n, following = len(r["reward"]), 0.0
        value = arrays["value"][b]
        for t in reversed(range(n)):
            v_next = 0.0 if arrays["terminated"][b, t] else \
                value[t + 1] if t + 1 < n else arrays["next_value"][b]
            delta = float(v_next) * gamma + float(arrays["reward"][b, t]) - float(value[t])
            following = following * decay + delta
            expected[b, t] = following
    assert np.array_equal(adv.view(np.int64), expected.view(np.int64))
