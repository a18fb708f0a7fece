"""The schema subpackage's shape: small modules, no private name shared, no import of a higher layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SCHEMA = Path(__file__).resolve().parents[2] / "gyre_contract" / "schema"
MODULES = sorted(SCHEMA.glob("*.py"))
HIGHER = ("gyre_contract.trainer", "gyre_contract.harness", "gyre_contract.cli")


def imports(path: Path) -> list[ast.ImportFrom]:
    """Every `from gyre_contract... import` of the module, inside functions too."""
    return [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gyre_contract")]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_is_at_most_600_lines(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 600


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_private_schema_name_and_no_higher_layer(path: Path) -> None:
    for node in imports(path):
        module = node.module or ""
        assert not module.startswith(HIGHER), f"{path.name}:{node.lineno} imports {module}"
        if module.startswith("gyre_contract.schema"):
            private = [a.name for a in node.names if a.name.startswith("_")]
            assert not private, f"{path.name}:{node.lineno} imports {private} from {module}"
