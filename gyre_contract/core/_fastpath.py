"""The fast path of `validate_step`: one compiled pydantic-core pass per record, per model.

Why: `validate_step` runs on every environment step. The normal path validates each tensor field
with a Python function and then applies the cross-field rules generically. The fast plan,
compiled once per model from the model's own core schema, checks tensor elements inside
pydantic-core (strict nested lists with the dtype's range and finiteness, or a numpy array of the
declared dtype; the forms and their conversions are in `core._fastforms`). Then either

- a model whose fields all get their final values inside pydantic-core and share no named dim
  (the default `RolloutStep`: free observation, `int64 | float32` action, `[*name]` tensors;
  `CartPoleStep`) gets no finisher: each cross-field rule is a validator of the field it
  concerns, which sees the fields validated before it (`_field_checks`), so a usual record (a
  logprob <= 0, no `next_observation`) calls no Python code of ours beyond `np.array`; or
- a model whose fields share a named dim (`LLMStep`: the action's `A` in `logprob` and the token
  fields) gets one Python function per record, the finisher, which binds the dims, converts what
  is left as lists (a log-prob whose elements were checked <= 0 in pydantic-core) and applies
  the cross-field rules only where the model can break them.

The fast path only ever *accepts*. Whatever it is not sure of (any error, an unusual input form:
an int inside a float tensor, a numpy array of another dtype, ...) makes it give up, and the
normal path decides and explains. Verdicts and messages are therefore those of the normal path;
`tests/core/test_fast_paths.py` pins that the accepted values are the same too.

It implements the registry's `field` and `step` rules listed in `FAST_PATH` (`core._registry`):
when a rule of those kinds is registered that it does not list, no model gets a fast plan (the
normal path, which runs every registered rule, takes every record). `GYRE_FAST_PATHS=0` turns
it off at run time (`validate_step` reads `switches.FAST.on` on each call, a flag that follows
the variable).

Numpy input (the documented fast path for samplers): a tensor field given as a numpy array of
exactly the declared dtype and shape is taken as is (no copy) after a finiteness check; a float
array of another float width is cast once. Scalars may be Python or numpy scalars.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError
from pydantic_core import SchemaValidator
from pydantic_core import core_schema as cs

from gyre_contract.core._dims import FLOAT_DTYPES, INT_DTYPES, Shape, bind_dims, numpy_dtype
from gyre_contract.core._fastforms import (
    GiveUp,
    as_array,
    converter,
    field_converters,
    final_in_schema,
    float_scalar,
    leaf_schema,
    lone_tensor,
    modalities_finisher,
    nested_lists,
    observation_schema,
    scalar_choices,
    tensor_schema,
)
from gyre_contract.core._fields import TOKEN_FIELDS
from gyre_contract.core._modelinfo import derived_table, model_info
from gyre_contract.core._models import AnyObservation, JsonScalars, Modalities, RolloutStepV1, field_specs
from gyre_contract.core._registry import declare_fast_path
from gyre_contract.core._rules import FIELD_RULES
from gyre_contract.core._switches import fast_paths_enabled
from gyre_contract.core._tensor import ERROR_TYPE, TensorSpec

_CROSS = RolloutStepV1.__pydantic_decorators__.model_validators["_cross_field_rules"].func

# Schema node types the compiler understands; anything else means "no fast plan".
_PLAIN_NODES = frozenset({"any", "none", "bool", "int", "float", "str", "literal", "is-instance",
                          "definition-ref"})
_CHILD_KEYS = ("schema", "items_schema", "keys_schema", "values_schema")


class Unsupported(Exception):
    """The model holds something the compiler does not know; it keeps the normal path only."""


FAST_PATH = declare_fast_path(
    "compiled_step", kinds=("field", "step"),
    implements=[*(r.name for r in FIELD_RULES),  # pydantic-core strict types, else the normal function
                "step.dims_agree",  # _dims_agree
                "step.logprob_shape", "step.logprob_nonpositive",  # _logprob_ok, leaf_schema(nonpositive)
                "step.token_fields_shape", "step.ref_logprob_nonpositive",  # _token_checker
                "step.next_observation_structure", "step.next_observation_modalities",
                "step.next_observation_shape"])  # _same_structure
"""The rules the compiled path implements: each one it is given broken, it refuses."""

PLAN_KEY = "fastpath.compiled_step"
"""The `ModelInfo.derived` key of a model's compiled fast validator."""
FAST_FAILURES = (ValidationError, GiveUp)


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
        raw = _raw_logprob(model) if _field_checks(model) is None else None
        compiler = _Compiler(config, _nonpositive_specs(model), raw)
        return SchemaValidator(compiler.node(schema), config)
    except Unsupported:
        return None


