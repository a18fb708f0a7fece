"""A ragged plan bound from the data, for a file of token records checked with an unpinned model.

Why: a file of LLM completions checked against the default `RolloutStep` (no `--model`) went
record by record: `raggedcols.ragged_plan` refuses a model with a choice of kinds (`action`
`int64 | float32`, a free observation) or with dims tracked from step to step. `binding.Binder`
reads the first lines of a clean block with the normal path; when they are token records of
one kind per field (an integer token action, float log-probabilities, an observation of integer
token lists and strings), `bind_ragged` builds the ragged plan of a model pinned to what they
show (a subclass of the file's model, as `LLMStep` pins a token step: each list field one dtype
and a varying dim), and later blocks are checked with it on Arrow columns.

What the plan accepts the unpinned model accepts, with the same values and the same report:
the pinned fields are the unpinned ones narrowed to one dtype. `BoundRaggedPlan.check` also
steps aside for what the pinned model would read otherwise than the unpinned one: an empty
list (the unpinned model infers its dtype), a field the sample did not bind (`next_observation`).
The episode rules are those of the unpinned model: `RaggedShapes` gives the tracker the dims
and kinds each step binds under it (`episode.dims_fixed` compares the token dims within an
episode) and leaves to `add` a block that continues an episode opened before it.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import BaseModel, Field

from gyre_contract.core._fields import (
    MODALITIES,
    TOKEN_FIELDS,
    AnyObservation,
    Modalities,
    action_bound_dims,
    field_specs,
    kind_fields,
    record_bindings,
)
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import RolloutStepV1
from gyre_contract.core._tensor import Tensor, TensorSpec
from gyre_contract.io._fastfile import Block
from gyre_contract.io._raggedcols import RaggedPlan, ragged_plan

PLANS_KEY = "raggedbinding.plans"
"""The `ModelInfo.derived` key of a model's bound ragged plans: what was seen -> plan."""
_MAX_PLANS = 64
_LISTS = ("action", "logprob", *TOKEN_FIELDS)
"""The list fields a token record binds (each with a dim of its own in the unpinned model)."""
_DTYPES = {"action": "int64", "logprob": "float32", "ref_logprob": "float32",
           "loss_mask": "bool", "token_reward": "float32"}
"""The one dtype each list field binds to (an action of floats is left to the line path: the
reader cannot tell an integer literal from a float one there)."""


def bind_ragged(model: type[RolloutStepV1], steps: list[Any]) -> RaggedPlan | None:
    """The ragged plan of `model` pinned to what the validated `steps` show (module doc); None
    when they are not token records of one kind per field."""
    seen = _seen(model, steps)
    if seen is None:
        return None
    plans: dict[Any, RaggedPlan | None] = model_info(model).derived(PLANS_KEY, _no_plans)
    if seen in plans:
        return plans[seen]
    plan = _plan(model, seen)
    if len(plans) >= _MAX_PLANS:
        plans.pop(next(iter(plans)))
    plans[seen] = plan
    return plan


def _no_plans(model: type[BaseModel]) -> dict[Any, RaggedPlan | None]:
    return {}


def _seen(model: type[RolloutStepV1], steps: list[Any]) -> tuple[Any, ...] | None:
    """(the observation's modalities as (name, "int64" | "string"), the list fields seen); None
    unless every step holds the same modalities, rank-1 lists of the bound dtypes, and nothing
    else the plan would read otherwise (`next_observation`, `info`)."""
    specs = field_specs(model)
    if not isinstance(specs.get("observation"), AnyObservation) \
            or not isinstance(specs.get("action"), TensorSpec) \
            or any(not isinstance(specs.get(w), TensorSpec) for w in _LISTS):
        return None
    modalities: set[tuple[tuple[str, str], ...]] = set()
    lists: set[str] = set()
    for step in steps:
        obs = step.observation
        if not isinstance(obs, dict) or not obs or getattr(step, "next_observation", None) \
                is not None or getattr(step, "info", None) is not None:
            return None
        kinds = []
        for key, value in obs.items():
            if value.__class__ is str:
                kinds.append((key, "string"))
            elif isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype == np.int64 \
                    and value.size:
                kinds.append((key, "int64"))
            else:
                return None
        modalities.add(tuple(sorted(kinds)))
        info = model_info(type(step))
        for wire in _LISTS:
            value = getattr(step, info.attr(wire), None)
            if value is None:
                continue
            if not isinstance(value, np.ndarray) or value.ndim != 1 or not value.size \
                    or value.dtype != np.dtype(_DTYPES[wire]):
                return None
            lists.add(wire)
    if len(modalities) != 1 or "action" not in lists:
        return None
    return modalities.pop(), tuple(sorted(lists))


def _plan(model: type[RolloutStepV1], seen: tuple[Any, ...]) -> RaggedPlan | None:
    modalities, _ = seen
    pinned = _pinned(model, modalities)
    plan = ragged_plan(pinned)
    if plan is None:
        return None
    bound = BoundRaggedPlan(pinned, plan.leaves, plan.objects)
    bound.stats_model = model
    bound.bound = RaggedShapes(model, modalities)
    return bound


