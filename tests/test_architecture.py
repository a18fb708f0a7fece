"""The architecture, checked rather than hoped for.

The import graph of `gyre_contract/` is built from the AST of every module, so an import inside a
function counts like one at the top of the file (it runs, just later). Five rules hold:

(a) no import cycle between modules;
(b) no private name (`_x`, not `__x__`) imported from another module of the package, neither as
    `from m import _x` nor as `m._x` after `import m`. A private *module* (`io/_lines.py`) is
    the package's own machinery, in pydantic's `_internal` manner: any module of gyre_contract
    may import it (the layers of (d) still bound who), users never do (e);
(c) no module over `MAX_LINES` lines;
(d) the layers core → io → {schema, adapters} → trainer → channel → harness → cli: a module
    never imports a higher layer, and schema and adapters never import each other (the
    trainer's field map checks its batch against a trainer's schema; the adapters need only core);
(e) what users read and copy — `examples/`, and the code blocks of README.md and docs/ — imports
    only public modules (no `_` in the dotted path) and only the names in their `__all__`; tests
    and benchmarks may import private modules (unit tests of machinery).

Imports under `if TYPE_CHECKING:` never run, so they cannot close a cycle and are left out of
(a); they still name a dependency, so they count for (b) and (d).

The top-level modules (`gyre_contract/__init__.py`, `pinned.py`, `__main__.py`) are the façade:
they may import anything (the package loads most of its names lazily). A layer may import a façade
module only if that module stays below it: a façade module sits at the highest layer it imports
(`pinned` imports only core, so harness may use it; importing `gyre_contract` itself from inside
the package is upward).

Two more checks from the restructuring's "done when": no test asserts a wall time (timings live
in benchmarks/, as ratios within one run), and the repository stands alone (no file refers to the
folders it once sat beside; the spec is docs/contract.md; README.md stays under 15 KB).

Each check also runs on small synthetic inputs written to `tmp_path`, to show that it can fail.
Pure Python: no dependency beyond pytest. `lint-imports` (pyproject.toml) checks the layers too.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "gyre_contract"
MAX_LINES = 800
LAYERS: Mapping[str, int] = {"core": 0, "io": 1, "schema": 2, "adapters": 2, "trainer": 3,
                             "channel": 4, "harness": 5, "cli": 6}
"""Each subpackage's layer, low to high; equal layers (schema, adapters) must not import each other."""


# -- the import graph ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Import:
    """One dependency of `source` on `target` (both dotted module names), as written on `line`."""

    source: str
    target: str
    line: int
    names: tuple[str, ...] = ()
    """Names taken from `target` (`from target import a, b`) or read from it (`target.a`)."""
    type_checking: bool = False
    in_function: bool = False

    def where(self) -> str:
        kind = " (under TYPE_CHECKING)" if self.type_checking else \
            " (inside a function)" if self.in_function else ""
        return f"{self.source}:{self.line}{kind}"