PLANS = derived_table(PLAN_KEY, compile_plan)
"""Model -> its compiled fast validator or None: `model_info(model).derived(PLAN_KEY, ...)` as
one dict lookup, for `validate_step`. Emptied when the registry changes (`modelinfo`)."""


def _root_model(schema: Mapping[str, Any]) -> Mapping[str, Any]:
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

    def __init__(self, config: Mapping[str, Any] | None, nonpositive: set[int],
                 raw: TensorSpec | None = None) -> None:
        self.config = _config_key(config)
        self.nonpositive = nonpositive  # ids of the specs whose list elements must be <= 0
        self.raw = raw  # the [*name] logprob whose Python float the finisher checks, converts

    def node(self, node: Mapping[str, Any]) -> cs.CoreSchema:
        kind = node.get("type")
        if kind in _PLAIN_NODES:
            return node
        if kind == "union" and node.get("custom_error_type") == ERROR_TYPE + "_scalar":
            return scalar_choices(node)  # a gyre scalar: checked in pydantic-core already
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

    def _plain(self, node: Mapping[str, Any]) -> cs.CoreSchema:
        function = node["function"]["function"]
        owner = getattr(function, "__self__", None)
        if isinstance(owner, TensorSpec):
            return tensor_schema(owner, node, id(owner) in self.nonpositive, owner is self.raw)
        if isinstance(owner, AnyObservation) and not owner.lead:
            return observation_schema(node)  # fastforms: any rank, or modalities
        if isinstance(owner, (AnyObservation, JsonScalars)):
            return node  # validated by the normal function; its result is final
        raise Unsupported(f"validator {function!r}")

    def _after(self, node: Mapping[str, Any]) -> cs.CoreSchema:
        if node["function"]["function"] is not _CROSS or node["schema"].get("type") != "model":
            raise Unsupported("an after-validator of the project's own")
        inner = node["schema"]
        checks = _field_checks(inner["cls"])
        if checks is not None:  # no finisher: each cross-field rule checked on its field
            body = self._model_body(inner)
            fields = body["schema"]["fields"]
            for attr, (check, first) in checks.items():
                fields[attr] = {**fields[attr], "schema": _checked(fields[attr]["schema"], check,
                                                                     first)}
            if node.get("ref") is not None:
                body["ref"] = node["ref"]
            return body
        finish = _step_finisher(inner["cls"])
        return _wrap(finish, self._model_body(inner), node.get("ref"))

    def _model(self, node: Mapping[str, Any]) -> cs.CoreSchema:
        cls = node["cls"]
        if not issubclass(cls, Modalities):
            raise Unsupported(f"nested model {cls.__name__}")
        if _config_key(node.get("config")) != self.config:
            raise Unsupported(f"{cls.__name__} has a configuration of its own")
        fields = self._model_body(node)["schema"]  # validated under the same configuration
        return _wrap(modalities_finisher(cls), fields, node.get("ref"))

    def _model_body(self, node: Mapping[str, Any]) -> dict[str, Any]:
        if node.get("custom_init") or node.get("post_init") or node.get("root_model"):
            raise Unsupported("custom __init__, post-init or root model")
        return {**node, "schema": self.node(node["schema"])}


def _config_key(config: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (config or {}).items() if k != "title"}


def _wrap(finish: Callable[[Any], Any], schema: cs.CoreSchema, ref: str | None) -> cs.CoreSchema:
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


