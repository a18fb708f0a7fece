"""Every rule of the contract, once (docs/contract.md §3 step record, §4 batch), in the registry.

Each rule is registered here with its name, messages, the function that finds its problems on
the explaining path and a builder of a minimal input that breaks exactly it (see
`core._registry`). The models' validators (`step` and `batch` rules), `EpisodeTracker`
(`episode` rules) and the translation of pydantic's per-field errors (`field` rules) run these;
the fast paths declare which of them they implement.

`field` rules are few and general (a value is never cast with loss, floats are finite, shapes
hold, ...): pydantic checks them per field, and `field_rule` names the rule of each error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gyre_contract.core._dims import format_size
from gyre_contract.core._errors import Problem, describe
from gyre_contract.core._fields import (
    MODALITIES,
    TOKEN_FIELDS,
    TOKENS_REASON,
    TURNS_REASON,
    AnyObservation,
    field_specs,
    fields_binding,
    is_token_turn,
    record_bindings,
    token_field_problem,
)
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._registry import Rule, register
from gyre_contract.core._tensor import TensorSpec
from gyre_contract.core._text import quoted

# -- field rules --------------------------------------------------------------------------------


def _drop(record: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != key}


def _fixed_observation(model: Any) -> TensorSpec | None:
    spec = field_specs(model).get("observation")
    return spec if isinstance(spec, TensorSpec) and all(d.size for d in spec.shape) else None


def _bad_shape(record: dict[str, Any], model: Any) -> dict[str, Any]:
    if _fixed_observation(model) is not None:  # a pinned observation one element short
        return dict(record, observation=list(record["observation"])[:-1])
    return dict(record, action=[[1, 2], [3]])  # free dims: a ragged action


INEXACT = 2**24 + 1
"""The first integer a float32 cannot hold: it would be read as 16777216.0."""


def _inexact_reward(record: dict[str, Any], model: Any) -> dict[str, Any]:
    return dict(record, reward=INEXACT)


def _inexact_in_floats(record: dict[str, Any], model: Any) -> dict[str, Any] | None:
    """A float tensor's first element an integer beyond float32's exact range, beside floats
    (numpy reads the list as float64: the integer is not seen as one unless looked for)."""
    specs = field_specs(model)
    for wire in ("observation", "logprob"):
        value, spec = record.get(wire), specs.get(wire)
        floats = isinstance(spec, AnyObservation) or isinstance(spec, TensorSpec) \
            and spec.dtype == "float32"
        if floats and isinstance(value, list) and len(value) > 1 \
                and all(isinstance(v, float) for v in value):
            return dict(record, **{wire: [-INEXACT if wire == "logprob" else INEXACT,
                                          *value[1:]]})
    return None


FIELD_RULES = [
    Rule("field.required", "field", ("missing required field",), None,
         lambda r, m: _drop(r, "reward"), doc="every required field is present"),
    Rule("field.unknown", "field", ("unknown field",), None,
         lambda r, m: dict(r, trunctaed=True), doc="no key the model does not have (a typo)"),
    Rule("field.object", "field", ("not an object",), None,
         lambda r, m: dict(r, info=[1]), doc="a record, modalities and info are objects"),
    Rule("field.not_null", "field", ("null is not allowed",), None,
         lambda r, m: dict(r, reward=None), doc="null is never a value"),
    Rule("field.dtype", "field",
         ("not an integer", "not a number", "a bool is not a number", "not a bool",
          "not a string", "integer out of range", "out of range for {dtype}",
          "integer too large to be exact in {dtype}", "not a number, bool or string array",
          "mixed"), None,
         lambda r, m: dict(r, reward=True), doc="a value becomes the dtype without loss",
         variants=(_inexact_reward, _inexact_in_floats)),
    Rule("field.finite", "field", ("not finite",), None,
         lambda r, m: dict(r, reward=float("inf")), doc="float fields are finite"),
    Rule("field.shape", "field", ("wrong rank", "wrong shape", "ragged or mixed nested list"),
         None, _bad_shape, doc="a tensor has the declared rank and fixed dims"),
    Rule("field.nonempty_string", "field", ("empty string",), None,
         lambda r, m: dict(r, episode_id=""), doc="string fields (episode_id) are not empty"),
    Rule("field.info_scalars", "field", ("key {key}: not a JSON scalar",), None,
         lambda r, m: dict(r, info={"note": [1]}), doc="info holds JSON scalars only"),
]

_MODALITY = re.compile(r"^modality '.*?': ")
_INFO_KEY = re.compile(r"^key .*: not a JSON scalar$")
_PYDANTIC_KINDS = {"missing": "field.required", "extra_forbidden": "field.unknown",
                   "model_type": "field.object", "model_attributes_type": "field.object",
                   "dict_type": "field.object"}


def field_rule(kind: str, reason: str) -> str:
    """The field rule a pydantic error of `kind` with message `reason` breaks.

    A message no field rule lists is a value of the wrong type for the field: `field.dtype`.
    """
    by_kind = _PYDANTIC_KINDS.get(kind)
    if by_kind is not None:
        return by_kind
    reason = _MODALITY.sub("", reason)
    if _INFO_KEY.match(reason):
        return "field.info_scalars"
    if reason.startswith(("out of range for ", "integer too large to be exact in ")):
        return "field.dtype"
    return _BY_MESSAGE.get(reason, "field.dtype")


_BY_MESSAGE = {m: r.name for r in FIELD_RULES for m in r.messages if "{" not in m}

# -- step rules: several fields of one record ---------------------------------------------------


def _step_dims(step: Any) -> list[Problem]:
    cls = type(step)
    info = model_info(cls)
    values = {w: getattr(step, info.attr(w), None) for w in field_specs(cls)}
    return record_bindings(cls, values)[1]


def _logprob_shape(step: Any) -> list[Problem]:
    logprob = step.logprob
    if logprob is None or not any(d.variadic for d in field_specs(type(step))["logprob"].shape):
        return []
    act_shape = np.shape(step.action)
    if np.shape(logprob) in ((), act_shape):
        return []
    return [Problem("logprob", f"float32[] or float32{list(act_shape)}", describe(logprob),
                    "shape is neither [] nor the action's")]


def _sign(step: Any, wire: str, expected: str, reason: str) -> list[Problem]:
    value = getattr(step, wire)
    if value is None or np.asarray(step.action).dtype.kind not in "iu":
        return []
    lp = np.asarray(value)
    if not lp.size or float(lp.max()) <= 0:
        return []
    top = str(lp.max())  # the value in its own dtype: float32 0.3 reads 0.3, not 0.30000001...
    got = top if lp.ndim == 0 else f"max {top} in {describe(lp)}"
    return [Problem(wire, expected, got, reason)]


def _logprob_sign(step: Any) -> list[Problem]:
    return _sign(step, "logprob", "<= 0 (a discrete action's log-probability)",
                 "positive log-probability")


def _ref_logprob_sign(step: Any) -> list[Problem]:
    return _sign(step, "ref_logprob", "<= 0 (a token's log-probability under the reference "
                 "policy)", "positive reference log-probability")


def _token_shapes(step: Any) -> list[Problem]:
    specs = field_specs(type(step))
    action_shape = np.shape(step.action)
    problems = []
    for wire in TOKEN_FIELDS:
        spec, value = specs.get(wire), getattr(step, wire, None)
        if value is None or not isinstance(spec, TensorSpec) \
                or not any(d.variadic for d in spec.shape):
            continue  # a pinned shape (`A`): `step.dims_agree` binds it to the action
        found = token_field_problem(wire, str(spec.dtype), np.shape(value), action_shape)
        if found is not None:
            problems.append(found)
    return problems


def _next_structure(step: Any) -> list[Problem]:
    obs, nxt = step.observation, step.next_observation
    if nxt is None or isinstance(obs, dict) == isinstance(nxt, dict):
        return []
    return [Problem("next_observation", "the same structure as observation", describe(nxt),
                    "structure differs from observation")]


def _next_modalities(step: Any) -> list[Problem]:
    obs, nxt = step.observation, step.next_observation
    if not (isinstance(obs, dict) and isinstance(nxt, dict)) or set(obs) == set(nxt):
        return []
    return [Problem("next_observation", f"modalities [{', '.join(sorted(obs))}]",
                    f"[{', '.join(sorted(nxt))}]", "modalities differ from observation")]


def _next_shape(step: Any) -> list[Problem]:
    obs, nxt = step.observation, step.next_observation
    if not (isinstance(obs, np.ndarray) and isinstance(nxt, np.ndarray)) or obs.shape == nxt.shape:
        return []
    return [Problem("next_observation", f"the observation's shape {describe(obs)}",
                    describe(nxt), "shape differs from observation")]


def _free_observation(model: Any) -> bool:
    return isinstance(field_specs(model).get("observation"), AnyObservation)


def _longer_logprob(record: dict[str, Any], model: Any) -> dict[str, Any] | None:
    specs = field_specs(model)
    action, logprob = specs.get("action"), specs.get("logprob")
    if not (isinstance(action, TensorSpec) and isinstance(logprob, TensorSpec)):
        return None
    shared = {d.name for d in action.shape if d.name and not d.variadic}
    if not shared & {d.name for d in logprob.shape if not d.variadic}:
        return None  # action and logprob share no named dim: they cannot disagree
    return dict(record, logprob=[*record["logprob"], -0.5])


def _variadic_logprob(record: dict[str, Any], model: Any) -> dict[str, Any] | None:
    logprob = field_specs(model).get("logprob")
    if not (isinstance(logprob, TensorSpec) and any(d.variadic for d in logprob.shape)):
        return None
    return dict(record, action=[1, 2], logprob=[-0.1, -0.2, -0.3])


def _positive_logprob(record: dict[str, Any], model: Any) -> dict[str, Any]:
    logprob = record["logprob"]
    return dict(record, logprob=[*logprob[:-1], 0.5] if isinstance(logprob, list) else 0.5)


def _positive_ref_logprob(record: dict[str, Any], model: Any) -> dict[str, Any]:
    logprob = record["logprob"]
    return dict(record, ref_logprob=[*logprob[:-1], 0.5] if isinstance(logprob, list) else 0.5)


def _long_loss_mask(record: dict[str, Any], model: Any) -> dict[str, Any] | None:
    spec = field_specs(model).get("loss_mask")
    if not (isinstance(spec, TensorSpec) and any(d.variadic for d in spec.shape)):
        return None  # pinned to the action's dim: `step.dims_agree`
    return dict(record, loss_mask=[True] * (int(np.size(record["action"])) + 1))


def _when_free(change: dict[str, Any]) -> Any:
    return lambda r, m: dict(r, **change) if _free_observation(m) else None


STEP_RULES = [
    Rule("step.dims_agree", "step", ("dim {name} disagrees with an earlier field",), _step_dims,
         _longer_logprob, doc="a named dim has one size across the fields of a record"),
    Rule("step.logprob_shape", "step", ("shape is neither [] nor the action's",),
         _logprob_shape, _variadic_logprob, doc="logprob is [] or the action's shape"),
    Rule("step.logprob_nonpositive", "step", ("positive log-probability",), _logprob_sign,
         _positive_logprob, doc="with a discrete action, logprob <= 0"),
    Rule("step.token_fields_shape", "step", (TOKENS_REASON,), _token_shapes, _long_loss_mask,
         doc="ref_logprob ([] or), loss_mask and token_reward have the action's shape"),
    Rule("step.ref_logprob_nonpositive", "step", ("positive reference log-probability",),
         _ref_logprob_sign, _positive_ref_logprob,
         doc="with a discrete (token) action, ref_logprob <= 0"),
    Rule("step.next_observation_structure", "step", ("structure differs from observation",),
         _next_structure, _when_free({"observation": [0.5], "next_observation": {"x": [0.5]}}),
         doc="next_observation is a tensor or modalities as observation is"),
    Rule("step.next_observation_modalities", "step", ("modalities differ from observation",),
         _next_modalities,
         _when_free({"observation": {"a": [0.5]}, "next_observation": {"b": [0.5]}}),
         doc="next_observation has the observation's modalities"),
    Rule("step.next_observation_shape", "step", ("shape differs from observation",),
         _next_shape,
         _when_free({"observation": [0.5] * 4, "next_observation": [0.5] * 3}),
         doc="next_observation has the observation's shape"),
]

# -- episode rules: the steps sharing an episode_id, in file order ------------------------------


@dataclass
class OpenEpisode:
    """What an episode tracker remembers of an episode still being read."""

    step: int
    policy_version: int
    line: int | None
    dims: dict[str, Any]
    kinds: dict[str, str] = field(default_factory=dict)
    """The kind of each field that may take several (see `fields.step_kinds`), as first seen."""


@dataclass
class StepInEpisode:
    """The subject of a per-step episode rule: the new step and what came before it."""

    step: Any
    state: OpenEpisode | None
    """The episode so far; None when this step starts it (or when it ended already)."""
    ended: bool
    ended_at: int | None
    dims: dict[str, Any]
    """The step's named dims (those not declared varying)."""
    kinds: dict[str, tuple[str, Any]] = field(default_factory=dict)
    """The step's `fields.step_kinds`: path -> (kind, value)."""