@dataclass
class Graph:
    """Modules of one package (dotted name → file) and the imports between them."""

    package: str
    files: dict[str, Path] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)

    @classmethod
    def build(cls, package_dir: Path) -> Graph:
        graph = cls(package_dir.name)
        for path in sorted(package_dir.rglob("*.py")):
            parts = path.relative_to(package_dir.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            graph.files[name] = path
        for name, path in graph.files.items():
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            is_package = path.name == "__init__.py"
            graph.imports.extend(_Collector(graph, name, is_package).collect(tree))
        return graph

    def resolve(self, dotted: str) -> str | None:
        """The most specific module of the package that `dotted` names, or None if outside it."""
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in self.files:
                return candidate
        return None

    def lines(self, module: str) -> int:
        return len(self.files[module].read_text(encoding="utf-8").splitlines())


class _Collector(ast.NodeVisitor):
    """Collects the imports of one module, noting TYPE_CHECKING blocks and function bodies."""

    def __init__(self, graph: Graph, module: str, is_package: bool) -> None:
        self.graph, self.module = graph, module
        self.package = module if is_package else module.rpartition(".")[0]
        self.found: list[Import] = []
        self.aliases: dict[str, str] = {}  # local name -> package module it is bound to
        self.type_checking = 0
        self.function = 0

    def collect(self, tree: ast.Module) -> list[Import]:
        self.visit(tree)
        return self.found

    def add(self, target: str, line: int, names: tuple[str, ...] = ()) -> None:
        self.found.append(Import(self.module, target, line, names, self.type_checking > 0,
                                 self.function > 0))

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        guarded = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
        self.visit(test)
        self.type_checking += guarded
        for child in node.body:
            self.visit(child)
        self.type_checking -= guarded
        for child in node.orelse:
            self.visit(child)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.function += 1
        self.generic_visit(node)
        self.function -= 1

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            target = self.graph.resolve(alias.name)
            if target is None:
                continue
            self.add(target, node.lineno)
            # `import a.b.c` binds `a` (reads go through `a.b.c.x`), `import a.b.c as m` binds `m`
            bound = alias.asname or alias.name.split(".")[0]
            self.aliases[bound] = target if alias.asname else self.graph.resolve(bound) or target

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            anchor = self.package.split(".")
            anchor = anchor[:len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        if self.graph.resolve(base) is None:
            return
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in self.graph.files:
                self.add(submodule, node.lineno)
                self.aliases[alias.asname or alias.name] = submodule
            else:
                self.add(self.graph.resolve(base) or base, node.lineno, (alias.name,))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        """`m.name` or `a.b.m.name` where `m` is a module of the package: a use of `name`."""
        chain: list[str] = []
        value: ast.expr = node
        while isinstance(value, ast.Attribute):
            chain.insert(0, value.attr)
            value = value.value
        if not (isinstance(value, ast.Name) and value.id in self.aliases):
            self.generic_visit(node)
            return
        module = self.aliases[value.id]
        for attr in chain:
            if f"{module}.{attr}" not in self.graph.files:
                self.add(module, node.lineno, (attr,))
                break
            module = f"{module}.{attr}"


# -- the rules ----------------------------------------------------------------------------------

def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@dataclass(frozen=True)
class Cycle:
    """Modules that import each other (a strongly connected group) and one cycle through them."""

    members: tuple[str, ...]
    example: tuple[Import, ...]

    def render(self) -> str:
        path = " -> ".join([self.example[0].source,
                            *(f"{i.target} [{i.where()}]" for i in self.example)])
        if len(self.members) <= len(self.example):
            return path
        return f"{', '.join(self.members)} import each other; e.g. {path}"


def cycles(graph: Graph) -> list[Cycle]:
    """Each group of modules that import each other, with one cycle (imports that run only)."""
    edges: dict[str, dict[str, Import]] = {m: {} for m in graph.files}
    for imp in graph.imports:
        if not imp.type_checking:
            edges[imp.source].setdefault(imp.target, imp)
    found = []
    for group in _strongly_connected(edges):
        if len(group) > 1 or group[0] in edges[group[0]]:
            members = tuple(sorted(group))
            found.append(Cycle(members, tuple(_cycle_in(members, edges))))
    return sorted(found, key=lambda c: c.members)


def _strongly_connected(edges: Mapping[str, Mapping[str, Import]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit on a large package)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                groups.append(group)
    return groups


def _cycle_in(group: tuple[str, ...], edges: Mapping[str, Mapping[str, Import]]) -> list[Import]:
    """A shortest cycle through the group's first module (breadth-first inside the group)."""
    start, members = group[0], set(group)
    paths: dict[str, list[Import]] = {start: []}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target, imp in sorted(edges[node].items()):
            if target == start:
                return [*paths[node], imp]
            if target in members and target not in paths:
                paths[target] = [*paths[node], imp]
                queue.append(target)
    raise AssertionError(f"no cycle through {start} in {group}")  # Tarjan said there is one


def private_imports(graph: Graph) -> list[str]:
    """Each private name taken from another module (a private module itself is fair game)."""
    found = []
    for imp in graph.imports:
        for name in imp.names:
            if is_private(name) and imp.source != imp.target:
                found.append(f"{imp.where()}: private name {name} of {imp.target}")
    return found


def long_modules(graph: Graph, limit: int = MAX_LINES) -> list[str]:
    return [f"{m} has {graph.lines(m)} lines (limit {limit})"
            for m in sorted(graph.files) if graph.lines(m) > limit]


def layer_of(graph: Graph, module: str, layers: Mapping[str, int] = LAYERS) -> str | None:
    """The subpackage (a key of `layers`) a module belongs to; None for the façade."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in layers else None


def facade_levels(graph: Graph, layers: Mapping[str, int] = LAYERS) -> dict[str, int]:
    """Each façade module's level: the highest layer it imports (transitively through façade
    modules), -1 if it imports none."""
    level = {m: -1 for m in graph.files if layer_of(graph, m, layers) is None}
    changed = True
    while changed:
        changed = False
        for imp in graph.imports:
            if imp.source not in level:
                continue
            sub = layer_of(graph, imp.target, layers)
            new = layers[sub] if sub is not None else level.get(imp.target, -1)
            if new > level[imp.source]:
                level[imp.source], changed = new, True
    return level


def upward_imports(graph: Graph, layers: Mapping[str, int] = LAYERS) -> list[str]:
    """Each import from a layer into a higher layer, or between two layers of the same level."""
    facade = facade_levels(graph, layers)
    found = []
    for imp in graph.imports:
        low = layer_of(graph, imp.source, layers)
        if low is None:
            continue  # the façade may import what it exposes
        high = layer_of(graph, imp.target, layers)
        if high is None:
            if facade[imp.target] >= layers[low]:
                found.append(f"{imp.where()}: {low} imports the façade module {imp.target}, which "
                             f"reaches up to layer {facade[imp.target]}")
        elif layers[high] > layers[low] or (layers[high] == layers[low] and high != low):
            found.append(f"{imp.where()}: {low} imports {high} ({imp.target})")
    return found


# -- the tests hold no wall time ----------------------------------------------------------------

CLOCKS = frozenset({"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic",
                    "monotonic_ns", "process_time", "process_time_ns"})
"""Functions of `time` whose result is a wall (or CPU) time; timings belong in benchmarks/."""


def _is_time(node: ast.AST, timed: set[str]) -> bool:
    """Whether an expression is a time: a clock reading, a name holding one, or arithmetic
    (`-`, `*`, `round`, `abs`, `min`, ...) on one. A time passed into an object is not followed."""
    if isinstance(node, ast.Name):
        return node.id in timed
    if isinstance(node, ast.BinOp):
        return _is_time(node.left, timed) or _is_time(node.right, timed)
    if isinstance(node, ast.UnaryOp):
        return _is_time(node.operand, timed)
    if isinstance(node, ast.Call):
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr in CLOCKS
                and isinstance(func.value, ast.Name) and func.value.id == "time") or (
                isinstance(func, ast.Name) and func.id in CLOCKS):
            return True
        if isinstance(func, ast.Name) and func.id in {"round", "abs", "min", "max", "float", "int"}:
            return any(_is_time(arg, timed) for arg in node.args)
    return False


def _reads_clock(node: ast.AST, timed: set[str]) -> bool:
    return any(_is_time(sub, timed) for sub in ast.walk(node))


def wall_time_assertions(path: Path) -> list[str]:
    """Each `assert` on a clock reading, directly or through a name assigned from one in the same
    function (`start = perf_counter(); ...; seconds = perf_counter() - start; assert seconds < 1`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, _FUNCTIONS))]:
        nodes = list(_own_nodes(scope))
        timed: set[str] = set()
        while True:  # the names holding a time, to a fixed point
            more = {t.id for n in nodes if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                    and n.value is not None and _is_time(n.value, timed)
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                    if isinstance(t, ast.Name)} - timed
            if not more:
                break
            timed |= more
        found += [(n.lineno, f"{path.name}:{n.lineno}: asserts on a wall time") for n in nodes
                  if isinstance(n, ast.Assert) and _reads_clock(n.test, timed)]
    return [text for _, text in sorted(found)]


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a module or function body, not those of the functions nested in it."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, _FUNCTIONS):
            yield from _own_nodes(child)


