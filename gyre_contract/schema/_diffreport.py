"""The diff's report (docs/contract.md §6): one entry per trainer field, warnings, and its renderings.

`DiffReport` follows the report protocol of `gyre_contract.core._report`: `ok` (no trainer field is
missing), `warnings`, `exit_code(strict)` (strict: a conversion also fails), `to_dict()` (exactly
what `gyre-contract diff --format json` prints) and `render(format)` in text, JSON or Markdown.
`field_map()` writes the field map (docs/contract.md §7) that realises the report.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gyre_contract.core._report import Report
from gyre_contract.core._text import name_shortener, printable, shorten
from gyre_contract.schema._fieldtable import Dim, Dtype, Field, FieldTable, dtype_text, shape_text
from gyre_contract.schema._layouts import Layout, map_keys

SAME_REASON = "same name, dtype and shape"
"""The reason of a `same` entry (renderers drop it from the `why` column)."""
UNUSED_REASON = "produced by the sampler, read by no trainer field"
"""The reason the diff engine gives an `unused` entry; the report replaces it with one of the two
below, which say whether the sampler always produces the field."""
UNUSED_REQUIRED_REASON = ("required in the sampler's schema, so always produced; read by no "
                          "trainer field")
UNUSED_OPTIONAL_REASON = ("optional in the sampler's schema, so produced only when the sampler "
                          "records it; read by no trainer field")
TIERS: tuple[str, ...] = ("same", "renamed", "needs_conversion", "missing", "optional_missing",
                          "unused")
"""The tiers in report order. `optional_missing`: an optional trainer field with no source,
reported but not breaking (the trainer runs without it)."""
REPORT_VERSION = 1
DEFAULT_GAMMA = 0.99
DEFAULT_LAM = 0.95
FORMATS: tuple[str, ...] = ("text", "json", "markdown")
"""What `DiffReport.render` writes."""

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
    sampler_required: bool | None = None
    """For an `unused` entry: whether the sampler's schema requires the field (always produced)
    or makes it optional (produced only when recorded); None for every other entry."""

    def to_dict(self) -> dict[str, Any]:
        extra = {} if self.sampler_required is None else {
            "sampler_required": self.sampler_required}
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
            **extra,
        }

    @classmethod
    def pair(cls, tier: str, t: Field, s: Field, *, conversion: Conversion | None = None,
             reason: str = "", sources: tuple[str, ...] | None = None) -> Entry:
        """Trainer field `t` fed by sampler field `s`: `t`'s role, both dtypes and shapes;
        `sources` when more sampler fields than `s` are read."""
        return cls(tier, t.name, (s.name,) if sources is None else sources, t.role, s.dtype,
                   t.dtype, s.shape, t.shape, conversion, reason)


@dataclass(frozen=True, slots=True)
class DiffWarning:
    """A semantic loss no tier shows: `code` (stable), the fields concerned, a message."""

    code: str
    fields: tuple[str, ...]
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "fields": list(self.fields), "message": self.message}


class DiffReport(Report):
    """The result of `diff`: one entry per trainer field (and per unused sampler field), sorted
    into tiers, the warnings, the trainer's layout, and the discount and λ of the written map."""

    def __init__(self, sampler: FieldTable, trainer: FieldTable, layout: Layout,
                 entries: list[Entry], warnings: list[DiffWarning] | None = None,
                 gamma: float = DEFAULT_GAMMA, lam: float = DEFAULT_LAM) -> None:
        self.sampler = sampler
        self.trainer = trainer
        self.layout = layout
        self.entries = [_unused(e, sampler) if e.tier == "unused" else e for e in entries]
        self._warnings = warnings if warnings is not None else []
        self.gamma = gamma
        self.lam = lam
        self.strict = False
        """Checked for `--strict`: `to_dict`'s `exit_code` then fails on a conversion too."""
        self._shortener = name_shortener(
            [*sampler.names(), *trainer.names(), sampler.name, trainer.name, sampler.title,
             trainer.title])

    def shorten_names(self, text: str) -> str:
        """`text` with the long field names and titles of both schemas shortened."""
        return self._shortener(text)

    def __repr__(self) -> str:
        return f"DiffReport({self.sampler.name!r} -> {self.trainer.name!r}: {self.summary_line()})"

    @property
    def ok(self) -> bool:
        """True when every trainer field has a source (as is, renamed or by a conversion)."""
        return not any(e.tier == "missing" for e in self.entries)

    @property
    def warnings(self) -> list[DiffWarning]:
        """Semantic losses no tier shows (`code`, fields, message), in the order found."""
        return self._warnings

    def tier(self, name: str) -> list[Entry]:
        """The entries of one tier, in report order."""
        return [e for e in self.entries if e.tier == name]

    def entry(self, trainer_field: str) -> Entry:
        """The entry of one trainer field (KeyError when the trainer has no such field)."""
        for e in self.entries:
            if e.trainer_field == trainer_field:
                return e
        raise KeyError(trainer_field)

    def counts(self) -> dict[str, int]:
        """How many entries each tier holds (every tier present, zero included)."""
        counts = dict.fromkeys(TIERS, 0)
        for e in self.entries:
            counts[e.tier] += 1
        return counts

    def unused_required(self) -> int:
        """How many unused sampler fields the sampler's schema requires (always produced); the
        other unused ones are optional (produced only when the sampler records them)."""
        return sum(1 for e in self.entries if e.tier == "unused" and e.sampler_required)

    def exit_code(self, strict: bool = False) -> int:
        """0 nothing missing; 1 something missing. With `strict`, any conversion also fails
        (what `gyre-contract diff --strict` has always meant); warnings never change the code."""
        counts = self.counts()
        if counts["missing"] or (strict and counts["needs_conversion"]):
            return 1
        return 0

    def summary_line(self) -> str:
        """One line: the count of each tier and of the warnings, then the verdict."""
        c = self.counts()
        parts = [f"{c['same']} same", f"{c['renamed']} renamed",
                 f"{c['needs_conversion']} need conversion", f"{c['missing']} missing",
                 *([f"{c['optional_missing']} optional without source"]
                   if c["optional_missing"] else []),
                 f"{c['unused']} unused" + (f" ({self.unused_required()} required, "
                                            f"{c['unused'] - self.unused_required()} optional)"
                                            if c["unused"] else ""),
                 _plural(len(self.warnings), "warning")]
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
                        "strict": self.strict, "exit_code": self.exit_code(strict=self.strict),
                        "text": self.summary_line()},
        }

    def to_text(self, color: bool = False) -> str:
        """An aligned table grouped by tier, the warnings, and a one-line summary."""
        return render_text(self, color=color)

    def render(self, format: str = "text", color: bool = False) -> str:
        """The report as `text` (ANSI colours with `color`), `json` or `markdown` (a table for a
        pull-request comment)."""
        if format == "markdown":
            return self.guarded(render_markdown(self))
        if format == "text":
            return self.guarded(self.to_text(color=color))
        if format == "json":
            return super().render("json")
        raise ValueError(f"unknown report format {format!r}: expected one of {', '.join(FORMATS)}")

    def field_map(self) -> dict[str, Any]:
        """The field map (docs/contract.md §7) that realises this report, for `FieldMap.from_dict`.

        A conversion of several steps is one entry: its op, then a `then` chain of one-input
        steps (e.g. `any` then `unsqueeze`). Fields that no map entry can express (a next
        observation or next value shifted from the following step, a reshape the engine cannot
        spell out) are left out and named in the `comment`; a person adds them by hand (see the
        `map_incomplete` warning). A flat trainer layout also gets `mask`, which the
        `flat_layout` warning tells the user to select real steps with. A token trainer's map
        reads token rows, one per generation. The map records the rows, the trainer's batch dims
        and layout this diff decided (`map_keys`).
        """
        fields: dict[str, Any] = {}
        left_out: list[str] = []
        for e in self.entries:
            if e.trainer_field is None or e.tier in ("missing", "optional_missing"):
                continue
            entry = e.conversion.entry if e.conversion else {"from": e.sampler_fields[0]}
            if entry is None:
                left_out.append(e.trainer_field)
                continue
            fields[e.trainer_field] = entry
        if self.layout.kind == "flat" and "mask" not in fields and "mask" not in self.trainer:
            fields["mask"] = {"op": "mask", "comment": "not a trainer field: the trainer reads "
                              "a flat batch, select its steps with batch[key][batch['mask']]"}
        key = padding_mask_key(self.trainer, self.layout)
        if key is not None and key not in fields:
            fields[key] = {"op": "mask", "comment": "not a trainer field: the padding of the "
                           "[B, T] batch, which the trainer must leave out of its loss"}
            if self.layout.kind == "time_major":
                fields[key]["then"] = [{"op": "transpose", "axes": [1, 0]}]
        doc: dict[str, Any] = {"gyre_field_map": 1, **map_keys(self.layout)}
        comment = f"written by gyre-contract diff {self.sampler.name} {self.trainer.name}"
        missing = [e.trainer_field for e in self.tier("missing") if e.trainer_field]
        if missing:
            comment += f"; missing (no source): {', '.join(missing)}"
        if left_out:
            comment += f"; write by hand: {', '.join(left_out)}"
        doc["comment"] = comment
        doc["fields"] = fields
        return doc