def _raw_logprob(model: type[BaseModel]) -> TensorSpec | None:
    """A step's `[*name]` float logprob: its usual form, one Python float, is checked against
    the action (sign) and converted by the finisher, cheaper than in the schema."""
    spec = field_specs(model).get("logprob") if issubclass(model, RolloutStepV1) else None
    if isinstance(spec, TensorSpec) and lone_tensor(spec) and spec.dtype in FLOAT_DTYPES:
        return spec
    return None


# -- the step rules of the registry (FAST_PATH.implements), as a yes/no -------------------------

def _step_finisher(model: type[BaseModel]) -> Callable[[Any], Any]:
    specs = field_specs(model)
    logprob_spec, action_spec = specs.get("logprob"), specs.get("action")
    if not isinstance(logprob_spec, TensorSpec) or not isinstance(action_spec, TensorSpec):
        raise Unsupported("logprob or action is not a tensor field")
    nonpositive = _nonpositive_specs(model)
    converters = [(a, c) for a, c in field_converters(model, nonpositive) if a != "logprob"]
    convert_logprob = None if logprob_spec.is_scalar \
        or final_in_schema(logprob_spec, id(logprob_spec) in nonpositive) \
        else converter(logprob_spec)
    raw = _raw_logprob(model)
    raw_float = None if raw is None else float_scalar(numpy_dtype(raw.dtypes[0]))  # one float
    binds = _shared_locations(model)
    free_logprob = any(d.variadic for d in logprob_spec.shape)
    # A scalar int action is always a Python int here: a Python float logprob needs its sign only
    # (a float is a [] logprob, which any action admits).
    int_action = action_spec.is_scalar and action_spec.dtype in INT_DTYPES
    # Under an int action, list elements of logprob were checked <= 0 in pydantic-core.
    checked_lists = id(logprob_spec) in _nonpositive_specs(model) and not free_logprob
    convert_checked = convert_logprob if checked_lists else None
    has_tokens, tokens_ok = _token_checker(model)

    def finish(step: Any) -> Any:
        values = step.__dict__
        if converters:
            for attr, convert in converters:
                value = values[attr]
                if value is not None:
                    values[attr] = convert(value)
        logprob = values["logprob"]
        if logprob.__class__ is float:  # a scalar logprob ([]), checked for its sign only
            if logprob > 0 and (int_action or _discrete(values["action"])):
                raise GiveUp
            if raw_float is not None:
                values["logprob"] = raw_float(logprob)
        elif logprob.__class__ is list and convert_checked is not None:
            values["logprob"] = convert_checked(logprob)
        elif logprob is not None:
            if convert_logprob is not None:
                logprob = values["logprob"] = convert_logprob(logprob)
            if not _logprob_ok(logprob, values["action"], free_logprob):
                raise GiveUp
        if binds and not _dims_agree(binds, values):
            raise GiveUp
        if has_tokens(values) and not tokens_ok(values):
            raise GiveUp  # step.token_fields_shape, step.ref_logprob_nonpositive
        nxt = values["next_observation"]
        if nxt is not None and not _same_structure(values["observation"], nxt):
            raise GiveUp
        return step

    return finish


# -- the same rules on the fields themselves, for models that need no finisher ------------------

FieldCheck = Callable[[Any, Any], Any]


def _field_checks(model: type[BaseModel]
                  ) -> dict[str, tuple[FieldCheck, list[cs.CoreSchema]]] | None:
    """attribute -> (check, a choice tried first) for a step model whose fields all get their
    final values inside pydantic-core and share no named dim (the generic `RolloutStep`): each
    cross-field rule runs as a validator of its field, with the fields before it at hand
    (`info.data`), and only when the field is given. None when the model needs the finisher.

    The first choices of a `[*name]` float `logprob` are a float <= 0 (as float32: it breaks no
    rule whatever the action, so the usual record calls no Python function for its cross-field
    rules at all) and nested lists of floats <= 0 (only their shape is compared with the action).
    """
    if not issubclass(model, RolloutStepV1):
        return None
    return model_info(model).derived("fastpath.field_checks", _build_field_checks)