def hypothesis_deadlines(path: Path) -> list[str]:
    """Each `@given` test without `deadline=None`: hypothesis's default deadline (200 ms per
    example) is an assertion on wall time that fails on a busy machine."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def no_deadline(node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and any(
            k.arg == "deadline" and isinstance(k.value, ast.Constant) and k.value.value is None
            for k in node.keywords)

    settings_names = {t.id for n in tree.body if isinstance(n, ast.Assign) and no_deadline(n.value)
                      for t in n.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = [d.func for d in node.decorator_list if isinstance(d, ast.Call)]
        if not any(getattr(f, "id", getattr(f, "attr", None)) == "given" for f in names):
            continue
        if not any(no_deadline(d) or (isinstance(d, ast.Name) and d.id in settings_names)
                   for d in node.decorator_list):
            found.append(f"{path.name}:{node.lineno}: {node.name} runs under hypothesis's deadline")
    return found


# -- the checks on gyre_contract ----------------------------------------------------------------

GRAPH = Graph.build(PACKAGE_DIR)
SUBPACKAGES = sorted(LAYERS)

def _params(check: str, keys: list[str]) -> list[str]:
    """The parameters of one check (`check` names it for readers of the call site)."""
    return keys


@pytest.mark.parametrize("subpackage", _params("cycles", SUBPACKAGES))
def test_no_import_cycle(subpackage: str) -> None:
    """(a) No cycle through a module of this subpackage; function-level imports count."""
    prefix = f"{GRAPH.package}.{subpackage}"
    mine = [c.render() for c in cycles(GRAPH)
            if any(m == prefix or m.startswith(f"{prefix}.") for m in c.members)]
    assert not mine, "import cycles:\n" + "\n".join(mine)


def test_no_import_cycle_through_the_facade() -> None:
    facade = [c.render() for c in cycles(GRAPH) if all(layer_of(GRAPH, m) is None for m in c.members)]
    assert not facade, "import cycles:\n" + "\n".join(facade)


@pytest.mark.parametrize("subpackage", _params("private", SUBPACKAGES))
def test_no_private_name_imported_across_modules(subpackage: str) -> None:
    """(b) No module of this subpackage takes a private name from another module."""
    prefix = f"{GRAPH.package}.{subpackage}."
    found = [p for p in private_imports(GRAPH) if p.startswith(prefix)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("module", _params("lines", sorted(GRAPH.files)))
def test_module_length(module: str) -> None:
    """(c) No module over MAX_LINES lines: an alarm, not a target (modules are cut by concept)."""
    lines = GRAPH.lines(module)
    assert lines <= MAX_LINES, f"{module} has {lines} lines (limit {MAX_LINES})"


@pytest.mark.parametrize("subpackage", _params("layers", SUBPACKAGES))
def test_layering(subpackage: str) -> None:
    """(d) This subpackage imports only lower layers (and itself)."""
    found = [p for p in upward_imports(GRAPH) if p.startswith(f"{GRAPH.package}.{subpackage}.")]
    assert not found, "\n".join(found)


def test_the_graph_sees_every_kind_of_import() -> None:
    """The real package: a top-level, a function-level and a TYPE_CHECKING import are all found."""
    edges = {(i.source, i.target): i for i in GRAPH.imports}
    top = edges[("gyre_contract.trainer._fieldmap", "gyre_contract.trainer._ops")]
    assert not top.in_function and not top.type_checking
    assert edges[("gyre_contract", "gyre_contract.harness._stages")].type_checking
    assert any(i.in_function for i in GRAPH.imports)
    assert set(SUBPACKAGES) <= {layer_of(GRAPH, m) for m in GRAPH.files}


def test_every_subpackage_has_a_layer_and_import_linter_agrees() -> None:
    """A new subpackage must be given a layer here and in pyproject.toml's layers contract."""
    subpackages = {p.parent.name for p in PACKAGE_DIR.glob("*/__init__.py")}
    assert subpackages == set(LAYERS)
    levels = sorted(set(LAYERS.values()), reverse=True)
    expected = [" | ".join(sorted(k for k, v in LAYERS.items() if v == level)) for level in levels]
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    written = re.search(r'^layers = \[(.*)\]$', text, re.MULTILINE)
    assert written is not None, "pyproject.toml has no import-linter layers contract"
    assert [x.strip().strip('"') for x in written.group(1).split(",")] == expected


