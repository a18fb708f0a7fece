"""compat: breaking changes between two versions of one side's schema, by rule and direction."""

from __future__ import annotations

from pathlib import Path

import pytest

from gyre_contract.core._errors import SchemaError
from gyre_contract.schema._compatibility import RULES, compat

ROOT = Path(__file__).resolve().parents[2]
STEP = ROOT / "schemas" / "rollout_step.v1.json"


def schema(closed: bool = False, required: tuple[str, ...] = (), batch=None, **fields) -> dict:
    doc = {"type": "object", "required": list(required), "properties": {
        k: {"x-gyre-dtype": d, "x-gyre-shape": s, **({"x-gyre-role": r} if r else {})}
        for k, (d, s, r) in fields.items()}}
    if closed:
        doc["additionalProperties"] = False
    if batch is not None:
        doc["x-gyre-batch-dims"] = batch
    return doc


def rules(report) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.rule, c.field, c.breaks) for c in report.changes]


def test_same_schema_is_compatible_in_every_mode() -> None:
    for mode in ("backward", "forward", "full"):
        r = compat(STEP, STEP, mode)
        assert r.changes == [] and r.exit_code() == 0
        assert r.summary_line() == f"0 changes, compatible ({mode})"


def test_field_removed_from_a_closed_schema_breaks_backward() -> None:
    old = schema(True, ("a",), a=("float32", [], None), b=("float32", [], None))
    new = schema(True, ("a",), a=("float32", [], None))
    r = compat(old, new, "backward")
    assert rules(r) == [("field-removed", "b", ("backward",))]
    assert r.exit_code() == 1
    assert compat(old, new, "forward").exit_code() == 0


def test_required_field_added_breaks_backward_only() -> None:
    old = schema(False, ("a",), a=("float32", [], None))
    new = schema(False, ("a", "c"), a=("float32", [], None), c=("int64", [], None))
    assert rules(compat(old, new)) == [("required-field-added", "c", ("backward",))]
    assert compat(old, new, "forward").ok
    assert not compat(old, new, "full").ok


def test_dtype_narrowed_breaks_backward_widened_breaks_forward() -> None:
    wide = schema(a=("float64", [], None))
    narrow = schema(a=("float32", [], None))
    assert rules(compat(wide, narrow)) == [("dtype-narrowed", "a", ("backward",))]
    assert rules(compat(narrow, wide)) == [("dtype-changed", "a", ("forward",))]


def test_dims_and_roles_and_layout() -> None:
    old = schema(batch=["B", "T"], obs=("float32", ["B", "T", 4], "observation"),
                 tok=("int64", ["B", "T", "L"], None), r=("float32", ["B", "T"], "reward"))
    new = schema(batch=["T", "B"], obs=("float32", ["B", "T", 8], "observation"),
                 tok=("int64", ["B", "T", 16], None), r=("float32", ["B", "T"], "return"))
    r = compat(old, new, "full")
    assert rules(r) == [
        ("layout-changed", "(batch)", ("backward", "forward")),
        ("dim-changed", "obs", ("backward", "forward")),
        ("dim-changed", "tok", ("backward",)),
        ("role-changed", "r", ("backward", "forward")),
    ]
    assert {c.rule for c in r.changes} <= set(RULES)
    text = r.to_text()
    assert "BREAKING  layout-changed  (batch): batch dims [B, T] -> [T, B]" in text
    assert text.endswith("summary: 4 changes, NOT compatible (full): 4 breaking changes\n")


def test_made_optional_breaks_forward() -> None:
    old = schema(False, ("a",), a=("float32", [], None))
    new = schema(False, (), a=("float32", [], None))
    assert rules(compat(old, new, "forward")) == [("field-made-optional", "a", ("forward",))]
    assert compat(old, new, "backward").ok


def test_bad_mode() -> None:
    with pytest.raises(SchemaError, match="compat mode must be one of backward, forward, full"):
        compat(STEP, STEP, "sideways")


V1_0_STEP = ROOT / "tests" / "data" / "schemas" / "rollout_step.v1.0.json"
"""The step schema as contract v1.0 committed it: the old side of v1.0 -> v1.1."""


def test_v1_1_step_schema_reads_every_v1_0_record() -> None:
    r = compat(V1_0_STEP, STEP, "backward")
    assert r.exit_code() == 0 and r.summary_line() == "4 changes, compatible (backward)"
    assert [(c.rule, c.field) for c in r.changes] == [
        ("field-added-to-closed", f) for f in ("ref_logprob", "group_id", "loss_mask",
                                               "token_reward")]
    assert all(c.breaks == ("forward",) for c in r.changes)  # v1.0 refuses the new keys
    assert compat(V1_0_STEP, STEP, "forward").exit_code() == 1
