"""Sharded rollouts: validate and batch many shard files in parallel on Ray Data (extra `ray`).

Why: a sampler fleet writes one shard per worker, and the trainer often already runs on Ray. The
checks here are the single-process ones (`validate_step`, `EpisodeTracker`, the report of
`validate_file`), run per shard on Ray workers and merged, so the verdict is the same on one
machine and on a cluster.

Two ways in:
- `validate_shards(paths_or_glob, model)` (what `gyre-contract validate 'shards/*' --engine ray`
  runs): one Ray Data task per shard file (JSON Lines or Parquet) runs the whole stage-1 check
  of that file, lines that are not even JSON included; with `engine="local"` the same function
  runs in this process. Both give the same `ShardsReport`.
- `validate_dataset(ds, model)` and `iter_train_batches(ds, field_map)`: a Ray Dataset of step
  records (e.g. `ray.data.read_parquet(paths, include_paths=True)`). Records are validated on
  the workers with `map_batches` over columnar (pyarrow) batches; the episode rules, which need
  a shard's steps in order, run where the results are gathered, shard by shard.

Episode rules hold within a shard; an episode id found in two shards is a problem of its own.
ray and pyarrow are imported inside the functions only.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import pickle
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel

from gyre_contract.core.errors import ContractError, GyreError, InputError, Problem
from gyre_contract.core.modelinfo import model_info
from gyre_contract.core.models import RolloutStep
from gyre_contract.core.report import Report
from gyre_contract.core.validate import validate_step
from gyre_contract.io.assembly import EpisodeAssembler
from gyre_contract.io.checking import StepChecker, check_items
from gyre_contract.io.episodes import Episode
from gyre_contract.io.lines import Item, Lines, numbered
from gyre_contract.io.parquet import is_parquet, parquet_report, records_from_arrow
from gyre_contract.io.report import (
    FieldStats,
    FieldSummary,
    FileReport,
    ProblemGroups,
    field_table_lines,
    plural,
)

SHARD_PATTERNS = ("*.jsonl", "*.parquet", "*.pq")
"""Files taken from a directory given as the shard source."""

ENGINES = ("ray", "local")

MAX_CROSS_SHOWN = 20
"""Episodes found in two shards listed in the text report (the JSON report has them all)."""


# -- which files are the shards ----------------------------------------------------------------

def is_shard_source(source: str | os.PathLike[str]) -> bool:
    """Whether a command-line source names several shards: a folder or a glob pattern."""
    name = os.fspath(source)
    return os.path.isdir(name) or glob.has_magic(name)


def shard_paths(paths_or_glob: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
                ) -> list[str]:
    """The shard files: a glob (`shards/*.jsonl`), a directory (its .jsonl / .parquet files), one
    file, or a list of any of these; sorted within each item. InputError when nothing matches."""
    items = [paths_or_glob] if isinstance(paths_or_glob, (str, os.PathLike)) else paths_or_glob
    out: list[str] = []
    for item in items:
        name = os.fspath(item)
        if os.path.isdir(name):
            found = sorted(p for pattern in SHARD_PATTERNS
                           for p in glob.glob(os.path.join(name, pattern)))
            if not found:
                raise InputError(f"no .jsonl or .parquet shard in directory {name}")
        elif glob.has_magic(name):
            found = sorted(glob.glob(name))
            if not found:
                raise InputError(f"no shard matches {name!r}")
        else:
            found = [name]
        out += [p for p in found if p not in out]
    if not out:
        raise InputError("no shard given")
    return out


# -- the merged report -----------------------------------------------------------------------

@dataclass
class ShardResult:
    """One shard's stage-1 report and the episode ids it holds (each with its first line/row)."""

    report: FileReport
    episode_ids: dict[str, int]


