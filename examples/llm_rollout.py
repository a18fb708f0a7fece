"""An LLM-style rollout through stages 1 and 2: token ids of varying length, per-token log-probs,
one reward at the end of each generation, and a GRPO-style group-normalised advantage.

No model is loaded: a fake, deterministic "generator" stands in for one. Each prompt is sampled
`--group` times (a GRPO group); a generation the grader rejects gets one retry turn (the
conversation so far plus a retry instruction becomes the next prompt), so an episode is one or
two steps, and both the prompt length P and the generation length A vary from step to step.
Each step is one `gyre_contract.pinned.LLMStep`: observation {token_ids [P], text}, action =
generated token ids [A], logprob = per-token log-probs [A] (all ≤ 0), and one reward.

Stage 1 writes the steps with `write_steps` and checks the file with `validate_file` (the field
table shows the varying dims as ranges). Stage 2 runs `half_way` with a field map that builds a
token-level batch on top of the contract's `[B, T]` one:

- per step ([B, T], the contract's TrainBatch fields): `logprob` = the generation's log-prob
  (`masked_sum` of its token log-probs), `advantage` = the episode's reward normalised within its
  group of samples of the same prompt (an op registered here with `register_op`), `return` =
  the undiscounted return-to-go, `reward`, `done`, `mask`;
- per token ([B, T, A], extra keys a TrainBatch allows): `action` (padded token ids),
  `action_mask` (True on real tokens: the varying dim's own mask from `collate`) and
  `token_logprob`; the prompt rides in `obs.token_ids` with `obs.token_ids_mask`.

The loss is a GRPO / PPO-clip token-level surrogate. With a real model, `new_logprob` comes from
a forward pass of the current weights; here it is the behaviour log-prob, so the ratio is 1.

Run: `python examples/llm_rollout.py [--out DIR] [--prompts N] [--group G] [--seed S]`.
Exit code 0 when both stages pass.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from gyre_contract import (
    ContractError,
    Problem,
    half_way,
    register_op,
    validate_file,
    validate_step,
    write_steps,
)
from gyre_contract.pinned import LLMStep
from gyre_contract.trainer import unregister_op

VOCAB, EOS = 64, 2  # token 0 pads, 1 begins a prompt, 2 ends a generation
RETRY = [3, 4, 5]  # "wrong, try again": appended to the conversation for the retry turn
MAX_TURNS = 2
CLIP = 0.2


# -- the sampler: a fake deterministic generator and a grader ---------------------------------

class FakeGenerator:
    """Stands in for an LLM: the same (prompt, sample index) always gives the same tokens."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def generate(self, prompt: list[int], sample: int) -> tuple[np.ndarray, np.ndarray]:
        """Token ids int64 [A] ending in EOS, and their log-probs float32 [A], each ≤ 0."""
        rng = np.random.default_rng([self.seed, sample, len(prompt), *prompt])
        length = int(rng.integers(2, 12))
        tokens = np.append(rng.integers(6, VOCAB, length - 1), EOS).astype(np.int64)
        logprobs = np.log(rng.uniform(0.05, 1.0, length)).astype(np.float32)
        return tokens, logprobs


def grade(tokens: np.ndarray) -> float:
    """The reward model: 1.0 for an "accepted" answer, else 0.0 (a fake, deterministic rule)."""
    return float(int(tokens.sum()) % 3 == 0)


def prompts(n: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[1, *rng.integers(6, VOCAB, int(rng.integers(3, 9))).tolist()] for _ in range(n)]


def rollouts(generator: FakeGenerator, questions: list[list[int]], group: int,
             policy_version: int = 0) -> Iterator[dict[str, Any]]:
    """Step records (docs/contract.md §3), one per generation; an episode is one sample of a prompt."""
    for q, question in enumerate(questions):
        for g in range(group):
            conversation = list(question)
            for turn in range(MAX_TURNS):
                tokens, logprobs = generator.generate(conversation, g)
                reward = grade(tokens)
                last = reward == 1.0 or turn == MAX_TURNS - 1
                yield {
                    "observation": {"token_ids": list(conversation),
                                    "text": f"question {q}" + (" (retry)" if turn else "")},
                    "action": tokens, "logprob": logprobs, "reward": reward,
                    "step": turn, "episode_id": f"q{q}-s{g}", "terminated": last,
                    "truncated": False, "policy_version": policy_version,
                }
                if last:
                    break
                conversation += [*tokens.tolist(), *RETRY]


