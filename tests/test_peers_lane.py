"""The peers lane (`.ci/peers`, run by `.ci/run`): a skipped peer test fails it, and its installs
can never pull an unpinned torch (a multi-GB CUDA build) instead of the CPU build on disk."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LANE = ROOT / ".ci" / "peers"


def run_pytest(tmp_path: Path, strict: bool) -> subprocess.CompletedProcess[str]:
    """pytest on one passing and one skipping test, with tests/conftest.py as a plugin."""
    (tmp_path / "test_x.py").write_text("import pytest\n\ndef test_ran():\n    pass\n\n"
                                        "def test_skips():\n    pytest.skip('no torchdata')\n")
    env = {k: v for k, v in os.environ.items() if k != "GYRE_PEERS_STRICT"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    if strict:
        env["GYRE_PEERS_STRICT"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest",
                           "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir",
                           str(tmp_path), str(tmp_path / "test_x.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True)


@pytest.mark.slow  # two pytest processes: seconds
def test_a_skip_fails_the_lane_and_nothing_else(tmp_path: Path) -> None:
    strict = run_pytest(tmp_path, strict=True)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "1 passed, 1 skipped" in strict.stdout
    assert "GYRE_PEERS_STRICT=1: 1 skipped" in strict.stdout
    relaxed = run_pytest(tmp_path, strict=False)
    assert relaxed.returncode == 0, relaxed.stdout + relaxed.stderr


def test_the_lane_pins_torch_first_and_in_every_install() -> None:
    text = LANE.read_text(encoding="utf-8")
    installs = [line for line in text.splitlines() if re.match(r'\s*"\$\{PIP\[@\]\}"', line)]
    assert installs and installs[0].split()[1:] == ['"torch==2.13.0"'], installs[0]
    assert all('-c "$CONSTRAINTS"' in line for line in installs[1:]), installs
    assert 'echo "torch==2.13.0" > "$CONSTRAINTS"' in text
    assert "GYRE_PEERS_STRICT=1" in text and "-m peers" in text
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "bash .ci/peers" in ci