TEST_FILES = sorted(str(p.relative_to(ROOT / "tests")) for p in (ROOT / "tests").rglob("*.py")
                    if "data" not in p.relative_to(ROOT / "tests").parts)


@pytest.mark.parametrize("test_file", _params("wall time", TEST_FILES))
def test_no_assertion_on_wall_time(test_file: str) -> None:
    """Tests never assert a time (benchmarks/ measure speed, as ratios within one run)."""
    path = ROOT / "tests" / test_file
    found = wall_time_assertions(path) + hypothesis_deadlines(path)
    assert not found, "\n".join(found)


# -- token rows have one home ----------------------------------------------------------------------

ROW_LAYOUT_HOMES = {
    "gyre_contract/trainer/_layouts.py": "the row layouts and the parser of a map's layout keys",
    "gyre_contract/schema/_layouts.py": "the layout keys the diff writes into a map, as data",
}
"""Where the token rows' spelling in a map (`"rows": "step"`) may appear: every other module
asks the map's row layout (`FieldMap.layout`) instead of testing `rows`."""


def rows_spellings(package_dir: Path, homes: Mapping[str, str] = ROW_LAYOUT_HOMES) -> list[str]:
    """Each line outside `homes` that spells token rows: `"step"` on a line that says rows."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir.parent).as_posix()
        if rel in homes:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if '"step"' in line and "rows" in line.lower():
                found.append(f"{rel}:{number}: {line.strip()}")
    return found


def test_token_rows_are_spelled_in_their_home_only() -> None:
    found = rows_spellings(PACKAGE_DIR)
    assert not found, "ask FieldMap.layout instead:\n" + "\n".join(found)


# -- (e) users import public modules only --------------------------------------------------------

PUBLIC_MODULES = ("gyre_contract", "gyre_contract.core", "gyre_contract.io", "gyre_contract.schema",
                  "gyre_contract.adapters", "gyre_contract.trainer", "gyre_contract.channel",
                  "gyre_contract.harness", "gyre_contract.pinned", "gyre_contract.cli")
DOTTED = re.compile(r"\bgyre_contract(?:\.\w+)+")


def user_code(path: Path) -> list[tuple[int, str, str]]:
    """(first line, language, code) of what users copy from `path`: a whole `.py` file, or the
    python and console blocks of a Markdown page."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return [(1, "python", text)]
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        match = re.match(r"^```(\w*)\s*$", lines[i])
        if not match:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if match.group(1) in ("python", "console"):
            blocks.append((i + 2, match.group(1), "\n".join(lines[i + 1:end]) + "\n"))
        i = end + 1
    return blocks


