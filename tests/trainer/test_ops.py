"""The op registry on its own (gyre_contract.trainer._ops): lookups, registration rules, running an
op on a group of modalities, the argument checks, and the names the field map re-exports."""

from __future__ import annotations

import numpy as np
import pytest

from gyre_contract.core._dims import DTYPES
from gyre_contract.core._errors import ContractError
from gyre_contract.trainer import _fieldmap as fieldmap
from gyre_contract.trainer import _ops as ops
from gyre_contract.trainer._fieldmap import FieldMap


def test_the_field_map_re_exports_the_ops_public_names():
    for name in ("Op", "OpFunction", "ArgCheck", "cast_array", "known_ops", "register_op",
                 "step_ops", "unregister_op"):
        assert getattr(fieldmap, name) is getattr(ops, name), name
        assert name in fieldmap.__all__


def test_get_op_finds_registered_ops_only():
    gae = ops.get_op("gae")
    assert gae is not None and gae.builtin
    assert gae.sources == ("reward", "value", "terminated", "truncated", "next_value")
    assert gae.required == ("gamma", "lam")
    assert ops.get_op("no_such_op") is None


def test_step_ops_are_the_one_input_ops_but_rename():
    assert "rename" not in ops.step_ops()
    assert all(ops.get_op(name).sources == "one" for name in ops.step_ops())
    assert set(ops.step_ops()) < set(ops.known_ops())


def test_ops_that_read_the_mask_are_registered():
    assert ops.NEEDS_MASK <= set(ops.known_ops())


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"name": "not an identifier"}, "op name must be an identifier, got 'not an identifier'"),
    ({"name": "rename"}, "op 'rename' is built in and cannot be replaced"),
    ({"name": "mine", "sources": "two"}, 'sources must be "one", "many", "none" or a tuple of names'),
])
def test_register_op_refuses_bad_registrations(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ops.register_op(fn=lambda inputs, columns: inputs[0], **kwargs)


def test_unregister_op_leaves_built_in_ops_and_refuses_unknown_names():
    with pytest.raises(ValueError, match="no custom op named 'gae'"):
        ops.unregister_op("gae")
    with pytest.raises(ValueError, match="no custom op named 'nope'"):
        ops.unregister_op("nope")
    assert "gae" in ops.known_ops()


def test_run_op_maps_a_one_input_op_over_a_group_and_refuses_a_group_elsewhere():
    group = {"image": np.zeros((1, 2, 3), np.float32), "state": np.ones((1, 2), np.float32)}
    cast = ops.get_op("cast")
    out = ops.run_op(cast, [group], {}, {"dtype": "float64"})
    assert {k: v.dtype for k, v in out.items()} == {"image": np.float64, "state": np.float64}
    with pytest.raises(ContractError, match="op 'any' cannot take a group of modalities"):
        ops.run_op(ops.get_op("any"), [group, np.zeros((1, 2), bool)], {}, {})


def test_check_dtype_names_the_dtypes_a_map_may_cast_to():
    assert ops.check_dtype("float32") is None
    castable = ", ".join(d for d in DTYPES if d != "bfloat16")
    assert ops.check_dtype("bfloat16") == f'one of {castable}, got "bfloat16"'


def test_a_maps_reads_follow_its_entries_and_the_op_registry_after_first_use():
    """`FieldMap.sources`/`reads`/`sparse_sources` are cached (a trainer end reads them each
    `get`); an op registered, replaced or removed, or an entry added, replaced or removed after
    they were first worked out, shows at once."""
    ops.register_op("plus_extra", lambda inputs, columns: inputs[0], reads=("extra_a",))
    try:
        fmap = FieldMap.from_dict({"gyre_field_map": 1, "fields": {
            "x": {"op": "plus_extra", "from": "reward"}, "next_obs": {"op": "next",
                                                                     "from": ["step", "final"]}}})
        assert fmap.sources() == ["reward", "extra_a", "step", "final", "mask"]
        assert fmap.sparse_sources() == ["final"]
        ops.register_op("plus_extra", lambda inputs, columns: inputs[0], reads=("extra_b",))
        assert fmap.sources() == ["reward", "extra_b", "step", "final", "mask"]
        assert fmap.reads()["x"] == ("reward", "extra_b")
        ops.unregister_op("plus_extra")
        assert fmap.sources() == ["reward", "step", "final", "mask"]
    finally:
        if "plus_extra" in ops.known_ops():
            ops.unregister_op("plus_extra")
    fmap.fields["x"] = FieldMap.from_dict({"gyre_field_map": 1, "fields": {
        "x": {"from": "value"}}}).fields["x"]
    assert fmap.sources() == ["value", "step", "final", "mask"]
    fmap.fields["y"] = FieldMap.from_dict({"gyre_field_map": 1, "fields": {
        "y": {"from": "final"}}}).fields["y"]
    assert fmap.sparse_sources() == []  # read whole by `y`: no longer sparse
    del fmap.fields["y"], fmap.fields["next_obs"]
    assert fmap.sources() == ["value"] and fmap.reads() == {"x": ("value",)}
    fmap.sources().append("not kept")  # the cached lists are the map's own
    assert fmap.sources() == ["value"]
