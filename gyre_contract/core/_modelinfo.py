"""One info object per model: wire names, attribute names, field specs and what paths derive from them.

A record's keys are its *wire* names (`return`); a pydantic model's attributes may differ
(`return_`, which Python reserves). Every layer that turns one into the other, and every per-model
cache (the compiled fast path, the bulk plan of a file reader, a Parquet layout), asks this object
instead of keeping a dunder attribute or a module dict of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

T = TypeVar("T")

_LOCK = threading.RLock()


@dataclass(eq=False)
class ModelInfo:
    """What every path needs to know of one model class, computed once."""

    model: type[BaseModel]
    wires: tuple[str, ...]
    """Wire names in field order."""
    required: frozenset[str]
    """Wire names a record must carry."""
    _attr_of: dict[str, str]
    _wire_of: dict[str, str]

    def attr(self, wire: str) -> str:
        """The attribute that holds wire field `wire` (`return` → `return_`); unknown names unchanged."""
        return self._attr_of.get(wire, wire)

    def wire(self, attr: str) -> str:
        """The wire name of attribute `attr` (`return_` → `return`); unknown names unchanged."""
        return self._wire_of.get(attr, attr)

    def derived(self, key: str, build: Callable[[type[BaseModel]], T]) -> T:
        """`build(model)`, computed once per model and key (a fast plan, a bulk plan, a layout).

        `None` is a valid result and is kept too (a model with no fast path is asked once).
        """
        return derived_table(key, build)[self.model]


class DerivedTable(dict[type[BaseModel], Any]):
    """Model class -> `build(model)` for one key, built on a miss: what `ModelInfo.derived`
    reads. A hot path (`validate_step`) may hold the table and index it (one dict lookup);
    `forget` and `forget_derived` empty it like every other derived value."""

    def __init__(self, key: str, build: Callable[[type[BaseModel]], Any]) -> None:
        super().__init__()
        self.key = key
        self.build = build

    def __missing__(self, model: type[BaseModel]) -> Any:
        value = self.build(model)
        with _LOCK:
            self[model] = value
        return value


_TABLES: dict[str, DerivedTable] = {}


def derived_table(key: str, build: Callable[[type[BaseModel]], Any]) -> DerivedTable:
    """The table of `key` (one per key; `build` must be the same on every call for a key)."""
    table = _TABLES.get(key)
    if table is None:
        with _LOCK:
            table = _TABLES.setdefault(key, DerivedTable(key, build))
    if table.build is not build:
        raise ValueError(f"derived key {key!r} is built by {table.build!r} already")
    return table


class _Infos(dict[type[BaseModel], ModelInfo]):
    """Model class -> its info; a miss builds it. A plain dict: `validate_step` asks it on every
    call, and a hit must cost one dict lookup (a weak dict costs several times more). Model
    classes live as long as the program in practice; `forget` drops one explicitly."""

    def __missing__(self, model: type[BaseModel]) -> ModelInfo:
        with _LOCK:
            info = self.get(model)
            if info is None:
                info = self[model] = _build(model)
        return info


_INFOS = _Infos()


def model_info(model: type[BaseModel]) -> ModelInfo:
    """The info object of `model`, built on first use."""
    return _INFOS[model]


def _build(model: type[BaseModel]) -> ModelInfo:
    fields = model.model_fields
    attr_of = {(f.alias or name): name for name, f in fields.items()}
    return ModelInfo(
        model=model,
        wires=tuple(attr_of),
        required=frozenset(w for w, name in attr_of.items() if fields[name].is_required()),
        _attr_of=attr_of,
        _wire_of={name: wire for wire, name in attr_of.items()},
    )


def forget(model: type[BaseModel]) -> None:
    """Drop what was derived for `model` (after its fields changed, e.g. a subclass finished building)."""
    with _LOCK:
        _INFOS.pop(model, None)
        for table in _TABLES.values():
            table.pop(model, None)


def forget_derived() -> None:
    """Drop every model's derived plans (the rule registry changed: plans that declare which
    rules they implement must be checked again); wire names and required fields stay."""
    with _LOCK:
        for table in _TABLES.values():
            table.clear()
