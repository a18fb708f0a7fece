"""Diff: sort every trainer field into same / renamed / needs_conversion / missing (docs/contract.md §6).

`diff(sampler, trainer)` compares two field tables. The trainer's leading batch dims are stripped
first (`x-gyre-batch-dims` or `batch_dims=`), so shapes are compared per step. For each trainer
field, in order: a `renames` override; a sampler field of the same name (and compatible role); a
sampler field of the same role, scored by dtype/shape fit and name likeness; a known converter
(done = any(terminated, truncated), mask from padding, advantage by GAE, ...); else `missing`.
Sampler fields no trainer field reads are `unused`. Warnings name semantic losses no tier shows.

Two LLM-shaped cases: a trainer field that accepts an object of modalities (TrainBatch `obs`)
reads the sampler's whole object (`{"from": "observation"}`, each modality keeping its dtype),
never one modality cast to float; and per-element values of a summable role (per-token
`logprob [A]`, A a varying dim) become one per step by `masked_sum` over the varying dims.

Matching is O(n·k): sampler fields are indexed by name and by role, so each trainer field looks
only at the few sampler fields that share its role.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gyre_contract.core.errors import SchemaError, describe
from gyre_contract.schema.fieldtable import (
    UNKNOWN_DIM,
    Dim,
    Dtype,
    Field,
    FieldTable,
    dtype_text,
    field_table,
    field_table_from_model,
    shape_text,
)
from gyre_contract.schema.roles import (
    BEHAVIOUR_LOGPROB_NAMES,
    SUMMABLE_ROLES,
    is_recomputed_logprob,
    synonyms,
)

_SAME_REASON = "same name, dtype and shape"
_UNUSED_REASON = "produced by the sampler, read by no trainer field"
TIERS: tuple[str, ...] = ("same", "renamed", "needs_conversion", "missing", "unused")
REPORT_VERSION = 1
DEFAULT_GAMMA = 0.99
DEFAULT_LAM = 0.95
MAX_CANDIDATES = 16
"""Sampler fields scored per trainer field at most (bounds matching to O(n·k))."""

# Columns `collate` keeps one per row [B]: (what reading one per step takes, what a map cannot do).
_ROW_COLUMNS = {
    "episode_id": ("repeat the row's episode_id on each step (collate keeps one per row)", ""),
    "policy_version": ("one policy_version per step", "collate keeps one policy_version per "
                       "row (the oldest of its steps); a per-step version is not in the batch"),
}
# Roles a converter computes from other fields: preferred over an optional sampler field.
_COMPUTED_ROLES = frozenset({"return", "advantage"})
_TIME_NAMES = frozenset({"T", "time", "t"})
_FLOATS = ("float16", "bfloat16", "float32", "float64")
_BITS = {"bool": 1, "int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16,
         "uint32": 32, "uint64": 64, "float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}
# Exact-integer precision (bits of significand) of each float width.
_MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


# ---------------------------------------------------------------------------------------------
# Report types


@dataclass(frozen=True, slots=True)
class Conversion:
    """How a trainer field is made: op names, the field-map entry (None when no map entry can
    express it), a readable formula, and whether a cast loses information."""

    ops: tuple[str, ...]
    text: str
    entry: dict[str, Any] | None
    cast: str | None = None  # "lossless" | "lossy" | None
    manual: str = ""  # what the written map cannot express and a person must do
    keeps_dtypes: bool = False  # an object of modalities, each keeping its own dtype

    def to_dict(self) -> dict[str, Any]:
        return {"ops": list(self.ops), "text": self.text, "map": self.entry, "cast": self.cast,
                "manual": self.manual or None}


@dataclass(frozen=True, slots=True)
class Entry:
    """One row of the report: a trainer field and where its data comes from (or an unused one)."""

    tier: str
    trainer_field: str | None
    sampler_fields: tuple[str, ...]
    role: str
    sampler_dtype: Dtype = None
    trainer_dtype: Dtype = None
    sampler_shape: tuple[Dim, ...] | None = None
    trainer_shape: tuple[Dim, ...] | None = None
    conversion: Conversion | None = None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            "trainer_field": self.trainer_field,
            "sampler_fields": list(self.sampler_fields),
            "role": self.role,
            "dtype": {"sampler": _dtype_json(self.sampler_dtype),
                      "trainer": _dtype_json(self.trainer_dtype)},
            "shape": {"sampler": _shape_json(self.sampler_shape),
                      "trainer": _shape_json(self.trainer_shape)},
            "conversion": self.conversion.to_dict() if self.conversion else None,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class DiffWarning:
    """A semantic loss no tier shows: `code` (stable), the fields concerned, a message."""

    code: str
    fields: tuple[str, ...]
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "fields": list(self.fields), "message": self.message}


@dataclass(frozen=True, slots=True)
class Layout:
    """The trainer's batch layout: its batch dims and what turning `[B, T, ...]` into it takes."""

    batch_dims: tuple[str, ...]
    kind: str  # step | batch | time_major | flat
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"batch_dims": list(self.batch_dims), "kind": self.kind, "text": self.text}


@dataclass
class DiffReport:
    """The result of `diff`: entries by tier, warnings, and renderers (text, JSON, markdown)."""

    sampler: FieldTable
    trainer: FieldTable
    layout: Layout
    entries: list[Entry]
    warnings: list[DiffWarning] = field(default_factory=list)
    gamma: float = DEFAULT_GAMMA
    lam: float = DEFAULT_LAM

    def tier(self, name: str) -> list[Entry]:
        return [e for e in self.entries if e.tier == name]

    def entry(self, trainer_field: str) -> Entry:
        """The entry of one trainer field (KeyError when the trainer has no such field)."""
        for e in self.entries:
            if e.trainer_field == trainer_field:
                return e
        raise KeyError(trainer_field)

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(TIERS, 0)
        for e in self.entries:
            counts[e.tier] += 1
        return counts

    def exit_code(self, strict: bool = False) -> int:
        """0 nothing missing; 1 something missing (with `strict`, also any conversion)."""
        counts = self.counts()
        if counts["missing"] or (strict and counts["needs_conversion"]):
            return 1
        return 0

    def summary_line(self) -> str:
        c = self.counts()
        parts = [f"{c['same']} same", f"{c['renamed']} renamed",
                 f"{c['needs_conversion']} need conversion", f"{c['missing']} missing",
                 f"{c['unused']} unused", _plural(len(self.warnings), "warning")]
        if c["missing"]:
            verdict = f"contract broken: {_plural(c['missing'], 'trainer field')} with no source"
        elif c["needs_conversion"]:
            verdict = "contract holds with conversions (write them with --write-map)"
        else:
            verdict = "contract holds"
        return ", ".join(parts) + f" — {verdict}"

    def to_dict(self) -> dict[str, Any]:
        counts = self.counts()
        return {
            "gyre_diff_report": REPORT_VERSION,
            "sampler": _side_dict(self.sampler),
            "trainer": _side_dict(self.trainer),
            "layout": self.layout.to_dict(),
            "entries": [e.to_dict() for e in self.entries],
            "warnings": [w.to_dict() for w in self.warnings],
            "summary": {**counts, "warnings": len(self.warnings),
                        "exit_code": self.exit_code(), "text": self.summary_line()},
        }

    def to_text(self, color: bool = False) -> str:
        """An aligned table grouped by tier, the warnings, and a one-line summary."""
        return render_text(self, color=color)

    def to_markdown(self) -> str:
        """The same report as a Markdown table, for a pull-request comment."""
        return render_markdown(self)

    def field_map(self) -> dict[str, Any]:
        """The field map (docs/contract.md §7) that realises this report, for `FieldMap.from_dict`.

        A conversion of several steps is one entry: its op, then a `then` chain of one-input
        steps (e.g. `any` then `unsqueeze`). Fields that no map entry can express (a next
        observation or next value shifted from the following step, a reshape the engine cannot
        spell out) are left out and named in the `comment`; a person adds them by hand (see the
        `map_incomplete` warning). A flat trainer layout also gets `mask`, which the
        `flat_layout` warning tells the user to select real steps with.
        """
        fields: dict[str, Any] = {}
        left_out: list[str] = []
        for e in self.entries:
            if e.trainer_field is None or e.tier == "missing":
                continue
            entry = e.conversion.entry if e.conversion else {"from": e.sampler_fields[0]}
            if entry is None:
                left_out.append(e.trainer_field)
                continue
            fields[e.trainer_field] = entry
        if self.layout.kind == "flat" and "mask" not in fields and "mask" not in self.trainer:
            fields["mask"] = {"op": "mask", "comment": "not a trainer field: the trainer reads "
                              "a flat batch, select its steps with batch[key][batch['mask']]"}
        doc: dict[str, Any] = {"gyre_field_map": 1}
        comment = f"written by gyre-contract diff {self.sampler.name} {self.trainer.name}"
        missing = [e.trainer_field for e in self.tier("missing") if e.trainer_field]
        if missing:
            comment += f"; missing (no source): {', '.join(missing)}"
        if left_out:
            comment += f"; write by hand: {', '.join(left_out)}"
        doc["comment"] = comment
        doc["fields"] = fields
        return doc


