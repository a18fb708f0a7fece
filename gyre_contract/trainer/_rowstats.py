"""What a stage's report says of a batch's rows beyond their count (`RowLayout.stats`): the
token rows' sizes and token counts (`TokenRowStats`), packed rows' micro-batch rows and fill
(`PackedRowStats`), the staleness of every row, and one warning the contract cannot make an
error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

# -- what the stages report of token rows ---------------------------------------------------------
# One row per generated turn, so a report counts tokens rather than steps: the prompt and response
# widths, the real tokens and those the loss counts (`response_mask`), the staleness of every row
# (current policy version minus the row's), and one warning the contract cannot make an error: a
# group (`group_id`, the samples of one prompt) with fewer rows in the batch than the others, as
# when a group is split across batches, which biases a group-relative advantage (GRPO, RLOO).

class RowStats:
    """What a stage's report says of a batch's rows beyond their count (`RowLayout.stats`)."""

    batch_name: ClassVar[str] = "TokenBatch"
    """The batch model a batch of such rows is validated as without a trainer schema."""
    staleness: tuple[int, ...]
    """`current_version - policy_version` of each row, in batch order (empty when the batch
    holds no `policy_version`)."""
    warnings: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_text(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class TokenRowStats(RowStats):
    """The token rows of one batch: sizes, token counts, staleness per row, group warnings."""

    rows: int
    prompt_width: int
    response_width: int
    prompt_tokens: int
    response_tokens: int
    loss_tokens: int
    current_version: int | None
    staleness: tuple[int, ...]
    """`current_version - policy_version` of each row, in batch order (empty when the batch
    holds no `policy_version`)."""
    warnings: tuple[str, ...] = field(default=())

    @property
    def padding(self) -> float:
        """The fraction of the padded prompt and response cells that is padding."""
        cells = self.rows * (self.prompt_width + self.response_width)
        return 1.0 - (self.prompt_tokens + self.response_tokens) / cells if cells else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "prompt_width": self.prompt_width,
                "response_width": self.response_width, "prompt_tokens": self.prompt_tokens,
                "response_tokens": self.response_tokens, "loss_tokens": self.loss_tokens,
                "padding": self.padding, "current_version": self.current_version,
                "staleness": list(self.staleness), "warnings": list(self.warnings)}

    def to_text(self) -> str:
        lines = [f"token rows: B={self.rows}, prompt P={self.prompt_width}, response "
                 f"R={self.response_width}; {self.prompt_tokens} prompt and "
                 f"{self.response_tokens} response tokens ({self.loss_tokens} in the loss), "
                 f"{self.padding:.1%} padding",
                 _staleness_text(self.staleness, self.current_version)]
        return "\n".join(lines + [f"warning: {w}" for w in self.warnings])


def _staleness_text(staleness: tuple[int, ...], current: int | None) -> str:
    counts = sorted(Counter(staleness).items())
    if not counts:
        return "staleness: no policy_version in the batch"
    stale = ", ".join(f"{age}: {n} rows" if n != 1 else f"{age}: 1 row" for age, n in counts)
    return f"staleness (current {current} - row version): {stale}"


def _staleness(columns: Mapping[str, Any], current_version: int | None
               ) -> tuple[tuple[int, ...], int | None]:
    """`current - policy_version` of each row (empty without versions), and the current
    version (default: the newest row's)."""
    versions = columns.get("policy_version")
    if versions is None or not len(versions):
        return (), current_version
    versions = np.asarray(versions, dtype=np.int64)
    current = int(versions.max()) if current_version is None else current_version
    return tuple((current - versions).tolist()), current


@dataclass(frozen=True)
class PackedRowStats(RowStats):
    """Packed token rows: the micro-batch rows and their fill, the samples' staleness, group
    warnings."""

    batch_name: ClassVar[str] = "PackedBatch"
    samples: int
    rows: int
    token_budget: int
    tokens: int
    """Real tokens (`sample_index` >= 0)."""
    current_version: int | None
    staleness: tuple[int, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def fill(self) -> float:
        """Real tokens over the packed cells: tokens / (rows × budget)."""
        cells = self.rows * self.token_budget
        return self.tokens / cells if cells else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "rows": self.rows, "token_budget": self.token_budget,
                "tokens": self.tokens, "fill": self.fill,
                "current_version": self.current_version, "staleness": list(self.staleness),
                "warnings": list(self.warnings)}

    def to_text(self) -> str:
        lines = [f"packed rows: M={self.rows} of S={self.token_budget} tokens hold "
                 f"{self.samples} samples, {self.tokens} tokens ({self.fill:.1%} filled)",
                 _staleness_text(self.staleness, self.current_version)]
        return "\n".join(lines + [f"warning: {w}" for w in self.warnings])


def packed_row_stats(columns: Mapping[str, Any], current_version: int | None) -> PackedRowStats:
    """The summary of packed columns (collated, or a packed batch's own fields)."""
    index = np.asarray(columns["sample_index"])
    staleness, current = _staleness(columns, current_version)
    groups = columns.get("group_id")
    return PackedRowStats(
        samples=len(columns["episode_id"]), rows=int(index.shape[0]),
        token_budget=int(index.shape[1]), tokens=int(np.count_nonzero(index >= 0)),
        current_version=current, staleness=staleness,
        warnings=tuple(group_split_warnings(groups)) if groups is not None else ())


def token_row_stats(columns: Mapping[str, Any], current_version: int | None) -> TokenRowStats:
    """The summary of collated token columns; `current_version` defaults to the newest row's."""
    prompt = np.asarray(columns["prompt_mask"])
    response = np.asarray(columns["response_mask"])
    staleness, current = _staleness(columns, current_version)
    groups = columns.get("group_id")
    return TokenRowStats(
        rows=int(response.shape[0]), prompt_width=int(prompt.shape[1]),
        response_width=int(response.shape[1]), prompt_tokens=int(prompt.sum()),
        response_tokens=int(np.asarray(columns["response_length"]).sum()),
        loss_tokens=int(response.sum()), current_version=current, staleness=staleness,
        warnings=tuple(group_split_warnings(groups)) if groups is not None else ())


def group_split_warnings(group_ids: Any) -> list[str]:
    """A warning naming the groups with fewer rows in the batch than the largest group has
    (at most 10 named), or none when every group has as many rows."""
    ids = np.asarray(group_ids)
    if ids.size == 0:
        return []
    names, counts = np.unique(ids, return_counts=True)
    full = int(counts.max())
    short = [(str(n), int(c)) for n, c in zip(names.tolist(), counts.tolist()) if c < full]
    if not short:
        return []
    shown = ", ".join(f"{n!r} ({c})" for n, c in short[:10]) + (", ..." if len(short) > 10 else "")
    return [f"{len(short)} of {len(names)} groups have fewer rows than the largest ({full}): "
            f"{shown}; a group split across batches biases a group-relative advantage "
            f"(GRPO, RLOO): batch whole groups"]
