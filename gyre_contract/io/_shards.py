"""Sharded rollouts: validate and batch many shard files in parallel on Ray Data (extra `ray`).

Why: a sampler fleet writes one shard per worker, and the trainer often already runs on Ray. The
checks here are the single-process ones (`validate_step`, `EpisodeTracker`, the report of
`validate_file`), run per shard on Ray workers and merged, so the verdict is the same on one
machine and on a cluster.

Two ways in:
- `validate_shards(paths_or_glob, model)` (what `gyre-contract validate 'shards/*' --engine ray`
  runs, here): one Ray Data task per shard file (JSON Lines or Parquet) runs the whole stage-1
  check of that file, lines that are not even JSON included; with `engine="local"` the same
  function runs in this process. Both give the same `ShardsReport`.
- `dataset.validate_dataset(ds, model)` and `dataset.iter_train_batches(ds, field_map)`: a Ray
  Dataset of step records (e.g. `ray.data.read_parquet(paths, include_paths=True)`).

Episode rules hold within a shard; an episode id found in two shards is a problem of its own.
ray and pyarrow are imported inside the functions only.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import pickle
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gyre_contract.core._errors import GyreError, InputError, Problem
from gyre_contract.core._models import RolloutStep, RolloutStepV1
from gyre_contract.core._report import Report
from gyre_contract.core._text import printable, quoted
from gyre_contract.io._checking import check_items
from gyre_contract.io._filekind import path_kind
from gyre_contract.io._groups import FileWarning
from gyre_contract.io._lines import Lines
from gyre_contract.io._parquet import is_parquet, parquet_report
from gyre_contract.io._report import (
    FieldSummary,
    FileReport,
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
    """Whether a command-line source names several shards: a folder, or a glob pattern that is
    not the name of an existing file (`run[1].jsonl` that exists is that file, not `run1.jsonl`)."""
    name = os.fspath(source)
    return os.path.isdir(name) or (glob.has_magic(name) and not os.path.lexists(name))


def shard_paths(paths_or_glob: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
                ) -> list[str]:
    """The shard files: a glob (`shards/*.jsonl`), a directory (its .jsonl / .parquet files), one
    file, or a list of any of these; sorted within each item. InputError when nothing matches.
    A name that exists is taken literally before it is read as a glob. What a listing finds
    that is not a regular file is left out (`listed_shards` says which)."""
    return listed_shards(paths_or_glob)[0]


def listed_shards(paths_or_glob: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
                  ) -> tuple[list[str], list[FileWarning]]:
    """`shard_paths`, and a warning for each file a folder or a glob matched that is not a
    regular file (a FIFO, a device, a socket), which is skipped: reading a FIFO nobody writes
    blocks forever, a device never ends. A pipe named itself (`validate <(zcat r.jsonl.gz)`)
    is still read: only the user can know a writer is there."""
    items = [paths_or_glob] if isinstance(paths_or_glob, (str, os.PathLike)) else paths_or_glob
    out: list[str] = []
    skipped: list[FileWarning] = []
    for item in items:
        name = os.fspath(item)
        if os.path.isdir(name):
            found = sorted(p for pattern in SHARD_PATTERNS
                           for p in glob.glob(os.path.join(glob.escape(name), pattern)))
            where = f"directory {name}"
        elif glob.has_magic(name) and not os.path.lexists(name):  # an existing name is literal
            found = sorted(glob.glob(name))
            where = repr(name)
        else:
            found, where = [name], ""
        if where:
            kinds = {p: path_kind(p) for p in found}
            skipped += [FileWarning("skipped_not_a_regular_file",
                                    f"skipped {p}: not a regular file ({kind})" + (
                                        "; a pipe is read only when named itself"
                                        if kind == "a FIFO" else ""),
                                    {"path": p, "kind": kind})
                        for p, kind in kinds.items() if kind is not None]
            found = [p for p in found if kinds[p] is None]
            if not found:
                none = "no .jsonl or .parquet shard in" if os.path.isdir(name) else \
                    "no shard matches"
                also = f" (skipped: {', '.join(w.details['path'] for w in skipped)}, not " \
                    f"regular files)" if skipped else ""
                raise InputError(f"{none} {where}{also}")
        out += [p for p in found if p not in out]
    if not out:
        raise InputError("no shard given")
    return out, skipped


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
    strict: bool = False
    """Checked for `--strict`: `to_dict`'s `exit_code` then fails on a warning too."""
    skipped: list[FileWarning] = field(default_factory=list)
    """A warning for each file the folder or glob matched that is not a regular file."""

    @property
    def ok(self) -> bool:
        """True when every shard holds and no episode id is found in two shards."""
        return not self.cross_shard and all(s.ok for s in self.shards)

    @property
    def problem_count(self) -> int:
        return sum(s.problem_count for s in self.shards) + len(self.cross_shard)

    @property
    def warnings(self) -> list[Any]:
        """The files skipped, then every shard's warnings, shard by shard (each shard's report
        lists its own)."""
        return [*self.skipped, *(w for s in self.shards for w in s.warnings)]

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
                "holds": self.ok, "strict": self.strict,
                "exit_code": self.exit_code(strict=self.strict), "counts": self.counts(),
                "fields": [f.to_dict() for f in self.fields()],
                "problems": {"count": self.problem_count,
                             "cross_shard": [p.to_dict() for p in self.cross_shard]},
                "skipped": [w.to_dict() for w in self.skipped],
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
        if self.skipped:
            out += [f"warnings: {len(self.skipped)}", *(printable(f"  {w}") for w in self.skipped),
                    ""]
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
                    f"episode {quoted(eid)} in {earlier[0]} (line {earlier[1]}) and {shard} "
                    f"(line {line})", "episode id appears in two shards"))
    return ShardsReport(source, checked_against, [r.report for r in results], cross)


