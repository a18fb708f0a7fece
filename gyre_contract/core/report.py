"""The one protocol every report of the package follows: file, shards, diff, compat, half way, loop, batch.

A report answers four questions the same way whichever command made it: does the contract hold
(`ok`), what should the process exit with (`exit_code`), what is it as data (`to_dict`, exactly
what `--format json` prints) and as text for a person (`render`).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

FORMATS = ("text", "json")
"""Formats every report renders; some add their own (the diff also renders `markdown`)."""


class Report(ABC):
    """Base of every report; subclasses give `ok`, `to_dict` and `to_text`.

    `exit_code(strict)` follows the CLI's convention: 0 the contract holds, 1 it is violated;
    with `strict=True` warnings count as violations too.
    """

    @property
    @abstractmethod
    def ok(self) -> bool:
        """True when the contract holds (warnings do not break it)."""

    @property
    def warnings(self) -> list[Any]:
        """What holds but deserves a look; `exit_code(strict=True)` fails on any."""
        return []

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON data: what `--format json` prints."""

    @abstractmethod
    def to_text(self) -> str:
        """The report for a person at a terminal."""

    def exit_code(self, strict: bool = False) -> int:
        """0 when the contract holds, 1 when it is violated (or, with `strict`, when anything warns)."""
        if not self.ok:
            return 1
        return 1 if strict and self.warnings else 0

    def render(self, format: str = "text") -> str:
        """The report in `format` ("text" or "json"; a subclass may add more)."""
        if format == "json":
            return json.dumps(self.to_dict(), indent=2, allow_nan=False, ensure_ascii=False)
        if format == "text":
            return self.to_text()
        raise ValueError(f"unknown report format {format!r}: expected one of {', '.join(FORMATS)}")
