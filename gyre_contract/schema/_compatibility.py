"""Compat: is data written under one version of a schema readable under another (Confluent/Buf idea).

`compat(old, new, mode)` compares two versions of the *same* side (two step schemas, or two batch
schemas) field by field, by name:
- backward: a reader on NEW reads data written under OLD (upgrade readers first);
- forward: a reader on OLD reads data written under NEW (upgrade writers first);
- full: both.

Rules (each change names its rule and the directions it breaks):
`field-removed` (backward when NEW is closed, i.e. `additionalProperties: false`, since old data
still carries the key; forward when the field was required), `required-field-added` (backward),
`field-added-to-closed` (forward: an old closed reader rejects the new key), `field-made-required`
(backward), `field-made-optional` (forward), `dtype-narrowed` / `dtype-changed` (the direction
whose cast loses information), `dim-changed` (a fixed size or the rank changed, or a symbolic dim
became fixed: backward; or a fixed dim became symbolic: forward), `role-changed` (both),
`layout-changed` (the batch dims differ: both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gyre_contract.core._errors import SchemaError
from gyre_contract.core._report import Report
from gyre_contract.core._text import name_shortener, printable
from gyre_contract.schema._dtyperules import dtypes_of, narrowing, readable
from gyre_contract.schema._fieldtable import (
    Dim,
    Field,
    FieldTable,
    SchemaInput,
    as_table,
    dtype_text,
    shape_text,
)
from gyre_contract.schema._shaperules import is_variadic, shapes_match

MODES: tuple[str, ...] = ("backward", "forward", "full")
RULES: tuple[str, ...] = (
    "field-removed", "required-field-added", "field-added-to-closed", "field-made-required",
    "field-made-optional", "dtype-narrowed", "dtype-changed", "dim-changed", "role-changed",
    "layout-changed", "field-added", "dim-renamed",
)
"""Rule names; the last two are never breaking and are listed for completeness."""


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between OLD and NEW: its rule, the field, which directions it breaks."""

    rule: str
    field: str
    message: str
    breaks: tuple[str, ...]  # subset of ("backward", "forward")

    def breaking(self, mode: str) -> bool:
        """Whether this change breaks `mode` (`full` breaks when either direction does)."""
        wanted = ("backward", "forward") if mode == "full" else (mode,)
        return any(d in self.breaks for d in wanted)

    def to_dict(self, mode: str) -> dict[str, Any]:
        """The change as JSON data, with whether it breaks `mode`."""
        return {"rule": self.rule, "field": self.field, "message": self.message,
                "breaks": list(self.breaks), "breaking": self.breaking(mode)}


class CompatReport(Report):
    """Every change between two versions, and whether it breaks the chosen mode.

    Follows `gyre_contract.core._report.Report`: `ok` when no change breaks `mode`; a compat
    report has no warnings (a change either breaks the mode or it does not), so
    `exit_code(strict=True)` equals `exit_code()`.
    """

    def __init__(self, old: FieldTable, new: FieldTable, mode: str,
                 changes: list[Change] | None = None) -> None:
        self.old = old
        self.new = new
        self.mode = mode
        self.changes = changes if changes is not None else []
        self.strict = False
        """Checked for `--strict` (no warnings here: the code is the same either way)."""
        self._shortener = name_shortener([*old.names(), *new.names(), old.name, new.name,
                                          old.title, new.title])

    def shorten_names(self, text: str) -> str:
        """`text` with the long field names and titles of both versions shortened."""
        return self._shortener(text)

    def __repr__(self) -> str:
        return f"CompatReport({self.old.name!r} -> {self.new.name!r}: {self.summary_line()})"

    @property
    def breaking(self) -> list[Change]:
        """The changes that break `mode`."""
        return [c for c in self.changes if c.breaking(self.mode)]

    @property
    def ok(self) -> bool:
        """True when no change breaks `mode`."""
        return not self.breaking

    def summary_line(self) -> str:
        """One line: how many changes, and whether the versions are compatible under the mode."""
        n = len(self.breaking)
        verdict = f"compatible ({self.mode})" if not n else \
            f"NOT compatible ({self.mode}): {n} breaking change{'s' if n != 1 else ''}"
        return f"{len(self.changes)} change{'s' if len(self.changes) != 1 else ''}, {verdict}"

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON data: what `gyre-contract compat --format json` prints."""
        return {"old": self.old.name, "new": self.new.name, "mode": self.mode,
                "compatible": self.ok,
                "changes": [c.to_dict(self.mode) for c in self.changes],
                "summary": {"changes": len(self.changes), "breaking": len(self.breaking),
                            "strict": self.strict,
                            "exit_code": self.exit_code(strict=self.strict),
                            "text": self.summary_line()}}

    def to_text(self) -> str:
        """One line per change (BREAKING or ok, its rule, the field, why), then the summary."""
        lines = [printable(f"gyre-contract compat ({self.mode}): {self.old.name} -> "
                           f"{self.new.name}")]
        if self.changes:
            width = max(len(c.rule) for c in self.changes)
            for c in self.changes:
                mark = "BREAKING" if c.breaking(self.mode) else "ok      "
                line = f"  {mark}  {c.rule.ljust(width)}  {c.field}: {c.message}"
                lines.append(printable(line))
        else:
            lines.append("  no changes")
        lines.append(f"summary: {self.summary_line()}")
        return "\n".join(lines) + "\n"


def compat(old: SchemaInput, new: SchemaInput, mode: str = "backward") -> CompatReport:
    """Compare two versions of one side's schema; see the module docstring for the rules."""
    if mode not in MODES:
        raise SchemaError(f"compat mode must be one of {', '.join(MODES)}, got {mode!r}")
    old_t, new_t = as_table(old), as_table(new)
    changes: list[Change] = []
    if tuple(old_t.batch_dims or ()) != tuple(new_t.batch_dims or ()):
        changes.append(Change(
            "layout-changed", "(batch)",
            f"batch dims {shape_text(old_t.batch_dims or ())} -> "
            f"{shape_text(new_t.batch_dims or ())}", ("backward", "forward")))
    for f in old_t:
        if f.name not in new_t:
            changes.append(_removed(f, new_t))
        else:
            changes += _changed(f, new_t[f.name])
    for f in new_t:
        if f.name not in old_t:
            changes += _added(f, old_t)
    return CompatReport(old_t, new_t, mode, changes)


