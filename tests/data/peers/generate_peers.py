"""Write foreign (no x-gyre keys) JSON Schemas for real libraries, from their documented fields."""
import json
from pathlib import Path

OUT = Path(__file__).parent
N = None  # a dim of unknown size


def arr(t, dims):
    body = {"type": t}
    for d in reversed(dims):
        body = {"type": "array", "items": body}
        if d is not None:
            body["minItems"] = body["maxItems"] = d
    return body


def schema(title, desc, fields, source, batch_dims=None):
    props, required = {}, []
    for name, t, dims, req, note in fields:
        node = arr(t, dims)
        if note:
            node["description"] = note
        parts = name.split(".")
        target, treq = props, required
        for p in parts[:-1]:
            obj = target.setdefault(p, {"type": "object", "properties": {}, "required": []})
            if p not in treq:
                treq.append(p)
            target, treq = obj["properties"], obj["required"]
        target[parts[-1]] = node
        if req:
            treq.append(parts[-1])
    doc = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": title,
           "description": desc + " Written for gyre-contract tests"
           + (f" from {source}." if source else "."),
           "type": "object", "properties": props, "required": required}
    if batch_dims:  # the one x-gyre key a foreign schema needs to be read as a batch
        doc["x-gyre-batch-dims"] = batch_dims
    return doc


VERL_FIELDS = [
    # verl's DataProto fields for the PPO/GRPO update (volcengine/verl DataProto, core_algos)
    ("input_ids", "integer", [N, N], True, "int64 [B, P+R]: prompt (left-padded) ++ "
     "response (right-padded)"),
    ("attention_mask", "integer", [N, N], True, "int64 [B, P+R]: 1 on real tokens"),
    ("position_ids", "integer", [N, N], True, "int64 [B, P+R]: "
     "compute_position_id_with_mask, clip(cumsum(attention_mask) - 1, 0)"),
    ("prompts", "integer", [N, N], False, "int64 [B, P]: left-padded prompt ids"),
    ("responses", "integer", [N, N], True, "int64 [B, R]: generated ids, right-padded"),
    ("response_mask", "integer", [N, N], True, "int64 [B, R]: attention_mask[:, -R:] "
     "(multi-turn: 0 on tool output); the loss mask"),
    ("old_log_probs", "number", [N, N], True, "float32 [B, R]: recomputed by the actor "
     "(compute_log_prob) before the update"),
    ("rollout_log_probs", "number", [N, N], False, "float32 [B, R]: vLLM/SGLang "
     "log-probs (rollout importance sampling)"),
    ("ref_log_prob", "number", [N, N], True, "float32 [B, R]: reference policy "
     "log-prob (use_kl_loss)"),
    ("token_level_rewards", "number", [N, N], True, "float32 [B, R]: the score on the "
     "last response token, minus beta*KL per token when use_kl_in_reward"),
    ("advantages", "number", [N, N], True, "float32 [B, R]: GRPO: group-normalised "
     "scores times response_mask (compute_grpo_outcome_advantage)"),
    ("uid", "string", [N], True, "the prompt's group id (one per prompt, repeated "
     "rollout.n times)"),
]