def _build_field_checks(model: type[BaseModel]
                        ) -> dict[str, tuple[FieldCheck, list[cs.CoreSchema]]] | None:
    specs = field_specs(model)
    logprob, action = specs.get("logprob"), specs.get("action")
    if not isinstance(logprob, TensorSpec) or not isinstance(action, TensorSpec) \
            or field_converters(model, _nonpositive_specs(model)) or _shared_locations(model):
        return None
    info = model_info(model)
    order = list(info.wires)
    tokens = [w for w in TOKEN_FIELDS if isinstance(specs.get(w), TensorSpec)]
    if any(order.index("action") > order.index(w) for w in ("logprob", *tokens)) \
            or order.index("observation") > order.index("next_observation"):
        return None  # the field a check compares with must be validated first, to be at hand
    free = any(d.variadic for d in logprob.shape)

    def check_logprob(value: Any, validation: Any) -> Any:
        action = validation.data.get("action")
        if action is None or not _logprob_ok(value, action, free):
            raise GiveUp
        return value

    def check_next(value: Any, validation: Any) -> Any:
        observation = validation.data.get("observation")
        if observation is None or not _same_structure(observation, value):
            raise GiveUp
        return value

    checks: dict[str, tuple[FieldCheck, list[cs.CoreSchema]]] = {
        info.attr("logprob"): (check_logprob, _nonpositive_first(logprob)),
        info.attr("next_observation"): (check_next, [])}
    for wire in tokens:
        spec = specs[wire]
        checks[info.attr(wire)] = (_token_check(wire, spec),
                                   _nonpositive_first(spec) if wire == "ref_logprob" else [])
    return checks


def _check_shape(value: np.ndarray, validation: Any) -> Any:
    """Lists of log-probs checked <= 0 in pydantic-core: only their shape is the action's."""
    action = validation.data.get("action")
    if action is None or value.shape != np.shape(action):
        raise GiveUp
    return value


def _nonpositive_first(spec: TensorSpec) -> list[cs.CoreSchema]:
    """For a `[*name]` float log-prob: a float <= 0 (as the dtype's scalar, no check needed
    whatever the action) and nested lists of floats <= 0 (their shape checked), tried first.
    For a `[]` one: a Python float <= 0."""
    if spec.is_scalar and spec.dtype in FLOAT_DTYPES:
        return [leaf_schema(spec.dtype, nonpositive=True)]
    if not lone_tensor(spec) or spec.dtype not in FLOAT_DTYPES:
        return []
    np_dtype = numpy_dtype(spec.dtype)
    nonpositive = leaf_schema(spec.dtype, nonpositive=True)
    return [cs.no_info_after_validator_function(float_scalar(np_dtype), nonpositive),
            *(cs.with_info_after_validator_function(_check_shape, lists)
              for lists in as_array(np_dtype, nested_lists(nonpositive)))]


def _token_check(wire: str, spec: TensorSpec) -> FieldCheck:
    """`step.token_fields_shape` (a free shape is the action's; `ref_logprob` may be []) and, for
    `ref_logprob`, `step.ref_logprob_nonpositive`, as a validator of the token field."""
    free = any(d.variadic for d in spec.shape)
    ref = wire == "ref_logprob"

    def check(value: Any, validation: Any) -> Any:
        action = validation.data.get("action")
        if action is None:
            raise GiveUp
        if free:
            got = np.shape(value)
            if got != np.shape(action) and not (ref and got == ()):
                raise GiveUp
        if ref and _discrete(action):
            if value.__class__ is np.ndarray:
                if value.size and value.max() > 0:
                    raise GiveUp
            elif value > 0:
                raise GiveUp
        return value

    return check


def _checked(schema: cs.CoreSchema, check: FieldCheck, first: list[cs.CoreSchema]
             ) -> cs.CoreSchema:
    """A field's schema (inside its `default`, if optional) followed by `check`, and the
    choices `first` tried before both."""
    if schema.get("type") == "default":
        return {**schema, "schema": _checked(schema["schema"], check, first)}
    out = cs.with_info_after_validator_function(check, schema)
    return cs.union_schema([*first, out], mode="left_to_right") if first else out


