"""Roles: what a field means, whatever it is called, resolved from the names real RL libraries use.

A name is looked up in a synonym table built from the sources of RLlib, TorchRL, Stable-Baselines3,
CleanRL, Tianshou, Minari, D4RL, RLDS, verl, OpenRLHF, TRL and Gymnasium. Matching is scored:
an exact table hit beats a hit after stripping a library prefix (`b_`, `old_`, `mb_`) or a plural
`s`, which beats a word heuristic. A name that the table gives several roles (`dones`: RLlib's
done, CleanRL's stored previous-step done) is reported as ambiguous with its candidates.

Three traps the roles exist for (docs/contract.md §2): a reference-policy log-prob (`ref_log_prob`,
`base_action_log_probs`, `ref_per_token_logps`) is `ref_logprob`, never `logprob`; an episode
start flag (`episode_starts`, `is_first`) is the previous step's done, never this step's `done`;
and a group id (verl's `uid`, `prompt_id`) names the steps sampled for one prompt, never an
episode (`episode_id` is never a group id, nor the reverse).
"""

from __future__ import annotations

from dataclasses import dataclass

ROLES: tuple[str, ...] = (
    "observation", "next_observation", "action", "reward", "return", "value", "next_value",
    "advantage", "logprob", "ref_logprob", "entropy", "terminated", "truncated", "done",
    "episode_start", "mask", "step", "episode_id", "policy_version", "group_id", "loss_mask",
    "token_reward", "other",
)

