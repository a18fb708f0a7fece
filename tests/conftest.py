"""Shared fixtures: the pinned example models and canonical good records."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

from models import CartPoleStep, LLMStep  # noqa: E402


@pytest.fixture
def cartpole_record() -> dict:
    return {
        "observation": [0.01, -0.02, 0.03, 0.04], "action": 1, "logprob": -0.69,
        "value": 0.5, "reward": 1.0, "step": 0, "episode_id": "ep-0",
        "terminated": False, "truncated": False, "policy_version": 0,
    }


@pytest.fixture
def llm_record() -> dict:
    return {
        "observation": {"token_ids": [101, 2023, 2003], "text": "2+2="},
        "action": [1016, 102], "logprob": [-0.1, -0.05], "reward": 1.0, "step": 0,
        "episode_id": "prompt-7/0", "terminated": True, "truncated": False, "policy_version": 3,
    }


@pytest.fixture
def cartpole_model() -> type[CartPoleStep]:
    return CartPoleStep


@pytest.fixture
def llm_model() -> type[LLMStep]:
    return LLMStep
