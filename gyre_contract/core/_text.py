"""Text from data made safe for a terminal: one line, no control characters, bounded length.

Why: field names, schema titles and run configurations come from files other people write. Printed
raw, a name holding a newline or an escape sequence could forge report lines (`holds: no
problems`) or repaint the terminal. Text reports pass such text through `printable`.

And a name or a value can be a megabyte long (an unknown key in a rollout file, a title in a
schema): echoed whole, in a table padded to its width and in every problem that names it, one
such key made 14 MB of output. Every name or value a report or a message echoes goes through
`shorten` (its first and last characters and its length), paths through `shorten_path`, in text
and in JSON alike; the data itself is never changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["MAX_MESSAGE_CHARS", "MAX_SHOWN_CHARS", "bounded", "name_shortener", "printable",
           "quoted", "shorten", "shorten_path", "shown"]

MAX_SHOWN_CHARS = 80
"""Longest name or value echoed whole; a longer one shows its first 32 and last 16 characters
and its length (two fifths and one fifth of the limit)."""

MAX_MESSAGE_CHARS = 2000
"""Longest message echoed whole (a message built from several names, a list of fields)."""



def printable(text: str) -> str:
    """`text` with every non-printable character (line breaks, ESC, BEL, lone surrogates, ...)
    shown as its Python escape (`\\n`, `\\x1b`, `\\ud800`); printable text is returned as is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shorten(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """`text` when it has at most `limit` characters; else its beginning and its end around
    an ellipsis, with its length: `aaaa…aaaa (1,048,576 chars)`."""
    if len(text) <= limit:
        return text
    head, tail = _ends(limit)
    return f"{text[:head]}…{text[-tail:]} ({len(text):,} chars)"


def quoted(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """`repr(text)`, shortened like `shorten` with the length outside the quotes:
    `'aaaa…aaaa' (1,048,576 chars)`."""
    if len(text) <= limit:
        return repr(text)
    head, tail = _ends(limit)
    return f"{text[:head] + '…' + text[-tail:]!r} ({len(text):,} chars)"


def _ends(limit: int) -> tuple[int, int]:
    """How many characters a shortened text keeps from its start and from its end."""
    return max(1, limit * 2 // 5), max(1, limit // 5)


def shorten_path(path: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """A dotted path (`info.KEY.x`) with each of its names shortened (`shorten`)."""
    if len(path) <= limit:
        return path
    return ".".join(shorten(part, limit) for part in path.split("."))


def shown(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """A name or value as a text report shows it: shortened, then `printable`."""
    return printable(shorten(text, limit))


def name_shortener(names: Iterable[str | None]) -> Callable[[str], str]:
    """A function that shortens, inside any text, each of `names` that is longer than
    `MAX_SHOWN_CHARS` (a report built from many messages that embed names: the diff, compat).
    The identity when no name is that long, so nothing costs more in the usual case."""
    long = sorted({n for n in names if n is not None and len(n) > MAX_SHOWN_CHARS},
                  key=len, reverse=True)
    if not long:
        return _same

    def apply(text: str) -> str:
        for name in long:
            if name in text:
                text = text.replace(name, shorten(name))
        return text

    return apply


def _same(text: str) -> str:
    return text


def bounded(data: Any, fn: Callable[[str], str] = _same,
            limit: int = MAX_MESSAGE_CHARS) -> Any:
    """JSON data with `fn` applied to every string (keys too), then each string shortened to
    at most about `limit` characters: the last guard of every JSON report (`core._report`)."""
    if isinstance(data, str):
        return shorten(fn(data), limit)
    if isinstance(data, dict):
        return {bounded(k, fn, limit) if isinstance(k, str) else k: bounded(v, fn, limit)
                for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [bounded(v, fn, limit) for v in data]
    return data


def number_text(value: Any) -> str:
    """A map argument as a person reads it: 0.99, not 0.9900000000000001; strings as JSON."""
    if isinstance(value, float):
        return f"{value:g}"
    return value if isinstance(value, str) else json.dumps(value)
