"""What every command shares on its command line: exit codes in its help, help for `--format`,
`-o FILE` / `--out-dir DIR`, the usage error.

Light on purpose (argparse and textwrap only): every command's parser is built from it when
`gyre-contract` starts, `--version` and `--help` included, before any machinery is imported.

`finish_parser` runs on each command's parser after the command built it, so that a command
(even one added later) cannot forget its exit codes or leave `--format` without help text;
`tests/cli/test_conventions.py` checks every flag of every command has help.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any


class UsageError(Exception):
    """Bad command-line usage (exit 2)."""


EXIT_CODES: dict[str, str] = {
    "export": "0 written, or (--check) the files match the models; 1 (--check) a file drifted "
              "or is missing; 2 usage, a folder that cannot be written, or (--check) no such "
              "folder",
    "validate": "0 the contract holds; 1 any problem (each with its line); 2 usage, a missing "
                "or unreadable file, a directory, a bad --model or --schema",
    "diff": "0 nothing missing; 1 something missing (--strict: or any conversion); 2 usage or "
            "unusable input (bad JSON, a remote $ref, a $ref cycle, a schema over the limits)",
    "compat": "0 compatible; 1 a breaking change; 2 usage or unusable input",
    "infer": "0 the schema is written; 2 usage, or a file that cannot be read or described "
             "(no records, not an object, too deeply nested)",
    "batch": "0 the batch holds; 1 a missing field, a batch that breaks §4, stale policy "
             "versions, a loss that raises or is not finite; 2 usage, an unusable map or file",
    "runs": "0 the run log reads; 1 a bad line of the run log (named); 2 usage or an "
            "unreadable or empty file",
    "demo": "0 every stage passes; 1 a stage fails; 2 usage or a missing extra",
    "channel": "0 the two ends' counts agree (status), the map runs on the sampler's records "
               "(check); 1 the counts disagree (a segment missing or unreadable); 2 usage, not "
               "a channel, or the handshake refuses the map (check)",
    "show": "0 the episode holds; 1 it breaks a rule (marked); 2 usage, an unreadable file or "
            "no such episode",
}
OUTPUTS: dict[str, str] = {"out": "-o", "write_map": "--write-map", "plot": "--plot",
                           "out_dir": "--out-dir"}
"""The dests of the options that name what a command writes (with the option a message names).
Every other file a command line names is an input, which no output may replace
(`common.outputs_guarded`)."""

TO_STDOUT: dict[str, str] = {"infer": "out"}
"""The outputs that `-` sends to stdout: text the command would print anyway. Everywhere else
stdout carries the report (or the output is binary, or a folder), so `-` is refused."""

DEFAULT_EXIT_CODES = "0 the contract holds; 1 it is violated; 2 usage or unusable input"

FORMAT_HELP = {
    "text": "text for people (default)",
    "json": "JSON on stdout: exactly the report's to_dict(), for scripts",
    "markdown": "a Markdown table, for a pull request",
}


OPS_HELP = ("import MODULE or FILE.py first (repeatable) so that it can add the ops a map "
            "names with gyre_contract.register_op; its top-level code runs (a script's "
            "`if __name__ == '__main__':` block does not); nothing is ever imported because a "
            "data or map file says so")
"""The help text of `--ops` (batch, diff)."""

BATCH_DIMS_SPELLINGS = ("B,T (batch-major), T,B (time-major), M or T*N (flat: real steps only), "
                        "B (token rows: one per generation), M (packed token rows)")
"""The spellings of `--batch-dims` (batch, diff): `schema._layouts.BATCH_DIMS_SPELLINGS`, which
tests/cli/test_conventions.py holds this to, spelled here so that no parser imports the schema
machinery."""


def exit_codes_epilog(command: str) -> str:
    """The `exit codes: ...` line a command's --help ends with."""
    return f"exit codes: {EXIT_CODES.get(command, DEFAULT_EXIT_CODES)}"


def finish_parser(command: str, parser: argparse.ArgumentParser) -> None:
    """Give `parser` the shared conventions: its exit codes after any epilog it has (an
    example stays), one per line, and help for a `--format` that has none."""
    epilog = parser.epilog or ""
    if "exit codes:" in epilog:
        epilog = epilog[:epilog.index("exit codes:")].rstrip()
    parser.epilog = "\n\n".join(part for part in (epilog, exit_codes_epilog(command)) if part)
    parser.formatter_class = ParagraphFormatter
    for action in parser._actions:
        if "--format" in action.option_strings and not action.help:
            choices = list(action.choices or ("text", "json"))
            action.help = "output: " + "; ".join(
                f"{c}: {FORMAT_HELP.get(c, c)}" for c in choices)


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0 (a policy version, a staleness bound), so that a
    negative one stops at the flag (usage, exit 2) instead of running into a window such as
    `expected 3..2` that nothing can meet."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}")
    return value


class ParagraphFormatter(argparse.HelpFormatter):
    """argparse's help layout, but a description or epilog keeps its paragraphs (blank lines):
    an example and the exit codes stay apart."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(textwrap.fill(" ".join(part.split()), width, initial_indent=indent,
                                          subsequent_indent=indent, break_on_hyphens=False,
                                          break_long_words=False)
                           for part in text.split("\n\n") if part.strip())


def add_out_dir(parser: argparse.ArgumentParser, *, default: Any, help: str,
                type: Any = str) -> None:
    """`--out-dir DIR`: a folder (`-o` names a file everywhere)."""
    parser.add_argument("--out-dir", dest="out_dir", metavar="DIR", default=default, type=type,
                        help=help)