_Location = tuple[str, str | None, str | None, bool, Shape]
"""(attribute, attribute inside a modalities instance or None, the name of a lone [N] or [*name]
dim or None, whether it is a [*name], the shape): one tensor whose dims another tensor shares."""


def _shared_locations(model: type[BaseModel]) -> list[_Location]:
    """Where the dims named in more than one place live: only there can two fields disagree."""
    found: list[tuple[tuple[str, ...], Shape]] = []
    observations = _collect(model, (), found)
    counts: dict[str, int] = {}
    for path, shape in found:
        for dim in shape:
            if dim.name is not None and path not in observations[1:]:
                counts[dim.name] = counts.get(dim.name, 0) + 1
    # The free observations (observation, next_observation) bind their dims only when they are
    # arrays, and then `_same_structure` compares their shapes: they count as one location.
    shared = {name for name, n in counts.items() if n > 1}
    out = []
    for path, shape in found:
        if not any(d.name in shared for d in shape):
            continue
        if len(path) > 2:
            raise Unsupported("modalities nested in modalities")
        lone = shape[0].name if len(shape) == 1 else None
        out.append((path[0], path[1] if len(path) == 2 else None, lone,
                    lone is not None and shape[0].variadic, shape))
    return out


def _collect(model: type[BaseModel], prefix: tuple[str, ...],
             out: list[tuple[tuple[str, ...], Shape]]) -> list[tuple[str, ...]]:
    """Append (path, shape) of each tensor of `model` to `out`; the paths of its free
    observations."""
    info = model_info(model)
    observations = []
    for wire, spec in field_specs(model).items():
        path = (*prefix, info.attr(wire))
        if isinstance(spec, AnyObservation):
            if spec.lead:
                raise Unsupported("an observation with lead dims in a step")
            out.append((path, spec.spec.shape))  # binds only when the value is an array
            observations.append(path)
        elif isinstance(spec, TensorSpec):
            out.append((path, spec.shape))
        elif isinstance(spec, type) and issubclass(spec, Modalities):
            _collect(spec, path, out)
    return observations


def _dims_agree(locations: list[_Location], values: dict[str, Any]) -> bool:
    """`models.record_bindings` finds no conflict among these locations."""
    bindings: dict[str, Any] = {}
    for attr, sub, lone, whole, shape in locations:
        value = values[attr]
        if sub is not None and value is not None:
            value = value.__dict__[sub]
        if value.__class__ is not np.ndarray:
            continue
        if lone is not None:  # the usual [N] or [*name]: no pairing of dims needed
            size = value.shape if whole else value.shape[0]
            if bindings.setdefault(lone, size) != size:
                return False
        elif bind_dims(shape, value.shape, bindings):
            return False
    return True


def _discrete(action: Any) -> bool:
    """An integer action (a token id, a discrete choice): its logprob is <= 0."""
    if action.__class__ is int:
        return True
    if isinstance(action, (np.ndarray, np.generic)):
        return action.dtype.kind in "iu"
    return np.asarray(action).dtype.kind in "iu"


def _logprob_ok(logprob: Any, action: Any, free: bool) -> bool:
    """The step rules on logprob find nothing: shape [] or the action's; <= 0 if discrete."""
    is_array = logprob.__class__ is np.ndarray
    if not is_array:
        if not logprob > 0:  # a scalar is [] (any action admits it) and needs no sign check
            return True
    elif free and logprob.shape and logprob.shape != np.shape(action):
        return False
    if not _discrete(action):
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
        return (lambda values: False), (lambda values: True)
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


def _same_structure(obs: Any, nxt: Any) -> bool:
    if isinstance(obs, dict) != isinstance(nxt, dict):
        return False
    if isinstance(obs, dict) and set(obs) != set(nxt):
        return False
    return not (isinstance(obs, np.ndarray) and isinstance(nxt, np.ndarray)
                and obs.shape != nxt.shape)