def first_kinds(state: OpenEpisode | None, kinds: dict[str, tuple[str, Any]]) -> dict[str, str]:
    """The kinds an episode keeps after this step: those seen first win, new paths join."""
    if state is not None and kinds.keys() <= state.kinds.keys():
        return state.kinds
    seen = {path: kind for path, (kind, _) in kinds.items()}
    return seen if state is None else {**seen, **state.kinds}


def _after_end(s: StepInEpisode) -> list[Problem]:
    if not s.ended:
        return []
    where = f" at line {s.ended_at}" if s.ended_at is not None else ""
    step = s.step
    return [Problem("episode_id", "no step after the episode's terminated or truncated step",
                    f"step {step.step} of episode {quoted(step.episode_id)}, which ended{where}",
                    "step after the episode ended (a phantom reset transition?)")]


def _starts(s: StepInEpisode) -> list[Problem]:
    if s.ended or s.state is not None or s.step.step == 0:
        return []
    return [Problem("step", "0 on an episode's first step", str(s.step.step),
                    "episode does not start at step 0")]


def _follows(s: StepInEpisode) -> list[Problem]:
    state = s.state
    if state is None or s.step.step == state.step + 1:
        return []
    return [Problem("step", f"{state.step + 1} (previous step + 1)", str(s.step.step),
                    "step does not follow the previous step")]


