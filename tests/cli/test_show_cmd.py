"""`gyre-contract show`: exit codes 0 / 1 / 2, one-line errors, every corpus file without a traceback."""

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
EXAMPLE = ROOT / "examples" / "cartpole_rollouts.jsonl"
MODEL = str(ROOT / "examples" / "models.py") + ":CartPoleStep"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(["show", *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_example_episode_holds() -> None:
    code, out, err = cli(str(EXAMPLE), "--model", MODEL, "--width", "100")
    assert (code, err) == (0, "")
    assert out.startswith(f"episode 'cartpole-0-0' in {EXAMPLE} (lines 1–40): 40 steps, "
                          "ended truncated, policy version 0\n")
    assert all(len(line) <= 100 for line in out.splitlines()[2:43])


def test_named_episode_and_json() -> None:
    code, out, err = cli(str(EXAMPLE), "--episode", "cartpole-0-1", "--format", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["episode_id"] == "cartpole-0-1" and data["ok"] is True
    assert [s["step"] for s in data["steps"]] == list(range(data["length"]))


def test_a_broken_episode_exits_1_with_rule_names() -> None:
    code, out, err = cli(str(CORPUS / "step_gap.jsonl"))
    assert (code, err) == (1, "")
    assert "[episode.step_contiguous]" in out


def test_no_such_episode_exits_2_with_one_line() -> None:
    code, out, err = cli(str(EXAMPLE), "--episode", "nope")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "no episode 'nope'" in err and "'cartpole-0-0'" in err


@pytest.mark.parametrize("argv", [["missing.jsonl"], [str(CORPUS)], [str(EXAMPLE), "--width",
                                                                       "5"],
                                  [str(EXAMPLE), "--model", "no_such_module:X"]])
def test_unusable_input_exits_2(argv: list[str]) -> None:
    code, out, err = cli(*argv)
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.jsonl")), ids=lambda p: p.name)
def test_every_corpus_file_gives_an_exit_code_not_a_traceback(path: Path) -> None:
    code, out, err = cli(str(path), "--width", "80")
    assert code in (0, 1, 2), (code, out, err)
    assert "Traceback" not in out + err
    if code == 2:
        assert err.startswith("error: ") and err.count("\n") == 1
    else:
        assert out.startswith("episode ")


def test_help_lists_exit_codes() -> None:
    result = subprocess.run([sys.executable, "-m", "gyre_contract", "show", "--help"],
                            capture_output=True, text=True, check=True)
    assert "exit codes: 0" in result.stdout and "--episode" in result.stdout
