"""Fixtures of the channel tests: a channel URI on each backend (a folder; a Ray actor on a
local Ray cluster, marked slow), and the procs helpers on the path."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray (2 CPUs, no dashboard) for the ray:// backend, this tree on its path."""
    ray = pytest.importorskip("ray", reason="ray is not installed (extra 'ray')")
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE),
                                                *([before] if before else [])])
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level="WARNING")
    yield ray
    ray.shutdown()
    if before is None:
        del os.environ["PYTHONPATH"]
    else:
        os.environ["PYTHONPATH"] = before


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