@dataclass
class ShardsReport(Report):
    """Per-shard `FileReport`s, merged counts and the problems no single shard shows.

    `problems()` gives every kept problem as (shard file, Problem); a Problem's `line` is the
    line of a JSON Lines shard or the row of a Parquet shard (numbered from 1). `ok` when every
    shard holds and no episode spans two shards.
    """

    source: str
    checked_against: str
    shards: list[FileReport] = field(default_factory=list)
    cross_shard: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every shard holds and no episode id is found in two shards."""
        return not self.cross_shard and all(s.ok for s in self.shards)

    @property
    def holds(self) -> bool:
        """Deprecated alias of `ok`."""
        warnings.warn("ShardsReport.holds is deprecated; use ShardsReport.ok",
                      DeprecationWarning, stacklevel=2)
        return self.ok

    @property
    def problem_count(self) -> int:
        return sum(s.problem_count for s in self.shards) + len(self.cross_shard)

    def counts(self) -> dict[str, Any]:
        """Sums over the shards; episode counts are None when any shard did not check them."""
        def total(name: str) -> int | None:
            values = [getattr(s, name) for s in self.shards]
            return None if any(v is None for v in values) else sum(values)

        versions = sorted({v for s in self.shards for v in s.policy_versions})
        return {"shards": len(self.shards), "lines": total("lines"), "records": total("records"),
                "steps": total("steps"), "episodes": total("episodes"),
                "open_episodes": total("open_episodes"), "terminated": total("terminated"),
                "truncated": total("truncated"), "policy_versions": versions}

    def fields(self) -> list[FieldSummary]:
        """The shards' field tables merged: counts summed, differing dtypes or shapes joined."""
        merged: dict[str, list[Any]] = {}
        for shard in self.shards:
            for f in shard.fields:
                merged.setdefault(f.name, []).append(f)
        return [FieldSummary(name, _union(f.dtype for f in fs), _union(f.shape for f in fs),
                             fs[0].declared, sum(f.count for f in fs))
                for name, fs in merged.items()]

    def problems(self) -> list[tuple[str, Problem]]:
        """(shard, problem) for every kept problem, shard by shard in line order."""
        out = [(s.path, p) for s in self.shards for p in s.problems()]
        return out + [("", p) for p in self.cross_shard]

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "checked_against": self.checked_against,
                "holds": self.ok, "counts": self.counts(),
                "fields": [f.to_dict() for f in self.fields()],
                "problems": {"count": self.problem_count,
                             "cross_shard": [p.to_dict() for p in self.cross_shard]},
                "shards": [s.to_dict() for s in self.shards]}

    def to_text(self) -> str:
        counts = self.counts()
        out = [f"{self.source}: {counts['shards']} shards checked against {self.checked_against}",
               ""]
        width = max(len(s.path) for s in self.shards) if self.shards else 0
        for s in self.shards:
            verdict = "holds" if s.ok else plural(s.problem_count, "problem")
            out.append(f"  {s.path.ljust(width)}  {s.lines:>8} {_unit(s.path):5}  "
                       f"{s.steps:>8} steps  {verdict}")
        units = "/".join(u for u in ("lines", "rows") if u in {_unit(s.path) for s in self.shards})
        out += ["", *_field_table(self.fields()), "", "counts: " + _counts_text(counts, units), ""]
        if self.ok:
            out.append("holds: no problems")
            return "\n".join(out)
        out.append(f"problems: {self.problem_count}")
        for s in self.shards:
            if s.ok:
                continue
            out.append(f"  {s.path}:")
            for group in s.groups:
                out += group.text_lines("    ")
            if s.ungrouped:
                out.append(f"    ... and {s.ungrouped} more problems of other kinds")
        if self.cross_shard:
            out.append(f"  across shards ({len(self.cross_shard)}):")
            out += [f"    {p}" for p in self.cross_shard[:MAX_CROSS_SHOWN]]
            if len(self.cross_shard) > MAX_CROSS_SHOWN:
                out.append(f"    ... and {len(self.cross_shard) - MAX_CROSS_SHOWN} more "
                           "(all of them in --format json)")
        return "\n".join(out)


