"""With `--format json` every command's error is a JSON object on stdout, nothing on stderr, and
the exit code text output gives (one shared helper, `cli._common.write_json_error`)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gyre_contract.cli._app import run

ROOT = Path(__file__).resolve().parents[2]
STEP = str(ROOT / "schemas" / "rollout_step.v1.json")


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_each_command_reports_an_unusable_input_as_json(tmp_path) -> None:
    missing = str(tmp_path / "nope.json")
    notjson = tmp_path / "broken.json"
    notjson.write_text("{")
    cases = {
        "diff": ["diff", str(notjson), STEP],
        "compat": ["compat", STEP, missing],
        "runs": ["runs", str(tmp_path / "runs.jsonl")],
        "show": ["show", str(tmp_path / "r.jsonl")],
        "validate": ["validate", str(tmp_path / "r.jsonl")],
        "batch": ["batch", str(tmp_path / "r.jsonl"), "--map", missing],
        "infer": ["infer", str(tmp_path / "r.jsonl")],
    }
    for command, argv in cases.items():
        text_code, text_out, text_err = cli(*argv)
        assert text_code == 2 and text_err.startswith("error: "), command
        code, out, err = cli(*argv, "--format", "json") if command != "infer" else \
            (None, None, None)
        if code is None:  # infer writes a schema: no --format
            continue
        report = json.loads(out)
        assert (code, err) == (text_code, ""), command
        assert (report["command"], report["ok"], report["exit_code"]) == (command, False, 2)
        assert report["error"] == text_err.removeprefix("error: ").rstrip("\n"), command
        assert report["problems"] == []
    assert json.loads(cli(*cases["batch"], "--format", "json")[1])["stage"] == "half_way"


def test_a_usage_error_inside_a_command_is_json_too(tmp_path) -> None:
    runs = tmp_path / "runs.jsonl"
    runs.write_text("")
    code, out, err = cli("runs", str(runs), "--curve", "loss", "--format", "json")
    report = json.loads(out)
    assert (code, err, report["exit_code"]) == (2, "", 2)
    assert report["error"] == "--curve needs --plot P.png"


def test_a_violated_contract_keeps_exit_1_and_lists_its_problems(tmp_path) -> None:
    """An error raised as a violation (a batch that breaks the contract) is exit 1 with its
    problems, as text output gives."""
    fmap = tmp_path / "m.json"
    fmap.write_text(json.dumps({"gyre_field_map": 1, "fields": {"obs": {"from": "obsv"}}}))
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text(json.dumps({
        "observation": [0.0], "action": 0, "reward": 1.0, "terminated": True, "truncated": False,
        "step": 0, "episode_id": "e"}) + "\n")
    argv = ["batch", str(rollouts), "--map", str(fmap)]
    text_code, _, text_err = cli(*argv)
    code, out, err = cli(*argv, "--format", "json")
    report = json.loads(out)
    assert (code, err, report["command"], report["exit_code"]) == (text_code, "", "batch", 1)
    assert report["problems"] and all({"path", "expected", "got"} <= set(p)
                                      for p in report["problems"])
    assert report["error"] == text_err.removeprefix("error: ").rstrip("\n")


@pytest.mark.parametrize("argv", [["diff", STEP], ["compat", STEP], ["show"], ["runs"]])
def test_a_missing_file_is_json(argv, tmp_path) -> None:
    target = str(tmp_path / "absent.jsonl")
    args = [argv[0], *argv[1:], target] if argv[0] in ("diff", "compat") else [argv[0], target]
    code, out, err = cli(*args, "--format", "json")
    assert (code, err) == (2, "")
    assert json.loads(out)["error"]


@pytest.mark.parametrize("argv", [["demo", "--seed", "-1"], ["demo", "--llm", "--episodes", "3"],
                                  ["demo", "--cycles", "0"]])
def test_the_demos_usage_errors_are_json_too(argv: list[str]) -> None:
    text_code, _, text_err = cli(*argv)
    assert text_code == 2 and text_err.startswith("error: ")
    code, out, err = cli(*argv, "--format", "json")
    report = json.loads(out)
    assert (code, err, report["command"], report["exit_code"]) == (2, "", "demo", 2)
    assert report["error"] == text_err.removeprefix("error: ").rstrip("\n")
