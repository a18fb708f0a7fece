"""Field tables: any JSON Schema document flattened to one row per field (name, dtype, shape, role).

The diff compares field tables, never raw schemas. A table is read from our own schemas (the
`x-gyre-*` keys say dtype, shape and role), from a foreign schema with no `x-gyre-*` keys (dtype
from the JSON type, where `number` is a float of unknown width and `integer` an int of unknown
width; shape from nested arrays and `minItems`/`maxItems`; role from the synonym table), or from a
Pydantic model. `gyre_contract.schema._infer` infers a schema from real data.

Safety: documents are read by `gyre_contract.schema._loading.load_schema` (local `$ref`s only,
size limits). `$ref` cycles are a `SchemaError`. Documents with more than `MAX_FIELDS` fields,
nested deeper than `MAX_DEPTH` or with more than `MAX_RANK` dims are refused with a `SchemaError`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from gyre_contract.core._errors import SchemaError, describe
from gyre_contract.schema._export import json_schema
from gyre_contract.schema._loading import MAX_DEPTH, load_schema, local_fragment
from gyre_contract.schema._roles import ROLES, resolve_role

MAX_FIELDS = 5000
MAX_RANK = 32

UNKNOWN_DIM = "?"
VARIADIC_DIM = "*?"  # zero or more dims of unknown size (a recursive, any-depth array)
GYRE_DTYPES: tuple[str, ...] = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "string",
)
# dtypes a field table may carry besides GYRE_DTYPES: unknown widths and free-form objects.
LOOSE_DTYPES: tuple[str, ...] = ("number", "integer", "object")
_JSON_TYPES = {"number": "number", "integer": "integer", "boolean": "bool", "string": "string",
               "object": "object", "array": "array", "null": "null"}


Dim = int | str
Dtype = str | tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class Field:
    """One field: dotted `name`, `dtype` (None when unknown), `shape` (None when unknown), role.

    `dtype` is a contract dtype, `"number"` / `"integer"` for a JSON number of unknown width,
    `"object"` for free-form JSON, or a tuple when several are allowed (`("int64", "float32")`).
    `varying` lists the dims of `shape` that may change between the steps of an episode.
    `modalities` is True when the field also accepts an object of named modalities (an
    `anyOf`/`oneOf` branch of type object, as the contract's `observation` and `obs` have).
    """

    name: str
    dtype: Dtype
    shape: tuple[Dim, ...] | None
    role: str
    required: bool
    description: str = ""
    varying: tuple[str, ...] = ()
    role_score: float = 0.0
    role_how: str = "unknown"
    role_candidates: tuple[tuple[str, float], ...] = ()
    declared_role: bool = False
    modalities: bool = False

    @property
    def dtype_text(self) -> str:
        return dtype_text(self.dtype)

    @property
    def shape_text(self) -> str:
        return shape_text(self.shape)


def dtype_text(dtype: Dtype) -> str:
    """A dtype for people: `any` when unknown, `a|b` when several are allowed."""
    if dtype is None:
        return "any"
    return dtype if isinstance(dtype, str) else "|".join(dtype)


def shape_text(shape: tuple[Dim, ...] | None) -> str:
    """A shape for people: `[B, T, 4]`, `any` when unknown."""
    if shape is None:
        return "any"
    return "[" + ", ".join(str(d) for d in shape) + "]"


@dataclass(slots=True)
class FieldTable:
    """The fields of one schema document, in document order, plus its top-level `x-gyre-*` facts."""

    fields: dict[str, Field]
    name: str = ""
    title: str = ""
    kind: str | None = None
    version: str | None = None
    batch_dims: tuple[str, ...] | None = None
    varying_dims: tuple[str, ...] = ()
    closed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields.values())

    def __len__(self) -> int:
        return len(self.fields)

    def __getitem__(self, name: str) -> Field:
        return self.fields[name]

    def __contains__(self, name: object) -> bool:
        return name in self.fields

    def names(self) -> list[str]:
        """The field names in document order."""
        return list(self.fields)


# ---------------------------------------------------------------------------------------------
# Flattening


def field_table(
    schema_doc: str | Path | Mapping[str, Any], *, batch_dims: tuple[str, ...] | None = None,
    name: str = "",
) -> FieldTable:
    """Flatten a JSON Schema document (or a path to one) into a `FieldTable`.

    `batch_dims` overrides the document's `x-gyre-batch-dims` (for a foreign trainer schema).
    """
    if isinstance(schema_doc, (str, Path)):
        name = name or str(schema_doc)
    doc = load_schema(schema_doc)
    walker = _Walker(doc, name or str(doc.get("title") or "schema"))
    root = walker.deref(doc, "#", ())
    if not isinstance(root.node, dict) or not isinstance(root.node.get("properties"), dict):
        raise SchemaError(f"{walker.where}: not an object schema: the document has no "
                          f"'properties' (a field table needs named fields)")
    varying = _string_list(doc.get("x-gyre-varying-dims", []), "x-gyre-varying-dims", walker.where)
    walker.varying = frozenset(varying)
    walker.object_fields(root.node, "", True, "#", 0, root.refs)
    declared_batch = doc.get("x-gyre-batch-dims")
    if batch_dims is None and declared_batch is not None:
        batch_dims = tuple(_string_list(declared_batch, "x-gyre-batch-dims", walker.where))
    return FieldTable(
        fields=walker.fields, name=walker.where, title=_text(doc.get("title")),
        kind=_optional_text(doc.get("x-gyre-kind")), version=_optional_text(doc.get("x-gyre-version")),
        batch_dims=tuple(batch_dims) if batch_dims is not None else None,
        varying_dims=tuple(varying), closed=root.node.get("additionalProperties") is False,
        extra={k: doc[k] for k in ("x-gyre-layout", "x-gyre-token-budget") if k in doc},
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _string_list(value: Any, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SchemaError(f"{where}: {key} must be a list of dim names, got {describe(value)}")
    return list(value)


class _RefCycle(SchemaError):
    """A `$ref` that leads back to itself; allowed only as a recursive array (any depth)."""


@dataclass(slots=True)
class _Resolved:
    node: Any
    refs: tuple[str, ...]
    optional: bool = False


@dataclass(slots=True)
class _Leaf:
    dtype: Dtype
    shape: tuple[Dim, ...] | None


class _Walker:
    """Resolves local refs (with cycle detection) and collects the flattened fields."""

    def __init__(self, doc: dict[str, Any], where: str) -> None:
        self.doc = doc
        self.where = where
        self.root_id = doc.get("$id") if isinstance(doc.get("$id"), str) else None
        self.fields: dict[str, Field] = {}
        self.varying: frozenset[str] = frozenset()
        self._anchors: dict[str, Any] | None = None

    # -- refs ------------------------------------------------------------------------------

    def deref(self, node: Any, pointer: str, refs: tuple[str, ...]) -> _Resolved:
        """Follow `$ref` (merging sibling keywords over the target) and single-branch `allOf`."""
        hops = 0
        while isinstance(node, dict) and ("$ref" in node or _single_all_of(node)):
            hops += 1
            if hops > MAX_DEPTH:
                raise SchemaError(f"{self.where}: {pointer}: $ref chain longer than {MAX_DEPTH}")
            if "$ref" in node:
                ref = node["$ref"]
                fragment = local_fragment(ref, self.root_id, f"{self.where}: {pointer}")
                if ref in refs:
                    chain = " -> ".join((*refs, ref))
                    raise _RefCycle(f"{self.where}: {pointer}: $ref cycle: {chain}")
                refs = (*refs, ref)
                target = self._target(fragment, pointer)
                siblings = {k: v for k, v in node.items() if k != "$ref"}
                node = _merge(target, siblings) if siblings else target
            else:
                (only,) = node["allOf"]
                only = self.deref(only, pointer + "/allOf/0", refs)
                refs = only.refs
                siblings = {k: v for k, v in node.items() if k != "allOf"}
                node = _merge(only.node, siblings)
        return _Resolved(node, refs)

    def _target(self, fragment: str, pointer: str) -> Any:
        if fragment == "" or fragment.startswith("/"):
            return self._pointer(fragment, pointer)
        anchors = self._anchor_map()
        if fragment not in anchors:
            raise SchemaError(f"{self.where}: {pointer}: $ref '#{fragment}': no such anchor")
        return anchors[fragment]

    def _pointer(self, fragment: str, pointer: str) -> Any:
        node: Any = self.doc
        for raw in fragment.split("/")[1:]:
            part = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise SchemaError(f"{self.where}: {pointer}: $ref '#{fragment}' points to "
                                  f"nothing in this document")
        return node

    def _anchor_map(self) -> dict[str, Any]:
        if self._anchors is None:
            anchors: dict[str, Any] = {}
            stack: list[Any] = [self.doc]
            while stack:
                node = stack.pop()
                if isinstance(node, dict):
                    if isinstance(node.get("$anchor"), str):
                        anchors.setdefault(node["$anchor"], node)
                    for key, value in node.items():
                        if key not in ("enum", "const", "default", "examples"):
                            stack.append(value)
                elif isinstance(node, list):
                    stack.extend(node)
            self._anchors = anchors
        return self._anchors

    # -- fields ----------------------------------------------------------------------------

    def object_fields(self, node: dict[str, Any], prefix: str, required: bool, pointer: str,
                      depth: int, refs: tuple[str, ...]) -> None:
        props = node["properties"]
        req = node.get("required", [])
        if not isinstance(req, list):
            raise SchemaError(f"{self.where}: {pointer}/required must be a list, got "
                              f"{describe(req)}")
        required_names = {r for r in req if isinstance(r, str)}
        for key, sub in props.items():
            name = f"{prefix}.{key}" if prefix else key
            self.field(sub, name, required and key in required_names,
                       f"{pointer}/properties/{key}", depth + 1, refs)

    def field(self, node: Any, name: str, required: bool, pointer: str, depth: int,
              refs: tuple[str, ...]) -> None:
        if depth > MAX_DEPTH:
            raise SchemaError(f"{self.where}: {pointer}: nested deeper than {MAX_DEPTH} "
                              f"(MAX_DEPTH)")
        resolved = self.deref(node, pointer, refs)
        node, refs = resolved.node, resolved.refs
        if isinstance(node, dict):
            node, optional = self._strip_null(node, pointer, refs)
            required = required and not optional
        if isinstance(node, dict) and _has_x_gyre(node):
            self.add(name, node, self._x_gyre_leaf(node, pointer, depth, refs), required, pointer)
            return
        if isinstance(node, dict) and isinstance(node.get("properties"), dict) \
                and _json_types(node, self.where, pointer) <= {"object"}:
            before = len(self.fields)
            self.object_fields(node, name, required, pointer, depth, refs)
            if len(self.fields) > before:
                return
        self.add(name, node, self.leaf(node, pointer, depth, refs), required, pointer)

    def _strip_null(self, node: dict[str, Any], pointer: str,
                    refs: tuple[str, ...]) -> tuple[dict[str, Any], bool]:
        """`anyOf`/`oneOf` with a null branch, or `type: [X, "null"]`: optional X."""
        optional = False
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if not isinstance(branches, list):
                continue
            kept = []
            for i, branch in enumerate(branches):
                sub = self.deref(branch, f"{pointer}/{key}/{i}", refs).node
                if isinstance(sub, dict) and sub.get("type") == "null":
                    optional = True
                else:
                    kept.append(branch)
            if len(kept) == 1:
                siblings = {k: v for k, v in node.items() if k != key}
                merged = self.deref(kept[0], f"{pointer}/{key}", refs).node
                node = _merge(merged, siblings) if isinstance(merged, dict) else node
            elif len(kept) != len(branches):
                node = {**node, key: kept}
        types = node.get("type")
        if isinstance(types, list) and "null" in types:
            optional = True
            rest = [t for t in types if t != "null"]
            node = {**node, "type": rest[0] if len(rest) == 1 else rest}
        return node, optional

    def add(self, name: str, node: Any, leaf: _Leaf, required: bool, pointer: str) -> None:
        if len(self.fields) >= MAX_FIELDS:
            raise SchemaError(f"{self.where}: more than {MAX_FIELDS} fields (MAX_FIELDS)")
        declared = node.get("x-gyre-role") if isinstance(node, dict) else None
        if declared is not None and declared not in ROLES:
            raise SchemaError(f"{self.where}: {pointer}: x-gyre-role {declared!r} is not a role; "
                              f"roles: {', '.join(ROLES)}")
        if declared == "observation" and name.split(".")[0] == "next_observation":
            # docs/contract.md §3 reserves `next_observation` (and its modalities) for s_{t+1}, even
            # when a pinned model copied the observation's spec, role included.
            declared = "next_observation"
        match = resolve_role(name, declared)
        description = node.get("description", "") if isinstance(node, dict) else ""
        shape = leaf.shape
        varying = tuple(d for d in shape if isinstance(d, str) and d.lstrip("*") in self.varying) \
            if shape is not None else ()
        if name in self.fields:  # `obs` -> `x` and a literal "obs.x" would silently be one
            raise SchemaError(f"{self.where}: {pointer}: two fields named {name!r} (nested, and "
                              "a name holding a dot); rename one")
        self.fields[name] = Field(
            name=name, dtype=leaf.dtype, shape=shape, role=match.role, required=required,
            description=description if isinstance(description, str) else "", varying=varying,
            role_score=match.score, role_how=match.how, role_candidates=match.candidates,
            declared_role=declared is not None,
            modalities=isinstance(node, dict) and self._object_branch(node, pointer),
        )

    def _object_branch(self, node: dict[str, Any], pointer: str) -> bool:
        """Whether an `anyOf`/`oneOf` branch of the field is an object (of named modalities)."""
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if not isinstance(branches, list):
                continue
            for i, branch in enumerate(branches):
                sub = self.deref(branch, f"{pointer}/{key}/{i}", ()).node
                if isinstance(sub, dict) and "object" in _json_types(sub, self.where,
                                                                      f"{pointer}/{key}/{i}"):
                    return True
        return False

    def _x_gyre_leaf(self, node: dict[str, Any], pointer: str, depth: int,
                     refs: tuple[str, ...]) -> _Leaf:
        structural = self.leaf({k: v for k, v in node.items() if not k.startswith("x-gyre")},
                               pointer, depth, refs, lenient=True)
        dtype: Dtype = structural.dtype
        if "x-gyre-dtype" in node:
            dtype = _gyre_dtype(node["x-gyre-dtype"], self.where, pointer)
        shape = structural.shape
        if "x-gyre-shape" in node:
            shape = _gyre_shape(node["x-gyre-shape"], self.where, pointer)
        return _Leaf(dtype, shape)

    def leaf(self, node: Any, pointer: str, depth: int, refs: tuple[str, ...],
             lenient: bool = False) -> _Leaf:
        """dtype and shape of a non-object node: nested arrays become a tensor."""
        dims: list[Dim] = []
        while True:
            if depth + len(dims) > MAX_DEPTH or len(dims) > MAX_RANK:
                raise SchemaError(f"{self.where}: {pointer}: more than {MAX_RANK} nested arrays "
                                  f"(MAX_RANK)")
            if isinstance(node, bool) or not isinstance(node, dict):
                if not isinstance(node, bool) and not lenient:
                    raise SchemaError(f"{self.where}: {pointer}: a subschema must be an object "
                                      f"or a boolean, got {describe(node)}")
                return _Leaf(None, tuple(dims) if dims else None)
            node, _ = self._strip_null(node, pointer, refs)
            types = _json_types(node, self.where, pointer)
            is_array = types == {"array"} or (not types and ("items" in node or
                                                             "prefixItems" in node))
            if not is_array:
                return _Leaf(self._scalar_dtype(node, types, pointer, depth, refs), tuple(dims))
            dims.append(_array_dim(node, self.where, pointer))
            item = _item_schema(node)
            pointer = f"{pointer}/items"
            try:
                resolved = self.deref(item, pointer, refs)
            except _RefCycle:
                # A recursive array (any depth, like `*obs`): zero or more further dims.
                dims[-1] = VARIADIC_DIM
                return _Leaf(None, tuple(dims))
            node, refs = resolved.node, resolved.refs

    def _scalar_dtype(self, node: dict[str, Any], types: set[str], pointer: str, depth: int,
                      refs: tuple[str, ...]) -> Dtype:
        types = types - {"null"}
        if not types:
            return self._union_dtype(node, pointer, depth, refs)
        if types == {"integer", "number"}:
            return "number"
        if len(types) == 1:
            (only,) = types
            return _JSON_TYPES[only] if only != "array" else None
        return tuple(sorted(_JSON_TYPES[t] for t in types))

    def _union_dtype(self, node: dict[str, Any], pointer: str, depth: int,
                     refs: tuple[str, ...]) -> Dtype:
        """dtype of an untyped node from its anyOf/oneOf branches (None when they disagree)."""
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list) and branches:
                dtypes: list[str | tuple[str, ...]] = []
                for i, branch in enumerate(branches):
                    sub = self.deref(branch, f"{pointer}/{key}/{i}", refs)
                    leaf = self.leaf(sub.node, f"{pointer}/{key}/{i}", depth + 1, sub.refs)
                    if leaf.shape != () or leaf.dtype is None:
                        return None
                    dtypes.append(leaf.dtype)
                flat = sorted({d for dt in dtypes for d in ((dt,) if isinstance(dt, str) else dt)})
                return flat[0] if len(flat) == 1 else tuple(flat)
        if "const" in node:
            return _value_dtype(node["const"])
        if isinstance(node.get("enum"), list) and node["enum"]:
            kinds = {_value_dtype(v) for v in node["enum"]}
            return kinds.pop() if len(kinds) == 1 else None
        return None


def _single_all_of(node: dict[str, Any]) -> bool:
    all_of = node.get("allOf")
    return isinstance(all_of, list) and len(all_of) == 1


def _merge(target: Any, siblings: dict[str, Any]) -> Any:
    if isinstance(target, bool):
        return siblings if target else {**siblings, "not": {}}
    if not isinstance(target, dict):
        return target
    return {**target, **siblings}


def _has_x_gyre(node: dict[str, Any]) -> bool:
    return "x-gyre-dtype" in node or "x-gyre-shape" in node


def _json_types(node: dict[str, Any], where: str, pointer: str) -> set[str]:
    types = node.get("type")
    if types is None:
        return set()
    items = types if isinstance(types, list) else [types]
    if not all(isinstance(t, str) and t in _JSON_TYPES for t in items):
        raise SchemaError(f"{where}: {pointer}/type: not a JSON Schema type: {describe(types)}")
    return set(items)


def _array_dim(node: dict[str, Any], where: str, pointer: str) -> Dim:
    lo = _count(node, "minItems", where, pointer)
    hi = _count(node, "maxItems", where, pointer)
    prefix = node.get("prefixItems")
    if isinstance(prefix, list) and node.get("items") is False:
        return len(prefix)
    if lo is not None and lo == hi:
        return lo
    return UNKNOWN_DIM


def _count(node: dict[str, Any], key: str, where: str, pointer: str) -> int | None:
    value = node.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SchemaError(f"{where}: {pointer}/{key}: expected a non-negative integer, got "
                          f"{describe(value)}")
    return value


def _item_schema(node: dict[str, Any]) -> Any:
    items = node.get("items")
    prefix = node.get("prefixItems")
    if isinstance(prefix, list) and prefix and (items is None or items is False):
        return prefix[0]
    return True if items is None else items


def _value_dtype(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def _gyre_dtype(value: Any, where: str, pointer: str) -> Dtype:
    names = value if isinstance(value, list) else [value]
    if not names or not all(isinstance(v, str) and v in GYRE_DTYPES + LOOSE_DTYPES
                            for v in names):
        raise SchemaError(f"{where}: {pointer}/x-gyre-dtype: expected a dtype or a list of "
                          f"dtypes ({', '.join(GYRE_DTYPES)}), got {describe(value)}")
    return names[0] if len(names) == 1 else tuple(names)


def _gyre_shape(value: Any, where: str, pointer: str) -> tuple[Dim, ...]:
    if not isinstance(value, list) or len(value) > MAX_RANK:
        raise SchemaError(f"{where}: {pointer}/x-gyre-shape: expected a list of at most "
                          f"{MAX_RANK} dims, got {describe(value)}")
    dims: list[Dim] = []
    for dim in value:
        if isinstance(dim, bool) or not isinstance(dim, (int, str)) or \
                (isinstance(dim, int) and dim < 0) or (isinstance(dim, str) and not dim):
            raise SchemaError(f"{where}: {pointer}/x-gyre-shape: a dim is an int >= 0, a name or "
                              f"*name, got {describe(dim)}")
        if isinstance(dim, str) and dim.isdigit():  # "²" is a digit to isdigit, not to int
            dim = int(dim) if dim.isascii() and len(dim) <= 19 else -1
        if isinstance(dim, int) and not 0 <= dim < 2**63:
            raise SchemaError(f"{where}: {pointer}/x-gyre-shape: a fixed dim is an integer "
                              f"below 2**63 in ASCII digits, got {describe(value[len(dims)])}")
        dims.append(dim)
    return tuple(dims)


# ---------------------------------------------------------------------------------------------
# From a Pydantic model


def model_schema(model_cls: type) -> dict[str, Any]:
    """The JSON Schema of a Pydantic model class, with our `x-gyre-*` top-level keys."""
    if not isinstance(model_cls, type) or not hasattr(model_cls, "model_json_schema"):
        raise SchemaError(f"not a Pydantic model class: {describe(model_cls)}")
    if getattr(model_cls, "gyre_kind", ""):
        return json_schema(model_cls)
    doc = model_cls.model_json_schema(by_alias=True)
    for attr, key in (("gyre_kind", "x-gyre-kind"), ("gyre_version", "x-gyre-version")):
        value = getattr(model_cls, attr, "")
        if value:
            doc[key] = value
    for attr, key in (("batch_dims", "x-gyre-batch-dims"), ("varying_dims", "x-gyre-varying-dims")):
        value = getattr(model_cls, attr, ())
        if value:
            doc[key] = list(value)
    return doc


def field_table_from_model(model_cls: type, *, batch_dims: tuple[str, ...] | None = None
                           ) -> FieldTable:
    """The field table of a Pydantic model class (through its JSON Schema)."""
    return field_table(model_schema(model_cls), batch_dims=batch_dims, name=model_cls.__name__)


SchemaInput = str | Path | Mapping[str, Any] | FieldTable | type
"""What `diff` and `compat` accept as a schema: a path, a dict, a Pydantic model class, a table."""


def as_table(source: SchemaInput, batch_dims: tuple[str, ...] | None = None) -> FieldTable:
    """A field table from a schema dict, a path, a Pydantic model class or a table."""
    if isinstance(source, FieldTable):
        if batch_dims is None:
            return source
        return replace(source, batch_dims=tuple(batch_dims))
    if isinstance(source, type):
        return field_table_from_model(source, batch_dims=batch_dims)
    if isinstance(source, (str, Path, Mapping)):
        return field_table(source, batch_dims=batch_dims)
    raise SchemaError(f"a schema is a dict, a path, a Pydantic model class or a FieldTable, "
                      f"got {describe(source)}")


