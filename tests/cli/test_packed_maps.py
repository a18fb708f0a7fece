"""`gyre-contract batch` with a packed map (`"layout": "packed"`, `token_budget`): the packed
batch written, its report, and a sample that does not fit refused naming it."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from gyre_contract.cli._app import run
from gyre_contract.io._writer import write_steps

MODEL = "gyre_contract.pinned:LLMStep"
PACKED_MAP: dict[str, Any] = {
    "gyre_field_map": 1, "rows": "step", "layout": "packed", "token_budget": 8, "fields": {
        **{k: {"from": k} for k in ("input_ids", "position_ids", "pad_mask", "sample_index",
                                    "episode_id", "policy_version")},
        "loss_mask": {"from": "response_mask"}, "logprobs": {"from": "logprob"},
        "advantages": {"op": "group_norm", "from": ["reward", "group_id"],
                       "then": [{"op": "per_token"}]}}}


def records() -> list[dict[str, Any]]:
    """Two prompts, two completions each: 5, 7, 2 and 4 tokens (prompt + response)."""
    rows = [("a", [5, 6, 7], [50, 51], 1.0, "p"), ("b", [5, 6, 7], [52, 53, 54, 55], 0.0, "p"),
            ("c", [8], [56], 0.5, "q"), ("d", [8], [57, 58, 59], 0.0, "q")]
    return [{"observation": {"token_ids": prompt}, "action": action,
             "logprob": [-0.5] * len(action), "reward": reward, "step": 0, "episode_id": eid,
             "terminated": True, "truncated": False, "policy_version": 1, "group_id": group}
            for eid, prompt, action, reward, group in rows]


def batch(tmp_path: Path, fmap: dict[str, Any], *args: str) -> tuple[int, str, str]:
    rollouts = tmp_path / "rollouts.jsonl"
    write_steps(rollouts, records())
    map_path = tmp_path / "map.json"
    map_path.write_text(json.dumps(fmap))
    out, err = io.StringIO(), io.StringIO()
    code = run(["batch", str(rollouts), "--map", str(map_path), "--model", MODEL, *args],
               stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_batch_writes_the_packed_batch(tmp_path):
    target = tmp_path / "batch.npz"
    code, out, err = batch(tmp_path, PACKED_MAP, "-o", str(target), "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["tokens"] == {"samples": 4, "rows": 3, "token_budget": 8, "tokens": 18,
                                "fill": 0.75, "current_version": 1, "staleness": [0] * 4,
                                "warnings": []}
    with np.load(target, allow_pickle=False) as data:
        assert data["input_ids"].shape == (3, 8)
        assert data["sample_index"][1].tolist() == [0, 0, 0, 0, 0, 2, 2, -1]
        assert data["episode_id"].tolist() == ["a", "b", "c", "d"]
    code, text, _ = batch(tmp_path, PACKED_MAP)
    assert code == 0 and "the batch is a valid PackedBatch" in text
    assert "packed rows: M=3 of S=8 tokens hold 4 samples, 18 tokens (75.0% filled)" in text


def test_a_sample_longer_than_the_budget_is_exit_1_naming_it(tmp_path):
    target = tmp_path / "batch.npz"
    code, out, err = batch(tmp_path, {**PACKED_MAP, "token_budget": 6}, "-o", str(target))
    assert code == 1 and not target.exists()
    assert "line 2: steps[1]: episode 'b' step 0: a sample (prompt + response) of 7 tokens does " \
        "not fit the token budget S = 6; a sample is never split" in err
    assert "got 7 tokens (3 + 4)" in err


def test_a_packed_map_reading_the_prompt_is_exit_2(tmp_path):
    bad = {**PACKED_MAP, "fields": {**PACKED_MAP["fields"], "prompt": {"from": "prompt_ids"}}}
    code, _, err = batch(tmp_path, bad)
    assert code == 2 and "fields.prompt: reads ['prompt_ids']" in err


# -- prime-rl: diff --write-map, then batch --trainer ---------------------------------------------

PEERS = Path(__file__).resolve().parents[2] / "tests" / "data" / "peers"


def first_fit_decreasing(lengths: list[int], budget: int) -> list[list[int]]:
    """The samples of each micro-batch row, in placement order, in plain Python."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):  # stable: ties in order
        at = next((r for r in range(len(rows)) if room[r] >= lengths[i]), None)
        if at is None:
            rows.append([])
            room.append(budget)
            at = len(rows) - 1
        rows[at].append(i)
        room[at] -= lengths[i]
    return rows


def test_prime_rl_gets_its_micro_batches(tmp_path):
    """The map `diff` writes for prime-rl's micro-batch runs through `batch --trainer`: every
    sample end to end in rows of 64 tokens as first-fit-decreasing places them (computed here),
    positions restarting per sample, advantages and log-probs on the completion tokens."""
    from gyre_contract.pinned import LLMStep
    from gyre_contract.schema import json_schema

    rows = records() * 5  # 20 samples of 2..7 tokens: rows of 64 hold several
    rows = [dict(r, episode_id=f"{r['episode_id']}{i}", group_id=f"{r['group_id']}{i % 2}",
                 loss_mask=[k != 1 for k in range(len(r["action"]))])
            for i, r in enumerate(rows)]
    rollouts, step, map_path, npz = (tmp_path / n for n in
                                     ("r.jsonl", "step.json", "map.json", "b.npz"))
    write_steps(rollouts, rows)
    step.write_text(json.dumps(json_schema(LLMStep)))
    trainer = str(PEERS / "prime_rl_micro_batch.json")
    out, err = io.StringIO(), io.StringIO()
    assert run(["diff", str(step), trainer, "--write-map", str(map_path)], out, err) == 0
    out, err = io.StringIO(), io.StringIO()
    code = run(["batch", str(rollouts), "--map", str(map_path), "--trainer", trainer,
                "--model", MODEL, "-o", str(npz)], stdout=out, stderr=err)
    assert code == 0, err.getvalue() + out.getvalue()
    with np.load(npz, allow_pickle=False) as data:
        b = {k: data[k] for k in data.files}
    assert sorted(b) == ["advantages", "inference_logprobs", "input_ids", "loss_mask",
                         "position_ids"]
    lengths = [len(r["observation"]["token_ids"]) + len(r["action"]) for r in rows]
    packed = first_fit_decreasing(lengths, 64)
    ids, pos, loss = [], [], []
    for samples in packed:
        row_ids, row_pos, row_loss = [], [], []
        for i in samples:
            prompt, action = rows[i]["observation"]["token_ids"], rows[i]["action"]
            row_ids += prompt + action
            row_pos += list(range(len(prompt) + len(action)))
            row_loss += [False] * len(prompt) + rows[i]["loss_mask"]
        tail = 64 - len(row_ids)
        ids.append(row_ids + [0] * tail)
        pos.append(row_pos + list(range(tail)))
        loss.append(row_loss + [False] * tail)
    assert b["input_ids"].tolist() == ids
    assert b["position_ids"].tolist() == pos
    assert b["loss_mask"].tolist() == loss
    assert (b["inference_logprobs"] == -0.5).sum() == sum(len(r["action"]) for r in rows)
    assert not b["advantages"][~b["loss_mask"]].any()
