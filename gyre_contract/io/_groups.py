"""File-level checks on the groups of a rollout file (`group_id`: steps sampled for one prompt).

A group-relative advantage (GRPO, RLOO) compares the rewards of a group's members: members
produced by different weights (different `policy_version`) compare samples of different
policies. That holds under the contract — a group may straddle a weight update — but deserves a
look, so a file report warns, naming the group and its versions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gyre_contract.core._text import MAX_MESSAGE_CHARS, MAX_SHOWN_CHARS, quoted, shorten

MAX_GROUP_WARNINGS = 20
"""Groups named one by one in a report; the others are counted in one more warning."""


@dataclass(frozen=True)
class FileWarning:
    """What holds but deserves a look: a stable `code`, a message, and its details as data."""

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As JSON reports give it: the message bounded, every string detail shortened (a name
        from the data at `MAX_SHOWN_CHARS`; a file `path` the OS listed only past
        `MAX_MESSAGE_CHARS`, longer than any real path: a script reads it back whole)."""
        details = {k: shorten(v, MAX_MESSAGE_CHARS if k == "path" else MAX_SHOWN_CHARS)
                   if isinstance(v, str) else v for k, v in self.details.items()}
        return {"code": self.code, "message": str(self), **details}

    def __str__(self) -> str:
        return shorten(self.message, MAX_MESSAGE_CHARS)


class GroupVersions:
    """The policy versions seen in each group, in file order; `warnings()` at the end."""

    def __init__(self) -> None:
        self.first: dict[str, int] = {}
        self.mixed: dict[str, set[int]] = {}

    def copy(self) -> GroupVersions:
        """An independent copy."""
        other = GroupVersions()
        other.first = dict(self.first)
        other.mixed = {k: set(v) for k, v in self.mixed.items()}
        return other

    def add(self, group_id: str, version: int) -> None:
        first = self.first.setdefault(group_id, version)
        if first != version:
            self.mixed.setdefault(group_id, {first}).add(version)

    def add_many(self, group_ids: Iterable[Any], versions: Iterable[int]) -> None:
        """Steps checked in bulk: a None group id is a step without one."""
        add = self.add
        for group_id, version in zip(group_ids, versions):
            if group_id is not None:
                add(group_id, int(version))

    def warnings(self) -> list[FileWarning]:
        out = []
        for group_id, versions in list(self.mixed.items())[:MAX_GROUP_WARNINGS]:
            shown = sorted(versions)
            out.append(FileWarning(
                "group_policy_versions",
                f"group {quoted(group_id)} mixes policy versions {', '.join(map(str, shown))}: a "
                "group-relative advantage would compare samples of different policies",
                {"group_id": group_id, "policy_versions": shown}))
        more = len(self.mixed) - MAX_GROUP_WARNINGS
        if more > 0:
            out.append(FileWarning("group_policy_versions",
                                   f"... and {more} more groups mix policy versions",
                                   {"more_groups": more}))
        return out
