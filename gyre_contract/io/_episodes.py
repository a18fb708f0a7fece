"""Episodes as per-episode columns: what a trainer reads, built from validated steps.

`Episode` is the one shape every reader (JSON Lines, Parquet, Ray shards, the recorder) hands
over; `episode_from_steps` builds it from validated step models. The bulk JSON Lines path builds
the same columns straight from its decoded blocks (`fastfile.BulkPlan.episode`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel

from gyre_contract.core._dims import FLOAT_DTYPES, format_shape, numpy_dtype
from gyre_contract.core._errors import ContractError, Problem
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import AnyObservation, RolloutStepV1, field_specs
from gyre_contract.core._tensor import TensorSpec


@dataclass
class Episode:
    """One episode as per-episode columns: one `[T, ...]` numpy array per field.

    `columns` maps each record key present to its column: a numpy array `[T, ...]` of the
    validated dtype (`str_` for strings); for a field whose shape holds a varying dim (declared
    in the model's `varying_dims`), a list of T arrays; for an observation of modalities, a dict
    {modality: column}; for `info`, a list of T dicts. A field carried by only some steps
    (typically `next_value` on a truncated last step) is still T long: a float field holds NaN
    on the steps that did not carry it (NaN is never data: the contract requires finite
    floats), any other field is a list with None there. `lines` holds each step's line number.
    """

    episode_id: str
    columns: dict[str, Any]
    lines: list[int] | None = None

    def __len__(self) -> int:
        return len(self.columns["step"])

    @property
    def terminated(self) -> bool:
        return bool(self.columns["terminated"][-1])

    @property
    def truncated(self) -> bool:
        return bool(self.columns["truncated"][-1]) and not self.terminated

    @property
    def is_open(self) -> bool:
        """The last step is neither terminated nor truncated (the file ended mid-episode)."""
        return not (self.columns["terminated"][-1] or self.columns["truncated"][-1])




def episode_from_steps(steps: list[tuple[int, RolloutStepV1]], model: type[RolloutStepV1]) -> Episode:
    """Columns of one episode from its validated steps (with their line numbers)."""
    models = [s for _, s in steps]
    info = model_info(model)
    columns: dict[str, Any] = {}
    varying = set(getattr(model, "varying_dims", ()))
    specs = field_specs(model)
    for wire in info.wires:
        attr = info.attr(wire)
        values = [getattr(s, attr) for s in models]
        if all(v is None for v in values):
            continue
        columns[wire] = _column(wire, values, specs.get(wire), varying)
    return Episode(str(models[0].episode_id), columns, [n for n, _ in steps])




def _column(name: str, values: list[Any], spec: Any, varying: set[str]) -> Any:
    """One field's values over T steps → its column (see `Episode`)."""
    present = [v for v in values if v is not None]
    first = present[0]
    if name == "info" or (isinstance(first, dict) and spec is None):
        return values  # free-form objects stay one dict per step
    if isinstance(first, (dict, BaseModel)):
        return _modalities_column(values, spec, varying)
    if len(present) < len(values):
        return _partial_column(values, spec)
    if isinstance(spec, AnyObservation):
        spec = spec.spec
    if isinstance(first, np.ndarray):
        if isinstance(spec, TensorSpec) and any(d.name in varying for d in spec.shape):
            return values
        try:
            return np.stack(values)
        except ValueError:
            shapes = sorted({format_shape(v.shape) for v in values})
            raise ContractError(Problem(name, "one shape over the episode", ", ".join(shapes),
                                        "shape changed within the episode")) from None
    return np.array(values, dtype=_scalar_dtype(first, spec))


def _scalar_dtype(value: Any, spec: Any) -> np.dtype:
    if isinstance(value, str):
        return np.dtype(np.str_)
    if isinstance(value, np.generic):  # e.g. an int64-or-float32 action validated as np.int64
        return value.dtype
    if isinstance(spec, TensorSpec) and isinstance(spec.dtype, str):
        return numpy_dtype(spec.dtype)
    if isinstance(value, bool):
        return np.dtype(np.bool_)
    return np.dtype(np.int64 if isinstance(value, int) else np.float32)


def _partial_column(values: list[Any], spec: Any) -> Any:
    """A field only some steps carry: NaN where absent for floats, else None in a list."""
    if isinstance(spec, AnyObservation):
        spec = spec.spec
    dtypes = spec.dtypes if isinstance(spec, TensorSpec) else ()
    present = [v for v in values if v is not None]
    shapes = {np.shape(v) for v in present}
    if dtypes and all(d in FLOAT_DTYPES for d in dtypes) and len(shapes) == 1:
        dtype = numpy_dtype(dtypes[0])
        out = np.full((len(values), *shapes.pop()), np.nan, dtype=dtype)
        for i, v in enumerate(values):
            if v is not None:
                out[i] = v
        return out
    return values


def _modalities_column(values: list[Any], spec: Any, varying: set[str]) -> dict[str, Any]:
    """An observation made of modalities → {modality: column}."""
    dicts = [v if v is None or isinstance(v, dict) else modality_values(v) for v in values]
    keys: dict[str, None] = {}
    for d in dicts:
        keys.update(dict.fromkeys(d or ()))
    sub_specs = field_specs(spec) if isinstance(spec, type) else {}
    sub_varying = varying | set(getattr(spec, "varying_dims", ()))
    out = {}
    for key in keys:
        column_values = [None if d is None else d.get(key) for d in dicts]
        out[key] = _column(key, column_values, sub_specs.get(key), sub_varying)
    return out


def modality_values(value: BaseModel) -> dict[str, Any]:
    """The modalities an observation model carries, by wire name (absent ones left out)."""
    info = model_info(type(value))
    values = {w: getattr(value, info.attr(w)) for w in info.wires}
    return {w: v for w, v in values.items() if v is not None}


# -- stage 1: validate a whole file ----------------------------------------------------------
