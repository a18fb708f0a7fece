"""The rule registry: every rule of the contract once, by name, and what each fast path implements.

A `Rule` is one named check (`"step.logprob_nonpositive"`) of one kind — `field` (one field's
value), `step` (several fields of one record), `episode` (the steps of one episode) or `batch` (a
training batch) — with the messages its problems carry, the function that finds them on the
explaining path, and a builder of a minimal input that breaks exactly it (for the test that runs
every rule through every path: `tests/test_rule_registry.py`).

The explaining paths (the models' validators, `EpisodeTracker`, `validate_batch`) run the rules
of this registry. A fast path — one that only ever *accepts* and leaves the explaining to the
explaining path — is declared here with the rules it implements (`declare_fast_path`); when a
rule of its kinds is registered that it does not declare, it steps aside (`FastPath.usable` is
False), so that no rule is ever skipped. The rule definitions themselves are in `core._rules`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gyre_contract.core._errors import Problem
from gyre_contract.core._modelinfo import forget_derived

KINDS = ("field", "step", "episode", "batch")

Finder = Callable[[Any], list[Problem]]
Builder = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Rule:
    """One named rule: where it applies, what it says, how it is found and how it is broken.

    `find(subject)` lists its problems on the explaining path (None for a `field` rule: pydantic
    finds those per field and `rules.field_rule` names them). `violate(clean, model)` turns a
    clean input (a step record, or a batch for `batch` rules) into one that breaks exactly this
    rule under `model` — a list of records for an `episode` rule — or returns None when `model`
    cannot break it. `variants` are more such builders, for a rule that can be broken in ways a
    path may decide separately (an integer a float32 cannot hold exactly, alone or in a list of
    floats: `field.dtype`); the registry test tries every path with each (`violations`). `phase`
    orders rules of one kind (`episode`: "step" or "end"; `batch`: "shape", "values" or
    "staleness"). `options` are the keyword arguments a path needs to apply the rule at all
    (`require_complete=True`, `max_staleness=...`).
    """

    name: str
    kind: str
    messages: tuple[str, ...]
    find: Finder | None
    violate: Builder
    phase: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    doc: str = ""
    variants: tuple[Builder, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS or not self.name.startswith(self.kind + "."):
            raise ValueError(f"rule {self.name!r}: kind {self.kind!r}, name must be "
                             f"'<kind>.<rule>' with kind one of {', '.join(KINDS)}")

    @property
    def message(self) -> str:
        """The message of its problems (the first one when it has several)."""
        return self.messages[0]

    def violations(self, clean: Any, model: Any) -> list[Any]:
        """Every input `violate` and `variants` build from `clean` under `model` (not None)."""
        built = [build(clean, model) for build in (self.violate, *self.variants)]
        return [b for b in built if b is not None]

    def problems(self, subject: Any) -> list[Problem]:
        """Its problems in `subject`, each naming this rule."""
        if self.find is None:
            return []
        found = self.find(subject)
        return [p.by_rule(self.name) for p in found] if found else []


@dataclass(frozen=True)
class FastPath:
    """A path that only accepts, and the rules (of `kinds`) it implements: refuses when broken."""

    name: str
    kinds: tuple[str, ...]
    implements: frozenset[str]

    def undeclared(self) -> list[str]:
        """Registered rules of its kinds it does not implement (it must then step aside)."""
        return [r.name for r in all_rules() if r.kind in self.kinds
                and r.name not in self.implements]

    def usable(self) -> bool:
        """True when it implements every registered rule of its kinds; ask at plan time."""
        usable = _USABLE.get(self.name)
        if usable is None:
            usable = _USABLE[self.name] = not self.undeclared()
        return usable


_LOCK = threading.RLock()
_RULES: dict[str, Rule] = {}
_FAST_PATHS: dict[str, FastPath] = {}
_SELECTED: dict[tuple[str, str | None], tuple[Rule, ...]] = {}
_USABLE: dict[str, bool] = {}


def register(rule: Rule) -> Rule:
    """Add `rule` (its name must be new). Derived plans are dropped: fast paths ask again."""
    with _LOCK:
        if rule.name in _RULES:
            raise ValueError(f"rule {rule.name!r} is registered already")
        _RULES[rule.name] = rule
        _changed()
    return rule


def unregister(name: str) -> None:
    """Remove the rule `name` (tests and experiments; the contract's rules stay)."""
    with _LOCK:
        del _RULES[name]
        _changed()


@contextmanager
def registered(rule: Rule) -> Iterator[Rule]:
    """`rule` registered inside the block only."""
    register(rule)
    try:
        yield rule
    finally:
        unregister(rule.name)


def _changed() -> None:
    _SELECTED.clear()
    _USABLE.clear()
    forget_derived()


def get_rule(name: str) -> Rule:
    """The registered rule `name`; KeyError names the known ones when there is none."""
    try:
        return _RULES[name]
    except KeyError:
        raise KeyError(f"no rule {name!r}; known: {', '.join(_RULES)}") from None


def all_rules(kind: str | None = None, phase: str | None = None) -> tuple[Rule, ...]:
    """Registered rules in registration order, of one kind (and phase) when given."""
    key = (kind or "", phase)
    selected = _SELECTED.get(key)
    if selected is None:
        selected = _SELECTED[key] = tuple(
            r for r in list(_RULES.values())
            if (kind is None or r.kind == kind) and (phase is None or r.phase == phase))
    return selected


def run(kind: str, phase: str | None, subject: Any) -> list[Problem]:
    """The problems every rule of `kind` (and `phase`) finds in `subject`, in registry order."""
    problems: list[Problem] = []
    for rule in all_rules(kind, phase):
        problems += rule.problems(subject)
    return problems


def declare_fast_path(name: str, kinds: Iterable[str], implements: Iterable[str]) -> FastPath:
    """Declare the fast path `name`: the rules of `kinds` it implements. A name it lists that is
    not a registered rule of those kinds is a programming error, raised here."""
    path = FastPath(name, tuple(kinds), frozenset(implements))
    with _LOCK:
        unknown = sorted(n for n in path.implements
                         if n not in _RULES or _RULES[n].kind not in path.kinds)
        if unknown:
            raise ValueError(f"fast path {name!r} declares unknown rules: {', '.join(unknown)}")
        _FAST_PATHS[name] = path
        _USABLE.pop(name, None)
    return path


def fast_paths() -> dict[str, FastPath]:
    """Every declared fast path by name (a path's module declares it when imported)."""
    return dict(_FAST_PATHS)


def uncovered(rule_name: str) -> list[str]:
    """Fast paths of the rule's kind that do not implement it (and so step aside while it is
    registered). The registry test requires this to be empty for every rule."""
    kind = get_rule(rule_name).kind
    return [p.name for p in _FAST_PATHS.values()
            if kind in p.kinds and rule_name not in p.implements]