PEERS = {
    "cleanrl_ppo_storage": schema(
        "CleanRL ppo.py rollout storage (read by the PPO update)",
        "Time-major [T, N] float32 tensors (torch.zeros); GAE runs over them, then they are "
        "flattened. Batch dims: T,N.",
        [("obs", "number", [N, N, N], True, "obs[step] = next_obs before acting"),
         ("actions", "number", [N, N], True, "float32 storage, .long() at train time"),
         ("logprobs", "number", [N, N], True, "behaviour log-prob"),
         ("rewards", "number", [N, N], True, ""),
         ("dones", "number", [N, N], True,
          "dones[step] = next_done of the previous step = terminations OR truncations"),
         ("values", "number", [N, N], True, "V(obs[step])")],
        "vwxyzjn/cleanrl ppo.py"),
    "rllib_learner_batch": schema(
        "RLlib new-stack learner batch (Columns)",
        "Flat [B]: all episode timesteps concatenated. Batch dims: B.",
        [("obs", "number", [N, N], True, "Columns.OBS"),
         ("new_obs", "number", [N, N], True, "Columns.NEXT_OBS: the string is new_obs"),
         ("actions", "integer", [N], True, "Columns.ACTIONS (Discrete)"),
         ("rewards", "number", [N], True, "Columns.REWARDS"),
         ("terminateds", "boolean", [N], True, "bootstrap = 0 only when terminated"),
         ("truncateds", "boolean", [N], True, "truncated chunks bootstrap with V(last_obs)"),
         ("eps_id", "string", [N], True, "uuid4 hex"),
         ("t", "integer", [N], True, "timestep within the episode"),
         ("action_logp", "number", [N], True, "behaviour log-prob"),
         ("vf_preds", "number", [N], True, "value predictions"),
         ("advantages", "number", [N], True, "GAE connector output"),
         ("value_targets", "number", [N], True, "advantages + vf_preds"),
         ("loss_mask", "boolean", [N], True, "False entries are masked out of the loss")],
        ""),
    "torchrl_ppo": schema(
        "TorchRL ClipPPOLoss + GAE input TensorDict",
        "TensorDict [B, T] env-major, time dim last; reward/done/value keep a trailing 1; "
        "padding is masked by ('collector', 'mask'), which ClipPPOLoss applies to its loss_* "
        "terms only (not to normalize_advantage=True). "
        "Batch dims: B,T.",
        [("observation", "number", [N, N, N], True, "root obs s_t"),
         ("action", "integer", [N, N], True, "discrete action"),
         ("action_log_prob", "number", [N, N], True,
          "ProbabilisticActor(return_log_prob=True); TorchRL >= 0.10 default key"),
         ("state_value", "number", [N, N, 1], True, "tensor_keys.value"),
         ("advantage", "number", [N, N, 1], True, "written by GAE"),
         ("value_target", "number", [N, N, 1], True, "written by GAE"),
         ("next.observation", "number", [N, N, N], True, "the true s_{t+1}"),
         ("next.reward", "number", [N, N, 1], True, "reward lives under next"),
         ("next.done", "boolean", [N, N, 1], True, "terminated | truncated"),
         ("next.terminated", "boolean", [N, N, 1], True, "zeroes the bootstrap"),
         ("next.truncated", "boolean", [N, N, 1], True, "")],
        ""),
    "sb3_rollout_samples": schema(
        "Stable-Baselines3 RolloutBufferSamples",
        "swap_and_flatten: [N*T] env-major, then minibatches [M]. Batch dims: M.",
        [("observations", "number", [N, N], True, ""),
         ("actions", "number", [N, 1], True,
          "RolloutBuffer stores float32 [M, action_dim]: [M, 1] for a Discrete space"),
         ("old_values", "number", [N], True, "flattened values"),
         ("old_log_prob", "number", [N], True, "flattened log_probs (behaviour)"),
         ("advantages", "number", [N], True, ""),
         ("returns", "number", [N], True, "value-loss target")],
        ""),
    "tianshou_ppo": schema(
        "Tianshou PPO batch",
        "Flat Batch [B], episodes contiguous. Batch dims: B.",
        [("obs", "number", [N, N], True, ""),
         ("act", "integer", [N], True, ""),
         ("rew", "number", [N], True, ""),
         ("terminated", "boolean", [N], True, "value_mask = ~terminated"),
         ("truncated", "boolean", [N], True, ""),
         ("obs_next", "number", [N, N], True, ""),
         ("v_s", "number", [N], True, "V(obs)"),
         ("adv", "number", [N], True, ""),
         ("returns", "number", [N], True, "adv + v_s"),
         ("logp_old", "number", [N], True, "recomputed by the trainer under no_grad")],
        ""),
    "verl_actor_batch": schema(
        "verl PPO/GRPO update batch (DataProto)",
        "One row per generation. TensorDict [B, ...]: input_ids/attention_mask/position_ids "
        "[B, P+R] (the left-padded prompt then the right-padded response), responses and "
        "every per-token tensor [B, R]; uid is a numpy object array of strings in "
        "non_tensor_batch. Batch dims: B.",
        VERL_FIELDS,
        "volcengine/verl (DataProto, core_algos)", ["B"]),
    "openrlhf_experience": schema(
        "OpenRLHF Experience consumed by the PPO actor (group_norm estimator)",
        "One row per generation: sequences/attention_mask [B, S] (vLLM generation, not "
        "packed: the input left-padded, the output right-padded), per-action tensors [B, A] "
        "over the response tokens. Batch dims: B.",
        [("sequences", "integer", [N, N], True, "LongTensor [B, S]"),
         ("attention_mask", "integer", [N, N], True, "LongTensor [B, S]"),
         ("action_mask", "boolean", [N, N], True, "BoolTensor [B, A]: loss/advantage mask"),
         ("action_log_probs", "number", [N, N], True, "float32 [B, A]: recomputed by the actor"),
         ("rollout_log_probs", "number", [N, N], False, "float32 [B, A]: vLLM log-probs for "
          "importance-sampling correction"),
         ("base_action_log_probs", "number", [N, N], True, "float32 [B, A]: reference policy "
          "log-probs (KL)"),
         ("advantages", "number", [N, N], True, "float32 [B, A]: group_norm: the normalised "
          "reward on every action token (gamma 1, KL in the loss)"),
         ("returns", "number", [N, N], True, "float32 [B, A]: equal to advantages for the "
          "critic-free estimators")],
        "OpenRLHF/OpenRLHF (Experience, experience_maker)", ["B"]),
    "trl_grpo": schema(
        "TRL GRPOTrainer compute_loss inputs",
        "Dict of tensors from _generate_and_score_completions: prompts [B, P] left-padded, "
        "completions [B, C] right-padded (masked after the first EOS), one advantage per "
        "completion; multi-turn tool calls add tool_mask. Batch dims: B.",
        [("prompt_ids", "integer", [N, N], True, "int64 [B, P], left-padded"),
         ("prompt_mask", "integer", [N, N], True, "int64 [B, P]"),
         ("completion_ids", "integer", [N, N], True, "int64 [B, C], right-padded"),
         ("completion_mask", "integer", [N, N], True, "int32 [B, C]: 1 on the real completion "
          "tokens (tool output included): attention mask and loss mask"),
         ("tool_mask", "integer", [N, N], False, "int64 [B, C]: 0 on tool output spliced into "
          "a multi-turn completion; the loss mask is completion_mask * tool_mask"),
         ("old_per_token_logps", "number", [N, N], False, "float32 [B, C]: computed by the "
          "training model (None when one iteration per generation)"),
         ("sampling_per_token_logps", "number", [N, N], False, "float32 [B, C]: vLLM "
          "(sampler) log-probs for importance sampling"),
         ("ref_per_token_logps", "number", [N, N], False, "float32 [B, C]: reference model "
          "log-probs (None when beta == 0)"),
         ("advantages", "number", [N], True, "float32 [B]: (r - group mean) / (group std + "
          "1e-4)")],
        "huggingface/trl (GRPOTrainer)", ["B"]),
    "rlds_steps": schema(
        "RLDS step (one per observation)",
        "SAR-aligned steps; truncated = is_last and not is_terminal. Per step (no batch dims).",
        [("observation", "number", [N], True, ""),
         ("action", "integer", [], True, ""),
         ("reward", "number", [], True, ""),
         ("discount", "number", [], True, "dm_env discount"),
         ("is_first", "boolean", [], True, "first step of the episode"),
         ("is_last", "boolean", [], True, "last step: holds only the final observation"),
         ("is_terminal", "boolean", [], False, "true terminal state")],
        ""),
    "d4rl_qlearning": schema(
        "D4RL qlearning_dataset",
        "Flat [N] transitions. Batch dims: N.",
        [("observations", "number", [N, N], True, ""),
         ("actions", "number", [N, N], True, ""),
         ("next_observations", "number", [N, N], True, ""),
         ("rewards", "number", [N], True, ""),
         ("terminals", "boolean", [N], True, "true terminal"),
         ("timeouts", "boolean", [N], True, "time-limit ends")],
        ""),
}