def _removed(f: Field, new_t: FieldTable) -> Change:
    breaks = []
    why = []
    if new_t.closed:
        breaks.append("backward")
        why.append("old data still carries it and NEW rejects unknown keys")
    if f.required:
        breaks.append("forward")
        why.append("OLD readers require it")
    text = "removed" + (f" ({'; '.join(why)})" if why else " (optional, open schema)")
    return Change("field-removed", f.name, text, tuple(breaks))


def _added(f: Field, old_t: FieldTable) -> list[Change]:
    if f.required:
        return [Change("required-field-added", f.name,
                       f"added as required ({dtype_text(f.dtype)} {shape_text(f.shape)}): old "
                       f"data does not have it", ("backward",) +
                       (("forward",) if old_t.closed else ()))]
    if old_t.closed:
        return [Change("field-added-to-closed", f.name,
                       "added (optional): OLD rejects unknown keys, so it cannot read new data "
                       "that carries it", ("forward",))]
    return [Change("field-added", f.name, "added (optional)", ())]


def _changed(a: Field, b: Field) -> list[Change]:
    changes: list[Change] = []
    if a.required != b.required:
        if b.required:
            changes.append(Change("field-made-required", a.name,
                                  "optional -> required: old data may lack it", ("backward",)))
        else:
            changes.append(Change("field-made-optional", a.name,
                                  "required -> optional: OLD readers need it", ("forward",)))
    if a.role != b.role and a.declared_role and b.declared_role:
        changes.append(Change("role-changed", a.name, f"role {a.role} -> {b.role}",
                              ("backward", "forward")))
    dtype_change = _dtype_change(a, b)
    if dtype_change is not None:
        changes.append(dtype_change)
    dim_change = _dim_change(a.name, a.shape, b.shape)
    if dim_change is not None:
        changes.append(dim_change)
    return changes


def _dtype_change(a: Field, b: Field) -> Change | None:
    if a.dtype == b.dtype:
        return None
    old_to_new = readable(a.dtype, b.dtype)
    new_to_old = readable(b.dtype, a.dtype)
    breaks = tuple(d for d, ok in (("backward", old_to_new), ("forward", new_to_old)) if not ok)
    narrowed = any(narrowing(s, t) for s in dtypes_of(a.dtype) for t in dtypes_of(b.dtype))
    rule = "dtype-narrowed" if narrowed else "dtype-changed"
    return Change(rule, a.name, f"dtype {dtype_text(a.dtype)} -> {dtype_text(b.dtype)}", breaks)


def _dim_change(name: str, a: tuple[Dim, ...] | None, b: tuple[Dim, ...] | None) -> Change | None:
    if a == b or a is None or b is None:
        return None
    text = f"shape {shape_text(a)} -> {shape_text(b)}"
    if not shapes_match(a, b):
        return Change("dim-changed", name, text, ("backward", "forward"))
    breaks = []
    if _narrower(b, a):
        breaks.append("backward")  # NEW fixes a size OLD left open: old data may not fit
    if _narrower(a, b):
        breaks.append("forward")
    if not breaks:
        return Change("dim-renamed", name, text, ())
    return Change("dim-changed", name, text, tuple(breaks))


def _narrower(x: tuple[Dim, ...], y: tuple[Dim, ...]) -> bool:
    """Whether `x` fixes a dim that `y` leaves symbolic (same rank, no variadics)."""
    if len(x) != len(y) or any(map(is_variadic, (*x, *y))):
        return len([d for d in x if isinstance(d, int)]) > len([d for d in y if isinstance(d, int)])
    return any(isinstance(p, int) and not isinstance(q, int) for p, q in zip(x, y))
