"""What kind of file a path is, in words for a message: a FIFO, a device, a socket.

Why: reading a FIFO with no writer blocks forever, reading `/dev/zero` never ends, and writing
an output "onto" either replaces it with a regular file (as root, `/dev/stdout` itself). Readers,
folder listings and output files ask the same question here.
"""

from __future__ import annotations

import os
import stat

__all__ = ["path_kind", "special_kind"]

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(mode: int) -> str | None:
    """`"a FIFO"`, `"a character device"`, `"a block device"` or `"a socket"` for such an
    `st_mode`; None for a regular file, a folder or a link."""
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return None


def path_kind(path: str | os.PathLike[str]) -> str | None:
    """`special_kind` of what `path` names after its links; None when it cannot be stat'ed."""
    try:
        return special_kind(os.stat(path).st_mode)
    except (OSError, ValueError):
        return None