def private_uses(path: Path, public: Mapping[str, set[str]], root: Path) -> list[str]:
    """Each use in `path`'s user code of a private module (any `_x` part of a dotted
    `gyre_contract...` name, in an import or a string such as `--model pkg._m:Class`) or of a
    name that is not in its public module's `__all__` (`public`: module → names it exports)."""
    found = []
    where = path.relative_to(root)
    for start, language, code in user_code(path):
        for offset, line in enumerate(code.splitlines()):
            for dotted in DOTTED.findall(line):
                if any(is_private(part) for part in dotted.split(".")):
                    found.append(f"{where}:{start + offset}: private module in {dotted}")
        if language != "python":
            continue
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.ImportFrom) and node.module in public:
                for alias in node.names:
                    if alias.name not in public[node.module] and \
                            f"{node.module}.{alias.name}" not in public:
                        found.append(f"{where}:{start + node.lineno - 1}: {alias.name} is not "
                                     f"in {node.module}.__all__")
    return found


def user_files(root: Path) -> list[Path]:
    return sorted([*(root / "examples").glob("*.py"), root / "README.md",
                   *(root / "docs").glob("*.md")])


def public_exports() -> dict[str, set[str]]:
    import importlib

    return {m: set(importlib.import_module(m).__all__) for m in PUBLIC_MODULES}