def _version(s: StepInEpisode) -> list[Problem]:
    state = s.state
    if state is None or s.step.policy_version >= state.policy_version:
        return []
    return [Problem("policy_version", f">= {state.policy_version} (never decreases)",
                    str(s.step.policy_version), "policy_version decreased")]


DIMS_REASON = "dimension changed within the episode (declare it in varying_dims if it may)"


def _dims_kept(s: StepInEpisode) -> list[Problem]:
    """One problem per field whose dims changed size; token turns get the model allowing them."""
    state = s.state
    if state is None:
        return []
    changed = {name for name, size in s.dims.items()
               if name in state.dims and state.dims[name] != size}
    if not changed:
        return []
    fields = fields_binding(s.step, changed)
    if not fields:  # every dim is bound by some field; kept as a guard, never silent
        fields = [(name, name, s.dims[name], None) for name in sorted(changed)]
    reason = TURNS_REASON if is_token_turn(s.step, {path for path, *_ in fields}) else DIMS_REASON
    return [Problem(path, f"{name}={format_size(state.dims[name])} as earlier in the episode",
                    f"{name}={format_size(size)}"
                    + (f" ({describe(value)})" if value is not None else ""), reason)
            for path, name, size, value in fields]


def _kind_changes(s: StepInEpisode) -> list[tuple[str, str, str, Any]]:
    """(path, kind earlier in the episode, kind now, value) for each field whose kind changed."""
    state = s.state
    if state is None:
        return []
    return [(path, first, kind, value) for path, (kind, value) in s.kinds.items()
            if (first := state.kinds.get(path)) is not None and first != kind]