def padding_mask_key(trainer: FieldTable, layout: Layout) -> str | None:
    """The key the written map adds for a padded layout whose trainer schema has no mask.

    None when the layout is not padded (per step, flat) or the trainer reads a mask of its own.
    TorchRL-style schemas (nested `next.*` entries of a TensorDict) get `collector.mask`, the
    entry TorchRL's losses find on their own (`LossModule.loss_mask_key = "auto"`); others get
    `mask`.
    """
    if layout.kind not in ("batch", "time_major"):
        return None
    if any(f.role == "mask" for f in trainer):
        return None
    if any(f.name.startswith("next.") for f in trainer):
        return "collector.mask"
    return "mask"


def _unused(entry: Entry, sampler: FieldTable) -> Entry:
    """An unused entry that says whether the sampler always produces its field."""
    name = entry.sampler_fields[0] if entry.sampler_fields else None
    if name is None or name not in sampler:
        return entry
    required = sampler[name].required
    reason = entry.reason
    if reason.startswith(UNUSED_REASON) or reason in (UNUSED_REQUIRED_REASON,
                                                     UNUSED_OPTIONAL_REASON):
        generic = UNUSED_REASON if reason.startswith(UNUSED_REASON) else reason
        reason = (UNUSED_REQUIRED_REASON if required else UNUSED_OPTIONAL_REASON) + \
            reason[len(generic):]
    return replace(entry, sampler_required=required, reason=reason)


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
# Rendering

