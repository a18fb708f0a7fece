"""The validation API: one step, one episode, one training batch. All problems, never the first.

`validate_step` is meant for the sampler's hot loop: a valid record costs one pass of a
validator compiled for its model (`fastpath`); the work of explaining a bad one is only done
when there is something to explain, by the model's own pydantic validation.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import ne
from typing import Any, Protocol, TypeVar, overload

import numpy as np
from pydantic import BaseModel, ValidationError

from gyre_contract.core._dims import EMPTY_STRING, NON_EMPTY, scalar_reason
from gyre_contract.core._endedids import EndedEpisodes, episode_keys
from gyre_contract.core._errors import ContractError, Problem, describe
from gyre_contract.core._fastpath import FAST_FAILURES, PLANS
from gyre_contract.core._fields import action_bound_dims, kind_fields, step_kinds
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import (
    AnyObservation,
    BatchModel,
    GyreModel,
    RolloutStep,
    RolloutStepV1,
    TrainBatch,
    TrainBatchV1,
    field_specs,
    record_bindings,
)
from gyre_contract.core._registry import declare_fast_path, run
from gyre_contract.core._rules import (
    EPISODE_RULES,
    BatchView,
    OpenEpisode,
    StepInEpisode,
    field_rule,
    first_kinds,
)
from gyre_contract.core._switches import FAST, fast_paths_enabled
from gyre_contract.core._tensor import TensorSpec

S = TypeVar("S", bound=RolloutStepV1)
B = TypeVar("B", bound=BatchModel)


@overload
def validate_step(record: Mapping[str, Any] | RolloutStepV1) -> RolloutStepV1: ...
@overload
def validate_step(record: Mapping[str, Any] | RolloutStepV1, model: type[S]) -> S: ...


def validate_step(record: Mapping[str, Any] | RolloutStepV1,
                  model: type[RolloutStepV1] = RolloutStep) -> RolloutStepV1:
    """Validate one step record; return the model instance or raise ContractError with all problems.

    Arrays may be given as nested lists or numpy arrays. The fast path for samplers: give each
    tensor as a numpy array of exactly the declared dtype (it is kept as is, not copied) and
    scalars as Python or numpy scalars.
    """
    if record.__class__ is not dict:
        if type(record) is model:
            return record
        if isinstance(record, BaseModel):
            record = record.model_dump(by_alias=True, exclude_none=True)
    on = FAST.on
    if on is None:  # the first record of the process
        on = FAST.read()
    plan = PLANS[model] if on else None
    if plan is not None:
        try:
            return plan.validate_python(record)
        except FAST_FAILURES:
            pass  # invalid or unusual: the normal path below decides and explains
    try:
        return model.model_validate(record)
    except ValidationError as err:
        raise ContractError(problems_from(err, model)) from None


def problems_from(err: ValidationError, model: type[BaseModel]) -> list[Problem]:
    """Translate pydantic's errors into Problems with dotted paths, expected and got."""
    problems: list[Problem] = []
    unknown = 0
    for item in err.errors(include_url=False):
        unknown += item["type"] == "extra_forbidden"
        problems += _problems_of(item, model, hint=unknown <= MAX_HINTS)
    return problems


MAX_HINTS = 20  # "did you mean" is worth computing for a typo, not for a record of 10^6 keys


def _problems_of(item: Mapping[str, Any], model: type[BaseModel], hint: bool = True
                 ) -> list[Problem]:
    """Problems of one pydantic error; per-field ones name their field rule (`rules.field_rule`),
    cross-field ones (`gyre_problems`) carry the rules that found them."""
    kind, loc, value = item["type"], item["loc"], item.get("input")
    ctx = item.get("ctx") or {}
    if kind == "gyre_problems":
        return list(ctx["problems"])
    problem = _field_problem(kind, loc, value, ctx, item, model, hint)
    return [problem.by_rule(field_rule(kind, problem.message))]