P_MAX, R_MAX = 16, 32  # verl data.max_prompt_length, data.max_response_length (a test's sizes)
_SEQUENCE = ("input_ids", "attention_mask", "position_ids")


def _fixed(name, dims):
    """verl's token dim at its fixed width: the sequence P + R, the prompt P, the rest R."""
    if len(dims) < 2:
        return dims
    return [dims[0], P_MAX + R_MAX if name in _SEQUENCE else P_MAX if name == "prompts" else R_MAX]


PEERS["verl_fixed_width"] = schema(
    "verl PPO/GRPO update batch (DataProto), fixed widths",
    f"verl_actor_batch with data.max_prompt_length = {P_MAX} and data.max_response_length = "
    f"{R_MAX}: verl pads every prompt to P and every response to R, so its token tensors have "
    f"fixed widths: input_ids/attention_mask/position_ids [B, {P_MAX + R_MAX}], prompts "
    f"[B, {P_MAX}], responses and every per-token tensor [B, {R_MAX}]. Batch dims: B.",
    [(name, t, _fixed(name, dims), req, note) for name, t, dims, req, note in VERL_FIELDS],
    "volcengine/verl (DataProto, core_algos; the dataset pads prompts to max_prompt_length, "
    "the rollout responses to max_response_length)", ["B"])