_TIER_TITLES = {"same": "SAME", "renamed": "RENAMED", "needs_conversion": "NEEDS CONVERSION",
                "missing": "MISSING", "optional_missing": "OPTIONAL, NO SOURCE",
                "unused": "UNUSED"}
_TIER_HELP = {
    "same": "same name, dtype and shape",
    "renamed": "another name, same role, dtype and shape",
    "needs_conversion": "a source exists but needs a cast, reshape, transpose or converter",
    "missing": "no source and no converter: the contract is broken",
    "optional_missing": "optional trainer fields with no source: reported, not breaking",
    "unused": "produced by the sampler, read by nobody",
}
_UNUSED_GROUPS = (
    (True, "UNUSED, REQUIRED", "always produced by the sampler (required in its schema), read by "
     "nobody", "always produced by the sampler (required in its schema)"),
    (False, "UNUSED, OPTIONAL", "produced only when the sampler records them (optional in its "
     "schema), read by nobody", "produced only when the sampler records it (optional in its "
     "schema)"),
)
"""The unused tier in two groups: (sampler_required, title, help, markdown why)."""
_COLORS = {"same": "32", "renamed": "36", "needs_conversion": "33", "missing": "31;1",
           "optional_missing": "35", "unused": "2", "warning": "33"}
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
    for generic in (SAME_REASON, UNUSED_REASON, UNUSED_REQUIRED_REASON, UNUSED_OPTIONAL_REASON):
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
    return printable(f"  {label}: {shorten(table.name)} ({', '.join(facts)})")


