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
`tests/core/test_fast_paths.py` pins that the accepted values are the same too.

It implements the registry's `field` and `step` rules listed in `FAST_PATH` (`core.registry`):
when a rule of those kinds is registered that it does not list, no model gets a fast plan (the
normal path, which runs every registered rule, takes every record). `GYRE_FAST_PATHS=0` turns
it off at run time (`validate_step` reads `switches.FAST.on` on each call, a flag that follows
the variable).

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

from gyre_contract.core.dims import FLOAT_DTYPES, FLOAT_MAX, INT_DTYPES, Shape, bind_dims, numpy_dtype
from gyre_contract.core.modelinfo import derived_table, model_info
from gyre_contract.core.models import AnyObservation, JsonScalars, Modalities, RolloutStepV1, field_specs
from gyre_contract.core.registry import declare_fast_path
from gyre_contract.core.rules import FIELD_RULES
from gyre_contract.core.switches import fast_paths_enabled
from gyre_contract.core.tensor import ERROR_TYPE, TensorSpec
from gyre_contract.core.tokenfields import TOKEN_FIELDS

_SMALL = 64
"""Float arrays up to this size are checked for finiteness in Python (cheaper than a ufunc)."""

_CROSS = RolloutStepV1.__pydantic_decorators__.model_validators["_cross_field_rules"].func

# Schema node types the compiler understands; anything else means "no fast plan".
_PLAIN_NODES = frozenset({"any", "none", "bool", "int", "float", "str", "literal", "is-instance",
                          "definition-ref"})
_CHILD_KEYS = ("schema", "items_schema", "keys_schema", "values_schema")


class Unsupported(Exception):
    """The model holds something the compiler does not know; it keeps the normal path only."""


class _GiveUp(Exception):
    """Raised inside a fast validation: let the normal path decide and explain."""


FAST_PATH = declare_fast_path(
    "compiled_step", kinds=("field", "step"),
    implements=[*(r.name for r in FIELD_RULES),  # pydantic-core strict types, else the normal function
                "step.dims_agree",  # _dims_agree
                "step.logprob_shape", "step.logprob_nonpositive",  # _logprob_ok, _leaf(nonpositive)
                "step.token_fields_shape", "step.ref_logprob_nonpositive",  # _token_checker
                "step.next_observation_structure", "step.next_observation_modalities",
                "step.next_observation_shape"])  # _same_structure
"""The rules the compiled path implements: each one it is given broken, it refuses."""

PLAN_KEY = "fastpath.compiled_step"
"""The `ModelInfo.derived` key of a model's compiled fast validator."""
FAST_FAILURES = (ValidationError, _GiveUp)


def fast_plan(model: type[BaseModel]) -> SchemaValidator | None:
    """The compiled fast validator of `model`, or None when it has none (or fast paths are off).

    Its `validate_python(record)` returns the instance or raises `FAST_FAILURES`: the record is
    invalid or unusual, and the normal path must decide and explain.
    """
    if not fast_paths_enabled():
        return None
    return model_info(model).derived(PLAN_KEY, compile_plan)


def fast_validate(record: Any, model: type[BaseModel]) -> BaseModel | None:
    """The validated instance, or None when the normal path must decide (invalid or unusual)."""
    plan = fast_plan(model)
    if plan is None:
        return None
    try:
        return plan.validate_python(record)
    except FAST_FAILURES:
        return None  # not swallowed: the caller re-validates on the normal path and reports


def compile_plan(model: type[BaseModel]) -> SchemaValidator | None:
    """The fast validator of `model`, or None when it has none: a rule of the registry it does
    not implement, or a model it cannot compile (see `Unsupported`). Asked once per model via
    `ModelInfo.derived` (again after the registry changes)."""
    if not FAST_PATH.usable():
        return None
    schema = model.__pydantic_core_schema__
    try:
        config = _root_model(schema).get("config")
        compiler = _Compiler(config, _nonpositive_specs(model))
        return SchemaValidator(compiler.node(schema), config)
    except Unsupported:
        return None