@pytest.mark.parametrize("path", _params("users", [str(p.relative_to(ROOT)) for p in user_files(ROOT)]))
def test_users_import_public_modules_only(path: str) -> None:
    """(e) Examples and doc snippets show what users may rely on: public modules and names."""
    found = private_uses(ROOT / path, public_exports(), ROOT)
    assert not found, "\n".join(found)


# -- the repository stands alone ----------------------------------------------------------------

OUTSIDE = (b"../" + b"shared", b"research" + b"/", b"/" + b"work/")
"""What a file of a repository that stands alone never mentions: the folders it once sat beside
(written in pieces so that this file does not mention them either)."""
AREAS = ["gyre_contract", "tests", "docs", "benchmarks", "examples", "schemas", ".ci",
         "README.md", "CHANGELOG.md", "pyproject.toml"]


def references_outside(path: Path) -> list[str]:
    """Each line of the files under `path` that refers outside the repository."""
    files = [path] if path.is_file() else sorted(
        f for f in path.rglob("*") if f.is_file() and not any(
            part.startswith(".") or part == "__pycache__" for part in f.relative_to(path).parts))
    found = []
    for file in files:
        for number, line in enumerate(file.read_bytes().splitlines(), 1):
            if any(word in line for word in OUTSIDE):
                found.append(f"{file.relative_to(ROOT)}:{number}: {line.decode(errors='replace')[:100]}")
    return found


@pytest.mark.parametrize("area", _params("outside", AREAS))
def test_no_file_refers_outside_the_repository(area: str) -> None:
    """A fresh clone on its own has everything: no spec, data or code is looked for beside it."""
    path = ROOT / area
    found = references_outside(path) if path.exists() else []
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", _params("docs", ["README.md", "docs/contract.md"]))
def test_the_spec_is_in_the_repository_and_the_readme_is_short(name: str) -> None:
    path = ROOT / name
    assert path.is_file(), f"{name} is missing"
    if name == "README.md":
        assert path.stat().st_size <= 15 * 1024, f"README.md is {path.stat().st_size} bytes"


# -- the checker can fail -----------------------------------------------------------------------

def write_package(root: Path, files: Mapping[str, str]) -> Path:
    """Write a synthetic package `pkg` (subpackages named like the real layers) under `root`."""
    package = root / "pkg"
    for rel, text in files.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            init = root / parent / "__init__.py"
            if parent != Path(".") and not init.exists():
                init.write_text("")
        path.write_text(text)
    return package


def test_checker_finds_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    package = write_package(tmp_path, {
        "io/a.py": "from pkg.io import b\n",
        "io/b.py": "def f():\n    from pkg.io.c import g\n",
        "io/c.py": "import pkg.io.a\n",
        "io/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.io import e\n",
        "io/e.py": "from pkg.io import d\n",
    })
    found = cycles(Graph.build(package))
    assert [c.render() for c in found] == [
        "pkg.io.a -> pkg.io.b [pkg.io.a:1] -> pkg.io.c [pkg.io.b:2 (inside a function)] "
        "-> pkg.io.a [pkg.io.c:1]"]  # d <-> e only under TYPE_CHECKING: not a cycle