# -- the trainer side: a GRPO advantage op, the map, the loss ----------------------------------

def group_advantage(inputs: list[np.ndarray], columns: Mapping[str, Any], *,
                    eps: float = 1e-6) -> np.ndarray:
    """GRPO's advantage: each episode's total reward, normalised within its group (the rows
    whose first prompt is the same), given to every real step of the row.

    Rows must hold whole episodes (no `max_len` cut): a row whose first step is not step 0 has
    lost its prompt and is refused rather than grouped wrongly.
    """
    reward, prompt, prompt_mask, step = inputs
    mask = columns["mask"]
    cut = np.flatnonzero(step[:, 0] != 0)
    if len(cut):
        raise ContractError(Problem("group_advantage", "rows that start at step 0",
                                    f"rows {cut.tolist()} start later",
                                    "a row without its first prompt cannot be grouped"))
    totals = np.where(mask, reward, 0).sum(axis=1)
    keys = [row[keep].tobytes() for row, keep in zip(prompt[:, 0], prompt_mask[:, 0])]
    advantage = np.zeros(len(keys), np.float32)
    for key in set(keys):
        rows = [i for i, k in enumerate(keys) if k == key]
        r = totals[rows]
        advantage[rows] = (r - r.mean()) / (r.std() + eps)
    return np.where(mask, advantage[:, None], 0).astype(np.float32)


FIELD_MAP = {
    "gyre_field_map": 1,
    "comment": "LLMStep rollouts -> a token-level TrainBatch: per-step fields [B, T], "
               "per-token extras [B, T, A]",
    "fields": {
        "obs": {"from": "observation",
                "comment": "modalities: token_ids [B, T, P], token_ids_mask, text"},
        "action": {"from": "action", "comment": "generated token ids, zero-padded [B, T, A]"},
        "action_mask": {"op": "mask", "from": "action_mask",
                        "comment": "True on real tokens of each generation [B, T, A]"},
        "token_logprob": {"from": "logprob", "comment": "per-token log-probs [B, T, A]"},
        "logprob": {"op": "masked_sum", "from": ["logprob", "logprob_mask"], "axis": 2,
                    "comment": "the generation's log-prob: sum over its real tokens [B, T]"},
        "reward": {"from": "reward"},
        "done": {"op": "any", "from": ["terminated", "truncated"]},
        "terminated": {"from": "terminated"},
        "truncated": {"from": "truncated"},
        "return": {"op": "discounted_return",
                   "from": ["reward", "terminated", "truncated", "next_value"], "gamma": 1.0},
        "advantage": {"op": "group_advantage",
                      "from": ["reward", "observation.token_ids",
                               "observation.token_ids_mask", "step"],
                      "comment": "GRPO: episode reward normalised within its prompt's group"},
        "mask": {"op": "mask"},
        "policy_version": {"from": "policy_version"},
        "episode_id": {"from": "episode_id"},
        "step": {"from": "step"},
    },
}


def grpo_loss(batch: dict[str, np.ndarray]) -> float:
    """Token-level PPO-clip surrogate with the advantage broadcast to every token of a step.

    Checks on the way that the per-step log-prob is the sum of its token log-probs.
    """
    tokens = batch["action_mask"]
    old = batch["token_logprob"]
    seq = np.where(tokens, old, 0).sum(axis=2)
    if not np.allclose(seq[batch["mask"]], batch["logprob"][batch["mask"]], atol=1e-4):
        raise ValueError("logprob [B, T] is not the sum of token_logprob over action_mask")
    new = old  # a real trainer: log-probs of `action` under the current weights
    ratio = np.exp(new - old)
    adv = batch["advantage"][:, :, None]
    surrogate = np.minimum(ratio * adv, np.clip(ratio, 1 - CLIP, 1 + CLIP) * adv)
    return float(-(surrogate * tokens).sum() / tokens.sum())


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


