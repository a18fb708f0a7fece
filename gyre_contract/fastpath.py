"""The fast path of `validate_step`: one compiled pydantic-core pass per record, per model.

Why: `validate_step` runs on every environment step. The normal path validates each tensor field
with a Python function and then applies the cross-field rules generically. The fast plan,
compiled once per model from the model's own core schema, checks tensor elements inside
pydantic-core (strict nested lists with the dtype's range and finiteness, or a numpy array of the
declared dtype) and calls one Python function per model instance, which turns lists into arrays
and applies the cross-field rules only where the model can break them.

The fast path only ever *accepts*. Whatever it is not sure of (any error, an unusual input form:
an int inside a float tensor, a numpy array of another dtype, ...) makes it give up, and the
normal path decides and explains. Verdicts and messages are therefore those of the normal path;
`tests/test_fast_paths.py` pins that the accepted values are the same too.

Numpy input (the documented fast path for samplers): a tensor field given as a numpy array of
exactly the declared dtype and shape is taken as is (no copy) after a finiteness check; a float
array of another float width is cast once. Scalars may be Python or numpy scalars.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError
from pydantic_core import SchemaValidator
from pydantic_core import core_schema as cs

from gyre_contract.dims import FLOAT_DTYPES, FLOAT_MAX, INT_RANGES, Shape, bind_dims, numpy_dtype
from gyre_contract.models import AnyObservation, JsonScalars, Modalities, RolloutStepV1, field_specs
from gyre_contract.tensor import ERROR_TYPE, TensorSpec

_SMALL = 64
"""Float arrays up to this size are checked for finiteness in Python (cheaper than a ufunc)."""

_PLAN = "__gyre_fast_plan__"
_CROSS = RolloutStepV1.__pydantic_decorators__.model_validators["_cross_field_rules"].func

# Schema node types the compiler understands; anything else means "no fast plan".
_PLAIN_NODES = frozenset({"any", "none", "bool", "int", "float", "str", "literal", "is-instance",
                          "definition-ref"})
_CHILD_KEYS = ("schema", "items_schema", "keys_schema", "values_schema")


class Unsupported(Exception):
    """The model holds something the compiler does not know; it keeps the normal path only."""


class _GiveUp(Exception):
    """Raised inside a fast validation: let the normal path decide and explain."""


def fast_validate(record: Any, model: type[BaseModel]) -> BaseModel | None:
    """The validated instance, or None when the normal path must decide (invalid or unusual)."""
    plan = model.__dict__.get(_PLAN)
    if plan is None:
        plan = _compile(model)
    if plan is False:
        return None
    try:
        return plan.validate_python(record)
    except (ValidationError, _GiveUp):
        return None  # not swallowed: the caller re-validates on the normal path and reports


def _compile(model: type[BaseModel]) -> SchemaValidator | bool:
    """Compile and cache the fast validator of `model` (False when it has none)."""
    try:
        schema = _Compiler().node(model.__pydantic_core_schema__)
        plan: SchemaValidator | bool = SchemaValidator(schema)
    except Unsupported:
        plan = False
    setattr(model, _PLAN, plan)
    return plan


class _Compiler:
    """Rewrites a model's core schema into the fast one (see the module docstring)."""

    def node(self, node: dict[str, Any]) -> dict[str, Any]:
        kind = node.get("type")
        if kind in _PLAIN_NODES:
            return node
        if kind == "union" and node.get("custom_error_type") == ERROR_TYPE + "_scalar":
            return node  # a gyre scalar: already checked in pydantic-core
        if kind == "function-plain":
            return self._plain(node)
        if kind == "function-after":
            return self._after(node)
        if kind == "model":
            return self._model(node)
        if kind == "definitions":
            return {**node, "schema": self.node(node["schema"]),
                    "definitions": [self.node(d) for d in node["definitions"]]}
        if kind == "model-fields":
            if node.get("extras_schema") or node.get("computed_fields"):
                raise Unsupported("extras or computed fields")
            fields = {k: {**f, "schema": self.node(f["schema"])} for k, f in node["fields"].items()}
            return {**node, "fields": fields}
        if kind in ("default", "nullable", "list", "dict"):
            return {**node, **{k: self.node(node[k]) for k in _CHILD_KEYS if k in node}}
        if kind in ("union", "chain"):
            key = "choices" if kind == "union" else "steps"
            if any(not isinstance(c, dict) for c in node[key]):
                raise Unsupported("tagged union choices")
            return {**node, key: [self.node(c) for c in node[key]]}
        raise Unsupported(f"schema node {kind!r}")

    def _plain(self, node: dict[str, Any]) -> dict[str, Any]:
        function = node["function"]["function"]
        owner = getattr(function, "__self__", None)
        if isinstance(owner, TensorSpec):
            return _tensor_schema(owner, node)
        if isinstance(owner, (AnyObservation, JsonScalars)):
            return node  # validated by the normal function; its result is final
        raise Unsupported(f"validator {function!r}")

    def _after(self, node: dict[str, Any]) -> dict[str, Any]:
        if node["function"]["function"] is not _CROSS or node["schema"].get("type") != "model":
            raise Unsupported("an after-validator of the project's own")
        inner = node["schema"]
        finish = _step_finisher(inner["cls"])
        return _wrap(finish, self._model_body(inner), node.get("ref"))

    def _model(self, node: dict[str, Any]) -> dict[str, Any]:
        cls = node["cls"]
        if not issubclass(cls, Modalities):
            raise Unsupported(f"nested model {cls.__name__}")
        body = {k: v for k, v in self._model_body(node).items() if k != "ref"}
        return _wrap(_modalities_finisher(cls), body, node.get("ref"))

    def _model_body(self, node: dict[str, Any]) -> dict[str, Any]:
        if node.get("custom_init") or node.get("post_init") or node.get("root_model"):
            raise Unsupported("custom __init__, post-init or root model")
        return {**node, "schema": self.node(node["schema"])}


