"""Your own LLM sampler through the contract v1.1: stage 1 (the sampler alone) and stage 2 (a
TokenBatch and one GRPO loss), one generation per step.

Replace `MyLLM` with your model and `grade` with your verifier; the rest stays. `MyLLM` here is
a fake, deterministic stand-in (no model is loaded): `generate` gives the token ids of `n`
completions of a prompt with one log-prob per token (with vLLM: `SamplingParams(n=n,
logprobs=0)`, the ids and the chosen token's log-prob of each output), `reference_logprobs`
the frozen reference model's log-probs of those tokens (a forward pass of the reference).
A completion may call a tool: the tool's output is spliced into the turn, so those tokens are
in `action` but were not generated — `loss_mask` is False on them (and their log-probs 0).

Stage 1 records every completion with `TurnRecorder` as a `gyre_contract.pinned.LLMStep`:
observation {token_ids [P], text}, action [A], per-token `logprob` and `ref_logprob` [A],
`loss_mask` [A], the prompt's `group_id`, one reward, the sampler's `policy_version`; each
record is validated before it is written, then the file is validated as a whole.

Stage 2 runs `half_way` with a field map of one row per generation (`"rows": "step"`): the
TokenBatch columns come from the token collation (prompt left-padded, response right-padded,
`response_mask` = real token AND loss_mask), `advantage` is the built-in `group_norm` (GRPO:
the reward normalised within its group, unbiased std, eps 1e-6 as in verl) and `kl` the k3
estimate per token; the loss is GRPO's token-mean PPO-clip surrogate plus β·KL. With a real
model, `new_logprob` is a forward pass of the current weights; here it is the sampler's, so
the ratio is 1.

Run: `python examples/llm_sampler.py [--out DIR] [--prompts N] [--group G] [--seed S]`.
Exit code 0 when both stages pass.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from gyre_contract import ContractError, half_way, validate_file, write_steps
from gyre_contract.harness import TurnRecorder
from gyre_contract.pinned import LLMStep

VOCAB, BOS, EOS, TOOL = 64, 1, 2, 3  # token 0 pads, 1 begins a prompt, 2 ends, 3 calls a tool
TOOL_OUTPUT = [4, 5, 5, 4]  # what the tool answers, spliced into the turn
CLIP, BETA = 0.2, 0.04


# -- your sampler: replace MyLLM and grade ------------------------------------------------------

class MyLLM:
    """Stands in for an LLM: the same (prompt, sample index) always gives the same tokens."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def generate(self, prompt: list[int], n: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """`n` completions: token ids int64 [A] (the last is EOS) and their log-probs float32 [A]."""
        out = []
        for sample in range(n):
            rng = np.random.default_rng([self.seed, sample, *prompt])
            length = int(rng.integers(2, 10))
            tokens = np.append(rng.integers(6, VOCAB, length - 1), EOS).astype(np.int64)
            if rng.random() < 0.5:  # about half the completions call the tool
                tokens[rng.integers(0, length - 1)] = TOOL
            out.append((tokens, np.log(rng.uniform(0.05, 1.0, length)).astype(np.float32)))
        return out

    def reference_logprobs(self, prompt: list[int], tokens: np.ndarray) -> np.ndarray:
        """The frozen reference model's log-probs of `tokens` after `prompt` (float32 [A])."""
        rng = np.random.default_rng([self.seed + 1, *prompt, *tokens.tolist()])
        return np.log(rng.uniform(0.05, 1.0, len(tokens))).astype(np.float32)


def grade(tokens: np.ndarray) -> float:
    """The verifier: 1.0 for an accepted answer, else 0.0 (a fake, deterministic rule)."""
    return float(int(tokens.sum()) % 3 == 0)


