"""The file-level warning of contract v1.1: a group (`group_id`) whose members carry different
policy versions. JSON Lines (bulk and line by line) and Parquet, the fast paths on and off."""

from __future__ import annotations

import json

import pytest

from gyre_contract.io._groups import MAX_GROUP_WARNINGS, GroupVersions
from gyre_contract.io._validation import validate_file
from gyre_contract.pinned import CartPoleStep, LLMStep


def grpo(versions: dict[tuple[int, int], int] | None = None) -> list[dict]:
    """4 prompts x 4 completions, each a one-step episode; `versions[(p, k)]` overrides 5."""
    out = []
    for p in range(4):
        for k in range(4):
            out.append({"observation": {"token_ids": [101, p]}, "action": [7, 8, 9],
                        "logprob": [-0.5, -0.25, -0.125], "ref_logprob": [-0.5, -0.5, -0.5],
                        "group_id": f"prompt-{p}", "reward": float(k == 0), "step": 0,
                        "episode_id": f"prompt-{p}/{k}", "terminated": True, "truncated": False,
                        "policy_version": (versions or {}).get((p, k), 5)})
    return out


def cartpole(n: int, version_of) -> list[dict]:
    """`n` one-step CartPole episodes in groups of two (the bulk JSON Lines reader's model)."""
    return [{"observation": [0.1] * 4, "action": 1, "logprob": -0.7, "ref_logprob": -0.6,
             "group_id": f"g{i // 2}", "reward": 1.0, "step": 0, "episode_id": f"e{i}",
             "terminated": True, "truncated": False, "policy_version": version_of(i)}
            for i in range(n)]


def write(tmp_path, records, model, fmt):
    if fmt == "jsonl":
        path = tmp_path / "rollouts.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        return path
    from gyre_contract.io._parquet import write_parquet
    path = tmp_path / "rollouts.parquet"
    write_parquet(path, records, model)
    return path


@pytest.fixture(params=["1", "0"], ids=["fast", "normal"])
def fast(request, monkeypatch):
    monkeypatch.setenv("GYRE_FAST_PATHS", request.param)
    return request.param == "1"


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_group_straddling_a_weight_update_warns_naming_it(tmp_path, fast, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    path = write(tmp_path, grpo({(2, 3): 6, (2, 1): 4}), LLMStep, fmt)
    report = validate_file(path, LLMStep)
    assert report.ok and report.exit_code() == 0 and report.exit_code(strict=True) == 1
    assert [w.to_dict() for w in report.warnings] == [{
        "code": "group_policy_versions", "group_id": "prompt-2", "policy_versions": [4, 5, 6],
        "message": "group 'prompt-2' mixes policy versions 4, 5, 6: a group-relative advantage "
                   "would compare samples of different policies"}]
    assert report.to_dict()["warnings"] == [w.to_dict() for w in report.warnings]
    assert "warnings: 1\n  group 'prompt-2' mixes policy versions 4, 5, 6" in report.to_text()


def test_groups_of_one_version_do_not_warn(tmp_path, fast):
    report = validate_file(write(tmp_path, grpo(), LLMStep, "jsonl"), LLMStep)
    assert report.ok and report.warnings == [] and report.to_dict()["warnings"] == []
    assert "warnings" not in report.to_text()


def test_the_bulk_reader_warns_as_the_line_reader_does(tmp_path, monkeypatch):
    """Thousands of CartPole lines in groups of two: read in blocks (fast) or line by line;
    the same warnings, capped at MAX_GROUP_WARNINGS plus one counting the rest."""
    records = cartpole(4000, lambda i: i % 2 if i < 100 else 3)  # groups g0..g49 mixed
    path = write(tmp_path, records, CartPoleStep, "jsonl")
    blocks = []
    add_many = GroupVersions.add_many
    monkeypatch.setattr(GroupVersions, "add_many",
                        lambda self, ids, versions: blocks.append(len(ids)) or add_many(
                            self, ids, versions))
    reports = {}
    for switch in ("1", "0"):
        monkeypatch.setenv("GYRE_FAST_PATHS", switch)
        reports[switch] = validate_file(path, CartPoleStep)
    fast, normal = reports["1"], reports["0"]
    assert sum(blocks) == 4000  # the fast run read every line in blocks
    assert fast.to_dict() == normal.to_dict()
    assert len(fast.warnings) == MAX_GROUP_WARNINGS + 1
    assert fast.warnings[0].to_dict()["group_id"] == "g0"
    assert fast.warnings[-1].to_dict() == {
        "code": "group_policy_versions", "more_groups": 50 - MAX_GROUP_WARNINGS,
        "message": f"... and {50 - MAX_GROUP_WARNINGS} more groups mix policy versions"}


def test_a_step_that_fails_validation_does_not_count_in_its_group(tmp_path, fast):
    records = grpo()
    records[5] = dict(records[5], policy_version=9, reward="bad")  # prompt-1, invalid
    report = validate_file(write(tmp_path, records, LLMStep, "jsonl"), LLMStep)
    assert not report.ok and report.warnings == []


def test_the_text_report_counts_every_mixed_group_not_the_lines_shown(tmp_path, fast):
    """50 mixed groups: 20 named, one line for the other 30; the header says 50, not 21."""
    records = cartpole(200, lambda i: i % 2 if i < 100 else 3)  # groups g0..g49 mixed
    text = validate_file(write(tmp_path, records, CartPoleStep, "jsonl"), CartPoleStep).to_text()
    assert f"warnings: 50 ({MAX_GROUP_WARNINGS} shown)\n" in text
    assert f"  ... and {50 - MAX_GROUP_WARNINGS} more groups mix policy versions" in text


def test_a_file_path_in_a_warning_is_given_whole_and_a_name_from_the_data_shortened():
    """A listed file's path is what a script reads back (`validate DIR --format json`'s
    `skipped`): never cut at the 80 characters a name from the data is; a group id is."""
    from gyre_contract.io._groups import FileWarning

    path = "/tmp/" + "d" * 120 + "/b.jsonl"
    group = "g" * 1000
    data = FileWarning("skipped_not_a_regular_file", f"skipped {path}",
                       {"path": path, "group_id": group}).to_dict()
    assert data["path"] == path
    assert data["group_id"].startswith("g" * 32 + "…") and data["group_id"].endswith("(1,000 chars)")
