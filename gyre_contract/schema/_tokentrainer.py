"""What a token trainer reads, as the diff recognises it (docs/llm.md §4): one row per
generation, `[B, L]` token arrays, and the token layout its schema asks for.

An LLM trainer (verl, TRL's GRPOTrainer, OpenRLHF) reads one row per generation (per turn):
prompt tokens left-padded `[B, P]`, response tokens right-padded `[B, R]`, or both concatenated
`[B, L]` (`input_ids`, `sequences`) with an attention mask and position ids, per-token
log-probs and advantages `[B, R]` or one advantage per row `[B]`. `token_rows` recognises such a
trainer against a token sampler (integer token ids whose length varies per step), with the
widths it fixes (`fixed_widths`: the map's `pad_to`). The fields are matched in `tokenlayout`.

Which part of a row a token field spans — the prompt, the response or the whole sequence — comes
from its dim names when the schema names them (`P`; `R`, `A`, `C`; `L`, `S`), else from its name
(`prompt_*`; `input_ids`, `sequences`, `attention_mask`, `position_ids`; the rest is response).
A known trainer (by its field names) sets the arguments its own code uses (group_norm's eps and
singletons), so the written map computes what that trainer computes (`Profile`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gyre_contract.core._errors import SchemaError, describe
from gyre_contract.schema._diffreport import DiffWarning
from gyre_contract.schema._dtyperules import dtype_kind, dtypes_of
from gyre_contract.schema._fieldtable import Dtype, Field, FieldTable
from gyre_contract.schema._layouts import Layout
from gyre_contract.schema._shaperules import strip_batch_dims

ROWS_TEXT = "token rows [B, ...]: one row per generation (\"rows\": \"step\")"
PACKED_TEXT = ("packed token rows [M, S]: every generation's prompt + response end to end in "
               "micro-batch rows of S tokens (\"layout\": \"packed\")")
SEQUENCE_NAMES = frozenset({"input_ids", "sequences", "sequence", "attention_mask",
                            "position_ids", "full_attention_mask", "attn_mask"})
"""Fields spanning the whole sequence, prompt then response (verl, OpenRLHF)."""
ATTENTION_NAMES = frozenset({"attention_mask", "full_attention_mask", "attn_mask"})
POSITION_NAMES = frozenset({"position_ids", "positions"})
LENGTH_NAMES = frozenset({"response_length", "response_lengths", "num_actions",
                          "completion_length", "completion_lengths"})
KL_NAMES = frozenset({"kl", "kls", "approx_kl", "per_token_kl"})
DIM_SPANS = {"P": "prompt", "R": "response", "A": "response", "C": "response",
              "L": "sequence", "S": "sequence"}
TOKEN_COLUMNS = {"action": "response_ids", "logprob": "logprob", "ref_logprob": "ref_logprob",
            "token_reward": "token_reward", "value": "value", "return": "return"}
"""Per-token sampler roles and the `[B, R]` token column `collate_tokens` makes of them."""
TOKEN_ROLES = frozenset({"action", "mask", "loss_mask", "logprob", "ref_logprob", "advantage",
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
    return _token_ids(s_tab, "action")


def token_prompt(s_tab: FieldTable) -> Field | None:
    """The sampler's prompt token ids (`observation.token_ids`): integer, one varying dim."""
    return _token_ids(s_tab, "observation")


