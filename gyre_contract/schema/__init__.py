"""Schemas: JSON Schema export, field tables, roles, the diff between two schemas, compatibility.

Modules, lowest first (each imports only those above it): `export` (models -> JSON Schema),
`loading` (strict JSON, local `$ref`s, limits), `roles`, `fieldtable` (any schema -> one row per
field), `infer` (a schema from a JSON Lines or `.npz` file), `dtyperules` and `shaperules` (what
fits, what casts lose), `diffreport` (the diff's report and its renderings), `converters` and
`diffwarnings` (parts of the diff), `diffing` (the `diff` engine), `compatibility` (`compat`).
"""
