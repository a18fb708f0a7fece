"""Stages 2 and 3 with a map of token rows (`"rows": "step"`): TokenBatch, staleness, groups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gyre_contract.core._errors import ContractError
from gyre_contract.core._validate import validate_step
from gyre_contract.harness._stages import full_loop, half_way
from gyre_contract.io._writer import write_steps
from gyre_contract.pinned import LLMStep
from gyre_contract.trainer._rowstats import group_split_warnings

TOKEN_MAP: dict[str, Any] = {"gyre_field_map": 1, "rows": "step", "fields": {
    **{k: {"from": k} for k in ("prompt_ids", "prompt_mask", "response_ids", "response_mask",
                                "response_length", "logprob", "reward", "episode_id",
                                "policy_version", "step")},
    "advantage": {"from": "reward"}}}


def completions(version: int, groups: int = 2, per_group: int = 3, seed: int = 0,
                prefix: str = "") -> list[dict[str, Any]]:
    """Single-turn completions: `per_group` samples of each of `groups` prompts."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(groups):
        prompt = rng.integers(1, 100, int(rng.integers(2, 6))).tolist()
        for k in range(per_group):
            n = int(rng.integers(1, 6))
            out.append({"observation": {"token_ids": prompt}, "action": rng.integers(1, 100, n).tolist(),
                        "logprob": (-rng.random(n)).tolist(), "reward": float(k % 2), "step": 0,
                        "episode_id": f"{prefix}g{g}/{k}", "terminated": True,
                        "truncated": False, "policy_version": version})
    return out


def test_half_way_builds_a_token_batch_from_a_file(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    records = completions(4) + [dict(r, episode_id=r["episode_id"] + "-old", policy_version=3)
                                for r in completions(3, groups=1, seed=1)]
    write_steps(path, [validate_step(r, LLMStep) for r in records])
    report = half_way(path, TOKEN_MAP, lambda batch: float(batch["logprob"].sum()),
                      max_staleness=1)
    assert report.rows == 9 and report.steps == 9 and report.episodes == 9
    assert report.tokens is not None and report.tokens.staleness == (0,) * 6 + (1,) * 3
    assert report.tokens.loss_tokens == int(report.batch["response_mask"].sum())
    data = report.to_dict()
    assert data["tokens"]["staleness"] == [0] * 6 + [1] * 3
    assert "a valid TokenBatch" in report.to_text() and "1: 3 rows" in report.to_text()
    assert report.warnings == []
    with pytest.raises(ContractError, match=r"stale policy version.*'g0/0-old'"):
        half_way(path, TOKEN_MAP, max_staleness=0)


def test_a_group_with_fewer_rows_than_the_others_is_a_warning(tmp_path):
    records = completions(2, groups=3, per_group=4)
    records = [r for r in records if r["episode_id"] not in ("g1/3", "g2/2", "g2/3")]
    for r in records:
        r["group_id"] = r["episode_id"].split("/")[0]
    fmap = {**TOKEN_MAP, "fields": {**TOKEN_MAP["fields"], "group_id": {"from": "group_id"}}}
    report = half_way([validate_step(r, LLMStep) for r in records], fmap)
    [warning] = report.warnings
    assert "2 of 3 groups have fewer rows than the largest (4): 'g1' (3), 'g2' (2)" in warning
    assert report.exit_code() == 0 and report.exit_code(strict=True) == 1


def test_group_split_warnings_only_when_counts_differ():
    assert group_split_warnings(np.array(["a", "b", "a", "b"])) == []
    assert group_split_warnings(np.array([], dtype=str)) == []
    assert "'b' (1)" in group_split_warnings(np.array(["a", "b", "a"]))[0]


def test_full_loop_on_token_rows_reports_the_staleness_of_every_row():
    def sample(version: int) -> list[dict[str, Any]]:
        # the policy lags: every cycle after the first brings one group of the previous version
        fresh = completions(version, groups=1, seed=version, prefix=f"c{version}-")
        old = completions(max(version - 1, 0), groups=1, seed=99 + version, prefix=f"c{version}-old-")
        return fresh + old

    report = full_loop(sample, lambda batch: {"loss": float(batch["logprob"].sum())}, TOKEN_MAP,
                       cycles=3, max_staleness=1)
    assert [c.batch_shape[0] for c in report.cycles] == [6, 6, 6]
    assert [c.tokens.staleness for c in report.cycles] == [(0,) * 6, (0,) * 3 + (1,) * 3,
                                                          (0,) * 3 + (1,) * 3]
    assert report.cycles[1].to_dict()["tokens"]["staleness"] == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ContractError, match=r"cycles\[1\].*stale policy version.*'c1-old-g0/0'"):
        full_loop(sample, lambda batch: None, TOKEN_MAP, cycles=2, max_staleness=0)


