"""`half_way(..., container=)` and `full_loop(..., container=)`: the user's function gets the
batch in the container it asks for. Here the numpy default, the refusals and a missing library;
the torch, TensorDict and DataProto containers run in tests/peers/test_adapters.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gyre_contract.core._errors import InputError
from gyre_contract.harness._stages import full_loop, half_way
from gyre_contract.pinned import CartPoleStep

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"
MAP = ROOT / "examples" / "cartpole_map.json"


def records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in ROLLOUTS.read_text().splitlines()]


def test_numpy_is_the_default_container() -> None:
    seen: list[Any] = []
    half_way(ROLLOUTS, MAP, lambda b: seen.append(b) or 0.0, model=CartPoleStep)
    half_way(ROLLOUTS, MAP, lambda b: seen.append(b) or 0.0, model=CartPoleStep,
             container="numpy")
    assert all(isinstance(b, dict) and isinstance(b["obs"], np.ndarray) for b in seen)


def test_an_unknown_container_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="container must be one of 'numpy', 'torch', "
                       "'tensordict', 'dataproto', got 'jax'"):
        half_way(tmp_path / "never-read.jsonl", MAP, container="jax")
    calls: list[int] = []
    with pytest.raises(ValueError, match="got 'pandas'"):
        full_loop(lambda v: calls.append(v) or records(), lambda b: None, MAP, cycles=1,
                  container="pandas")
    assert calls == []  # nothing sampled


@pytest.mark.parametrize("container", ["torch", "tensordict", "dataproto"])
def test_a_missing_library_is_one_line_naming_the_extra(monkeypatch, container: str) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # what an absent torch looks like
    extra = "verl" if container == "dataproto" else "torch"
    with pytest.raises(InputError, match=rf"needs torch, which is not installed: pip install "
                       rf"'gyre-contract\[{extra}\]'$"):
        half_way(ROLLOUTS, MAP, lambda b: 0.0, model=CartPoleStep, container=container)
    trained: list[Any] = []
    with pytest.raises(InputError, match=rf"gyre-contract\[{extra}\]"):
        full_loop(lambda v: records(), trained.append, MAP, cycles=1, model=CartPoleStep,
                  container=container, max_staleness=10, start_version=2)
    assert trained == []  # never called with anything but what it asked for
