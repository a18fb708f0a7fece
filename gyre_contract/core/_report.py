"""The one protocol every report of the package follows: file, shards, diff, compat, half way, loop, batch.

A report answers four questions the same way whichever command made it: does the contract hold
(`ok`), what should the process exit with (`exit_code`), what is it as data (`to_dict`, exactly
what `--format json` prints) and as text for a person (`render`).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from gyre_contract.core._text import MAX_MESSAGE_CHARS, bounded, shorten

MAX_LINE_CHARS = 2 * MAX_MESSAGE_CHARS
"""Longest line of a text report; a longer one (a name nobody shortened) is cut around `…`."""

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

    def shorten_names(self, text: str) -> str:
        """`text` with each long name the report echoes shortened (`core._text.name_shortener`);
        a report that embeds names in its messages (diff, compat) overrides it."""
        return text

    def guarded(self, text: str) -> str:
        """`text` as a report prints it: each long name it echoes shortened
        (`shorten_names`), each line at most `MAX_LINE_CHARS`."""
        return "\n".join(shorten(self.shorten_names(line), MAX_LINE_CHARS)
                         for line in text.split("\n"))

    def render(self, format: str = "text") -> str:
        """The report in `format` ("text" or "json"; a subclass may add more). Every string of
        the JSON passes `shorten_names` and is bounded (`core._text.bounded`), every text line
        too (`guarded`): a megabyte-long name in the data never makes megabytes of output."""
        if format == "json":
            return json.dumps(bounded(self.to_dict(), self.shorten_names), indent=2,
                              allow_nan=False, ensure_ascii=False)
        if format == "text":
            return self.guarded(self.to_text())
        raise ValueError(f"unknown report format {format!r}: expected one of {', '.join(FORMATS)}")