def _pinned(model: type[RolloutStepV1], modalities: tuple[tuple[str, str], ...]
            ) -> type[RolloutStepV1]:
    """A subclass of `model`: the observation its modalities (each required), every token list
    one dtype and a varying dim (`A`, as `LLMStep`), `next_observation` as the observation."""
    obs_annotations: dict[str, Any] = {}
    for i, (key, kind) in enumerate(modalities):
        obs_annotations[key] = str if kind == "string" else Annotated[
            np.ndarray, Tensor("int64", [f"P{i}"], role="observation")]
    observation = type(f"{model.__name__}BoundObservation", (Modalities,), {
        "__annotations__": obs_annotations, "__module__": __name__})
    specs = field_specs(model)
    info = model_info(model)
    annotations: dict[str, Any] = {"observation": observation}
    namespace: dict[str, Any] = {}
    for wire in _LISTS:
        spec = specs[wire]
        attr = info.attr(wire)
        required = model.model_fields[attr].is_required()
        annotations[attr] = Annotated[np.ndarray if required else np.ndarray | None, Tensor(
            _DTYPES[wire], ["A"], role=spec.role, description=spec.description)]
        if not required:
            namespace[attr] = Field(None, alias=model.model_fields[attr].alias)
    varying = ("A", *(f"P{i}" for i in range(len(modalities))))
    namespace.update(__annotations__=annotations, __module__=__name__,
                     varying_dims=varying,
                     __doc__=f"{model.__name__} pinned to the token records a file shows.")
    namespace["__annotations__"]["varying_dims"] = ClassVar[tuple[str, ...]]
    return type(f"{model.__name__}TokensBound", (model,), namespace)


class BoundRaggedPlan(RaggedPlan):
    """The ragged plan of a pinned model checking a file for its unpinned model (module doc)."""

    def check(self, columns: Any, n: int, *, arrays: bool, widened: bool = False
              ) -> Block | None:
        """`RaggedPlan.check`, stepping aside also for an empty list or `next_observation`."""
        if any(wire == "next_observation" and column.null_count < n for wire, column in columns):
            return None
        block = super().check(columns, n, arrays=True, widened=widened)
        if block is None:
            return None
        if any(r.present is None and len(r.lengths) and not r.lengths.all()
               or r.present is not None and (r.lengths[r.present] == 0).any()
               for r in block.ragged.values()):
            return None  # an empty list: the unpinned model infers its dtype
        block.extra["lengths"] = {path: (r.lengths, r.present) for path, r in block.ragged.items()}
        if not arrays:
            block.arrays, block.ragged = {}, {}
            block.extra.pop("strings", None)
            block.extra.pop("masks", None)
        return block


class RaggedShapes:
    """The `ColumnShapes` of a bound ragged plan: what each step binds under the unpinned model.

    `sizes` is None: the steps of a block bind different dims, so a block continuing an episode
    opened before it is left to `EpisodeTracker.add`."""

    sizes = None
    binds_nothing = False

    def __init__(self, model: type[RolloutStepV1], modalities: tuple[tuple[str, str], ...]
                 ) -> None:
        self.model = model
        varying = {*model.varying_dims, *action_bound_dims(model)}
        self.tracked: list[str] = []
        """The list fields binding a dim the unpinned model compares within an episode."""
        for wire in _LISTS:
            names, _ = record_bindings(model, {wire: np.zeros(1)})
            if set(names) - varying:
                self.tracked.append(wire)
        self.varying = varying
        fields = {w for w, _ in kind_fields(model)}
        self.kinds = {"observation": MODALITIES} if "observation" in fields else {}
        self.kinds.update({f"observation.{key}": kind for key, kind in modalities
                           if "observation" in fields})
        if "action" in fields:
            self.kinds["action"] = "int64"
        self._dims: dict[tuple[int, ...], dict[str, Any]] = {}
        self.block: Block | None = None

    def for_block(self, block: Block) -> RaggedShapes:
        shapes = RaggedShapes.__new__(RaggedShapes)
        shapes.__dict__.update(self.__dict__)
        shapes.block = block
        return shapes

    def per_episode(self, order: np.ndarray, starts: np.ndarray
                    ) -> tuple[list[dict[str, Any]], list[dict[str, str]]] | None:
        """Each episode's first dims (None when a later step of it binds another size of one)
        and its kinds (one kind per field over the block)."""
        assert self.block is not None
        lengths = self.block.extra["lengths"]
        mark = np.zeros(len(order), bool)
        mark[starts] = True
        episode = np.cumsum(mark) - 1  # each sorted step's episode
        keys = []
        for wire in self.tracked:
            held = lengths.get(wire)
            if held is None:
                keys.append(np.full(len(starts), -1, np.int64))  # not in the block
                continue
            length, present = held
            length = np.where(present, length, -1) if present is not None else length
            per = length[order]
            first = per[starts][episode]
            if np.any((per != first) & (per >= 0) & (first >= 0)):
                return None  # episode.dims_fixed: the line path explains it
            keys.append(per[starts])
        firsts = np.stack(keys, axis=1) if keys else np.zeros((len(starts), 0), np.int64)
        dims = [self._dims_of(tuple(row)) for row in firsts.tolist()]
        return dims, [self.kinds] * len(starts)

    def _dims_of(self, key: tuple[int, ...]) -> dict[str, Any]:
        dims = self._dims.get(key)
        if dims is None:
            values = {w: np.zeros(size) for w, size in zip(self.tracked, key) if size >= 0}
            bindings, _ = record_bindings(self.model, values)
            dims = self._dims[key] = {k: v for k, v in bindings.items() if k not in self.varying}
        return dims