def _then(steps: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The `then` key of a map entry for the one-input steps after its op (none: no key)."""
    return {"then": [{"op": op, **args} for op, args in steps]} if steps else {}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _side_dict(table: FieldTable) -> dict[str, Any]:
    return {"name": table.name, "title": table.title, "kind": table.kind,
            "version": table.version, "fields": len(table),
            "batch_dims": list(table.batch_dims) if table.batch_dims is not None else None}


def _dtype_json(dtype: Dtype) -> str | list[str] | None:
    return list(dtype) if isinstance(dtype, tuple) else dtype


def _shape_json(shape: tuple[Dim, ...] | None) -> list[int | str] | None:
    return list(shape) if shape is not None else None


# ---------------------------------------------------------------------------------------------
# Inputs


SchemaInput = str | Path | Mapping[str, Any] | FieldTable | type


def as_table(source: SchemaInput, batch_dims: tuple[str, ...] | None = None) -> FieldTable:
    """A field table from a schema dict, a path, a Pydantic model class or a table."""
    if isinstance(source, FieldTable):
        if batch_dims is None:
            return source
        return replace(source, batch_dims=tuple(batch_dims))
    if isinstance(source, type):
        return field_table_from_model(source, batch_dims=batch_dims)
    if isinstance(source, (str, Path, Mapping)):
        return field_table(source, batch_dims=batch_dims)
    raise SchemaError(f"a schema is a dict, a path, a Pydantic model class or a FieldTable, "
                      f"got {describe(source)}")


def parse_batch_dims(text: str) -> tuple[str, ...]:
    """`"B,T"` -> ("B", "T"); `"T*N"` stays one flat dim."""
    dims = tuple(d.strip() for d in text.split(",") if d.strip())
    if not dims or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\*[A-Za-z_][A-Za-z0-9_]*)?", d)
                           for d in dims):
        raise SchemaError(f"--batch-dims must be names separated by commas (B,T or M or T*N), "
                          f"got {text!r}")
    return dims


# ---------------------------------------------------------------------------------------------
# Layout and per-step shapes


def layout_of(batch_dims: tuple[str, ...] | None) -> Layout:
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


def _strip(shape: tuple[Dim, ...] | None, batch: tuple[str, ...]) -> tuple[tuple[Dim, ...] | None,
                                                                          int]:
    """Per-step shape and how many leading batch dims were stripped."""
    if shape is None or not batch:
        return shape, 0
    named = any(isinstance(d, str) and d != UNKNOWN_DIM and not d.startswith("*") for d in shape)
    n = 0
    while n < len(batch) and n < len(shape):
        d = shape[n]
        if isinstance(d, str) and d.startswith("*"):
            break
        if named and d != batch[n]:
            break
        n += 1
    return shape[n:], n


# ---------------------------------------------------------------------------------------------
# dtype and shape comparison


def _dtypes(d: Dtype) -> tuple[str, ...]:
    if d is None:
        return ()
    return (d,) if isinstance(d, str) else d


def _kind(d: str) -> str:
    if d == "bool":
        return "bool"
    if d in _FLOATS or d == "number":
        return "float"
    if d.startswith(("int", "uint")) or d == "integer":
        return "int"
    return d  # string, object


def _fits(s: str, t: str) -> bool:
    """Values of dtype `s` are already values of `t` (no cast): equal, or an unknown width."""
    if s == t:
        return True
    ks, kt = _kind(s), _kind(t)
    if t == "number":
        return ks in ("int", "float")
    if s == "number":
        return kt == "float"
    if s == "integer" or t == "integer":
        return ks == kt == "int"
    return False


def _lossless(s: str, t: str) -> bool | None:
    """Whether casting dtype `s` to `t` keeps every value; None when no cast exists."""
    ks, kt = _kind(s), _kind(t)
    if "string" in (ks, kt) or "object" in (ks, kt):
        return None
    if ks == "bool":
        return True
    if kt == "bool":
        return False
    if s in ("number", "integer") or t in ("number", "integer"):
        return ks == "int" and kt == "float" and t == "number"
    if ks == kt == "float":
        return _BITS[s] <= _BITS[t] and _MANTISSA[s] <= _MANTISSA[t]
    if ks == kt == "int":
        if s.startswith("uint") and t.startswith("int"):
            return _BITS[s] < _BITS[t]
        return s.startswith("uint") == t.startswith("uint") and _BITS[s] <= _BITS[t]
    if ks == "int" and kt == "float":
        return _BITS[s] < _MANTISSA[t] or (s.startswith("uint") and _BITS[s] <= _MANTISSA[t])
    return False  # float -> int


def _narrowing(s: str, t: str) -> bool:
    ks, kt = _kind(s), _kind(t)
    return ks == kt and ks in ("int", "float") and s in _BITS and t in _BITS and \
        _BITS[t] < _BITS[s]


@dataclass(frozen=True, slots=True)
class _DtypeFit:
    ok: bool
    cast_to: str | None = None
    lossless: bool = True
    narrowing: tuple[str, str] | None = None
    why: str = ""


def compare_dtype(s: Dtype, t: Dtype) -> _DtypeFit:
    """How sampler dtype `s` becomes trainer dtype `t`: as is, by a cast, or not at all."""
    ss, ts = _dtypes(s), _dtypes(t)
    if not ss or not ts:
        return _DtypeFit(True)
    unmatched = [d for d in ss if not any(_fits(d, x) for x in ts)]
    if not unmatched:
        return _DtypeFit(True)
    target = next((x for x in ts if x not in ("number", "integer", "object")), ts[0])
    if target == "integer":
        target = "int64"  # an int of unknown width: the widest is the safe choice
    if target == "number" and all(_kind(d) == "bool" for d in unmatched):
        target = "float32"  # a flag stored as a float (CleanRL's dones): 0.0 / 1.0, lossless
    if target in ("number", "object"):
        return _DtypeFit(False, why=f"{dtype_text(s)} cannot become {dtype_text(t)}")
    lossless = True
    narrowing = None
    for d in unmatched:
        ok = _lossless(d, target)
        if ok is None:
            return _DtypeFit(False, why=f"{dtype_text(s)} cannot become {dtype_text(t)}: no "
                             f"cast between {_kind(d)} and {_kind(target)}")
        lossless = lossless and ok
        if _narrowing(d, target):
            narrowing = (d, target)
    return _DtypeFit(True, target, lossless, narrowing)


def _dim_ok(a: Dim, b: Dim) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return True  # a name, or an unknown size, matches any size


def _variadic(d: Dim) -> bool:
    return isinstance(d, str) and d.startswith("*")


def shapes_match(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> bool:
    """Whether two per-step shapes can describe the same arrays (names match any size)."""
    if not any(map(_variadic, a)) and not any(map(_variadic, b)):
        return len(a) == len(b) and all(_dim_ok(x, y) for x, y in zip(a, b))
    return _match_variadic(a, b)


def _match_variadic(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> bool:
    if not a or not b:
        rest = a or b
        return all(map(_variadic, rest))
    if _variadic(a[0]):
        return _match_variadic(a[1:], b) or _match_variadic(a, b[1:])
    if _variadic(b[0]):
        return _match_variadic(a, b[1:]) or _match_variadic(a[1:], b)
    return _dim_ok(a[0], b[0]) and _match_variadic(a[1:], b[1:])


@dataclass(frozen=True, slots=True)
class _ShapeFit:
    ok: bool
    op: str | None = None  # unsqueeze | squeeze | pad
    why: str = ""


def compare_shape(s: tuple[Dim, ...] | None, t: tuple[Dim, ...] | None,
                  varying: tuple[str, ...] = ()) -> _ShapeFit:
    """Per-step shapes: equal, a trailing singleton to add/remove, a varying dim to pad, or not."""
    if s is None or t is None:
        return _ShapeFit(True)
    if shapes_match(s, t):
        if varying and not all(_variadic(d) for d in s if d in varying):
            return _ShapeFit(True, "pad", f"pad varying dim {', '.join(varying)} to the batch "
                             f"maximum (collate adds its own mask)")
        return _ShapeFit(True)
    if t and t[-1] == 1 and shapes_match(s, t[:-1]) and not (s and _variadic(s[-1])):
        return _ShapeFit(True, "unsqueeze", "add a trailing dim of 1")
    if s and s[-1] == 1 and shapes_match(s[:-1], t):
        return _ShapeFit(True, "squeeze", "drop the trailing dim of 1")
    return _ShapeFit(False, why=f"per-step shape {shape_text(s)} cannot become {shape_text(t)}")


# ---------------------------------------------------------------------------------------------
# The engine


def diff(
    sampler: SchemaInput,
    trainer: SchemaInput,
    *,
    batch_dims: tuple[str, ...] | list[str] | str | None = None,
    renames: Mapping[str, str] | None = None,
    gamma: float = DEFAULT_GAMMA,
    lam: float = DEFAULT_LAM,
) -> DiffReport:
    """Compare what the sampler produces with what the trainer reads (docs/contract.md §6).

    `sampler` and `trainer` are schema dicts, paths, Pydantic model classes or field tables.
    `batch_dims` names the trainer's leading batch dims for a foreign schema (`("B", "T")`,
    `("T", "B")` for a time-major trainer, `("M",)` or `("T*N",)` for a flat one); `renames`
    maps trainer field -> sampler field and overrides the matching. `gamma`/`lam` go into the
    written map's `gae` and `discounted_return` entries.
    """
    if isinstance(batch_dims, str):
        batch_dims = parse_batch_dims(batch_dims)
    s_tab = as_table(sampler)
    t_tab = as_table(trainer, tuple(batch_dims) if batch_dims is not None else None)
    engine = _Engine(s_tab, t_tab, dict(renames or {}), gamma, lam)
    return engine.run()


class _Engine:
    def __init__(self, s_tab: FieldTable, t_tab: FieldTable, renames: dict[str, str],
                 gamma: float, lam: float) -> None:
        self.s_tab, self.t_tab = s_tab, t_tab
        self.renames = renames
        self.gamma, self.lam = gamma, lam
        self.layout = layout_of(t_tab.batch_dims)
        self.s_batch = tuple(s_tab.batch_dims or ())
        self.by_role: dict[str, list[Field]] = {}
        self.by_token: dict[tuple[str, str], list[Field]] = {}
        for f in s_tab:
            self.by_role.setdefault(f.role, []).append(f)
            for token in _tokens(f.name):
                self.by_token.setdefault((f.role, token), []).append(f)
        self.used: set[str] = set()
        self.prefix_roles: dict[str, set[str]] | None = None  # dotted prefix -> roles under it
        self.warnings: list[DiffWarning] = []
        self.optional: list[tuple[str, str]] = []
        self._check_renames()

    def _check_renames(self) -> None:
        for t_name, s_name in self.renames.items():
            if t_name not in self.t_tab:
                raise SchemaError(f"--rename {t_name}={s_name}: the trainer has no field "
                                  f"{t_name!r}; trainer fields: {', '.join(self.t_tab.names())}")
            if s_name not in self.s_tab:
                raise SchemaError(f"--rename {t_name}={s_name}: the sampler has no field "
                                  f"{s_name!r}; sampler fields: {', '.join(self.s_tab.names())}")

    def run(self) -> DiffReport:
        entries = [self.match(t) for t in self.t_tab]
        for s in self.s_tab:
            if s.name not in self.used:
                entries.append(Entry("unused", None, (s.name,), s.role, s.dtype, None,
                                     self._s_shape(s), None, None,
                                     _UNUSED_REASON))
        self._semantic_warnings(entries)
        return DiffReport(self.s_tab, self.t_tab, self.layout, entries, self.warnings,
                          self.gamma, self.lam)

    # -- matching ----------------------------------------------------------------------------

    def _s_shape(self, s: Field) -> tuple[Dim, ...] | None:
        return _strip(s.shape, self.s_batch)[0]

    def match(self, t: Field) -> Entry:
        t_step, stripped = _strip(t.shape, tuple(self.t_tab.batch_dims or ()))
        if t.role_candidates and len(t.role_candidates) > 1 and not t.declared_role:
            self._warn_ambiguous_role(t)
        if t.name in self.renames:
            s = self.s_tab[self.renames[t.name]]
            return self._direct(t, s, t_step, stripped, "renamed by --rename")
        same = self.s_tab.fields.get(t.name)
        if same is not None and _roles_agree(same, t):
            source: Field | None = same
        elif t.modalities and (group := self._modality_group(t)) is not None:
            return self._group_entry(t, *group, stripped)
        else:
            source = self._by_role(t, t_step)
        if source is not None and not source.required and t.role in _COMPUTED_ROLES:
            derived = self._derive(t, t_step, stripped)
            if derived.tier != "missing":
                note = f"the sampler's {source.name} is optional, so it is computed here"
                return replace(derived, reason=f"{derived.reason}; {note}")
        if source is not None:
            return self._direct(t, source, t_step, stripped, "")
        return self._derive(t, t_step, stripped)

    def _by_role(self, t: Field, t_step: tuple[Dim, ...] | None) -> Field | None:
        if t.role == "other":
            return None
        scored = []
        for s in self._candidates(t):
            fit_d = compare_dtype(s.dtype, t.dtype)
            fit_s = compare_shape(self._s_shape(s), t_step, s.varying)
            if not (fit_d.ok and fit_s.ok):
                scored.append((0.0, s))
                continue
            score = 1.0 + (0.3 if fit_d.cast_to is None and fit_s.op is None else 0.15)
            score += 0.2 * _name_likeness(s.name, t.name) + 0.1 * s.role_score
            if t.role == "logprob" and s.name.rsplit(".", 1)[-1] in BEHAVIOUR_LOGPROB_NAMES:
                score += 0.05
            scored.append((score, s))
        if not scored:
            return None
        scored.sort(key=lambda pair: -pair[0])
        best_score, best = scored[0]
        if best_score == 0.0:
            best = scored[0][1]  # incompatible: _direct reports why it cannot be used
            return best
        close = [s for score, s in scored if score > 0 and best_score - score < 0.05]
        if len(close) > 1:
            names = ", ".join(s.name for s in close)
            self.warnings.append(DiffWarning(
                "ambiguous_match", (t.name, *(s.name for s in close)),
                f"{t.name}: several sampler fields fit equally ({names}); chose {best.name}. "
                f"Use --rename {t.name}=<field> to choose another"))
        return best

    def _candidates(self, t: Field) -> list[Field]:
        """At most MAX_CANDIDATES sampler fields of the trainer field's role, those sharing a
        name word first: keeps matching O(n·k) even when hundreds of fields share a role."""
        group = self.by_role.get(t.role, ())
        if len(group) <= MAX_CANDIDATES:
            return list(group)
        picked: dict[str, Field] = {}
        for token in sorted(_tokens(t.name)):
            for s in self.by_token.get((t.role, token), ())[:MAX_CANDIDATES]:
                picked.setdefault(s.name, s)
        for s in group[:MAX_CANDIDATES]:
            picked.setdefault(s.name, s)
        return list(picked.values())[:MAX_CANDIDATES]

    def _direct(self, t: Field, s: Field, t_step: tuple[Dim, ...] | None, stripped: int,
                note: str) -> Entry:
        s_step = self._s_shape(s)
        fit_d = compare_dtype(s.dtype, t.dtype)
        fit_s = compare_shape(s_step, t_step, s.varying)
        base = dict(role=t.role, sampler_dtype=s.dtype, trainer_dtype=t.dtype,
                    sampler_shape=s.shape, trainer_shape=t.shape)
        if fit_d.ok and not fit_s.ok and self._summable(t, s, s_step, t_step, stripped):
            return self._summed(t, s, s_step, fit_d, stripped, note)
        if not fit_d.ok or not fit_s.ok:
            why = fit_d.why if not fit_d.ok else fit_s.why
            return Entry("missing", t.name, (s.name,), reason=f"{s.name} has the role "
                         f"{s.role} but {why}; no known conversion", **base)
        self.used.add(s.name)
        self._warn_cast(t, s, fit_d)
        self._warn_optional(t, s)
        conversion = self._conversion(t, s.name, fit_d, fit_s, t_step, stripped,
                                      s_step=s_step)
        rename = s.name != t.name
        notes = [n for n in (note, _row_note(t, stripped, self.layout)) if n]
        if conversion is None:
            tier = "renamed" if rename else "same"
            reason = f"same role ({t.role}), dtype and shape" if rename else _SAME_REASON
            return Entry(tier, t.name, (s.name,), reason="; ".join([reason, *notes]), **base)
        return Entry("needs_conversion", t.name, (s.name,), conversion=conversion,
                     reason="; ".join([conversion.text, *notes]), **base)

    # -- an object of modalities, and per-element values summed to one per step --------------

    def _modality_group(self, t: Field) -> tuple[str, list[Field]] | None:
        """The sampler object of modalities of `t`'s role (`observation` holding
        `observation.token_ids`, `observation.text`), for a trainer field that accepts one.

        None when a sampler field of the role is a plain tensor (ordinary matching applies) or
        no object holds only fields of the role. Several such objects: the one named like `t`,
        else the first, with an `ambiguous_match` warning.
        """
        fields = self.by_role.get(t.role, ())
        if not fields or any("." not in f.name for f in fields):
            return None
        groups: dict[str, list[Field]] = {}
        for f in fields:
            prefix = self._group_of(f)
            if prefix is not None and prefix not in groups:
                groups[prefix] = [g for g in self.s_tab if g.name.startswith(f"{prefix}.")]
        if not groups:
            return None
        names = sorted(groups, key=lambda g: (g != t.name, -_name_likeness(g, t.name)))
        if len(names) > 1:
            self.warnings.append(DiffWarning(
                "ambiguous_match", (t.name, *names),
                f"{t.name}: several sampler objects of modalities fit ({', '.join(names)}); "
                f"chose {names[0]}. Use --rename {t.name}=<field> to read one field instead"))
        return names[0], groups[names[0]]

    def _group_of(self, f: Field) -> str | None:
        """The shortest dotted prefix of `f` under which every sampler field has `f`'s role."""
        if self.prefix_roles is None:  # built once: O(fields x depth)
            self.prefix_roles = {}
            for g in self.s_tab:
                parts = g.name.split(".")
                for n in range(1, len(parts)):
                    self.prefix_roles.setdefault(".".join(parts[:n]), set()).add(g.role)
        parts = f.name.split(".")
        for n in range(1, len(parts)):
            prefix = ".".join(parts[:n])
            if prefix not in self.s_tab and self.prefix_roles[prefix] == {f.role}:
                return prefix
        return None

    def _group_entry(self, t: Field, prefix: str, members: list[Field], stripped: int
                     ) -> Entry:
        """The whole object of modalities as the trainer field: `{"from": prefix}` gives the
        map a dict of its modality columns, each keeping its dtype (no cast)."""
        self.used.update(f.name for f in members)
        if t.required and not any(f.required for f in members):
            self.optional.append((t.name, prefix))
        keys = [f.name[len(prefix) + 1:] for f in members]
        parts = ", ".join(f"{k} {dtype_text(f.dtype)} {shape_text(self._s_shape(f))}"
                          for k, f in zip(keys, members))
        ops, texts = ["rename"], [f"{prefix} {{{', '.join(keys)}}}"]
        manual = ""
        varying = list(dict.fromkeys(d for f in members for d in f.varying))
        if varying:
            masks = ", ".join(f"{f.name[len(prefix) + 1:]}_mask" for f in members if f.varying)
            ops.append("pad")
            texts.append(f"pad varying dim {', '.join(varying)} to the batch maximum (the "
                         f"object gains {masks})")
        layout = self._layout_op(None, stripped)
        if layout is not None:
            ops.append(layout[0])
            texts.append(layout[2])
            manual = layout[2] if layout[1] is None else ""
        reason = (f"the trainer's {t.name} takes an object of modalities: all of {prefix} "
                  f"({parts}), dtypes kept")
        conversion = Conversion(tuple(ops), "; ".join(texts),
                                None if manual else {"from": prefix}, None, manual,
                                keeps_dtypes=True)
        tier = "needs_conversion" if len(ops) > 1 else "renamed" if prefix != t.name else "same"
        if tier == "needs_conversion":
            reason = f"{'; '.join(texts[1:])}; {reason}"
        dtypes = tuple(dict.fromkeys(d for f in members for d in _dtypes(f.dtype)))
        note = _row_note(t, stripped, self.layout)
        return Entry(tier, t.name, (prefix,), t.role, dtypes or None, t.dtype, None, t.shape,
                     conversion, "; ".join(filter(None, [reason, note])))

    def _summable(self, t: Field, s: Field, s_step: tuple[Dim, ...] | None,
                  t_step: tuple[Dim, ...] | None, stripped: int) -> bool:
        """Whether per-element values of `s` (every per-step dim a declared varying dim) add up
        to the one value per step that `t` holds (a summable role: a sequence's log-prob)."""
        return (t.role in SUMMABLE_ROLES and s.role == t.role and t_step == ()
                and stripped == len(self.layout.batch_dims) and bool(s_step)
                and all(isinstance(d, str) and not _variadic(d) and d in s.varying
                        for d in s_step or ()))

    def _summed(self, t: Field, s: Field, s_step: tuple[Dim, ...] | None, fit_d: _DtypeFit,
                stripped: int, note: str) -> Entry:
        """`masked_sum` over the varying dims of `s`: one value per step, padding left out."""
        self.used.add(s.name)
        self._warn_cast(t, s, fit_d)
        self._warn_optional(t, s)
        dims = list(s_step or ())
        mask = f"{s.name}_mask"
        last = 1 + len(dims)  # axis of the last varying dim in the collated [B, T, *dims]
        ops = ["masked_sum"]
        texts = [f"masked_sum({s.name}, {mask}, axis={last})"]
        steps: list[tuple[str, dict[str, Any]]] = [("sum", {"axis": a})
                                                   for a in range(last - 1, 1, -1)]
        if steps:
            ops += ["sum"] * len(steps)
            texts.append(f"then sum over axis {', '.join(str(a['axis']) for _, a in steps)}")
        entry: dict[str, Any] = {"op": "masked_sum", "from": [s.name, mask], "axis": last}
        manual = ""
        layout = self._layout_op((), stripped)
        if layout is not None:
            ops.append(layout[0])
            texts.append(layout[2])
            if layout[1] is None:
                manual = layout[2]
            else:
                steps.append((layout[0], layout[1]))
        cast = None
        if fit_d.cast_to is not None:
            cast = "lossless" if fit_d.lossless else "lossy"
            ops.append("cast")
            texts.append(f"{cast} cast to {fit_d.cast_to}")
            entry["cast"] = fit_d.cast_to
        entry.update(_then(steps))
        what = {"logprob": "the whole sequence's log-prob",
                "ref_logprob": "the whole sequence's reference log-prob",
                "reward": "the step's total reward"}[t.role]
        reason = (f"one {t.role} per step = the sum of {s.name} over its real elements (varying "
                  f"dim {', '.join(map(str, dims))}; {mask} drops the padding): {what}")
        conversion = Conversion(tuple(ops), "; ".join(texts), None if manual else entry, cast,
                                manual)
        self.warnings.append(DiffWarning(
            "summed_elements", (t.name, s.name),
            f"{t.name} <- {s.name}: the trainer reads one {t.role} per step, so the map sums "
            f"{s.name} over {', '.join(map(str, dims))}; the per-element values are not in the "
            f"batch (a token-level loss needs them: add a key such as token_{t.role} "
            f"{{\"from\": \"{s.name}\"}} to the map)"))
        notes = [n for n in (note, _row_note(t, stripped, self.layout)) if n]
        return Entry("needs_conversion", t.name, (s.name,), t.role, s.dtype, t.dtype, s.shape,
                     t.shape, conversion, "; ".join([reason, *notes]))

    def _conversion(self, t: Field, source: str, fit_d: _DtypeFit, fit_s: _ShapeFit,
                    t_step: tuple[Dim, ...] | None, stripped: int,
                    s_step: tuple[Dim, ...] | None) -> Conversion | None:
        """The conversion of a one-source field (cast, shape, layout), None when none is needed."""
        ops: list[str] = []
        texts: list[str] = []
        entry: dict[str, Any] = {"from": source}
        structural: list[tuple[str, dict[str, Any]]] = []
        manual = ""
        if source in _ROW_COLUMNS and self._per_step(stripped):
            ops.append("per_step")
            texts.append(_ROW_COLUMNS[source][0])
            if source == "episode_id":
                structural.append(("per_step", {}))
            else:
                manual = _ROW_COLUMNS[source][1]
        if fit_s.op == "pad":
            ops.append("pad")
            texts.append(fit_s.why)
        elif fit_s.op == "unsqueeze":
            ops.append("reshape")
            texts.append(f"add a trailing dim of 1 ({shape_text(s_step)} -> "
                         f"{shape_text(t_step)} per step)")
            structural.append(("unsqueeze", {"axis": -1}))
        elif fit_s.op == "squeeze":
            ops.append("squeeze")
            texts.append(f"drop the trailing dim of 1 ({shape_text(s_step)} -> "
                         f"{shape_text(t_step)} per step)")
            structural.append(("squeeze", {"axis": -1}))
        layout = self._layout_op(t_step if t_step is not None else s_step, stripped)
        if layout is not None:
            op, args, text = layout
            ops.append(op)
            texts.append(text)
            if args is None:
                manual = text
            else:
                structural.append((op, args))
        cast = None
        if fit_d.cast_to is not None:
            cast = "lossless" if fit_d.lossless else "lossy"
            ops.insert(0, "cast")
            texts.insert(0, f"{cast} cast to {fit_d.cast_to}")
            entry["cast"] = fit_d.cast_to
        if not ops:
            return None
        out: dict[str, Any] | None = entry
        if manual:
            out = None
        elif structural:
            op, args = structural[0]
            out = {"op": op, **entry, **args, **_then(structural[1:])}
        return Conversion(tuple(ops), "; ".join(texts), out, cast, manual)

    def _per_step(self, stripped: int) -> bool:
        """Whether a trainer field with `stripped` batch dims holds one value per step."""
        return self.layout.kind != "step" and stripped == len(self.layout.batch_dims)

    def _layout_op(self, per_step: tuple[Dim, ...] | None, stripped: int
                   ) -> tuple[str, dict[str, Any] | None, str] | None:
        """The op turning a collated [B, T, ...] column into the trainer's layout."""
        kind = self.layout.kind
        if kind in ("step", "batch") or stripped < len(self.layout.batch_dims):
            return None
        rank = _rank(per_step)
        if kind == "time_major":
            if rank is None:
                return ("transpose", None, "transpose to [T, B, ...] (per-step rank unknown: "
                        "pin the sampler's shape or write the axes by hand)")
            return ("transpose", {"axes": [1, 0, *range(2, 2 + rank)]},
                    "transpose to [T, B, ...]")
        return None  # flat: one layout step for the whole batch (see the flat_layout warning)

    # -- converters ----------------------------------------------------------------------------

    def _have(self, role: str) -> Field | None:
        fields = self.by_role.get(role)
        return fields[0] if fields else None

    def _derive(self, t: Field, t_step: tuple[Dim, ...] | None, stripped: int) -> Entry:
        derive = getattr(self, f"_derive_{t.role}", None)
        if derive is not None:
            found = derive(t)
            if found is not None:
                sources, op_entry, text, reason, manual = found
                return self._derived(t, sources, op_entry, text, reason, manual, t_step,
                                     stripped)
        return Entry("missing", t.name, (), t.role, None, t.dtype, None, t.shape, None,
                     _missing_reason(t))

    def _derived(self, t: Field, sources: list[str], op_entry: dict[str, Any] | None,
                 text: str, reason: str, manual: str, t_step: tuple[Dim, ...] | None,
                 stripped: int) -> Entry:
        self.used.update(s for s in sources if s in self.s_tab)
        if op_entry is not None and op_entry.get("op") in ("gae", "discounted_return"):
            self.used.update(f.name for f in self.by_role.get("next_value", ()))
        out_dtype, out_shape = _derived_output(t.role)
        ops = [op_entry.get("op", "rename") if op_entry else _op_word(text)]
        texts = [text]
        fit_d = compare_dtype(out_dtype, t.dtype)
        if fit_d.cast_to is not None and op_entry is not None:
            op_entry = {**op_entry, "cast": fit_d.cast_to}
            ops.append("cast")
            texts.append(f"{'lossless' if fit_d.lossless else 'lossy'} cast to {fit_d.cast_to}")
        extra: list[str] = []
        steps: list[tuple[str, dict[str, Any]]] = []
        if out_shape is not None:
            fit_s = compare_shape(out_shape, t_step)
            if fit_s.op in ("unsqueeze", "squeeze"):
                extra.append(f"{fit_s.op} the last axis")
                steps.append((fit_s.op, {"axis": -1}))
            elif not fit_s.ok and not (op_entry and op_entry.get("op") == "mask"
                                       and "from" in op_entry):
                extra.append(f"reshape {shape_text(out_shape)} to {shape_text(t_step)}")
                manual = manual or f"{text} then {extra[-1]}"
        layout = self._layout_op(t_step, stripped)
        if layout is not None:
            extra.append(layout[2])
            if layout[1] is None:
                manual = manual or f"{text} then {layout[2]}"
            else:
                steps.append((layout[0], layout[1]))
        texts += extra
        if steps and op_entry is not None and not manual:
            ops[1:1] = [op for op, _ in steps]
            op_entry = {**op_entry, **_then(steps)}
        cast = None
        if fit_d.cast_to is not None:
            cast = "lossless" if fit_d.lossless else "lossy"
        entry_out = None if manual else op_entry
        conversion = Conversion(tuple(ops), "; ".join(texts), entry_out, cast, manual)
        note = _row_note(t, stripped, self.layout)
        return Entry("needs_conversion", t.name, tuple(sources), t.role, out_dtype, t.dtype,
                     None, t.shape, conversion, "; ".join(filter(None, [reason, note])))

    def _derive_done(self, t: Field) -> tuple | None:
        flags = [f.name for f in (self._have("terminated"), self._have("truncated")) if f]
        if not flags:
            return None
        text = f"any({', '.join(flags)})"
        reason = "done = terminated OR truncated"
        if len(flags) == 1:
            reason = f"done = {flags[0]} only: the sampler records no " + \
                ("truncated" if self._have("terminated") else "terminated") + " flag"
        return flags, {"op": "any", "from": flags}, text, reason, ""

    def _derive_episode_start(self, t: Field) -> tuple | None:
        step = self._have("step")
        if step is not None:
            return ([step.name], {"op": "episode_start", "from": step.name},
                    f"episode_start({step.name})",
                    "episode start = the previous step's done (true where step == 0), never "
                    "this step's done", "")
        done = self._have("done")
        if done is not None:
            return ([done.name], {"op": "shift", "from": done.name, "by": 1, "fill": True},
                    f"shift({done.name}, 1)", "episode start = the previous step's done", "")
        return None

    def _derive_terminated(self, t: Field) -> tuple | None:
        done, trunc = self._have("done"), self._have("truncated")
        if done is None or trunc is None:
            return None
        return ([done.name, trunc.name], {"op": "and_not", "from": [done.name, trunc.name]},
                f"and_not({done.name}, {trunc.name})", "terminated = done AND NOT truncated", "")

    def _derive_truncated(self, t: Field) -> tuple | None:
        done, term = self._have("done"), self._have("terminated")
        if done is None or term is None:
            return None
        return ([done.name, term.name], {"op": "and_not", "from": [done.name, term.name]},
                f"and_not({done.name}, {term.name})",
                f"truncated = {done.name} AND NOT {term.name} (how RLDS and old Gym mark a "
                f"time-limit end)", "")

    def _derive_mask(self, t: Field) -> tuple | None:
        t_step, _ = _strip(t.shape, tuple(self.t_tab.batch_dims or ()))
        if t_step:
            varying = [f for f in self.s_tab if f.varying]
            varying.sort(key=lambda f: f.role != "action")
            if varying:
                col = f"{varying[0].name}_mask"
                return ([varying[0].name], {"op": "mask", "from": col}, f"mask({col})",
                        f"mask of the real elements of {varying[0].name} (padding of its "
                        f"varying dim)", "")
        manual = ("mask() gives one flag per step; a mask per element needs a sampler field "
                  "whose dim varies (x-gyre-varying-dims)") if t_step else ""
        return [], {"op": "mask"}, "mask()", "mask from padding: True on real steps", manual

    def _derive_advantage(self, t: Field) -> tuple | None:
        need = self._gae_sources()
        if need is None:
            return None
        sources, lacking = need
        if lacking:
            return None
        entry = {"op": "gae", "from": sources, "gamma": self.gamma, "lam": self.lam}
        return (sources[:4], entry, f"gae({', '.join(sources)})",
                "advantage by GAE (terminated: no bootstrap; truncated: bootstrap from "
                "next_value)", "")

    def _derive_return(self, t: Field) -> tuple | None:
        has_adv = any(f.role == "advantage" for f in self.t_tab)
        gae_src = self._gae_sources()
        if has_adv and gae_src is not None and not gae_src[1]:
            sources = gae_src[0]
            entry = {"op": "gae", "from": sources, "gamma": self.gamma, "lam": self.lam,
                     "output": "return"}
            return (sources[:4], entry, f"gae({', '.join(sources)}).return",
                    "return = advantage + value (the GAE λ-return, consistent with the "
                    "trainer's advantage)", "")
        reward, term, trunc = (self._have(r) for r in ("reward", "terminated", "truncated"))
        if reward is None or term is None or trunc is None:
            return None
        sources = [reward.name, term.name, trunc.name, "next_value"]
        entry = {"op": "discounted_return", "from": sources, "gamma": self.gamma}
        return (sources[:3], entry, f"discounted_return({', '.join(sources)})",
                "return by discounting the rewards", "")

    def _gae_sources(self) -> tuple[list[str], list[str]] | None:
        roles = ("reward", "value", "terminated", "truncated")
        found = [self._have(r) for r in roles]
        if found[0] is None:
            return None
        lacking = [r for r, f in zip(roles, found) if f is None]
        return [f.name if f else r for f, r in zip(found, roles)] + ["next_value"], lacking

    def _derive_next_observation(self, t: Field) -> tuple | None:
        obs = self._have("observation")
        if obs is None:
            return None
        return ([obs.name], None, f"shift({obs.name}, -1)",
                f"next observation = {obs.name} of the next step; the last step of each episode "
                f"needs the final observation, which the sampler does not record",
                "shift by -1 with the final observation on each episode's last step: no map op "
                "does this without filling; record next_observation in the sampler")

    def _derive_next_value(self, t: Field) -> tuple | None:
        value = self._have("value")
        if value is None:
            return None
        return ([value.name], None, f"shift({value.name}, -1)",
                f"next value = {value.name} of the next step, plus the bootstrap value on each "
                f"episode's last step", "shift by -1 with the row's next_value on the last "
                "step: write by hand")

    # -- warnings ------------------------------------------------------------------------------

    def _warn_ambiguous_role(self, t: Field) -> None:
        roles = " or ".join(r for r, _ in t.role_candidates)
        self.warnings.append(DiffWarning(
            "ambiguous_match", (t.name,),
            f"{t.name}: the name means {roles} in different libraries; read as {t.role}. "
            f"Declare \"x-gyre-role\" in the trainer schema or use --rename to decide"))

    def _warn_cast(self, t: Field, s: Field, fit: _DtypeFit) -> None:
        """A narrowing cast, or integers cast to a float that cannot hold them all."""
        if fit.narrowing:
            self._warn_narrowing(t, s, *fit.narrowing)
        to = fit.cast_to
        if to is None or _kind(to) != "float" or to not in _MANTISSA:
            return
        ints = [d for d in _dtypes(s.dtype) if _kind(d) == "int" and _lossless(d, to) is False]
        if ints:
            self.warnings.append(DiffWarning(
                "int_to_float", (t.name, s.name),
                f"{t.name} <- {s.name}: lossy cast {ints[0]} -> {to}: integers beyond "
                f"2**{_MANTISSA[to]} do not fit (the map refuses them), and integer codes such "
                f"as token ids or categories are labels, not quantities: embed them in the "
                f"trainer rather than reading them as floats"))

    def _warn_narrowing(self, t: Field, s: Field, frm: str, to: str) -> None:
        self.warnings.append(DiffWarning(
            "narrowing_cast", (t.name, s.name),
            f"{t.name} <- {s.name}: narrowing cast {frm} -> {to} may lose precision or "
            f"overflow (the map refuses values that do not fit)"))

    def _warn_optional(self, t: Field, s: Field) -> None:
        if t.required and not s.required:
            self.optional.append((t.name, s.name))

    def _warn_unknown_batch_dims(self, entries: list[Entry]) -> None:
        """A foreign trainer schema that names no batch dims: say why shapes may not line up."""
        if self.layout.kind != "step" or self.t_tab.kind == "rollout_step":
            return
        mismatched = [e.trainer_field for e in entries
                      if e.tier == "missing" and e.sampler_fields and e.trainer_field]
        if mismatched:
            self.warnings.append(DiffWarning(
                "no_batch_dims", tuple(mismatched),
                f"the trainer's schema names no batch dims (x-gyre-batch-dims), so its shapes "
                f"were compared per step and {', '.join(mismatched)} did not fit; if its arrays "
                f"lead with batch dims, say which: --batch-dims B,T (or T,B for time-major, M "
                f"for a flat batch)"))

    def _semantic_warnings(self, entries: list[Entry]) -> None:
        if self.optional:
            pairs = ", ".join(t if t == s else f"{t} <- {s}" for t, s in self.optional)
            self.warnings.append(DiffWarning(
                "optional_source", tuple(t for t, _ in self.optional),
                f"the trainer requires {pairs}, but the sampler's schema marks "
                f"{'that source' if len(self.optional) == 1 else 'those sources'} optional: "
                f"rollouts without {'it' if len(self.optional) == 1 else 'them'} fail to map "
                f"(nothing is filled in)"))
        self._warn_unknown_batch_dims(entries)
        if self.layout.kind == "flat":
            self.warnings.append(DiffWarning(
                "flat_layout", (),
                f"the trainer reads a flat batch {shape_text(self.layout.batch_dims)}: the map "
                f"writes [B, T, ...] columns, so select the real steps with "
                f"batch[key][batch['mask']] (never reshape: padding would become data)"
                + (" in time-major order (transpose first)" if "time-major" in
                   self.layout.text else "")))
        t_roles = {f.role for f in self.t_tab}
        s_trunc = self._have("truncated")
        dones = [f.name for f in self.t_tab if f.role in ("done", "episode_start")]
        if dones and not t_roles & {"terminated", "truncated"} and s_trunc is not None:
            self.warnings.append(DiffWarning(
                "truncation_collapsed", (*dones, s_trunc.name),
                f"the trainer reads only {', '.join(dones)}, not terminated/truncated, while "
                f"the sampler records {s_trunc.name}: time-limit cuts will be trained as "
                f"terminal (no bootstrap from next_value)"))
        s_logprob = self._have("logprob")
        for f in self.t_tab:
            if f.role == "logprob" and is_recomputed_logprob(f.name, f.description):
                behaviour = f"the sampler's {s_logprob.name}" if s_logprob else \
                    "the behaviour log-prob"
                self.warnings.append(DiffWarning(
                    "recomputed_logprob", (f.name,),
                    f"{f.name} is usually recomputed by the trainer with its current weights "
                    f"(verl, OpenRLHF, TRL, Tianshou), not {behaviour} under policy_version: "
                    f"the sampler/trainer mismatch goes uncorrected unless the trainer also "
                    f"reads the behaviour log-prob"))
        for e in entries:
            if e.tier != "needs_conversion" or e.conversion is None:
                continue
            if "gae" in e.conversion.ops or "discounted_return" in e.conversion.ops:
                if self._have("next_value") is None and s_trunc is not None:
                    self.warnings.append(DiffWarning(
                        "no_bootstrap_value", (e.trainer_field or "",),
                        f"{e.trainer_field}: the sampler records no next_value, so a truncated "
                        f"episode cannot be bootstrapped; the map fails on one unless its "
                        f"entry says \"truncation\": \"terminal\" (time-limit cuts then count "
                        f"as terminal)"))
        manual = [e for e in entries if e.conversion is not None and e.conversion.entry is None]
        if manual:
            names = ", ".join(e.trainer_field or "" for e in manual)
            self.warnings.append(DiffWarning(
                "map_incomplete", tuple(e.trainer_field or "" for e in manual),
                f"the written map leaves out {names}, which no map entry can express; write "
                f"by hand: "
                + "; ".join(f"{e.trainer_field}: {e.conversion.manual}" for e in manual
                            if e.conversion)))


