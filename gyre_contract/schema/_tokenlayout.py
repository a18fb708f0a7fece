"""Token trainers' fields in the diff: each trainer field of a token trainer (`tokentrainer`)
matched to the token columns `collate_tokens` builds (`prompt_ids`, `prompt_mask`,
`response_ids`, `response_mask`, `response_length`, `logprob`, `ref_logprob`, `token_reward`,
`reward`, `group_id`, ...), written as a field map of token rows with the ops `concat`,
`per_token`, `group_norm`, `kl_reward` and `kl` (docs/llm.md §4).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gyre_contract.schema._diffreport import Conversion, DiffWarning, Entry
from gyre_contract.schema._dtyperules import compare_dtype
from gyre_contract.schema._fieldtable import Field, FieldTable, shape_text
from gyre_contract.schema._tokentrainer import (
    ATTENTION_NAMES,
    KL_NAMES,
    LENGTH_NAMES,
    POSITION_NAMES,
    TOKEN_COLUMNS,
    fixed_widths,
    integer_dtype,
    last_name,
    packed_trainer,
    per_token_field,
    profile_of,
    span_of,
    token_action,
    token_budget,
    token_prompt,
    token_rank,
)


@dataclass
class TokenRows:
    """Matches trainer fields to token columns for one diff (see the module docstring)."""

    s_tab: FieldTable
    t_tab: FieldTable
    by_role: dict[str, list[Field]]
    optional_source: Callable[[Field, Field], None]
    cast_note: Callable[[Field, Field, Any], None]
    used: set[str]
    warnings: list[DiffWarning]

    def __post_init__(self) -> None:
        self.profile = profile_of(self.t_tab)
        self.action = token_action(self.s_tab)
        self.prompt = token_prompt(self.s_tab)
        self.group_ops: list[str] = []
        """Trainer fields the map computes with a group-relative op (the group_split warning)."""
        self.lead = tuple(self.t_tab.batch_dims or ("B",))
        """The trainer's one batch dim: its rows (`B`), or packed micro-batch rows (`M`)."""
        self.packed = packed_trainer(self.t_tab)
        """The trainer reads packed rows `[M, S]`: token fields are the layout's columns or
        lie over the response tokens (`_packed_token`)."""

    def have(self, role: str) -> Field | None:
        fields = self.by_role.get(role)
        return fields[0] if fields else None

    # -- one trainer field ---------------------------------------------------------------------

    def match(self, t: Field, renamed: Field | None = None) -> Entry:
        """The entry of trainer field `t` read from token rows."""
        rank = token_rank(t, self.lead)
        if rank is None:
            return self._missing(t, (), f"{t.name} {shape_text(t.shape)} does not lead with the "
                                 f"row dim {self.lead[0]} of token rows")
        if renamed is not None:
            return self._renamed(t, renamed, rank)
        if rank == 1:
            return self._packed_token(t) if self.packed else self._per_token(t)
        if rank == 0:
            return self._per_row(t)
        return self._missing(t, (), f"token rows hold [B] and [B, L] fields; {t.name} has "
                             f"{rank} dims per row")

    def _renamed(self, t: Field, s: Field, rank: int) -> Entry:
        column = self._column(s)
        if column is None or rank != int(per_token_field(s)):
            return self._missing(t, (s.name,), f"--rename {t.name}={s.name}: {s.name} "
                                 f"{shape_text(s.shape)} is not a [B{', R' if rank else ''}] "
                                 f"token column")
        return self._read(t, s, column, "renamed by --rename")

    def _per_token(self, t: Field) -> Entry:
        span = span_of(t)
        last = t.name.lower().rsplit(".", 1)[-1]
        same = self.s_tab.fields.get(t.name)
        if same is not None and per_token_field(same) and same.role in TOKEN_COLUMNS and \
                TOKEN_COLUMNS[same.role] in (t.name, same.name) and \
                not ({same.role, t.role} & {"logprob", "ref_logprob"} and same.role != t.role):
            return self._read(t, same, TOKEN_COLUMNS[same.role], "")  # same name: read it
        if span == "sequence":
            return self._sequence(t, last)
        if span == "prompt":
            if self.prompt is None:
                return self._missing(t, (), "the sampler records no prompt token ids "
                                     "(observation.token_ids)")
            if t.role == "mask" or "mask" in last:
                return self._op(t, [self.prompt], {"from": "prompt_mask"}, ("pad",),
                                "prompt_mask", "bool",
                                "True on the real prompt tokens (left-padded: padding only at "
                                "the start)")
            return self._read(t, self.prompt, "prompt_ids", "")
        return self._token_value(t, last)

    def _packed_token(self, t: Field) -> Entry:
        """A field `[M, S]` of packed rows: the layout's own columns (the token ids, positions,
        real tokens, sample of each token), else a per-response-token column `[B, R]` the
        layout puts on its tokens (log-probs, the loss mask, advantages, ...)."""
        last = last_name(t)
        own = ("position_ids" if last in POSITION_NAMES else
               "sample_index" if last in SAMPLE_NAMES else
               "pad_mask" if last in ATTENTION_NAMES | PAD_MASK_NAMES else
               "input_ids" if integer_dtype(t.dtype) and t.role not in ("mask", "loss_mask") and (
                   t.role in ("action", "observation") or span_of(t) == "sequence") else None)
        if own is None:
            return self._token_value(t, last)
        if self.prompt is None:
            return self._missing(t, (), "the sampler records no prompt token ids "
                                 "(observation.token_ids): packed rows hold prompt + response")
        out, why = PACKED_OWN[own]
        return self._op(t, [self.prompt, self.action], {"from": own}, ("pack",),
                        f"{own} of the packed rows", out, why)

    def _token_value(self, t: Field, last: str) -> Entry:
        """A per-token field over the response tokens `[B, R]` (packed rows: at their tokens'
        positions), by role."""
        if last in LENGTH_NAMES:
            return self._missing(t, (), f"{t.name} is a length: one value per row, not [B, R]")
        if last in KL_NAMES:
            return self._kl(t)
        role = t.role
        if role == "mask" or role == "loss_mask":
            return self._response_mask(t)
        if role == "advantage":
            return self._advantage(t, per_token=True)
        if role == "return":
            return self._return(t)
        if role in ("reward", "token_reward"):
            return self._token_reward(t)
        if role == "ref_logprob":
            s = self.have("ref_logprob")
            if s is None:
                return self._missing(t, (), "no sampler field holds a reference-policy "
                                     "log-prob (ref_logprob); the behaviour logprob is never "
                                     "one (compute it with the reference model)")
            return self._token_read(t, s)
        if role in TOKEN_COLUMNS:
            s = self.have(role)
            if s is None:
                return self._missing(t, (), f"no sampler field with the role {role}")
            return self._token_read(t, s)
        return self._missing(t, (), f"no token column for {t.name} (role {role}) [B, R]")

    def _per_row(self, t: Field) -> Entry:
        last = t.name.lower().rsplit(".", 1)[-1]
        if last in LENGTH_NAMES:
            return self._op(t, [self.action], {"from": "response_length"}, ("rename",),
                            "response_length", "int64",
                            "the number of real response tokens of each row")
        role = t.role
        if role == "advantage":
            return self._advantage(t, per_token=False)
        if role == "group_id":
            s = self.have("group_id")
            if s is None:
                return self._missing(t, (), _NO_GROUP)
            return self._read(t, s, "group_id", "")
        if role == "logprob" or role == "ref_logprob":
            s = self.have(role)
            if s is None or self._column(s) is None:
                return self._missing(t, (), f"no sampler field with the role {role}")
            if not per_token_field(s):
                return self._read(t, s, s.name, "")
            entry = {"from": role, "then": [{"op": "sum", "axis": 1}]}
            return self._op(t, [s], entry, ("sum",), f"sum({role}, axis=1)", "float32",
                            f"one {role} per row = the sum over its response tokens (the "
                            f"whole generation's log-prob; padding is 0)")
        same = self.s_tab.fields.get(t.name)
        if role == "other" and same is not None and same.shape == () and "." not in t.name:
            return self._read(t, same, same.name, "")  # same name, a role only one side knows
        if role in ("other", "mask", "loss_mask"):
            return self._missing(t, (), f"no per-row token column for {t.name}")
        s = self.have(role)
        if s is None:
            return self._missing(t, (), f"no sampler field with the role {role}")
        if s.shape and any(d in s.varying for d in s.shape):
            return self._missing(t, (s.name,), f"{s.name} {shape_text(s.shape)} holds one "
                                 f"value per token; {t.name} reads one per row")
        return self._read(t, s, s.name, "")

    # -- token fields ----------------------------------------------------------------------------

    def _sequence(self, t: Field, last: str) -> Entry:
        if self.prompt is None:
            return self._missing(t, (), "the sampler records no prompt token ids "
                                 "(observation.token_ids): a whole sequence needs them")
        sources = [self.prompt, self.action]
        base = {"op": "concat", "from": ["prompt_ids", "response_ids"], "value": 0}
        if last in ATTENTION_NAMES or (t.role == "mask" and last not in POSITION_NAMES):
            return self._op(t, sources, {**base, "output": "attention_mask"}, ("concat",),
                            "attention_mask(prompt_ids ++ response_ids)", "bool",
                            "attention mask of the whole sequence: the prompt's real tokens "
                            "then the response's")
        if last in POSITION_NAMES:
            return self._op(t, sources, {**base, "output": "position_ids"}, ("concat",),
                            "position_ids(prompt_ids ++ response_ids)", "int64",
                            "position of each token: cumsum(attention_mask) - 1, clipped at 0 "
                            "(left padding gets 0)")
        return self._op(t, sources, base, ("concat",), "concat(prompt_ids, response_ids)",
                        "int64", "the whole sequence: left-padded prompt then right-padded "
                        "response, pad id 0 (verl input_ids, OpenRLHF sequences)")

    def loss_mask(self) -> Field | None:
        """The sampler's per-token loss mask: role loss_mask, or a per-token bool field named
        loss_mask (a schema inferred from a file reads the name as RLlib's mask)."""
        found = self.have("loss_mask")
        if found is not None:
            return found
        for f in self.by_role.get("mask", ()):
            if f.name.rsplit(".", 1)[-1] in ("loss_mask", "loss_masks") and f.shape and \
                    f.shape[0] in f.varying:
                return f
        return None

    def _response_mask(self, t: Field) -> Entry:
        loss = self.loss_mask()
        if t.role == "mask" and t.name.lower() in self.profile.attention_masks:
            return self._real_mask(t, loss)
        sources = [self.action] + ([loss] if loss is not None else [])
        why = ("True on real generated tokens AND loss_mask (tokens the policy did not "
               "generate, such as spliced tool output, stay out of the loss)") if loss else \
            ("True on real generated tokens (the sampler records no loss_mask: every generated "
             "token is trained on)")
        return self._op(t, sources, {"from": "response_mask"}, ("pad",), "response_mask",
                        "bool", why)

    def _real_mask(self, t: Field, loss: Field | None) -> Entry:
        """A response mask the trainer also attends with: the real tokens (the first
        response_length), so spliced tool output stays visible to the tokens after it."""
        loss_field = next((f.name for f in self.t_tab if f.role == "loss_mask"), None)
        why = (f"True on every real response token, tool output included ({self.profile.name} "
               f"also attends with {t.name}; the loss leaves tool tokens out through "
               + (f"{loss_field} = response_mask)" if loss_field else
                  "a tool mask the trainer schema does not name" +
                  (f": the sampler's {loss.name} is unused, so spliced tool output would be "
                   f"trained on)" if loss is not None else ")")))
        entry = {"op": "pad", "from": "response_ids", "side": "right", "output": "mask"}
        return self._op(t, [self.action], entry, ("pad",), "real tokens of response_ids",
                        "bool", why)

    def _token_read(self, t: Field, s: Field) -> Entry:
        column = self._column(s)
        if column is None or not per_token_field(s):
            return self._missing(t, (s.name,), f"{s.name} {shape_text(s.shape)} holds one "
                                 f"value per step; {t.name} reads one per token")
        return self._read(t, s, column, "")

    def _return(self, t: Field) -> Entry:
        """Per-token returns: recorded per token, else = the group-relative advantage
        (critic-free estimators: verl GRPO, OpenRLHF group_norm), else the step's return on
        each token."""
        s = self.have("return")
        if s is not None and per_token_field(s):
            return self._read(t, s, "return", "")
        if self.have("group_id") is not None and (t.required or s is None):
            return self._advantage(t, per_token=True, as_return=True)
        if s is None:
            return self._advantage(t, per_token=True)
        entry = {"from": s.name, "then": [{"op": "per_token"}]}
        return self._op(t, [s], entry, ("per_token",), f"per_token({s.name})", "float32",
                        f"the step's {s.name} on every response token of response_mask (the "
                        f"return-to-go of each token when the reward comes at the end, gamma 1)")

    def _token_reward(self, t: Field) -> Entry:
        """Per-token rewards: the sampler's token_reward, or the sequence reward on the last
        response token by `kl_reward` with beta 0 (verl's token_level_rewards without a KL
        penalty in the reward); the one whose inputs the sampler requires, else kl_reward."""
        recorded = self.have("token_reward")
        if recorded is not None and not per_token_field(recorded):
            recorded = None
        reward, logp, ref = self.have("reward"), self.have("logprob"), self.have("ref_logprob")
        if ref is not None and not per_token_field(ref):
            ref = None
        if reward is None:
            return self._missing(t, (), "no reward in the sampler")
        kl_inputs = [reward, logp, ref] if logp is not None and ref is not None else None
        if recorded is not None and (kl_inputs is None or recorded.required and
                                     not all(f.required for f in kl_inputs)):
            return self._read(t, recorded, "token_reward", "per-token reward recorded by the "
                              "sampler; the scalar reward is not added to it (put the outcome "
                              "reward in token_reward if the trainer should count it there)")
        if kl_inputs is None:
            return self._manual(t, [reward], "the sequence reward on the last response token",
                                "per-token rewards need token_reward, or ref_logprob for "
                                "kl_reward: the sampler records neither")
        entry = {"op": "kl_reward", "from": ["reward", "logprob", "ref_logprob"], "beta": 0.0,
                 "estimator": "k1"}
        other = (f"; the sampler's {recorded.name} is not in it (process rewards: map "
                 f"{t.name} {{\"from\": \"token_reward\"}})") if recorded is not None else ""
        return self._op(t, kl_inputs, entry, ("kl_reward",),
                        "kl_reward(reward, logprob, ref_logprob, beta=0)", "float32",
                        "the sequence reward on the last real response token, 0 elsewhere "
                        "(verl token_level_rewards without a KL penalty in the reward); set "
                        "beta to the trainer's KL coefficient to put -beta*KL on every token"
                        + other)

    def _kl(self, t: Field) -> Entry:
        logp, ref = self.have("logprob"), self.have("ref_logprob")
        if logp is None or ref is None:
            return self._missing(t, (), "a per-token KL needs logprob and ref_logprob")
        entry = {"op": "kl", "from": ["logprob", "ref_logprob"], "estimator": "k1"}
        return self._op(t, [logp, ref], entry, ("kl",), "kl(logprob, ref_logprob, k1)",
                        "float32", "per-token KL estimate logprob - ref_logprob (k1), 0 off "
                        "the response mask")

    def _advantage(self, t: Field, *, per_token: bool, as_return: bool = False) -> Entry:
        reward, group = self.have("reward"), self.have("group_id")
        if reward is None:
            return self._missing(t, (), "no reward in the sampler")
        if group is None:
            if self.have("value") is not None:
                return self._manual(t, [reward, self.have("value")],
                                    "GAE over response tokens", "per-token GAE needs "
                                    "per-token values and rewards over one row's tokens, "
                                    "which no map op computes: compute it in the trainer "
                                    "(verl compute_gae_advantage_return) or record a "
                                    "group_id for a group-relative advantage")
            return self._missing(t, (), _NO_VALUE_NO_GROUP)
        args = {"std": "unbiased", **self.profile.group_norm}
        entry: dict[str, Any] = {"op": "group_norm", "from": ["reward", "group_id"], **args}
        ops: tuple[str, ...] = ("group_norm",)
        text = "group_norm(reward, group_id)"
        if per_token:
            entry["then"] = [{"op": "per_token"}]
            ops += ("per_token",)
            text += " per token"
        why = (f"group-relative advantage: (reward - group mean) / (group std + "
               f"{args['eps']:g}) over the rows of one group_id"
               + (", on every response token of response_mask" if per_token else "")
               + (f" ({self.profile.note})" if self.profile.note else ""))
        if as_return:
            why = f"returns = advantages for a critic-free, group-relative estimator; {why}"
        self.group_ops.append(t.name)
        return self._op(t, [reward, group], entry, ops, text, "float32", why)

    # -- entries ---------------------------------------------------------------------------------

    def _column(self, s: Field) -> str | None:
        """The token column of sampler field `s`: per-token fields by role, scalars by name."""
        if per_token_field(s):
            return TOKEN_COLUMNS.get(s.role)
        if s.shape == () and "." not in s.name:
            return s.name
        return None

    def _read(self, t: Field, s: Field, column: str, note: str) -> Entry:
        """`t` read from one token column: `[B, P]` / `[B, R]` for per-token sampler fields
        (padded by the collation), `[B]` for one value per step."""
        per_token = per_token_field(s)
        ops: tuple[str, ...] = ("pad",) if per_token else ()
        text = column
        if per_token:
            text = ("prompt_ids [B, P], left-padded with 0" if column == "prompt_ids" else
                    f"{column} [B, R] on its tokens of the packed rows, 0 elsewhere"
                    if self.packed else f"{column} [B, R], right-padded with 0")
        fit = compare_dtype(s.dtype, t.dtype)
        if not fit.ok:
            return self._missing(t, (s.name,), f"{s.name} has the role {s.role} but "
                                 f"{fit.why}; no known conversion")
        self.cast_note(t, s, fit)
        entry: dict[str, Any] = {"from": column}
        why = [text if per_token else "", note]
        cast = None
        if fit.cast_to is not None:
            entry["cast"] = fit.cast_to
            ops += ("cast",)
            cast = "lossless" if fit.lossless else "lossy"
            why.append(f"{cast} cast to {fit.cast_to}")
        self._use(t, [s])
        reason = "; ".join(filter(None, why))
        if not ops:
            tier = "same" if s.name == t.name else "renamed"
            same = "same name, dtype and shape" if tier == "same" else \
                f"same role ({t.role}), dtype and shape"
            return Entry.pair(tier, t, s, reason="; ".join(filter(None, [same, reason])))
        conversion = Conversion(ops, reason, entry, cast)
        return Entry.pair("needs_conversion", t, s, conversion=conversion, reason=reason)

    def _op(self, t: Field, sources: Sequence[Field | None], entry: dict[str, Any],
            ops: tuple[str, ...], text: str, out: str, why: str) -> Entry:
        present = [s for s in sources if s is not None]
        fit = compare_dtype(out, t.dtype)
        if not fit.ok:
            return self._missing(t, tuple(s.name for s in present),
                                 f"{text} gives {out} but {fit.why}")
        cast = None
        if fit.cast_to is not None:
            entry = {**entry, "cast": fit.cast_to}
            ops += ("cast",)
            cast = "lossless" if fit.lossless else "lossy"
            why += f"; {cast} cast to {fit.cast_to}"
        self._use(t, present)
        conversion = Conversion(ops, "; ".join([text, *([f"{cast} cast to {fit.cast_to}"]
                                                       if cast else [])]), entry, cast)
        return Entry("needs_conversion", t.name, tuple(s.name for s in present), t.role,
                     out, t.dtype, None, t.shape, conversion, why)

    def _manual(self, t: Field, sources: list[Field | None], text: str, manual: str) -> Entry:
        present = [s for s in sources if s is not None]
        self.used.update(s.name for s in present)
        conversion = Conversion((_op_word(text),), text, None, None, manual)
        return Entry("needs_conversion", t.name, tuple(s.name for s in present), t.role, None,
                     t.dtype, None, t.shape, conversion, manual)

    def _missing(self, t: Field, sources: tuple[str, ...], reason: str) -> Entry:
        return Entry("missing", t.name, sources, t.role, None, t.dtype, None, t.shape, None,
                     reason)

    def _use(self, t: Field, sources: list[Field]) -> None:
        for s in sources:
            self.used.add(s.name)
            self.optional_source(t, s)

    # -- warnings about the whole map --------------------------------------------------------------

    def finish(self, entries: list[Entry]) -> None:
        """Warnings only token rows have: fixed widths the map cannot settle, a group split
        across batches, stale rows."""
        _, manual = token_budget(self.t_tab, self.lead) if self.packed else \
            fixed_widths(self.t_tab, ("B",))
        if manual:
            fixed = tuple(f.name for f in self.t_tab if f.shape and isinstance(f.shape[-1], int))
            self.warnings.append(DiffWarning("map_incomplete", fixed, manual))
        readers = [e.trainer_field for e in entries if e.role == "group_id" and e.trainer_field
                   and e.tier not in ("missing", "optional_missing")]
        fields = tuple(dict.fromkeys([*self.group_ops, *(r for r in readers if r)]))
        if fields:
            self.warnings.append(DiffWarning(
                "group_split", fields,
                f"{', '.join(fields)}: a group-relative advantage needs every row of a group in "
                f"one batch, and whether the trainer's batches keep groups whole (a batch size "
                f"that is a multiple of the group size: verl train_batch_size x rollout.n, TRL "
                f"a generation batch divisible by num_generations) is in neither schema. "
                f"`gyre-contract batch` checks the rows it builds and warns, naming the groups, "
                f"when a group_id has fewer rows than the others"))
        version = self.have("policy_version")
        if version is not None and not any(f.role == "policy_version" for f in self.t_tab):
            self.warnings.append(DiffWarning(
                "staleness_unchecked", (version.name,),
                "the trainer reads no policy_version, so nothing in its batch says which "
                "weights sampled a row: rows staler than the trainer allows are trained on as "
                "on-policy. `gyre-contract batch --max-staleness K` (half_way/full_loop "
                "max_staleness=K) refuses rows older than current - K, naming their "
                "episodes, and reports the staleness of every kept row"))


SAMPLE_NAMES = frozenset({"sample_index", "sample_idx", "sample_ids", "seq_idx"})
"""A packed trainer's field naming the sample (token row) of each token."""
PAD_MASK_NAMES = frozenset({"pad_mask", "padding_mask"})
PACKED_OWN = {
    "input_ids": ("int64", "each sample's prompt then response tokens, end to end in "
                  "micro-batch rows of the token budget; pad id 0 after the last sample"),
    "position_ids": ("int64", "0 at each sample's first token, +1 along it; the tail padding "
                     "is one more run from 0 (what a varlen kernel reads its boundaries from)"),
    "pad_mask": ("bool", "True on the real tokens of the packed rows"),
    "sample_index": ("int64", "the token row (sample) of each token, -1 on padding"),
}
"""The packed layout's own columns: their dtype and what the written entry says of them."""

_NO_GROUP = ("no sampler field holds a group id (group_id; verl uid, prompt_id): the rows "
             "sampled for one prompt cannot be told apart; episode_id is never one (each "
             "completion is an episode of its own)")
_NO_VALUE_NO_GROUP = "no value for GAE and no group_id for a group-relative advantage"


def _op_word(text: str) -> str:
    return text.split("(", 1)[0].split(" ", 1)[0]

