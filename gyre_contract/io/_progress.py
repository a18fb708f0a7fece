"""Who is told how far a rollout file has been read: the hook a progress bar hangs on.

The readers report the bytes they read (`LineSource`, per chunk of about 1 MiB) to the observer
set with `observe_reading`, if any; the CLI sets one that draws a bar on stderr when stderr is a
terminal (`gyre_contract.cli._progress`). A context variable, not an argument: the readers are
several layers below the command, and a library caller who sets nothing pays one lookup per
chunk. The observer never changes what is read or reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Observer = Callable[[int], object]

_OBSERVER: ContextVar[Observer | None] = ContextVar("gyre_reading_observer", default=None)


@contextmanager
def observe_reading(observer: Observer) -> Iterator[None]:
    """Inside the block, `observer(n)` is called with each count of bytes a reader reads."""
    token = _OBSERVER.set(observer)
    try:
        yield
    finally:
        _OBSERVER.reset(token)


def reading_observer() -> Observer | None:
    """The observer set by `observe_reading`, or None (ask once per file, not per chunk)."""
    return _OBSERVER.get()
