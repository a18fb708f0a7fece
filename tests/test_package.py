"""The public surface: at most 30 names at the top level and 60 across the package, every public
module with `__all__`, docs/api.md listing exactly those names, the shims of 0.2 gone, and the
import light."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

import gyre_contract

ROOT = Path(__file__).resolve().parent.parent
API_DOC = ROOT / "docs" / "api.md"
SUBPACKAGES = ("core", "io", "schema", "adapters", "trainer", "channel", "harness")
PUBLIC_MODULES = ("gyre_contract", *(f"gyre_contract.{s}" for s in SUBPACKAGES),
                  "gyre_contract.pinned", "gyre_contract.cli")
"""Every module of the package without a `_` in its dotted path (`__main__` aside)."""
MAX_TOP_LEVEL = 30
MAX_PUBLIC = 60


# -- the size of the surface -----------------------------------------------------------------

def surface_problems(exports: Mapping[str, Sequence[str] | None], top: str = "gyre_contract",
                     max_top: int = MAX_TOP_LEVEL, max_public: int = MAX_PUBLIC) -> list[str]:
    """What breaks the surface's bounds, given each public module's `__all__` (None: it has none):
    a module without `__all__`, more than `max_top` names at the top level, more than `max_public`
    unique names across the package. Each message names the names."""
    found = [f"{module} has no __all__" for module, names in exports.items() if names is None]
    top_names = list(exports.get(top) or [])
    if len(top_names) > max_top:
        found.append(f"{len(top_names)} names at the top level (limit {max_top}): "
                     f"{', '.join(top_names)}")
    unique = sorted({n for names in exports.values() for n in names or []})
    if len(unique) > max_public:
        found.append(f"{len(unique)} public names across the package (limit {max_public}): "
                     f"{', '.join(unique)}")
    return found


def public_modules_on_disk(package_dir: Path) -> list[str]:
    """Dotted names of the package's modules with no `_`-prefixed part (`__init__` is its package's)."""
    names = []
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts[-1] == "__main__" or any(p.startswith("_") for p in parts):
            continue
        names.append(".".join(parts))
    return names


def exports() -> dict[str, list[str] | None]:
    return {m: getattr(importlib.import_module(m), "__all__", None) for m in PUBLIC_MODULES}


def test_the_surface_is_small_and_every_public_module_has_all():
    assert surface_problems(exports()) == []


def test_the_public_modules_are_exactly_those_listed():
    """A new module is private (`_name.py`) unless it is added here, to the count and to api.md."""
    assert public_modules_on_disk(ROOT / "gyre_contract") == sorted(PUBLIC_MODULES)


def test_the_surface_check_can_fail():
    many = {"pkg": [f"n{i}" for i in range(31)], "pkg.a": [f"m{i}" for i in range(30)],
            "pkg.b": None}
    assert surface_problems(many, top="pkg") == [
        "pkg.b has no __all__",
        "31 names at the top level (limit 30): " + ", ".join(f"n{i}" for i in range(31)),
        "61 public names across the package (limit 60): "
        + ", ".join(sorted([f"n{i}" for i in range(31)] + [f"m{i}" for i in range(30)])),
    ]
    assert surface_problems({"pkg": ["a", "b"], "pkg.a": ["a", "c"]}, top="pkg", max_top=2,
                            max_public=3) == []  # a name in two modules counts once


def test_public_modules_on_disk_skip_private_parts(tmp_path: Path):
    for rel in ("pkg/__init__.py", "pkg/__main__.py", "pkg/pinned.py", "pkg/_x.py",
                "pkg/core/__init__.py", "pkg/core/_models.py", "pkg/core/util.py",
                "pkg/io/_bulk/__init__.py", "pkg/io/_bulk/plan.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert public_modules_on_disk(tmp_path / "pkg") == ["pkg", "pkg.core", "pkg.core.util",
                                                        "pkg.pinned"]


def test_every_public_name_is_defined_and_shared_names_are_one_object():
    for module, names in exports().items():
        package = importlib.import_module(module)
        for name in names or []:
            assert getattr(package, name) is not None, f"{module}.{name}"
            if name in gyre_contract.__all__:
                assert getattr(package, name) is getattr(gyre_contract, name), f"{module}.{name}"
    assert gyre_contract.core.RolloutStepV1 is gyre_contract.RolloutStep
    assert gyre_contract.core.TrainBatchV1 is gyre_contract.TrainBatch
    assert gyre_contract.core.TokenBatchV1 is gyre_contract.TokenBatch
    assert issubclass(gyre_contract.MissingFieldError, KeyError)
    assert issubclass(gyre_contract.MissingFieldError, gyre_contract.ContractError)


# -- the import stays light ------------------------------------------------------------------

def heavy_modules_after(statement: str) -> list[str]:
    code = (f"import sys; {statement}; "
            "print(','.join(m for m in ('torch', 'tensordict', 'verl', 'vllm', 'gymnasium', "
            "'matplotlib', 'jsonschema', 'ray', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_import_is_light():
    assert heavy_modules_after("import gyre_contract") == []
    # the trainer's containers: the adapters and the stages that hand batches over import no
    # torch, tensordict or verl until a container is asked for
    assert heavy_modules_after("import gyre_contract; from gyre_contract.adapters import "
                               "to_torch, to_tensordict, to_dataproto, from_vllm; "
                               "from gyre_contract.harness import half_way") == []


def test_the_lightness_check_can_fail():
    assert heavy_modules_after("import gyre_contract, jsonschema") == ["jsonschema"]


def loaded_after(code: str) -> tuple[set[str], str]:
    """(every module loaded, what `code` printed) after `code` runs in a fresh interpreter;
    gyre_contract's own modules are named without their `gyre_contract.` prefix, in front of
    the others (`>core._lazy`), so that none is mistaken for the standard library's (`io`)."""
    probe = (f"{code}\nimport sys\nprint('\\n#MODULES ' + ','.join(sorted("
             "'>' + m[len('gyre_contract.'):] if m.startswith('gyre_contract.') else m "
             "for m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    head, _, modules = done.stdout.rpartition("\n#MODULES ")
    return set(modules.strip().split(",")), head


MACHINERY = (">harness", ">io._shards", ">schema._diffing", ">core._models", "numpy",
             "pydantic", "pyarrow", "torch", "gymnasium", "matplotlib", "ray", "jsonschema",
             "msgspec", "duckdb")
"""What start-up must not import: the commands' machinery (of the package: `>`), numpy and
pydantic, the extras."""


def machinery_in(modules: set[str]) -> list[str]:
    """The entries of MACHINERY loaded (a package counts when any of its modules is)."""
    return sorted(heavy for heavy in MACHINERY
                  if any(m == heavy or m.startswith(heavy + ".") for m in modules))


def ours(modules: set[str]) -> set[str]:
    """The package's own modules among `modules`, without the `>`."""
    return {m[1:] for m in modules if m.startswith(">")}


def test_import_loads_nothing_but_the_package():
    """Every top-level name loads on first use: `import gyre_contract` costs this file alone,
    no numpy, no pydantic, no model (`--version` and `--help` start from it)."""
    modules, _ = loaded_after("import gyre_contract")
    assert ours(modules) == {"core", "core._lazy"}
    assert machinery_in(modules) == []


CLI_CALL = ("from gyre_contract.cli._app import run\n"
            "import io\ncode = run({argv!r}, stdout=io.StringIO(), stderr=io.StringIO())\n"
            "print('exit', code)")


def cli_start_ups() -> list[list[str]]:
    from gyre_contract.cli._app import COMMANDS

    return [["--version"], ["--help"], [], *([name, "--help"] for name in COMMANDS)]


@pytest.mark.parametrize("argv", cli_start_ups(), ids=lambda argv: " ".join(argv) or "bare")
def test_the_command_line_starts_without_the_machinery(argv):
    """`--version`, `--help` and each command's `--help` build the parsers from the commands'
    light modules: no command's machinery, no numpy or pydantic, no extra."""
    modules, printed = loaded_after(CLI_CALL.format(argv=argv))
    assert printed.strip().endswith("exit 0" if argv else "exit 2")
    assert machinery_in(modules) == []


def test_a_command_imports_its_own_machinery_only(tmp_path: Path):
    """`compat` loads the schema machinery it runs on, not the harness, the files or Arrow."""
    schema = ROOT / "schemas" / "rollout_step.v1.json"
    modules, printed = loaded_after(CLI_CALL.format(argv=["compat", str(schema), str(schema)]))
    assert printed.strip().endswith("exit 0")
    assert "schema._compatibility" in ours(modules)
    assert machinery_in(modules) == [">core._models", "numpy", "pydantic"]


def test_the_start_up_check_can_fail():
    modules, _ = loaded_after("import gyre_contract.harness._stages")
    assert {">harness", "numpy", "pydantic"} <= set(machinery_in(modules))


SAMPLER = ("import gyre_contract\nfrom pydantic import BaseModel\n"
           "from gyre_contract import validate_step, RolloutStep\n"
           "from gyre_contract.pinned import CartPoleStep, LLMStep\n"
           "from gyre_contract.core import _modelinfo\n"
           "def models(cls):\n"
           "    for sub in cls.__subclasses__():\n"
           "        yield sub\n        yield from models(sub)\n"
           "def report():\n"
           "    ours = {m for m in models(BaseModel) if m.__module__.startswith('gyre_contract')}\n"
           "    built = sorted(m.__name__ for m in ours if m.__pydantic_complete__\n"
           "                   or type(m.__pydantic_validator__).__name__ != 'MockValSer')\n"
           "    print(len(ours), built, len(_modelinfo._INFOS))\n")
STEP = ("{'observation': [0.0, 0.0, 0.0, 0.0], 'action': 0, 'reward': 1.0, 'step': 0, "
        "'episode_id': 'e', 'terminated': False, 'truncated': False, 'policy_version': 0}")


def test_the_sampler_loads_the_core_and_builds_nothing_until_it_validates():
    """`validate_step` and the models load the core only; no pydantic core schema is built and
    no fast path compiled until a model validates its first record."""
    modules, printed = loaded_after(SAMPLER + "report()")
    assert {"core._models", "core._validate", "core._tensor", "core._errors"} <= ours(modules)
    assert not {m for m in ours(modules) if m.split(".")[0] in {
        "io", "schema", "trainer", "harness", "cli", "adapters", "channel"}}
    count, built, infos = printed.split(" ", 1)[0], *printed.split(" ", 1)[1].rsplit(" ", 1)
    assert int(count) >= 6 and built == "[]" and infos.strip() == "0", printed
    # the check can fail: one record builds its model and compiles its plan
    _, printed = loaded_after(SAMPLER + f"validate_step({STEP}, CartPoleStep)\nreport()")
    assert "'CartPoleStep'" in printed and not printed.strip().endswith(" 0"), printed


def test_importing_every_module_builds_no_model():
    """Nothing compiles at import anywhere in the package: every model of every module (the
    run log's `RunRecord` too) defers its pydantic schema to its first use."""
    code = ("import importlib, pkgutil, gyre_contract\n"
            "for m in pkgutil.walk_packages(gyre_contract.__path__, 'gyre_contract.'):\n"
            "    if not m.name.endswith('__main__'):\n"
            "        importlib.import_module(m.name)\n")
    _, printed = loaded_after(code + SAMPLER + "report()")
    assert printed.split(" ", 1)[1].strip() == "[] 0", printed


def test_a_name_loaded_on_first_use_is_the_modules_own():
    import gyre_contract.schema._diffing  # importing the module does not shadow the function
    from gyre_contract.schema._diffing import diff

    assert gyre_contract.diff is diff
    assert "diff" in dir(gyre_contract)


def test_subpackages_import_light():
    """A subpackage's `__init__` loads none of its modules: names load on first use."""
    code = ("import sys, gyre_contract.io, gyre_contract.schema, gyre_contract.trainer, "
            "gyre_contract.harness, gyre_contract.adapters, gyre_contract.channel; "
            "print(','.join(sorted(m for m in sys.modules if m.startswith('gyre_contract.') "
            "and m.split('.')[1] != 'core' and m.count('.') > 1)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_public_names_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for module, names in exports().items():
            package = importlib.import_module(module)
            for name in names or []:
                getattr(package, name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'gyre_contract' has no attribute 'nothing'"):
        gyre_contract.nothing  # noqa: B018


# -- docs/api.md is the list of public names -------------------------------------------------

def api_sections() -> dict[str, list[list[str]]]:
    """docs/api.md's table rows (cells, backticks removed) under each `##`/`###` heading."""
    sections: dict[str, list[list[str]]] = {}
    heading = ""
    for line in API_DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip().strip("`")
            sections.setdefault(heading, [])
        elif line.startswith("| `"):
            cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
            sections[heading].append(cells)
    return sections


TOP_LEVEL_SECTIONS = ("Records and the field type", "Errors", "Sampler", "Rollout files",
                      "Schemas and the diff (CI)", "Trainer", "Stage checks and the run log")


def test_docs_api_lists_exactly_the_top_level_names_and_where_they_live():
    sections = api_sections()
    rows = [row for title in TOP_LEVEL_SECTIONS for row in sections[title]]
    listed = [row[0] for row in rows]
    assert sorted(listed) == sorted(n for n in gyre_contract.__all__ if n != "__version__")
    for name, _, home in rows:
        assert getattr(importlib.import_module(home), name) is getattr(gyre_contract, name), name


@pytest.mark.parametrize("module", PUBLIC_MODULES[1:])
def test_docs_api_lists_exactly_each_modules_names(module):
    listed = [row[0] for row in api_sections()[module]]
    assert sorted(listed) == sorted(importlib.import_module(module).__all__)


# -- the shims of 0.2 are gone (CHANGELOG 0.3.0, Removed) -------------------------------------

OLD_MODULE_PATHS = ("models", "tensor", "validate", "errors", "rollout", "parquet", "raydata",
                    "fieldtable", "fieldmap", "advantages", "inspect", "recorder", "stages",
                    "runlog", "demo")
"""The module paths of 0.1 (the 13 that 0.2 aliased, and the two it had already dropped)."""

LEFT_THE_TOP_LEVEL = {
    # moved in 0.2 (served with a warning until 0.3.0)
    "EpisodeTracker": "gyre_contract.core", "FileReport": "gyre_contract.io",
    "validate_shards": "gyre_contract.io", "validate_dataset": "gyre_contract.io",
    "iter_train_batches": "gyre_contract.io", "DiffReport": "gyre_contract.schema",
    "CompatReport": "gyre_contract.schema", "batch_schema": "gyre_contract.trainer",
    "RunTimer": "gyre_contract.harness",
    "ShardsReport": None, "to_arrow_schema": None, "validate_parquet": None, "Field": None,
    "FieldTable": None, "field_table": None, "field_table_from_model": None,
    "unregister_op": None, "known_ops": None, "inspect_batch": None, "HalfWayReport": None,
    "LoopReport": None, "CycleReport": None, "summarize": None, "plot_runs": None,
    "episodes_from_records": None,
    # left in 0.3.0
    "RolloutStepV1": "gyre_contract.core", "TrainBatchV1": "gyre_contract.core",
    "TokenBatchV1": "gyre_contract.core", "GyreError": "gyre_contract.core",
    "SchemaError": "gyre_contract.core", "FieldMapError": "gyre_contract.core",
    "InputError": "gyre_contract.core", "Problem": "gyre_contract.core",
    "Episode": "gyre_contract.io", "RunRecord": None,
}
"""Each name that is no longer at the top level → its public home (None: private now)."""


@pytest.mark.parametrize("old", OLD_MODULE_PATHS)
def test_an_old_module_path_no_longer_imports(old):
    code = f"import gyre_contract.{old}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1 and f"No module named 'gyre_contract.{old}'" in done.stderr


def test_a_name_that_left_the_top_level_is_only_at_its_home():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, home in LEFT_THE_TOP_LEVEL.items():
            assert name not in gyre_contract.__all__ and name not in dir(gyre_contract), name
            with pytest.raises(AttributeError):
                getattr(gyre_contract, name)
            if home is not None:
                assert name in importlib.import_module(home).__all__, (name, home)
            else:
                assert not any(name in (names or []) for names in exports().values()), name


def test_the_deprecation_machinery_and_renamed_names_are_gone(tmp_path):
    from gyre_contract.core import _validate
    from gyre_contract.harness import half_way
    from gyre_contract.io import FileReport
    from gyre_contract.io._shards import ShardsReport
    from gyre_contract.pinned import CartPoleBatch
    from gyre_contract.schema import CompatReport, DiffReport
    from gyre_contract.trainer import FieldMap

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("gyre_contract.core.deprecation")
    assert not hasattr(_validate, "iter_validated_steps")
    for cls, old in ((FileReport, "holds"), (ShardsReport, "holds"), (CompatReport, "compatible"),
                     (DiffReport, "to_markdown")):
        assert not hasattr(cls, old), f"{cls.__name__}.{old}"
    batch = {"obs": [[[0.0] * 4]], "action": [[0]], "reward": [[0.0]], "done": [[True]],
             "mask": [[True]], "policy_version": [0]}
    with pytest.raises(TypeError, match="model"):
        gyre_contract.validate_batch(batch, model=CartPoleBatch)  # type: ignore[call-overload]
    fmap = FieldMap.load(ROOT / "examples" / "cartpole_map.json")
    with pytest.raises(TypeError, match="model"):
        fmap.to_train_batch([], model=CartPoleBatch)
    with pytest.raises(TypeError, match="step_model"):
        half_way(tmp_path / "none.jsonl", fmap, step_model=CartPoleBatch)
