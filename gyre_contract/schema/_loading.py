"""Loading a JSON Schema document safely: strict JSON, size limits, local `$ref`s only.

Only local `$ref`s (`#/...`, `#anchor`) are ever resolved; a remote or `file:` `$ref` is a
`SchemaError` and is never fetched or opened. Documents larger than `MAX_SCHEMA_BYTES`, with more
than `MAX_NODES` subschemas or nested deeper than `MAX_DEPTH` are refused with a `SchemaError`. A
schema file must be strict JSON: UTF-8, no NaN/Infinity, no duplicate keys, no lone surrogates
(`\\ud800`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gyre_contract.core._errors import SchemaError, describe
from gyre_contract.io._jsonfile import JSONFileError, read_json_file

MAX_SCHEMA_BYTES = 8 * 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 200_000

# Keywords whose value is one subschema / a list of them / a map of them (scanned for $ref).
_SUB_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains",
            "propertyNames", "unevaluatedItems", "unevaluatedProperties", "additionalItems")
_SUB_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUB_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def load_schema(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """Read a JSON Schema document and check it is safe to walk (local `$ref`s only, size limits).

    A path that cannot be read is an `InputError`; bad JSON, a document that is not an object, a
    remote `$ref` or a limit exceeded is a `SchemaError`. A mapping is checked the same way.
    """
    if isinstance(source, Mapping):
        doc: Any = dict(source)
        where = "schema"
    elif not isinstance(source, (str, Path)):
        raise SchemaError(f"a schema document must be a JSON object, got {describe(source)}")
    else:
        doc = _read_json(Path(source))
        where = str(source)
    if not isinstance(doc, dict):
        raise SchemaError(f"{where}: a schema document must be a JSON object, got {describe(doc)}")
    _check_refs(doc, where)
    return doc


def _read_json(path: Path) -> Any:
    try:
        return read_json_file(path, what="schema", max_bytes=MAX_SCHEMA_BYTES,
                              limit_name="MAX_SCHEMA_BYTES")
    except JSONFileError as exc:
        raise SchemaError(f"{path}: {exc}") from None


def _check_refs(doc: dict[str, Any], where: str) -> None:
    """Walk every subschema position; refuse any `$ref` that leaves the document."""
    root_id = doc.get("$id") if isinstance(doc.get("$id"), str) else None
    stack: list[tuple[Any, str, int]] = [(doc, "#", 0)]
    seen = 0
    while stack:
        node, pointer, depth = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise SchemaError(f"{where}: more than {MAX_NODES} subschemas (MAX_NODES)")
        if depth > MAX_DEPTH:
            raise SchemaError(f"{where}: {pointer}: nested deeper than {MAX_DEPTH} (MAX_DEPTH)")
        if not isinstance(node, dict):
            continue
        ref = node.get("$ref")
        if ref is not None:
            local_fragment(ref, root_id, f"{where}: {pointer}")
        for key in _SUB_ONE:
            if key in node:
                stack.append((node[key], f"{pointer}/{key}", depth + 1))
        for key in _SUB_LIST:
            if isinstance(node.get(key), list):
                for i, sub in enumerate(node[key]):
                    stack.append((sub, f"{pointer}/{key}/{i}", depth + 1))
        for key in _SUB_MAP:
            if isinstance(node.get(key), dict):
                for name, sub in node[key].items():
                    stack.append((sub, f"{pointer}/{key}/{name}", depth + 1))


def local_fragment(ref: Any, root_id: str | None, where: str) -> str:
    """The fragment of a local `$ref` ('' for the root); a `SchemaError` for anything else."""
    if not isinstance(ref, str):
        raise SchemaError(f"{where}: $ref must be a string, got {describe(ref)}")
    base, hash_, fragment = ref.partition("#")
    if base and base != root_id:
        raise SchemaError(
            f"{where}: $ref {ref!r} points outside this document; only local refs such as "
            f"'#/$defs/Name' are resolved, and remote or file refs are never fetched")
    if not hash_ and not base:
        raise SchemaError(f"{where}: empty $ref")
    return fragment

