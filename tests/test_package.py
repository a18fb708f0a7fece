"""The public surface: every documented name imports, docs/api.md lists exactly the public names,
old names keep working with a DeprecationWarning, and the import stays light."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import gyre_contract

ROOT = Path(__file__).resolve().parent.parent
API_DOC = ROOT / "docs" / "api.md"
SUBPACKAGES = ("core", "io", "schema", "trainer", "channel", "harness")

# docs/contract.md §8 (public API), in its order: the names users import.
CONTRACT_NAMES = [
    "RolloutStep", "TrainBatch", "RolloutStepV1", "TrainBatchV1", "validate_step",
    "validate_episode", "validate_batch", "ContractError", "MissingFieldError", "json_schema",
    "export_schemas", "load_schema", "diff", "FieldMap", "collate", "discounted_returns", "gae",
    "read_steps", "write_steps", "half_way", "full_loop", "RunLog", "RunRecord",
]


def test_public_names_import():
    for name in CONTRACT_NAMES:
        assert name in gyre_contract.__all__, name
    for name in gyre_contract.__all__:
        assert getattr(gyre_contract, name) is not None, name
    assert gyre_contract.RolloutStep is gyre_contract.RolloutStepV1
    assert gyre_contract.TrainBatch is gyre_contract.TrainBatchV1
    assert issubclass(gyre_contract.MissingFieldError, KeyError)
    assert issubclass(gyre_contract.MissingFieldError, gyre_contract.ContractError)


def heavy_modules_after(statement: str) -> list[str]:
    code = (f"import sys; {statement}; "
            "print(','.join(m for m in ('torch', 'gymnasium', 'matplotlib', 'jsonschema', 'ray',"
            " 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_import_is_light():
    assert heavy_modules_after("import gyre_contract") == []


def test_the_lightness_check_can_fail():
    assert heavy_modules_after("import gyre_contract, jsonschema") == ["jsonschema"]


def test_only_the_samplers_modules_load_with_the_package():
    """Diff, field maps, files and stages load on first use; the sampler pays only for validation."""
    code = ("import sys, gyre_contract; "
            "print(','.join(sorted(m.split('.', 1)[1] for m in sys.modules "
            "if m.startswith('gyre_contract.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.strip().split(","))
    assert not {m for m in loaded if m.split(".")[0] in {"io", "schema", "trainer", "harness", "cli"}}
    assert {"core.models", "core.validate", "core.tensor", "core.errors"} <= loaded


def test_a_name_loaded_on_first_use_is_the_modules_own():
    import gyre_contract.schema.diffing  # importing the module does not shadow the function
    from gyre_contract.schema.diffing import diff

    assert gyre_contract.diff is diff
    assert "diff" in dir(gyre_contract)


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


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_docs_api_lists_exactly_each_subpackages_names(sub):
    package = importlib.import_module(f"gyre_contract.{sub}")
    listed = [row[0] for row in api_sections()[f"gyre_contract.{sub}"]]
    assert sorted(listed) == sorted(package.__all__)
    for name in package.__all__:
        assert getattr(package, name) is not None, name
        if name in gyre_contract.__all__:
            assert getattr(package, name) is getattr(gyre_contract, name), name


# The 63 top-level names before the public surface was cut (version 0.1.0).
OLD_TOP_LEVEL = [
    "RolloutStep", "RolloutStepV1", "TrainBatch", "TrainBatchV1", "Modalities", "Tensor",
    "validate_step", "validate_episode", "validate_batch", "EpisodeTracker",
    "read_steps", "write_steps", "read_episodes", "validate_file", "Episode", "FileReport",
    "GyreError", "ContractError", "MissingFieldError", "SchemaError", "FieldMapError",
    "InputError", "Problem",
    "json_schema", "export_schemas", "load_schema", "field_table", "field_table_from_model",
    "infer_schema", "Field", "FieldTable", "diff", "DiffReport", "compat", "CompatReport",
    "FieldMap", "register_op", "unregister_op", "known_ops", "collate", "gae",
    "discounted_returns", "inspect_batch", "batch_schema", "half_way", "HalfWayReport",
    "Recorder", "episodes_from_records", "full_loop", "LoopReport", "CycleReport",
    "RunLog", "RunRecord", "RunTimer", "summarize", "plot_runs",
    "to_arrow_schema", "validate_parquet", "validate_shards", "validate_dataset",
    "iter_train_batches", "ShardsReport",
]


def test_every_name_that_left_the_top_level_still_works_warns_and_is_documented():
    moved = {row[0].removeprefix("gyre_contract."): row[1]
             for row in api_sections()["Names that left the top level"]}
    assert sorted(moved) == sorted(set(OLD_TOP_LEVEL) - set(gyre_contract.__all__))
    assert len(gyre_contract.__all__) - 1 < len(OLD_TOP_LEVEL) - 20  # smaller, by more than 20
    for name, home in moved.items():
        assert name not in dir(gyre_contract)
        with pytest.warns(DeprecationWarning, match=rf"^gyre_contract\.{name} has moved: import "
                          rf"it from {re.escape(home)} "):
            old = getattr(gyre_contract, name)
        assert old is getattr(importlib.import_module(home), name)


def test_the_public_names_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in gyre_contract.__all__:
            getattr(gyre_contract, name)
        for sub in SUBPACKAGES:
            package = importlib.import_module(f"gyre_contract.{sub}")
            for name in package.__all__:
                getattr(package, name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'gyre_contract' has no attribute 'nothing'"):
        gyre_contract.nothing  # noqa: B018


def test_subpackages_import_light():
    """A subpackage's `__init__` loads none of its modules: names load on first use."""
    code = ("import sys, gyre_contract.io, gyre_contract.schema, gyre_contract.trainer, "
            "gyre_contract.harness; "
            "print(','.join(sorted(m for m in sys.modules if m.startswith('gyre_contract.') "
            "and m.split('.')[1] != 'core' and m.count('.') > 1)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_old_module_paths_import_with_a_warning_naming_the_new_home():
    rows = api_sections()["Old module paths"]
    code = "\n".join([
        "import importlib, warnings",
        "warnings.simplefilter('always')",
        f"rows = {[(old, new) for old, new in rows]!r}",
        "for old, new in rows:",
        "    with warnings.catch_warnings(record=True) as caught:",
        "        module = importlib.import_module(old)",
        "    texts = [str(w.message) for w in caught if w.category is DeprecationWarning]",
        "    assert texts == [f'the module {old} has moved: import from {new} (the old name goes "
        "away in 0.3.0)'], (old, texts)",
        "    target = importlib.import_module(new)",
        "    assert target.__all__ and all(getattr(module, n) is getattr(target, n) "
        "for n in target.__all__), old",
        "from gyre_contract.rollout import write_steps",
        "from gyre_contract.runlog import format_summary, summarize",
        "from gyre_contract.fieldmap import FieldMap",
        "from gyre_contract.schema import json_schema, export_schemas",
        "import gyre_contract",
        "assert gyre_contract.diff.__module__ == 'gyre_contract.schema.diffing'",
        "assert callable(gyre_contract.collate) and callable(gyre_contract.compat)",
        "print('ok')",
    ])
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code],
                          capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")


