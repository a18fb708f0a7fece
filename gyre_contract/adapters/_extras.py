"""The optional libraries the adapters hand batches to, imported on first use.

A library that is not installed is one line naming the extra that installs it (`InputError`:
the CLI exits 2 with it), never a traceback from deep inside an import.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from gyre_contract.core._errors import InputError


def require(module: str, user: str, extra: str) -> ModuleType:
    """Import `module` for the function `user`, or raise InputError naming the `extra` of this
    package that installs it (and the module that was missing: verl's own dependency, say)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        missing = err.name or module
        raise InputError(f"{user} needs {missing}, which is not installed: pip install "
                         f"'gyre-contract[{extra}]'") from None