def _roles_agree(s: Field, t: Field) -> bool:
    if s.role == t.role or "other" in (s.role, t.role):
        return True
    # Only declared roles can veto a same-name match (`dones` declared episode_start vs done).
    return not (s.declared_role and t.declared_role) and not (
        {s.role, t.role} & {"ref_logprob", "episode_start"})


def _name_likeness(a: str, b: str) -> float:
    ta, tb = _tokens(a), _tokens(b)
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / len(ta | tb)


def _tokens(name: str) -> set[str]:
    return {w.rstrip("s") for w in re.split(r"[._\-\s]+", name.lower()) if w}


def _rank(shape: tuple[Dim, ...] | None) -> int | None:
    if shape is None or any(map(_variadic, shape)):
        return None
    return len(shape)


def _row_note(t: Field, stripped: int, layout: Layout) -> str:
    if not layout.batch_dims or stripped >= len(layout.batch_dims) or t.shape is None:
        return ""
    if stripped == 0:
        return "one value per batch"
    return "one value per row"


def _derived_output(role: str) -> tuple[Dtype, tuple[Dim, ...] | None]:
    if role in ("done", "terminated", "truncated", "episode_start", "mask"):
        return "bool", ()
    if role in ("advantage", "return", "next_value"):
        return "float32", ()
    return None, None


