"""The one episode assembler: checked steps, in file order, grouped into `Episode`s by id.

Steps of different episodes may interleave (a vector env writes several at once). An episode
is complete at its terminated or truncated step; `rest()` gives those still open at the end, in
order of first appearance. Steps arrive one at a time (any source) or as rows of a block the
bulk JSON Lines path checked at once (`fastfile.Block`); an episode made only of such rows is
built from the block's arrays, one mixing both from validated steps. Same columns either way.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any

from gyre_contract.core._models import RolloutStepV1
from gyre_contract.core._validate import validate_step
from gyre_contract.io._episodes import Episode, episode_from_steps
from gyre_contract.io._fastfile import Block, id_runs


@dataclass(frozen=True, slots=True)
class _Rows:
    """Steps of one episode inside a bulk-checked block: the block, the rows, their lines."""

    block: Block
    rows: Any  # a slice or a list of row indices
    lines: list[int]


class EpisodeAssembler:
    """Holds the steps of the episodes still open; hands over each episode when it ends."""

    def __init__(self, model: type[RolloutStepV1]) -> None:
        self.model = model
        self.open: dict[str, list[Any]] = {}  # (line, step) pairs and _Rows

    def add(self, n: int, step: Any) -> Episode | None:
        """A valid step found on line `n`; the episode it ends, if it ends one."""
        steps = self.open.setdefault(step.episode_id, [])
        steps.append((n, step))
        if step.terminated or step.truncated:
            del self.open[step.episode_id]
            return self._episode(step.episode_id, steps)
        return None

    def add_block(self, checked: Block, first: int) -> list[Episode]:
        """File a bulk-checked block's rows under their episodes; the episodes it ends, in order.

        The cyclic GC is paused meanwhile (not while the caller holds the episodes): building
        the columns allocates many objects that hold no cycle.
        """
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            ended = []
            for eid, rows, done in episode_rows(checked):
                numbers = range(first, first + checked.n)[rows] if rows.__class__ is slice else \
                    [first + i for i in rows]
                self.open.setdefault(eid, []).append(_Rows(checked, rows, list(numbers)))
                if done:
                    ended.append((numbers[-1], eid))
            return [self._episode(eid, self.open.pop(eid)) for _, eid in sorted(ended)]
        finally:
            if gc_was_enabled:
                gc.enable()

    def rest(self) -> list[Episode]:
        """The episodes still open, in order of first appearance (and forget them)."""
        out = [self._episode(eid, parts) for eid, parts in self.open.items()]
        self.open = {}
        return out

    def _episode(self, episode_id: str, parts: list[Any]) -> Episode:
        """The episode of steps read one by one, in bulk, or both (then all as model instances)."""
        if all(part.__class__ is _Rows for part in parts):
            lines = parts[0].lines if len(parts) == 1 else [n for p in parts for n in p.lines]
            return parts[0].block.plan.episode(episode_id, [(p.block, p.rows) for p in parts],
                                               lines)
        steps: list[tuple[int, RolloutStepV1]] = []
        for part in parts:
            if part.__class__ is not _Rows:
                steps.append(part)
                continue
            rows = part.rows
            indices = range(rows.start, rows.stop) if rows.__class__ is slice else rows
            for i, n in zip(indices, part.lines):
                record = {k: v[i] for k, v in part.block.columns.items() if v[i] is not None}
                steps.append((n, validate_step(record, self.model)))
        return episode_from_steps(steps, self.model)


def episode_rows(block: Block) -> list[tuple[str, Any, bool]]:
    """(episode id, its rows in the block, whether its last row ends it), by first appearance.

    Rows are a slice when the episode's lines are contiguous (the usual case), else a list.
    """
    starts, names = id_runs(block.episode_id)
    bounds = [*starts.tolist(), block.n]
    index: dict[str, list[tuple[int, int]]] = {}
    for name, start, stop in zip(names, bounds[:-1], bounds[1:]):
        index.setdefault(name, []).append((start, stop))
    done = (block.terminated | block.truncated).tolist()
    out = []
    for eid, runs in index.items():
        if len(runs) == 1:
            rows: Any = slice(*runs[0])
            last = runs[0][1] - 1
        else:
            rows = [i for a, b in runs for i in range(a, b)]
            last = rows[-1]
        out.append((eid, rows, done[last]))
    return out
