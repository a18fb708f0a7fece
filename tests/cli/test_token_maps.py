"""End to end for LLM trainers: LLM step records → the map `diff` writes → `gyre-contract batch
--trainer` → the arrays verl, TRL GRPO and OpenRLHF read, under their own keys.

The expected arrays are computed here, row by row in plain Python, from the records themselves
(not from the package's collation or ops): padding sides, the concatenated sequence, its
attention mask and positions, the loss mask, and each trainer's group-normalised advantage.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

from gyre_contract.cli._app import run
from gyre_contract.io._writer import write_steps
from gyre_contract.pinned import LLMStep
from gyre_contract.schema import diff, json_schema

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tests" / "data" / "peers"
MAPS = ROOT / "tests" / "data" / "maps"
MODEL = "gyre_contract.pinned:LLMStep"
PROMPTS = {"p0": [5, 6, 7], "p1": [8, 9], "p2": [4, 5, 6, 7]}
LENGTHS = {"p0": [2, 4, 3, 1], "p1": [3, 3, 2, 5], "p2": [1, 2, 6, 2]}
REWARDS = {"p0": [1.0, 0.0, 0.5, 1.0], "p1": [0.0, 0.0, 1.0, 0.25], "p2": [0.75, 0.75, 0.75, 0.0]}


def records() -> list[dict]:
    """GRPO rollouts: 3 prompts x 4 completions, each completion a one-step episode with its
    per-token log-probs, reference log-probs, a loss mask (one spliced token left out) and its
    group; written in the order a sampler finishes them (groups interleaved)."""
    out = []
    for k in range(4):
        for g, prompt in PROMPTS.items():
            n = LENGTHS[g][k]
            tokens = [10 + (7 * k + i) % 20 for i in range(n)]
            out.append({
                "observation": {"token_ids": prompt, "text": g},
                "action": tokens,
                "logprob": [-0.125 * (i + 1) - 0.0625 * k for i in range(n)],
                "ref_logprob": [-0.25 * (i + 1) for i in range(n)],
                "loss_mask": [not (n >= 3 and i == 1) for i in range(n)],
                "token_reward": [0.0625 * i for i in range(n)],
                "reward": REWARDS[g][k], "return": REWARDS[g][k], "step": 0,
                "episode_id": f"{g}-{k}",
                "terminated": True, "truncated": False, "policy_version": 2,
                "group_id": g})
    return out


def group_norm(rows: list[dict], eps: float) -> list[float]:
    """(r - group mean) / (group std + eps), the unbiased std, in plain Python."""
    by_group: dict[str, list[float]] = {}
    for r in rows:
        by_group.setdefault(r["group_id"], []).append(r["reward"])
    out = []
    for r in rows:
        xs = by_group[r["group_id"]]
        mean = sum(xs) / len(xs)
        std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
        out.append((r["reward"] - mean) / (std + eps))
    return out


def left(values: list, width: int, pad=0) -> list:
    return [pad] * (width - len(values)) + list(values)


def right(values: list, width: int, pad=0) -> list:
    return list(values) + [pad] * (width - len(values))


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("llm") / "grpo.jsonl"
    write_steps(path, records())
    return path


def batch(trainer: str, rollouts: Path, tmp_path: Path, map_path: Path | None = None
          ) -> dict[str, np.ndarray]:
    """`gyre-contract diff` writes the map (or `map_path` is given), `batch --trainer` runs it."""
    schema = PEERS / f"{trainer}.json"
    if map_path is None:
        step = tmp_path / "llm_step.json"
        step.write_text(json.dumps(json_schema(LLMStep)))
        map_path = tmp_path / "map.json"
        out, err = io.StringIO(), io.StringIO()
        code = run(["diff", str(step), str(schema), "--write-map", str(map_path)], out, err)
        assert code == 0, out.getvalue()
        assert json.loads(map_path.read_text()) == diff(LLMStep, schema).field_map() | {
            "comment": json.loads(map_path.read_text())["comment"]}
    npz = tmp_path / "batch.npz"
    out, err = io.StringIO(), io.StringIO()
    code = run(["batch", str(rollouts), "--map", str(map_path), "--trainer", str(schema),
                "--model", MODEL, "-o", str(npz)], stdout=out, stderr=err)
    assert code == 0, err.getvalue() + out.getvalue()
    with np.load(npz, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


ROWS = records()  # collate_tokens keeps file order: one row per step
P = max(len(r["observation"]["token_ids"]) for r in ROWS)
R = max(len(r["action"]) for r in ROWS)


def expected_response_mask() -> list[list[int]]:
    return [right([int(m) for m in r["loss_mask"]], R) for r in ROWS]


def expected_sequence() -> tuple[list, list, list]:
    ids, mask, pos = [], [], []
    for r in ROWS:
        prompt, action = r["observation"]["token_ids"], r["action"]
        ids.append(left(prompt, P) + right(action, R))
        m = left([1] * len(prompt), P) + right([1] * len(action), R)
        mask.append(m)
        run_sum = np.cumsum(m) - 1
        pos.append([max(int(v), 0) for v in run_sum])
    return ids, mask, pos


@pytest.mark.parametrize("trainer", ["verl_actor_batch", "trl_grpo", "openrlhf_experience"])
def test_the_written_map_is_the_hand_checked_one_and_runs(trainer, rollouts, tmp_path) -> None:
    name = {"verl_actor_batch": "llm_verl_map.json", "trl_grpo": "llm_trl_grpo_map.json",
            "openrlhf_experience": "llm_openrlhf_map.json"}[trainer]
    by_hand = batch(trainer, rollouts, tmp_path, MAPS / name)
    written = batch(trainer, rollouts, tmp_path)
    assert sorted(by_hand) == sorted(written)
    for key in by_hand:
        np.testing.assert_array_equal(by_hand[key], written[key], err_msg=key)
    schema = json.loads((PEERS / f"{trainer}.json").read_text())
    assert set(schema["required"]) <= set(written)


def test_verl_gets_its_batch(rollouts, tmp_path) -> None:
    b = batch("verl_actor_batch", rollouts, tmp_path)
    ids, mask, pos = expected_sequence()
    np.testing.assert_array_equal(b["input_ids"], ids)
    np.testing.assert_array_equal(b["attention_mask"], mask)
    assert b["attention_mask"].dtype == np.int64
    np.testing.assert_array_equal(b["position_ids"], pos)
    np.testing.assert_array_equal(b["prompts"],
                                  [left(r["observation"]["token_ids"], P) for r in ROWS])
    np.testing.assert_array_equal(b["responses"], [right(r["action"], R) for r in ROWS])
    np.testing.assert_array_equal(b["response_mask"], expected_response_mask())
    np.testing.assert_allclose(b["old_log_probs"], [right(r["logprob"], R, 0.0) for r in ROWS])
    np.testing.assert_allclose(b["ref_log_prob"],
                               [right(r["ref_logprob"], R, 0.0) for r in ROWS])
    assert b["uid"].tolist() == [r["group_id"] for r in ROWS]
    # no KL in the reward: the sequence reward on the last response token
    np.testing.assert_allclose(b["token_level_rewards"], [
        right([0.0] * (len(r["action"]) - 1) + [r["reward"]], R, 0.0) for r in ROWS])
    adv = group_norm(ROWS, 1e-6)  # verl: scores * response_mask (the loss mask included)
    want = [[a * m for m in mask] for a, mask in zip(adv, expected_response_mask())]
    np.testing.assert_allclose(b["advantages"], want, rtol=1e-5, atol=1e-6)


def test_trl_gets_one_advantage_per_completion(rollouts, tmp_path) -> None:
    b = batch("trl_grpo", rollouts, tmp_path)
    np.testing.assert_array_equal(b["prompt_ids"],
                                  [left(r["observation"]["token_ids"], P) for r in ROWS])
    np.testing.assert_array_equal(
        b["prompt_mask"], [left([1] * len(r["observation"]["token_ids"]), P) for r in ROWS])
    np.testing.assert_array_equal(b["completion_ids"], [right(r["action"], R) for r in ROWS])
    # TRL's completion_mask is also its attention mask: 1 on every real token, spliced tool
    # output included; the tool tokens leave the loss through tool_mask (completion_mask *
    # tool_mask), as TRL's own multi-turn tool handling does
    np.testing.assert_array_equal(b["completion_mask"],
                                  [right([1] * len(r["action"]), R) for r in ROWS])
    np.testing.assert_array_equal(b["tool_mask"], expected_response_mask())
    assert b["completion_mask"].dtype == b["tool_mask"].dtype == np.int64
    assert (b["completion_mask"] != b["tool_mask"]).any()  # the spliced tokens tell them apart
    assert b["advantages"].shape == (len(ROWS),)
    np.testing.assert_allclose(b["advantages"], group_norm(ROWS, 1e-4), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b["ref_per_token_logps"],
                               [right(r["ref_logprob"], R, 0.0) for r in ROWS])


def test_openrlhf_gets_its_experience(rollouts, tmp_path) -> None:
    b = batch("openrlhf_experience", rollouts, tmp_path)
    ids, mask, _ = expected_sequence()
    np.testing.assert_array_equal(b["sequences"], ids)
    np.testing.assert_array_equal(b["attention_mask"], mask)
    assert b["action_mask"].dtype == np.bool_
    np.testing.assert_array_equal(b["action_mask"], expected_response_mask())
    adv = group_norm(ROWS, 1e-9)
    want = [[a * m for m in mask] for a, mask in zip(adv, expected_response_mask())]
    np.testing.assert_allclose(b["advantages"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(b["returns"], b["advantages"])
    np.testing.assert_allclose(b["base_action_log_probs"],
                               [right(r["ref_logprob"], R, 0.0) for r in ROWS])


def test_our_own_token_batch_from_the_map_the_diff_writes(rollouts, tmp_path) -> None:
    """diff(LLMStep, TokenBatch) -> map -> `batch` (no --trainer: a rows=step map is validated
    as a TokenBatch): every column as computed here."""
    from gyre_contract.core._tokens import TokenBatch

    report = diff(LLMStep, TokenBatch)
    assert report.exit_code() == 0 and report.layout.kind == "token"
    map_path = tmp_path / "map.json"
    map_path.write_text(json.dumps(report.field_map()))
    npz = tmp_path / "batch.npz"
    out, err = io.StringIO(), io.StringIO()
    code = run(["batch", str(rollouts), "--map", str(map_path), "--model", MODEL,
                "-o", str(npz)], stdout=out, stderr=err)
    assert code == 0, err.getvalue() + out.getvalue()
    with np.load(npz, allow_pickle=False) as data:
        b = {k: data[k] for k in data.files}
    mask = expected_response_mask()
    np.testing.assert_array_equal(b["response_ids"], [right(r["action"], R) for r in ROWS])
    np.testing.assert_array_equal(b["response_mask"], mask)
    np.testing.assert_array_equal(b["response_length"], [len(r["action"]) for r in ROWS])
    np.testing.assert_allclose(b["token_reward"],
                               [right(r["token_reward"], R, 0.0) for r in ROWS])
    adv = group_norm(ROWS, 1e-6)
    np.testing.assert_allclose(b["advantage"], [[a * m for m in row] for a, row in
                                                zip(adv, mask)], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b["return"], [[r["return"] * m for m in row] for r, row in
                                             zip(ROWS, mask)])
    assert b["group_id"].tolist() == [r["group_id"] for r in ROWS]


# -- fixed widths: verl's max_prompt_length / max_response_length ---------------------------------

FIXED_P, FIXED_R = 16, 32  # tests/data/peers/verl_fixed_width.json


def test_verl_with_fixed_widths_gets_them(rollouts, tmp_path) -> None:
    """A trainer schema whose token dims are fixed numbers: the diff writes `pad_to` and the
    batch has exactly those widths, every row padded as verl pads it."""
    written = diff(LLMStep, PEERS / "verl_fixed_width.json").field_map()
    assert written["pad_to"] == {"P": FIXED_P, "R": FIXED_R}
    b = batch("verl_fixed_width", rollouts, tmp_path)
    ids = [left(r["observation"]["token_ids"], FIXED_P) + right(r["action"], FIXED_R)
           for r in ROWS]
    np.testing.assert_array_equal(b["input_ids"], ids)
    mask = [left([1] * len(r["observation"]["token_ids"]), FIXED_P)
            + right([1] * len(r["action"]), FIXED_R) for r in ROWS]
    np.testing.assert_array_equal(b["attention_mask"], mask)
    np.testing.assert_array_equal(b["position_ids"],
                                  [[max(int(v), 0) for v in np.cumsum(m) - 1] for m in mask])
    np.testing.assert_array_equal(b["responses"], [right(r["action"], FIXED_R) for r in ROWS])
    np.testing.assert_allclose(b["old_log_probs"],
                               [right(r["logprob"], FIXED_R, 0.0) for r in ROWS])
    assert b["advantages"].shape == (len(ROWS), FIXED_R)


def test_without_pad_to_the_fixed_widths_cannot_be_met(rollouts, tmp_path) -> None:
    """What `batch --trainer` said before the map carried `pad_to`: the longest row's widths."""
    written = diff(LLMStep, PEERS / "verl_fixed_width.json").field_map()
    del written["pad_to"]
    map_path = tmp_path / "map.json"
    map_path.write_text(json.dumps(written))
    out, err = io.StringIO(), io.StringIO()
    code = run(["batch", str(rollouts), "--map", str(map_path), "--trainer",
                str(PEERS / "verl_fixed_width.json"), "--model", MODEL], stdout=out, stderr=err)
    assert code == 1
    assert f"size {P + R} where the trainer schema wants {FIXED_P + FIXED_R}" in \
        out.getvalue() + err.getvalue()