def with_tool_output(tokens: np.ndarray, logprob: np.ndarray, ref: np.ndarray
                     ) -> dict[str, np.ndarray]:
    """A completion whose first TOOL token is answered by the tool: its output is spliced in
    after that token. The spliced tokens are in `action` with `loss_mask` False (log-probs 0:
    the policy did not generate them)."""
    calls = np.flatnonzero(tokens == TOOL)
    cut = int(calls[0]) + 1 if len(calls) else len(tokens)
    spliced = np.array(TOOL_OUTPUT if len(calls) else [], np.int64)
    zeros = np.zeros(len(spliced), np.float32)
    return {"action": np.concatenate([tokens[:cut], spliced, tokens[cut:]]),
            "logprob": np.concatenate([logprob[:cut], zeros, logprob[cut:]]),
            "ref_logprob": np.concatenate([ref[:cut], zeros, ref[cut:]]),
            "loss_mask": np.concatenate([np.ones(cut, bool), np.zeros(len(spliced), bool),
                                         np.ones(len(tokens) - cut, bool)])}


def prompts(n: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[BOS, *rng.integers(6, VOCAB, int(rng.integers(3, 9))).tolist()] for _ in range(n)]


def sample(llm: MyLLM, questions: list[list[int]], group: int,
           policy_version: int = 0) -> list[dict[str, Any]]:
    """Step records (one per completion), validated as they are made; `group` per prompt."""
    recorder = TurnRecorder(policy_version=policy_version, run_id="q", model=LLMStep)
    records = []
    for q, question in enumerate(questions):
        completions = [with_tool_output(tokens, logprob,
                                        llm.reference_logprobs(question, tokens))
                       for tokens, logprob in llm.generate(question, group)]
        rewards = [grade(c["action"][c["loss_mask"]]) for c in completions]
        records += recorder.group(question, completions, rewards, group_id=f"prompt-{q}",
                                  text=f"question {q}")
    return records


# -- the trainer side: a rows=step map with the built-in group_norm, and the GRPO loss ----------

FIELD_MAP = {
    "gyre_field_map": 1,
    "rows": "step",
    "comment": "LLMStep rollouts -> a TokenBatch, one row per generation",
    "fields": {
        "prompt_ids": {"from": "prompt_ids", "comment": "left-padded [B, P]"},
        "prompt_mask": {"from": "prompt_mask"},
        "response_ids": {"from": "response_ids", "comment": "right-padded [B, R]"},
        "response_mask": {"from": "response_mask",
                          "comment": "real generated tokens AND loss_mask"},
        "response_length": {"from": "response_length"},
        "logprob": {"from": "logprob"},
        "ref_logprob": {"from": "ref_logprob"},
        "reward": {"from": "reward"},
        "advantage": {"op": "group_norm", "from": ["reward", "group_id"], "std": "unbiased",
                      "eps": 1e-6, "comment": "GRPO: (r - mean_g) / (std_g + eps), [B]"},
        "kl": {"op": "kl", "from": ["logprob", "ref_logprob"], "estimator": "k3",
               "comment": "per token [B, R], 0 off the response mask"},
        "group_id": {"from": "group_id"},
        "episode_id": {"from": "episode_id"},
        "policy_version": {"from": "policy_version"},
        "step": {"from": "step"},
    },
}


def grpo_loss(batch: dict[str, np.ndarray]) -> float:
    """GRPO's token-mean PPO-clip surrogate plus β·KL (k3), over `response_mask`."""
    mask = batch["response_mask"]
    old = batch["logprob"]
    new = old  # a real trainer: log-probs of response_ids under the current weights
    ratio = np.exp(new - old)
    adv = batch["advantage"]
    adv = adv[:, None] if adv.ndim == 1 else adv
    surrogate = np.minimum(ratio * adv, np.clip(ratio, 1 - CLIP, 1 + CLIP) * adv)
    per_token = -surrogate + BETA * batch["kl"]
    return float(per_token[mask].sum() / mask.sum())


# -- the two stages ------------------------------------------------------------------------

def say(text: str = "") -> None:
    print(text, flush=True)


def heading(title: str, criteria: str) -> None:
    say(f"\n=== {title} ===")
    say(f"pass criteria: {criteria}")


