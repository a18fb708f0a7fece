"""Old names that keep working for one minor version, and public names loaded on first use.

Renaming a public name must not break a user's code overnight: the old name keeps working and
says, with a `DeprecationWarning`, what to use instead. Four helpers cover the cases:

- `renamed_arguments(step_model="model")`: a function's keyword argument was renamed;
- `deprecated_alias("ok")`: a method or attribute of a class was renamed;
- `renamed_function(new, "old")`: a module-level function was renamed;
- `lazy_exports(...)`: a package's public names, imported on first use (PEP 562), plus the names
  that moved away from it (still served, with a warning naming their new home);
- `ModuleAliases`: old dotted module names (`gyre_contract.rollout`) that now live elsewhere.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

REMOVAL = "0.3.0"
"""When deprecated names go away; said in every warning."""


def warn_deprecated(message: str, stacklevel: int = 2) -> None:
    """Emit one `DeprecationWarning` pointing at the caller's line (`stacklevel` as in `warnings`)."""
    warnings.warn(f"{message} (the old name goes away in {REMOVAL})", DeprecationWarning,
                  stacklevel=stacklevel + 1)


def renamed_arguments(**renames: str) -> Callable[[F], F]:
    """Accept each old keyword argument (`old="new"`) as its new name, with a DeprecationWarning.

    Passing both the old and the new name is a `TypeError`, as a repeated argument would be.
    """
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{fn.__qualname__}() got both {old}= and {new}=; "
                                        f"{old}= is the deprecated name of {new}=")
                    warn_deprecated(f"{fn.__qualname__}(): the argument {old}= is now {new}=")
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        wrapper.__renamed_arguments__ = dict(renames)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


class deprecated_alias:  # lower case: used like a function in a class body
    """A class attribute that forwards to another attribute or method, with a DeprecationWarning.

    `holds = deprecated_alias("ok")` in a class body makes `report.holds` return `report.ok`
    (a method comes back bound, so `report.holds()` calls `report.ok()`).
    """

    def __init__(self, new: str, note: str = "") -> None:
        self.new = new
        self.note = note
        self.old = "?"

    def __set_name__(self, owner: type, name: str) -> None:
        self.old = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:  # the class itself (help(), inspect): the alias, no warning
            return self
        where = type(instance).__name__
        note = f"; {self.note}" if self.note else ""
        warn_deprecated(f"{where}.{self.old} is deprecated, use {where}.{self.new}{note}")
        return getattr(instance, self.new)


def renamed_function(new: F, old_name: str) -> F:
    """The function `new` under its old name `old_name`, warning at each call.

    `old = renamed_function(new, "old")` at module level keeps `old(...)` working.
    """
    @functools.wraps(new)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        warn_deprecated(f"{old_name}() is deprecated, use {new.__qualname__}()")
        return new(*args, **kwargs)

    wrapper.__name__ = wrapper.__qualname__ = old_name
    return wrapper  # type: ignore[return-value]


def lazy_exports(
    package: str,
    homes: Mapping[str, Iterable[str]],
    moved: Mapping[str, str] | None = None,
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """`__all__`, `__getattr__` and `__dir__` for a package whose names load on first use.

    `homes` maps a module (absolute, or relative to `package` when it starts with a dot, as
    in `.rollout`) to the public names it defines. `moved` maps a name that left the package
    to its new home (a module or package that has it); it is still served, with a warning, but
    not listed in `__all__`. A name is imported when first asked for, then kept in the package.
    """
    home_of = {name: importlib.util.resolve_name(module, package)
               for module, names in homes.items() for name in names}
    moved = dict(moved or {})
    public = list(home_of)
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        home = home_of.get(name)
        if home is not None:
            value = getattr(importlib.import_module(home), name)
            namespace[name] = value
            return value
        new_home = moved.get(name)
        if new_home is not None:
            warn_deprecated(f"{package}.{name} has moved: import it from {new_home}")
            return getattr(importlib.import_module(new_home), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public))

    return public, __getattr__, __dir__


# -- old module paths ---------------------------------------------------------------------------

class ModuleAliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import an old module name (`gyre_contract.rollout`) as a view of its new home.

    The old name becomes a small module whose attributes are looked up in the new home (a
    package exposing the old module's public names), so `from gyre_contract.rollout import
    write_steps` keeps working; importing it warns once, naming the new home.
    """

    def __init__(self, aliases: Mapping[str, str]) -> None:
        self.aliases = dict(aliases)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.aliases:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _AliasModule(spec.name, self.aliases[spec.name])

    def exec_module(self, module: types.ModuleType) -> None:
        new_home = self.aliases[module.__name__]
        warnings.warn(f"the module {module.__name__} has moved: import from {new_home} "
                      f"(the old name goes away in {REMOVAL})", DeprecationWarning,
                      stacklevel=2)  # warnings skips the import machinery's frames

    def install(self) -> None:
        """Put this finder on `sys.meta_path` once, ahead of the path finder."""
        if not any(isinstance(f, ModuleAliases) for f in sys.meta_path):
            sys.meta_path.insert(0, self)


class _AliasModule(types.ModuleType):
    """An old module name whose attributes come from the new home."""

    def __init__(self, name: str, new_home: str) -> None:
        super().__init__(name, f"Deprecated alias of {new_home}.")
        self.__new_home__ = new_home

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        target = importlib.import_module(self.__new_home__)
        try:
            return getattr(target, name)
        except AttributeError:
            raise AttributeError(f"{self.__name__} (now {self.__new_home__}) has no attribute "
                                 f"{name!r}") from None

    def __dir__(self) -> list[str]:
        return sorted(set(dir(importlib.import_module(self.__new_home__))))
