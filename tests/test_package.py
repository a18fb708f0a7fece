"""The public surface: every documented name imports, and the import stays light."""

from __future__ import annotations

import subprocess
import sys

import gyre_contract

PUBLIC = ["RolloutStep", "RolloutStepV1", "TrainBatch", "TrainBatchV1", "Modalities", "Tensor",
          "validate_step", "validate_episode", "validate_batch", "EpisodeTracker",
          "ContractError", "MissingFieldError", "SchemaError", "FieldMapError", "InputError",
          "Problem", "json_schema", "export_schemas"]


def test_public_names_import():
    for name in PUBLIC:
        assert hasattr(gyre_contract, name), name
    assert gyre_contract.RolloutStep is gyre_contract.RolloutStepV1
    assert gyre_contract.TrainBatch is gyre_contract.TrainBatchV1


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
