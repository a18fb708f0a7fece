"""Text from data made safe for a terminal: one line, no control characters.

Why: field names, schema titles and run configurations come from files other people write. Printed
raw, a name holding a newline or an escape sequence could forge report lines (`holds: no
problems`) or repaint the terminal. Text reports pass such text through `printable`.
"""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: str) -> str:
    """`text` with every non-printable character (line breaks, ESC, BEL, lone surrogates, ...)
    shown as its Python escape (`\\n`, `\\x1b`, `\\ud800`); printable text is returned as is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