def _structure_kept(s: StepInEpisode) -> list[Problem]:
    return [Problem(path, ("an object of modalities" if first == MODALITIES else "a tensor")
                    + " as earlier in the episode", describe(value),
                    "structure changed within the episode")
            for path, first, kind, value in _kind_changes(s) if MODALITIES in (first, kind)]


def _dtype_kept(s: StepInEpisode) -> list[Problem]:
    return [Problem(path, f"{first} as earlier in the episode", describe(value),
                    "dtype changed within the episode")
            for path, first, kind, value in _kind_changes(s) if MODALITIES not in (first, kind)]


def _open(episodes: Mapping[str, OpenEpisode]) -> list[Problem]:
    return [Problem("episode_id", "a terminated or truncated last step",
                    f"episode {quoted(eid)} open after step {state.step}", "open episode",
                    line=state.line)
            for eid, state in episodes.items()]


def episode_of(record: dict[str, Any], steps: int, **changes: list[Any]) -> list[dict[str, Any]]:
    """`steps` records of one episode made from `record` (steps 0.., the last one terminated);
    `changes` gives a field's value per step (`step=[0, 2]`)."""
    out = []
    for i in range(steps):
        rec = dict(record, step=i, terminated=i == steps - 1, truncated=False)
        rec.update({k: v[i] for k, v in changes.items()})
        out.append(rec)
    return out