def _wrap(finish: Callable[[Any], Any], schema: dict[str, Any], ref: str | None) -> dict:
    out = cs.no_info_after_validator_function(finish, schema)
    if ref is not None:
        out["ref"] = ref
    return out


# -- tensor fields ------------------------------------------------------------------------------

def _tensor_schema(spec: TensorSpec, normal: dict[str, Any]) -> dict[str, Any]:
    """A numpy array (checked later), strict nested lists of the dtype, else the normal function.

    Only single-dtype tensors get the list forms; the normal function (last choice) handles every
    other form with its exact semantics, and its result passes the finisher unchanged.
    """
    choices: list[dict[str, Any]] = [cs.is_instance_schema(np.ndarray)]
    if isinstance(spec.dtype, str):
        leaf = _leaf(spec.dtype)
        variadic = [d for d in spec.shape if d.variadic]
        if not variadic:
            choices.append(_nested(leaf, spec.shape))
        elif len(spec.shape) == 1:  # a lone *name: a scalar or a flat list are the usual forms
            choices += [leaf, cs.list_schema(leaf, strict=True)]
    choices.append(normal)
    return cs.union_schema(choices, mode="left_to_right")


def _leaf(dtype: str) -> dict[str, Any]:
    """One element, strictly: a float tensor refuses ints here (their exactness rule is the
    normal path's), and every float must be finite and within the dtype's range."""
    if dtype == "bool":
        return cs.bool_schema(strict=True)
    if dtype == "string":
        return cs.str_schema(strict=True)
    if dtype in INT_RANGES:
        lo, hi = INT_RANGES[dtype]
        return cs.int_schema(strict=True, ge=lo, le=hi)
    top = FLOAT_MAX[dtype]
    return cs.chain_schema([cs.is_instance_schema(float),
                            cs.float_schema(strict=True, allow_inf_nan=False, ge=-top, le=top)])