def _union(values: Iterable[str]) -> str:
    seen: dict[str, None] = {}
    for value in values:
        seen.update(dict.fromkeys(value.split(" | ")))
    return " | ".join(seen)


def _field_table(fields: list[FieldSummary]) -> list[str]:
    """The merged field table; its heading row alone when no shard has a field."""
    return field_table_lines(fields or [FieldSummary("", "", "", "", 0)])[:len(fields) + 1]


def _unit(path: str) -> str:
    """What a shard's `line` numbers count: rows of a Parquet file, else lines."""
    return "rows" if is_parquet(path) else "lines"


def _counts_text(counts: dict[str, Any], units: str) -> str:
    parts = [f"{counts['lines']} {units}", plural(counts["steps"], "valid step")]
    if counts["episodes"] is None:
        parts.append("episode rules not checked")
    else:
        parts.append(f"{plural(counts['episodes'], 'episode')} ({counts['open_episodes']} open, "
                     f"{counts['terminated']} terminated, {counts['truncated']} truncated)")
    versions = counts["policy_versions"]
    if versions:
        parts.append(f"policy versions {versions[0]}..{versions[-1]} ({len(versions)} seen)")
    return ", ".join(parts)


def merge(source: str, checked_against: str, results: Sequence[ShardResult]) -> ShardsReport:
    """Merge per-shard results in shard order; an episode id in two shards is one problem."""
    first_seen: dict[str, tuple[str, int]] = {}
    cross: list[Problem] = []
    for result in results:
        shard = result.report.path
        for eid, line in result.episode_ids.items():
            earlier = first_seen.setdefault(eid, (shard, line))
            if earlier[0] != shard:
                cross.append(Problem(
                    "episode_id", "each episode in one shard",
                    f"episode {eid!r} in {earlier[0]} (line {earlier[1]}) and {shard} "
                    f"(line {line})", "episode id appears in two shards"))
    return ShardsReport(source, checked_against, [r.report for r in results], cross)


# -- one shard, in this process ----------------------------------------------------------------

def check_shard(
    path: str | os.PathLike[str],
    model: type[BaseModel] = RolloutStep,
    *,
    require_complete: bool = False,
    allow_partial_tail: bool = False,
    max_examples_per_group: int = 3,
) -> ShardResult:
    """Stage 1 on one shard file (Parquet by extension, else JSON Lines), collecting its ids.

    The report is what `validate_file` / `validate_parquet` give for the file
    (`allow_partial_tail` applies to JSON Lines: a shard still being written).
    """
    ids: dict[str, int] = {}
    options = {"require_complete": require_complete,
               "max_examples_per_group": max_examples_per_group}
    if is_parquet(path):
        report = parquet_report(path, model, wrap=lambda items: _collect_ids(items, ids),
                                **options)
        return ShardResult(report, ids)
    lines = Lines(path, allow_partial_tail=allow_partial_tail)
    report = check_items(_collect_ids(lines, ids), model, path=path, lines=lines, **options)
    return ShardResult(report, ids)


def _collect_ids(items: Iterable[Item], ids: dict[str, int]) -> Iterator[Item]:
    """Pass items through, noting each record's episode id with the first line it is on."""
    for item in items:
        line, record = numbered(item)
        if record is not None:
            eid = record.get("episode_id")
            if isinstance(eid, str) and eid and eid not in ids:
                ids[eid] = line
        yield item


# -- many shards: locally or on Ray ------------------------------------------------------------