# -- one shard, in this process ----------------------------------------------------------------

def check_shard(
    path: str | os.PathLike[str],
    model: type[RolloutStepV1] = RolloutStep,
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
    if is_parquet(path):
        report = parquet_report(path, model, require_complete=require_complete,
                                max_examples_per_group=max_examples_per_group, episode_ids=ids)
    else:
        report = check_items(Lines(path, allow_partial_tail=allow_partial_tail), model,
                             path=path, require_complete=require_complete,
                             max_examples_per_group=max_examples_per_group, episode_ids=ids)
    return ShardResult(report, ids)


# -- many shards: locally or on Ray ------------------------------------------------------------

def validate_shards(
    paths_or_glob: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    model: type[RolloutStepV1] = RolloutStep,
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
    paths, skipped = listed_shards(paths_or_glob)
    source = paths_or_glob if isinstance(paths_or_glob, (str, os.PathLike)) else ", ".join(
        os.fspath(p) for p in paths_or_glob)
    options: dict[str, Any] = {"require_complete": require_complete, "allow_partial_tail": allow_partial_tail,
               "max_examples_per_group": max_examples_per_group}
    if engine == "local":
        results = [check_shard(p, model, **options) for p in paths]
    else:
        with ray_session(address, num_cpus):
            results = _ray_check_shards(paths, model, options, workers)
    report = merge(os.fspath(source), f"model {model.__name__}", results)
    report.skipped = skipped
    return report


def _ray_check_shards(paths: list[str], model: type[RolloutStepV1], options: dict[str, Any],
                      workers: int | None) -> list[ShardResult]:
    import ray.data

    ds = ray.data.from_items([{"index": i, "shard": p} for i, p in enumerate(paths)],
                             override_num_blocks=len(paths))
    # ray types `fn` as taking the batch alone: the keywords it gets from fn_kwargs are left out
    out = ds.map_batches(_check_shard_batch,  # type: ignore[arg-type]
                         batch_size=1, batch_format="pyarrow",
                         fn_kwargs={"model": model, "options": options}, concurrency=workers)
    all_cpus_at_once(out)
    with shipped(model):
        rows = sorted(out.take_all(), key=lambda r: r["index"])
    results = []
    for row in rows:
        kind, payload = pickle.loads(row["result"])
        if kind == "error":
            raise payload  # e.g. InputError for an unreadable shard, as in the local engine
        results.append(payload)
    return results


@contextlib.contextmanager
def shipped(model: type[RolloutStepV1]) -> Iterator[None]:
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


def all_cpus_at_once(ds: Any) -> None:
    """Ray Data holds back part of the CPUs for later operators by default, so on a small
    cluster one shard runs alone at first; a single map over shards needs no such reserve."""
    ds.context.op_resource_reservation_enabled = False


def _check_shard_batch(batch: Any, *, model: type[RolloutStepV1], options: dict[str, Any]) -> Any:
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
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING,
             "include_dashboard": False}
    if address is not None:
        ray.init(address=address, **quiet)
    else:
        with _importable_cwd():
            ray.init(num_cpus=num_cpus, **quiet)
    quiet_ray_data()
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


def quiet_ray_data() -> None:
    """Ray Data logs its progress at INFO on stderr when stderr is not a terminal; the report on
    stdout is what was asked for. (On a terminal its progress bars still show.)"""
    import ray.data  # noqa: F401  (importing it sets up its loggers; then they are quietened)

    logging.getLogger("ray.data").setLevel(logging.WARNING)