def checked(records: list[dict[str, Any]]) -> Iterator[LLMStep]:
    """Each record validated before it is written; a bad one is named by its index."""
    for i, record in enumerate(records):
        try:
            yield validate_step(record, LLMStep)
        except ContractError as err:
            raise ContractError([p.under(f"records[{i}]") for p in err.problems]) from None


def stage1(out: Path, records: list[dict[str, Any]]) -> bool:
    heading("Stage 1: the sampler alone",
            "every generation validates as an LLMStep (token ids and log-probs of one length, "
            "log-probs <= 0) and every episode is complete")
    path = out / "rollouts.jsonl"
    try:
        count = write_steps(path, checked(records))
    except ContractError as err:  # the sampler checks each generation before writing it
        say(str(err))
        return verdict(False, "a generation broke the contract before it was written")
    report = validate_file(path, LLMStep, require_complete=True)
    say(f"wrote {count} generations to {path}")
    say(report.to_text())
    return verdict(report.ok, f"{report.steps} generations in {report.episodes} episodes, "
                                 f"{report.problem_count} problems")


def stage2(out: Path, records: list[dict[str, Any]], group: int) -> bool:
    heading("Stage 2: half way (token-level map + collate + one GRPO loss, no update)",
            "the batch is a valid TrainBatch, every generated token is in action_mask once, "
            "logprob is the sum of token_logprob, each group's advantages average 0")
    map_path = out / "map.json"
    map_path.write_text(json.dumps(FIELD_MAP, indent=2) + "\n", encoding="utf-8")
    say(f"field map written to {map_path} (its group_advantage op is registered by this script)")
    register_op("group_advantage", group_advantage,
                sources=("reward", "prompt", "prompt_mask", "step"), args=["eps"])
    try:
        report = half_way(out / "rollouts.jsonl", map_path, grpo_loss, model=LLMStep)
    except ContractError as err:
        say(str(err))
        return verdict(False, "the batch or the loss broke the contract")
    finally:
        unregister_op("group_advantage")  # the op registry is process-wide
    say(report.to_text())
    batch = report.batch
    tokens = int(batch["action_mask"].sum())
    sampled = sum(len(r["action"]) for r in records)
    adv = batch["advantage"][:, 0].reshape(-1, group)  # rows come in file order: q0-s0, q0-s1...
    group_means = np.abs(adv.mean(axis=1)).max()
    padding_clean = not batch["action"][~batch["action_mask"]].any()
    say(f"tokens: {tokens} in action_mask, {sampled} generated; padding holds only 0: "
        f"{padding_clean}; largest |mean advantage| of a group: {group_means:.2e}")
    ok = tokens == sampled and padding_clean and group_means < 1e-5
    return verdict(ok, f"B={report.rows}, T={report.time_steps}, "
                       f"A={batch['action'].shape[2]}, loss {report.loss:.4f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="where the files go (default: a new temp dir)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts (default 4)")
    parser.add_argument("--group", type=int, default=4, help="samples per prompt (default 4)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="gyre-llm-"))
    out.mkdir(parents=True, exist_ok=True)
    say(f"an LLM-style rollout: {args.prompts} prompts x {args.group} samples, up to "
        f"{MAX_TURNS} turns each (files in {out})")
    records = list(rollouts(FakeGenerator(args.seed), prompts(args.prompts, args.seed),
                            args.group))
    results: dict[str, bool | None] = {"stage 1": stage1(out, records)}
    results["stage 2"] = stage2(out, records, args.group) if results["stage 1"] else None
    passed = all(results.values())
    say(f"\n{'BOTH STAGES PASS' if passed else 'SOME STAGES FAILED'}: "
        + ", ".join(f"{k} {OUTCOME[v]}" for k, v in results.items()))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
