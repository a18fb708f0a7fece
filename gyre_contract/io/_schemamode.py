"""Checking a JSON Lines file against a JSON Schema document instead of a model.

What `validate_file(path, schema=...)` and `gyre-contract validate --schema S.json` run: each
record is checked by jsonschema's Draft 2020-12 validator, `$ref` resolved inside the document
only (never fetched). The episode rules are not applied (a schema does not say what an episode
is); the line checks of `lines.Lines` are the same as with a model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from gyre_contract.core._errors import Problem, SchemaError, describe
from gyre_contract.core._text import shorten
from gyre_contract.io._lines import Lines, Parsed, join_path
from gyre_contract.io._report import FieldStats, FileReport, ProblemGroups, finish_report
from gyre_contract.io._schemakeywords import (
    check_expansion,
    check_patterns,
    linear_validator_class,
)


def check_with_schema(
    lines: Lines, schema: Mapping[str, Any], *, path: str | os.PathLike[str],
    require_complete: bool, max_examples_per_group: int,
) -> FileReport:
    """The `FileReport` of every line of `lines` checked against `schema` (episode rules not
    checked: the report's episode counts are None)."""
    from referencing.exceptions import Unresolvable

    groups = ProblemGroups(max_examples_per_group)
    stats = FieldStats(None)
    validator = _schema_validator(schema)
    records = steps = 0
    for item in lines:
        if isinstance(item, Parsed):
            groups.add(item.problems)
            if item.record is None:
                continue
            n, record = item.line, item.record
        else:
            n, record = item
        records += 1
        stats.record(record)
        stats.json_record(record)
        try:
            errors = sorted(validator.iter_errors(record), key=lambda e: list(map(str, e.path)))
        except Unresolvable as err:
            raise SchemaError(f"schema $ref cannot be resolved inside the document: {err}"
                              ) from None
        except RecursionError:  # jsonschema recurses per level of the record and per $ref
            if _depth(record) <= _SHALLOW:
                raise SchemaError("schema: validation never ends: a $ref leads back to itself "
                                  "without descending into the record ($ref cycle)") from None
            groups.add([Problem("", "a record the JSON Schema validator can walk",
                                "nesting too deep to check", "nested too deeply", line=n)])
            continue
        if errors:
            groups.add(_schema_problem(e, n) for e in errors)
        else:
            steps += 1
    title = shorten(str(schema.get("title") or schema.get("$id") or "a JSON Schema"))
    report = FileReport(path="", checked_against=f"JSON Schema {title}", records=records,
                        steps=steps)
    return finish_report(report, groups, stats, path=path, lines=lines.lines,
                         require_complete=require_complete, tail_bytes=lines.tail_bytes)


_SHALLOW = 32
"""A record at most this deep cannot exhaust the stack by itself: a RecursionError then means
the schema loops (`{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}`)."""


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value (0 for a scalar), without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, (dict, list)):
            depth += 1
            deepest = max(deepest, depth)
            todo += [(v, depth) for v in (node.values() if isinstance(node, dict) else node)]
    return deepest


def _schema_validator(schema: Mapping[str, Any]) -> Any:
    """Draft 2020-12 validator that resolves `$ref` inside the document only, never fetching,
    and runs regexes and `uniqueItems` in linear time (`schemakeywords`)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError as JsonSchemaError
    from referencing import Registry
    from referencing.exceptions import NoSuchResource

    # referencing builds its classes with an attrs wrapper whose fields mypy cannot see
    def refuse(uri: str) -> Any:
        raise NoSuchResource(ref=uri)  # type: ignore[call-arg]

    try:
        Draft202012Validator.check_schema(schema)
    except JsonSchemaError as err:
        raise SchemaError(f"not a valid Draft 2020-12 schema: {err.message}") from None
    check_patterns(schema)
    check_expansion(schema)  # before any record: $refs that multiply never reach a record
    registry: Registry[Any] = Registry(retrieve=refuse)  # type: ignore[call-arg]
    return linear_validator_class()(schema, registry=registry)


def _schema_problem(error: Any, n: int) -> Problem:
    path = ""
    for part in error.absolute_path:
        path = f"{path}[{part}]" if isinstance(part, int) else join_path(path, str(part))
    message = error.message if len(error.message) <= 80 else error.message[:77] + "..."
    expected = f"{error.validator}: {json.dumps(error.validator_value, default=str)}"
    if len(expected) > 80:
        expected = expected[:77] + "..."
    return Problem(path, expected, describe(error.instance), message, line=n)
