"""`GYRE_FAST_PATHS` is read through public APIs and `validate_step` sees every change at once."""

from __future__ import annotations

import inspect
import os

import pytest

from gyre_contract.core import _switches as switches
from gyre_contract.core._fastpath import PLANS
from gyre_contract.core._switches import FAST, fast_paths_enabled
from gyre_contract.core._validate import validate_step
from gyre_contract.pinned import CartPoleStep

RECORD = {"observation": [0.01, -0.02, 0.03, 0.04], "action": 1, "logprob": -0.69, "value": 0.5,
          "reward": 1.0, "step": 0, "episode_id": "ep-0", "terminated": False, "truncated": False,
          "policy_version": 0}


@pytest.fixture(autouse=True)
def flag_in_use() -> None:
    """What the first `validate_step` of a process does: read the switch, start following it."""
    FAST.read()


def test_the_import_installs_no_hook() -> None:
    """Importing the package adds no audit hook: only the first validated record does."""
    import subprocess
    import sys

    code = ("import sys; hooks = []; sys.addaudithook = hooks.append; import gyre_contract; "
            "from gyre_contract.core._switches import FAST; assert hooks == [] and FAST.on is None; "
            "import gyre_contract.pinned as p; "
            "gyre_contract.validate_step({'observation': [0.0] * 4, 'action': 0, 'reward': 1.0, "
            "'step': 0, 'episode_id': 'e', 'terminated': False, 'truncated': False, "
            "'policy_version': 0}, p.CartPoleStep); assert len(hooks) == 1 and FAST.on is True")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "GYRE_FAST_PATHS"})
    assert done.returncode == 0, done.stderr


def test_no_cpython_internals() -> None:
    """The switch must not reach into `os.environ._data` (a CPython detail)."""
    assert "_data" not in inspect.getsource(switches)


@pytest.mark.parametrize(("value", "on"), [("0", False), (" 0 ", False), ("1", True), ("", True),
                                           ("no", True)])
def test_the_flag_follows_setenv(value: str, on: bool, monkeypatch) -> None:
    monkeypatch.setenv("GYRE_FAST_PATHS", value)
    assert FAST.on is on and fast_paths_enabled() is on
    monkeypatch.delenv("GYRE_FAST_PATHS")
    assert FAST.on and fast_paths_enabled()


def test_the_flag_follows_every_way_of_writing_os_environ(monkeypatch) -> None:
    monkeypatch.delenv("GYRE_FAST_PATHS", raising=False)
    try:
        os.environ.update(GYRE_FAST_PATHS="0")
        assert not FAST.on
        os.environ.pop("GYRE_FAST_PATHS")
        assert FAST.on
        os.environ.setdefault("GYRE_FAST_PATHS", "0")
        assert not FAST.on
    finally:
        os.environ.pop("GYRE_FAST_PATHS", None)
    assert FAST.on


def test_validate_step_takes_the_normal_path_when_off(monkeypatch) -> None:
    """With the switch off, a broken compiled plan is never asked (it would raise)."""
    monkeypatch.setenv("GYRE_FAST_PATHS", "1")
    assert validate_step(dict(RECORD), CartPoleStep).action == 1
    plan = PLANS[CartPoleStep]
    assert plan is not None

    class Refuses:
        def validate_python(self, record: object) -> object:
            raise AssertionError("the fast plan was asked with GYRE_FAST_PATHS=0")

    monkeypatch.setitem(PLANS, CartPoleStep, Refuses())
    monkeypatch.setenv("GYRE_FAST_PATHS", "0")
    assert validate_step(dict(RECORD), CartPoleStep).action == 1
