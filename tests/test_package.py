"""The public surface: every documented name imports, and the import stays light."""

from __future__ import annotations

import subprocess
import sys

import gyre_contract

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
