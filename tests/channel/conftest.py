"""Fixtures of the channel tests: a channel URI on each backend (a folder; a Ray actor on a
local Ray cluster, marked slow), and the procs helpers on the path."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))


@pytest.fixture(scope="module")
def ray_cluster(ray_session):
    """The session's local Ray (tests/conftest.py) for the ray:// backend."""
    return ray_session


@pytest.fixture(params=["file", pytest.param("ray", marks=pytest.mark.slow)])
def uri(request, tmp_path):
    """A fresh channel URI on each backend (nothing there yet)."""
    if request.param == "file":
        yield str(tmp_path / "channel")
        return
    request.getfixturevalue("ray_cluster")
    name = f"ray://gyre-tests/ch-{uuid.uuid4().hex[:12]}"
    yield name
    from gyre_contract.channel._locate import open_backend

    backend = open_backend(name)
    backend.destroy()