def test_checker_names_every_module_of_a_tangle(tmp_path: Path) -> None:
    package = write_package(tmp_path, {
        "io/x.py": "from pkg.io import y\n",
        "io/y.py": "from pkg.io import x, z\n",
        "io/z.py": "def f():\n    import pkg.io.y\n",
    })
    assert [c.render() for c in cycles(Graph.build(package))] == [
        "pkg.io.x, pkg.io.y, pkg.io.z import each other; e.g. "
        "pkg.io.x -> pkg.io.y [pkg.io.x:1] -> pkg.io.x [pkg.io.y:1]"]


def test_checker_finds_a_module_importing_itself(tmp_path: Path) -> None:
    package = write_package(tmp_path, {"core/a.py": "from . import a\n"})
    assert [c.render() for c in cycles(Graph.build(package))] == [
        "pkg.core.a -> pkg.core.a [pkg.core.a:1]"]


def test_checker_finds_private_imports(tmp_path: Path) -> None:
    package = write_package(tmp_path, {
        "io/a.py": "_x = 1\n__all__ = []\n",
        "io/b.py": "from pkg.io.a import _x, __all__\n",
        "io/c.py": "from ..io import a as mod\ny = mod._x\n",
        "io/_lines.py": "z = 1\n",
        "io/d.py": "from pkg.io._lines import z\n",  # a private module, used inside its package
        "schema/e.py": "from pkg.io import _lines\nw = _lines.z\n",  # and from another one
        "schema/f.py": "from .g import _y\n",
        "schema/g.py": "_y = 2\n",
        "trainer/h.py": "import pkg.schema.g\nv = pkg.schema.g._y\nw = pkg.schema.g.y\n",
    })
    assert private_imports(Graph.build(package)) == [
        "pkg.io.b:1: private name _x of pkg.io.a",
        "pkg.io.c:2: private name _x of pkg.io.a",
        "pkg.schema.f:1: private name _y of pkg.schema.g",
        "pkg.trainer.h:2: private name _y of pkg.schema.g",
    ]


def test_checker_finds_private_uses_in_user_code(tmp_path: Path) -> None:
    (tmp_path / "ex.py").write_text(
        "from gyre_contract import diff, Problem\n"
        "from gyre_contract.io._writer import write_steps\n"
        "import gyre_contract.core._models as m\n"
        "from gyre_contract import pinned\n"
        "from gyre_contract.pinned import CartPoleStep\n")
    (tmp_path / "page.md").write_text(
        "Prose may name `gyre_contract.io._writer`.\n\n```python\nfrom gyre_contract.io import Episode\n"
        "```\n\n```console\n$ gyre-contract validate r.jsonl --model gyre_contract.harness._llmdemo:S\n"
        "$ gyre-contract validate r.jsonl --model gyre_contract.pinned:CartPoleStep\n```\n")
    public = {"gyre_contract": {"diff"}, "gyre_contract.io": {"Episode"},
              "gyre_contract.pinned": {"CartPoleStep"}}
    assert private_uses(tmp_path / "ex.py", public, tmp_path) == [
        "ex.py:2: private module in gyre_contract.io._writer",
        "ex.py:3: private module in gyre_contract.core._models",
        "ex.py:1: Problem is not in gyre_contract.__all__",
    ]
    assert private_uses(tmp_path / "page.md", public, tmp_path) == [
        "page.md:8: private module in gyre_contract.harness._llmdemo"]


def test_checker_finds_rows_spelled_outside_their_home(tmp_path: Path) -> None:
    package = write_package(tmp_path, {
        "trainer/_layouts.py": 'ROWS = "step"  # the rows of tokens\n',
        "harness/stages.py": 'if fmap.rows == "step":\n    pass\nstep = "step"\n',
    })
    assert rows_spellings(package, {"pkg/trainer/_layouts.py": "home"}) == [
        'pkg/harness/stages.py:1: if fmap.rows == "step":']


def test_checker_finds_a_long_module(tmp_path: Path) -> None:
    package = write_package(tmp_path, {"core/short.py": "x = 1\n" * 800,
                                       "core/long.py": "x = 1\n" * 801})
    assert long_modules(Graph.build(package)) == ["pkg.core.long has 801 lines (limit 800)"]


