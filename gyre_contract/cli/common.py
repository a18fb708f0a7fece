"""Helpers shared by the commands: usage errors, output in text or JSON, importing a user's `module:name`."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from gyre_contract.core.errors import InputError


class UsageError(Exception):
    """Bad command-line usage (exit 2)."""


def emit(out: TextIO, fmt: str, data: Any, lines: Iterable[str]) -> None:
    """Write `data` as JSON when asked, else the text lines."""
    if fmt == "json":
        out.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    else:
        for line in lines:
            out.write(line + "\n")


def import_named(spec: str, option: str, kind: str) -> Any:
    """Import `module:NAME` or `file.py:NAME` that the user named on the command line.

    Only that module is imported (the current folder is searched first, like `python -m`);
    nothing a data, schema or map file says is ever imported. `kind` names NAME in messages.
    """
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{option} must be MODULE:{kind} or FILE.py:{kind}, got {spec!r}")
    if module_name.endswith(".py"):
        module = _import_file(module_name, option)
    else:
        module = _import_module(module_name, option)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise InputError(f"{option}: {module_name!r} has no {attr!r}") from None


def _import_module(name: str, option: str) -> Any:
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise InputError(f"{option}: cannot import {name!r}: {exc}") from None
    finally:
        if added:
            sys.path.remove(cwd)


def _import_file(path: str, option: str) -> Any:
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{option}: no such file: {path}")
    name = f"_gyre_user_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise InputError(f"{option}: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