PLANS = derived_table(PLAN_KEY, compile_plan)
"""Model -> its compiled fast validator or None: `model_info(model).derived(PLAN_KEY, ...)` as
one dict lookup, for `validate_step`. Emptied when the registry changes (`modelinfo`)."""


def _root_model(schema: dict[str, Any]) -> dict[str, Any]:
    node = schema
    while node.get("type") in ("definitions", "function-after"):
        node = node["schema"]
    if node.get("type") != "model":
        raise Unsupported("not a model schema")
    return node


class _Compiler:
    """Rewrites a model's core schema into the fast one (see the module docstring).

    A nested model (a `Modalities` observation) becomes its fields schema plus a finisher that
    builds the instance: pydantic-core would otherwise reuse the class's own, normal validator.
    """

    def __init__(self, config: dict[str, Any] | None, nonpositive: set[int]) -> None:
        self.config = _config_key(config)
        self.nonpositive = nonpositive  # ids of the specs whose list elements must be <= 0

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
            return _tensor_schema(owner, node, id(owner) in self.nonpositive)
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
        if _config_key(node.get("config")) != self.config:
            raise Unsupported(f"{cls.__name__} has a configuration of its own")
        fields = self._model_body(node)["schema"]  # validated under the same configuration
        return _wrap(_modalities_finisher(cls), fields, node.get("ref"))

    def _model_body(self, node: dict[str, Any]) -> dict[str, Any]:
        if node.get("custom_init") or node.get("post_init") or node.get("root_model"):
            raise Unsupported("custom __init__, post-init or root model")
        return {**node, "schema": self.node(node["schema"])}


def _config_key(config: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (config or {}).items() if k != "title"}


def _wrap(finish: Callable[[Any], Any], schema: dict[str, Any], ref: str | None) -> dict:
    out = cs.no_info_after_validator_function(finish, schema)
    if ref is not None:
        out["ref"] = ref
    return out


# -- tensor fields ------------------------------------------------------------------------------

def _nonpositive_specs(model: type[BaseModel]) -> set[int]:
    """A step's logprob under a discrete action (an int dtype): every element is <= 0.

    Checking that on list elements in pydantic-core spares a pass over the array later.
    """
    specs = field_specs(model) if issubclass(model, RolloutStepV1) else {}
    action = specs.get("action")
    if not isinstance(action, TensorSpec) or action.dtype not in INT_DTYPES:
        return set()
    return {id(spec) for wire in ("logprob", "ref_logprob")
            if isinstance(spec := specs.get(wire), TensorSpec) and spec.dtype in FLOAT_DTYPES}


def _tensor_schema(spec: TensorSpec, normal: dict[str, Any], nonpositive: bool = False
                   ) -> dict[str, Any]:
    """A numpy array (checked later), strict nested lists of the dtype, else the normal function.

    Only single-dtype tensors get the list forms; the normal function (last choice) handles every
    other form with its exact semantics, and its result passes the finisher unchanged.
    """
    choices: list[dict[str, Any]] = [cs.is_instance_schema(np.ndarray)]
    if isinstance(spec.dtype, str):
        leaf = _leaf(spec.dtype, nonpositive)
        variadic = [d for d in spec.shape if d.variadic]
        if not variadic:
            choices.append(_nested(leaf, spec.shape))
        elif len(spec.shape) == 1:  # a lone *name: a scalar or a flat list are the usual forms
            choices += [leaf, cs.list_schema(leaf, strict=True)]
    choices.append(normal)
    return cs.union_schema(choices, mode="left_to_right")


