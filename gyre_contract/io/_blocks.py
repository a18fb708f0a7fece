"""Blocks of step records held in memory, validated at once, one block after another.

Why: a sampler hands over its steps a batch at a time (the channel's `put`), and validating them
one `validate_step` at a time costs tens of microseconds a record. `RecordBlocks.check` takes
a whole block on columns where the model allows: built from the records' values as they are
(`recordcols` for a model of fixed shapes, `raggedcols` for ragged token lists), else through
the bulk JSON Lines path (`fastfile`: each record serialised by orjson and decoded by msgspec
straight into typed columns), the episode rules vectorised. Each only ever accepts: a block
none can take whole goes record by record through `validate_step` and `EpisodeTracker`
(`checking.StepChecker`), which decide and explain. Verdicts and messages are the explaining
path's either way, and `GYRE_FAST_PATHS=0` sends every block that way.

The episode rules hold across blocks (one `EpisodeTracker`: an episode may go on in the next
block, its `step` then continues). A block is taken all or nothing: when it fails, every
problem is raised in one `ContractError` (paths `steps[i]`, `i` counted within the block) and
the tracker is as before it, so the sampler can fix the block and hand it over again.

A checked block is handed back as columns (`CheckedBlock`): each field some step carries, as an
`[n, ...]` array (numbers of one shape; a float field NaN on the steps that lack it) or as a
list with one value per step (`None` where absent; modalities as dicts). A block of ragged
lists keeps them as it checked them (`CheckedBlock.columnar`: a `Ragged` per list field,
`Objects` per field of modalities), what a channel segment is encoded from without an array
per step; `columns` gives them per step when asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel

from gyre_contract.core._errors import ContractError
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import RolloutStepV1
from gyre_contract.io import _arrowlines as arrowlines
from gyre_contract.io._binding import MAX_TRIES, Binder, bindable
from gyre_contract.io._checking import ProblemList, StepChecker, bulk_plan_for
from gyre_contract.io._fastfile import Block, BulkPlan, CodedIds
from gyre_contract.io._groups import GroupVersions
from gyre_contract.io._lines import Chunk
from gyre_contract.io._raggedcols import Leaf, Ragged, RaggedPlan, ragged_plan
from gyre_contract.io._recordcols import check_records

__all__ = ["CheckedBlock", "Objects", "RecordBlocks"]

_DUMPS = orjson.OPT_SERIALIZE_NUMPY


@dataclass
class Objects:
    """A column of modalities held as columns: each modality's values over the steps (a
    `Ragged`, an array, a list; `masks`: which steps hold it) and which steps hold the object
    (`present`)."""

    children: dict[str, Any]
    masks: dict[str, np.ndarray]
    present: np.ndarray

    def per_record(self) -> list[dict[str, Any] | None]:
        """One dict per step (None where the object is absent), as the record path gives."""
        children = [(child, _per_record(values), self.masks[child].tolist())
                    for child, values in self.children.items()]
        return [{child: values[i] for child, values, mask in children if mask[i]}
                if held else None for i, held in enumerate(self.present.tolist())]


@dataclass
class CheckedBlock:
    """The steps of one block that passed every record and episode rule, as columns."""

    n: int
    columnar: dict[str, Any]
    """Wire name -> an `[n, ...]` array or a list of n values (module doc), a `Ragged` (a field
    of lists: their values one after another and each step's length), `Objects` (modalities,
    each as such a column) or `CodedIds` (strings as codes into their distinct values), in
    the model's field order; only the fields some step carries. What a segment is encoded
    from: no array nor string per step."""
    episode_id: Sequence[str]
    policy_version: np.ndarray
    ended_ids: list[str]
    """The episodes this block ends (a terminated or truncated step), in order."""
    bulk: bool
    """Whether the bulk path took the block whole (else it went record by record)."""
    _columns: dict[str, Any] | None = None

    @property
    def columns(self) -> dict[str, Any]:
        """`columnar` with one value per step where it holds a `Ragged`, `Objects` or
        `CodedIds` (module doc): an array per step (None where absent), a dict per step, a
        str per step. Built when asked."""
        if self._columns is None:
            self._columns = {wire: _per_record(values) for wire, values in self.columnar.items()}
        return self._columns

    @property
    def episodes(self) -> int:
        """How many distinct episodes the block's steps belong to (coded ids: their distinct
        ids, none made row by row)."""
        ids = self.episode_id
        return len(ids.ids) if isinstance(ids, CodedIds) else len(set(ids))


def _per_record(values: Any) -> Any:
    if isinstance(values, CodedIds):
        return list(values)
    return values.per_record() if isinstance(values, (Ragged, Objects)) else values


class RecordBlocks:
    """Validates blocks of step records of one model, in order, with one episode tracker.

    `check` validates a block against the state the committed blocks left; `commit` makes it
    part of that state (call it once the block is safely stored), so a block that was checked
    but never stored (a full disk) leaves nothing behind. Ids of episodes that ended in a
    committed block are forgotten (`EpisodeTracker.forget`): memory holds the open episodes
    only, however long the sampler runs; an id reused after its episode ended in an earlier
    block is therefore not caught (within a block it is).
    """

    def __init__(self, model: type[RolloutStepV1]) -> None:
        self.model = model
        self._checker = StepChecker(model)
        self._checker.tracker.remember_ended = False  # `commit` forgets them: never hashed
        self._trial: tuple[StepChecker, CheckedBlock] | None = None
        self._binder = Binder(model) if bulk_plan_for(model) is None and bindable(model) \
            else None
        self.steps = 0
        """Steps committed so far, over every block."""

    def check(self, steps: Sequence[Any]) -> CheckedBlock:
        """Validate `steps` (dicts or step models) as the next block; raise ContractError with
        every problem (and change nothing) when one breaks a record or episode rule."""
        records = list(steps) if {dict} == set(map(type, steps)) else \
            [_record(step, i) for i, step in enumerate(steps)]
        if not records:
            raise ValueError("an empty block: give at least one step")
        trial = self._checker.copy()
        checked = self._bulk(trial, records)
        if checked is None:
            checked = self._one_by_one(trial, records)
        trial.group_versions = GroupVersions()  # per block: memory stays flat
        self._trial = (trial, checked)
        return checked

    def commit(self) -> None:
        """Make the block `check` last accepted part of the state the next block is checked
        against."""
        if self._trial is None:
            raise RuntimeError("commit() without a block checked since the last commit")
        trial, checked = self._trial
        trial.tracker.forget_many(checked.ended_ids)
        self._checker, self._trial = trial, None
        self.steps += checked.n

    def _bulk(self, trial: StepChecker, records: list[dict[str, Any]]) -> CheckedBlock | None:
        plan = bulk_plan_for(self.model)
        ragged = ragged_plan(self.model) if plan is None else None
        if ragged is not None:
            return self._ragged(trial, ragged, records)
        binder = self._binder
        if plan is None and (binder is None or binder.plan is None and binder.tries >= MAX_TRIES):
            return None  # no plan and none will be bound (modalities, ragged tokens): skip
        known = plan if plan is not None or binder is None else binder.plan
        if isinstance(known, RaggedPlan):
            return None  # not bound here (a binder made without `ragged`); kept as a guard
        block = None if known is None else check_records(known, records)
        if block is not None:  # the values as they are (`recordcols`), no JSON
            return _block_columns(block) if trial.accept(block, self.steps) else None
        try:
            lines = [orjson.dumps(r, option=_DUMPS) for r in records]
        except TypeError:
            return None  # a value orjson cannot write as it is: the normal path decides
        if plan is None and self._binder is not None:
            bound = self._binder.plan_for(lines)
            plan = bound if isinstance(bound, BulkPlan) else None
        if plan is None:
            return None
        block = trial.block(plan, lines, self.steps, arrays=True)
        return None if block is None else _block_columns(block)

    def _ragged(self, trial: StepChecker, plan: RaggedPlan, records: list[dict[str, Any]]
                ) -> CheckedBlock | None:
        """A block of a model of ragged lists (LLM steps), checked on its columns: built from
        the records' arrays as they are (`RaggedPlan.from_records`), else from their JSON
        (what the record path reads them as) by the Arrow reader (`arrowlines`)."""
        block = plan.from_records(records)
        if block is None and arrowlines.usable():
            reader = arrowlines.reader_for(plan)
            try:
                raw = b"\n".join([orjson.dumps(r, option=_DUMPS) for r in records]) + b"\n"
            except TypeError:
                return None  # a value orjson cannot write as it is: the record path decides
            if reader is not None:
                block = arrowlines.decode_chunk(plan, reader.read(Chunk(raw)), arrays=True)
        if block is None or not trial.accept(block, self.steps):
            return None
        return _ragged_columns(plan, block)

    def _one_by_one(self, trial: StepChecker, records: list[dict[str, Any]]) -> CheckedBlock:
        problems = ProblemList()
        trial.groups = problems
        steps = []
        for i, record in enumerate(records):
            found = trial.record(self.steps + i, record)
            if found is not None:
                steps.append(found[1])
        trial.groups = None
        if problems:
            raise ContractError([replace(p, line=None).under(f"steps[{p.line - self.steps}]")
                                 if p.line is not None else p for p in problems])
        return _step_columns(steps, self.model)


def _record(step: Any, index: int) -> dict[str, Any]:
    if step.__class__ is dict:
        return step
    record = step.to_record() if hasattr(step, "to_record") else step
    if isinstance(record, BaseModel):
        record = record.model_dump(by_alias=True, exclude_none=True)
    if not isinstance(record, Mapping):
        raise TypeError(f"steps[{index}]: expected a model or a dict, got {type(step).__name__}")
    return record if isinstance(record, dict) else dict(record)


def _block_columns(block: Block) -> CheckedBlock:
    assert block.arrays is not None
    columns: dict[str, Any] = {}
    for wire in block.plan.wires:
        if wire not in block.key_counts:
            continue
        array = block.arrays.get(wire)
        if array is not None:
            columns[wire] = array
            continue
        column = block.column(wire)
        columns[wire] = column if isinstance(column, CodedIds) else list(column)
    return _bulk_checked(block, columns)


def _bulk_checked(block: Block, columns: dict[str, Any]) -> CheckedBlock:
    """The block the bulk path took whole, with its columns and the episodes it ends."""
    done = np.flatnonzero(np.asarray(block.terminated) | np.asarray(block.truncated))
    ended = _ids_at(block.episode_id, done)
    return CheckedBlock(block.n, columns, block.episode_id,
                        np.asarray(block.policy_version, np.int64), ended, True)


def _ids_at(ids: Sequence[str], rows: np.ndarray) -> list[str]:
    """The ids of `rows` (coded ids: looked up by code, not row by row)."""
    if isinstance(ids, CodedIds):
        distinct = ids.ids
        return [distinct[c] for c in ids.codes[rows].tolist()]
    return [ids[i] for i in rows.tolist()]


def _ragged_columns(plan: RaggedPlan, block: Block) -> CheckedBlock:
    """A block checked by a ragged plan as `CheckedBlock` columns: a list field as a `Ragged`,
    modalities as `Objects`, a float scalar as an array (NaN where absent)."""
    strings, masks = block.extra["strings"], block.extra["masks"]

    def leaf_values(leaf: Leaf) -> Any:
        if leaf.dtype.kind == "U":
            column = strings[leaf.path]
            return column if isinstance(column, CodedIds) else list(column)
        if leaf.list:
            return block.ragged[leaf.path]
        values: np.ndarray = block.arrays[leaf.path]  # type: ignore[index, assignment]
        mask = masks[leaf.path]
        if values.dtype.kind == "f" or mask.all():
            return values
        return [v if held else None for v, held in zip(values.tolist(), mask.tolist())]

    columns: dict[str, Any] = {}
    for wire, leaves in plan.by_wire().items():
        if wire not in block.key_counts:
            continue
        if leaves[0].child is None:
            columns[wire] = leaf_values(leaves[0])
            continue
        held = [leaf for leaf in leaves if leaf.path in masks]
        columns[wire] = Objects({leaf.child: leaf_values(leaf) for leaf in held},  # type: ignore[misc]
                                {leaf.child: masks[leaf.path] for leaf in held},  # type: ignore[misc]
                                masks[wire])
    return _bulk_checked(block, columns)


def _step_columns(steps: list[Any], model: type[RolloutStepV1]) -> CheckedBlock:
    info = model_info(model)
    columns: dict[str, Any] = {}
    for wire in info.wires:
        attr = info.attr(wire)
        values = [_plain(getattr(s, attr)) for s in steps]
        if any(v is not None for v in values):
            columns[wire] = values
    ended = [s.episode_id for s in steps if s.terminated or s.truncated]
    return CheckedBlock(len(steps), columns, [s.episode_id for s in steps],
                        np.array([s.policy_version for s in steps], np.int64), ended, False)


def _plain(value: Any) -> Any:
    """A validated value as the columns hold it: modalities as a dict of their values."""
    if not isinstance(value, BaseModel):
        return value
    info = model_info(type(value))
    out = {}
    for wire in info.wires:
        item = getattr(value, info.attr(wire))
        if item is not None:
            out[wire] = _plain(item)
    return out