def test_checker_finds_upward_and_sideways_imports(tmp_path: Path) -> None:
    package = write_package(tmp_path, {
        "__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.cli import m\n",
        "pinned.py": "from pkg.core import base\n",
        "core/base.py": "def f():\n    from pkg.io import reader\n",
        "io/reader.py": "from pkg.core import base\nfrom pkg import pinned\n",
        "schema/s.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.trainer import t\n",
        "trainer/t.py": "from pkg.io import reader\nfrom pkg.schema import s\n",
        "adapters/a.py": "from pkg.schema import s\n",
        "harness/h.py": "import pkg\n",
        "cli/m.py": "from pkg.harness import h\nfrom pkg.schema import s\n",
    })
    assert upward_imports(Graph.build(package)) == [
        "pkg.adapters.a:1: adapters imports schema (pkg.schema.s)",
        "pkg.core.base:2 (inside a function): core imports io (pkg.io.reader)",
        "pkg.harness.h:1: harness imports the façade module pkg, which reaches up to layer 6",
        "pkg.schema.s:3 (under TYPE_CHECKING): schema imports trainer (pkg.trainer.t)",
    ]


def test_checker_passes_a_clean_package(tmp_path: Path) -> None:
    package = write_package(tmp_path, {
        "core/a.py": "import numpy\n",
        "io/b.py": "from pkg.core import a\nfrom pkg.core.a import *\n",
        "trainer/c.py": "from ..io import b\nfrom . import d\n",
        "trainer/d.py": "x = 1\n",
        "cli/e.py": "import pkg.trainer.c as c\ny = c.d\n",
    })
    graph = Graph.build(package)
    assert (cycles(graph), private_imports(graph), long_modules(graph), upward_imports(graph)) == (
        [], [], [], [])


def test_checker_finds_assertions_on_wall_time(tmp_path: Path) -> None:
    path = tmp_path / "test_slow.py"
    path.write_text(
        "import time\n"
        "from time import perf_counter\n"
        "from hypothesis import given, settings\n"
        "SETTINGS = settings(max_examples=5, deadline=None)\n"
        "def test_direct():\n"
        "    start = time.perf_counter()\n"
        "    " + "assert" + " (time.perf_counter()\n"  # in pieces: this file is not a timing test
        "            - start) < 0.1\n"
        "def test_through_names():\n"
        "    start = perf_counter()\n"
        "    seconds = perf_counter() - start\n"
        "    took = seconds * 1000\n"
        "    assert took < 100, took\n"
        "def test_waits_without_asserting_a_time(path):\n"
        "    deadline = time.monotonic() + 60\n"
        "    while time.monotonic() < deadline:\n"
        "        assert path is not None\n"
        "    def inner():\n"
        "        assert deadline\n"  # another scope: `deadline` there is not this one's
        "@given(x=st.integers())\n"
        "def test_under_the_default_deadline(x):\n"
        "    pass\n"
        "@settings(deadline=None)\n"
        "@given(x=st.integers())\n"
        "def test_without_deadline(x):\n"
        "    pass\n"
        "@SETTINGS\n"
        "@given(x=st.integers())\n"
        "def test_with_shared_settings(x):\n"
        "    pass\n")
    assert wall_time_assertions(path) == ["test_slow.py:7: asserts on a wall time",
                                          "test_slow.py:13: asserts on a wall time"]
    assert hypothesis_deadlines(path) == [
        "test_slow.py:21: test_under_the_default_deadline runs under hypothesis's deadline"]


def test_checker_finds_references_outside_the_repository(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_bytes(b"fine\nsee " + OUTSIDE[0] + b"/CONTRACT.md\n")
    (tmp_path / "docs" / ".cache").mkdir()
    (tmp_path / "docs" / ".cache" / "b.md").write_bytes(OUTSIDE[2])  # caches are not the repository
    assert references_outside(tmp_path / "docs") == [
        f"docs/a.md:2: see {OUTSIDE[0].decode()}/CONTRACT.md"]