def _jump(record: dict[str, Any], model: Any) -> list[dict[str, Any]] | None:
    if not _free_observation(model) or "obs" in model.varying_dims:
        return None
    return episode_of(_drop(record, "next_observation"), 2,
                      observation=[[0.5] * 4, [0.5] * 5])


def _float_action(record: dict[str, Any], model: Any) -> list[dict[str, Any]] | None:
    action = field_specs(model).get("action")
    if not (isinstance(action, TensorSpec) and {"int64", "float32"} <= set(action.dtypes)):
        return None
    floats = (np.asarray(record["action"]) + 0.5).tolist()  # same shape, now a float
    return episode_of(record, 2, action=[record["action"], floats])


def _modalities_later(record: dict[str, Any], model: Any) -> list[dict[str, Any]] | None:
    if not _free_observation(model):
        return None
    return episode_of(_drop(record, "next_observation"), 2,
                      observation=[[0.5] * 4, {"x": [0.5] * 4}])


EPISODE_RULES = [
    Rule("episode.no_step_after_end", "episode",
         ("step after the episode ended (a phantom reset transition?)",), _after_end,
         lambda r, m: [*episode_of(r, 2), dict(r, step=2, terminated=False, truncated=False)],
         phase="step", doc="only the last step is terminated or truncated"),
    Rule("episode.starts_at_zero", "episode", ("episode does not start at step 0",), _starts,
         lambda r, m: episode_of(r, 2, step=[1, 2]), phase="step",
         doc="an episode's first step is step 0"),
    Rule("episode.step_contiguous", "episode", ("step does not follow the previous step",),
         _follows, lambda r, m: episode_of(r, 2, step=[0, 2]), phase="step",
         doc="step increases by exactly 1"),
    Rule("episode.policy_version_monotonic", "episode", ("policy_version decreased",),
         _version, lambda r, m: episode_of(r, 2, policy_version=[3, 2]), phase="step",
         doc="policy_version never decreases"),
    Rule("episode.dims_fixed", "episode", (DIMS_REASON, TURNS_REASON),
         _dims_kept, _jump, phase="step", doc="named dims keep their size unless varying"),
    Rule("episode.structure_fixed", "episode", ("structure changed within the episode",),
         _structure_kept, _modalities_later, phase="step",
         doc="a field that is a tensor stays a tensor, modalities stay modalities"),
    Rule("episode.dtype_fixed", "episode", ("dtype changed within the episode",),
         _dtype_kept, _float_action, phase="step",
         doc="a field (and each modality) keeps its dtype across the steps of an episode"),
    Rule("episode.complete", "episode", ("open episode",), _open,
         lambda r, m: episode_of(r, 2, terminated=[False, False]), phase="end",
         options={"require_complete": True},
         doc="the last step is terminated or truncated (where completeness is required)"),
]

