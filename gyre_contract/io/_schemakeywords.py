"""JSON Schema keywords whose stock jsonschema implementation can run for minutes, made linear.

jsonschema runs `pattern` and `patternProperties` with Python's backtracking `re`: `^(a+)+$`
against a 41-character string never finishes. Here they run on RE2 (google-re2), whose matching
time is linear in the input. `uniqueItems` compares every pair of objects (5,000 objects: 23 s);
here it hashes a canonical form of each item. What RE2 cannot compile (look-around,
back-references) makes the schema unusable (`SchemaError`, exit 2), never silently skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any

from gyre_contract.core._errors import SchemaError

MAX_UNEVALUATED_NESTING = 8
"""Most `unevaluatedProperties` / `unevaluatedItems` keywords nested inside one another (through
applicators and local `$ref`s). jsonschema re-validates every nested level for each enclosing
one: the time doubles per level (18 levels: 80 s for one record)."""

MAX_PATTERN_BYTES = 4096
"""Longest `pattern` / `patternProperties` regex accepted (RE2 also bounds its compiled size)."""

# ECMA-262 writes a code point as \uXXXX; RE2 as \x{XXXX}. Only an unescaped backslash counts.
_ECMA_UNICODE_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9a-fA-F]{4})")


@lru_cache(maxsize=1024)
def compiled_pattern(pattern: str) -> Any:
    """`pattern` (ECMA-262 syntax as JSON Schema writes it) compiled by RE2, or SchemaError."""
    import re2

    if len(pattern.encode("utf-8", "surrogatepass")) > MAX_PATTERN_BYTES:
        raise SchemaError(f"schema: regex pattern longer than {MAX_PATTERN_BYTES} bytes "
                          f"(MAX_PATTERN_BYTES)")
    options = re2.Options()
    options.log_errors = False  # RE2 would print to stderr; the error is raised instead
    translated = _ECMA_UNICODE_ESCAPE.sub(r"\1\\x{\2}", pattern)
    try:
        return re2.compile(translated, options)
    except (re2.error, TypeError, ValueError) as err:
        reason = err.args[0].decode("utf-8", "replace") if err.args and isinstance(
            err.args[0], bytes) else str(err)
        raise SchemaError(f"schema: regex {pattern!r} cannot be run in linear time "
                          f"(RE2: {reason}); look-around and back-references are not "
                          f"supported") from None


def check_patterns(schema: Any) -> None:
    """Compile every `pattern` and `patternProperties` key of `schema` now, so a regex RE2
    cannot run is reported before any record is read; also refuses what would fall back to
    Python's `re` inside jsonschema (`unevaluatedProperties` next to `patternProperties`)."""
    keywords: set[str] = set()
    for node in _subschemas(schema):
        keywords.update(node)
        if isinstance(node.get("pattern"), str):
            compiled_pattern(node["pattern"])
        if isinstance(node.get("patternProperties"), Mapping):
            for key in node["patternProperties"]:
                compiled_pattern(key)
    nesting = unevaluated_nesting(schema)
    if nesting > MAX_UNEVALUATED_NESTING:
        raise SchemaError(f"schema: unevaluatedProperties/unevaluatedItems nested {nesting} deep, "
                          f"more than {MAX_UNEVALUATED_NESTING} (MAX_UNEVALUATED_NESTING): "
                          f"validation time doubles with each level")
    if {"unevaluatedProperties", "patternProperties"} <= keywords:
        raise SchemaError("schema: unevaluatedProperties together with patternProperties is not "
                          "supported (jsonschema would run the patterns with Python's "
                          "backtracking regex engine, which can take minutes per record)")


_UNEVALUATED = ("unevaluatedProperties", "unevaluatedItems")

MAX_EXPANDED_SUBSCHEMAS = 200_000
"""Most subschemas one place of a record may be checked against once local `$ref`s are
expanded: as many as a schema may hold written out (`MAX_NODES`). `$defs` whose schemas each
`allOf` two `$ref`s to the next double the work per definition (20 of them, 1.5 KB: 25 s for one
record); the written size says nothing about it."""

_DATA_KEYS = ("const", "enum", "default", "examples")
"""Keywords that hold data, not subschemas."""


def check_expansion(schema: Any) -> None:
    """SchemaError when checking one record against `schema` could visit more than
    `MAX_EXPANDED_SUBSCHEMAS` subschemas (`expanded_size`), with the numbers."""
    expanded, written, heaviest = expanded_size(schema)
    if expanded > MAX_EXPANDED_SUBSCHEMAS:
        where = f"; {heaviest[0]} alone expands to {_count(heaviest[1])}" if heaviest else ""
        raise SchemaError(
            f"schema: its $refs expand to {_count(expanded)} subschemas ({_count(written)} "
            f"written), more than {MAX_EXPANDED_SUBSCHEMAS:,} (MAX_EXPANDED_SUBSCHEMAS): each "
            f"record would be checked against all of them{where}")


def expanded_size(schema: Any) -> tuple[int, int, tuple[str, int] | None]:
    """(expanded, written, heaviest): how many subschemas the schema holds with every local
    `$ref` replaced by what it points to, how many it holds as written, and the `$ref` target
    that expands most (with its size), or None when there is no `$ref`.

    Memoised per subschema, so the count takes time linear in the written schema even when
    the expansion is exponential. A `$ref` back to a subschema being expanded (recursion, as in
    a tree) counts once: the record's own nesting pays for each further level. `$defs` count
    only where a `$ref` uses them."""
    expanded, memo = _fold(schema, lambda node: int(isinstance(node, Mapping)), sum, cycle=1,
                           skip=("$defs", "definitions"))
    resolve = _resolver(schema)
    refs = {node["$ref"] for node in _subschemas(schema) if isinstance(node.get("$ref"), str)}
    targets = {ref: memo[id(resolve(ref))] for ref in refs if id(resolve(ref)) in memo}
    heaviest = max(targets.items(), key=lambda item: item[1], default=None)
    return expanded, sum(1 for _ in _subschemas(schema)), heaviest


