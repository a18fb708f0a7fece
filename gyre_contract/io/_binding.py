"""A bulk plan for a file checked against an unpinned model: bind what its data shows.

Why: without `--model`, a file is checked against `RolloutStep`, whose observation, action and
logprob take any shape (and an action either dtype). `fastfile` builds no plan for such a
model, so every line took the per-line path (~50 µs a line). Most files hold one shape per
field from the first line to the last. `bind_plan` reads the first lines of a clean block one by
one with the normal path, and when they agree it builds the plan of a model pinned to what they
show (each field's dtype and sizes, as if the sampler had pinned them), checked against the
file's own model: a block holding anything else (another shape, another dtype, an integer where
floats were bound) fails that plan's decoding and takes the line path of the unpinned model,
which decides and explains. So reports are identical either way (tests/io/test_binding.py).

What the plan accepts the unpinned model accepts too, with the same values: the pinned fields
are the unpinned ones with their named dims fixed; a field with a choice of dtypes bound to a
float is read as `int | float` and a block with an integer there is refused (the unpinned model
would read it as int64). `Binding` gives the episode tracker the dims and kinds the block's steps
bind, so that a later step read line by line is compared with them as after `add`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from gyre_contract.core._dims import FLOAT_DTYPES, dtype_name
from gyre_contract.core._errors import ContractError
from gyre_contract.core._fields import TOKEN_FIELDS, AnyObservation, field_specs, kind_fields, record_bindings
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import RolloutStepV1
from gyre_contract.core._switches import fast_paths_enabled
from gyre_contract.core._tensor import Tensor, TensorSpec, tensor_annotation
from gyre_contract.core._validate import validate_step
from gyre_contract.io._fastfile import Block, BulkPlan, build_plan
from gyre_contract.io._lines import MAX_RECORD_KEYS, parse_lines
from gyre_contract.io._raggedbinding import bind_ragged
from gyre_contract.io._raggedcols import RaggedPlan

SAMPLE_LINES = 64
"""Lines of a block read one by one to see what the file binds."""
MAX_TRIES = 8
"""Blocks tried before the file is read line by line throughout (the first lines disagree)."""


def bindable(model: type[BaseModel]) -> bool:
    """Whether `model` may get a plan bound from data: a step model whose fields leave a dim
    or a dtype open (a pinned model has its own plan, `fastfile.bulk_plan`)."""
    return fast_paths_enabled() and isinstance(model, type) and issubclass(model, RolloutStepV1)


class Binder:
    """The bound plan of one file: built from the first block whose first lines agree. With
    `ragged` (a file read into Arrow columns for a report), lines of token lists whose lengths
    vary bind a ragged plan (`raggedbinding`) where no flat plan binds."""

    def __init__(self, model: type[RolloutStepV1], ragged: bool = False) -> None:
        self.model = model
        self.ragged = ragged
        self.plan: BulkPlan | RaggedPlan | None = None
        self.tries = 0

    def plan_for(self, block: list[Any]) -> BulkPlan | RaggedPlan | None:
        """The plan to try `block` with (binding it from this block while none is bound)."""
        if self.plan is None and self.tries < MAX_TRIES:
            self.tries += 1
            steps = sample_steps(self.model, block)
            if steps is not None:
                self.plan = _bind(self.model, steps)
                if self.plan is None and self.ragged:
                    self.plan = bind_ragged(self.model, steps)
        return self.plan


def bind_plan(model: type[RolloutStepV1], lines: list[Any]) -> BulkPlan | None:
    """The plan of `model` pinned to what the first lines of `lines` show; None when they are
    not all clean steps of one shape per field, or the model is not simple enough once pinned."""
    steps = sample_steps(model, lines)
    return None if steps is None else _bind(model, steps)


def _bind(model: type[RolloutStepV1], steps: list[Any]) -> BulkPlan | None:
    seen = _seen(model, steps)
    return None if seen is None else _plan_of(model, seen)


def sample_steps(model: type[RolloutStepV1], lines: list[Any]) -> list[Any] | None:
    """The first lines of `lines` validated by the normal path; None unless all are clean steps."""
    sample = lines[:SAMPLE_LINES]
    if any(raw.__class__ is not bytes or raw.count(b":") > MAX_RECORD_KEYS for raw in sample):
        return None  # a line the reader refuses unparsed, or may refuse for its keys: parsed once
    steps = []
    for item in parse_lines(1, sample):  # the reader's checks
        if item.__class__ is not tuple:
            return None  # not a clean record: the line path explains it
        try:
            steps.append(validate_step(item[1], model))
        except (ContractError, TypeError):
            return None
    return steps or None


def _plan_of(model: type[RolloutStepV1], seen: tuple[Any, ...]) -> BulkPlan | None:
    plans = model_info(model).derived(PLANS_KEY, _no_plans)  # files of one shape share a plan
    if seen in plans:
        return plans[seen]
    pinned, no_ints = _pinned(model, dict(seen))
    plan = None if pinned is None else build_plan(pinned, no_ints)
    if plan is not None and not _consistent(model, plan):
        plan = None
    if plan is not None:
        plan.stats_model = model
        binding = Binding(model, plan)
        plan.bound, plan.presence = binding, binding.presence
    if len(plans) >= _MAX_PLANS:
        plans.pop(next(iter(plans)))
    plans[seen] = plan
    return plan


def _consistent(model: type[RolloutStepV1], plan: BulkPlan) -> bool:
    """Whether a step carrying every field of the plan, with its bound shapes, is valid under
    `model`: the rules that relate shapes (a token field as long as the action, logprob [] or
    the action's dims, ...) hold for the bound shapes, so they hold on every line the plan takes.
    (Shapes seen on valid lines always pass; shapes read from a file's column types may not.)"""
    record: dict[str, Any] = {}
    for wire, _, _, _ in plan.fields:
        dtype = plan.dtypes.get(wire)
        if dtype is None:
            continue  # info
        zeros = np.zeros(plan.shapes[wire], dtype)
        record[wire] = "x" if dtype.kind == "U" else zeros.item() if not zeros.ndim else zeros
    record.update(step=0, terminated=False, truncated=False, policy_version=0)
    try:
        validate_step(record, model)
    except ContractError:
        return False
    return True


PLANS_KEY = "binding.bound_plans"
"""The `ModelInfo.derived` key of a model's bound plans: what was seen -> plan."""
_MAX_PLANS = 64


def _no_plans(model: type[BaseModel]) -> dict[tuple[Any, ...], BulkPlan | None]:
    return {}


def plan_from_kinds(model: type[RolloutStepV1], kinds: dict[str, tuple[str, tuple[int, ...]]]
                    ) -> BulkPlan | None:
    """The plan of `model` pinned to the (dtype, shape) of each field that `kinds` gives (a
    typed file's columns, e.g. Parquet); None when a field cannot be pinned that way. An
    observation binds only as float32, the dtype the unpinned model gives it."""
    seen = []
    for wire, spec in field_specs(model).items():
        tensor = spec.spec if isinstance(spec, AnyObservation) else spec
        if not isinstance(tensor, TensorSpec):
            return None
        if not isinstance(spec, AnyObservation) and len(tensor.dtypes) == 1 \
                and all(d.size is not None for d in tensor.shape):
            continue
        kind = kinds.get(wire)
        if kind is not None and (kind[0] not in tensor.dtypes or kind[0] == "null"):
            return None
        seen.append((wire, kind))
    return _plan_of(model, tuple(seen))


def _seen(model: type[RolloutStepV1], steps: list[Any]
          ) -> tuple[tuple[str, tuple[str, tuple[int, ...]] | None], ...] | None:
    """(wire, (dtype, shape) or None when no step has it) of each open field of `model`; None
    when a field shows several or holds modalities."""
    info = model_info(model)
    out = []
    for wire, spec in field_specs(model).items():
        tensor = spec.spec if isinstance(spec, AnyObservation) else spec
        if not isinstance(tensor, TensorSpec):
            return None
        if not isinstance(spec, AnyObservation) and len(tensor.dtypes) == 1 \
                and all(d.size is not None for d in tensor.shape):
            continue  # already fixed
        attr = info.attr(wire)
        kinds = {_kind_of(getattr(s, attr)) for s in steps} - {None}
        if len(kinds) > 1 or ("modalities", ()) in kinds:
            return None
        out.append((wire, kinds.pop() if kinds else None))
    return tuple(out)


def _pinned(model: type[RolloutStepV1], seen: dict[str, tuple[str, tuple[int, ...]] | None]
            ) -> tuple[type[RolloutStepV1] | None, frozenset[str]]:
    """A subclass of `model` with each open field pinned to the (dtype, shape) seen; (None,
    ...) when a field cannot be pinned that way."""
    info = model_info(model)
    specs = field_specs(model)
    annotations: dict[str, Any] = {}
    namespace: dict[str, Any] = {}
    no_ints = set()
    bindings, _ = record_bindings(model, {
        wire: np.zeros(kind[1], kind[0]) for wire, kind in seen.items() if kind is not None})
    for wire, kind in seen.items():
        spec = specs[wire]
        tensor = spec.spec if isinstance(spec, AnyObservation) else spec
        if kind is not None:
            dtype, shape = kind
        elif wire == "next_observation" and "observation" in annotations:
            continue  # pinned below from the observation
        elif wire in TOKEN_FIELDS:
            continue  # the plan gives it the pinned action's shape (`fastfile.bound_specs`)
        else:  # no sampled line has it: the dims the others bind (a free `*dims` as [])
            unseen = _unseen_shape(tensor, bindings)
            if unseen is None or isinstance(spec, AnyObservation):
                return None, frozenset()
            dtype, shape = unseen
        if dtype not in tensor.dtypes and not isinstance(spec, AnyObservation):
            return None, frozenset()
        if len(tensor.dtypes) > 1 and dtype in FLOAT_DTYPES:
            no_ints.add(wire)
        attr = info.attr(wire)
        annotations[attr] = tensor_annotation(Tensor(
            dtype, list(shape), role=tensor.role, description=tensor.description,
            finite=tensor.finite))
        field_info = model.model_fields[attr]
        if not field_info.is_required():
            namespace[attr] = Field(None, alias=field_info.alias)
    if "observation" in annotations and "next_observation" in specs \
            and "next_observation" not in annotations:
        annotations["next_observation"] = annotations["observation"]
        namespace["next_observation"] = Field(None)
    namespace.update(__annotations__=annotations, __module__=__name__,
                     __doc__=f"{model.__name__} pinned to what a file shows.")
    pinned = type(f"{model.__name__}Bound", (model,), namespace)
    return pinned, frozenset(no_ints)


def _unseen_shape(spec: TensorSpec, bindings: dict[str, Any]
                  ) -> tuple[str, tuple[int, ...]] | None:
    """(dtype, shape) for a field no sampled line carries: its one dtype, fixed sizes as
    declared, named dims as the other fields bind them; None when that leaves it open."""
    if len(spec.dtypes) != 1:
        return None
    shape: list[int] = []
    for dim in spec.shape:
        if dim.size is not None:
            shape.append(dim.size)
        elif dim.name is None:  # a dim is a size or a name
            return None
        elif dim.variadic:
            shape += bindings.get(dim.name, ())
        elif isinstance(bindings.get(dim.name), int):
            shape.append(bindings[dim.name])
        else:
            return None
    return spec.dtypes[0], tuple(shape)


def _kind_of(value: Any) -> tuple[str, tuple[int, ...]] | None:
    if value is None:
        return None
    if isinstance(value, (dict, BaseModel)):
        return "modalities", ()
    dtype = getattr(value, "dtype", None)
    if not isinstance(dtype, np.dtype) or dtype.kind in "OU":
        return "modalities", ()  # not a numeric tensor: nothing to bind
    return dtype_name(dtype), tuple(np.shape(value))


class Binding:
    """What the steps of a block a bound plan accepts bind: the `ColumnShapes` of the tracker.

    Every field has one dtype and shape over the block, so a step's dims depend only on which
    optional tensor fields it carries (`presence`), and a field's kind is its bound dtype.
    """

    def __init__(self, model: type[RolloutStepV1], plan: BulkPlan) -> None:
        self.model = model
        self.plan = plan
        named = {w for w, s in field_specs(model).items() if _has_named(s)}
        self.kind_wires = [w for w, _ in kind_fields(model)]
        self.presence = tuple(w for w, _, _, required in plan.fields
                              if not required and (w in named or w in self.kind_wires))
        self.required = [w for w, _, _, required in plan.fields if required and w in named]
        self.varying = set(getattr(model, "varying_dims", ()))
        self.sizes = self._dims(tuple(self.presence))
        self.kind_names = {w: dtype_name(plan.dtypes[w]) for w in self.kind_wires}
        self._dims_cache: dict[int, dict[str, Any]] = {}
        self._kinds_cache: dict[int, dict[str, str]] = {}

    def for_block(self, block: Block) -> BlockShapes:
        return BlockShapes(self, block)

    def dims_of(self, code: int) -> dict[str, Any]:
        """The named dims of a step carrying the optional fields of `code` (bit i: presence[i])."""
        dims = self._dims_cache.get(code)
        if dims is None:
            carried = tuple(w for i, w in enumerate(self.presence) if code >> i & 1)
            dims = self._dims_cache[code] = self._dims(carried)
        return dims

    def kinds_of(self, code: int) -> dict[str, str]:
        """Path -> kind of the kind-varying fields that steps carrying `code` hold."""
        kinds = self._kinds_cache.get(code)
        if kinds is None:
            kinds = self._kinds_cache[code] = {
                w: k for w, k in self.kind_names.items()
                if w not in self.presence or code >> self.presence.index(w) & 1}
        return kinds

    def _dims(self, carried: tuple[str, ...]) -> dict[str, Any]:
        plan = self.plan
        values = {w: np.zeros(plan.shapes[w], plan.dtypes[w]) for w in (*self.required, *carried)}
        bindings, _ = record_bindings(self.model, values)
        return {k: v for k, v in bindings.items() if k not in self.varying}


class BlockShapes:
    """`Binding` over one block's lines (which of them carry each optional field)."""

    def __init__(self, binding: Binding, block: Block) -> None:
        self.binding = binding
        self.sizes = binding.sizes
        self.binds_nothing = False
        code = np.zeros(block.n, np.int64)  # bit i: the line carries presence[i]
        for i, wire in enumerate(binding.presence):
            code |= block.present[wire].astype(np.int64) << i
        self.code = code

    def per_episode(self, order: np.ndarray, starts: np.ndarray
                    ) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        code = self.code[order]
        if not len(code):
            return [], []
        binding = self.binding
        firsts, first_at = np.unique(code[starts], return_inverse=True)
        dims = [binding.dims_of(c) for c in firsts.tolist()]
        carried, carried_at = np.unique(np.bitwise_or.reduceat(code, starts),
                                        return_inverse=True)
        kinds = [binding.kinds_of(c) for c in carried.tolist()]
        return [dims[i] for i in first_at.tolist()], [kinds[i] for i in carried_at.tolist()]


def _has_named(spec: Any) -> bool:
    if isinstance(spec, AnyObservation):
        return True
    return isinstance(spec, TensorSpec) and any(d.name for d in spec.shape)
