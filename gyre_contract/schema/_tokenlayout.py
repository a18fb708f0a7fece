"""Token trainers in the diff: one row per generation, `[B, L]` token arrays (docs/llm.md §4).

An LLM trainer (verl, TRL's GRPOTrainer, OpenRLHF) reads one row per generation (per turn):
prompt tokens left-padded `[B, P]`, response tokens right-padded `[B, R]`, or both concatenated
`[B, L]` (`input_ids`, `sequences`) with an attention mask and position ids, per-token
log-probs and advantages `[B, R]` or one advantage per row `[B]`. `token_rows` recognises such a
trainer against a token sampler (integer token ids whose length varies per step) and `TokenRows`
matches each trainer field to the token columns `collate_tokens` builds (`prompt_ids`,
`prompt_mask`, `response_ids`, `response_mask`, `response_length`, `logprob`, `ref_logprob`,
`token_reward`, `reward`, `group_id`, ...), written as a field map of token rows with the
ops `concat`, `per_token`, `group_norm`, `kl_reward` and `kl`.

Which part of a row a token field spans — the prompt, the response or the whole sequence — comes
from its dim names when the schema names them (`P`; `R`, `A`, `C`; `L`, `S`), else from its name
(`prompt_*`; `input_ids`, `sequences`, `attention_mask`, `position_ids`; the rest is response).
A known trainer (by its field names) sets the arguments its own code uses (group_norm's eps and
singletons), so the written map computes what that trainer computes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gyre_contract.schema._diffreport import Conversion, DiffWarning, Entry
from gyre_contract.schema._dtyperules import compare_dtype, dtype_kind, dtypes_of
from gyre_contract.schema._fieldtable import Dtype, Field, FieldTable, shape_text
from gyre_contract.schema._layouts import Layout
from gyre_contract.schema._shaperules import strip_batch_dims

ROWS_TEXT = "token rows [B, ...]: one row per generation (\"rows\": \"step\")"
SEQUENCE_NAMES = frozenset({"input_ids", "sequences", "sequence", "attention_mask",
                            "position_ids", "full_attention_mask", "attn_mask"})
"""Fields spanning the whole sequence, prompt then response (verl, OpenRLHF)."""
ATTENTION_NAMES = frozenset({"attention_mask", "full_attention_mask", "attn_mask"})
POSITION_NAMES = frozenset({"position_ids", "positions"})
LENGTH_NAMES = frozenset({"response_length", "response_lengths", "num_actions",
                          "completion_length", "completion_lengths"})
KL_NAMES = frozenset({"kl", "kls", "approx_kl", "per_token_kl"})
_DIM_SPANS = {"P": "prompt", "R": "response", "A": "response", "C": "response",
              "L": "sequence", "S": "sequence"}
_COLUMNS = {"action": "response_ids", "logprob": "logprob", "ref_logprob": "ref_logprob",
            "token_reward": "token_reward", "value": "value", "return": "return"}
"""Per-token sampler roles and the `[B, R]` token column `collate_tokens` makes of them."""
_TOKEN_ROLES = frozenset({"action", "mask", "loss_mask", "logprob", "ref_logprob", "advantage",
                          "token_reward"})
"""Roles whose `[B, L]` field in a one-batch-dim trainer means token rows."""


@dataclass(frozen=True)
class Profile:
    """A known token trainer: the field names that identify it and the op arguments its own code
    uses, so the written map computes what the trainer would."""

    name: str
    markers: frozenset[str]
    group_norm: dict[str, Any]
    note: str
    attention_masks: frozenset[str] = frozenset()
    """Response masks the trainer also attends with: 1 on every real token, tool output
    included (the loss leaves tool tokens out through another field, TRL's tool_mask)."""


PROFILES: tuple[Profile, ...] = (
    Profile("verl", frozenset({"responses", "old_log_probs", "ref_log_prob", "uid",
                               "token_level_rewards", "token_level_scores", "response_mask"}),
            {"eps": 1e-6, "singletons": "raw"},
            "verl compute_grpo_outcome_advantage: eps 1e-6, torch.std, a group of one keeps its "
            "score (mean 0, std 1)"),
    Profile("TRL GRPOTrainer", frozenset({"completion_ids", "completion_mask", "prompt_mask",
                                          "old_per_token_logps", "ref_per_token_logps"}),
            {"eps": 1e-4},
            "TRL GRPOTrainer: (r - mean) / (std + 1e-4), torch.std over num_generations",
            frozenset({"completion_mask"})),
    Profile("OpenRLHF", frozenset({"sequences", "action_mask", "action_log_probs",
                                   "base_action_log_probs"}),
            {"eps": 1e-9},
            "OpenRLHF group_norm: (r - mean) / (std + 1e-9), torch.std over n_samples_per_prompt"),
)
GENERIC = Profile("", frozenset(), {"eps": 1e-6}, "group_norm defaults: eps 1e-6, torch.std")


def profile_of(t_tab: FieldTable) -> Profile:
    """The known trainer whose field names the schema uses most (two at least), else GENERIC."""
    names = {f.name.lower() for f in t_tab}
    hits = sorted(((len(p.markers & names), i) for i, p in enumerate(PROFILES)), reverse=True)
    count, index = hits[0]
    return PROFILES[index] if count >= 2 else GENERIC


def token_action(s_tab: FieldTable) -> Field | None:
    """The sampler's token ids: an integer action with a varying dim (one generation's tokens)."""
    for f in s_tab:
        if f.role == "action" and _integer(f.dtype) and f.shape and len(f.shape) == 1 and \
                f.shape[0] in f.varying:
            return f
    return None


def token_prompt(s_tab: FieldTable) -> Field | None:
    """The sampler's prompt token ids (`observation.token_ids`): integer, one varying dim."""
    for f in s_tab:
        if f.role == "observation" and _integer(f.dtype) and f.shape and len(f.shape) == 1 and \
                f.shape[0] in f.varying:
            return f
    return None


def token_rows(s_tab: FieldTable, t_tab: FieldTable) -> tuple[FieldTable, Layout] | None:
    """The trainer table (batch dims `B` assumed when it names none) and the token layout, when
    the trainer reads token rows from a token sampler; None otherwise.

    A token trainer has one batch dim and a token field `[B, L]`: token ids (role action, or a
    field spanning the prompt or the whole sequence), a token mask, or per-token log-probs or
    advantages (OpenRLHF's experience holds no ids at all).
    """
    if s_tab.kind == t_tab.kind == "token_batch":  # token rows on both sides: as they are
        return t_tab, Layout(tuple(t_tab.batch_dims or ("B",)), "token", ROWS_TEXT)
    if token_action(s_tab) is None or t_tab.kind == "rollout_step":
        return None
    if t_tab.kind == "token_batch":
        return t_tab, Layout(tuple(t_tab.batch_dims or ("B",)), "token", ROWS_TEXT)
    dims = t_tab.batch_dims
    if dims is not None and len(dims) != 1:
        return None
    lead = dims or ("B",)
    tokens = [f for f in t_tab if _rank(f, lead) == 1 and (
        f.role in _TOKEN_ROLES or _span(f) != "response"
        or f.name.lower().rsplit(".", 1)[-1] in KL_NAMES)]
    if not tokens:
        return None
    text = ROWS_TEXT
    if dims is None:
        if any(f.shape is not None and len(f.shape) == 0 for f in t_tab):
            return None  # a scalar field: not a batch of rows
        t_tab = replace(t_tab, batch_dims=("B",))
        text += "; batch dim B assumed (a token trainer's arrays lead with its rows; " \
                "--batch-dims says otherwise)"
    return t_tab, Layout(("B",), "token", text)


def untokenised(s_tab: FieldTable, t_tab: FieldTable) -> DiffWarning | None:
    """A trainer that reads token rows (token ids `[B, L]`) next to a sampler whose action is not
    token ids of varying length: the diff cannot write token rows, say what would."""
    if token_action(s_tab) is not None or t_tab.batch_dims is None or \
            len(t_tab.batch_dims) != 1:
        return None
    ids = [f.name for f in t_tab if _integer(f.dtype) and _rank(f, t_tab.batch_dims) == 1
           and f.role in ("action", "observation") and f.role != "mask"]
    if not ids:
        return None
    return DiffWarning(
        "untokenised_sampler", tuple(ids),
        f"the trainer reads token ids [B, L] ({', '.join(ids)}), but the sampler's action is "
        f"not token ids of varying length: the map cannot build token rows. An LLM sampler "
        f"records action int64 [A] and observation.token_ids [P] with P and A varying (the "
        f"pinned LLMStep); the diff then writes a \"rows\": \"step\" map")


def _per_token(s: Field) -> bool:
    """A sampler field with one value per token: one dim, a varying one."""
    return s.shape is not None and len(s.shape) == 1 and s.shape[0] in s.varying


def _integer(dtype: Dtype) -> bool:
    kinds = {dtype_kind(d) for d in dtypes_of(dtype)}
    return bool(kinds) and kinds <= {"int"}


def _rank(f: Field, lead: tuple[str, ...]) -> int | None:
    step, stripped = strip_batch_dims(f.shape, lead)
    if step is None or stripped != len(lead):
        return None
    return len(step)


def _span(f: Field) -> str:
    """prompt | response | sequence: which part of a row a token field covers."""
    if f.shape and len(f.shape) >= 2 and isinstance(f.shape[1], str) and f.shape[1] in _DIM_SPANS:
        return _DIM_SPANS[f.shape[1]]
    last = f.name.lower().rsplit(".", 1)[-1]
    if last in SEQUENCE_NAMES or "input_ids" in last:
        return "sequence"
    if "prompt" in last:
        return "prompt"
    return "response"


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

    def have(self, role: str) -> Field | None:
        fields = self.by_role.get(role)
        return fields[0] if fields else None

    # -- one trainer field ---------------------------------------------------------------------

    def match(self, t: Field, renamed: Field | None = None) -> Entry:
        """The entry of trainer field `t` read from token rows."""
        rank = _rank(t, ("B",))
        if rank is None:
            return self._missing(t, (), f"{t.name} {shape_text(t.shape)} does not lead with the "
                                 f"row dim B of token rows")
        if renamed is not None:
            return self._renamed(t, renamed, rank)
        if rank == 1:
            return self._per_token(t)
        if rank == 0:
            return self._per_row(t)
        return self._missing(t, (), f"token rows hold [B] and [B, L] fields; {t.name} has "
                             f"{rank} dims per row")

    def _renamed(self, t: Field, s: Field, rank: int) -> Entry:
        column = self._column(s)
        if column is None or rank != int(_per_token(s)):
            return self._missing(t, (s.name,), f"--rename {t.name}={s.name}: {s.name} "
                                 f"{shape_text(s.shape)} is not a [B{', R' if rank else ''}] "
                                 f"token column")
        return self._read(t, s, column, "renamed by --rename")

    def _per_token(self, t: Field) -> Entry:
        span = _span(t)
        last = t.name.lower().rsplit(".", 1)[-1]
        same = self.s_tab.fields.get(t.name)
        if same is not None and _per_token(same) and same.role in _COLUMNS and \
                _COLUMNS[same.role] in (t.name, same.name) and \
                not ({same.role, t.role} & {"logprob", "ref_logprob"} and same.role != t.role):
            return self._read(t, same, _COLUMNS[same.role], "")  # same name: read it
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
        if role in _COLUMNS:
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
            if not _per_token(s):
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
        if column is None or not _per_token(s):
            return self._missing(t, (s.name,), f"{s.name} {shape_text(s.shape)} holds one "
                                 f"value per step; {t.name} reads one per token")
        return self._read(t, s, column, "")

    def _return(self, t: Field) -> Entry:
        """Per-token returns: recorded per token, else = the group-relative advantage
        (critic-free estimators: verl GRPO, OpenRLHF group_norm), else the step's return on
        each token."""
        s = self.have("return")
        if s is not None and _per_token(s):
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
        if recorded is not None and not _per_token(recorded):
            recorded = None
        reward, logp, ref = self.have("reward"), self.have("logprob"), self.have("ref_logprob")
        if ref is not None and not _per_token(ref):
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
        if _per_token(s):
            return _COLUMNS.get(s.role)
        if s.shape == () and "." not in s.name:
            return s.name
        return None

    def _read(self, t: Field, s: Field, column: str, note: str) -> Entry:
        """`t` read from one token column: `[B, P]` / `[B, R]` for per-token sampler fields
        (padded by the collation), `[B]` for one value per step."""
        per_token = _per_token(s)
        ops: tuple[str, ...] = ("pad",) if per_token else ()
        text = column
        if per_token:
            text = ("prompt_ids [B, P], left-padded with 0" if column == "prompt_ids" else
                    f"{column} [B, R], right-padded with 0")
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
        """Warnings only token rows have: a group split across batches, stale rows."""
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


_NO_GROUP = ("no sampler field holds a group id (group_id; verl uid, prompt_id): the rows "
             "sampled for one prompt cannot be told apart; episode_id is never one (each "
             "completion is an episode of its own)")
_NO_VALUE_NO_GROUP = "no value for GAE and no group_id for a group-relative advantage"


def _op_word(text: str) -> str:
    return text.split("(", 1)[0].split(" ", 1)[0]

