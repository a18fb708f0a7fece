"""Validate → track: the one loop every record source goes through (docs/contract.md §3).

A source is anything that yields `(line, record)` items (or `lines.Parsed` for a line that is
not a clean record): a JSON Lines file (`lines.Lines`), the rows of a Parquet file, a shard on
a Ray worker. `StepChecker` validates each record with `validate_step`, applies the episode
rules with one `EpisodeTracker`, and either collects every problem in `ProblemGroups` (what
`validate_file` reports) or raises on the first (what `read_steps` and `read_episodes` do).
Completed episodes go to an `EpisodeAssembler` when one is given, so reading episodes and
checking a file share this one loop whatever the source.
"""

from __future__ import annotations

import contextvars
import copy
import gc
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from gyre_contract.core._errors import ContractError, Problem
from gyre_contract.core._models import RolloutStepV1
from gyre_contract.core._switches import fast_paths_enabled
from gyre_contract.core._validate import EpisodeTracker, validate_step
from gyre_contract.io import _arrowlines as arrowlines
from gyre_contract.io import _ducklines as ducklines
from gyre_contract.io._binding import Binder, bindable
from gyre_contract.io._episodes import Episode
from gyre_contract.io._fastfile import Block, BulkPlan, CodedIds, bulk_plan
from gyre_contract.io._groups import GroupVersions
from gyre_contract.io._lines import Chunk, Item, Lines
from gyre_contract.io._raggedcols import RaggedPlan, ragged_plan
from gyre_contract.io._report import FieldStats, FileReport, ProblemGroups, finish_report


def bulk_plan_for(model: type[RolloutStepV1]) -> BulkPlan | None:
    """The bulk JSON Lines plan of `model`; None when the model is not simple enough for it or
    when `GYRE_FAST_PATHS=0` turns fast paths off (then every line goes one by one)."""
    return bulk_plan(model) if fast_paths_enabled() else None


@runtime_checkable
class _BatchSource(Protocol):
    """A source checked a batch at a time (`parquet.ParquetRows`): each batch decoded on its
    columns where it can be (`decode_block`), else parsed into items."""

    def blocks(self) -> Iterator[tuple[int, Any]]: ...
    def parse(self, first: int, batch: Any) -> Iterator[Item]: ...
    def decode_block(self, batch: Any, arrays: bool = False, ragged: bool = True
                     ) -> Block | None: ...


class _EpisodeSink(Protocol):
    """What `StepChecker.feed` hands each valid step and each checked block to: an
    `EpisodeAssembler`, or the columnar reader's sink (which keeps blocks whole)."""

    def add(self, n: int, step: RolloutStepV1) -> Episode | None: ...
    def add_block(self, checked: Block, first: int) -> list[Episode]: ...


class ProblemList(list[Problem]):
    """Every problem, in order, with nothing grouped: a `StepChecker` sink for callers that raise
    them all together (`reading.episodes_from_records`)."""

    def add(self, problems: Iterable[Problem]) -> None:
        """Keep `problems` (what `ProblemGroups.add` is to a file report)."""
        self.extend(problems)