def test_token_rows_against_a_trainer_schema_of_flat_rows():
    """A trainer schema with batch dims [B] (ours, or a token trainer's) takes token rows as
    they are: every row is a real step, no mask selects them."""
    schema = Path(__file__).resolve().parents[2] / "schemas" / "token_batch.v1.json"
    report = half_way(completions(3), TOKEN_MAP, trainer=schema)
    assert report.trainer is not None and report.batch["response_ids"].shape[0] == 6
    loop = full_loop(lambda v: completions(v, prefix=f"{v}-"), lambda batch: None, TOKEN_MAP,
                     cycles=2, trainer=schema)
    assert loop.cycles[1].tokens.staleness == (0,) * 6 and loop.cycles[1].batch_shape[0] == 6


def test_staleness_is_checked_when_the_trainer_reads_no_policy_version(tmp_path):
    """The written verl/TRL/OpenRLHF maps carry no policy_version: `max_staleness` still refuses
    stale rows (from the steps' own versions) and the report gives every row's staleness."""
    maps = Path(__file__).resolve().parents[1] / "data"
    path = tmp_path / "rollouts.jsonl"
    records = [dict(r, group_id=r["episode_id"].split("/")[0], ref_logprob=r["logprob"])
               for r in completions(4) + completions(3, groups=1, seed=1, prefix="old-")]
    write_steps(path, [validate_step(r, LLMStep) for r in records])
    fmap, trainer = maps / "maps" / "llm_trl_grpo_map.json", maps / "peers" / "trl_grpo.json"
    report = half_way(path, fmap, trainer=trainer, max_staleness=1)
    assert "policy_version" not in report.batch
    assert report.tokens is not None and report.tokens.staleness == (0,) * 6 + (1,) * 3
    with pytest.raises(ContractError, match=r"stale policy version.*'old-g0/0'"):
        half_way(path, fmap, trainer=trainer, max_staleness=0)
    loop = full_loop(lambda v: [r for r in records if r["policy_version"] <= v], lambda b: None,
                     fmap, cycles=1, start_version=4, trainer=trainer, max_staleness=1)
    assert loop.cycles[0].tokens.staleness == (0,) * 6 + (1,) * 3
    with pytest.raises(ContractError, match=r"cycles\[0\].*stale policy version.*'old-g0/0'"):
        full_loop(lambda v: records, lambda b: None, fmap, cycles=1, start_version=4,
                  trainer=trainer, max_staleness=0)


PACKED_MAP: dict[str, Any] = {
    "gyre_field_map": 1, "rows": "step", "layout": "packed", "token_budget": 16, "fields": {
        **{k: {"from": k} for k in ("input_ids", "position_ids", "pad_mask", "sample_index",
                                    "episode_id", "policy_version")},
        "loss_mask": {"from": "response_mask"}, "logprobs": {"from": "logprob"},
        "advantages": {"from": "reward", "then": [{"op": "per_token"}]}}}


def test_half_way_and_full_loop_get_packed_rows_from_the_layout(tmp_path):
    """The stages ask the map's layout: the packed batch `FieldMap.batch` builds, its rows and
    fill in the report, every sample's staleness."""
    from gyre_contract.trainer._fieldmap import FieldMap

    records = completions(4) + completions(3, groups=1, seed=1, prefix="old-")
    report = half_way(records, PACKED_MAP, max_staleness=1)
    expected = FieldMap.from_dict(PACKED_MAP).batch(records)
    assert sorted(report.batch) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(report.batch[key], value, err_msg=key)
    assert report.rows == len(records) and report.batch["input_ids"].shape[1] == 16
    tokens = report.tokens
    assert tokens is not None and tokens.staleness == (0,) * 6 + (1,) * 3
    assert tokens.to_dict()["tokens"] == int(expected["pad_mask"].sum())
    assert "a valid PackedBatch" in report.to_text()
    assert f"packed rows: M={expected['input_ids'].shape[0]} of S=16 tokens hold 9 samples" in \
        report.to_text()

    seen: list[tuple[int, ...]] = []
    loop = full_loop(lambda v: completions(v, prefix=f"{v}-"),
                     lambda batch: seen.append(batch["input_ids"].shape), PACKED_MAP, cycles=2)
    assert [c.batch_shape[1] for c in loop.cycles] == [16, 16]
    assert [c.batch_shape for c in loop.cycles] == seen
    assert loop.cycles[1].tokens.staleness == (0,) * 6