# role -> {name: libraries that use it}. Names are lower case; dots are field nesting.
_TABLE: dict[str, dict[str, str]] = {
    "observation": {
        "observation": "Gymnasium, TorchRL, RLDS, gyre", "observations": "SB3, Minari, D4RL",
        "obs": "RLlib, CleanRL, Tianshou, Gymnasium", "b_obs": "CleanRL", "state": "",
        "states": "", "sequences": "OpenRLHF", "prompts": "verl", "input_ids": "verl",
        "prompt_ids": "TRL",
    },
    "next_observation": {
        "next_observation": "gyre", "next_observations": "SB3, D4RL", "next_obs": "CleanRL",
        "new_obs": "RLlib", "obs_next": "Tianshou", "next_state": "", "next_states": "",
        "final_obs": "Gymnasium", "final_observation": "Gymnasium<1.0",
        "terminal_observation": "SB3",
    },
    "action": {
        "action": "Gymnasium, TorchRL, RLDS, gyre", "actions": "RLlib, SB3, CleanRL, Minari, D4RL",
        "act": "Tianshou", "acts": "", "b_actions": "CleanRL", "responses": "verl",
        "completion_ids": "TRL", "actions_for_env": "RLlib",
    },
    "reward": {
        "reward": "Gymnasium, TorchRL, RLDS, gyre", "rewards": "RLlib, SB3, CleanRL, Minari, D4RL",
        "rew": "Tianshou", "rews": "", "b_rewards": "CleanRL",
        "scores": "OpenRLHF",
    },
    "return": {
        "return": "gyre", "returns": "SB3, CleanRL, Tianshou, verl, OpenRLHF",
        "b_returns": "CleanRL", "value_targets": "RLlib", "value_target": "TorchRL",
        "discounted_returns": "", "discounted_return": "", "rets": "", "ret": "",
    },
    "value": {
        "value": "gyre", "values": "SB3, CleanRL, verl, OpenRLHF", "vf_preds": "RLlib",
        "state_value": "TorchRL", "v_s": "Tianshou", "old_values": "SB3", "b_values": "CleanRL",
        "vpred": "", "vpreds": "", "value_preds": "",
    },
    "next_value": {
        "next_value": "gyre", "next_values": "", "values_bootstrapped": "RLlib",
        "next.state_value": "TorchRL", "v_s_": "Tianshou", "last_values": "SB3",
        "bootstrap_value": "",
    },
    "advantage": {
        "advantage": "TorchRL, gyre", "advantages": "RLlib, SB3, CleanRL, verl, OpenRLHF, TRL",
        "adv": "Tianshou", "advs": "", "b_advantages": "CleanRL",
    },
    "logprob": {
        "logprob": "gyre", "logprobs": "CleanRL, TRL rollout_func", "log_prob": "",
        "log_probs": "SB3", "logp": "", "logps": "", "action_logp": "RLlib",
        "action_log_prob": "TorchRL", "sample_log_prob": "TorchRL", "old_log_prob": "SB3",
        "b_logprobs": "CleanRL", "rollout_log_probs": "verl, OpenRLHF",
        "sampling_per_token_logps": "TRL", "old_log_probs": "verl (recomputed)",
        "action_log_probs": "OpenRLHF (recomputed)", "logp_old": "Tianshou (recomputed)",
        "old_per_token_logps": "TRL (recomputed)", "old_logp": "", "old_logprobs": "",
        "behaviour_logprob": "", "behavior_logprob": "", "inference_logprobs": "prime-rl",
    },
    "ref_logprob": {
        "ref_logprob": "gyre", "ref_logprobs": "", "ref_log_prob": "verl", "ref_log_probs": "",
        "ref_logp": "", "ref_logps": "", "base_action_log_probs": "OpenRLHF",
        "ref_per_token_logps": "TRL", "reference_logprobs": "",
    },
    "entropy": {"entropy": "gyre", "entropies": "", "entropys": "verl", "ent": ""},
    "terminated": {
        "terminated": "Gymnasium, TorchRL, Tianshou, gyre", "terminateds": "RLlib",
        "terminations": "CleanRL, Minari", "terminals": "D4RL", "terminal": "",
        "is_terminal": "RLDS",
    },
    "truncated": {
        "truncated": "Gymnasium, TorchRL, Tianshou, OpenRLHF, gyre", "truncateds": "RLlib",
        "truncations": "CleanRL, Minari", "timeouts": "D4RL, SB3 ReplayBuffer",
        "timeout": "", "is_truncated": "TRL", "timelimit.truncated": "Gymnasium<0.26, SB3",
    },
    "done": {
        "done": "Gymnasium<0.26, TorchRL, Tianshou", "dones": "RLlib, SB3 VecEnv, Tianshou",
        "is_last": "RLDS", "end_flag": "Tianshou",
    },
    "episode_start": {
        "episode_start": "gyre", "episode_starts": "SB3 RolloutBuffer", "is_first": "RLDS",
        "is_init": "TorchRL InitTracker", "dones": "CleanRL storage (previous step's done)",
    },
    "mask": {
        "mask": "gyre", "masks": "", "loss_mask": "RLlib", "action_mask": "OpenRLHF",
        "response_mask": "verl", "completion_mask": "TRL", "valid_mask": "",
        "attention_mask": "verl, OpenRLHF",
    },
    "step": {
        "step": "gyre", "t": "RLlib", "timestep": "", "timesteps": "", "step_count": "TorchRL",
        "step_id": "", "step_index": "", "elapsed_steps": "Gymnasium TimeLimit",
    },
    "episode_id": {
        "episode_id": "gyre", "episode_ids": "", "eps_id": "RLlib", "ep_id": "",
        "traj_ids": "TorchRL", "traj_id": "", "trajectory_id": "", "id": "Minari",
    },
    "policy_version": {
        "policy_version": "TorchRL, gyre", "policy_versions": "", "weights_version": "",
        "model_version": "", "num_grad_updates": "RLlib",
    },
    "group_id": {
        "group_id": "gyre", "group_ids": "", "uid": "verl", "uids": "", "prompt_id": "",
        "prompt_uid": "", "group": "", "groups": "", "group_index": "", "group_idx": "",
    },
    "loss_mask": {
        "loss_masks": "", "token_loss_mask": "", "generated_mask": "", "tool_mask": "TRL",
        "env_mask": "TRL rollout_func",
    },
    "token_reward": {
        "token_reward": "gyre", "token_rewards": "", "token_level_rewards": "verl",
        "token_level_scores": "verl", "rm_scores": "verl", "per_token_rewards": "",
        "process_rewards": "",
    },
    "other": {
        "info": "", "infos": "", "action_dist_inputs": "RLlib", "action_prob": "RLlib",
        "prev_actions": "RLlib", "prev_rewards": "RLlib", "discount": "RLDS",
        "discounts": "SB3", "importance_sampling_ratio": "TRL", "rollout_is_weights": "verl",
        "kl": "OpenRLHF", "seq_lens": "RLlib", "position_ids": "verl", "env_id": "RLlib",
        "response_length": "", "response_lengths": "", "num_actions": "OpenRLHF",
        "agent_index": "RLlib", "unroll_id": "RLlib", "intrinsic_rewards": "RLlib",
    },
}

