"""The diff's warnings: semantic losses no tier shows (docs/contract.md §6), each with a stable
`code` (`narrowing_cast`, `int_to_float`, `optional_source`, `truncation_collapsed`,
`recomputed_logprob`, `no_bootstrap_value`, `map_incomplete`, `flat_layout`, `no_batch_dims`,
`ambiguous_match`, `summed_elements`, `padding_unmasked`, `normalize_over_padding`, `open_shape`,
`logprob_unused`; token
rows add `group_split`, `staleness_unchecked` and `untokenised_sampler`, in `tokenlayout`).
"""

from __future__ import annotations

from collections.abc import Callable

from gyre_contract.schema._diffreport import DiffWarning, Entry, padding_mask_key
from gyre_contract.schema._dtyperules import MANTISSA, DtypeFit, dtype_kind, dtypes_of, lossless
from gyre_contract.schema._fieldtable import Dim, Field, FieldTable, shape_text
from gyre_contract.schema._layouts import Layout
from gyre_contract.schema._roles import is_recomputed_logprob


class DiffWarnings:
    """Collects the warnings of one diff in the order found; `finish` adds the report-wide ones."""

    def __init__(self, layout: Layout, t_tab: FieldTable,
                 have: Callable[[str], Field | None], same_kind: bool = False) -> None:
        self.layout = layout
        self.same_kind = same_kind
        """Sampler and trainer are the same kind of document: optional maps to optional."""
        self.t_tab = t_tab
        self.have = have
        self.items: list[DiffWarning] = []
        self.optional: list[tuple[str, str]] = []
        """(trainer field, sampler source) pairs the written map reads from an optional one."""
        self.open: list[tuple[str, str, str, str]] = []
        """(trainer field, sampler field, their per-step shapes) taken as is from a sampler
        shape of any rank into a trainer shape with a fixed size."""

    def ambiguous_role(self, t: Field) -> None:
        """A trainer field whose name means different roles in different libraries."""
        roles = " or ".join(r for r, _ in t.role_candidates)
        self.items.append(DiffWarning(
            "ambiguous_match", (t.name,),
            f"{t.name}: the name means {roles} in different libraries; read as {t.role}. "
            f"Declare \"x-gyre-role\" in the trainer schema or use --rename to decide"))

    def cast(self, t: Field, s: Field, fit: DtypeFit) -> None:
        """A narrowing cast, or integers cast to a float that cannot hold them all."""
        if fit.narrowing:
            self._narrowing(t, s, *fit.narrowing)
        to = fit.cast_to
        if to is None or dtype_kind(to) != "float" or to not in MANTISSA:
            return
        ints = [d for d in dtypes_of(s.dtype) if dtype_kind(d) == "int" and lossless(d, to) is False]
        if ints:
            self.items.append(DiffWarning(
                "int_to_float", (t.name, s.name),
                f"{t.name} <- {s.name}: lossy cast {ints[0]} -> {to}: integers beyond "
                f"2**{MANTISSA[to]} do not fit (the map refuses them), and integer codes such "
                f"as token ids or categories are labels, not quantities: embed them in the "
                f"trainer rather than reading them as floats"))

    def _narrowing(self, t: Field, s: Field, frm: str, to: str) -> None:
        self.items.append(DiffWarning(
            "narrowing_cast", (t.name, s.name),
            f"{t.name} <- {s.name}: narrowing cast {frm} -> {to} may lose precision or "
            f"overflow (the map refuses values that do not fit)"))

    def optional_source(self, t: Field, s: Field) -> None:
        """Note a trainer field the map reads from an optional sampler field (one warning at
        the end): the map fails on rollouts without it. Between two documents of one kind an
        optional field read by an optional one is no surprise and is not noted."""
        if not s.required and (t.required or not self.same_kind) and \
                (t.name, s.name) not in self.optional:
            self.optional.append((t.name, s.name))

    def open_shape(self, t: Field, s: Field, s_step: tuple[Dim, ...] | None,
                   t_step: tuple[Dim, ...] | None) -> None:
        """Note a field taken as is from a sampler shape of any rank (`[*act]`) into a trainer
        shape with a fixed size (SB3's `[M, 1]` actions): rollouts of another rank, which the
        sampler's schema allows, do not fit the trainer's batch."""
        if not s_step or not all(isinstance(d, str) and d.startswith("*") for d in s_step):
            return
        if not t_step or not any(isinstance(d, int) for d in t_step):
            return
        self.open.append((t.name, s.name, shape_text(s_step), shape_text(t_step)))

    def _unknown_batch_dims(self, entries: list[Entry]) -> None:
        """A foreign trainer schema that names no batch dims: say why shapes may not line up."""
        if self.layout.kind != "step" or self.t_tab.kind == "rollout_step":
            return
        mismatched = [e.trainer_field for e in entries
                      if e.tier == "missing" and e.sampler_fields and e.trainer_field]
        if mismatched:
            self.items.append(DiffWarning(
                "no_batch_dims", tuple(mismatched),
                f"the trainer's schema names no batch dims (x-gyre-batch-dims), so its shapes "
                f"were compared per step and {', '.join(mismatched)} did not fit; if its arrays "
                f"lead with batch dims, say which: --batch-dims B,T (or T,B for time-major, M "
                f"for a flat batch)"))

    def _padding(self, entries: list[Entry]) -> None:
        """A padded [B, T] layout whose trainer schema reads no mask: padding would be data."""
        key = padding_mask_key(self.t_tab, self.layout)
        if key is None:
            return
        read = [e.trainer_field for e in entries if e.trainer_field and e.tier in
                ("same", "renamed", "needs_conversion")]
        where = ("TorchRL's losses apply it on their own to their loss_* terms (loss_mask_key "
                 "\"auto\")" if key == "collector.mask" else "mask the loss with it")
        self.items.append(DiffWarning(
            "padding_unmasked", tuple(read),
            f"the trainer reads a padded batch {shape_text(self.layout.batch_dims)} and its "
            f"schema has no mask: episodes of different lengths leave padding in every field "
            f"it reads, which would be trained on as data. The written map adds {key} (True on "
            f"real steps): {where}"))

    def _normalize_over_padding(self) -> None:
        """A TorchRL-style trainer (nested `next.*` entries) reading advantages on a padded
        batch: `normalize_advantage=True` standardises them over the padding too."""
        if self.layout.kind not in ("batch", "time_major") or \
                not any(f.name.startswith("next.") for f in self.t_tab):
            return
        advantages = [f.name for f in self.t_tab if f.role == "advantage"]
        if not advantages:
            return
        self.items.append(DiffWarning(
            "normalize_over_padding", tuple(advantages),
            f"{', '.join(advantages)}: TorchRL's PPO losses with normalize_advantage=True "
            f"standardise the advantage over every entry of the padded batch "
            f"{shape_text(self.layout.batch_dims)}, padding included: that step reads only "
            f"\"shifted_valid\", and (\"collector\", \"mask\") masks only the loss_* terms "
            f"(entropy, kl_approx and clip_fraction are averaged over padding too). Pass "
            f"the real steps, loss(td[td[\"collector\", \"mask\"]]), or keep "
            f"normalize_advantage=False"))

    def finish(self, entries: list[Entry]) -> None:
        """The warnings about the whole report, added after every field is matched."""
        if self.optional:
            pairs = ", ".join(t if t == s else f"{t} <- {s}" for t, s in self.optional)
            inputs = list(dict.fromkeys(s for _, s in self.optional))
            one = len(inputs) == 1
            self.items.append(DiffWarning(
                "optional_source", tuple(dict.fromkeys(t for t, _ in self.optional)),
                f"the written map reads {pairs}, but the sampler's schema marks "
                f"{', '.join(inputs)} optional: rollouts without {'it' if one else 'them'} "
                f"fail to map (nothing is filled in)"))
        if self.open:
            pairs = ", ".join(f"{t} <- {s} ({a} -> {b} per step)" for t, s, a, b in self.open)
            self.items.append(DiffWarning(
                "open_shape", tuple(dict.fromkeys(t for t, *_ in self.open)),
                f"the written map takes {pairs} as is, but the sampler's schema allows any "
                f"shape there: rollouts of another rank (a scalar action for [1]) fail the "
                f"trainer's batch; pin the shape in the sampler's schema (or use a pinned "
                f"model such as CartPoleStep) and the diff writes the reshape"))
        self._unknown_batch_dims(entries)
        self._padding(entries)
        self._normalize_over_padding()
        if self.layout.kind == "flat":
            self.items.append(DiffWarning(
                "flat_layout", (),
                f"the trainer reads a flat batch {shape_text(self.layout.batch_dims)}: the map "
                f"writes [B, T, ...] columns; batch --trainer (half_way/full_loop trainer=) "
                f"keeps the real steps only, else select them with batch[key][batch['mask']]"
                + (" in time-major order (transpose first)" if "time-major" in
                   self.layout.text else "")
                + " (never reshape: padding would become data)"))
        t_roles = {f.role for f in self.t_tab}
        s_trunc = self.have("truncated")
        dones = [f.name for f in self.t_tab if f.role in ("done", "episode_start")]
        if dones and not t_roles & {"terminated", "truncated"} and s_trunc is not None:
            self.items.append(DiffWarning(
                "truncation_collapsed", (*dones, s_trunc.name),
                f"the trainer reads only {', '.join(dones)}, not terminated/truncated, while "
                f"the sampler records {s_trunc.name}: time-limit cuts will be trained as "
                f"terminal (no bootstrap from next_value)"))
        s_logprob = self.have("logprob")
        if s_logprob is not None and not any(f.role == "logprob" for f in self.t_tab):
            self.items.append(DiffWarning(
                "logprob_unused", (s_logprob.name,),
                f"the trainer reads no log-prob: it recomputes them with its current weights, "
                f"so the sampler's {s_logprob.name} (the behaviour policy's, under "
                f"policy_version) is unused, and with it the importance-sampling correction "
                f"between the policy that sampled and the one that trains (stale rows, "
                f"inference-engine numerics). A trainer that corrects for it reads the "
                f"sampler's log-probs: verl rollout_log_probs, TRL sampling_per_token_logps, "
                f"OpenRLHF rollout_log_probs"))
        for f in self.t_tab:
            if f.role == "logprob" and is_recomputed_logprob(f.name, f.description):
                behaviour = f"the sampler's {s_logprob.name}" if s_logprob else \
                    "the behaviour log-prob"
                self.items.append(DiffWarning(
                    "recomputed_logprob", (f.name,),
                    f"{f.name} is usually recomputed by the trainer with its current weights "
                    f"(verl, OpenRLHF, TRL, Tianshou), not {behaviour} under policy_version: "
                    f"the sampler/trainer mismatch goes uncorrected unless the trainer also "
                    f"reads the behaviour log-prob"))
        for e in entries:
            if e.tier != "needs_conversion" or e.conversion is None:
                continue
            if "gae" in e.conversion.ops or "discounted_return" in e.conversion.ops:
                if self.have("next_value") is None and s_trunc is not None:
                    self.items.append(DiffWarning(
                        "no_bootstrap_value", (e.trainer_field or "",),
                        f"{e.trainer_field}: the sampler records no next_value, so a truncated "
                        f"episode cannot be bootstrapped; the map fails on one unless its "
                        f"entry says \"truncation\": \"terminal\" (time-limit cuts then count "
                        f"as terminal)"))
        manual = [e for e in entries if e.conversion is not None and e.conversion.entry is None]
        if manual:
            names = ", ".join(e.trainer_field or "" for e in manual)
            self.items.append(DiffWarning(
                "map_incomplete", tuple(e.trainer_field or "" for e in manual),
                f"the written map leaves out {names}, which no map entry can express; write "
                f"by hand: "
                + "; ".join(f"{e.trainer_field}: {e.conversion.manual}" for e in manual
                            if e.conversion)))
