"""Run-time switches read from the environment.

`GYRE_FAST_PATHS=0` turns every fast path off (the compiled per-record validator, the bulk JSON
Lines reader, the columnar Parquet and Ray checks): every record then takes the explaining path.
Verdicts, messages and line numbers are the same either way; the switch exists to debug a fast
path and so that CI runs the validation tests both ways.
"""

from __future__ import annotations

import os


def fast_paths_enabled() -> bool:
    """False when the environment sets `GYRE_FAST_PATHS=0`; read at each call, so tests can flip it."""
    return os.environ.get("GYRE_FAST_PATHS", "1").strip() != "0"
