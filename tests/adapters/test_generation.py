"""`from_vllm`: a vLLM `RequestOutput` as step records, one per completion.

vLLM is not installed here and never imported: the objects below have the fields of vLLM's own
(`vllm.outputs.RequestOutput`, `CompletionOutput`, `vllm.logprobs.Logprob`), with the values
`LLM.generate(prompts, SamplingParams(n=2, logprobs=1))` gives: per generated position a dict
`{token_id: Logprob}` holding the sampled token and the top-1 token.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from gyre_contract.adapters import from_vllm
from gyre_contract.core._errors import ContractError
from gyre_contract.trainer import FieldMap


@dataclass
class Logprob:  # vllm.logprobs.Logprob
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:  # vllm.outputs.CompletionOutput
    index: int
    text: str
    token_ids: Sequence[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    lora_request: Any = None


@dataclass
class RequestOutput:  # vllm.outputs.RequestOutput
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool
    metrics: Any = None
    lora_request: Any = None
    encoder_prompt: str | None = None
    encoder_prompt_token_ids: list[int] | None = None
    num_cached_tokens: int | None = None
    multi_modal_placeholders: dict[str, Any] = field(default_factory=dict)


def completion(index: int, tokens: Sequence[int], chosen: Sequence[float], reason: str | None,
               *, logprobs: bool = True) -> CompletionOutput:
    """A completion whose position t sampled `tokens[t]` with log-prob `chosen[t]`; token 999 is
    the top-1 alternative at every position (rank 1), as vLLM adds it with logprobs=1."""
    positions = [{tok: Logprob(lp, rank=2, decoded_token=f"<{tok}>"),
                  999: Logprob(-0.01, rank=1, decoded_token="<999>")}
                 for tok, lp in zip(tokens, chosen)]
    return CompletionOutput(index, "text", tokens, float(sum(chosen)),
                            positions if logprobs else None, reason,
                            None if reason != "stop" else 2)


def request(*outputs: CompletionOutput, prompt_ids: list[int] | None = (5, 6, 7)) -> RequestOutput:
    ids = None if prompt_ids is None else list(prompt_ids)
    return RequestOutput("req-7", "2+2=", ids, None, list(outputs), finished=True)


def test_one_record_per_completion_with_the_sampled_tokens_logprobs() -> None:
    out = request(completion(0, [52, 2], [-0.5, -0.25], "stop"),
                  completion(1, array("l", [53, 54, 55]), [-1.0, -2.0, -0.125], "length"))
    records = from_vllm(out, rewards=[1.0, 0.0], policy_version=3)
    assert [r["episode_id"] for r in records] == ["req-7/0", "req-7/1"]
    assert [r["group_id"] for r in records] == ["req-7", "req-7"]
    assert [(r["terminated"], r["truncated"]) for r in records] == [(True, False), (False, True)]
    assert records[0]["observation"] == {"token_ids": [5, 6, 7], "text": "2+2="}
    assert records[1]["action"] == [53, 54, 55]
    assert records[1]["logprob"] == [-1.0, -2.0, -0.125]  # the sampled token's, never the top-1
    assert [r["reward"] for r in records] == [1.0, 0.0]
    assert all(r["policy_version"] == 3 and r["step"] == 0 for r in records)
    assert "vllm" not in sys.modules


def test_a_given_group_id_and_the_records_make_a_token_batch() -> None:
    out = request(completion(0, [52, 2], [-0.5, -0.25], "stop"),
                  completion(1, [53], [-1.0], "stop"))
    records = from_vllm(out, rewards=np.array([1.0, 0.0]), policy_version=0, group_id="p0")
    assert {r["group_id"] for r in records} == {"p0"}
    fmap = FieldMap.from_dict({"gyre_field_map": 1, "rows": "step", "fields": {
        k: {"from": k} for k in ("prompt_ids", "prompt_mask", "response_ids", "response_mask",
                                 "response_length", "logprob", "reward", "episode_id",
                                 "policy_version", "group_id", "step")} | {
        "advantage": {"op": "group_norm", "from": ["reward", "group_id"]}}})
    batch = fmap.batch(records)
    assert batch["response_ids"].tolist() == [[52, 2], [53, 0]]
    np.testing.assert_array_equal(batch["logprob"], np.array([[-0.5, -0.25], [-1.0, 0.0]],
                                                             np.float32))
    assert batch["advantage"][0] > 0 > batch["advantage"][1]


def test_a_completion_without_logprobs_is_an_error_naming_the_field_never_zeros() -> None:
    out = request(completion(0, [52], [-0.5], "stop"),
                  completion(1, [53, 54], [-1.0, -1.0], "stop", logprobs=False))
    with pytest.raises(ContractError) as err:
        from_vllm(out, rewards=[1.0, 0.0], policy_version=0)
    (problem,) = err.value.problems
    assert problem.path == "outputs[1].logprobs" and "SamplingParams(logprobs=0)" in str(problem)


def test_every_problem_at_once() -> None:
    missing = completion(1, [53, 54], [-1.0, -1.0], "stop")
    missing.logprobs[1] = {999: Logprob(-0.01, rank=1)}  # the sampled 54 is not there
    out = request(completion(0, [52], [-0.5], None), missing,
                  completion(2, [55], [0.5], "abort"), prompt_ids=None)
    with pytest.raises(ContractError) as err:
        from_vllm(out, rewards=[1.0], policy_version=0)
    paths = [p.path for p in err.value.problems]
    assert paths == ["rewards", "prompt_token_ids", "outputs[0].finish_reason",
                     "outputs[1].logprobs[1]", "outputs[2].finish_reason"]
    assert "the log-prob of the generated token 54" in str(err.value)


def test_the_records_are_validated_as_llm_steps() -> None:
    out = request(completion(0, [52], [0.5], "stop"))  # a positive log-prob
    with pytest.raises(ContractError, match=r"outputs\[0\]\.logprob"):
        from_vllm(out, rewards=[1.0], policy_version=0)
    short = completion(0, [52, 53], [-0.5, -0.5], "stop")
    short.logprobs = short.logprobs[:1]
    with pytest.raises(ContractError, match=r"outputs\[0\]\.logprobs: .*2 positions"):
        from_vllm(request(short), rewards=[1.0], policy_version=0)


def test_an_object_not_shaped_like_vllms_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="dict has no request_id"):
        from_vllm({"outputs": []}, rewards=[], policy_version=0)
