"""Public names loaded on first use (PEP 562): what keeps `import gyre_contract` light.

A package lists each public name with the private module that defines it; the module is
imported when the name is first asked for, and the name is then kept in the package.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_exports(
    package: str,
    homes: Mapping[str, Iterable[str]],
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """`__all__`, `__getattr__` and `__dir__` for a package whose names load on first use.

    `homes` maps a module (absolute, or relative to `package` when it starts with a dot, as
    in `._writer`) to the public names it defines.
    """
    home_of = {name: importlib.util.resolve_name(module, package)
               for module, names in homes.items() for name in names}
    public = list(home_of)
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        home = home_of.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public))

    return public, __getattr__, __dir__
