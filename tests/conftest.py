"""Shared fixtures: the pinned example models and canonical good records."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

from models import CartPoleStep, LLMStep  # noqa: E402
from ray_local import start_ray, stop_ray  # noqa: E402


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



@pytest.fixture(scope="module")
def fast_paths_on():
    """The fast paths on for a whole module (`pytestmark = pytest.mark.usefixtures(
    "fast_paths_on")`), even in CI's second run with GYRE_FAST_PATHS=0: for the tests that are
    about them."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("GYRE_FAST_PATHS", "1")
        yield

# -- the peers lane: a skipped peer test fails it -----------------------------------------------

PEERS_STRICT = "GYRE_PEERS_STRICT"
"""Set to 1 by `.ci/peers`: the real libraries are installed there, so a test that skips (a
library that did not import, a TRL that changed) is a failure of the lane, not a pass."""


def _peer_skips(config: pytest.Config) -> list:
    """The skips of this run, when it is the peers lane; none otherwise."""
    if os.environ.get(PEERS_STRICT) != "1":
        return []
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    return list(reporter.stats.get("skipped", [])) if reporter is not None else []


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _peer_skips(session.config):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    skipped = _peer_skips(config)
    if skipped:
        terminalreporter.write_line(f"{PEERS_STRICT}=1: {len(skipped)} skipped, so the peers lane "
                                    f"fails: every peer check must run here (the skip reasons "
                                    f"are listed with -rs)", red=True)


@pytest.fixture(scope="session")
def _ray_stopped_at_the_end():
    yield
    stop_ray()


@pytest.fixture(scope="module")
def ray_session(_ray_stopped_at_the_end):
    """A local Ray for the tests of a module, shared with the modules after it: Ray allows one
    per process, and each module starting and stopping its own broke the next one (`ray.init`
    twice) in the slow lane. A test that needs a Ray of its own (a doc page's snippets, whose
    workers must start in its folder) stops this one first; the next module starts it again."""
    return start_ray()