def _token_ids(s_tab: FieldTable, role: str) -> Field | None:
    """The first sampler field of `role` holding integer ids along one varying dim."""
    for f in s_tab:
        if f.role == role and integer_dtype(f.dtype) and f.shape and len(f.shape) == 1 and \
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
    packed = packed_trainer(t_tab)
    lead = dims or (("M",) if packed else ("B",))
    tokens = [f for f in t_tab if token_rank(f, lead) == 1 and (
        f.role in TOKEN_ROLES or span_of(f) != "response"
        or f.name.lower().rsplit(".", 1)[-1] in KL_NAMES)]
    if not tokens:
        return None
    text = PACKED_TEXT if packed else ROWS_TEXT
    if dims is None:
        if any(f.shape is not None and len(f.shape) == 0 for f in t_tab):
            return None  # a scalar field: not a batch of rows
        t_tab = replace(t_tab, batch_dims=lead)
        text += (f"; batch dim {lead[0]} assumed (a token trainer's arrays lead with its rows; "
                 f"--batch-dims says otherwise)")
    if packed:
        budget, _ = token_budget(t_tab, lead)
        if budget is not None:
            text += f"; token budget S={budget}"
        return t_tab, Layout(lead, "token", text, "packed", (), budget)
    pad_to, _ = fixed_widths(t_tab, ("B",))
    if pad_to:
        text += "; fixed widths " + ", ".join(f"{d}={w}" for d, w in pad_to) + " (pad_to)"
    return t_tab, Layout(("B",), "token", text, "padded", pad_to)


def fixed_widths(t_tab: FieldTable, lead: tuple[str, ...]
                 ) -> tuple[tuple[tuple[str, int], ...], str]:
    """The prompt and response widths (`P`, `R`) a token trainer fixes (a token dim of a fixed
    size: `minItems` = `maxItems`, a number in `x-gyre-shape`), as `pad_to`; the whole sequence's
    fixed width `L` = P + R gives the one the schema leaves open. And what the map must say by
    hand ("" when nothing): widths that disagree, or a sequence width with no split."""
    found: dict[str, set[int]] = {}
    for f in t_tab:
        step, stripped = strip_batch_dims(f.shape, lead)
        if step is None or stripped != len(lead) or len(step) != 1 or \
                not isinstance(step[0], int) or isinstance(step[0], bool):
            continue
        found.setdefault(span_of(f), set()).add(step[0])
    if not found:
        return (), ""
    clash = [f"{span} {sorted(widths)}" for span, widths in found.items() if len(widths) > 1]
    if clash:
        return (), (f"the trainer's token fields fix different widths ({'; '.join(clash)}): "
                    f"write \"pad_to\" by hand")
    p, r, length = (next(iter(found[k])) if k in found else None
                    for k in ("prompt", "response", "sequence"))
    if length is not None:
        if p is None and r is not None and length > r:
            p = length - r
        elif r is None and p is not None and length > p:
            r = length - p
        if p is None or r is None or p + r != length:
            return (), (f"the trainer fixes the whole sequence at {length} tokens, but not how "
                        f"it splits into prompt and response: write \"pad_to\": {{\"P\": p, "
                        f"\"R\": {length} - p}} by hand (verl max_prompt_length, "
                        f"max_response_length)")
    return tuple((d, w) for d, w in (("P", p), ("R", r)) if w is not None), ""


def packed_trainer(t_tab: FieldTable) -> bool:
    """Whether the trainer reads packed token rows `[M, S]`: its schema says
    `x-gyre-layout: "packed"`, or (saying no layout) it reads `position_ids` and per-token
    advantages with no prompt/response split — no prompt field and no response token ids, the
    samples laid end to end (prime-rl's micro-batches)."""
    declared = layout_keyword(t_tab, "x-gyre-layout")
    if declared is not None:
        return bool(declared == "packed")
    lead = tuple(t_tab.batch_dims or ("M",))
    if len(lead) != 1:
        return False
    tokens = [f for f in t_tab if token_rank(f, lead) == 1]
    positions = any(last_name(f) in POSITION_NAMES for f in tokens)
    advantages = any(f.role == "advantage" for f in tokens)
    split = any(span_of(f) == "prompt" or (span_of(f) == "response" and integer_dtype(f.dtype)
                                           and f.role in ("action", "observation"))
                for f in tokens)
    return positions and advantages and not split