def render_text(report: DiffReport, color: bool = False) -> str:
    """The report as an aligned table grouped by tier (ANSI colours with `color`)."""
    rows = [(e, tuple(printable(report.shorten_names(c)) for c in _cells(e)))
            for e in report.entries]
    widths = [max([len(h)] + [len(c[i]) for _, c in rows]) for i, h in enumerate(_HEADER[:4])]
    lines = ["gyre-contract diff",
             _side_line("sampler", report.sampler, None),
             _side_line("trainer", report.trainer, report.layout), ""]
    header = "  " + "  ".join(h.ljust(w) for h, w in zip(_HEADER, widths)) + "  " + _HEADER[4]
    lines.append(_paint(header.rstrip(), "1", color))
    lines.append("  (a -> b: the sampler's, then the trainer's; ? is any size; *name is any "
                 "number of dims)")
    for tier, title_text, help_text, group in _groups(rows):
        title = f"{title_text} ({len(group)}): {help_text}"
        lines.append(_paint(title, _COLORS[tier], color))
        for cells in group:
            line = "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  " + cells[4]
            lines.append(line.rstrip())
    if report.warnings:
        lines.append("")
        lines.append(_paint(f"WARNINGS ({len(report.warnings)})", _COLORS["warning"], color))
        for w in report.warnings:
            lines.append(printable(f"  ! {w.code}: {w.message}"))
    lines.append("")
    summary = report.summary_line()
    code = "31;1" if report.counts()["missing"] else "32"
    lines.append(_paint(printable(f"summary: {summary}"), code, color))
    return "\n".join(lines) + "\n"


def _groups(rows: list[tuple[Entry, Any]]) -> list[tuple[str, str, str, list[Any]]]:
    """The text report's groups, in report order: (tier, title, help, rows). The unused tier
    splits into the fields the sampler always produces and those it may not record."""
    out = []
    for tier in TIERS:
        if tier == "unused":
            for required, title, help_text, _ in _UNUSED_GROUPS:
                group = [c for e, c in rows if e.tier == tier and _required(e) is required]
                if group:
                    out.append((tier, title, help_text, group))
            continue
        group = [c for e, c in rows if e.tier == tier]
        if group:
            out.append((tier, _TIER_TITLES[tier], _TIER_HELP[tier], group))
    return out


def _required(e: Entry) -> bool:
    """An unused entry whose field the sampler always produces (unknown counts as required)."""
    return e.sampler_required is not False


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: DiffReport) -> str:
    """The report as a Markdown table, for a pull-request comment."""
    lines = [f"### gyre-contract diff: `{report.sampler.name}` → `{report.trainer.name}`", "",
             f"**{report.summary_line()}**", ""]
    if report.layout.batch_dims:
        lines += [f"Trainer layout: {report.layout.text}.", ""]
    lines += ["| tier | trainer field | from sampler | dtype | shape | why |",
              "|---|---|---|---|---|---|"]
    for tier, _, _, group in _groups([(e, e) for e in report.entries]):
        for e in group:
            trainer, source, dtype, shape, why = _cells(e)
            label = tier
            if tier == "unused":
                required = _required(e)
                label = f"unused ({'required' if required else 'optional'})"
                why = why or next(w for r, _, _, w in _UNUSED_GROUPS if r is required)
            lines.append(f"| {label} | `{_md(trainer)}` | `{_md(source)}` | {_md(dtype)} | "
                         f"{_md(shape)} | {_md(why)} |")
    if report.warnings:
        lines += ["", f"**Warnings ({len(report.warnings)})**", ""]
        lines += [f"- `{w.code}`: {_md(w.message)}" for w in report.warnings]
    return "\n".join(lines) + "\n"
