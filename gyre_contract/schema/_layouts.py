"""The trainer's batch layout, from its batch dims: per step, batch `[B, T]`, time-major `[T, B]`
or flat `[M]` (docs/contract.md §6). Token rows (one row per generation, `[B, L]` token arrays)
are recognised from the fields themselves, in `tokenlayout`.
"""

from __future__ import annotations

import re

from gyre_contract.core._errors import SchemaError
from gyre_contract.schema._diffreport import Layout
from gyre_contract.schema._fieldtable import shape_text

_TIME_NAMES = frozenset({"T", "time", "t"})
BATCH_DIMS_SPELLINGS = ("B,T (batch-major), T,B (time-major), M or T*N (flat: real steps only), "
                        "B (token rows: one per generation)")
"""Every spelling of `--batch-dims` / `batch_dims=` the layouts read, for usage hints."""


def parse_batch_dims(text: str) -> tuple[str, ...]:
    """`"B,T"` -> ("B", "T"); `"T*N"` stays one flat dim."""
    dims = tuple(d.strip() for d in text.split(",") if d.strip())
    if not dims or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\*[A-Za-z_][A-Za-z0-9_]*)?", d)
                           for d in dims):
        raise SchemaError(f"--batch-dims must be names separated by commas ({BATCH_DIMS_SPELLINGS}"
                          f"), got {text!r}")
    return dims


def layout_of(batch_dims: tuple[str, ...] | None) -> Layout:
    """The trainer's layout from its batch dims: per step, batch [B, T], time-major or flat."""
    if not batch_dims:
        return Layout((), "step", "per step (no batch dims)")
    dims = tuple(batch_dims)
    shown = shape_text(dims)
    if len(dims) == 1:
        parts = dims[0].split("*")
        order = ", time-major" if len(parts) == 2 and parts[0] in _TIME_NAMES else ""
        return Layout(dims, "flat", f"flat {shown}{order}: one row per step")
    if dims[0] in _TIME_NAMES and dims[1] not in _TIME_NAMES:
        return Layout(dims, "time_major", f"time-major {shown}: each field needs a transpose "
                      f"from [B, T]")
    return Layout(dims, "batch", f"batch {shown}")