# Names several libraries use with different meanings: role -> weight (the first wins).
_AMBIGUOUS: dict[str, dict[str, float]] = {
    "dones": {"done": 0.6, "episode_start": 0.4},
}

# Trainer-side log-probs that the trainer recomputes with its current weights, not the
# behaviour log-prob the sampler recorded (verl, OpenRLHF, TRL, Tianshou).
RECOMPUTED_LOGPROB_NAMES: frozenset[str] = frozenset(
    {"old_log_probs", "action_log_probs", "old_per_token_logps", "logp_old"}
)
# Log-probs that are explicitly the sampler's (behaviour) values.
BEHAVIOUR_LOGPROB_NAMES: frozenset[str] = frozenset(
    {"rollout_log_probs", "sampling_per_token_logps", "action_logp", "sample_log_prob",
     "action_log_prob", "behaviour_logprob", "behavior_logprob", "logprob", "logprobs",
     "log_probs", "b_logprobs", "old_log_prob", "inference_logprobs"}
)
# Roles whose per-element values add up to the step's value: a generation's log-prob is the sum
# of its tokens' log-probs (log π(a|s) = Σ_i log π(a_i|s, a_<i)); a step's reward is the sum of
# per-token rewards. Never value, return, advantage or entropy: those do not add up.
SUMMABLE_ROLES: frozenset[str] = frozenset({"logprob", "ref_logprob", "reward"})

_PREFIXES = ("b_", "mb_", "old_", "batch_")
# Word heuristics, tried in order; the first hit wins. ref/base before logprob on purpose.
_HEURISTICS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("ref_", "reference", "base_action"), "ref_logprob"),
    (("episode_start", "is_first", "first_step"), "episode_start"),
    (("group_id", "group_index", "prompt_id", "prompt_uid"), "group_id"),
    (("token_reward", "token_level_reward", "per_token_reward"), "token_reward"),
    (("logp", "log_prob", "logprob"), "logprob"),
    (("next_obs", "next_observation", "obs_next"), "next_observation"),
    (("advantage",), "advantage"),
    (("return",), "return"),
    (("reward",), "reward"),
    (("terminat",), "terminated"),
    (("truncat", "timeout"), "truncated"),
    (("done",), "done"),
    (("mask",), "mask"),
    (("entropy",), "entropy"),
    (("value",), "value"),
    (("observation", "obs"), "observation"),
    (("action",), "action"),
    (("episode_id", "eps_id", "traj_id"), "episode_id"),
    (("policy_version",), "policy_version"),
)

_SCORE_DECLARED = 1.0
_SCORE_EXACT = 0.9
_SCORE_NORMALISED = 0.8
_SCORE_NESTED = 0.75
_SCORE_HEURISTIC = 0.5


@dataclass(frozen=True, slots=True)
class RoleMatch:
    """The role of one name: how sure (`score` 0..1), why (`how`), and the other candidates."""

    role: str
    score: float
    how: str  # declared | synonym | normalised | nested | heuristic | unknown
    candidates: tuple[tuple[str, float], ...] = ()
    libraries: str = ""

    @property
    def ambiguous(self) -> bool:
        return len(self.candidates) > 1


