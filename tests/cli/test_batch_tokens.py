"""`gyre-contract batch --map` with a token map (`"rows": "step"`) on a file of LLM steps."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from gyre_contract.cli._app import run
from gyre_contract.core._validate import validate_step
from gyre_contract.io._writer import write_steps
from gyre_contract.pinned import LLMStep

FIELDS = ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "response_length",
          "logprob", "reward", "episode_id", "policy_version", "step")
TOKEN_MAP = {"gyre_field_map": 1, "rows": "step",
             "fields": {**{k: {"from": k} for k in FIELDS}, "advantage": {"from": "reward"}}}


def llm_records() -> list[dict[str, Any]]:
    """Two single-turn completions of one prompt, then a 3-turn conversation one version older
    whose second turn splices in tool output (loss_mask False on it)."""
    records = [{"observation": {"token_ids": [5, 6, 7], "text": "2+2="}, "action": action,
                "logprob": [-0.25] * len(action), "reward": reward, "step": 0,
                "episode_id": f"p0/{i}", "terminated": True, "truncated": False,
                "policy_version": 3}
               for i, (action, reward) in enumerate([([52], 1.0), ([53, 54, 2], 0.0)])]
    turns = [([1, 2], [10, 11], None), ([1, 2, 10, 11, 3], [12, 90, 91, 13],
                                        [True, False, False, True]), ([4], [14], None)]
    for t, (prompt, action, mask) in enumerate(turns):
        record = {"observation": {"token_ids": prompt}, "action": action,
                  "logprob": [-0.5] * len(action), "reward": 1.0 if t == 2 else 0.0, "step": t,
                  "episode_id": "chat", "terminated": t == 2, "truncated": False,
                  "policy_version": 2}
        if mask is not None:
            record["loss_mask"] = mask
        records.append(record)
    return records


def batch(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    rollouts = tmp_path / "llm.jsonl"
    write_steps(rollouts, [validate_step(r, LLMStep) for r in llm_records()])
    map_path = tmp_path / "map.json"
    map_path.write_text(json.dumps(TOKEN_MAP))
    out, err = io.StringIO(), io.StringIO()
    code = run(["batch", str(rollouts), "--map", str(map_path), *args], out, err)
    return code, out.getvalue(), err.getvalue()


def test_batch_writes_a_token_batch(tmp_path):
    target = tmp_path / "batch.npz"
    code, out, err = batch(tmp_path, "-o", str(target), "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["rows"] == 5 and report["output"] == str(target)
    assert report["fields"]["response_ids"]["shape"] == [5, 4]
    assert report["tokens"]["staleness"] == [0, 0, 1, 1, 1]
    with np.load(target, allow_pickle=False) as data:
        assert data["prompt_ids"].tolist()[0] == [0, 0, 5, 6, 7]         # left-padded
        assert data["response_ids"].tolist()[1] == [53, 54, 2, 0]         # right-padded
        assert data["response_length"].tolist() == [1, 3, 2, 4, 1]
        assert data["episode_id"].tolist() == ["p0/0", "p0/1", "chat", "chat", "chat"]
        assert data["step"].tolist() == [0, 0, 0, 1, 2]
        assert data["response_ids"][3].tolist() == [12, 90, 91, 13]      # tool tokens kept
        assert data["response_mask"].tolist() == [
            [True, False, False, False], [True, True, True, False], [True, True, False, False],
            [True, False, False, True], [True, False, False, False]]        # ... out of the loss


def test_batch_text_and_staleness(tmp_path):
    code, out, _ = batch(tmp_path)
    assert code == 0
    assert "the batch is a valid TokenBatch" in out
    assert "staleness (current 3 - row version): 0: 2 rows, 1: 3 rows" in out
    code, out, err = batch(tmp_path, "--max-staleness", "0")
    assert code == 1
    assert "policy_version[2]: stale policy version" in err + out and "'chat'" in err + out


def test_max_len_is_a_usage_error_with_token_rows(tmp_path):
    code, _, err = batch(tmp_path, "--max-len", "4")
    assert code == 2 and "one row per step" in err


def test_a_grpo_map_on_v1_1_records_warns_of_a_split_group(tmp_path):
    """ref_logprob, group_id and loss_mask from the file; a group with fewer rows is a warning."""
    records = []
    for g, n in (("q0", 3), ("q1", 2)):  # q1 lost a sample: split across batches
        for k in range(n):
            action = [60 + k] * (k + 2)
            records.append({"observation": {"token_ids": [7, 8]}, "action": action,
                            "logprob": [-0.4] * len(action), "ref_logprob": [-0.5] * len(action),
                            "loss_mask": [True] * len(action), "group_id": g,
                            "reward": float(k), "step": 0, "episode_id": f"{g}/{k}",
                            "terminated": True, "truncated": False, "policy_version": 1})
    rollouts = tmp_path / "grpo.jsonl"
    write_steps(rollouts, [validate_step(r, LLMStep) for r in records])
    fields = {k: {"from": k} for k in (*FIELDS, "ref_logprob", "group_id")}
    fields["advantage"] = {"op": "group_norm", "from": ["reward", "group_id"],
                           "then": [{"op": "per_token"}]}
    map_path = tmp_path / "grpo_map.json"
    map_path.write_text(json.dumps({"gyre_field_map": 1, "rows": "step", "fields": fields}))
    target = tmp_path / "grpo.npz"
    out, err = io.StringIO(), io.StringIO()
    code = run(["batch", str(rollouts), "--map", str(map_path), "-o", str(target),
                "--format", "json"], out, err)
    assert code == 0, err.getvalue()
    [warning] = json.loads(out.getvalue())["tokens"]["warnings"]
    assert "1 of 2 groups have fewer rows than the largest (3): 'q1' (2)" in warning
    with np.load(target, allow_pickle=False) as data:
        assert data["group_id"].tolist() == ["q0"] * 3 + ["q1"] * 2
        assert data["ref_logprob"].shape == data["response_mask"].shape == (5, 4)
        assert np.allclose(data["advantage"][:3, 0], [-1.0, 0.0, 1.0], atol=1e-5)
    out = io.StringIO()
    assert run(["batch", str(rollouts), "--map", str(map_path)], out, io.StringIO()) == 0
    assert "warning: 1 of 2 groups have fewer rows" in out.getvalue()
