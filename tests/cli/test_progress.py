"""The progress bar: on stderr while a long file is read, only when stderr is a terminal, never
with `--format json`, and the report on stdout is the same with or without it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gyre_contract.cli import _progress as progress
from gyre_contract.cli._app import run
from gyre_contract.io._progress import observe_reading, reading_observer

pytest.importorskip("tqdm")

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"


class Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def call(err: io.StringIO, *argv: str) -> tuple[int, str, str]:
    out = io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def small_files_count(monkeypatch):
    monkeypatch.setattr(progress, "MIN_BYTES", 1)


def test_a_bar_on_a_terminal_and_the_same_report(small_files_count):
    code, out, err = call(Terminal(), "validate", str(ROLLOUTS))
    assert code == 0 and ROLLOUTS.name in err and "\r" in err
    plain_code, plain_out, plain_err = call(io.StringIO(), "validate", str(ROLLOUTS))
    assert (plain_code, plain_out, plain_err) == (code, out, "")


def test_no_bar_with_format_json_or_a_small_file(monkeypatch, small_files_count):
    code, out, err = call(Terminal(), "validate", str(ROLLOUTS), "--format", "json")
    assert code == 0 and err == "" and json.loads(out)
    monkeypatch.setattr(progress, "MIN_BYTES", 10**12)
    assert call(Terminal(), "validate", str(ROLLOUTS))[2] == ""


def test_no_bar_when_stderr_is_a_pipe():
    done = subprocess.run([sys.executable, "-m", "gyre_contract", "validate", str(ROLLOUTS)],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0 and done.stderr == ""


def test_the_readers_report_every_byte(tmp_path):
    seen: list[int] = []
    with observe_reading(seen.append):
        assert reading_observer() is not None
        code, _, _ = call(io.StringIO(), "validate", str(ROLLOUTS))
    assert code == 0 and sum(seen) == ROLLOUTS.stat().st_size
    assert reading_observer() is None


def test_infer_reads_a_long_file_with_a_bar_and_writes_the_same_schema(small_files_count):
    code, out, err = call(Terminal(), "infer", str(ROLLOUTS))
    assert code == 0 and ROLLOUTS.name in err and "\r" in err
    plain = call(io.StringIO(), "infer", str(ROLLOUTS))  # no bar: only infer's own warnings
    assert plain == (code, out, plain[2]) and all(
        line.startswith("warning: field ") for line in plain[2].splitlines())