def test_a_row_longer_than_its_fixed_width_is_refused_naming_it(tmp_path) -> None:
    """Exit 1 naming the row (episode, step, line) and both lengths; nothing is cut or written."""
    rows = records()
    rows[5] = dict(rows[5], action=list(range(10, 10 + FIXED_R + 3)),
                   logprob=[-0.5] * (FIXED_R + 3), ref_logprob=[-0.5] * (FIXED_R + 3),
                   loss_mask=[True] * (FIXED_R + 3), token_reward=[0.0] * (FIXED_R + 3))
    path = tmp_path / "long.jsonl"
    write_steps(path, rows)
    map_path = tmp_path / "map.json"
    map_path.write_text(json.dumps(diff(LLMStep, PEERS / "verl_fixed_width.json").field_map()))
    npz = tmp_path / "batch.npz"
    out, err = io.StringIO(), io.StringIO()
    code = run(["batch", str(path), "--map", str(map_path), "--trainer",
                str(PEERS / "verl_fixed_width.json"), "--model", MODEL, "-o", str(npz),
                "--format", "json"], stdout=out, stderr=err)
    assert code == 1 and not npz.exists()
    problems = json.loads(out.getvalue())["problems"]
    assert len(problems) == 1
    problem = problems[0]
    assert problem["line"] == 6 and problem["path"] == "steps[5].action"
    assert problem["expected"] == f"at most {FIXED_R} tokens (pad_to R = {FIXED_R})"
    assert problem["got"] == f"{FIXED_R + 3} tokens"
    assert f"episode '{rows[5]['episode_id']}' step 0" in problem["message"]
