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

This module is the engine; the report and its renderings are in `diffreport`, the dtype and
shape rules in `dtyperules` and `shaperules`, the converters in `converters` and the warnings in
`diffwarnings`. (It is not named `diff`, which would shadow the function on the package.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gyre_contract.core._errors import SchemaError
from gyre_contract.schema._converters import Converters, derived_output, followed_observation, next_conversion
from gyre_contract.schema._diffreport import (
    DEFAULT_GAMMA,
    DEFAULT_LAM,
    SAME_REASON,
    UNUSED_REASON,
    Conversion,
    DiffReport,
    DiffWarning,
    Entry,
)
from gyre_contract.schema._diffwarnings import DiffWarnings
from gyre_contract.schema._dtyperules import DtypeFit, compare_dtype, dtypes_of
from gyre_contract.schema._fieldtable import (
    Dim,
    Field,
    FieldTable,
    SchemaInput,
    as_table,
    dtype_text,
    shape_text,
)
from gyre_contract.schema._layouts import Layout, layout_of, parse_batch_dims
from gyre_contract.schema._roles import BEHAVIOUR_LOGPROB_NAMES, SUMMABLE_ROLES
from gyre_contract.schema._shaperules import (
    ShapeFit,
    compare_shape,
    is_variadic,
    static_rank,
    strip_batch_dims,
)
from gyre_contract.schema._tokenlayout import TokenRows
from gyre_contract.schema._tokentrainer import token_action, token_rows, untokenised

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


def _then(steps: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The `then` key of a map entry for the one-input steps after its op (none: no key)."""
    return {"then": [{"op": op, **args} for op, args in steps]} if steps else {}


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
    """One diff: matches every trainer field, then lists the sampler fields nobody reads."""

    def __init__(self, s_tab: FieldTable, t_tab: FieldTable, renames: dict[str, str],
                 gamma: float, lam: float) -> None:
        self.renames = renames
        self.gamma, self.lam = gamma, lam
        tokens = token_rows(s_tab, t_tab)  # one row per generation: token columns, rows=step
        if tokens is not None:
            t_tab = tokens[0]
        self.s_tab, self.t_tab = s_tab, t_tab
        self.layout = tokens[1] if tokens is not None else layout_of(t_tab.batch_dims)
        self.s_batch = tuple(s_tab.batch_dims or ())
        self.by_role: dict[str, list[Field]] = {}
        self.by_token: dict[tuple[str, str], list[Field]] = {}
        for f in s_tab:
            self.by_role.setdefault(f.role, []).append(f)
            for token in _tokens(f.name):
                self.by_token.setdefault((f.role, token), []).append(f)
        self.used: set[str] = set()
        self.prefix_roles: dict[str, set[str]] | None = None  # dotted prefix -> roles under it
        self.converters = Converters(s_tab, t_tab, self.by_role, gamma, lam)
        same_kind = (s_tab.kind is not None and s_tab.kind == t_tab.kind) or \
            (bool(s_tab.title) and s_tab.title == t_tab.title)
        self.notes = DiffWarnings(self.layout, t_tab, self.converters.have, same_kind)
        self.warnings = self.notes.items  # the one list every warning goes to, in order found
        self.tokens = None if tokens is None or token_action(s_tab) is None else TokenRows(
            s_tab, t_tab, self.by_role, self.notes.optional_source, self.notes.cast, self.used,
            self.warnings)
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
        """Match every trainer field, list the unused sampler fields, add the warnings."""
        entries = [_optional(self._token_match(t) if self.tokens else self.match(t), t)
                   for t in self.t_tab]
        for s in self.s_tab:
            if s.name not in self.used:
                entries.append(Entry("unused", None, (s.name,), s.role, s.dtype, None,
                                     self._s_shape(s), None, None,
                                     UNUSED_REASON))
        self.notes.finish(entries)
        if self.tokens is not None:
            self.tokens.finish(entries)
        elif self.layout.kind != "token" and \
                (untok := untokenised(self.s_tab, self.t_tab)) is not None:
            self.warnings.append(untok)
        return DiffReport(self.s_tab, self.t_tab, self.layout, entries, self.warnings,
                          self.gamma, self.lam)

    # -- matching ----------------------------------------------------------------------------

    def _token_match(self, t: Field) -> Entry:
        """The entry of `t` read from token rows (a `--rename` names its sampler field)."""
        assert self.tokens is not None
        renamed = self.renames.get(t.name)
        return self.tokens.match(t, self.s_tab[renamed] if renamed else None)

    def _s_shape(self, s: Field) -> tuple[Dim, ...] | None:
        return strip_batch_dims(s.shape, self.s_batch)[0]

    def match(self, t: Field) -> Entry:
        """The entry of trainer field `t`, from the first that applies: a rename override, a
        same-named field, an object of modalities, the best field of its role, a converter."""
        t_step, stripped = strip_batch_dims(t.shape, tuple(self.t_tab.batch_dims or ()))
        if t.role_candidates and len(t.role_candidates) > 1 and not t.declared_role:
            self.notes.ambiguous_role(t)
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
        if (source is not None and not source.required and t.role in _COMPUTED_ROLES
                and not (self.notes.same_kind and source is same)):
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
            fit_s = compare_shape(self._s_shape(s), t_step, s.varying,
                                  unknown_as_one=t.role == "action")
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
        fit_s = compare_shape(s_step, t_step, s.varying, unknown_as_one=t.role == "action")
        if fit_d.ok and not fit_s.ok and self._summable(t, s, s_step, t_step, stripped):
            return self._summed(t, s, s_step, fit_d, stripped, note)
        if not fit_d.ok or not fit_s.ok:
            why = fit_d.why if not fit_d.ok else fit_s.why
            return Entry.pair("missing", t, s, reason=f"{s.name} has the role {s.role} but "
                              f"{why}; no known conversion")
        self.used.add(s.name)
        self.notes.cast(t, s, fit_d)
        self.notes.optional_source(t, s)
        conversion = self._conversion(t, s.name, fit_d, fit_s, t_step, stripped,
                                      s_step=s_step)
        notes = [n for n in (note, _row_note(t, stripped, self.layout)) if n]
        if obs := followed_observation(t, s, self.s_tab, self.layout, self._s_shape):
            self.used.add(obs.name)  # recorded on an episode's last step only: `next`
            conversion, why = next_conversion(obs, s, conversion)
            return Entry.pair("needs_conversion", t, s, conversion=conversion,
                              reason="; ".join([why, *notes]), sources=(obs.name, s.name))
        self.notes.open_shape(t, s, s_step if fit_s.op is None else None, t_step)
        rename = s.name != t.name
        if conversion is None:
            tier = "renamed" if rename else "same"
            reason = f"same role ({t.role}), dtype and shape" if rename else SAME_REASON
            return Entry.pair(tier, t, s, reason="; ".join([reason, *notes]))
        return Entry.pair("needs_conversion", t, s, conversion=conversion,
                          reason="; ".join([conversion.text, *notes]))

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
            self.notes.optional.append((t.name, prefix))
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
        dtypes = tuple(dict.fromkeys(d for f in members for d in dtypes_of(f.dtype)))
        note = _row_note(t, stripped, self.layout)
        return Entry(tier, t.name, (prefix,), t.role, dtypes or None, t.dtype, None, t.shape,
                     conversion, "; ".join(filter(None, [reason, note])))

    def _summable(self, t: Field, s: Field, s_step: tuple[Dim, ...] | None,
                  t_step: tuple[Dim, ...] | None, stripped: int) -> bool:
        """Whether per-element values of `s` (every per-step dim a declared varying dim) add up
        to the one value per step that `t` holds (a summable role: a sequence's log-prob)."""
        return (t.role in SUMMABLE_ROLES and s.role == t.role and t_step == ()
                and stripped == len(self.layout.batch_dims) and bool(s_step)
                and all(isinstance(d, str) and not is_variadic(d) and d in s.varying
                        for d in s_step or ()))

    def _summed(self, t: Field, s: Field, s_step: tuple[Dim, ...] | None, fit_d: DtypeFit,
                stripped: int, note: str) -> Entry:
        """`masked_sum` over the varying dims of `s`: one value per step, padding left out."""
        self.used.add(s.name)
        self.notes.cast(t, s, fit_d)
        self.notes.optional_source(t, s)
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
            f"{{\"from\": \"{s.name}\"}} to the map)" + "".join(
                f"; the sampler's {f.name} is not applied: tokens it marks False (spliced tool "
                f"output) count in the sum, which a token trainer (\"rows\": \"step\") keeps "
                f"out" for f in self.by_role.get("loss_mask", ())[:1])))
        notes = [n for n in (note, _row_note(t, stripped, self.layout)) if n]
        return Entry("needs_conversion", t.name, (s.name,), t.role, s.dtype, t.dtype, s.shape,
                     t.shape, conversion, "; ".join([reason, *notes]))

    def _conversion(self, t: Field, source: str, fit_d: DtypeFit, fit_s: ShapeFit,
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
        return self.layout.kind not in ("step", "token") and \
            stripped == len(self.layout.batch_dims)

    def _layout_op(self, per_step: tuple[Dim, ...] | None, stripped: int
                   ) -> tuple[str, dict[str, Any] | None, str] | None:
        """The op turning a collated [B, T, ...] column into the trainer's layout."""
        kind = self.layout.kind
        if kind in ("step", "batch", "token") or stripped < len(self.layout.batch_dims):
            return None
        rank = static_rank(per_step)
        if kind == "time_major":
            if rank is None:
                return ("transpose", None, "transpose to [T, B, ...] (per-step rank unknown: "
                        "pin the sampler's shape or write the axes by hand)")
            return ("transpose", {"axes": [1, 0, *range(2, 2 + rank)]},
                    "transpose to [T, B, ...]")
        return None  # flat: one layout step for the whole batch (see the flat_layout warning)

    # -- converters ----------------------------------------------------------------------------

    def _derive(self, t: Field, t_step: tuple[Dim, ...] | None, stripped: int) -> Entry:
        found = self.converters.derive(t)
        if found is not None:
            sources, op_entry, text, reason, manual = found
            return self._derived(t, sources, op_entry, text, reason, manual, t_step, stripped)
        return Entry("missing", t.name, (), t.role, None, t.dtype, None, t.shape, None,
                     self.converters.missing(t))

    def _derived(self, t: Field, sources: list[str], op_entry: dict[str, Any] | None,
                 text: str, reason: str, manual: str, t_step: tuple[Dim, ...] | None,
                 stripped: int) -> Entry:
        self.used.update(s for s in sources if s in self.s_tab)
        for name in sources:  # a map the diff writes must run on any data the schema allows
            if name in self.s_tab:
                self.notes.optional_source(t, self.s_tab[name])
        if op_entry is not None and op_entry.get("op") in ("gae", "discounted_return"):
            self.used.update(f.name for f in self.by_role.get("next_value", ()))
        out_dtype, out_shape = derived_output(t.role)
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


def _optional(entry: Entry, t: Field) -> Entry:
    """A missing trainer field its schema marks optional is reported, not breaking."""
    if entry.tier != "missing" or t.required:
        return entry
    return replace(entry, tier="optional_missing",
                   reason=f"{entry.reason}; optional in the trainer's schema: the trainer runs "
                   f"without it")


def _roles_agree(s: Field, t: Field) -> bool:
    if s.role == t.role or "other" in (s.role, t.role):
        return True
    # Only declared roles can veto a same-name match (`dones` declared episode_start vs done).
    return not (s.declared_role and t.declared_role) and not (
        {s.role, t.role} & {"ref_logprob", "episode_start", "group_id", "loss_mask"})


def _name_likeness(a: str, b: str) -> float:
    ta, tb = _tokens(a), _tokens(b)
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / len(ta | tb)


def _tokens(name: str) -> set[str]:
    return {w.rstrip("s") for w in re.split(r"[._\-\s]+", name.lower()) if w}


def _row_note(t: Field, stripped: int, layout: Layout) -> str:
    if not layout.batch_dims or stripped >= len(layout.batch_dims) or t.shape is None:
        return ""
    if stripped == 0:
        return "one value per batch"
    return "one value per row"


def _op_word(text: str) -> str:
    return text.split("(", 1)[0]


