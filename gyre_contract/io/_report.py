"""The report of a rollout file (stage 1), and the two builders every record source feeds.

`ProblemGroups` groups problems by (path, message) and keeps a few examples of each;
`FieldStats` keeps which keys the records carry and what dtypes and shapes their validated values
have. JSON Lines, Parquet and Ray shards all feed these two (through `checking.StepChecker`), so
a file is reported alike whatever it is stored as.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel

from gyre_contract.core._dims import dtype_name, format_shape
from gyre_contract.core._errors import Problem
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import AnyObservation, field_specs
from gyre_contract.core._report import Report
from gyre_contract.core._tensor import TensorSpec
from gyre_contract.core._text import MAX_MESSAGE_CHARS, printable, shorten, shorten_path, shown
from gyre_contract.io._episodes import modality_values
from gyre_contract.io._groups import FileWarning

_INDEX = re.compile(r"\[\d+\]")


MAX_PROBLEM_GROUPS = 200
"""Distinct (path, message) groups kept in a report; further groups are only counted."""

MAX_TRACKED_FIELDS = 4096
"""Distinct field names (and key sets, and dtype/shape pairs) a report keeps track of."""

MAX_LISTED_EXTRA = 20
"""Names that are not in the model listed in the field table; the rest are only counted."""

MAX_PATHS_PER_MESSAGE = 10
"""Past this many paths with one message, further paths share one group with path `*`."""


@dataclass(frozen=True, slots=True)
class FieldSummary:
    """One field of the file: dtype and shape as seen, as declared, and how many records hold it."""

    name: str
    dtype: str
    shape: str
    declared: str
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": shorten(self.name), "dtype": self.dtype, "shape": self.shape,
                "declared": self.declared, "count": self.count}


@dataclass
class ProblemGroup:
    """Problems with one path (list indices as `[*]`) and one message: a count and examples."""

    path: str
    message: str
    count: int
    examples: list[Problem]

    def to_dict(self) -> dict[str, Any]:
        return {"path": shorten_path(self.path), "message": shorten(self.message,
                                                                    MAX_MESSAGE_CHARS),
                "count": self.count, "examples": [p.to_dict() for p in self.examples]}

    def text_lines(self, indent: str) -> list[str]:
        """The group as report text: a heading with its count, then the examples."""
        message = shorten(self.message, MAX_MESSAGE_CHARS)
        head = f"{shorten_path(self.path)}: {message}" if self.path else message
        times = "once" if self.count == 1 else f"{self.count} times"
        lines = [printable(f"{indent}{head} ({times})")]
        lines += [f"{indent}  {p}" for p in self.examples]
        if self.count > len(self.examples):
            lines.append(f"{indent}  ... and {self.count - len(self.examples)} more")
        return lines


@dataclass
class FileReport(Report):
    """What `validate_file` found: fields, counts and every problem, grouped.

    Episode counts are None when the episode rules were not applied (JSON Schema mode).
    `ok` is True when no problem was found; `warnings` are what holds but deserves a look (a
    group whose members carry different policy versions, `io._groups`).
    """

    path: str
    checked_against: str
    lines: int = 0
    records: int = 0
    steps: int = 0
    episodes: int | None = None
    open_episodes: int | None = None
    terminated: int | None = None
    truncated: int | None = None
    policy_versions: list[int] = field(default_factory=list)
    fields: list[FieldSummary] = field(default_factory=list)
    groups: list[ProblemGroup] = field(default_factory=list)
    problem_count: int = 0
    ungrouped: int = 0
    more_fields: int = 0
    partial_tail_bytes: int = 0
    require_complete: bool = False
    warning_list: list[FileWarning] = field(default_factory=list)
    strict: bool = False
    """Checked for `--strict`: `to_dict`'s `exit_code` then fails on a warning too."""

    @property
    def ok(self) -> bool:
        """True when no line or row broke a rule (unreadable files raise InputError instead)."""
        return self.problem_count == 0

    @property
    def warnings(self) -> list[FileWarning]:
        """What holds but deserves a look; `exit_code(strict=True)` fails on any."""
        return self.warning_list

    def problems(self) -> list[Problem]:
        """The example problems kept, in file order (all of them when no group overflowed)."""
        kept = [p for g in self.groups for p in g.examples]
        return sorted(kept, key=lambda p: (p.line or 0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "checked_against": self.checked_against,
            "holds": self.ok,
            "strict": self.strict,
            "exit_code": self.exit_code(strict=self.strict),
            "counts": {
                "lines": self.lines, "records": self.records, "steps": self.steps,
                "episodes": self.episodes, "open_episodes": self.open_episodes,
                "terminated": self.terminated, "truncated": self.truncated,
                "policy_versions": self.policy_versions,
            },
            "fields": [f.to_dict() for f in self.fields],
            "more_fields": self.more_fields,
            "problems": {"count": self.problem_count, "groups": [g.to_dict() for g in self.groups],
                         "ungrouped": self.ungrouped},
            "partial_tail_bytes": self.partial_tail_bytes,
            "require_complete": self.require_complete,
            "warnings": [w.to_dict() for w in self.warning_list],
        }

    def to_text(self) -> str:
        out = [printable(f"{self.path}: checked against {self.checked_against}"), ""]
        out += field_table_lines(self.fields)
        if self.more_fields:
            out.append(f"  ... and {self.more_fields} more keys not in the model, not listed")
        out += ["", "counts: " + self._counts_text()]
        if self.partial_tail_bytes:
            out.append(f"partial tail: {self.partial_tail_bytes} bytes after line "
                       f"{self.lines - 1} not checked (no newline yet)")
        out.append("")
        if self.warning_list:
            # a warning that counts the groups not named ("... and 30 more") stands for them
            named = [w for w in self.warning_list if "more_groups" not in w.details]
            total = len(named) + sum(w.details.get("more_groups", 0) for w in self.warning_list)
            shown = f" ({len(named)} shown)" if total != len(named) else ""
            out.append(f"warnings: {total}{shown}")
            out += [printable(f"  {w}") for w in self.warning_list]
        if self.ok:
            out.append("holds: no problems")
            return "\n".join(out)
        out.append(f"problems: {self.problem_count} in {len(self.groups)} "
                   f"group{'s' if len(self.groups) != 1 else ''}")
        for group in self.groups:
            out += group.text_lines("  ")
        if self.ungrouped:
            out.append(f"  ... and {self.ungrouped} more problems of other kinds")
        return "\n".join(out)

    def _counts_text(self) -> str:
        parts = [plural(self.lines, "line"), plural(self.steps, "valid step")]
        if self.episodes is None:
            parts.append("episode rules not checked")
        else:
            parts += [f"{plural(self.episodes, 'episode')} ({self.open_episodes} open, "
                      f"{self.terminated} terminated, {self.truncated} truncated)"]
        versions = self.policy_versions
        if versions:
            shown = ", ".join(map(str, versions[:5])) + (", ..." if len(versions) > 5 else "")
            parts.append(f"policy versions {versions[0]}..{versions[-1]} "
                         f"({len(versions)} seen: {shown})")
        return ", ".join(parts)


def plural(n: int, word: str) -> str:
    """`1 line`, `2 lines`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def field_table_lines(fields: list[FieldSummary]) -> list[str]:
    """The field table as text lines: name, dtype, shape, declared, how many records."""
    if not fields:
        return ["fields: none"]
    rows = [("field", "dtype", "shape", "declared", "records")]
    rows += [(shown(f.name), f.dtype, f.shape, f.declared, str(f.count)) for f in fields]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths)) + "  " + r[4].rjust(7)
        for r in rows
    ]


class ProblemGroups:
    """Problems grouped by (path with `[*]` for indices, message), first few kept per group."""

    def __init__(self, max_examples: int) -> None:
        self.max_examples = max_examples
        self.groups: dict[tuple[str, str], ProblemGroup] = {}
        self.paths_per_message: Counter[str] = Counter()
        self.count = 0
        self.ungrouped = 0

    def add(self, problems: Iterable[Problem]) -> None:
        for p in problems:
            self.count += 1
            path = _INDEX.sub("[*]", p.path) if "[" in p.path else p.path
            group = self.groups.get((path, p.message))
            if group is None:
                if self.paths_per_message[p.message] >= MAX_PATHS_PER_MESSAGE:
                    path = "*"  # e.g. thousands of distinct unknown keys: one group for the rest
                    group = self.groups.get((path, p.message))
            if group is None:
                if len(self.groups) >= MAX_PROBLEM_GROUPS:
                    self.ungrouped += 1
                    continue
                self.paths_per_message[p.message] += 1
                group = self.groups[(path, p.message)] = ProblemGroup(path, p.message, 0, [])
            group.count += 1
            if len(group.examples) < self.max_examples:
                group.examples.append(p)


class FieldStats:
    """Which keys the records carry, and the dtypes and shapes their validated values have.

    Memory is bounded: at most MAX_TRACKED_FIELDS distinct names (and key sets) are tracked;
    names beyond that are only counted in `untracked`.
    """

    def __init__(self, model: type[BaseModel] | None) -> None:
        self.model = model
        self.signatures: dict[tuple[str, ...], int] = {}
        self.key_counts: Counter[str] = Counter()
        self.seen: dict[tuple[str, Any, tuple[int, ...]], int] = {}
        self.untracked = 0
        info = model_info(model) if model is not None else None
        self.known = set(info.wires) if info is not None else set()
        self.extra_kinds: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.specs = field_specs(model) if model is not None else {}
        self.array_fields = [(w, info.attr(w)) for w, s in self.specs.items()
                             if info is not None
                             and not (isinstance(s, TensorSpec) and s.is_scalar)]

    def record(self, record: dict[str, Any]) -> None:
        signature = tuple(record)
        count = self.signatures.get(signature)
        if count is not None:
            self.signatures[signature] = count + 1
        elif len(self.signatures) < MAX_TRACKED_FIELDS and len(record) <= MAX_TRACKED_FIELDS:
            self.signatures[signature] = 1
            for key in signature:
                if key not in self.known and key not in self.extra_kinds:
                    self.extra_kinds[key] = _json_kind(record[key])
        else:
            for key in signature:
                if key in self.key_counts or len(self.key_counts) < MAX_TRACKED_FIELDS:
                    self.key_counts[key] += 1
                else:
                    self.untracked += 1

    def step(self, step: BaseModel) -> None:
        seen = self.seen
        for wire, attr in self.array_fields:
            value = getattr(step, attr)
            if value is None:
                continue
            if value.__class__ is np.ndarray or isinstance(value, np.generic):
                key = (wire, value.dtype, value.shape)
                count = seen.get(key)
                if count is not None:
                    seen[key] = count + 1
                else:
                    self._see(key)
            else:
                self._nested(wire, value)

    def json_record(self, record: dict[str, Any]) -> None:
        """Schema mode: dtype and shape from the JSON values themselves."""
        for key, value in record.items():
            kind, shape = _json_kind(value)
            self._see((key, kind, shape))

    def _nested(self, wire: str, value: Any) -> None:
        items = value.items() if isinstance(value, dict) else modality_values(value).items()
        for key, item in items:
            if isinstance(item, (np.ndarray, np.generic)):
                self._see((f"{wire}.{key}", item.dtype, item.shape))
            else:
                self._see((f"{wire}.{key}", _json_kind(item)[0], ()))

    def counted(self, key_counts: Mapping[str, int],
                arrays: Iterable[tuple[str, Any, tuple[int, ...], int]]) -> None:
        """Records checked in bulk: how many carried each key; (wire, dtype, shape, count) of
        their tensors. The same totals as `record` and `step` on each of them."""
        for key, n in key_counts.items():
            if key in self.key_counts or len(self.key_counts) < MAX_TRACKED_FIELDS:
                self.key_counts[key] += n
            else:
                self.untracked += n
        for wire, dtype, shape, n in arrays:
            seen = (wire, dtype, shape)
            if seen in self.seen or len(self.seen) < MAX_TRACKED_FIELDS:
                self.seen[seen] = self.seen.get(seen, 0) + n

    def _see(self, entry: tuple[str, Any, tuple[int, ...]]) -> None:
        count = self.seen.get(entry)
        if count is not None:
            self.seen[entry] = count + 1
        elif len(self.seen) < MAX_TRACKED_FIELDS:
            self.seen[entry] = 1

    def summaries(self) -> tuple[list[FieldSummary], int]:
        """The field table (model fields first, then at most MAX_LISTED_EXTRA other names) and
        how many names were left out of it."""
        counts = Counter(self.key_counts)
        for keys, n in self.signatures.items():
            for key in keys:
                counts[key] += n
        observed: dict[str, list[tuple[Any, tuple[int, ...], int]]] = {}
        subs: dict[str, list[str]] = {}
        for (name, dtype, shape), n in self.seen.items():
            if name not in observed and "." in name:
                subs.setdefault(name.partition(".")[0], []).append(name)
            observed.setdefault(name, []).append((dtype, shape, n))
        order = list(self.specs) + [w for w in model_info(self.model).wires
                                    if w not in self.specs] if self.model is not None else []
        known = set(order)
        extra = sorted(k for k in counts if k not in known)
        names = [k for k in order if k in counts] + extra[:MAX_LISTED_EXTRA]
        out = []
        for name in names:
            if name in observed or name not in subs:
                out.append(self._summary(name, counts[name], observed.get(name)))
            for sub in sorted(subs.get(name, ())):
                out.append(self._summary(sub, sum(n for *_, n in observed[sub]), observed[sub]))
        return out, max(0, len(extra) - MAX_LISTED_EXTRA) + self.untracked

    def _summary(self, name: str, count: int, seen: list[tuple[Any, tuple[int, ...], int]] | None
                 ) -> FieldSummary:
        spec = self.specs.get(name)
        declared_dtype, declared = _declared(spec, name, self.model)
        if not seen and name in self.extra_kinds:
            kind, shape = self.extra_kinds[name]
            return FieldSummary(name, f"JSON {kind}", format_shape(shape), declared, count)
        if not seen:  # no record carrying it passed validation
            return FieldSummary(name, declared_dtype or "-", "[]" if declared_dtype else "-",
                                declared, count)
        dtypes = sorted({d if isinstance(d, str) else dtype_name(d) for d, _, _ in seen})
        return FieldSummary(name, " | ".join(dtypes), _shapes_text([s for _, s, _ in seen]),
                            declared, count)


def _declared(spec: Any, name: str, model: type[BaseModel] | None) -> tuple[str, str]:
    """(dtype of a scalar field, declared shape text) from the model; '' where none is declared."""
    if isinstance(spec, AnyObservation):
        return "", f"{spec.spec.dtype} {format_shape(spec.spec.shape)} or modalities"
    if isinstance(spec, TensorSpec):
        dtype = spec.dtype if isinstance(spec.dtype, str) else " | ".join(spec.dtype)
        return (dtype if spec.is_scalar else ""), f"{dtype} {format_shape(spec.shape)}"
    if isinstance(spec, type):
        return "", f"modalities ({spec.__name__})"
    if model is not None and "." not in name and name in model_info(model).wires:
        return "object", "object"
    if model is not None and "." in name:
        head, _, key = name.partition(".")
        parent = field_specs(model).get(head)
        if isinstance(parent, type):
            sub = field_specs(parent).get(key)
            if isinstance(sub, TensorSpec):
                return "", f"{sub.dtype} {format_shape(sub.shape)}"
            if key in model_info(parent).wires:
                return _plain_declared(parent, key)
        return "", ""
    return "", "not in the model" if model is not None else ""


def _plain_declared(model: type[BaseModel], wire: str) -> tuple[str, str]:
    """A modality declared with a plain Python type (`text: str`)."""
    annotation = model.model_fields[model_info(model).attr(wire)].annotation
    if annotation is str:
        return "string", "string []"
    return "", getattr(annotation, "__name__", str(annotation))


def _shapes_text(shapes: list[tuple[int, ...]]) -> str:
    distinct = sorted(set(shapes))
    if len(distinct) == 1:
        return format_shape(distinct[0])
    ranks = {len(s) for s in distinct}
    if len(ranks) == 1:
        dims = []
        for axis in zip(*distinct):
            lo, hi = min(axis), max(axis)
            dims.append(str(lo) if lo == hi else f"{lo}..{hi}")
        return "[" + ", ".join(dims) + "]"
    shown = " | ".join(format_shape(s) for s in distinct[:3])
    return shown + (" | ..." if len(distinct) > 3 else "")


def _json_kind(value: Any) -> tuple[str, tuple[int, ...]]:
    """A JSON value's kind and, for nested lists, shape (read along the first elements)."""
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    if isinstance(value, bool):
        kind = "bool"
    elif isinstance(value, int):
        kind = "int"
    elif isinstance(value, float):
        kind = "float"
    elif isinstance(value, str):
        kind = "string"
    elif value is None:
        kind = "null"
    elif isinstance(value, list):
        kind = "list"
    else:
        kind = "object"
    return kind, tuple(shape)


def finish_report(report: FileReport, groups: ProblemGroups, stats: FieldStats, *,
                  path: str | os.PathLike[str], lines: int, require_complete: bool,
                  tail_bytes: int = 0) -> FileReport:
    """Fill in what every file report ends with: where, how many lines, fields and problems.

    A source that held no line or row at all is itself a problem (`no records`).
    """
    report.path = os.fspath(path)
    report.lines = lines
    report.partial_tail_bytes = tail_bytes
    report.require_complete = require_complete
    if lines == 0:
        groups.add([Problem("", "at least one step record", "an empty file", "no records")])
    report.fields, report.more_fields = stats.summaries()
    report.groups = list(groups.groups.values())
    report.problem_count = groups.count
    report.ungrouped = groups.ungrouped
    return report