class StepChecker:
    """Checks the records of one source in order: record rules, then episode rules.

    With `groups` (or a `ProblemList`), every problem is added there (with its line) and checking
    goes on; without,
    the first problem raises ContractError. `stats`, when given, sees every record and every
    valid step (the field table of the report). `episode_ids`, when given, gets each episode id
    a record names with the first line it is on (how shards are compared). `records` and
    `steps` count what was checked.
    """

    def __init__(self, model: type[RolloutStepV1], groups: ProblemGroups | ProblemList | None = None,
                 stats: FieldStats | None = None,
                 episode_ids: dict[str, int] | None = None) -> None:
        self.model = model
        self.groups = groups
        self.stats = stats
        self.episode_ids = episode_ids
        self.tracker = EpisodeTracker(model)
        self.group_versions = GroupVersions()
        self.records = 0
        self.steps = 0

    def copy(self) -> StepChecker:
        """An independent copy of this checker's state (`io.RecordBlocks` checks each block on
        one and keeps it only when the block is stored); its sinks, when it has any, are
        deep-copied."""
        other = copy.copy(self)
        other.tracker = self.tracker.copy()
        other.group_versions = self.group_versions.copy()
        for name in ("groups", "stats", "episode_ids"):
            sink = getattr(self, name)
            if sink is not None:
                setattr(other, name, copy.deepcopy(sink))
        return other

    def problems(self, problems: Iterable[Problem]) -> None:
        """Collect `problems`, or raise them when this checker collects nothing."""
        if self.groups is not None:
            self.groups.add(problems)
            return
        problems = list(problems)
        if problems:
            raise ContractError(problems)

    def item(self, item: Item) -> tuple[int, RolloutStepV1] | None:
        """One line or row of a source; its `(line, step)` when the record is a valid step."""
        if isinstance(item, tuple):
            return self.record(*item)
        self.problems(item.problems)
        record = item.record
        return None if record is None else self.record(item.line, record)

    def record(self, n: int, record: Any) -> tuple[int, RolloutStepV1] | None:
        """Validate one record found on line (or row) `n`, then apply the episode rules."""
        self.records += 1
        if self.stats is not None:
            self.stats.record(record)
        if self.episode_ids is not None:
            eid = record.get("episode_id") if isinstance(record, dict) else None
            if isinstance(eid, str) and eid and eid not in self.episode_ids:
                self.episode_ids[eid] = n
        try:
            step = validate_step(record, self.model)
        except ContractError as err:
            problems = [p.at_line(n) for p in err.problems]
        else:
            return self.step(n, step)
        self.problems(problems)
        self.skip(record, n)
        return None

    def checked(self, n: int, keys: dict[str, Any], step: Any,
                problems: list[Problem] | None) -> tuple[int, RolloutStepV1] | None:
        """A record validated elsewhere (a Ray worker): its keys, and its step or, with
        `problems`, the `lost` part of it (episode id and step, where it had them)."""
        self.records += 1
        if self.stats is not None:
            self.stats.record(keys)
        if problems is None:
            return self.step(n, step)
        self.problems([p.at_line(n) for p in problems])
        self.skip(step, n)
        return None

    def step(self, n: int, step: RolloutStepV1) -> tuple[int, RolloutStepV1]:
        """A valid step: count it, note its values, apply the episode rules."""
        self.steps += 1
        if self.stats is not None:
            self.stats.step(step)
        group_id = getattr(step, "group_id", None)
        if group_id is not None:
            self.group_versions.add(group_id, step.policy_version)
        found = self.tracker.add(step, n)
        if found:
            self.problems(found)
        return n, step

    def skip(self, record: Any, n: int) -> None:
        """A step that failed validation still advances its episode, when it says which one."""
        if isinstance(record, dict):
            eid, step = record.get("episode_id"), record.get("step")
            if isinstance(eid, str) and isinstance(step, int) and not isinstance(step, bool):
                self.tracker.skip(eid, step, n)

    def block(self, bulk: BulkPlan, block: list[Any], first: int, *,
              arrays: bool = False) -> Block | None:
        """Check a block of lines at once; None (nothing changed) when it must go line by line."""
        checked = bulk.decode(block, arrays=arrays)
        return checked if checked is not None and self.accept(checked, first) else None

    def accept(self, checked: Block, first: int) -> bool:
        """Apply the episode rules to a decoded block and count it; False (nothing changed)
        when it must go line by line."""
        bulk = checked.plan
        ids = checked.episode_id
        if not self.tracker.add_columns(
                ids, checked.step, checked.policy_version, checked.terminated,
                checked.truncated, first,
                None if bulk.bound is None else bulk.bound.for_block(checked),
                (ids.codes, ids.ids) if isinstance(ids, CodedIds) else None):
            return False
        self.records += checked.n
        self.steps += checked.n
        if self.stats is not None:
            self.stats.counted(checked.key_counts, bulk.array_counts(checked))
        if "group_id" in checked.key_counts:
            self.group_versions.add_many(checked.column("group_id"), checked.policy_version)
        if self.episode_ids is not None:
            known = self.episode_ids
            for i, eid in enumerate(checked.episode_id):
                if eid not in known:
                    known[eid] = first + i
        return True

    def feed(self, source: Lines | _BatchSource | Iterable[Item],
             episodes: _EpisodeSink | None = None) -> Iterator[Episode]:
        """Check every item of `source`, in order; yield the episodes that `episodes` completes.

        A JSON Lines source is checked a block at a time where the model allows: read into
        Arrow columns (`arrowlines`), else decoded by msgspec (`fastfile`), else, like any
        other source, item by item. Same problems, lines and counts either way.
        """
        if isinstance(source, _BatchSource):  # a typed source checked a batch at a time
            yield from self._typed(source, episodes)
            return
        if not isinstance(source, Lines):
            yield from self._items(source, episodes)
            return
        arrow = arrowlines.usable()
        bulk: BulkPlan | RaggedPlan | None = bulk_plan_for(self.model)
        if bulk is None and arrow and takes_ragged(episodes):
            bulk = ragged_plan(self.model)  # lists of any length: on columns only
        binder = None
        if bulk is None and bindable(self.model):
            # an unpinned model: bind what the file shows (ragged lists: on columns, for a report)
            binder = Binder(self.model, ragged=arrow and episodes is None)
        if bulk is None and binder is None:
            yield from self._items(source, episodes)
            return
        arrays = episodes is not None
        columns = _Columns(source.path, bulk) if arrow else None
        blocks = source.blocks(None if columns is None else columns.chunk_bytes)
        try:
            for first, block, plan, table in _ahead(blocks, binder, bulk, columns):
                checked = None
                if plan is not None:
                    if table is not _UNREAD:
                        checked = columns.decode(plan, table, arrays)  # type: ignore[union-attr]
                        if checked is not None and not self.accept(checked, first):
                            checked = None
                    if checked is None and isinstance(plan, BulkPlan):
                        checked = self.block(plan, block, first, arrays=arrays)
                if checked is None:
                    yield from self._items(source.parse(first, block), episodes)
                elif episodes is not None:
                    yield from episodes.add_block(checked, first)
        finally:
            if columns is not None:
                columns.close()
        tail = source.tail_item()
        if tail is not None:
            yield from self._items((tail,), episodes)

    def _typed(self, source: _BatchSource, episodes: _EpisodeSink | None) -> Iterator[Episode]:
        """`feed` over a source of typed batches (`parquet.ParquetRows`): each batch checked on
        its columns where it can be, else row by row. Episodes are assembled from rows (a
        checked batch keeps no lines to rebuild a mixed episode from), except for a sink that
        takes blocks whole (`columnar`)."""
        whole = episodes is None or getattr(episodes, "takes_blocks", False)
        ragged = takes_ragged(episodes)
        for first, batch in source.blocks():
            checked = source.decode_block(batch, arrays=episodes is not None, ragged=ragged) \
                if whole else None
            if checked is not None and self.accept(checked, first):
                if episodes is not None:
                    yield from episodes.add_block(checked, first)
            else:
                yield from self._items(source.parse(first, batch), episodes)

    def _items(self, items: Iterable[Item], episodes: _EpisodeSink | None
               ) -> Iterator[Episode]:
        take = self.item
        if episodes is None:
            for item in items:
                take(item)
            return
        for item in items:
            found = take(item)
            if found is not None:
                episode = episodes.add(*found)
                if episode is not None:
                    yield episode

    def finish(self, require_complete: bool) -> None:
        """The problems known only at the end: open episodes, when completeness is required."""
        self.problems(self.tracker.finish(require_complete))

    def report(self, *, path: str | os.PathLike[str], lines: int, require_complete: bool,
               tail_bytes: int = 0) -> FileReport:
        """The `FileReport` of what was checked (call `finish` first); needs `groups`, `stats`."""
        assert isinstance(self.groups, ProblemGroups) and self.stats is not None
        t = self.tracker
        report = FileReport(
            path="", checked_against=f"model {self.model.__name__}", records=self.records,
            steps=self.steps, episodes=t.episodes, open_episodes=len(t.open_episodes),
            terminated=t.terminated, truncated=t.truncated,
            policy_versions=sorted(t.policy_versions),
            warning_list=self.group_versions.warnings())
        return finish_report(report, self.groups, self.stats, path=path, lines=lines,
                             require_complete=require_complete, tail_bytes=tail_bytes)