def _nested(leaf: dict[str, Any], shape: Shape) -> dict[str, Any]:
    body = leaf
    for dim in reversed(shape):
        body = cs.list_schema(body, strict=True, min_length=dim.size, max_length=dim.size)
    return body


class _Tensor:
    """Turns a tensor field's fast-validated value into the normal path's result."""

    def __init__(self, attr: str, spec: TensorSpec) -> None:
        self.attr = attr
        self.spec = spec
        self.dtypes = tuple(numpy_dtype(d) for d in spec.dtypes if d != "bfloat16")
        self.single = self.dtypes[0] if len(self.dtypes) == 1 and isinstance(spec.dtype, str) \
            else None
        self.float = all(d in FLOAT_DTYPES for d in spec.dtypes)
        self.rank = len(spec.shape)
        self.variadic = any(d.variadic for d in spec.shape)
        self.fixed = _fixed_positions(spec.shape)

    def convert(self, value: Any) -> Any:
        if value.__class__ is list:
            return self._from_list(value)
        if value.__class__ is np.ndarray:
            return self._from_array(value)
        if isinstance(value, np.generic):
            return value  # the normal function's 0-d result (a numpy scalar of the dtype)
        if self.single is not None and value.__class__ in (float, int, bool, str):
            return self.single.type(value)  # a scalar for a lone *name, as np.asarray(v)[()]
        raise _GiveUp

    def _from_list(self, value: list[Any]) -> np.ndarray:
        dtype = self.single
        if dtype is None:
            raise _GiveUp
        try:
            arr = np.array(value, dtype=None if dtype.kind == "U" else dtype)
        except (ValueError, TypeError):
            raise _GiveUp from None  # ragged lists under named dims: the normal path explains
        if arr.ndim != len(self.spec.shape) and not self.variadic:
            raise _GiveUp
        if not arr.size and dtype.kind != "f":
            raise _GiveUp  # numpy reads [] as float64; the normal path decides
        return arr

    def _from_array(self, arr: np.ndarray) -> np.ndarray:
        dtype = arr.dtype
        if dtype not in self.dtypes:
            if not (self.float and dtype.kind == "f" and self.single is not None):
                raise _GiveUp
            with np.errstate(over="ignore", invalid="ignore"):
                arr = arr.astype(self.single)
            dtype = arr.dtype
        if arr.ndim == 0 or not self._shape_ok(arr.shape):
            raise _GiveUp
        if dtype.kind == "f" and self.spec.finite and not _all_finite(arr):
            raise _GiveUp
        return arr

    def _shape_ok(self, shape: tuple[int, ...]) -> bool:
        if self.variadic:
            if len(shape) < self.rank - 1:
                return False
        elif len(shape) != self.rank:
            return False
        for at, size in self.fixed:
            if shape[at] != size:
                return False
        return True


def _fixed_positions(shape: Shape) -> tuple[tuple[int, int], ...]:
    """(axis, size) of each fixed dim; axes after a *name count from the end (negative)."""
    out = []
    at = next((i for i, d in enumerate(shape) if d.variadic), None)
    for i, dim in enumerate(shape):
        if dim.size is not None:
            out.append((i if at is None or i < at else i - len(shape), dim.size))
    return tuple(out)


def _all_finite(arr: np.ndarray) -> bool:
    """No NaN or infinity. Small arrays: a Python sum (inf - inf and nan stay non-finite)."""
    if arr.size <= _SMALL:
        total = sum(arr.ravel().tolist())
        return total - total == 0.0
    return bool(np.isfinite(arr).all())


def _tensors(model: type[BaseModel]) -> list[_Tensor]:
    attrs = {info.alias or name: name for name, info in model.model_fields.items()}
    return [_Tensor(attrs[wire], spec) for wire, spec in field_specs(model).items()
            if isinstance(spec, TensorSpec) and not spec.is_scalar]


def _convert_all(tensors: list[_Tensor], values: dict[str, Any]) -> None:
    for tensor in tensors:
        value = values[tensor.attr]
        if value is not None:
            values[tensor.attr] = tensor.convert(value)


