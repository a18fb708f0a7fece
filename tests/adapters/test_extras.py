"""The adapters import their library only when called, and a missing one is one line naming the
extra to install (never a traceback from inside an import)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from gyre_contract.adapters import from_vllm, to_dataproto, to_tensordict, to_torch
from gyre_contract.core._errors import InputError

BATCH = {"x": np.zeros((2, 3), np.float32), "uid": np.array(["a", "b"])}


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@pytest.mark.parametrize(("function", "blocked", "needs", "message"), [
    (to_torch, "torch", (), "to_torch needs torch, which is not installed: pip install "
     "'gyre-contract[torch]'"),
    (to_tensordict, "torch", (), "to_tensordict needs torch, which is not installed: pip install "
     "'gyre-contract[torch]'"),
    pytest.param(to_tensordict, "tensordict", ("torch",), "to_tensordict needs tensordict, "
                 "which is not installed: pip install 'gyre-contract[torch]'",
                 marks=pytest.mark.peers),
    (to_dataproto, "torch", (), "to_dataproto needs torch, which is not installed: pip install "
     "'gyre-contract[verl]'"),
    pytest.param(to_dataproto, "verl", ("torch",), "to_dataproto needs verl, which is not "
                 "installed: pip install 'gyre-contract[verl]'", marks=pytest.mark.peers),
])
def test_a_missing_library_is_one_line_naming_the_extra(monkeypatch, function, blocked, needs,
                                                        message) -> None:
    if not all(installed(n) for n in needs):
        pytest.skip(f"the case of {blocked} alone missing needs {', '.join(needs)} installed")
    monkeypatch.setitem(sys.modules, blocked, None)  # what an absent package looks like
    with pytest.raises(InputError) as err:
        function(BATCH)
    assert str(err.value) == message


def test_the_adapters_import_no_library_until_called() -> None:
    code = ("import sys; import gyre_contract.adapters as a; "
            "from gyre_contract.adapters import to_torch, to_tensordict, to_dataproto, from_vllm; "
            "print(','.join(m for m in ('torch', 'tensordict', 'verl', 'vllm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
    assert callable(from_vllm)
