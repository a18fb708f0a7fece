"""Schemas: JSON Schema export, field tables, roles, the diff between two schemas, compatibility.

Its modules are private (`_export.py`, ...); lowest first (each imports only those above it):
`export` (models -> JSON Schema), `loading` (strict JSON, local `$ref`s, limits), `roles`,
`fieldtable` (any schema -> one row per field), `infer` (a schema from a JSON Lines or `.npz`
file), `dtyperules` and `shaperules` (what fits, what casts lose), `diffreport` (the diff's
report and its renderings), `layouts` (the trainer's layout from its batch dims), `converters`,
`diffwarnings`, `tokentrainer` and `tokenlayout` (parts of the diff; token rows for LLM
trainers), `diffing` (the `diff` engine), `compatibility` (`compat`), `trainerbatch` (a mapped
batch checked against a trainer's own schema).

Names load on first use (PEP 562). `diff` and `compat` here are the functions.
"""

from gyre_contract.core._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "._export": ("json_schema", "export_schemas"),
    "._loading": ("load_schema",),
    "._infer": ("infer_schema",),
    "._diffing": ("diff",),
    "._diffreport": ("DiffReport",),
    "._compatibility": ("compat", "CompatReport"),
})