def _index() -> dict[str, list[tuple[str, str]]]:
    index: dict[str, list[tuple[str, str]]] = {}
    for role, names in _TABLE.items():
        for name, libs in names.items():
            index.setdefault(name, []).append((role, libs))
    return index


_INDEX = _index()


def synonyms(role: str) -> tuple[str, ...]:
    """The names the table knows for `role` (for messages: 'looked for ...')."""
    return tuple(_TABLE.get(role, {}))


def libraries(name: str) -> str:
    """Which libraries use `name`, from the table ('' when unknown)."""
    return "; ".join(f"{role}: {libs}" for role, libs in _INDEX.get(name.lower(), ()) if libs)


def resolve_role(name: str, declared: str | None = None) -> RoleMatch:
    """The role of a field called `name` (dotted for nested fields), or its declared role."""
    if declared is not None:
        return RoleMatch(declared, _SCORE_DECLARED, "declared", ((declared, 1.0),))
    key = name.lower()
    hit = _lookup(key, _SCORE_EXACT, "synonym")
    if hit is not None:
        return hit
    if "." in key:
        nested = _nested(key)
        if nested is not None:
            return nested
    for candidate in _normalised_forms(key):
        hit = _lookup(candidate, _SCORE_NORMALISED, "normalised")
        if hit is not None:
            return hit
    return _heuristic(key)


def _lookup(key: str, score: float, how: str) -> RoleMatch | None:
    entries = _INDEX.get(key)
    if not entries:
        return None
    libs = "; ".join(f"{role}: {lib}" for role, lib in entries if lib)
    if key in _AMBIGUOUS:
        weights = _AMBIGUOUS[key]
        ranked = tuple(sorted(((r, round(score * w, 3)) for r, w in weights.items()),
                              key=lambda rw: -rw[1]))
        return RoleMatch(ranked[0][0], ranked[0][1], how, ranked, libs)
    role = entries[0][0]
    return RoleMatch(role, score, how, ((role, score),), libs)


def _nested(key: str) -> RoleMatch | None:
    """`next.reward` (TorchRL), `observation.image` (modalities), `collector.traj_ids`."""
    head, _, tail = key.rpartition(".")
    if head.split(".")[-1] == "next":
        inner = resolve_role(tail)
        moved = {"observation": "next_observation", "value": "next_value"}.get(inner.role)
        role = moved or inner.role
        if inner.how == "unknown":
            return None
        return RoleMatch(role, min(inner.score, _SCORE_NESTED), "nested", ((role, inner.score),),
                         inner.libraries)
    parent = resolve_role(head)
    if parent.role in ("observation", "next_observation") and parent.how != "heuristic":
        return RoleMatch(parent.role, _SCORE_NESTED, "nested", ((parent.role, _SCORE_NESTED),))
    inner = resolve_role(tail)
    if inner.how in ("synonym", "normalised"):
        return RoleMatch(inner.role, min(inner.score, _SCORE_NESTED), "nested",
                         tuple((r, min(s, _SCORE_NESTED)) for r, s in inner.candidates),
                         inner.libraries)
    return None


def _normalised_forms(key: str) -> list[str]:
    base = key.replace("-", "_").replace(" ", "_")
    forms = [base]
    for prefix in _PREFIXES:
        if base.startswith(prefix) and len(base) > len(prefix):
            forms.append(base[len(prefix):])
    plurals = [f[:-1] for f in forms if f.endswith("s") and len(f) > 2]
    return forms + plurals


def _heuristic(key: str) -> RoleMatch:
    for words, role in _HEURISTICS:
        if any(w in key for w in words):
            return RoleMatch(role, _SCORE_HEURISTIC, "heuristic", ((role, _SCORE_HEURISTIC),))
    return RoleMatch("other", 0.0, "unknown", ())


def is_recomputed_logprob(name: str, description: str = "") -> bool:
    """Whether a trainer's log-prob field is recomputed by the trainer, not the behaviour one."""
    last = name.lower().rsplit(".", 1)[-1]
    return last in RECOMPUTED_LOGPROB_NAMES or "recomputed" in description.lower()
