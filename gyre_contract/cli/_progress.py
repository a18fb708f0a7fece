"""A progress bar on stderr while a command reads a long rollout file.

Shown only when all hold: stderr is a terminal (never in a pipe, a log or CI), the output is not
`--format json`, the file is at least `MIN_BYTES`, and `tqdm` is installed (extra `progress`:
`pip install 'gyre-contract[progress]'`; without it there is no bar, and nothing else changes).
tqdm rather than a hand-rolled bar: it handles terminal width, rates, redraw throttling and
cleanup on errors. The bar counts bytes read (`gyre_contract.io._progress`) and is erased when
the file is done (`leave=False`), so the report that follows is all that stays on screen.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from gyre_contract.io._progress import observe_reading

MIN_BYTES = 64 * 1024 * 1024
"""Files smaller than this read in a few seconds: no bar."""


def wants_bar(path: Any, stream: TextIO, fmt: str = "text", min_bytes: int | None = None) -> bool:
    """True when a bar for reading `path` should be drawn on `stream` (see the module doc);
    `min_bytes` defaults to `MIN_BYTES`."""
    if fmt == "json" or not _is_terminal(stream):
        return False
    least = MIN_BYTES if min_bytes is None else min_bytes
    try:
        return os.path.isfile(path) and os.path.getsize(path) >= least
    except (OSError, TypeError, ValueError):
        return False


@contextmanager
def file_progress(path: Any, stream: TextIO, fmt: str = "text",
                  min_bytes: int | None = None) -> Iterator[None]:
    """Draw a bar on `stream` while the block reads `path`, when `wants_bar` and tqdm is there."""
    tqdm = _tqdm() if wants_bar(path, stream, fmt, min_bytes) else None
    if tqdm is None:
        yield
        return
    with tqdm(total=os.path.getsize(path), unit="B", unit_scale=True, unit_divisor=1024,
              desc=os.path.basename(os.fspath(path)), file=stream, leave=False,
              dynamic_ncols=True) as bar, observe_reading(bar.update):
        yield


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


def _tqdm() -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm
