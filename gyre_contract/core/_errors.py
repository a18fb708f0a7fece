"""Errors: one exception carries every problem found, each in one message template.

Bad data raises `ContractError`; a bad schema file raises `SchemaError`; a bad field-map file
raises `FieldMapError`; a file that cannot be read at all raises `InputError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gyre_contract.core._text import MAX_MESSAGE_CHARS, printable, shorten, shorten_path

_MAX_SHOWN_CHARS = 40


@dataclass(frozen=True, slots=True)
class Problem:
    """One violation: where (dotted `path`, optional file `line`), what was expected, what was got.

    `rule` names the registered rule that found it (`core._rules`, e.g. `"step.logprob_nonpositive"`),
    so every path can be checked to report the same rule; None for problems of the file layer
    (a line that is not JSON, ...), which no record rule covers.
    """

    path: str
    expected: str
    got: str
    message: str
    line: int | None = None
    rule: str | None = None

    def __str__(self) -> str:
        shown = self.shown()
        where = f"line {self.line}: " if self.line is not None else ""
        path = f"{shown['path']}: " if self.path else ""
        return printable(f"{where}{path}{shown['message']}: expected {shown['expected']}, "
                         f"got {shown['got']}")

    def shown(self) -> dict[str, str]:
        """path, message, expected and got as reports echo them: each name of the path
        shortened (`core._text.shorten_path`), a message bounded; the fields stay exact."""
        return {"path": shorten_path(self.path), "message": shorten(self.message, MAX_MESSAGE_CHARS),
                "expected": shorten(self.expected, MAX_MESSAGE_CHARS),
                "got": shorten(self.got, MAX_MESSAGE_CHARS)}

    def under(self, prefix: str) -> Problem:
        """The same problem seen from a containing object (`steps[3]` + `reward`)."""
        if not prefix:
            return self
        if not self.path:
            return replace(self, path=prefix)
        sep = "" if self.path.startswith("[") else "."
        return replace(self, path=f"{prefix}{sep}{self.path}")

    def at_line(self, line: int) -> Problem:
        return replace(self, line=line)

    def by_rule(self, rule: str) -> Problem:
        """The same problem, attributed to the registered rule `rule`."""
        return replace(self, rule=rule)

    def to_dict(self) -> dict[str, Any]:
        """The problem as JSON reports give it, echoed names shortened as in text (`shown`)."""
        shown = self.shown()
        out: dict[str, Any] = {
            "line": self.line,
            "path": shown["path"],
            "message": shown["message"],
            "expected": shown["expected"],
            "got": shown["got"],
        }
        if self.rule is not None:
            out["rule"] = self.rule
        return out


class GyreError(Exception):
    """Base class of every error this package raises on purpose."""


class ContractError(GyreError, ValueError):
    """Data violates the contract. `.problems` holds all of them, not just the first."""

    def __init__(self, problems: Sequence[Problem] | Problem) -> None:
        if isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        super().__init__(self._render())

    def _render(self) -> str:
        if len(self.problems) == 1:
            return str(self.problems[0])
        lines = [f"{len(self.problems)} problems:"]
        lines += [f"  {p}" for p in self.problems]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self._render()

    def under(self, prefix: str) -> ContractError:
        return ContractError([p.under(prefix) for p in self.problems])


class MissingFieldError(ContractError, KeyError):
    """A source field that a map or batch needs is absent. Never filled with a default."""

    def __init__(self, name: str, have: Iterable[str], reason: str = "", *, where: str = "",
                 line: int | None = None) -> None:
        self.name = name
        self.have = sorted(have)
        self.reason = reason
        """Who needs the field and why ("op kl reads it: ..."), or ""."""
        self.where = where
        """Where it is absent ("on step 3 of episode 'e'"), or "" (absent altogether)."""
        self.line = line
        """The file line (Parquet: row) of the step that lacks it, when known."""
        problem = Problem(
            path=name, expected="a field named " + repr(name),
            got=f"none {where}" if where else "no such field",
            message=f"missing sample field ({reason})" if reason else "missing sample field",
            line=line,
        )
        self.problems = [problem]
        Exception.__init__(self, self._render())

    def _render(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        at = f" {shorten_path(self.where)}" if self.where else ""
        line = f" (line {self.line})" if self.line is not None else ""
        have = shorten(", ".join(map(shorten, self.have)), MAX_MESSAGE_CHARS)
        return f"missing sample field: {shorten(self.name)}{at}{line}{why}, have [{have}]"


class SchemaError(GyreError, ValueError):
    """A JSON Schema document (or a model definition) is unusable: bad JSON, bad shape, remote `$ref`."""


class FieldMapError(GyreError, ValueError):
    """A field-map file is unusable: bad JSON, unknown op, wrong arguments."""


class InputError(GyreError, OSError):
    """An input file cannot be opened or read at all (exit code 2 in the CLI)."""


def describe(value: Any) -> str:
    """A short, safe description of a value for a message: dtype[shape] for arrays, never a dump."""
    if isinstance(value, np.ndarray):
        dtype = "string" if value.dtype.kind == "U" else str(value.dtype)
        return f"{dtype}[{', '.join(map(str, value.shape))}]"
    if isinstance(value, np.generic):
        return f"{value.dtype} {_short(repr(value.item()))}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"bool {value}".replace("True", "true").replace("False", "false")
    if isinstance(value, (int, float)):
        return f"{type(value).__name__} {_short(repr(value))}"
    if isinstance(value, str):
        return f"str {_short(repr(value))}"
    if isinstance(value, (list, tuple)):
        return f"list[{len(value)}]"
    if isinstance(value, dict):
        return f"object with keys [{_short(', '.join(map(str, value)))}]"
    return type(value).__name__


def _short(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN_CHARS else text[: _MAX_SHOWN_CHARS - 3] + "..."