def _field_problem(kind: str, loc: tuple[Any, ...], value: Any, ctx: Mapping[str, Any],
                   item: Mapping[str, Any], model: type[BaseModel], hint: bool) -> Problem:
    path = _dotted(loc)
    if kind == "gyre":
        return Problem(path, ctx["expected"], ctx["got"], ctx["reason"])
    spec = _spec_at(model, loc)
    expected = _expected(spec)
    if kind == "gyre_scalar":
        why = scalar_reason(value, spec.dtype) \
            if isinstance(spec, TensorSpec) and isinstance(spec.dtype, str) else ""
        if why == EMPTY_STRING:
            expected = NON_EMPTY
        return Problem(path, expected, describe(value), why or "invalid value")
    if kind == "missing":
        return Problem(path, expected, "nothing", "missing required field")
    if kind == "extra_forbidden":
        expected = _unknown_hint(model, loc) if hint else "only the model's fields"
        return Problem(path, expected, describe(value), "unknown field")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return Problem(path, "an object", describe(value), "not an object")
    if value is None:
        return Problem(path, expected, "null", "null is not allowed")
    return Problem(path, expected, describe(value), _reason(kind, ctx, item["msg"]))


_REASONS = {
    "string_type": "not a string", "string_sub_type": "not a string",
    "string_unicode": "not a string", "int_type": "not an integer",
    "int_parsing": "not an integer", "int_from_float": "not an integer",
    "float_type": "not a number", "float_parsing": "not a number", "bool_type": "not a bool",
    "bool_parsing": "not a bool", "finite_number": "not finite", "list_type": "not a list",
    "tuple_type": "not a list",
}
"""pydantic's error types on plain fields (`text: str` of a `Modalities`) in the reasons a
`Tensor` field gives (`dims.scalar_reason`): one wording whatever declared the field."""


def _reason(kind: str, ctx: Mapping[str, Any], msg: str) -> str:
    """The reason of a pydantic error on a plain field, in the project's words."""
    reason = _REASONS.get(kind)
    if reason is not None:
        return reason
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return EMPTY_STRING
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])  # a model's own validator: its own message, without the prefix
    if msg.startswith("Input should be "):
        return "not " + msg[len("Input should be "):]  # "not greater than 0", "not 'a' or 'b'"
    return msg[:1].lower() + msg[1:]


