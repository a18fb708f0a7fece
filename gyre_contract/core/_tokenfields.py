"""The token fields of a step (contract v1.1): one value per generated token, like `logprob`.

`ref_logprob` (the reference policy's log-prob; [] or the action's dims), `loss_mask` and
`token_reward` (the action's dims) are bound to the action's shape by the registered rule
`step.token_fields_shape` (`core._rules`); this module holds what that rule and the paths that
implement it share: the problem it reports and the dims the action's shape fixes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gyre_contract.core._errors import Problem
from gyre_contract.core._fields import AnyObservation, field_specs
from gyre_contract.core._tensor import TensorSpec

TOKEN_FIELDS = ("ref_logprob", "loss_mask", "token_reward")
"""Step fields with one value per action token (`ref_logprob` may also be one value, [])."""
TOKENS_REASON = "not one value per action token"
TURNS_REASON = ("dimension changed within the episode (token turns of varying length: validate "
                "with --model gyre_contract.pinned:LLMStep, or a model declaring varying_dims)")
"""`episode.dims_fixed` on a token action and its per-token fields (`is_token_turn`)."""


def token_field_problem(wire: str, dtype: str, shape: tuple[int, ...],
                        action_shape: tuple[int, ...]) -> Problem | None:
    """The problem of a token field `wire` of `shape` beside an action of `action_shape`."""
    if shape == action_shape or (wire == "ref_logprob" and shape == ()):
        return None
    expected = f"{dtype}{list(action_shape)}"
    if wire == "ref_logprob" and action_shape:  # beside a scalar action [] is the action's
        expected = f"{dtype}[] or {expected}"
    size, tokens = int(np.prod(shape)), int(np.prod(action_shape))
    if len(shape) <= 1 and len(action_shape) <= 1 and size != tokens:
        got = (f"{size} value{'s' if size != 1 else ''} for {tokens} action "
               f"token{'s' if tokens != 1 else ''}")
    else:
        got = f"shape {list(shape)} for the action's {list(action_shape)}"
    return Problem(wire, expected, f"{got} ({dtype}{list(shape)})", TOKENS_REASON)


def action_bound_dims(model: Any) -> frozenset[str]:
    """Dims of the token fields that their rule fixes from the action's shape (no other field
    names them): the episode rule on dims leaves them to the action's own dims. `ref_logprob`
    ([] or the action's) only when the action is a scalar."""
    specs = field_specs(model)
    action = specs.get("action")
    if not isinstance(action, TensorSpec):
        return frozenset()
    counts: dict[str, int] = {}
    for spec in specs.values():
        inner = spec.spec if isinstance(spec, AnyObservation) else spec
        for dim in getattr(inner, "shape", ()):
            if dim.name:
                counts[dim.name] = counts.get(dim.name, 0) + 1
    out: set[str] = set()
    for wire in TOKEN_FIELDS:
        spec = specs.get(wire)
        if not isinstance(spec, TensorSpec) or len(spec.shape) != 1 or not spec.shape[0].variadic:
            continue
        name = spec.shape[0].name
        if name is None or counts[name] != 1:
            continue
        if wire != "ref_logprob" or not action.shape:
            out.add(name)
    return frozenset(out)


_PER_TOKEN = frozenset({"logprob", *TOKEN_FIELDS})


def is_token_turn(step: Any, paths: set[str]) -> bool:
    """The changed fields are a token action (integer, rank 1) and its per-token fields."""
    action = getattr(step, "action", None)
    return ("action" in paths and paths <= _PER_TOKEN | {"action"}
            and isinstance(action, np.ndarray) and action.ndim == 1
            and np.issubdtype(action.dtype, np.integer))