def validate_shards(
    paths_or_glob: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    model: type[BaseModel] = RolloutStep,
    *,
    engine: str = "ray",
    address: str | None = None,
    num_cpus: int | None = None,
    workers: int | None = None,
    require_complete: bool = False,
    allow_partial_tail: bool = False,
    max_examples_per_group: int = 3,
) -> ShardsReport:
    """Stage 1 on every shard, merged. `engine="ray"` runs one Ray Data task per shard.

    Ray: joins the cluster at `address` when given (or the Ray already initialised in this
    process), else starts a local Ray with `num_cpus` (default: all cores) and stops it after;
    `workers` caps how many shards are checked at once (default: as many as there are CPUs).
    The model class must be importable by the workers (a module on their PYTHONPATH; a local
    Ray started here gets this process's PYTHONPATH and the current directory).
    `engine="local"` checks the shards one after another in this process. Same report.
    """
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    paths = shard_paths(paths_or_glob)
    source = paths_or_glob if isinstance(paths_or_glob, (str, os.PathLike)) else ", ".join(
        map(os.fspath, paths_or_glob))
    options = {"require_complete": require_complete, "allow_partial_tail": allow_partial_tail,
               "max_examples_per_group": max_examples_per_group}
    if engine == "local":
        results = [check_shard(p, model, **options) for p in paths]
    else:
        with ray_session(address, num_cpus):
            results = _ray_check_shards(paths, model, options, workers)
    return merge(os.fspath(source), f"model {model.__name__}", results)


def _ray_check_shards(paths: list[str], model: type[BaseModel], options: dict[str, Any],
                      workers: int | None) -> list[ShardResult]:
    import ray.data

    ds = ray.data.from_items([{"index": i, "shard": p} for i, p in enumerate(paths)],
                             override_num_blocks=len(paths))
    out = ds.map_batches(_check_shard_batch, batch_size=1, batch_format="pyarrow",
                         fn_kwargs={"model": model, "options": options}, concurrency=workers)
    _all_cpus_at_once(out)
    with _shipped(model):
        rows = sorted(out.take_all(), key=lambda r: r["index"])
    results = []
    for row in rows:
        kind, payload = pickle.loads(row["result"])
        if kind == "error":
            raise payload  # e.g. InputError for an unreadable shard, as in the local engine
        results.append(payload)
    return results


@contextlib.contextmanager
def _shipped(model: type[BaseModel]) -> Iterator[None]:
    """Send the model class to the workers by value when its module is not importable by name
    there (a model loaded from a file, `--model path/models.py:Class`); else by reference."""
    import importlib.machinery
    import sys

    from ray import cloudpickle

    module = sys.modules.get(model.__module__)
    top = model.__module__.partition(".")[0]
    by_value = module is not None and top != "__main__" and \
        importlib.machinery.PathFinder.find_spec(top) is None and \
        top not in sys.builtin_module_names
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)


def _all_cpus_at_once(ds: Any) -> None:
    """Ray Data holds back part of the CPUs for later operators by default, so on a small
    cluster one shard runs alone at first; a single map over shards needs no such reserve."""
    ds.context.op_resource_reservation_enabled = False


def _check_shard_batch(batch: Any, *, model: type[BaseModel], options: dict[str, Any]) -> Any:
    """Ray worker: stage 1 on each shard of the batch; a GyreError travels back as data."""
    import pyarrow as pa

    out = []
    for shard in batch.column("shard").to_pylist():
        try:
            out.append(pickle.dumps(("ok", check_shard(shard, model, **options))))
        except GyreError as err:
            out.append(pickle.dumps(("error", err)))
    return pa.table({"index": batch.column("index"), "result": pa.array(out, pa.binary())})


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[None]:
    """Use the Ray this process already runs, join `address`, or start (and later stop) a local
    Ray whose workers can import what this process can (PYTHONPATH and the current directory)."""
    import ray

    if ray.is_initialized():
        yield
        return
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING,
             "include_dashboard": False}
    if address is not None:
        ray.init(address=address, **quiet)
    else:
        with _importable_cwd():
            ray.init(num_cpus=num_cpus, **quiet)
    _quiet_ray_data()
    try:
        yield
    finally:
        ray.shutdown()