def token_budget(t_tab: FieldTable, lead: tuple[str, ...]) -> tuple[int | None, str]:
    """A packed trainer's tokens per micro-batch row: `x-gyre-token-budget`, else the one fixed
    size of its token dim; and what the map must say by hand ("" when settled)."""
    declared = layout_keyword(t_tab, "x-gyre-token-budget")
    if declared is not None:
        return int(declared), ""
    sizes = set()
    for f in t_tab:
        step, stripped = strip_batch_dims(f.shape, lead)
        if step is not None and stripped == len(lead) and len(step) == 1 and \
                isinstance(step[0], int) and not isinstance(step[0], bool):
            sizes.add(step[0])
    if len(sizes) == 1:
        return next(iter(sizes)), ""
    why = (f"its token fields fix different sizes {sorted(sizes)}" if sizes else
           "neither x-gyre-token-budget nor a fixed token dim says it")
    return None, (f"the trainer reads packed rows [M, S] but {why}: add \"token_budget\": S "
                  f"to the map (prime-rl seq_len, the tokens of one micro-batch row)")


def layout_keyword(t_tab: FieldTable, key: str) -> Any:
    """A trainer schema's token-layout keyword (None when absent), checked: `x-gyre-layout`
    is `padded` or `packed`, `x-gyre-token-budget` a whole number > 0; SchemaError else."""
    value = t_tab.extra.get(key)
    if value is None:
        return None
    if key == "x-gyre-layout" and value not in ("padded", "packed"):
        raise SchemaError(f"{t_tab.name}: x-gyre-layout must be \"padded\" or \"packed\", "
                          f"got {describe(value)}")
    if key == "x-gyre-token-budget" and (not isinstance(value, int) or isinstance(value, bool)
                                         or value <= 0):
        raise SchemaError(f"{t_tab.name}: x-gyre-token-budget must be a whole number > 0 (the "
                          f"tokens of one micro-batch row), got {describe(value)}")
    return value


def last_name(f: Field) -> str:
    """The field's last dotted name, lower case (`position_ids` of `batch.position_ids`)."""
    return f.name.lower().rsplit(".", 1)[-1]


def untokenised(s_tab: FieldTable, t_tab: FieldTable) -> DiffWarning | None:
    """A trainer that reads token rows (token ids `[B, L]`) next to a sampler whose action is not
    token ids of varying length: the diff cannot write token rows, say what would."""
    if token_action(s_tab) is not None or t_tab.batch_dims is None or \
            len(t_tab.batch_dims) != 1:
        return None
    ids = [f.name for f in t_tab if integer_dtype(f.dtype) and token_rank(f, t_tab.batch_dims) == 1
           and f.role in ("action", "observation") and f.role != "mask"]
    if not ids:
        return None
    return DiffWarning(
        "untokenised_sampler", tuple(ids),
        f"the trainer reads token ids [B, L] ({', '.join(ids)}), but the sampler's action is "
        f"not token ids of varying length: the map cannot build token rows. An LLM sampler "
        f"records action int64 [A] and observation.token_ids [P] with P and A varying (the "
        f"pinned LLMStep); the diff then writes a \"rows\": \"step\" map")


def per_token_field(s: Field) -> bool:
    """A sampler field with one value per token: one dim, a varying one."""
    return s.shape is not None and len(s.shape) == 1 and s.shape[0] in s.varying


def integer_dtype(dtype: Dtype) -> bool:
    kinds = {dtype_kind(d) for d in dtypes_of(dtype)}
    return bool(kinds) and kinds <= {"int"}


def token_rank(f: Field, lead: tuple[str, ...]) -> int | None:
    step, stripped = strip_batch_dims(f.shape, lead)
    if step is None or stripped != len(lead):
        return None
    return len(step)


def span_of(f: Field) -> str:
    """prompt | response | sequence: which part of a row a token field covers."""
    if f.shape and len(f.shape) >= 2 and isinstance(f.shape[1], str) and f.shape[1] in DIM_SPANS:
        return DIM_SPANS[f.shape[1]]
    last = f.name.lower().rsplit(".", 1)[-1]
    if last in SEQUENCE_NAMES or "input_ids" in last:
        return "sequence"
    if "prompt" in last:
        return "prompt"
    return "response"
