"""One local Ray per test process, shared by the modules that need one (see `ray_session` in
conftest.py): Ray allows one per process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

RAY_PATHS = (ROOT, ROOT / "examples", ROOT / "tests" / "channel")
"""What Ray's workers import besides the installed packages: this tree, the examples, the
channel tests' helpers."""


def start_ray() -> object:
    """A local Ray (2 CPUs, no dashboard) whose workers see `RAY_PATHS`, started here if none runs."""
    ray = pytest.importorskip("ray", reason="ray is not installed (extra 'ray')")
    pytest.importorskip("ray.data", reason="ray[data] is not installed (extra 'ray')")
    from gyre_contract.io._shards import quiet_ray_data

    if not ray.is_initialized():
        before = os.environ.get("PYTHONPATH")
        paths = [str(p) for p in RAY_PATHS if str(p) not in (before or "").split(os.pathsep)]
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, *([before] if before else [])])
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 logging_level="WARNING")
        quiet_ray_data()
    return ray


def stop_ray() -> None:
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()
