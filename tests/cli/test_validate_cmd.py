"""`gyre-contract validate`: stage 1 from the command line, exit codes 0 / 1 / 2."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gyre_contract.cli._app import run

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "rollouts"
GOOD = CORPUS / "crlf_line_ends.jsonl"
MODEL = str(ROOT / "examples" / "models.py") + ":CartPoleStep"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(["validate", *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_clean_file_holds() -> None:
    code, out, err = cli(str(GOOD))
    assert (code, err) == (0, "")
    assert out.startswith(f"{GOOD}: checked against model RolloutStepV1\n")
    assert "counts: 3 lines, 3 valid steps, 1 episode (0 open, 1 terminated, 0 truncated)" in out
    assert out.endswith("holds: no problems\n")


def test_violation_exits_1_and_names_the_line() -> None:
    code, out, _ = cli(str(CORPUS / "step_after_terminated.jsonl"))
    assert code == 1
    assert ("    line 3: episode_id: step after the episode ended (a phantom reset transition?): "
            "expected no step after the episode's terminated or truncated step, got step 2 of "
            "episode 'a', which ended at line 2\n") in out
    assert "problems: 1 in 1 group\n" in out


def test_json_format() -> None:
    code, out, _ = cli(str(CORPUS / "typo_key.jsonl"), "--format", "json")
    report = json.loads(out)
    assert code == 1 and report["holds"] is False
    assert report["counts"]["lines"] == 3 and report["problems"]["count"] == 2
    first = report["problems"]["groups"][0]
    assert (first["path"], first["message"], first["count"]) == ("truncated",
                                                                "missing required field", 1)
    assert first["examples"][0]["line"] == 3
    assert {f["name"] for f in report["fields"]} >= {"observation", "trunctaed"}


def test_unusable_input_exits_2_with_one_line(tmp_path: Path) -> None:
    for target, message in [(tmp_path / "nope.jsonl", "error: no such file: "),
                            (tmp_path, "error: no .jsonl or .parquet shard in directory ")]:
        code, out, err = cli(str(target))
        assert (code, out) == (2, "")
        assert err.startswith(message) and err.count("\n") == 1


def test_pinned_model_from_a_file() -> None:
    code, out, _ = cli(str(CORPUS / "wrong_shape_pinned.jsonl"), "--model", MODEL)
    assert code == 1
    assert "checked against model CartPoleStep" in out
    assert ("line 3: observation: wrong shape: expected float32[4], got float32[3]") in out


def test_pinned_model_from_a_module_in_the_current_directory(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    assert cli(str(GOOD), "--model", "examples.models:CartPoleStep")[0] == 0


@pytest.mark.parametrize(("spec", "message"), [
    ("examples/models.py", "error: --model must be MODULE:CLASS or FILE.py:CLASS, got "),
    ("no_such_module_xyz:Step", "error: --model: cannot import 'no_such_module_xyz': "),
    (str(ROOT / "examples" / "models.py") + ":Nope", "error: --model: "),
    ("gyre_contract.pinned:PromptObservation",
     "error: --model: gyre_contract.pinned:PromptObservation is not a "
     "step model (a subclass of RolloutStep), got "),
])
def test_bad_model_exits_2(spec: str, message: str) -> None:
    code, out, err = cli(str(GOOD), "--model", spec)
    assert (code, out) == (2, "")
    assert err.startswith(message) and err.count("\n") == 1


def test_json_schema_mode() -> None:
    schema = str(ROOT / "schemas" / "rollout_step.v1.json")
    code, out, _ = cli(str(CORPUS / "typo_key.jsonl"), "--schema", schema)
    assert code == 1 and "episode rules not checked" in out
    assert "line 3: " in out and "trunctaed" in out
    assert cli(str(GOOD), "--schema", schema)[0] == 0


def test_remote_ref_in_schema_exits_2_and_is_not_fetched(tmp_path: Path) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"$ref": "https://example.invalid/s.json"}))
    code, _, err = cli(str(GOOD), "--schema", str(schema))
    assert code == 2 and err.startswith("error: ") and "example.invalid" in err


def test_model_and_schema_are_exclusive() -> None:
    code, _, err = cli(str(GOOD), "--model", MODEL, "--schema", "s.json")
    assert code == 2 and "not allowed with argument" in err


def test_require_complete() -> None:
    path = str(CORPUS / "open_episode.jsonl")
    assert cli(path)[0] == 0
    code, out, _ = cli(path, "--require-complete")
    assert code == 1 and "line 2: episode_id: open episode" in out


def test_allow_partial_tail() -> None:
    path = str(CORPUS / "truncated_last_line.jsonl")
    assert cli(path)[0] == 1
    code, out, _ = cli(path, "--allow-partial-tail")
    assert code == 0
    assert "partial tail: 40 bytes after line 2 not checked (no newline yet)" in out


def test_help_says_what_model_imports() -> None:
    out = io.StringIO()
    assert run(["validate", "--help"], out, io.StringIO()) == 0
    text = " ".join(out.getvalue().split())
    assert "Only the module named here is imported" in text
    assert "never fetched" in text


def test_real_subprocess() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gyre_contract", "validate", str(CORPUS / "null_value.jsonl"),
         "--format", "json"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert proc.returncode == 1 and proc.stderr == ""
    group = json.loads(proc.stdout)["problems"]["groups"][0]
    assert (group["path"], group["message"], group["examples"][0]["line"]) == (
        "reward", "null is not allowed", 3)


def test_a_group_mixing_policy_versions_warns_and_fails_strict(tmp_path) -> None:
    path = tmp_path / "grpo.jsonl"
    path.write_text("".join(json.dumps({
        "observation": {"token_ids": [1, 2]}, "action": [5, 6], "logprob": [-0.5, -0.5],
        "ref_logprob": [-0.25, -0.75], "group_id": "prompt-0", "reward": float(k),
        "step": 0, "episode_id": f"prompt-0/{k}", "terminated": True, "truncated": False,
        "policy_version": 3 + (k == 1)}) + "\n" for k in range(2)))
    code, out, _ = cli(str(path))
    assert code == 0 and ("warnings: 1\n  group 'prompt-0' mixes policy versions 3, 4" in out)
    assert out.endswith("holds: no problems\n")
    code, out, _ = cli(str(path), "--strict", "--format", "json")
    report = json.loads(out)
    assert code == 1 and report["warnings"][0]["group_id"] == "prompt-0"
    # the JSON carries the verdict CI acts on: the contract holds, strict fails on the warning
    assert (report["holds"], report["strict"], report["exit_code"]) == (True, True, 1)
    code, out, _ = cli(str(path), "--format", "json")
    report = json.loads(out)
    assert (code, report["holds"], report["strict"], report["exit_code"]) == (0, True, False, 0)
    code, out, _ = cli(str(tmp_path), "--strict", "--format", "json")  # the folder: shards
    report = json.loads(out)
    assert (code, report["holds"], report["strict"], report["exit_code"]) == (1, True, True, 1)
