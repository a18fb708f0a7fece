"""Schemas: JSON Schema export, field tables, roles, the diff between two schemas, compatibility.

Names load on first use (PEP 562). `diff` and `compat` here are the functions.
"""

from gyre_contract.core.deprecation import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".export": ("json_schema", "export_schemas"),
    ".fieldtable": ("load_schema", "infer_schema", "field_table", "field_table_from_model",
                    "Field", "FieldTable"),
    ".diffing": ("diff", "DiffReport"),
    ".compatibility": ("compat", "CompatReport"),
})
