"""`fast_paths(on)`: the fast paths switched on or off for a block of a test, as
`GYRE_FAST_PATHS` does for a process (the switch follows the variable), then as they were."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def fast_paths(on: bool) -> Iterator[None]:
    before = os.environ.get("GYRE_FAST_PATHS")
    os.environ["GYRE_FAST_PATHS"] = "1" if on else "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ["GYRE_FAST_PATHS"]
        else:
            os.environ["GYRE_FAST_PATHS"] = before