def _op_word(text: str) -> str:
    return text.split("(", 1)[0]


def _missing_reason(t: Field) -> str:
    if t.role == "ref_logprob":
        return ("no sampler field holds a reference-policy log-prob; the behaviour logprob is "
                "never one (compute it with the reference model)")
    if t.role == "logprob":
        return "no sampler field holds the behaviour log-prob (logprob); a ref_logprob is never one"
    if t.role == "other":
        return f"no sampler field named {t.name}, and the name has no known role"
    if t.role == "advantage":
        return "no advantage in the sampler, and GAE needs reward, value, terminated and truncated"
    looked = ", ".join(synonyms(t.role)[:6])
    return f"no sampler field with the role {t.role} (looked for {looked}, ...) and no converter"


# ---------------------------------------------------------------------------------------------
# Rendering

_TIER_TITLES = {"same": "SAME", "renamed": "RENAMED", "needs_conversion": "NEEDS CONVERSION",
                "missing": "MISSING", "unused": "UNUSED"}
_TIER_HELP = {
    "same": "same name, dtype and shape",
    "renamed": "another name, same role, dtype and shape",
    "needs_conversion": "a source exists but needs a cast, reshape, transpose or converter",
    "missing": "no source and no converter: the contract is broken",
    "unused": "produced by the sampler, read by nobody",
}
_COLORS = {"same": "32", "renamed": "36", "needs_conversion": "33", "missing": "31;1",
           "unused": "2", "warning": "33"}
