"""The ids of finished episodes, kept in memory that stays flat in the length of a file.

Why: the episode rules must know, for every later step, whether its episode ended already (the
"step after the episode ended" rule names the line it ended on). A Python dict of every id costs
~135 bytes an episode, so checking a long file grew with its length. `EndedEpisodes` keeps a
64-bit hash of each id and the line it ended on: 16 bytes an episode, in sorted numpy runs.

Hashes are Python's own `hash(str)` (SipHash, 64 bits on 64-bit platforms; cached on the string,
so it costs nothing extra). Two different ids with the same hash would make a step of the second
read as a step after the first ended: for n finished episodes the chance that any two collide is
about n² / 2⁶⁵ (2.7e-8 for a million episodes, 2.7e-4 for a hundred million), per file.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

_BUFFER = 4096
"""Recent ids held in a dict before they are sorted into a run (lookups there are cheapest)."""
_NO_LINE = -1


class EndedEpisodes:
    """A set of finished episode ids, each with the line (or None) it ended on.

    `id in ended`, `ended.line(id)`, `ended.add(id, line)`, `len(ended)`. Recent ids stay in a
    small dict; older ones live in sorted runs of (hash, line) merged like a binary counter, so
    adding n ids costs O(n log n) and a lookup one binary search per run (at most log2(n/4096)).
    """

    __slots__ = ("_recent", "_runs", "_count")

    def __init__(self) -> None:
        self._recent: dict[int, int] = {}
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []  # (sorted hashes, their lines)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __contains__(self, episode_id: object) -> bool:
        return self._find(hash(episode_id)) is not None

    def line(self, episode_id: str) -> int | None:
        """The line the episode ended on (None when not given or when it has not ended)."""
        found = self._find(hash(episode_id))
        return None if found is None or found == _NO_LINE else found

    def add(self, episode_id: str, line: int | None) -> None:
        """Note that `episode_id` ended on `line` (the caller knows it had not ended before)."""
        key = hash(episode_id)
        self._recent[key] = _NO_LINE if line is None else line
        self._count += 1
        if len(self._recent) >= _BUFFER:
            self._flush()

    def add_many(self, episode_ids: list[str], lines: list[int]) -> None:
        """`add` of each id with its line, in order (none of them had ended)."""
        recent = self._recent
        for eid, line in zip(episode_ids, lines):
            recent[hash(eid)] = line
            self._count += 1
            if len(recent) >= _BUFFER:
                self._flush()
                recent = self._recent

    def any_of(self, episode_ids: Iterable[str]) -> bool:
        """Whether any of `episode_ids` ended already (one vectorised search per run)."""
        keys = [hash(eid) for eid in episode_ids]
        recent = self._recent
        if any(k in recent for k in keys):
            return True
        if not self._runs or not keys:
            return False
        wanted = np.array(keys, dtype=np.int64)
        for hashes, _ in self._runs:
            at = np.searchsorted(hashes, wanted)
            at[at == len(hashes)] = 0
            if (hashes[at] == wanted).any():
                return True
        return False

    def discard(self, episode_id: str) -> None:
        """Forget an id (its count stays out of `len` too)."""
        key = hash(episode_id)
        if self._recent.pop(key, None) is not None:
            self._count -= 1
            return
        for i, (hashes, lines) in enumerate(self._runs):
            at = int(np.searchsorted(hashes, key))
            if at < len(hashes) and hashes[at] == key:
                if len(hashes) == 1:
                    del self._runs[i]  # no empty run is kept
                else:
                    self._runs[i] = (np.delete(hashes, at), np.delete(lines, at))
                self._count -= 1
                return

    def items(self) -> list[tuple[int, int | None]]:
        """Every (hash, line) pair, sorted by hash (what tests compare)."""
        pairs = list(self._recent.items())
        for hashes, lines in self._runs:
            pairs += zip(hashes.tolist(), lines.tolist())
        return sorted((h, None if n == _NO_LINE else n) for h, n in pairs)

    def _find(self, key: int) -> int | None:
        found = self._recent.get(key)
        if found is not None:
            return found
        for hashes, lines in self._runs:
            at = int(np.searchsorted(hashes, key))
            if at < len(hashes) and hashes[at] == key:
                return int(lines[at])
        return None

    def _flush(self) -> None:
        hashes = np.fromiter(self._recent.keys(), np.int64, len(self._recent))
        lines = np.fromiter(self._recent.values(), np.int64, len(self._recent))
        self._recent = {}
        order = np.argsort(hashes)
        run = (hashes[order], lines[order])
        while self._runs and len(self._runs[-1][0]) <= len(run[0]):
            older = self._runs.pop()
            merged_hashes = np.concatenate([older[0], run[0]])
            order = np.argsort(merged_hashes, kind="stable")
            run = (merged_hashes[order], np.concatenate([older[1], run[1]])[order])
        self._runs.append(run)