def unevaluated_nesting(schema: Any) -> int:
    """How many objects carrying an `unevaluated*` keyword lie on the deepest path of the
    schema, following local `$ref`s (a `$ref` cycle is walked once)."""
    return _fold(schema, lambda node: int(isinstance(node, Mapping) and any(
        k in node for k in _UNEVALUATED)), lambda values: max(values, default=0), cycle=0)[0]


def _fold(schema: Any, own: Callable[[Any], int], join: Callable[[list[int]], int], *,
          cycle: int, skip: tuple[str, ...] = ()) -> tuple[int, dict[int, int]]:
    """`own(node) + join(values of its children)` over the schema, a local `$ref` counting as a
    child of the object that holds it; a `$ref` back to a node being walked is worth `cycle`.
    Memoised per node (returned, by `id`), so linear in the written schema; keys in `skip`
    (and data keywords) are not walked."""
    resolve = _resolver(schema)
    memo: dict[int, int] = {}

    def walk(node: Any, path: frozenset[int]) -> int:
        if id(node) in memo:
            return memo[id(node)]
        if id(node) in path:
            return cycle
        path = path | {id(node)}
        if isinstance(node, list):
            children = [v for v in node if isinstance(v, (dict, list))]
        elif isinstance(node, Mapping):
            children = [v for k, v in node.items() if k not in _DATA_KEYS and k not in skip
                        and isinstance(v, (dict, list))]
            target = resolve(node["$ref"]) if isinstance(node.get("$ref"), str) else None
            if isinstance(target, (dict, list)):
                children.append(target)
        else:
            children = []
        values = []
        for child in children:  # a loop, not a comprehension: one frame less per level
            values.append(walk(child, path))
        memo[id(node)] = own(node) + join(values)
        return memo[id(node)]

    try:
        return walk(schema, frozenset()), memo
    except RecursionError:
        raise SchemaError("schema: $ref chain too long to check") from None


def _count(n: int) -> str:
    """`1,048,575`, or `about 10^301` for a number too long to read."""
    return f"{n:,}" if n < 10**15 else f"about 10^{len(str(n)) - 1}"


def _resolver(schema: Any) -> Any:
    """A function from a local `$ref` (`#/$defs/a`, `#`) to the node it names, or None."""

    def resolve(ref: str) -> Any:
        if ref == "#":
            return schema
        if not ref.startswith("#/"):
            return None
        node = schema
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    return resolve


def _subschemas(schema: Any) -> Iterator[Mapping[str, Any]]:
    """Every object of the schema that sits where a subschema may be (not inside `const`,
    `enum`, `default` or `examples`, which hold data)."""
    todo = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo += node
        elif isinstance(node, Mapping):
            yield node
            todo += (v for k, v in node.items()
                     if k not in _DATA_KEYS and isinstance(v, (dict, list)))


def _search(pattern: str, text: str) -> bool:
    return compiled_pattern(pattern).search(text) is not None


def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
    """`pattern`, matched by RE2."""
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not _search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any,
                       schema: Any) -> Iterator[Any]:
    """`patternProperties`, matched by RE2."""
    if not validator.is_type(instance, "object"):
        return
    for regex, subschema in patterns.items():
        for key, value in instance.items():
            if _search(regex, key):
                yield from validator.descend(value, subschema, path=key, schema_path=regex)


def additional_properties(validator: Any, additional: Any, instance: Any,
                          schema: Any) -> Iterator[Any]:
    """`additionalProperties`, with `patternProperties` matched by RE2 (same messages as
    jsonschema's)."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = {key for key in instance if key not in properties
              and not any(_search(regex, key) for regex in patterns)}
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            listed = ", ".join(repr(each) for each in sorted(patterns))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            joined = ", ".join(repr(each) for each in sorted(extras, key=str))
            yield ValidationError(f"Additional properties are not allowed ({joined} {verb} "
                                  f"unexpected)")


def unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """`uniqueItems` in linear time: items are equal when their canonical forms are (JSON
    equality: 1 == 1.0, true != 1, key order ignored)."""
    from jsonschema.exceptions import ValidationError

    if not unique or not validator.is_type(instance, "array"):
        return
    seen: dict[Any, int] = {}
    for index, item in enumerate(instance):
        first = seen.setdefault(canonical(item), index)
        if first != index:
            yield ValidationError(f"non-unique elements: item {index} equals item {first}")
            return


def canonical(value: Any) -> Any:
    """A hashable form of a JSON value, equal exactly when the JSON values are equal."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("num", value)
    if isinstance(value, str):
        return ("str", value)
    if value is None:
        return ("null",)
    if isinstance(value, (list, tuple)):
        return ("array", tuple(canonical(v) for v in value))
    if isinstance(value, Mapping):
        return ("object", frozenset((k, canonical(v)) for k, v in value.items()))
    return ("other", repr(value))


@lru_cache(maxsize=1)
def linear_validator_class() -> Any:
    """Draft 2020-12 with the keywords above in place of jsonschema's."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import extend

    return extend(Draft202012Validator, {
        "pattern": pattern,
        "patternProperties": pattern_properties,
        "additionalProperties": additional_properties,
        "uniqueItems": unique_items,
    })
