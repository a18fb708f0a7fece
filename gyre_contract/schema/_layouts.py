"""The trainer's batch layout as the diff sees it (docs/contract.md §6): per step, batch `[B, T]`,
time-major `[T, B]` or flat `[M]`, from its batch dims; token rows (one row per generation,
`[B, L]` token arrays), recognised from the fields themselves in `tokentrainer`.

`map_keys` writes what a field map records of it (`rows`, `batch_dims`, `layout`, and for token
rows `pad_to` or `token_budget`: data, read back into the row layout of
`gyre_contract.trainer._layouts`, which the diff never calls).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gyre_contract.core._errors import SchemaError
from gyre_contract.schema._fieldtable import shape_text


@dataclass(frozen=True, slots=True)
class Layout:
    """The trainer's batch layout: its batch dims and what turning `[B, T, ...]` into it takes."""

    batch_dims: tuple[str, ...]
    kind: str  # step | batch | time_major | flat | token
    text: str
    name: str | None = None
    """Token rows: the map's `"layout"`, `padded` (None: the default) or `packed`."""
    pad_to: tuple[tuple[str, int], ...] = ()
    """Token rows: the fixed widths the trainer's schema names (`(("P", 512), ("R", 1024))`)."""
    token_budget: int | None = None
    """Packed token rows: the tokens of one micro-batch row, when the trainer's schema says."""

    def to_dict(self) -> dict[str, Any]:
        return {"batch_dims": list(self.batch_dims), "kind": self.kind, "text": self.text}


_TIME_NAMES = frozenset({"T", "time", "t"})
BATCH_DIMS_SPELLINGS = ("B,T (batch-major), T,B (time-major), M or T*N (flat: real steps only), "
                        "B (token rows: one per generation), M (packed token rows)")
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


def map_keys(layout: Layout) -> dict[str, Any]:
    """The layout keys of the field map the diff writes for this trainer: `rows` (a token
    trainer reads token rows, one per generation), then `batch_dims` and `layout`, what the diff
    decided (the dims `B` it assumed for a token trainer included), so `batch --trainer` on the
    same schema needs no `--batch-dims`; a token trainer's fixed widths (`pad_to`) or packed
    rows' `token_budget`. No dims for a per-step trainer."""
    token = layout.kind == "token"
    keys: dict[str, Any] = {"rows": "step"} if token else {}
    dims = layout.batch_dims
    if dims and not (token and len(dims) != 1):
        keys.update(batch_dims=list(dims),
                    layout=(layout.name or "padded") if token else layout.kind)
    if layout.pad_to:
        keys["pad_to"] = dict(layout.pad_to)
    if layout.token_budget is not None:
        keys["token_budget"] = layout.token_budget
    return keys
