"""Schemas: JSON Schema export, field tables, roles, the diff between two schemas, compatibility."""
