"""Run-time switches read from the environment.

`GYRE_FAST_PATHS=0` turns every fast path off (the compiled per-record validator, the bulk JSON
Lines reader, the columnar Parquet and Ray checks): every record then takes the explaining path.
Verdicts, messages and line numbers are the same either way; the switch exists to debug a fast
path and so that CI runs the validation tests both ways.

Reading it: `fast_paths_enabled()` asks `os.environ` on each call and is meant for once per file
or plan lookup. `validate_step` runs once per record, where an `os.environ.get` (the name encoded,
a KeyError raised and caught when unset) would cost about as much as validating a small record, so
it reads `FAST.on`: a flag kept in step with the environment by an audit hook
(`sys.addaudithook`, installed by the first `validate_step` call, not by the import) on the
`os.putenv` / `os.unsetenv` events that `os.environ[...] = ...` and `del os.environ[...]` (so
also `monkeypatch.setenv` / `delenv`) raise. The flag changes only when the variable is written;
reading it is one attribute lookup.
"""

from __future__ import annotations

import os
import sys
from typing import Any

NAME = "GYRE_FAST_PATHS"
"""The environment variable; `0` turns the fast paths off, anything else (or unset) leaves them on."""


def is_off(value: str | bytes | None) -> bool:
    """Whether a value of `GYRE_FAST_PATHS` turns the fast paths off (`0`, blanks around it allowed)."""
    if value is None:
        return False
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return value.strip() == "0"


def fast_paths_enabled() -> bool:
    """False when the environment sets `GYRE_FAST_PATHS=0`; read at each call, so tests can flip it."""
    return not is_off(os.environ.get(NAME))


class FastPathFlag:
    """`on`: whether fast paths are enabled, as `fast_paths_enabled()` would say now, for the
    per-record hot path; None until `validate_step` first asks (`read()`).

    `read()` installs the audit hook below, once, and only then: a process that imports the
    package but never validates a record (a trainer, a CLI reading a file in bulk) pays nothing
    for it, and an import does not run every later audited event through a Python function.
    """

    __slots__ = ("on", "hooked")

    def __init__(self) -> None:
        self.on: bool | None = None
        self.hooked = False

    def read(self) -> bool:
        """The switch now; from here on the hook keeps `on` in step with the environment."""
        if not self.hooked:
            sys.addaudithook(self.audit)
            self.hooked = True
        self.on = fast_paths_enabled()
        return self.on

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        """Audit hook: follow writes of `GYRE_FAST_PATHS` through `os.environ`.

        The event is raised before `os.environ` stores the value, so the flag is set from the
        event's arguments (the name and value as `os.environ` encodes them), not re-read.
        """
        if event in _ENV_EVENTS and args and args[0] in _KEYS:
            self.on = event == "os.unsetenv" or not is_off(args[1])


_ENV_EVENTS = frozenset({"os.putenv", "os.unsetenv"})
_KEYS = frozenset({NAME, NAME.encode()})

FAST = FastPathFlag()
"""The process's flag (`FAST.on`); `validate_step` reads it on every call (`FAST.read()` the
first time)."""
