"""Reading rollout files as validated steps or as episodes, whatever they are stored as.

A JSON Lines file (`lines.Lines`) or a Parquet file (`parquet.iter_parquet_records`) is a source
of records; both go through the same checks (`checking.StepChecker`, raising on the first broken
rule with its line) and the same episode assembly (`assembly.EpisodeAssembler`). Records a
sampler holds in memory (dicts or step models) go through the same loop: `steps_from_records`,
`episodes_from_records`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar, overload

from gyre_contract.core._errors import ContractError
from gyre_contract.core._models import RolloutStep, RolloutStepV1
from gyre_contract.io._assembly import EpisodeAssembler
from gyre_contract.io._checking import ProblemList, StepChecker
from gyre_contract.io._episodes import Episode
from gyre_contract.io._lines import Lines
from gyre_contract.io._parquet import (
    is_parquet,
    iter_parquet_records,
    read_parquet_episodes,
)

S = TypeVar("S", bound=RolloutStepV1)


@overload
def read_steps(path: str | os.PathLike[str], *,
               allow_partial_tail: bool = False) -> Iterator[RolloutStepV1]: ...
@overload
def read_steps(path: str | os.PathLike[str], model: type[S], *,
               allow_partial_tail: bool = False) -> Iterator[S]: ...


def read_steps(
    path: str | os.PathLike[str],
    model: type[RolloutStepV1] = RolloutStep,
    *,
    allow_partial_tail: bool = False,
) -> Iterator[Any]:
    """Yield each line as a validated `model` instance, streaming: memory holds one line and
    the episode ids seen, never the file.

    Checks the line (JSON, UTF-8, one object, no duplicate keys), the record (`validate_step`)
    and the episode rules that one step can break (step order, no step after a done step,
    policy_version never decreasing, no dimension jump). Raises ContractError, with line
    numbers, on the first line that breaks any of them: steps already yielded are good, the
    rest of the file is not read. Open episodes at the end are not an error here (a file may
    hold a slice of a run); use `validate_file(..., require_complete=True)` to require them.
    A truncated last line raises unless `allow_partial_tail=True`, which skips it.
    A Parquet file (`.parquet`, `.pq`) is read by rows, numbered from 1.
    """
    for _, step in numbered_steps(path, model, allow_partial_tail=allow_partial_tail):
        yield step


def numbered_steps(
    path: str | os.PathLike[str],
    model: type[RolloutStepV1] = RolloutStep,
    *,
    allow_partial_tail: bool = False,
) -> Iterator[tuple[int, Any]]:
    """`read_steps` with the line of each step (a Parquet file's row, numbered from 1), for
    a check made later on the collated rows that names the line of the step it refuses."""
    items: Iterable[Any] = iter_parquet_records(path, model) if is_parquet(path) else \
        Lines(path, allow_partial_tail=allow_partial_tail)
    take = StepChecker(model).item
    for item in items:
        found = take(item)
        if found is not None:
            yield found


def read_episodes(
    path: str | os.PathLike[str],
    model: type[RolloutStepV1] = RolloutStep,
    *,
    allow_partial_tail: bool = False,
    include_open: bool = True,
) -> Iterator[Episode]:
    """Yield the file's episodes as `Episode` columns, each when its last step arrives.

    Steps of different episodes may interleave (a vector env writes several at once); they are
    grouped by `episode_id`. An episode is yielded when its terminated or truncated step is
    read; episodes still open at the end of the file follow in order of first appearance
    (left out with `include_open=False`). Checks and errors are those of `read_steps`. Memory
    holds the steps of the episodes still open.
    """
    if is_parquet(path):
        yield from read_parquet_episodes(path, model, include_open=include_open)
        return
    episodes = EpisodeAssembler(model)
    lines = Lines(path, allow_partial_tail=allow_partial_tail)
    yield from StepChecker(model).feed(lines, episodes)
    if include_open:
        yield from episodes.rest()


def steps_from_records(
    records: Iterable[Mapping[str, Any] | RolloutStepV1],
    model: type[RolloutStepV1] = RolloutStep,
) -> list[RolloutStepV1]:
    """Step records (dicts or step models, in stream order) as validated `model` steps, in that
    order: the checks of `read_steps` (each record, then the episode rules one step can break),
    every problem raised together, located as `records[i]`."""
    problems = ProblemList()
    checker = StepChecker(model, problems)
    steps = [found[1] for n, record in enumerate(_plain(records))
             if (found := checker.record(n, record)) is not None]
    _raise(problems)
    return steps


def episodes_from_records(
    records: Iterable[Mapping[str, Any]], model: type[RolloutStepV1] = RolloutStep,
) -> list[Episode]:
    """Step records (any sampler's, in stream order) as `Episode` columns, in order of first step.

    Each record is validated and the episode rules applied (step + 1, nothing after a done
    step, ...) by io's one loop (`StepChecker`, as for a file: a record that fails validation
    still advances its episode); all problems are raised together, located as `records[i]`.
    """
    problems = ProblemList()
    checker = StepChecker(model, problems)
    assembler = EpisodeAssembler(model)
    episodes = list(checker.feed(enumerate(_plain(records)), assembler))
    checker.finish(require_complete=False)
    _raise(problems)
    episodes += assembler.rest()
    episodes.sort(key=lambda e: e.lines[0] if e.lines else 0)
    for episode in episodes:
        episode.lines = None  # not read from a file
    return episodes


def _plain(records: Iterable[Any]) -> Iterator[Any]:
    """Mappings as dicts: a record that fails validation advances its episode only when the
    checker can read its episode id and step, which it does of a dict; step models as they are."""
    return (r if r.__class__ is dict or not isinstance(r, Mapping) else dict(r) for r in records)


def _raise(problems: ProblemList) -> None:
    """Every problem of records held in memory, each located as `records[i]`."""
    if problems:
        raise ContractError([replace(p, line=None).under(f"records[{p.line}]")
                             if p.line is not None else p for p in problems])
