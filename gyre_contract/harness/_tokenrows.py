"""What the stages report of a batch of token rows (a map with `"rows": "step"`, docs/llm.md §2).

One row per generated turn, so a report counts tokens rather than steps: the prompt and response
widths, the real tokens and those the loss counts (`response_mask`), the staleness of every row
(current policy version minus the row's), and one warning the contract cannot make an error: a
group (`group_id`, the samples of one prompt) with fewer rows in the batch than the others, as
when a group is split across batches, which biases a group-relative advantage (GRPO, RLOO).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TokenRowStats:
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
        counts = sorted(Counter(self.staleness).items())
        stale = ", ".join(f"{age}: {n} rows" if n != 1 else f"{age}: 1 row" for age, n in counts)
        lines = [f"token rows: B={self.rows}, prompt P={self.prompt_width}, response "
                 f"R={self.response_width}; {self.prompt_tokens} prompt and "
                 f"{self.response_tokens} response tokens ({self.loss_tokens} in the loss), "
                 f"{self.padding:.1%} padding",
                 f"staleness (current {self.current_version} - row version): {stale}"
                 if counts else "staleness: no policy_version in the batch"]
        return "\n".join(lines + [f"warning: {w}" for w in self.warnings])


def is_token_rows(columns: Mapping[str, Any]) -> bool:
    """Whether collated columns are token rows (`collate_tokens`) rather than `[B, T]` rows."""
    return "response_length" in columns and "mask" not in columns


def token_row_stats(columns: Mapping[str, Any], current_version: int | None) -> TokenRowStats:
    """The summary of collated token columns; `current_version` defaults to the newest row's."""
    prompt = np.asarray(columns["prompt_mask"])
    response = np.asarray(columns["response_mask"])
    versions = columns.get("policy_version")
    staleness: tuple[int, ...] = ()
    current = current_version
    if versions is not None and len(versions):
        versions = np.asarray(versions, dtype=np.int64)
        current = int(versions.max()) if current is None else current
        staleness = tuple((current - versions).tolist())
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