def test_an_old_module_path_warns_at_the_importing_line():
    code = "import warnings; warnings.simplefilter('always')\nimport gyre_contract.rollout\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stderr.startswith("<string>:2: DeprecationWarning: the module "
                                  "gyre_contract.rollout has moved: import from gyre_contract.io")


# -- one name for the model argument ---------------------------------------------------------

def test_batch_model_is_the_batch_models_name_and_model_still_works():
    from gyre_contract.core.validate import validate_batch
    from gyre_contract.io import read_episodes
    from gyre_contract.pinned import CartPoleBatch, CartPoleStep
    from gyre_contract.trainer import FieldMap

    fmap = FieldMap.load(ROOT / "examples" / "cartpole_map.json")
    episodes = list(read_episodes(ROOT / "examples" / "cartpole_rollouts.jsonl", CartPoleStep))
    arrays = fmap.build(episodes)
    new = validate_batch(arrays, batch_model=CartPoleBatch)
    assert isinstance(new, CartPoleBatch)
    with pytest.warns(DeprecationWarning, match=r"^validate_batch\(\): the argument model= is "
                      r"now batch_model="):
        assert isinstance(validate_batch(arrays, model=CartPoleBatch), CartPoleBatch)
    assert isinstance(fmap.to_train_batch(episodes, batch_model=CartPoleBatch), CartPoleBatch)
    with pytest.warns(DeprecationWarning, match=r"^FieldMap\.to_train_batch\(\): the argument "
                      r"model= is now batch_model="):
        assert isinstance(fmap.to_train_batch(episodes, model=CartPoleBatch), CartPoleBatch)
