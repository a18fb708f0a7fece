"""The ids of finished episodes, kept in memory that stays flat in the length of a file.

Why: the episode rules must know, for every later step, whether its episode ended already (the
"step after the episode ended" rule names the line it ended on). A Python dict of every id costs
~135 bytes an episode, so checking a long file grew with its length. `EndedEpisodes` keeps a
128-bit key of each id and the line it ended on: 24 bytes an episode (two int64 halves of the
key and an int64 line), in sorted numpy runs.

The key is `episode_key`: BLAKE2b with a 16-byte digest of the id's UTF-8 bytes. It is the same
in every process, on every platform and under every `PYTHONHASHSEED` (Python's own `hash(str)`
is salted per process), so a report never depends on the run that made it. Two different ids
with the same key would make a step of the second read as a step after the first ended: for n
finished episodes the chance that any two collide is about n² / 2¹²⁹ — 1.5e-21 for a billion
episodes in one file (one collision expected in some 7·10²⁰ such files). Should it happen, it
happens alike on every run and on either reading path (see `validate.EpisodeTracker`).
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import blake2b

import numpy as np

_BUFFER = 4096
"""Recent keys held in a dict before they are sorted into a run (lookups there are cheapest)."""
_NO_LINE = -1
_DIRECT = 256
"""From this many keys at once (`add_keys`), they make a run without passing through the dict."""
KEY_BYTES = 16
"""Bytes of an episode key (128 bits)."""


def episode_key(episode_id: str) -> bytes:
    """The 128-bit key of an episode id: BLAKE2b (16-byte digest) of its UTF-8 bytes (a lone
    surrogate, which no JSON reader gives but a Python caller may, encoded as itself)."""
    return blake2b(episode_id.encode("utf-8", "surrogatepass"), digest_size=KEY_BYTES).digest()


def episode_keys(episode_ids: Sequence[str]) -> np.ndarray:
    """The keys of many ids at once, as an int64 array [n, 2] (the two halves of each key)."""
    joined = b"".join([episode_key(eid) for eid in episode_ids])
    return np.frombuffer(joined, "<i8").reshape(-1, 2)


def _halves(key: bytes) -> tuple[int, int]:
    return (int.from_bytes(key[:8], "little", signed=True),
            int.from_bytes(key[8:], "little", signed=True))


class EndedEpisodes:
    """A set of finished episode ids, each with the line (or None) it ended on.

    `id in ended`, `ended.line(id)`, `ended.add(id, line)`, `len(ended)`. Recent keys stay in a
    small dict; older ones live in runs of (first half, second half, line) sorted by the first
    half and merged like a binary counter, so adding n ids costs O(n log n) and a lookup one
    binary search per run (at most log2(n/4096)); the second halves are compared among equal
    first halves. Memory: 24 bytes a finished episode, twice that for a moment while two runs
    merge.
    """

    __slots__ = ("_recent", "_runs", "_count", "_last")

    def __init__(self) -> None:
        self._recent: dict[bytes, int] = {}
        self._runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (hi, lo, lines)
        self._count = 0
        self._last: tuple[str, bytes] = ("", episode_key(""))  # `in` then `line`: one digest

    def __len__(self) -> int:
        return self._count

    def copy(self) -> EndedEpisodes:
        """An independent copy: the held runs' arrays are shared (no method changes an array in
        place; `discard` and `_push` put new ones in their place), the rest is copied."""
        other = EndedEpisodes.__new__(EndedEpisodes)
        other._recent = dict(self._recent)
        other._runs = list(self._runs)
        other._count = self._count
        other._last = self._last
        return other

    def __contains__(self, episode_id: object) -> bool:
        return isinstance(episode_id, str) and self._find(self._key(episode_id)) is not None

    def line(self, episode_id: str) -> int | None:
        """The line the episode ended on (None when not given or when it has not ended)."""
        found = self._find(self._key(episode_id))
        return None if found is None or found == _NO_LINE else found

    def add(self, episode_id: str, line: int | None) -> None:
        """Note that `episode_id` ended on `line` (the caller knows it had not ended before)."""
        self._recent[self._key(episode_id)] = _NO_LINE if line is None else line
        self._count += 1
        if len(self._recent) >= _BUFFER:
            self._flush()

    def add_keys(self, keys: np.ndarray, lines: Sequence[int]) -> None:
        """`add` of many ids by their keys (`episode_keys`), each with its line, in order (none
        of them had ended). Many at once go straight into a run of their own."""
        if len(keys) >= _DIRECT:
            self._flush()
            self._push(keys, np.asarray(lines, np.int64))
            self._count += len(keys)
            return
        recent = self._recent
        for key, line in zip(_as_bytes(keys), lines):
            recent[key] = line
            self._count += 1
            if len(recent) >= _BUFFER:
                self._flush()
                recent = self._recent

    def add_many(self, episode_ids: Sequence[str], lines: Sequence[int]) -> None:
        """`add` of each id with its line, in order (none of them had ended)."""
        self.add_keys(episode_keys(episode_ids), lines)

    def any_keys(self, keys: np.ndarray) -> bool:
        """Whether any of `keys` (`episode_keys`) is the key of an ended id (one vectorised
        search per run)."""
        if not len(keys):
            return False
        recent = self._recent
        if recent and any(k in recent for k in _as_bytes(keys)):
            return True
        hi_wanted, lo_wanted = keys[:, 0], keys[:, 1]
        for hi, lo, _ in self._runs:
            left = np.searchsorted(hi, hi_wanted, "left")
            right = np.searchsorted(hi, hi_wanted, "right")
            for i in np.flatnonzero(right > left).tolist():
                if (lo[left[i]:right[i]] == lo_wanted[i]).any():
                    return True
        return False

    def any_of(self, episode_ids: Sequence[str]) -> bool:
        """Whether any of `episode_ids` ended already."""
        return self.any_keys(episode_keys(episode_ids))

    def discard(self, episode_id: str) -> None:
        """Forget an id (its count stays out of `len` too)."""
        key = self._key(episode_id)
        if self._recent.pop(key, None) is not None:
            self._count -= 1
            return
        for i, run in enumerate(self._runs):
            at = _position(run, key)
            if at is not None:
                if len(run[0]) == 1:
                    del self._runs[i]  # no empty run is kept
                else:
                    hi, lo, lines = run
                    self._runs[i] = (np.delete(hi, at), np.delete(lo, at), np.delete(lines, at))
                self._count -= 1
                return

    def discard_many(self, episode_ids: Sequence[str]) -> None:
        """`discard` of each id, with one vectorised search and one deletion per run (a block
        that ends a thousand episodes forgets them at once)."""
        if not self._count:
            return  # none held: nothing to hash
        keys = episode_keys(list(dict.fromkeys(episode_ids)))
        recent, left = self._recent, []
        for i, key in enumerate(_as_bytes(keys)):
            if recent.pop(key, None) is not None:
                self._count -= 1
            else:
                left.append(i)
        keys = keys[left]
        for r in range(len(self._runs) - 1, -1, -1):
            if not len(keys):
                return
            hi, lo, lines = self._runs[r]
            start = np.searchsorted(hi, keys[:, 0], "left")
            stop = np.searchsorted(hi, keys[:, 0], "right")
            drop, found = [], []
            for k in np.flatnonzero(stop > start).tolist():
                for at in range(int(start[k]), int(stop[k])):
                    if lo[at] == keys[k, 1]:
                        drop.append(at)
                        found.append(k)
                        break
            if not drop:
                continue
            self._count -= len(drop)
            if len(drop) == len(hi):
                del self._runs[r]  # no empty run is kept
            else:
                self._runs[r] = (np.delete(hi, drop), np.delete(lo, drop), np.delete(lines, drop))
            keys = np.delete(keys, found, axis=0)

    def items(self) -> list[tuple[bytes, int | None]]:
        """Every (key, line) pair, sorted by key (what tests compare)."""
        pairs = list(self._recent.items())
        for hi, lo, lines in self._runs:
            pairs += zip(_as_bytes(np.stack([hi, lo], axis=1)), lines.tolist())
        return sorted((k, None if n == _NO_LINE else n) for k, n in pairs)

    def _key(self, episode_id: str) -> bytes:
        last_id, last_key = self._last
        if episode_id is last_id or episode_id == last_id:
            return last_key
        key = episode_key(episode_id)
        self._last = (episode_id, key)
        return key

    def _find(self, key: bytes) -> int | None:
        found = self._recent.get(key)
        if found is not None:
            return found
        for run in self._runs:
            at = _position(run, key)
            if at is not None:
                return int(run[2][at])
        return None

    def _flush(self) -> None:
        if not self._recent:
            return
        keys = np.frombuffer(b"".join(self._recent.keys()), "<i8").reshape(-1, 2)
        lines = np.fromiter(self._recent.values(), np.int64, len(self._recent))
        self._recent = {}
        self._push(keys, lines)

    def _push(self, keys: np.ndarray, lines: np.ndarray) -> None:
        """Sort keys and their lines into a run, merging the runs no larger than it."""
        order = np.argsort(keys[:, 0], kind="stable")
        run = (keys[order, 0], keys[order, 1], lines[order])
        while self._runs and len(self._runs[-1][0]) <= len(run[0]):
            older = self._runs.pop()
            hi = np.concatenate([older[0], run[0]])
            order = np.argsort(hi, kind="stable")
            run = (hi[order], np.concatenate([older[1], run[1]])[order],
                   np.concatenate([older[2], run[2]])[order])
        self._runs.append(run)


def _as_bytes(keys: np.ndarray) -> list[bytes]:
    """Each row of an int64 [n, 2] key array as the 16 bytes of its key."""
    raw = np.ascontiguousarray(keys, "<i8").tobytes()
    return [raw[i:i + KEY_BYTES] for i in range(0, len(raw), KEY_BYTES)]


def _position(run: tuple[np.ndarray, np.ndarray, np.ndarray], key: bytes) -> int | None:
    """Where `key` sits in a run, or None."""
    hi, lo, _ = run
    first, second = _halves(key)
    at = int(np.searchsorted(hi, first))
    while at < len(hi) and hi[at] == first:
        if lo[at] == second:
            return at
        at += 1
    return None