# -- batch rules ---------------------------------------------------------------------------------


@dataclass
class BatchView:
    """The subject of a batch rule: the batch's arrays by wire name and their bound dims."""

    model: Any
    arrays: dict[str, Any]
    extra: dict[str, Any]
    bindings: dict[str, Any]
    dim_problems: list[Problem]
    versions: Any = None
    episode_ids: Any = None
    current_version: int = 0
    max_staleness: int = 0
    mask: Any = None


def rows_text(bad_rows: np.ndarray) -> str:
    """`rows [0, 3, ...]`: the rows of a batch where `bad_rows` is True (the first five)."""
    rows = np.flatnonzero(bad_rows)
    shown = ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")
    return f"rows [{shown}]"


def _extra(view: BatchView) -> list[Problem]:
    """Extra arrays lead with B, or with one of the model's `extra_dims` (a packed batch: M per
    token, B per sample)."""
    sizes = {d: view.bindings.get(d) for d in getattr(view.model, "extra_dims", ("B",))}
    leading = " or ".join(f"{d}={size}" for d, size in sizes.items())
    return [Problem(key, f"an array with leading {leading}", describe(value),
                    "extra batch field is not a [B, ...] array")
            for key, value in view.extra.items()
            if not isinstance(value, np.ndarray) or value.ndim == 0
            or value.shape[0] not in sizes.values()]


def _mask(view: BatchView) -> list[Problem]:
    mask = view.mask
    gaps = (mask[:, 1:] & ~mask[:, :-1]).any(axis=1)
    if not gaps.any():
        return []
    return [Problem("mask", "True then only False along each row (padding at the end)",
                    rows_text(gaps), "padding before a real step")]


def _finite(view: BatchView) -> list[Problem]:
    problems = []
    for wire, spec in field_specs(view.model).items():
        value = view.arrays.get(wire)
        if not isinstance(spec, TensorSpec) or spec.finite or not isinstance(value, np.ndarray):
            continue
        if value.dtype.kind != "f" or value.ndim < 2:
            continue
        finite = np.isfinite(value).reshape(value.shape[0], value.shape[1], -1).all(axis=2)
        bad = view.mask & ~finite
        if bad.any():
            problems.append(Problem(wire, "finite values where mask is True",
                                    f"non-finite values in {rows_text(bad.any(axis=1))}",
                                    "not finite"))
    return problems


def _flags(view: BatchView) -> list[Problem]:
    problems = []
    mask = view.mask
    for flag in ("done", "terminated", "truncated"):
        value = view.arrays.get(flag)
        if value is not None and (value & ~mask).any():
            problems.append(Problem(flag, "False where mask is False",
                                    f"True on padding in {rows_text((value & ~mask).any(axis=1))}",
                                    "flag set on padding"))
    return problems


def _done(view: BatchView) -> list[Problem]:
    arrays = view.arrays
    term, trunc, done = arrays.get("terminated"), arrays.get("truncated"), arrays.get("done")
    if term is None or trunc is None:
        return []
    wrong = view.mask & (done != (term | trunc))
    if not wrong.any():
        return []
    return [Problem("done", "terminated OR truncated on every real step",
                    f"a different value in {rows_text(wrong.any(axis=1))}",
                    "done disagrees with terminated/truncated")]