@contextlib.contextmanager
def _importable_cwd() -> Iterator[None]:
    """Local Ray workers inherit the environment at start: put the current directory on their
    PYTHONPATH so a model named as `module:Class` from here imports there too."""
    before = os.environ.get("PYTHONPATH")
    paths = [os.getcwd(), *(before.split(os.pathsep) if before else [])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def _quiet_ray_data() -> None:
    """Ray Data logs its progress at INFO on stderr when stderr is not a terminal; the report on
    stdout is what was asked for. (On a terminal its progress bars still show.)"""
    import ray.data  # noqa: F401  (importing it sets up its loggers; then they are quietened)

    logging.getLogger("ray.data").setLevel(logging.WARNING)


# -- a Dataset of step records -------------------------------------------------------------------

def validate_dataset(
    ds: Any,
    model: type[BaseModel] = RolloutStep,
    *,
    shard_column: str = "path",
    row_column: str | None = None,
    require_complete: bool = False,
    max_examples_per_group: int = 3,
    batch_size: int = 4096,
) -> ShardsReport:
    """Check a Ray Dataset of step records; one `FileReport` per shard, merged.

    Each record is validated on the workers (`map_batches` on pyarrow batches). The episode
    rules run as results arrive, per shard, in dataset order (order is preserved). A row's
    number is `row_column` when given, else its position within its shard (from 1) in
    dataset order. `shard_column` (what `include_paths=True` adds) names each row's shard.
    """
    shards: dict[str, _ShardAcc] = {}
    for shard, row, keys, step, problems in _checked_rows(ds, model, shard_column, row_column,
                                                          batch_size):
        acc = shards.get(shard)
        if acc is None:
            acc = shards[shard] = _ShardAcc(shard, model, max_examples_per_group)
        acc.add(row, keys, step, problems)
    if not shards:
        raise InputError("the dataset has no rows")
    results = [acc.finish(require_complete) for acc in shards.values()]
    return merge(f"dataset ({len(shards)} shards)", f"model {model.__name__}", results)


def _checked_rows(ds: Any, model: type[BaseModel], shard_column: str,
                  row_column: str | None, batch_size: int) -> Iterator[tuple]:
    """(shard, row or None, record keys, step or lost, problems or None) in dataset order.

    A record that failed validation comes with `lost`: its episode id and step, if it has them.
    """
    _require_columns(ds, [shard_column] + ([row_column] if row_column else []))
    checked = ds.map_batches(
        _validate_batch, batch_size=batch_size, batch_format="pyarrow", zero_copy_batch=True,
        fn_kwargs={"model": model, "shard_column": shard_column, "row_column": row_column})
    checked.context.execution_options.preserve_order = True
    _all_cpus_at_once(checked)
    with _shipped(model):
        for batch in checked.iter_batches(batch_size=None, batch_format="pyarrow"):
            for blob in batch.column("checked").to_pylist():
                yield from pickle.loads(blob)


def _require_columns(ds: Any, names: list[str]) -> None:
    have = ds.schema().names
    missing = [n for n in names if n not in have]
    if missing:
        raise InputError(f"the dataset has no column {', '.join(map(repr, missing))}; have "
                         f"[{', '.join(have)}] (read shards with include_paths=True, or pass "
                         f"shard_column=)")


def _validate_batch(batch: Any, *, model: type[BaseModel], shard_column: str,
                    row_column: str | None) -> Any:
    """Ray worker: validate each record of a columnar batch; one pickled list per batch."""
    import pyarrow as pa

    shards = batch.column(shard_column).to_pylist()
    rows = batch.column(row_column).to_pylist() if row_column else [None] * batch.num_rows
    data = batch.drop_columns([c for c in (shard_column, row_column) if c])
    known = set(model_info(model).wires)
    out = []
    for shard, row, record in zip(shards, rows, records_from_arrow(data, model)):
        try:
            out.append((shard, row, _keys(record, known), validate_step(record, model), None))
        except ContractError as err:
            lost = {k: record[k] for k in ("episode_id", "step") if k in record}
            out.append((shard, row, _keys(record, known), lost, err.problems))
    return pa.table({"checked": pa.array([pickle.dumps(out)], pa.binary())})


def _keys(record: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """The record's keys for the field table; values kept only for keys the model lacks."""
    return {k: (None if k in known else v) for k, v in record.items()}


class _ShardAcc:
    """One shard's running stage-1 state: the `StepChecker` of `validate_file`, fed with rows
    checked on the workers."""

    def __init__(self, shard: str, model: type[BaseModel], max_examples: int) -> None:
        self.shard = shard
        self.checker = StepChecker(model, ProblemGroups(max_examples), FieldStats(model))
        self.rows = 0
        self.ids: dict[str, int] = {}

    def add(self, row: int | None, keys: dict[str, Any], step: Any,
            problems: list[Problem] | None) -> None:
        """One checked row: a valid step, or (problems given) the `lost` part of a bad record."""
        self.rows += 1
        row = self.rows if row is None else row
        if problems is None:
            self.ids.setdefault(step.episode_id, row)
        self.checker.checked(row, keys, step, problems)

    def finish(self, require_complete: bool) -> ShardResult:
        self.checker.finish(require_complete)
        report = self.checker.report(path=self.shard, lines=self.rows,
                                     require_complete=require_complete)
        return ShardResult(report, self.ids)


# -- training batches from a Dataset -------------------------------------------------------------

def iter_train_batches(
    ds: Any,
    field_map: Any,
    model: type[BaseModel] = RolloutStep,
    *,
    shard_column: str = "path",
    row_column: str | None = None,
    episodes_per_batch: int = 32,
    include_open: bool = True,
    max_len: int | None = None,
    current_version: int | None = None,
    max_staleness: int | None = None,
    batch_size: int = 4096,
) -> Iterator[Any]:
    """Yield validated `TrainBatch`es built by `field_map.to_train_batch` from whole episodes.

    Records are validated on the Ray workers; episodes are assembled per shard in dataset order
    and a batch never mixes shards. A batch is yielded as soon as a shard has
    `episodes_per_batch` finished episodes; each shard's remainder (and, with `include_open`,
    its open episodes: the map then needs their `next_value` or an explicit
    `"truncation": "terminal"`) follows at the end. The first invalid record or broken episode
    rule raises ContractError naming the shard and row, before any batch holding its episode.
    """
    if episodes_per_batch < 1:
        raise ValueError(f"episodes_per_batch must be at least 1, got {episodes_per_batch}")
    shards: dict[str, tuple[StepChecker, EpisodeAssembler]] = {}
    done: dict[str, list[Episode]] = {}
    positions: dict[str, int] = {}
    options = {"max_len": max_len, "current_version": current_version,
               "max_staleness": max_staleness}
    for shard, row, keys, step, problems in _checked_rows(ds, model, shard_column, row_column,
                                                          batch_size):
        positions[shard] = positions.get(shard, 0) + 1
        row = positions[shard] if row is None else row
        if shard not in shards:
            shards[shard] = (StepChecker(model), EpisodeAssembler(model))
        checker, episodes = shards[shard]
        try:
            found = checker.checked(row, keys, step, problems)
        except ContractError as err:
            raise _in_shard(shard, err.problems) from None
        episode = episodes.add(*found) if found is not None else None
        if episode is not None:
            finished = done.setdefault(shard, [])
            finished.append(episode)
            if len(finished) == episodes_per_batch:
                yield field_map.to_train_batch(finished, **options)
                done[shard] = []
    for shard, (_, episodes) in shards.items():
        rest = done.get(shard, []) + (episodes.rest() if include_open else [])
        for start in range(0, len(rest), episodes_per_batch):
            yield field_map.to_train_batch(rest[start:start + episodes_per_batch], **options)


def _in_shard(shard: str, problems: list[Problem]) -> ContractError:
    """The problems of one shard, with the shard file at the front of each path."""
    return ContractError([replace(p, path=f"{shard}: {p.path}" if p.path else shard)
                          for p in problems])