S_MAX = 64  # prime-rl's seq_len (the token budget of one micro-batch row; a test's size)
PEERS["prime_rl_micro_batch"] = schema(
    "prime-rl training micro-batch (packed)",
    "What prime-rl's RL trainer reads per micro-batch, as far as its data loader and loss "
    "describe it (the source was not at hand: these are assumptions, from prime-rl's packed "
    "micro-batches and from what flash-attention varlen trainers read - verl with "
    "use_remove_padding, OpenRLHF with packing_samples): samples (prompt + completion) packed "
    f"end to end into rows of seq_len = {S_MAX} tokens, [M, S] with M micro-batch rows, "
    "position_ids restarting at 0 at each sample so the attention kernel sees each sample "
    "alone; per-token advantages (the sample's advantage on its completion tokens), the "
    "inference engine's log-probs at each token and a loss mask on the completion tokens the "
    "loss counts; 0 on prompt tokens and padding. No prompt/completion split and no sample "
    "index: position_ids carry the boundaries. The per-micro-batch sampling temperature (a "
    "float) is left out. Batch dims: M.",
    [("input_ids", "integer", [N, S_MAX], True, "int64 [M, S]: samples end to end"),
     ("position_ids", "integer", [N, S_MAX], True, "int64 [M, S]: 0 at each sample's first "
      "token"),
     ("advantages", "number", [N, S_MAX], True, "float32 [M, S]: per token, 0 off the "
      "completion"),
     ("inference_logprobs", "number", [N, S_MAX], True, "float32 [M, S]: the inference "
      "engine's log-prob of each completion token (importance ratio)"),
     ("loss_mask", "boolean", [N, S_MAX], True, "bool [M, S]: completion tokens the loss "
      "counts")],
    "PrimeIntellect-ai/prime-rl (trainer micro-batches; assumed, see the description)", ["M"])

for name, doc in PEERS.items():
    (OUT / f"{name}.json").write_text(json.dumps(doc, indent=2) + "\n")
print(sorted(PEERS))
