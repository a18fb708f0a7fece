"""Stage 1: check a whole rollout file and report every problem with its line (docs/contract.md §3).

`validate_file` picks the source by the file's extension (JSON Lines, or Parquet by rows) and
the check (a step model, or a JSON Schema document for JSON Lines); every source ends in the same
`FileReport`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from gyre_contract.core._errors import InputError
from gyre_contract.core._models import RolloutStep, RolloutStepV1
from gyre_contract.io._checking import check_items
from gyre_contract.io._lines import Lines
from gyre_contract.io._parquet import is_parquet, validate_parquet
from gyre_contract.io._report import FileReport
from gyre_contract.io._schemamode import check_with_schema


def validate_file(
    path: str | os.PathLike[str],
    model: type[RolloutStepV1] = RolloutStep,
    *,
    schema: Mapping[str, Any] | None = None,
    require_complete: bool = False,
    allow_partial_tail: bool = False,
    max_examples_per_group: int = 3,
) -> FileReport:
    """Stage 1: check every line of a rollout file; return a report, raise only if unreadable.

    Each line is parsed (see `lines` for what counts as a bad line), validated
    with `validate_step(record, model)`, and fed to an `EpisodeTracker` for the episode rules.
    With `schema` (a JSON Schema document), each record is checked by jsonschema's
    Draft 2020-12 validator instead, and the episode rules are not applied. With
    `require_complete`, an episode still open at the end is a problem. Raises InputError for a
    missing, unreadable or directory path.
    """
    if is_parquet(path):
        if schema is not None:
            raise InputError("--schema checks JSON Lines records; check a Parquet file against "
                             "a model (--model)")
        return validate_parquet(path, model, require_complete=require_complete,
                                max_examples_per_group=max_examples_per_group)
    lines = Lines(path, allow_partial_tail=allow_partial_tail)
    if schema is not None:
        return check_with_schema(lines, schema, path=path, require_complete=require_complete,
                                 max_examples_per_group=max_examples_per_group)
    return check_items(lines, model, path=path, require_complete=require_complete,
                       max_examples_per_group=max_examples_per_group)