def _leaf(dtype: str, nonpositive: bool = False) -> dict[str, Any]:
    """One element, strictly: a float tensor refuses ints here (their exactness rule is the
    normal path's), and every float must be finite and within the dtype's range."""
    if dtype == "bool":
        return cs.bool_schema(strict=True)
    if dtype == "string":
        return cs.str_schema(strict=True)
    if dtype in INT_DTYPES:
        return cs.int_schema(strict=True)  # range: numpy raises OverflowError on conversion
    top = FLOAT_MAX[dtype]
    return cs.chain_schema([cs.is_instance_schema(float), cs.float_schema(
        strict=True, allow_inf_nan=False, ge=-top, le=0.0 if nonpositive else top)])


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
            try:
                return self.single.type(value)  # a scalar for a lone *name: np.asarray(v)[()]
            except OverflowError:
                raise _GiveUp from None
        raise _GiveUp

    def _from_list(self, value: list[Any]) -> np.ndarray:
        dtype = self.single
        if dtype is None:
            raise _GiveUp
        try:
            arr = np.array(value, dtype=None if dtype.kind == "U" else dtype)
        except (ValueError, TypeError, OverflowError):
            raise _GiveUp from None  # ragged, or an int out of range: the normal path explains
        if arr.ndim != len(self.spec.shape) and not self.variadic:
            raise _GiveUp
        if not arr.size and dtype.kind != "f":
            raise _GiveUp  # numpy reads [] as float64; the normal path decides
        return arr

    def _from_array(self, arr: np.ndarray) -> np.ndarray:
        dtype = arr.dtype
        if dtype not in self.dtypes and not (dtype.kind == "U" == self.dtypes[0].kind):
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


Converter = Callable[[Any], Any]


def _converters(model: type[BaseModel]) -> list[tuple[str, Converter]]:
    """(attribute, converter) for each tensor field that is not a plain scalar."""
    info = model_info(model)
    return [(info.attr(wire), _converter(spec)) for wire, spec in field_specs(model).items()
            if isinstance(spec, TensorSpec) and not spec.is_scalar]


def _converter(spec: TensorSpec) -> Converter:
    """The general `_Tensor.convert`, behind a shortcut for the usual form when there is one."""
    general = _Tensor("", spec).convert
    dtype = numpy_dtype(spec.dtype) if isinstance(spec.dtype, str) else None
    if dtype is None or dtype.kind == "U":
        return general
    array = np.array
    if all(d.size for d in spec.shape):  # fixed, non-zero dims: the list is exactly in shape

        def fixed(value: Any) -> Any:
            if value.__class__ is list:
                try:
                    return array(value, dtype)
                except OverflowError:  # an int beyond the dtype's range
                    raise _GiveUp from None
            return general(value)

        return fixed
    if len(spec.shape) == 1 and not spec.shape[0].variadic:  # [N]: a flat list cannot be ragged

        def flat(value: Any) -> Any:
            if value.__class__ is list:
                try:
                    out = array(value, dtype)
                except OverflowError:
                    raise _GiveUp from None
                if not value and dtype.kind != "f":
                    raise _GiveUp  # numpy reads [] as float64; the normal path decides
                return out
            return general(value)

        return flat
    if len(spec.shape) == 1 and spec.shape[0].variadic and dtype.kind == "f":
        scalar = dtype.type

        def lone(value: Any) -> Any:  # float32 [*logp]: most often one Python float
            if value.__class__ is float:
                return scalar(value)
            return general(value)

        return lone
    return general


def _convert_all(converters: list[tuple[str, Converter]], values: dict[str, Any]) -> None:
    for attr, convert in converters:
        value = values[attr]
        if value is not None:
            values[attr] = convert(value)


def _modalities_finisher(model: type[BaseModel]) -> Callable[[Any], Any]:
    """Convert the tensors, then build the instance as pydantic-core's model node would."""
    converters = _converters(model)
    new, set_slot = model.__new__, object.__setattr__

    def finish(fields: tuple[dict[str, Any], Any, set[str]]) -> Any:
        values, extra, fields_set = fields
        _convert_all(converters, values)
        instance = new(model)
        set_slot(instance, "__dict__", values)
        set_slot(instance, "__pydantic_extra__", extra)
        set_slot(instance, "__pydantic_fields_set__", fields_set)
        set_slot(instance, "__pydantic_private__", None)
        return instance

    return finish


