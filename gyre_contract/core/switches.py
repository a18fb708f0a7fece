"""Run-time switches read from the environment.

`GYRE_FAST_PATHS=0` turns every fast path off (the compiled per-record validator, the bulk JSON
Lines reader, the columnar Parquet and Ray checks): every record then takes the explaining path.
Verdicts, messages and line numbers are the same either way; the switch exists to debug a fast
path and so that CI runs the validation tests both ways.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial

_NAME = "GYRE_FAST_PATHS"
# `os.environ` re-encodes the name on every lookup (about 2 us here); `validate_step` asks on
# every call, so the encoded mapping CPython keeps behind `os.environ` is read when there is one.
# It is the mapping `os.environ[...] = ...` (and so `monkeypatch.setenv`) updates.
_RAW = getattr(os.environ, "_data", None)
try:
    _KEY = os.environ.encodekey(_NAME)  # type: ignore[attr-defined]
    _OFF = os.environ.encodevalue("0")  # type: ignore[attr-defined]
except AttributeError:  # another Python: the plain, slower lookup
    _RAW = None

switch_set: Callable[[], bool] = (partial(_RAW.__contains__, _KEY) if _RAW is not None
                                  else lambda: True)
"""Whether `GYRE_FAST_PATHS` is set at all: a C-level call, for `validate_step`'s hot path
(`not switch_set() or fast_paths_enabled()` costs one dict lookup when it is unset)."""


def fast_paths_enabled() -> bool:
    """False when the environment sets `GYRE_FAST_PATHS=0`; read at each call, so tests can flip it."""
    if _RAW is not None:
        value = _RAW.get(_KEY)
        return value is None or value.strip() != _OFF
    return os.environ.get(_NAME, "1").strip() != "0"
