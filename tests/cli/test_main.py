"""The CLI shell: exit codes, one-line errors, `export`, and one real subprocess."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from gyre_contract.cli._app import run


def call(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_export_and_check(tmp_path):
    code, out, _ = call("export", "--out-dir", str(tmp_path))
    assert code == 0 and "rollout_step.v1.json" in out
    assert call("export", "--out-dir", str(tmp_path), "--check")[0] == 0
    (tmp_path / "train_batch.v1.json").write_text("{}")
    code, out, _ = call("export", "--out-dir", str(tmp_path), "--check", "--format", "json")
    assert code == 1 and json.loads(out)["drifted"] == [str(tmp_path / "train_batch.v1.json")]


def test_usage_errors_are_exit_2_without_traceback():
    code, _, err = call("export", "--bogus")
    assert code == 2 and "unrecognized arguments: --bogus" in err and "Traceback" not in err
    code, _, err = call("no-such-command")
    assert code == 2 and "invalid choice" in err


def test_no_command_prints_help():
    code, out, _ = call()
    assert code == 2 and "usage: gyre-contract" in out


def test_real_subprocess_check_of_committed_schemas():
    proc = subprocess.run([sys.executable, "-m", "gyre_contract", "export", "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "schemas in schemas match the models"


def test_help_goes_to_the_given_stream():
    code, out, _ = call("export", "--help")
    assert code == 0 and "--check" in out
