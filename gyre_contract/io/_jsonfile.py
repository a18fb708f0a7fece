"""Strict reading of one JSON document from a file: schemas and field maps come from other repos.

Strict means: at most a stated size, UTF-8, no NaN/Infinity, no duplicate keys, no lone
surrogates, bounded nesting. Python's `json` accepts the middle three silently; each would let a
file mean something other than what a reader in another language sees.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from gyre_contract.core._errors import InputError
from gyre_contract.io._filekind import path_kind

# A lone surrogate can only come from a JSON escape; look for the escape before walking the tree.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


_BLOCK = 1 << 20
"""Bytes read at a time from a pipe by `read_bounded`."""


class JSONFileError(ValueError):
    """The file's content is not a strict JSON document; the message says why, without the path."""


def read_json_file(path: str | Path, *, what: str, max_bytes: int, limit_name: str) -> Any:
    """Parse `path` strictly. InputError when it cannot be read; JSONFileError when it is not JSON.

    `what` names the file in messages ("schema", "field map"); `limit_name` is the constant a
    user can look up when the size limit is hit.
    """
    return loads_strict(read_bounded(path, what=what, max_bytes=max_bytes,
                                     limit_name=limit_name, too_big=JSONFileError))


def refuse_devices(path: str | os.PathLike[str], what: str) -> None:
    """InputError for a device or socket (`/dev/zero`, `/dev/tty`): reading one never ends or
    makes no sense. Regular files and pipes (FIFOs, `<(...)`) pass; a missing path passes (the
    caller's open reports it)."""
    kind = path_kind(path)
    if kind is not None and kind != "a FIFO":
        raise InputError(f"cannot read {what} {os.fspath(path)}: not a regular file ({kind})")


def read_bounded(path: str | Path, *, what: str, max_bytes: int, limit_name: str,
                 too_big: type[Exception] = InputError) -> bytes:
    """The bytes of `path`, reading at most `max_bytes + 1` whatever `stat` says (a pipe or a
    `/proc` file reports size 0); more than `max_bytes` raises `too_big`. Devices are refused
    unread (`refuse_devices`); a file that cannot be opened raises InputError."""
    path = Path(path)
    refuse_devices(path, what)
    # JSONFileError is prefixed with the path by its caller; an InputError is the whole line
    label = f"{what} file" if too_big is not InputError else f"{what} file {path}"
    try:
        with path.open("rb", buffering=0) as handle:
            info = os.fstat(handle.fileno())
            if info.st_size > max_bytes:
                raise too_big(f"{label} is {info.st_size} bytes, more than the limit of "
                              f"{max_bytes} ({limit_name})")
            # a regular file in one read of its size (+1 to see growth); anything else in
            # blocks, so memory follows what arrives, never the limit
            want = info.st_size + 1 if stat.S_ISREG(info.st_mode) else _BLOCK
            chunks, total = [], 0
            while total <= max_bytes:
                block = handle.read(min(want, max_bytes + 1 - total))
                if not block:
                    break
                chunks.append(block)
                total += len(block)
                want = _BLOCK
            raw = b"".join(chunks)
    except OSError as exc:
        if isinstance(exc, too_big):
            raise
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if len(raw) > max_bytes:
        raise too_big(f"{label} holds more than {max_bytes} bytes, the limit "
                      f"({limit_name})")
    return raw


def loads_strict(raw: bytes) -> Any:
    """Parse bytes as one strict JSON document (see the module docstring)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONFileError(f"not UTF-8 text (byte {exc.start})") from None
    try:
        doc = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise JSONFileError(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise JSONFileError("not JSON: nested too deeply") from None
    except JSONFileError:
        raise
    except ValueError:  # an integer literal longer than Python's int_max_str_digits
        raise JSONFileError(f"not JSON: integer literal with more than "
                            f"{sys.get_int_max_str_digits()} digits") from None
    if _SURROGATE_ESCAPE.search(text):
        _refuse_lone_surrogates(doc)
    return doc


def _reject_constant(name: str) -> Any:
    raise JSONFileError(f"not JSON: {name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise JSONFileError(f"not JSON: duplicate key {json.dumps(key)} "
                                f"(JSON readers keep only one)")
        doc[key] = value
    return doc


def _refuse_lone_surrogates(doc: Any) -> None:
    """A lone surrogate (`\\ud800`) is not text: it cannot be printed or sent to another reader."""
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack += node
            stack += node.values()
        elif isinstance(node, list):
            stack += node
        elif isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad = node[exc.start:exc.end].encode("utf-8", "backslashreplace").decode()
                raise JSONFileError(f"not JSON: lone surrogate {bad} in a string "
                                    f"(not valid Unicode)") from None