def _fresh(view: BatchView) -> list[Problem]:
    versions, current, most = view.versions, view.current_version, view.max_staleness
    ids = view.episode_ids
    problems = []
    for row in np.flatnonzero((versions < current - most) | (versions > current)):
        version = int(versions[row])
        episode = f" (episode {quoted(str(ids[row]))})" if ids is not None else ""
        future = version > current
        message = "policy version from the future" if future else "stale policy version"
        window = f"at most {current}" if future else f"{current - most}..{current}"
        problems.append(Problem(
            f"policy_version[{row}]", f"{window} (current {current}, max_staleness {most})",
            f"{version}{episode}", message))
    return problems


def _with(batch: dict[str, Any], key: str, change: Any) -> dict[str, Any]:
    value = np.array(batch[key])
    change(value)
    return dict(batch, **{key: value})


def _set(index: Any, item: Any) -> Any:
    def change(value: np.ndarray) -> None:
        value[index] = item
    return change


def _done_off(batch: dict[str, Any], model: Any) -> dict[str, Any]:
    done = np.array(batch["done"])
    out = dict(batch, terminated=done.copy(), truncated=np.zeros_like(done))
    return _with(out, "done", _set((0, 0), True))


def _padding_flag(batch: dict[str, Any], model: Any) -> dict[str, Any]:
    last = np.array(batch["mask"]).shape[1] - 1
    out = _with(batch, "mask", _set((1, last), False))
    return _with(out, "done", _set((1, last), True))


def _time_rows(build: Any) -> Any:
    """A builder for the `[B, T]` rules of `TrainBatch`: None for a batch of another kind (a
    token batch has no `mask` or `done`; its own rules are in `core._tokens`)."""
    return lambda b, m: build(b, m) if getattr(m, "batch_dims", ()) == ("B", "T") else None


def _longer_dim(batch: dict[str, Any], model: Any) -> dict[str, Any]:
    key = {("B", "T"): "reward", ("M",): "pad_mask"}.get(getattr(model, "batch_dims", ()),
                                                       "response_mask")
    value = np.asarray(batch[key])  # one more column than the other fields bind
    return dict(batch, **{key: np.zeros((value.shape[0], value.shape[1] + 1), value.dtype)})


BATCH_RULES = [
    Rule("batch.dims_agree", "batch", ("dim {name} disagrees with an earlier field",),
         lambda view: view.dim_problems, _longer_dim,
         phase="shape", doc="every field binds the same B and T (and named dims)"),
    Rule("batch.extra_fields_lead_with_b", "batch", ("extra batch field is not a [B, ...] array",),
         _extra, lambda b, m: dict(b, weights=np.zeros(np.shape(b["reward"])[0] + 1)),
         phase="shape", doc="a trainer's own arrays lead with [B]"),
    Rule("batch.mask_padding_at_end", "batch", ("padding before a real step",), _mask,
         _time_rows(lambda b, m: _with(b, "mask", _set((0, 1), False))), phase="values",
         doc="mask is True then only False along each row"),
    Rule("batch.finite_under_mask", "batch", ("not finite",), _finite,
         _time_rows(lambda b, m: _with(b, "reward", _set((0, 0), np.nan))), phase="values",
         doc="float fields are finite where mask is True"),
    Rule("batch.flags_off_mask", "batch", ("flag set on padding",), _flags,
         _time_rows(_padding_flag),
         phase="values", doc="done, terminated, truncated are False where mask is False"),
    Rule("batch.done_consistent", "batch", ("done disagrees with terminated/truncated",), _done,
         _time_rows(_done_off), phase="values", doc="done = terminated OR truncated on real steps"),
    Rule("batch.policy_version_fresh", "batch",
         ("stale policy version", "policy version from the future"), _fresh,
         lambda b, m: _with(b, "policy_version", _set(0, -5)), phase="staleness",
         options={"max_staleness": 1},
         doc="policy versions within max_staleness of the current one (when asked)"),
]

for _rule in [*FIELD_RULES, *STEP_RULES, *EPISODE_RULES, *BATCH_RULES]:
    register(_rule)
