"""dtype rules: which values of one dtype are already values of another, and which casts lose some.

Both the diff (docs/contract.md §6: does a sampler field feed a trainer field as is, by a cast, or
not at all) and compat (can data written under one schema version be read under another) decide
with these rules, so the two never disagree about a dtype.

A field table's dtype is a contract dtype (`float32`, `int64`, `bool`, ...), a JSON number of
unknown width (`number`, `integer`), `string`, `object`, a tuple of several, or None (unknown).
"""

from __future__ import annotations

from dataclasses import dataclass

from gyre_contract.schema._fieldtable import Dtype, dtype_text

FLOAT_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32", "float64")
BITS: dict[str, int] = {
    "bool": 1, "int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16,
    "uint32": 32, "uint64": 64, "float16": 16, "bfloat16": 16, "float32": 32, "float64": 64,
}
"""Storage width of each sized dtype."""
MANTISSA: dict[str, int] = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
"""Exact-integer precision (bits of significand) of each float width."""
EXPONENT: dict[str, int] = {"float16": 5, "bfloat16": 8, "float32": 8, "float64": 11}
"""Exponent bits of each float width: its range (float16 overflows above 65504, bfloat16 near
3.4e38), so a float cast keeps every value only when both precision and range grow or stay."""


def dtypes_of(dtype: Dtype) -> tuple[str, ...]:
    """The dtypes a field allows, as a tuple (empty when unknown)."""
    if dtype is None:
        return ()
    return (dtype,) if isinstance(dtype, str) else dtype


def dtype_kind(dtype: str) -> str:
    """`bool`, `float`, `int`, or the dtype itself (`string`, `object`)."""
    if dtype == "bool":
        return "bool"
    if dtype in FLOAT_DTYPES or dtype == "number":
        return "float"
    if dtype.startswith(("int", "uint")) or dtype == "integer":
        return "int"
    return dtype  # string, object


def fits(s: str, t: str) -> bool:
    """Values of dtype `s` are already values of `t` (no cast): equal, or an unknown width."""
    if s == t:
        return True
    ks, kt = dtype_kind(s), dtype_kind(t)
    if t == "number":
        return ks in ("int", "float")
    if s == "number":
        return kt == "float"
    if s == "integer" or t == "integer":
        return ks == kt == "int"
    return False


def lossless(s: str, t: str) -> bool | None:
    """Whether casting dtype `s` to `t` keeps every value; None when no cast exists."""
    ks, kt = dtype_kind(s), dtype_kind(t)
    if "string" in (ks, kt) or "object" in (ks, kt):
        return None
    if ks == "bool":
        return True
    if kt == "bool":
        return False
    if s in ("number", "integer") or t in ("number", "integer"):
        return ks == "int" and kt == "float" and t == "number"
    if ks == kt == "float":
        return MANTISSA[s] <= MANTISSA[t] and EXPONENT[s] <= EXPONENT[t]
    if ks == kt == "int":
        if s.startswith("uint") and t.startswith("int"):
            return BITS[s] < BITS[t]
        return s.startswith("uint") == t.startswith("uint") and BITS[s] <= BITS[t]
    if ks == "int" and kt == "float":
        return BITS[s] < MANTISSA[t] or (s.startswith("uint") and BITS[s] <= MANTISSA[t])
    return False  # float -> int


def narrowing(s: str, t: str) -> bool:
    """Whether casting `s` to `t` keeps the kind (int or float) but drops to fewer bits."""
    ks, kt = dtype_kind(s), dtype_kind(t)
    return ks == kt and ks in ("int", "float") and s in BITS and t in BITS and BITS[t] < BITS[s]


@dataclass(frozen=True, slots=True)
class DtypeFit:
    """How one dtype becomes another: `ok`, the cast (None: as is), whether it keeps every value,
    the narrowing pair when it narrows, and why not when it cannot."""

    ok: bool
    cast_to: str | None = None
    lossless: bool = True
    narrowing: tuple[str, str] | None = None
    why: str = ""


def compare_dtype(s: Dtype, t: Dtype) -> DtypeFit:
    """How sampler dtype `s` becomes trainer dtype `t`: as is, by a cast, or not at all."""
    ss, ts = dtypes_of(s), dtypes_of(t)
    if not ss or not ts:
        return DtypeFit(True)
    unmatched = [d for d in ss if not any(fits(d, x) for x in ts)]
    if not unmatched:
        return DtypeFit(True)
    target = next((x for x in ts if x not in ("number", "integer", "object")), ts[0])
    if target == "integer":
        target = "int64"  # an int of unknown width: the widest is the safe choice
    if target == "number" and all(dtype_kind(d) == "bool" for d in unmatched):
        target = "float32"  # a flag stored as a float (CleanRL's dones): 0.0 / 1.0, lossless
    if target in ("number", "object"):
        return DtypeFit(False, why=f"{dtype_text(s)} cannot become {dtype_text(t)}")
    keeps = True
    narrowed = None
    for d in unmatched:
        ok = lossless(d, target)
        if ok is None:
            return DtypeFit(False, why=f"{dtype_text(s)} cannot become {dtype_text(t)}: no "
                            f"cast between {dtype_kind(d)} and {dtype_kind(target)}")
        keeps = keeps and ok
        if narrowing(d, target):
            narrowed = (d, target)
    return DtypeFit(True, target, keeps, narrowed)


def readable(written: Dtype, reader: Dtype) -> bool:
    """Every value of dtype `written` is a value of `reader`, as is or by a lossless cast."""
    ws, rs = dtypes_of(written), dtypes_of(reader)
    if not ws or not rs:
        return True
    return all(any(fits(w, r) or lossless(w, r) is True for r in rs) for w in ws)