class _Columns:
    """The Arrow tier of `StepChecker.feed` over one file: each chunk read into columns on a
    helper thread while the chunk before it is checked on this one, by DuckDB's JSON functions
    then pyarrow's JSON reader (`duck`: `ducklines.chosen`), else by pyarrow's alone
    (`arrowlines.ArrowLines.read`). After `MAX_REFUSALS` chunks in a row that it could not
    take (a file whose lines all hold `info`, or another form it steps aside for), the file's
    other chunks skip it.

    The choice waits for the first chunk (`duck` None until then; that chunk is DuckDB's size
    when the file is `ducklines.likely` to be read there): an unpinned model's plan is known
    once the file's first lines bind it (`Binder`), and a first chunk holding an escape (the
    newlines of an LLM prompt's text: DuckDB's path reads no chunk with a backslash) sends the
    file to pyarrow alone. A file whose plan DuckDB does not read (a list of strings) or whose
    first chunk holds an escape neither imports duckdb nor takes its larger chunks after the
    first; one whose escapes come later goes to pyarrow alone after `MAX_DUCK_MISSES` chunks.
    (100 MB of completions, each with an escaped prompt text, fresh `validate`: 1.17-1.56 s
    and 135-139 MB with pyarrow alone; 1.39-1.69 s and 196 MB when DuckDB was tried on every
    chunk.)"""

    MAX_REFUSALS = 8
    MAX_DUCK_MISSES = 2

    def __init__(self, path: str | os.PathLike[str], plan: BulkPlan | RaggedPlan | None) -> None:
        self.path = path
        self.duck: bool | None = None  # chosen with the first chunk (`submit`)
        self.first = ducklines.chunk_bytes() if ducklines.likely(path) and \
            (plan is None or ducklines.simple(plan)) else arrowlines.chunk_bytes()
        self.refusals = 0
        self.duck_misses = 0
        self.pool: ThreadPoolExecutor | None = None

    def chunk_bytes(self) -> int:
        """The size of the file's next chunk (`lines.LineSource` asks before each read)."""
        if self.duck is None:
            return self.first
        return ducklines.chunk_bytes() if self.duck else arrowlines.chunk_bytes()

    def submit(self, plan: BulkPlan | RaggedPlan | None, block: Any) -> Future[Any] | None:
        """Start reading `block` when it may be read into columns."""
        if self.duck is None and plan is not None:  # the first plan bound, the first chunk
            self.duck = not (block.__class__ is Chunk and block.raw.find(b"\\") >= 0) \
                and ducklines.chosen(self.path, plan)
        reader = None if plan is None or block.__class__ is not Chunk \
            or self.refusals >= self.MAX_REFUSALS else \
            ducklines.reader_for(plan) if self.duck else arrowlines.reader_for(plan)
        if reader is None:
            return None
        if self.pool is None:
            self.pool = ThreadPoolExecutor(arrowlines.READERS,
                                           thread_name_prefix="gyre-arrow-lines")
        if isinstance(reader, ducklines.Chained):
            return self.pool.submit(contextvars.copy_context().run, self._chained, reader, block)
        return self.pool.submit(contextvars.copy_context().run, reader.read, block)

    def _chained(self, reader: ducklines.Chained, block: Chunk) -> Any:
        """DuckDB's reading of `block`, else pyarrow's (`ducklines.Chained.read`). After
        `MAX_DUCK_MISSES` chunks in a row that pyarrow read and DuckDB did not (escaped strings,
        such as the newlines of an LLM prompt's text), the file's chunks not read yet go to
        pyarrow alone, at its size: DuckDB's larger chunks only cost memory there."""
        table, by_duckdb = reader.read(block)
        if by_duckdb:
            self.duck_misses = 0
        elif table is not None:
            self.duck_misses += 1
            if self.duck_misses >= self.MAX_DUCK_MISSES:
                self.duck = False
        return table

    def decode(self, plan: BulkPlan | RaggedPlan, table: Any, arrays: bool) -> Block | None:
        checked = arrowlines.decode_chunk(plan, table, arrays)
        self.refusals = 0 if checked is not None else self.refusals + 1
        return checked

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def _ahead(blocks: Iterator[tuple[int, Any]], binder: Binder | None,
           bulk: BulkPlan | RaggedPlan | None, columns: _Columns | None
           ) -> Iterator[tuple[int, Any, BulkPlan | RaggedPlan | None, Any]]:
    """(first line, block, its plan, its Arrow table: None when the reader refused it, `_UNREAD`
    when it was not given the block) of each block, in order; the next block's table is being
    read while the caller checks this one."""
    pending: deque[tuple[int, Any, BulkPlan | RaggedPlan | None, Future[Any] | None]] = deque()
    for first, block in blocks:
        plan = bulk if binder is None else binder.plan_for(block)
        pending.append((first, block, plan, None if columns is None
                        else columns.submit(plan, block)))
        if len(pending) > arrowlines.READERS:
            yield _settled(*pending.popleft())
    while pending:
        yield _settled(*pending.popleft())