_HEADER = ("trainer field", "from sampler", "dtype", "shape", "why")


def _paint(text: str, code: str, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if color else text


def _cells(e: Entry) -> tuple[str, str, str, str, str]:
    trainer = e.trainer_field if e.trainer_field is not None else "-"
    derived = e.conversion is not None and e.conversion.ops[0] not in _ONE_SOURCE_OPS
    if derived and e.conversion is not None:
        source = e.conversion.text.split("; ")[0]
    else:
        source = ", ".join(e.sampler_fields) if e.sampler_fields else "-"
    s_dtype = dtype_text(e.sampler_dtype) if e.sampler_fields and not derived else ""
    t_dtype = dtype_text(e.trainer_dtype) if e.trainer_field is not None else ""
    if e.conversion is not None and e.conversion.keeps_dtypes:
        s_dtype, t_dtype = f"{dtype_text(e.sampler_dtype)} (kept)", ""
    s_shape = shape_text(e.sampler_shape) if e.sampler_shape is not None else ""
    t_shape = shape_text(e.trainer_shape) if e.trainer_field is not None else ""
    why = e.reason
    for generic in (_SAME_REASON, _UNUSED_REASON):
        if why.startswith(generic):
            why = why[len(generic):].lstrip("; ")
    return trainer, source, _pair(s_dtype, t_dtype), _pair(s_shape, t_shape), why


_ONE_SOURCE_OPS = ("cast", "reshape", "squeeze", "transpose", "pad", "per_step")


def _pair(s: str, t: str) -> str:
    if not s:
        return t
    if not t or s == t:
        return s
    return f"{s} -> {t}"


def _side_line(label: str, table: FieldTable, layout: Layout | None) -> str:
    facts = [f for f in (table.kind, table.version) if f]
    facts.append(_plural(len(table), "field"))
    if layout is not None and layout.batch_dims:
        facts.append(layout.text)
    return f"  {label}: {table.name} ({', '.join(facts)})"


def render_text(report: DiffReport, color: bool = False) -> str:
    rows = [(e, _cells(e)) for e in report.entries]
    widths = [max([len(h)] + [len(c[i]) for _, c in rows]) for i, h in enumerate(_HEADER[:4])]
    lines = ["gyre-contract diff",
             _side_line("sampler", report.sampler, None),
             _side_line("trainer", report.trainer, report.layout), ""]
    header = "  " + "  ".join(h.ljust(w) for h, w in zip(_HEADER, widths)) + "  " + _HEADER[4]
    lines.append(_paint(header.rstrip(), "1", color))
    lines.append("  (a -> b: the sampler's, then the trainer's; ? is any size; *name is any "
                 "number of dims)")
    for tier in TIERS:
        group = [c for e, c in rows if e.tier == tier]
        if not group:
            continue
        title = f"{_TIER_TITLES[tier]} ({len(group)}): {_TIER_HELP[tier]}"
        lines.append(_paint(title, _COLORS[tier], color))
        for cells in group:
            line = "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  " + cells[4]
            lines.append(line.rstrip())
    if report.warnings:
        lines.append("")
        lines.append(_paint(f"WARNINGS ({len(report.warnings)})", _COLORS["warning"], color))
        for w in report.warnings:
            lines.append(f"  ! {w.code}: {w.message}")
    lines.append("")
    summary = report.summary_line()
    code = "31;1" if report.counts()["missing"] else "32"
    lines.append(_paint(f"summary: {summary}", code, color))
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: DiffReport) -> str:
    lines = [f"### gyre-contract diff: `{report.sampler.name}` → `{report.trainer.name}`", "",
             f"**{report.summary_line()}**", ""]
    if report.layout.batch_dims:
        lines += [f"Trainer layout: {report.layout.text}.", ""]
    lines += ["| tier | trainer field | from sampler | dtype | shape | why |",
              "|---|---|---|---|---|---|"]
    for tier in TIERS:
        for e in report.entries:
            if e.tier != tier:
                continue
            trainer, source, dtype, shape, why = _cells(e)
            lines.append(f"| {tier} | `{_md(trainer)}` | `{_md(source)}` | {_md(dtype)} | "
                         f"{_md(shape)} | {_md(why)} |")
    if report.warnings:
        lines += ["", f"**Warnings ({len(report.warnings)})**", ""]
        lines += [f"- `{w.code}`: {_md(w.message)}" for w in report.warnings]
    return "\n".join(lines) + "\n"
