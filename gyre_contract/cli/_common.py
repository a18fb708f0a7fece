"""Helpers shared by the commands as they run: error text, output in text or JSON, guarded
outputs, importing a user's `module:name` (a step model: `load_model`).

Imported when a command runs, never to build the parsers (`_conventions` holds what they need)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from gyre_contract.cli._conventions import OUTPUTS, TO_STDOUT, UsageError
from gyre_contract.core._errors import ContractError, InputError, SchemaError
from gyre_contract.core._text import MAX_MESSAGE_CHARS, printable, shorten
from gyre_contract.io._atomic import output_target, protect_inputs

if TYPE_CHECKING:
    from gyre_contract.core._models import RolloutStepV1


def error_text(exc: BaseException) -> str:
    """The message of an error as the CLI shows it: an OSError as `reason: file`; one line
    unless a ContractError lists several problems (one per line)."""
    text = str(exc).removeprefix("error: ") if isinstance(exc, UsageError) else str(exc)
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.strerror}: {exc.filename}"
    if not (isinstance(exc, ContractError) and len(exc.problems) > 1):
        text = printable(text)
    # a message that echoes a long name from the data stays readable (`core._text`)
    return "\n".join(shorten(line, MAX_MESSAGE_CHARS) for line in text.split("\n"))


def write_json_error(out: TextIO, exc: BaseException, code: int, command: str,
                     extra: dict[str, Any] | None = None) -> None:
    """A command's error under `--format json`: one JSON object on stdout instead of a line on
    stderr, `{"command", "ok": false, "exit_code", "error", "problems"}` (each problem with
    path, expected, got, message; empty unless the contract is violated), plus a command's own
    keys (`batch`: `"stage": "half_way"`). The exit code is the one text output gives."""
    problems = exc.problems if isinstance(exc, ContractError) else []
    data = {"command": command, **(extra or {}), "ok": False, "exit_code": code,
            "error": error_text(exc), "problems": [p.to_dict() for p in problems]}
    out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def emit(out: TextIO, fmt: str, data: Any, lines: Iterable[str]) -> None:
    """Write `data` as JSON when asked, else the text lines."""
    if fmt == "json":
        out.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    else:
        for line in lines:
            out.write(line + "\n")


@contextlib.contextmanager
def outputs_guarded(args: argparse.Namespace) -> Iterator[None]:
    """Run a command so that no output replaces one of its inputs or lands on a FIFO or device.

    Every file the command line names outside the output options (`OUTPUTS`), and the FILE of a
    `FILE.py:NAME`, is an input: while the block runs, every atomic write refuses it, by device
    and inode (`io._atomic.protect_inputs`), so after links and under any name, and whatever
    path the command derives (`batch -o b` writes `b.npz`). Each output file is also checked
    before the command reads anything, so a refusal costs no work. `-` is stdout where the
    command allows it (`TO_STDOUT`), a usage error elsewhere.
    """
    inputs: list[str] = []
    for dest, value in vars(args).items():
        if dest in OUTPUTS:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, (str, os.PathLike)):
                name = os.fspath(item)
                head, sep, _ = name.rpartition(":")
                inputs += [name, head] if sep and head else [name]
    with protect_inputs(inputs):
        for dest, option in OUTPUTS.items():
            value = getattr(args, dest, None)
            if value is None:
                continue
            if os.fspath(value) == "-":
                if dest == "out_dir":
                    raise UsageError(f"error: {option} -: a folder cannot be stdout; name a "
                                     f"folder")
                if TO_STDOUT.get(args.command) != dest:
                    raise UsageError(f"error: {option} -: stdout carries the report of "
                                     f"{args.command}; name a file")
            elif dest != "out_dir":
                output_target(value)
        yield


def import_named(spec: str, option: str, kind: str) -> Any:
    """Import `module:NAME` or `file.py:NAME` that the user named on the command line.

    Importing runs the module's top-level code, as `import` does: name a module that only
    defines things (`models:CartPoleStep`). A script path is imported under its own module
    name, never as `__main__`, so its `if __name__ == "__main__":` block does not run. Only that
    module is imported (the current folder is searched first, like `python -m`); nothing a data,
    schema or map file says is ever imported. `kind` names NAME in messages. A module that
    fails while it is imported (an exception, `sys.exit`) is an InputError naming it (exit 2).
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


def import_ops(specs: Iterable[str], option: str = "--ops") -> None:
    """Import each `MODULE` or `FILE.py` the user named so that it can call `register_op`
    (guarded as `import_named`: a script's `__main__` block stays shut; a failure is an
    InputError naming it)."""
    for spec in specs:
        if not spec or ":" in spec:
            raise InputError(f"{option} takes MODULE or FILE.py (imported so that it registers "
                             f"its ops with register_op), got {spec!r}")
        if spec.endswith(".py"):
            _import_file(spec, option)
        else:
            _import_module(spec, option)


def load_function(spec: str, option: str) -> Callable[..., Any]:
    """Import `module:function` or `file.py:function` that the user named, and nothing else."""
    fn = import_named(spec, option, "FUNCTION")
    if not callable(fn):
        raise InputError(f"{option}: {spec} is not callable")
    return fn


def load_model(spec: str) -> type[RolloutStepV1]:
    """Import the step model the user named (`--model`): `module:Class` or `file.py:Class`,
    nothing else."""
    from gyre_contract.core._models import RolloutStepV1

    model = import_named(spec, "--model", "CLASS")
    if not (isinstance(model, type) and issubclass(model, RolloutStepV1)):
        raise SchemaError(f"--model: {spec} is not a step model (a subclass of RolloutStep), "
                          f"got {model!r}")
    return model


def _import_module(name: str, option: str) -> Any:
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise InputError(f"{option}: cannot import {name!r}: {exc}") from None
    except (Exception, SystemExit) as exc:
        raise InputError(f"{option}: importing {name!r} failed: {_failure(exc)}") from exc
    finally:
        if added:
            sys.path.remove(cwd)


def _import_file(path: str, option: str) -> Any:
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{option}: no such file: {path}")
    # its own name, never "__main__": the script's `if __name__ == "__main__":` block stays shut
    name = f"_gyre_user_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise InputError(f"{option}: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        del sys.modules[name]
        raise InputError(f"{option}: importing {path} failed: {_failure(exc)}") from exc
    return module


def _failure(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r}) while being imported"
    return f"{type(exc).__name__}: {exc}"
