"""Helpers shared by the commands: output in text or JSON, importing a user's `module:name`."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from typing import Any, TextIO

from gyre_contract.errors import InputError


def emit(out: TextIO, fmt: str, data: Any, lines: Iterable[str]) -> None:
    """Write `data` as JSON when asked, else the text lines."""
    if fmt == "json":
        out.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    else:
        for line in lines:
            out.write(line + "\n")


def import_object(spec: str, what: str) -> Any:
    """Import `module:name` that the user named on the command line (and nothing else)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{what} must be module:name, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise InputError(f"cannot import {module_name!r} for {what}: {err}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise InputError(f"{module_name!r} has no {attr!r} (for {what})") from None