OUTCOME = {True: "pass", False: "FAIL", None: "not run"}


def verdict(ok: bool, text: str) -> bool:
    say(f"result: {'PASS' if ok else 'FAIL'} — {text}")
    return ok


def stage1(out: Path, llm: MyLLM, questions: list[list[int]], group: int) -> bool:
    heading("Stage 1: the sampler alone",
            "every completion validates as an LLMStep as it is recorded (token ids, log-probs, "
            "reference log-probs and loss mask of one length, log-probs <= 0, a group id) and "
            "the file validates with every episode complete")
    try:
        records = sample(llm, questions, group)
    except ContractError as err:  # the recorder checks each completion before it is kept
        say(str(err))
        return verdict(False, "a completion broke the contract before it was written")
    path = out / "rollouts.jsonl"
    count = write_steps(path, records)
    report = validate_file(path, LLMStep, require_complete=True)
    spliced = sum(int((~r["loss_mask"]).sum()) for r in records)
    say(f"wrote {count} completions to {path} ({spliced} spliced tool tokens, loss_mask False)")
    say(report.to_text())
    return verdict(report.ok and not report.warnings,
                   f"{report.steps} completions in {report.episodes} episodes, "
                   f"{report.problem_count} problems")


def stage2(out: Path, group: int) -> bool:
    heading("Stage 2: half way (rows=step map + TokenBatch + one GRPO loss, no update)",
            "the batch is a valid TokenBatch, tool tokens are in response_ids but out of "
            "response_mask, each group's advantages average 0, KL is >= 0 and 0 off the mask")
    map_path = out / "map.json"
    map_path.write_text(json.dumps(FIELD_MAP, indent=2) + "\n", encoding="utf-8")
    say(f"field map written to {map_path}")
    try:
        report = half_way(out / "rollouts.jsonl", map_path, grpo_loss, model=LLMStep)
    except ContractError as err:
        say(str(err))
        return verdict(False, "the batch or the loss broke the contract")
    say(report.to_text())
    batch = report.batch
    mask, ids = batch["response_mask"], batch["response_ids"]
    real = np.arange(ids.shape[1]) < batch["response_length"][:, None]
    tool_tokens = int((real & ~mask).sum())
    tool_ok = bool(np.isin(ids[real & ~mask], TOOL_OUTPUT).all())
    adv = np.asarray(batch["advantage"])
    adv = adv if adv.ndim == 1 else adv[:, 0]
    group_means = float(np.abs(adv.reshape(-1, group).mean(axis=1)).max())  # rows in file order
    kl = batch["kl"]
    kl_ok = bool((kl[mask] >= 0).all() and not kl[~mask].any())
    say(f"tool tokens in response_ids but out of response_mask: {tool_tokens} (all tool "
        f"output: {tool_ok}); largest |mean advantage| of a group: {group_means:.2e}; "
        f"KL >= 0 on the mask and 0 off it: {kl_ok}")
    ok = tool_ok and tool_tokens > 0 and group_means < 1e-5 and kl_ok
    return verdict(ok, f"B={ids.shape[0]}, P={batch['prompt_ids'].shape[1]}, R={ids.shape[1]}, "
                       f"loss {report.loss:.4f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="where the files go (default: a new temp dir)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts (default 4)")
    parser.add_argument("--group", type=int, default=4, help="completions per prompt (default 4)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="gyre-llm-"))
    out.mkdir(parents=True, exist_ok=True)
    say(f"your LLM sampler: {args.prompts} prompts x {args.group} completions (files in {out})")
    llm = MyLLM(args.seed)
    results: dict[str, bool | None] = {
        "stage 1": stage1(out, llm, prompts(args.prompts, args.seed), args.group)}
    results["stage 2"] = stage2(out, args.group) if results["stage 1"] else None
    passed = all(results.values())
    say(f"\n{'BOTH STAGES PASS' if passed else 'SOME STAGES FAILED'}: "
        + ", ".join(f"{k} {OUTCOME[v]}" for k, v in results.items()))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