def _settled(first: int, block: Any, plan: BulkPlan | RaggedPlan | None,
             future: Future[Any] | None) -> tuple[int, Any, BulkPlan | RaggedPlan | None, Any]:
    return first, block, plan, _UNREAD if future is None else future.result()


_UNREAD = object()
"""`_ahead`'s table of a block not given to the Arrow reader (a table it refused is None)."""


def takes_ragged(episodes: Any) -> bool:
    """Whether a `feed` sink takes blocks of ragged lists (`raggedcols`) whole: none (a report),
    or one that says so (an `EpisodeAssembler` builds episodes from blocks it cannot split)."""
    return episodes is None or getattr(episodes, "takes_ragged", False)


def unread_report(model: type[RolloutStepV1], problems: list[Problem], *,
                  path: str | os.PathLike[str], lines: int, require_complete: bool,
                  max_examples_per_group: int) -> FileReport:
    """The report of a file whose records were not read (e.g. its Parquet schema disagrees):
    those problems, no counts, episode rules not checked."""
    groups = ProblemGroups(max_examples_per_group)
    groups.add(problems)
    return finish_report(FileReport(path="", checked_against=f"model {model.__name__}"), groups,
                         FieldStats(model), path=path, lines=lines,
                         require_complete=require_complete)


def check_items(items: Lines | _BatchSource | Iterable[Item], model: type[RolloutStepV1], *,
                path: str | os.PathLike[str], require_complete: bool,
                max_examples_per_group: int, lines: int | None = None,
                episode_ids: dict[str, int] | None = None) -> FileReport:
    """Stage 1 over any source: every item checked, every problem grouped, one `FileReport`.

    `lines` is how many lines or rows the source held (a `Lines` source counts its own). The
    cyclic GC is paused meanwhile: nothing is held from item to item. `episode_ids`: see
    `StepChecker`.
    """
    checker = StepChecker(model, ProblemGroups(max_examples_per_group), FieldStats(model),
                          episode_ids)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in checker.feed(items):
            pass
    finally:
        if gc_was_enabled:
            gc.enable()
    checker.finish(require_complete)
    if isinstance(items, Lines):
        return checker.report(path=path, lines=items.lines, require_complete=require_complete,
                              tail_bytes=items.tail_bytes)
    if lines is None:
        raise TypeError("check_items: give `lines` (how many rows the source held)")
    return checker.report(path=path, lines=lines, require_complete=require_complete)