# -- the step rules of the registry (FAST_PATH.implements), as a yes/no -------------------------

def _step_finisher(model: type[BaseModel]) -> Callable[[Any], Any]:
    specs = field_specs(model)
    logprob_spec, action_spec = specs.get("logprob"), specs.get("action")
    if not isinstance(logprob_spec, TensorSpec) or not isinstance(action_spec, TensorSpec):
        raise Unsupported("logprob or action is not a tensor field")
    converters = [(a, c) for a, c in _converters(model) if a != "logprob"]
    convert_logprob = None if logprob_spec.is_scalar else _converter(logprob_spec)
    binds = _shared_locations(model)
    free_logprob = any(d.variadic for d in logprob_spec.shape)
    # A scalar int action is always a Python int here: a Python float logprob needs its sign only.
    int_action = action_spec.is_scalar and action_spec.dtype in INT_DTYPES
    # Under an int action, list elements of logprob were checked <= 0 in pydantic-core.
    checked_lists = id(logprob_spec) in _nonpositive_specs(model) and not free_logprob
    has_tokens, tokens_ok = _token_checker(model)

    def finish(step: Any) -> Any:
        values = step.__dict__
        for attr, convert in converters:
            value = values[attr]
            if value is not None:
                values[attr] = convert(value)
        logprob = values["logprob"]
        if logprob.__class__ is float and int_action:
            if logprob > 0:
                raise _GiveUp
            if convert_logprob is not None:
                values["logprob"] = convert_logprob(logprob)
        elif logprob.__class__ is list and checked_lists:
            values["logprob"] = convert_logprob(logprob)  # type: ignore[misc]
        elif logprob is not None:
            if convert_logprob is not None:
                logprob = values["logprob"] = convert_logprob(logprob)
            if not _logprob_ok(logprob, values["action"], free_logprob):
                raise _GiveUp
        if binds and not _dims_agree(binds, values):
            raise _GiveUp
        if has_tokens(values) and not tokens_ok(values):
            raise _GiveUp  # step.token_fields_shape, step.ref_logprob_nonpositive
        nxt = values["next_observation"]
        if nxt is not None and not _same_structure(values["observation"], nxt):
            raise _GiveUp
        return step

    return finish


_Location = tuple[str, str | None, str | None, Shape]
"""(attribute, attribute inside a modalities instance or None, the name of a lone [N] dim or
None, the shape): one tensor whose dims another tensor shares."""


def _shared_locations(model: type[BaseModel]) -> list[_Location]:
    """Where the dims named in more than one place live: only there can two fields disagree."""
    found: list[tuple[tuple[str, ...], Shape]] = []
    _collect(model, (), found)
    counts: dict[str, int] = {}
    for _, shape in found:
        for dim in shape:
            if dim.name is not None:
                counts[dim.name] = counts.get(dim.name, 0) + 1
    shared = {name for name, n in counts.items() if n > 1}
    out = []
    for path, shape in found:
        if not any(d.name in shared for d in shape):
            continue
        if len(path) > 2:
            raise Unsupported("modalities nested in modalities")
        lone = shape[0].name if len(shape) == 1 and not shape[0].variadic else None
        out.append((path[0], path[1] if len(path) == 2 else None, lone, shape))
    return out


def _collect(model: type[BaseModel], prefix: tuple[str, ...],
             out: list[tuple[tuple[str, ...], Shape]]) -> None:
    info = model_info(model)
    for wire, spec in field_specs(model).items():
        path = (*prefix, info.attr(wire))
        if isinstance(spec, AnyObservation):
            if spec.lead:
                raise Unsupported("an observation with lead dims in a step")
            out.append((path, spec.spec.shape))  # binds only when the value is an array
        elif isinstance(spec, TensorSpec):
            out.append((path, spec.shape))
        elif isinstance(spec, type) and issubclass(spec, Modalities):
            _collect(spec, path, out)


