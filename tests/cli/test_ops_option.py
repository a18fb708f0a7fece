"""`--ops MODULE_OR_FILE.py` on `batch` and `diff`: the user's own ops, imported under the same
guard as `--model`/`--loss`, and the unknown-op message that says how to add one."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from gyre_contract.cli._app import run
from gyre_contract.trainer import _ops as ops

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"
MAP_PATH = ROOT / "examples" / "cartpole_map.json"
MAP = json.loads(MAP_PATH.read_text())

OPS_FILE = """\
import numpy as np
from gyre_contract import register_op

def clipped(inputs, columns, *, limit):
    return np.clip(inputs[0], -limit, limit)

register_op("clipped", clipped, args=["limit"], required=["limit"],
            describe=lambda t, s, a: f"{t} <- {s[0]} clipped to {a['limit']}")

if __name__ == "__main__":
    raise SystemExit("the __main__ block ran")
"""


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def custom_map(tmp_path):
    spec = json.loads(json.dumps(MAP))
    spec["fields"]["advantage"] = {**spec["fields"]["advantage"],
                                   "then": [{"op": "clipped", "limit": 0.5}]}
    path = tmp_path / "map.json"
    path.write_text(json.dumps(spec))
    yield path
    if "clipped" in ops.known_ops():
        ops.unregister_op("clipped")


def test_batch_runs_a_map_with_the_users_own_op_from_a_file(custom_map, tmp_path):
    (tmp_path / "my_ops.py").write_text(OPS_FILE)
    target = tmp_path / "batch.npz"
    code, out, err = cli("batch", str(ROLLOUTS), "--map", str(custom_map), "--ops",
                         str(tmp_path / "my_ops.py"), "-o", str(target), "--format", "json")
    assert (code, err) == (0, ""), out
    batch = np.load(target, allow_pickle=False)
    assert np.abs(batch["advantage"]).max() == pytest.approx(0.5)
    code, out, err = cli("batch", str(ROLLOUTS), "--map", str(MAP_PATH), "-o",
                         str(tmp_path / "plain.npz"))
    assert code == 0
    plain = np.load(tmp_path / "plain.npz", allow_pickle=False)
    assert np.abs(plain["advantage"]).max() > 0.5  # the op did clip something


def test_batch_imports_an_ops_module_by_name(custom_map, tmp_path, monkeypatch):
    (tmp_path / "team_ops.py").write_text(OPS_FILE)
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("batch", str(ROLLOUTS), "--map", str(custom_map), "--ops", "team_ops")
    assert (code, err) == (0, "")


def test_without_ops_the_unknown_op_says_which_exist_and_how_to_add_one(custom_map):
    code, _, err = cli("batch", str(ROLLOUTS), "--map", str(custom_map))
    assert code == 2
    assert 'unknown op "clipped"' in err and "ops a step may use: cast, " in err
    spec = json.loads(custom_map.read_text())
    spec["fields"]["advantage"] = {"op": "clipped", "from": "reward", "limit": 1}
    custom_map.write_text(json.dumps(spec))
    code, _, err = cli("batch", str(ROLLOUTS), "--map", str(custom_map))
    assert code == 2
    assert "known ops: all, and_not, any, cast, concat, " in err
    assert err.rstrip().endswith(
        "your own op: register_op in Python, or on the command line --ops MODULE_OR_FILE.py")


@pytest.mark.parametrize(("source", "spec", "message"), [
    ("raise RuntimeError('no GPU here')\n", "bad_ops.py",
     "error: --ops: importing {dir}/bad_ops.py failed: RuntimeError: no GPU here\n"),
    ("import sys\nsys.exit(3)\n", "bad_ops.py",
     "error: --ops: importing {dir}/bad_ops.py failed: it called sys.exit(3) while being "
     "imported\n"),
    ("", "bad_ops.py:register", "error: --ops takes MODULE or FILE.py (imported so that it "
     "registers its ops with register_op), got '{dir}/bad_ops.py:register'\n"),
    ("", "missing.py", "error: --ops: no such file: {dir}/missing.py\n"),
])
def test_a_failing_ops_module_is_one_line_and_exit_2(tmp_path, source, spec, message):
    (tmp_path / "bad_ops.py").write_text(source)
    for command in (["batch", str(ROLLOUTS), "--map", str(MAP_PATH)],
                    ["diff", str(ROOT / "schemas" / "rollout_step.v1.json"),
                     str(ROOT / "schemas" / "train_batch.v1.json")]):
        code, out, err = cli(*command, "--ops", f"{tmp_path}/{spec}")
        assert (code, out, err) == (2, "", message.format(dir=tmp_path))


def test_diff_imports_the_ops_before_it_runs(tmp_path, custom_map):
    (tmp_path / "my_ops.py").write_text(OPS_FILE)
    assert "clipped" not in ops.known_ops()
    code, _, err = cli("diff", str(ROOT / "schemas" / "rollout_step.v1.json"),
                       str(ROOT / "schemas" / "train_batch.v1.json"), "--ops",
                       str(tmp_path / "my_ops.py"))
    assert code in (0, 1) and "Traceback" not in err
    assert "clipped" in ops.known_ops()


def test_help_says_what_ops_imports():
    for command in ("batch", "diff"):
        code, out, _ = cli(command, "--help")
        text = " ".join(out.split())
        assert code == 0 and "--ops MODULE_OR_FILE.py" in text
        assert "so that it can add the ops a map names with gyre_contract.register_op" in text
        assert "nothing is ever imported because a data or map file says so" in text
