"""`gyre-contract`: the parser, the commands' dispatch and the exit codes (`main`, `run`).

Exit codes: 0 the contract holds, 1 it is violated, 2 unusable input or usage, 130 interrupted
(Ctrl-C).
Errors are one line on stderr; with `--format json` a command's error is a JSON object on stdout
instead (`common.write_json_error`), same exit code. `--debug` shows the traceback.

Start-up stays light: the parsers are built from the commands' modules, which import only
argparse and `_conventions` at their top; a command imports its machinery (numpy, pydantic,
the models, files, schemas, the harness) in its `run`, so `--version`, `--help` and a
command's `--help` import none of it (tests/test_package.py).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NoReturn, TextIO

from gyre_contract import __version__
from gyre_contract.cli._conventions import UsageError, finish_parser

EXIT_OK, EXIT_VIOLATED, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

# Each command lives in gyre_contract/cli/_<name>.py with add_parser(subparsers) and run(args, out, err).
COMMANDS = ("export", "validate", "show", "diff", "compat", "infer", "batch", "runs", "demo",
            "channel")


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as exit 2 without raising SystemExit into callers, and
    takes each option only as spelled (no prefixes: `--out` is not `--out-dir`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of the command `only` alone (its parsing, help and
    errors are the same: each command's parser is its own)."""
    parser = _Parser(
        prog="gyre-contract",
        description="Check the contract between an RL sampler and its trainer.",
        epilog="exit codes: 0 holds, 1 contract violated, 2 usage or unreadable input, "
        "130 interrupted (Ctrl-C)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"gyre-contract {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS if only is None else (only,):
        module = _command(name)
        if module is not None:
            module.add_parser(sub)
    for name, command_parser in sub.choices.items():
        finish_parser(name, command_parser)
    return parser


def named_command(argv: Sequence[str]) -> str | None:
    """The command `argv` runs when nothing before it but `--debug` concerns the whole program
    (`-h` there lists every command), else None: then every command's parser is built."""
    for arg in argv:
        if arg != "--debug":
            return arg if arg in COMMANDS else None
    return None


def _command(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"gyre_contract.cli._{name}")
    except ModuleNotFoundError as err:
        if err.name == f"gyre_contract.cli._{name}":
            return None
        raise


def run(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
        stderr: TextIO | None = None) -> int:
    """Run one command; return its exit code. Streams are injectable for tests."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    args = None
    try:
        with contextlib.redirect_stdout(out):  # argparse prints --help to sys.stdout
            # only the command named is built: the others' parsers cost more than its parsing
            args = build_parser(named_command(argv)).parse_args(argv)
        if args.command is None:
            build_parser().print_help(out)
            return EXIT_INPUT
        from gyre_contract.cli._common import outputs_guarded

        with outputs_guarded(args):
            return args.run(args, out, err)
    except SystemExit as exc:  # --help and --version exit through argparse
        return int(exc.code or 0)
    except Exception as exc:
        code = _exit_code(exc)
        if code is None:  # not an error of the input or the contract: a bug, shown as one
            raise
        if args is not None and getattr(args, "format", None) == "json":  # the command's, as JSON
            from gyre_contract.cli._common import write_json_error

            if debug:
                traceback.print_exception(exc, file=err)
            write_json_error(out, exc, code, args.command, getattr(args, "json_error", None))
        elif isinstance(exc, UsageError):
            print(str(exc), file=err)
        else:
            _report(exc, err, debug)
        return code


def _exit_code(exc: Exception) -> int | None:
    """The exit code of an error reported as a line (a usage error, an OSError, a GyreError),
    None for any other exception. An error may carry its own code: a refused channel handshake
    is unusable input (2)."""
    if isinstance(exc, (UsageError, OSError)):
        return getattr(exc, "exit_code", None) or EXIT_INPUT
    # a GyreError comes from code that imported core._errors: importing it here is free then
    from gyre_contract.core._errors import ContractError, GyreError

    if not isinstance(exc, GyreError):
        return None
    return getattr(exc, "exit_code", None) or (
        EXIT_VIOLATED if isinstance(exc, ContractError) else EXIT_INPUT)


def _report(exc: BaseException, err: TextIO, debug: bool) -> None:
    from gyre_contract.cli._common import error_text

    if debug:
        traceback.print_exception(exc, file=err)
    print(f"error: {error_text(exc)}", file=err)


class ReaderGoneStdout:
    """stdout that goes quiet when its reader has gone (`gyre-contract validate F | head -1`).

    On BrokenPipeError the stream is pointed at /dev/null and the command carries on, so it
    exits with its own verdict (0 holds, 1 violated), never 2 with "Broken pipe" or a traceback.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def _reader_gone(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.stream.fileno())  # what is still buffered goes nowhere
        finally:
            os.close(devnull)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point. Ctrl-C (SIGINT) ends any command with the one line
    `interrupted` on stderr and exit 130, never a traceback: every output is written
    atomically (`io._atomic`), so the previous file is still whole and the temporary one gone."""
    out = ReaderGoneStdout(sys.stdout)
    try:
        # it writes, flushes and says whether it is a terminal: all that the commands ask of stdout
        code = run(argv, stdout=out)  # type: ignore[arg-type]
        out.flush()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C cannot cut this short
        print("interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    sys.exit(code)