def _dims_agree(locations: list[_Location], values: dict[str, Any]) -> bool:
    """`models.record_bindings` finds no conflict among these locations."""
    bindings: dict[str, Any] = {}
    for attr, sub, lone, shape in locations:
        value = values[attr]
        if sub is not None and value is not None:
            value = value.__dict__[sub]
        if value.__class__ is not np.ndarray:
            continue
        if lone is not None:  # the usual [N]: no pairing of dims needed
            size = value.shape[0]
            if bindings.setdefault(lone, size) != size:
                return False
        elif bind_dims(shape, value.shape, bindings):
            return False
    return True


def _logprob_ok(logprob: Any, action: Any, free: bool) -> bool:
    """`models._logprob_problems` finds nothing: shape [] or the action's; <= 0 if discrete."""
    is_array = logprob.__class__ is np.ndarray
    if free and is_array and logprob.shape and logprob.shape != np.shape(action):
        return False
    if action.__class__ is int:
        discrete = True
    elif isinstance(action, (np.ndarray, np.generic)):
        discrete = action.dtype.kind in "iu"
    else:
        discrete = np.asarray(action).dtype.kind in "iu"
    if not discrete:
        return True
    if is_array:
        return not logprob.size or not logprob.max() > 0
    return not logprob > 0


def _token_checker(model: type[BaseModel]
                   ) -> tuple[Callable[[dict[str, Any]], bool], Callable[[dict[str, Any]], bool]]:
    """(values -> whether the record has a token field, the check of `_token_ok`): the check is
    only asked of a record that has one."""
    checker = _token_ok(model)
    present = [w for w in TOKEN_FIELDS if isinstance(field_specs(model).get(w), TensorSpec)]
    if checker is None:
        return (lambda values: False), checker  # type: ignore[return-value]
    if len(present) == 3:  # every step model: one expression, no loop
        a, b, c = present
        return (lambda v: v[a] is not None or v[b] is not None or v[c] is not None), checker
    return (lambda v: any(v[w] is not None for w in present)), checker


def _token_ok(model: type[BaseModel]) -> Callable[[dict[str, Any]], bool] | None:
    """`step.token_fields_shape` and `step.ref_logprob_nonpositive` as a yes/no on a step's
    converted values (`tokenfields.token_field_problem` finds nothing); None when the model has
    no token field. A pinned shape (`A`) is bound by `_dims_agree`; a free one (`*name`) is
    compared with the action's here."""
    specs = field_specs(model)
    present = [w for w in TOKEN_FIELDS if isinstance(specs.get(w), TensorSpec)]
    if not present:
        return None
    free = [w for w in present if any(d.variadic for d in specs[w].shape)]
    ref = "ref_logprob" in present

    def ok(values: dict[str, Any]) -> bool:
        action = values["action"]
        shape = action.shape if action.__class__ is np.ndarray else np.shape(action)
        for wire in free:
            value = values[wire]
            if value is None:
                continue
            got = value.shape if value.__class__ is np.ndarray else np.shape(value)
            if got != shape and not (got == () and wire == "ref_logprob"):
                return False
        value = values["ref_logprob"] if ref else None
        if value is None or not _discrete(action):
            return True
        if value.__class__ is np.ndarray:
            return not (value.size and value.max() > 0)
        return not value > 0

    return ok


def _discrete(action: Any) -> bool:
    if action.__class__ is int:
        return True
    if isinstance(action, (np.ndarray, np.generic)):
        return action.dtype.kind in "iu"
    return np.asarray(action).dtype.kind in "iu"


def _same_structure(obs: Any, nxt: Any) -> bool:
    if isinstance(obs, dict) != isinstance(nxt, dict):
        return False
    if isinstance(obs, dict) and set(obs) != set(nxt):
        return False
    return not (isinstance(obs, np.ndarray) and isinstance(nxt, np.ndarray)
                and obs.shape != nxt.shape)
