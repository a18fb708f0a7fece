"""A generation engine's output as step records (`from_vllm`): the sampler's side of the handoff.

vLLM's `LLM.generate` returns one `RequestOutput` per prompt: `request_id`, `prompt` (text, or
None), `prompt_token_ids`, and `outputs`, the `n` completions (`CompletionOutput`: `index`,
`token_ids`, `logprobs`, `finish_reason`). With `SamplingParams(logprobs=0)` (or more) each
completion's `logprobs` holds, per generated position, a dict `{token_id: Logprob}` in which the
sampled token is always present (`Logprob.logprob`, `.rank`, `.decoded_token`). These are read by
their attributes only: vLLM is never imported, and any object shaped the same way works.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from gyre_contract.core._errors import ContractError, Problem, describe
from gyre_contract.core._models import RolloutStepV1
from gyre_contract.core._validate import validate_step
from gyre_contract.pinned import LLMStep

FINISHED = {"stop": (True, False), "length": (False, True)}
"""vLLM's `finish_reason` → (terminated, truncated): a stop token or string ends the episode;
the token limit cuts it (a trainer must not treat the cut as the end of the task)."""


def from_vllm(request_output: Any, *, rewards: Iterable[float], policy_version: int,
              group_id: str | None = None, model: type[RolloutStepV1] = LLMStep
              ) -> list[dict[str, Any]]:
    """One step record per completion of a vLLM `RequestOutput` (docs/llm.md), in order:
    `observation.token_ids` the prompt's ids (and `observation.text` its text, when vLLM kept
    it), `action` the generated ids, `logprob` the sampled token's log-prob at each position,
    `reward` from `rewards` (one per completion), `policy_version` the weights that generated
    it, `group_id` the request id (or `group_id`), `episode_id` `"{request_id}/{index}"`,
    `step` 0, `terminated` for `finish_reason` "stop", `truncated` for "length".

    Each record is validated as `model` (default `LLMStep`) before it is returned. Raises one
    ContractError with every problem: a completion without log-probs (`outputs[i].logprobs`:
    sample with `SamplingParams(logprobs=0)`; never filled with zeros), a position whose
    log-probs lack the sampled token, a completion that did not finish (`finish_reason` None or
    "abort"), a number of rewards that is not the number of completions.
    """
    request_id = str(_attr(request_output, "request_id"))
    outputs = list(_attr(request_output, "outputs"))
    rewards = list(rewards)
    problems: list[Problem] = []
    if len(rewards) != len(outputs):
        problems.append(Problem("rewards", f"{len(outputs)} rewards (one per completion)",
                                str(len(rewards)), "rewards and completions differ in number"))
    prompt_ids = getattr(request_output, "prompt_token_ids", None)
    if prompt_ids is None:
        problems.append(Problem("prompt_token_ids", "the prompt's token ids", "None",
                                "a token record needs the prompt's ids"))
    observation: dict[str, Any] = {"token_ids": _ids(prompt_ids or [])}
    prompt = getattr(request_output, "prompt", None)
    if isinstance(prompt, str):
        observation["text"] = prompt
    records: list[dict[str, Any]] = []
    for i, output in enumerate(outputs):
        where = f"outputs[{i}]"
        action = _ids(_attr(output, "token_ids"))
        logprob = _logprobs(getattr(output, "logprobs", None), action, where, problems)
        reason = getattr(output, "finish_reason", None)
        ended = FINISHED.get(reason) if isinstance(reason, str) else None
        if ended is None:
            problems.append(Problem(f"{where}.finish_reason", '"stop" or "length" (finished)',
                                    repr(reason),
                                    "the completion did not finish: no step record for it"))
        if logprob is None or ended is None or len(rewards) != len(outputs):
            continue
        record = {"observation": {**observation, "token_ids": list(observation["token_ids"])},
                  "action": action, "logprob": logprob,
                  "reward": float(rewards[i]), "step": 0,
                  "episode_id": f"{request_id}/{getattr(output, 'index', i)}",
                  "terminated": ended[0], "truncated": ended[1],
                  "policy_version": policy_version,
                  "group_id": request_id if group_id is None else group_id}
        try:
            validate_step(record, model)
        except ContractError as err:
            problems += [p.under(where) for p in err.problems]
            continue
        records.append(record)
    if problems:
        raise ContractError(problems)
    return records


def _logprobs(logprobs: Any, action: list[int], where: str,
              problems: list[Problem]) -> list[float] | None:
    """The sampled token's log-prob at each position of one completion, or None (a problem
    says why: none returned, or not one per token with the sampled token in it)."""
    if logprobs is None:
        problems.append(Problem(
            f"{where}.logprobs", "one {token_id: Logprob} per generated token", "None",
            "vLLM returned no log-probs: sample with SamplingParams(logprobs=0); a log-prob is "
            "never filled in"))
        return None
    try:
        chosen = chosen_logprobs(f"{where}.logprobs", list(logprobs), action)
    except ContractError as err:
        problems += err.problems
        return None
    return [float(x) for x in np.asarray(chosen, dtype=np.float64).tolist()]


def _attr(obj: Any, name: str) -> Any:
    """A field every RequestOutput / CompletionOutput has; its absence is not vLLM's shape."""
    if not hasattr(obj, name):
        raise TypeError(f"from_vllm reads a vLLM RequestOutput (request_id, prompt_token_ids, "
                        f"outputs[i].token_ids, .logprobs, .finish_reason); "
                        f"{type(obj).__name__} has no {name}")
    return getattr(obj, name)


def _ids(token_ids: Any) -> list[int]:
    """Token ids (a list, an `array('l')`, a numpy array) as plain ints."""
    return np.asarray(token_ids, dtype=np.int64).reshape(-1).tolist()


def chosen_logprobs(name: str, value: Any, action: Any) -> Any:
    """Per-position log-probs as an inference engine returns them — a list of dicts
    `{token_id: logprob}` or `{token_id: Logprob(logprob=..., rank=..., decoded_token=...)}`, one
    per generated token (vLLM's `CompletionOutput.logprobs`) — as the generated tokens'
    log-probs, float32 `[A]`; anything else is returned as it is. The engine is never
    imported: an object with a `logprob` attribute, or a number, is read. A position without
    the generated token, a position that is not a dict, or a count that differs from the
    action's is a ContractError naming `name` and the position."""
    if not isinstance(value, (list, tuple)) or not any(isinstance(v, Mapping) for v in value):
        return value
    ids = np.asarray(action).reshape(-1).tolist()
    if len(value) != len(ids):
        raise ContractError(Problem(name, f"{len(ids)} positions (one per generated token)",
                                    f"{len(value)} positions", "per-position log-probs do not "
                                    "match the generated tokens"))
    out = np.empty(len(ids), np.float32)
    for i, (position, token) in enumerate(zip(value, ids)):
        if not isinstance(position, Mapping):
            raise ContractError(Problem(f"{name}[{i}]", "a dict {token_id: logprob} at every "
                                        "position", describe(position),
                                        "per-position log-probs mix dicts and other values"))
        entry = position.get(token, position.get(str(token)))
        number = getattr(entry, "logprob", entry)
        if entry is None or isinstance(number, bool) or \
                not isinstance(number, (int, float, np.integer, np.floating)):
            keys = ", ".join(sorted(map(str, position))[:5])
            got = f"token ids [{keys}]" if entry is None else describe(entry)
            raise ContractError(Problem(f"{name}[{i}]", f"the log-prob of the generated token "
                                        f"{token}", got, "no log-prob for the generated token"))
        out[i] = number
    return out