def _dotted(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _spec_at(model: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    spec: Any = model
    for part in loc:
        if not (isinstance(spec, type) and issubclass(spec, BaseModel)):
            return None
        spec = field_specs(spec).get(part) or _plain_field(spec, part)
    return spec


def _plain_field(model: type[BaseModel], wire: str) -> Any:
    info = model_info(model)
    return model.model_fields[info.attr(wire)].annotation if wire in info.wires else None


def _expected(spec: Any) -> str:
    if isinstance(spec, TensorSpec):
        return spec.expected
    if isinstance(spec, AnyObservation):
        return spec.spec.expected + " or an object of modalities"
    if isinstance(spec, type) and issubclass(spec, BaseModel):
        return f"an object ({spec.__name__})"
    if isinstance(spec, type):
        return _PLAIN_EXPECTED.get(spec, spec.__name__)
    return "a valid value"


_PLAIN_EXPECTED = {str: "string", bool: "bool", int: "integer", float: "number"}


def _unknown_hint(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    parent = _spec_at(model, loc[:-1])
    known = list(model_info(parent).wires) if isinstance(parent, type) else []
    name = str(loc[-1])
    import difflib  # only when a name is unknown: not on every import

    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6) if len(name) <= 64 else []
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    owner = parent.__name__ if isinstance(parent, type) else "this object"
    return f"only the fields of {owner}{hint}"


# -- episodes ----------------------------------------------------------------------------

EPISODE_FAST_PATH = declare_fast_path(
    "bulk_episode", kinds=("episode",),
    implements=[r.name for r in EPISODE_RULES])  # add_columns: every episode rule, vectorised
"""The rules `EpisodeTracker.add_columns` implements (it refuses a run that breaks one)."""


class ColumnShapes(Protocol):
    """What a run of steps binds, for `EpisodeTracker.add_columns` on a model whose dims or
    kinds may vary: the run holds one size per named dim and one kind per field."""

    sizes: dict[str, Any] | None
    """Every named dim any step of the run binds (varying dims left out) -> its size; None when
    the steps of the run bind different sizes (a run continuing an open episode is refused)."""

    binds_nothing: bool
    """True: no step binds a dim or a kind (`per_episode` would give empty dicts only), so each
    episode keeps what it holds and the per-episode walk is skipped."""

    def per_episode(self, order: np.ndarray, starts: np.ndarray
                    ) -> tuple[list[dict[str, Any]], list[dict[str, str]]] | None:
        """For each episode of the run (its rows `order[starts[k]:starts[k + 1]]`): the named
        dims its first step binds, and path -> kind of the kind-varying fields its steps carry;
        None when some step of an episode binds a size other than its first step's."""


def _as_array(value: Any) -> Any:
    """A numpy scalar (a field of shape [], as validation gives it) as a 0-d array, so that its
    `*dims` bind to [] like any tensor's: a scalar then a [1] is a dims change in the episode
    (the columns of such an episode could not be stacked)."""
    return np.asarray(value) if isinstance(value, np.generic) else value


@dataclass
class EpisodeTracker:
    """Applies the registry's episode rules to steps arriving one at a time, in file order.

    Episodes may interleave (vector envs write several at once). Memory holds one small entry per
    open episode and, for each finished one, a 128-bit key of its id and its last line (24 bytes:
    `endedids.EndedEpisodes`, which states the collision rate). An open episode is never read as
    ended (its id is looked up among the ended ones only when it is not open), so `add` and
    `add_columns` give one answer even for two ids whose keys collide.
    """

    model: type[RolloutStepV1] = RolloutStep
    steps: int = 0
    terminated: int = 0
    truncated: int = 0
    policy_versions: set[int] = field(default_factory=set)
    _open: dict[str, OpenEpisode] = field(default_factory=dict)
    _ended: EndedEpisodes = field(default_factory=EndedEpisodes)
    remember_ended: bool = True
    """False: `add_columns` keeps no key of the episodes a run ends, for a caller that forgets
    them right after (`forget_many`: `io.RecordBlocks`, whose blocks catch a step after the end
    within the run itself); nothing is hashed then unless some ended id is remembered."""

    @property
    def episodes(self) -> int:
        return len(self._open) + len(self._ended)

    def copy(self) -> EpisodeTracker:
        """An independent copy (what `copy.deepcopy` gives, at a fraction of its cost: a trial
        copy per block of `io.RecordBlocks`). Each open episode's entry is copied (`skip`
        changes one in place); its dims and kinds are shared, as nothing changes them in place."""
        other = copy.copy(self)
        other.policy_versions = set(self.policy_versions)
        other._open = {eid: copy.copy(state) for eid, state in self._open.items()}
        other._ended = self._ended.copy()
        return other

    @property
    def open_episodes(self) -> list[str]:
        return list(self._open)

    def add(self, step: RolloutStepV1, line: int | None = None) -> list[Problem]:
        """Take the next step; return the problems it shows (with `line` set when given)."""
        self.steps += 1
        self.policy_versions.add(step.policy_version)
        problems = self._check(step, line)
        if line is not None and problems:
            problems = [p.at_line(line) for p in problems]
        return problems

    def _check(self, step: RolloutStepV1, line: int | None) -> list[Problem]:
        eid = step.episode_id
        state = self._open.get(eid)
        if state is None and eid in self._ended:
            return run("episode", "step",
                       StepInEpisode(step, None, True, self._ended.line(eid), {}))
        dims = self._dims(step)
        fields = kind_fields(self.model)
        kinds = step_kinds(self.model, step, fields) if fields else {}
        problems = run("episode", "step", StepInEpisode(step, state, False, None, dims, kinds))
        if step.terminated or step.truncated:
            self._open.pop(eid, None)
            self._ended.add(eid, line)
            self.terminated += bool(step.terminated)
            self.truncated += bool(step.truncated and not step.terminated)
        else:
            # the first valid step's sizes hold (`skip` leaves none for the invalid steps before)
            self._open[eid] = OpenEpisode(step.step, step.policy_version, line,
                                          (state.dims or dims) if state else dims,
                                          first_kinds(state, kinds))
        return problems

    def _dims(self, step: RolloutStepV1) -> dict[str, Any]:
        if not has_named_dims(self.model) or not tracks_dims(self.model):
            return {}
        info = model_info(self.model)
        values = {w: _as_array(getattr(step, info.attr(w))) for w in field_specs(self.model)}
        bindings, _ = record_bindings(self.model, values)
        varying = {*self.model.varying_dims, *action_bound_dims(self.model)}
        return {k: v for k, v in bindings.items() if k not in varying}

    def add_columns(self, episode_id: Sequence[str], step: np.ndarray, policy_version: np.ndarray,
                    terminated: np.ndarray, truncated: np.ndarray, first_line: int,
                    shapes: ColumnShapes | None = None,
                    codes: tuple[np.ndarray, Sequence[str]] | None = None) -> bool:
        """Take a run of steps at once (lines `first_line`, `first_line + 1`, ...), all or none.

        The bulk form of `add`, vectorised over the run. For a model with named dims or with a
        choice of kinds (`int64 | float32`, a tensor or modalities), `shapes` says what the run's
        steps bind (one size per dim, one kind per field over the whole run: a reader that bound
        them from the data, `io._binding`); without it such a model is refused. True: no step
        breaks an episode rule and the tracker is exactly as after `add` on each step. False:
        some step does, or the bulk form steps aside (fast paths off, or an episode rule it does
        not implement is registered); the tracker is unchanged and the caller adds the steps one
        by one to get the problems. `codes`, when given: (the code of each step's episode id,
        the distinct ids by code in order of first appearance), the same ids encoded (an Arrow
        column's dictionary), so that no id is looked at step by step.
        """
        if not fast_paths_enabled() or not EPISODE_FAST_PATH.usable():
            return False
        if shapes is None and (has_named_dims(self.model) or kind_fields(self.model)):
            return False
        n = len(episode_id)
        if codes is not None:
            code, index = codes[0], dict.fromkeys(codes[1], 0)
        else:
            changes = np.fromiter(map(ne, episode_id[1:], episode_id[:-1]), bool, max(n - 1, 0))
            run_starts = [0, *(np.flatnonzero(changes) + 1).tolist()]
            index = {}  # episode id -> code, in order of first appearance
            run_codes = [index.setdefault(episode_id[i], len(index)) for i in run_starts]
            code = np.repeat(run_codes, np.diff([*run_starts, n]))
        order = np.argsort(code, kind="stable")
        code, step, version = code[order], step[order], policy_version[order]
        done = (terminated | truncated)[order]
        # np.concatenate, not np.r_ (which parses its index each call: twice the time)
        starts = np.flatnonzero(np.concatenate(([True], code[1:] != code[:-1])))
        ends = np.concatenate((starts[1:] - 1, [len(code) - 1]))
        inner = np.ones(len(code), bool)
        inner[starts] = False  # each step that follows another of its episode in this run
        follows = (step[1:] == step[:-1] + 1) & (version[1:] >= version[:-1]) & ~done[:-1]
        if not follows[inner[1:]].all():
            return False
        # the ids' keys, once: those not open must not have ended before this run, and two ids of
        # the run with one key (a collision) leave the run to `add`, which sees the order
        keys = None
        if self.remember_ended or len(self._ended):
            keys = episode_keys(list(index))
            if len(np.unique(keys[:, 0])) < len(keys):
                return False
            if self._ended.any_keys(keys[[eid not in self._open for eid in index]]):
                return False
        first_steps, first_versions = step[starts].tolist(), version[starts].tolist()
        opened = self._open
        for eid, first, first_version in zip(index, first_steps, first_versions):
            state = opened.get(eid)
            if state is None:
                if first != 0:
                    return False
            elif first != state.step + 1 or first_version < state.policy_version:
                return False
        bound = None
        if shapes is not None and not (shapes.binds_nothing and not tracks_dims(self.model)):
            bound = self._bound(list(index), starts, order, shapes)
            if bound is None:
                return False
        self._commit(list(index), keys, ends, order, step, version, done, terminated, truncated,
                     first_line, bound)
        return True

    def _bound(self, ids: list[str], starts: np.ndarray, order: np.ndarray, shapes: ColumnShapes
               ) -> list[tuple[dict[str, Any], dict[str, str]]] | None:
        """(dims, kinds) each episode keeps after the run, as `add` would leave them; None when
        some step of the run would break `episode.dims_fixed` or `episode.dtype_fixed` (or when
        an earlier invalid step left the episode without dims: `add` decides)."""
        sizes, out = shapes.sizes, []
        per_episode = shapes.per_episode(order, starts)
        if per_episode is None:
            return None
        first_dims, all_kinds = per_episode
        tracked = tracks_dims(self.model)  # else a step binds no dims: none to have or compare
        for eid, dims, kinds in zip(ids, first_dims, all_kinds):
            state = self._open.get(eid)
            if state is None:
                if not dims and tracked:
                    return None
                out.append((dims, kinds))
                continue
            if sizes is None or not state.dims and tracked or any(size != sizes.get(name, size)
                                                 for name, size in state.dims.items()):
                return None
            if any(kind != state.kinds.get(path, kind) for path, kind in kinds.items()):
                return None
            out.append((state.dims, kinds if not state.kinds else {**kinds, **state.kinds}))
        return out

    def _commit(self, ids: list[str], keys: np.ndarray | None, ends: np.ndarray, order: np.ndarray,
                step: np.ndarray, version: np.ndarray, done: np.ndarray, terminated: np.ndarray,
                truncated: np.ndarray, first_line: int,
                bound: list[tuple[dict[str, Any], dict[str, str]]] | None) -> None:
        self.steps += len(order)
        self.policy_versions.update(np.unique(version).tolist())
        rows = order[ends]
        lines = rows + first_line
        ending = done[ends]
        opened = self._open
        still = np.flatnonzero(~ending)  # episodes left open: one state each
        for k, line, last_step, last_version in zip(
                still.tolist(), lines[still].tolist(), step[ends][still].tolist(),
                version[ends][still].tolist()):
            eid = ids[k]
            if bound is not None:
                dims, kinds = bound[k]
            else:
                state = opened.get(eid)
                dims, kinds = (state.dims, state.kinds) if state else ({}, {})
            opened[eid] = OpenEpisode(last_step, last_version, line, dims, kinds)
        ended = np.flatnonzero(ending)
        if not len(ended):
            return
        ended = ended[np.argsort(lines[ended], kind="stable")]  # in the order of their lines
        for k in ended.tolist():
            opened.pop(ids[k], None)
        if self.remember_ended and keys is not None:
            self._ended.add_keys(keys[ended], lines[ended].tolist())
        terms = int(np.count_nonzero(np.asarray(terminated)[rows[ended]]))
        self.terminated += terms
        self.truncated += len(ended) - terms

    def skip(self, episode_id: str, step: int, line: int | None = None) -> None:
        """Account for a step that failed validation, so its episode's next step is not blamed.

        The lost step's own problems were reported already; here it only advances the episode.
        """
        state = self._open.get(episode_id)
        if state is None and episode_id in self._ended:
            return
        if state is None:
            self._open[episode_id] = OpenEpisode(step, -(2**63), line, {})
        else:
            state.step, state.line = step, line

    def forget(self, episode_id: str) -> None:
        """Drop what is remembered of an ended episode (its id): for a caller that never reuses
        an id, such as `Recorder`, memory then holds only the open episodes. Its counts stay."""
        self._ended.discard(episode_id)

    def forget_many(self, episode_ids: Sequence[str]) -> None:
        """`forget` of each id, at once."""
        self._ended.discard_many(episode_ids)

    def finish(self, require_complete: bool = False) -> list[Problem]:
        """Problems known only at the end: open episodes, when completeness is required."""
        if not require_complete:
            return []
        return run("episode", "end", self._open)


def has_named_dims(model: type[GyreModel]) -> bool:
    """Whether some tensor field of `model` has a named dim (the episode rule on dims applies)."""
    return model_info(model).derived("has_named_dims", _named_dims)


def tracks_dims(model: type[GyreModel]) -> bool:
    """Whether some named dim of `model` is not declared varying (`episode.dims_fixed` has
    something to compare); False for a model whose every named dim varies (`LLMStep`: P, A),
    so that the tracker binds nothing per step. A free observation may carry any dim: True."""
    return model_info(model).derived("tracks_dims", _tracked_dims)


def _tracked_dims(model: type[BaseModel], varying: frozenset[str] | None = None) -> bool:
    own = model.varying_dims if issubclass(model, GyreModel) else ()
    varying = frozenset(own) | (varying or frozenset())
    for spec in field_specs(model).values():
        if isinstance(spec, AnyObservation):
            return True
        if isinstance(spec, TensorSpec) and any(d.name and d.name not in varying
                                                for d in spec.shape):
            return True
        if isinstance(spec, type) and issubclass(spec, GyreModel) and _tracked_dims(spec, varying):
            return True
    return False


def _named_dims(model: type[BaseModel]) -> bool:
    bound = action_bound_dims(model)  # fixed by the action's shape: nothing to track
    return any(_named(spec) for wire, spec in field_specs(model).items()
               if not (isinstance(spec, TensorSpec) and spec.shape
                       and all(d.name in bound for d in spec.shape)))


def _named(spec: Any) -> bool:
    if isinstance(spec, AnyObservation):
        return True
    if isinstance(spec, TensorSpec):
        return any(d.name for d in spec.shape)
    return isinstance(spec, type) and has_named_dims(spec)


@overload
def validate_episode(steps: Iterable[Mapping[str, Any] | RolloutStepV1], *,
                     require_complete: bool = False) -> list[RolloutStepV1]: ...
@overload
def validate_episode(steps: Iterable[Mapping[str, Any] | RolloutStepV1], model: type[S], *,
                     require_complete: bool = False) -> list[S]: ...


def validate_episode(
    steps: Iterable[Mapping[str, Any] | RolloutStepV1],
    model: type[RolloutStepV1] = RolloutStep,
    *,
    require_complete: bool = False,
) -> list[Any]:
    """Validate each step and the episode rules; `steps[i].path` locates every problem."""
    tracker = EpisodeTracker(model)
    out: list[Any] = []
    problems: list[Problem] = []
    for i, record in enumerate(steps):
        try:
            step = validate_step(record, model)
        except ContractError as err:
            problems += [p.under(f"steps[{i}]") for p in err.problems]
            continue
        out.append(step)
        problems += [p.under(f"steps[{i}]") for p in tracker.add(step)]
    problems += tracker.finish(require_complete)
    if problems:
        raise ContractError(problems)
    return out


# -- batches ----------------------------------------------------------------------------

@overload
def validate_batch(batch: Mapping[str, Any] | BatchModel, *, current_version: int | None = None,
                   max_staleness: int | None = None) -> TrainBatchV1: ...
@overload
def validate_batch(batch: Mapping[str, Any] | BatchModel, batch_model: type[B], *,
                   current_version: int | None = None, max_staleness: int | None = None) -> B: ...


def validate_batch(
    batch: Mapping[str, Any] | BatchModel,
    batch_model: type[BatchModel] = TrainBatch,
    *,
    current_version: int | None = None,
    max_staleness: int | None = None,
) -> BatchModel:
    """Validate a training batch (§4); with `max_staleness`, also how old its policy versions are.

    `current_version` defaults to the newest version in the batch.
    """
    model = batch_model
    if isinstance(batch, model):
        validated = batch
    else:
        if isinstance(batch, BaseModel):
            batch = batch.model_dump(by_alias=True, exclude_none=True)
        try:
            validated = model.model_validate(batch)
        except ValidationError as err:
            raise ContractError(problems_from(err, model)) from None
    if max_staleness is not None:
        problems = staleness_problems(validated, current_version, max_staleness)
        if problems:
            raise ContractError(problems)
    return validated


class _VersionedRows(Protocol):
    """What the staleness rule reads of a batch: a batch model, or the row keys of a collated
    batch checked against a trainer's own schema (`harness._stages`)."""

    @property
    def policy_version(self) -> np.ndarray: ...
    @property
    def episode_id(self) -> np.ndarray | None: ...


def staleness_problems(
    batch: _VersionedRows, current_version: int | None, max_staleness: int
) -> list[Problem]:
    """Rows whose policy version is older than `current - max_staleness`, or newer than current."""
    versions = np.asarray(batch.policy_version)
    if versions.size == 0:
        return []
    current = int(versions.max()) if current_version is None else current_version
    view = BatchView(type(batch), {}, {}, {}, [], versions=versions, episode_ids=batch.episode_id,
                     current_version=current, max_staleness=max_staleness)
    return run("batch", "staleness", view)
