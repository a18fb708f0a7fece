"""Role resolution: the synonym table, scoring, ambiguity, and the two traps of docs/contract.md §2."""

from __future__ import annotations

import pytest

from gyre_contract.schema._roles import ROLES, is_recomputed_logprob, libraries, resolve_role, synonyms


@pytest.mark.parametrize(("name", "role"), [
    ("obs", "observation"), ("observations", "observation"), ("b_obs", "observation"),
    ("new_obs", "next_observation"), ("obs_next", "next_observation"),
    ("next_observations", "next_observation"), ("act", "action"), ("actions", "action"),
    ("completion_ids", "action"), ("responses", "action"), ("rew", "reward"),
    ("rewards", "reward"), ("token_level_rewards", "token_reward"), ("terminateds", "terminated"),
    ("terminations", "terminated"), ("terminals", "terminated"), ("is_terminal", "terminated"),
    ("truncateds", "truncated"), ("truncations", "truncated"), ("timeouts", "truncated"),
    ("eps_id", "episode_id"), ("ep_id", "episode_id"), ("t", "step"), ("timestep", "step"),
    ("logp", "logprob"), ("log_prob", "logprob"), ("logprobs", "logprob"),
    ("action_logp", "logprob"), ("sample_log_prob", "logprob"), ("old_log_probs", "logprob"),
    ("vf_preds", "value"), ("values", "value"), ("state_value", "value"), ("v_s", "value"),
    ("adv", "advantage"), ("advantages", "advantage"), ("returns", "return"),
    ("value_targets", "return"), ("value_target", "return"), ("loss_mask", "mask"),
    ("response_mask", "mask"), ("completion_mask", "mask"), ("is_last", "done"),
    ("values_bootstrapped", "next_value"), ("entropys", "entropy"),
])
def test_library_names_resolve_to_their_role(name: str, role: str) -> None:
    assert resolve_role(name).role == role


@pytest.mark.parametrize("name", ["ref_log_prob", "base_action_log_probs", "ref_per_token_logps",
                                  "ref_logps", "ref_logprobs", "mb_ref_log_probs"])
def test_a_reference_logprob_is_never_logprob(name: str) -> None:
    match = resolve_role(name)
    assert match.role == "ref_logprob"
    assert "logprob" not in [r for r, _ in match.candidates]


@pytest.mark.parametrize("name", ["episode_starts", "is_first", "episode_start"])
def test_an_episode_start_is_not_done(name: str) -> None:
    assert resolve_role(name).role == "episode_start"


def test_dones_is_ambiguous_between_done_and_episode_start() -> None:
    match = resolve_role("dones")
    assert match.role == "done"
    assert match.ambiguous
    assert [r for r, _ in match.candidates] == ["done", "episode_start"]
    assert "CleanRL" in match.libraries


def test_nested_names_follow_torchrl_next_and_modalities() -> None:
    assert resolve_role("next.reward").role == "reward"
    assert resolve_role("next.done").role == "done"
    assert resolve_role("next.observation").role == "next_observation"
    assert resolve_role("next.state_value").role == "next_value"
    assert resolve_role("observation.image").role == "observation"
    assert resolve_role("collector.traj_ids").role == "episode_id"


def test_scores_rank_declared_over_exact_over_normalised_over_heuristic() -> None:
    declared = resolve_role("whatever", "reward")
    exact = resolve_role("rewards")
    normalised = resolve_role("mb_rewards")
    heuristic = resolve_role("shaped_reward_total")
    assert (declared.how, exact.how, normalised.how, heuristic.how) == (
        "declared", "synonym", "normalised", "heuristic")
    assert declared.score > exact.score > normalised.score > heuristic.score
    assert {m.role for m in (declared, exact, normalised, heuristic)} == {"reward"}


def test_unknown_names_are_other_with_no_candidates() -> None:
    match = resolve_role("zzz_qqq")
    assert (match.role, match.score, match.how, match.candidates) == ("other", 0.0, "unknown", ())


def test_every_table_role_is_a_contract_role() -> None:
    for role in ROLES:
        assert all(resolve_role(name).role in ROLES for name in synonyms(role))


def test_recomputed_logprob_names_and_descriptions() -> None:
    for name in ("old_log_probs", "action_log_probs", "old_per_token_logps", "logp_old"):
        assert is_recomputed_logprob(name)
    assert not is_recomputed_logprob("rollout_log_probs")
    assert is_recomputed_logprob("lp", "Recomputed by the learner")
    assert "RLlib" in libraries("new_obs")


@pytest.mark.parametrize("name", ["uid", "prompt_id", "group", "group_index", "group_ids",
                                  "prompt_uid", "b_uid"])
def test_a_group_id_is_never_an_episode_id(name: str) -> None:
    """verl's `uid` names a prompt's group of completions: reading it as the episode would make
    every completion of a prompt one episode (regression: it used to resolve to episode_id)."""
    match = resolve_role(name)
    assert match.role == "group_id"
    assert "episode_id" not in [r for r, _ in match.candidates]


@pytest.mark.parametrize("name", ["episode_id", "eps_id", "episode_ids", "traj_id"])
def test_an_episode_id_is_never_a_group_id(name: str) -> None:
    match = resolve_role(name)
    assert match.role == "episode_id"
    assert "group_id" not in [r for r, _ in match.candidates]