def _modalities_finisher(model: type[BaseModel]) -> Callable[[Any], Any]:
    tensors = _tensors(model)

    def finish(instance: Any) -> Any:
        _convert_all(tensors, instance.__dict__)
        return instance

    return finish


# -- the cross-field rules of a step (models.step_cross_problems, as a yes/no) --------------------

def _step_finisher(model: type[BaseModel]) -> Callable[[Any], Any]:
    tensors = _tensors(model)
    binds = _shared_locations(model)
    logprob_spec = field_specs(model).get("logprob")
    if not isinstance(logprob_spec, TensorSpec):
        raise Unsupported("logprob is not a tensor field")
    free_logprob = any(d.variadic for d in logprob_spec.shape)

    def finish(step: Any) -> Any:
        values = step.__dict__
        _convert_all(tensors, values)
        if binds and not _dims_agree(binds, values):
            raise _GiveUp
        logprob = values["logprob"]
        if logprob is not None and not _logprob_ok(logprob, values["action"], free_logprob):
            raise _GiveUp
        nxt = values["next_observation"]
        if nxt is not None and not _same_structure(values["observation"], nxt):
            raise _GiveUp
        return step

    return finish


_Location = tuple[tuple[str, ...], Shape]


def _shared_locations(model: type[BaseModel]) -> list[_Location]:
    """Where the dims named in more than one place live: only there can two fields disagree."""
    locations: list[_Location] = []
    _collect(model, (), locations)
    counts: dict[str, int] = {}
    for _, shape in locations:
        for dim in shape:
            if dim.name is not None:
                counts[dim.name] = counts.get(dim.name, 0) + 1
    shared = {name for name, n in counts.items() if n > 1}
    return [(path, shape) for path, shape in locations if any(d.name in shared for d in shape)]


def _collect(model: type[BaseModel], prefix: tuple[str, ...], out: list[_Location]) -> None:
    attrs = {info.alias or name: name for name, info in model.model_fields.items()}
    for wire, spec in field_specs(model).items():
        path = (*prefix, attrs[wire])
        if isinstance(spec, AnyObservation):
            if spec.lead:
                raise Unsupported("an observation with lead dims in a step")
            out.append((path, spec.spec.shape))  # binds only when the value is an array
        elif isinstance(spec, TensorSpec):
            out.append((path, spec.shape))
        elif isinstance(spec, type) and issubclass(spec, Modalities):
            _collect(spec, path, out)


def _dims_agree(locations: list[_Location], values: dict[str, Any]) -> bool:
    bindings: dict[str, Any] = {}
    for path, shape in locations:
        value: Any = values[path[0]]
        for attr in path[1:]:
            if not isinstance(value, BaseModel):
                value = None
                break
            value = value.__dict__[attr]
        if value.__class__ is np.ndarray and bind_dims(shape, value.shape, bindings):
            return False
    return True


def _logprob_ok(logprob: Any, action: Any, free: bool) -> bool:
    lp_shape = logprob.shape if isinstance(logprob, (np.ndarray, np.generic)) else ()
    if free and lp_shape and lp_shape != np.shape(action):
        return False
    if action.__class__ is int:
        discrete = True
    elif isinstance(action, (np.ndarray, np.generic)):
        discrete = action.dtype.kind in "iu"
    else:
        discrete = np.asarray(action).dtype.kind in "iu"
    if not discrete:
        return True
    if logprob.__class__ is np.ndarray:
        return not logprob.size or not logprob.max() > 0
    return not float(logprob) > 0


def _same_structure(obs: Any, nxt: Any) -> bool:
    if isinstance(obs, dict) != isinstance(nxt, dict):
        return False
    if isinstance(obs, dict) and set(obs) != set(nxt):
        return False
    return not (isinstance(obs, np.ndarray) and isinstance(nxt, np.ndarray)
                and obs.shape != nxt.shape)
