"""The package's structure in numbers, as docs/architecture.md records them before and after 0.3.

    python tests/structure.py            # this checkout
    python tests/structure.py OTHER_DIR  # another checkout (e.g. `git worktree add /tmp/v0.2 v0.2.0`)

Prints, for the `gyre_contract/` under the directory given: its modules and their lines, the
modules under 100 lines and over 570, the public modules (no `_` in the dotted path), the public
names (the `__all__` of `gyre_contract`, of each subpackage and of `pinned` and `cli`: at the
top level, and unique across them), the module-level names a user reaches without typing an
underscore (every name not starting with `_` defined in a public module), the modules about LLM
tokens (`token` or `llm` in their name), and the lines that spell token rows (`"step"` on a line
about rows). The public names are read by importing the package in a fresh process, so the
numbers are the ones the code has, not the ones its docs say. `tests/test_docs.py` checks that
docs/architecture.md states today's public-name and token-row figures.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SUBPACKAGE_NAMES = ("core", "io", "schema", "adapters", "trainer", "channel", "harness", "cli")

_EXPORTS = """
import importlib, json, pkgutil, sys
sys.path.insert(0, sys.argv[1])
import gyre_contract
out = {}
names = ["gyre_contract", *(f"gyre_contract.{m.name}" for m in pkgutil.iter_modules(gyre_contract.__path__)
         if m.ispkg or m.name == "pinned")]
for name in names:
    module = importlib.import_module(name)
    out[name] = list(getattr(module, "__all__", []) or [])
print(json.dumps(out))
"""


def modules(root: Path) -> dict[str, Path]:
    """Dotted name → file of every module of `root/gyre_contract`."""
    package = root / "gyre_contract"
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def is_public(dotted: str) -> bool:
    return not any(part.startswith("_") for part in dotted.split("."))


def defined_names(path: Path) -> list[str]:
    """Module-level names a module defines (functions, classes, assignments), not imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return names


def exports(root: Path) -> dict[str, list[str]]:
    """`__all__` of `gyre_contract` and of each of its subpackages (and `pinned`), by import."""
    done = subprocess.run([sys.executable, "-c", _EXPORTS, str(root)], capture_output=True,
                          text=True, check=True)
    result: dict[str, list[str]] = json.loads(done.stdout)
    return result


def rows_spellings(files: dict[str, Path]) -> list[str]:
    return [f"{name}:{n}" for name, path in files.items()
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if '"step"' in line and "rows" in line.lower()]


def measure(root: Path) -> dict[str, Any]:
    files = modules(root)
    lines = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in files.items()}
    public = sorted(name for name in files if is_public(name) and not name.endswith("__main__"))
    reachable = sorted({f"{name}.{n}" for name in public for n in defined_names(files[name])
                        if not n.startswith("_")})
    all_of = exports(root)
    spelled = rows_spellings(files)
    return {
        "modules": len(files),
        "lines": sum(lines.values()),
        "modules_under_100_lines": sum(1 for n in lines.values() if n < 100),
        "modules_over_570_lines": sum(1 for n in lines.values() if n > 570),
        "largest_module_lines": max(lines.values()),
        "public_modules": len(public),
        "public_names_top_level": len(all_of.get("gyre_contract", [])),
        "public_names_unique": len({n for names in all_of.values() for n in names}),
        "names_reachable_without_underscore": len(reachable),
        "token_modules": sorted(n for n in files if "token" in n or "llm" in n),
        "rows_step_lines": len(spelled),
        "rows_step_modules": sorted({s.rsplit(":", 1)[0] for s in spelled}),
    }


def main(argv: list[str]) -> None:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    for key, value in measure(root).items():
        shown = f"{len(value)}: {', '.join(value)}" if isinstance(value, list) else value
        print(f"{key}: {shown}")


if __name__ == "__main__":
    main(sys.argv[1:])
