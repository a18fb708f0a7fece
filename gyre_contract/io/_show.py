"""One episode of a rollout file on screen, step by step: look at it before batching.

`show_episode(path)` reads a JSON Lines or Parquet file until the first *complete* episode (its
terminated or truncated step) — or the one named — has ended, checks its steps with the same
loop `validate_file` uses (`checking.StepChecker`: record rules, then episode rules) and returns
an `EpisodeView`, a `Report`: one row per step, the step number first, then each field. Scalars
show as values, tensors as `dtype[shape]` with their first values; a value that is null, not
finite, a dim that changed size since the previous step and a set end flag are marked; a field
a step does not carry shows as absent ("—"), never as NaN.

Bounded: reading stops at the chosen episode's end, and at most `MAX_HELD_STEPS` steps of
unfinished episodes are held while looking for the first complete one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel

from gyre_contract.core._errors import InputError, Problem
from gyre_contract.core._fields import AnyObservation, field_specs
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import RolloutStep, RolloutStepV1
from gyre_contract.core._report import Report
from gyre_contract.core._tensor import TensorSpec
from gyre_contract.core._text import printable, quoted, shorten, shown
from gyre_contract.io._checking import StepChecker
from gyre_contract.io._episodes import modality_values
from gyre_contract.io._lines import Item, Lines, Parsed
from gyre_contract.io._parquet import is_parquet, iter_parquet_records

MAX_HELD_STEPS = 50_000
"""Rows of unfinished episodes held while looking for the episode to show (each row its cells,
not its record); past it, an InputError asks for `--episode`, so memory stays bounded on a
file with no complete episode."""

SHOWN_VALUES = 3
"""Values of a tensor shown after its `dtype[shape]`."""

CELL_CHARS = 30
"""A cell of the text table is cut to this many characters (with "…")."""

NAMED_IDS = 5
"""Episode ids named in the error for an episode that is not in the file."""

MAX_PROBLEMS = 200
"""Problems kept and listed; the rest are counted (`more_problems`)."""

MAX_COLUMNS = 100
"""Fields kept per step (the model's first, in its order); a record with more keys has the rest
counted (`more_keys`), so a record of thousands of unknown keys stays a short row."""

MARKS = {
    "absent": "— the step does not carry the field",
    "null": "null: the value is null",
    "non_finite": "! a value is not finite",
    "dim_jump": "^ a dim changed size since the previous step",
    "end": "◀ end flag set (terminated / truncated)",
    "problem": "✗ the step breaks a rule (listed below)",
}
"""Each mark a cell can carry, with its legend line."""

_SYMBOL = {"non_finite": "!", "dim_jump": "^", "end": "◀", "problem": "✗"}
_END_FLAGS = ("terminated", "truncated")


@dataclass(slots=True)
class Cell:
    """One field of one step: its text for the table, its data for JSON, and its marks."""

    text: str
    data: dict[str, Any]
    marks: tuple[str, ...] = ()

    def shown(self) -> str:
        """The cell's text with its mark symbols, as the table prints it."""
        symbols = "".join(_SYMBOL[m] for m in self.marks if m in _SYMBOL)
        return f"{self.text} {symbols}" if symbols else self.text


@dataclass(slots=True)
class StepRow:
    """One step: its line (or Parquet row), its step number and its cells by column name."""

    line: int
    step: Any
    cells: dict[str, Cell]
    problem: bool = False


@dataclass
class EpisodeView(Report):
    """What `gyre-contract show` prints: one episode's steps, the problems they have.

    `ok` is False when a step breaks a record rule or an episode rule (the problems carry the
    rule's name). `ended` is "terminated", "truncated" or "open" (the file ends, or the reading
    limit came, before the episode's last step). `width` bounds the text table (None: the
    terminal's width).
    """

    path: str
    episode_id: str
    rows: list[StepRow]
    columns: list[str]
    ended: str
    policy_versions: list[Any]
    problems: list[Problem] = field(default_factory=list)
    width: int | None = None
    more_problems: int = 0
    more_keys: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "gyre_show": 1,
            "file": self.path,
            "episode_id": shorten(self.episode_id),
            "length": len(self.rows),
            "ended": self.ended,
            "policy_versions": self.policy_versions,
            "columns": ["step", *map(shorten, self.columns)],
            "steps": [_row_dict(row) for row in self.rows],
            "problems": [p.to_dict() for p in self.problems],
            "more_problems": self.more_problems,
            "more_keys": self.more_keys,
            "ok": self.ok,
        }

    def to_text(self) -> str:
        lines = [self._header(), ""]
        lines += _table(self.rows, self.columns, self._width())
        used = {m for row in self.rows for c in row.cells.values() for m in c.marks}
        used |= {"problem"} if any(row.problem for row in self.rows) else set()
        if used:
            lines += ["", "marks: " + " · ".join(MARKS[m] for m in MARKS if m in used)]
        if self.more_keys:
            lines.append(f"{self.more_keys} values of keys beyond the first {MAX_COLUMNS} of a "
                         f"step left out")
        lines.append("")
        if self.problems:
            total = len(self.problems) + self.more_problems
            lines.append(f"{total} problem{'s' if total != 1 else ''} "
                         f"in episode {printable(quoted(self.episode_id))}:")
            lines += [f"  {printable(str(p))} [{p.rule or 'file'}]" for p in self.problems]
            if self.more_problems:
                lines.append(f"  … and {self.more_problems} more")
        else:
            lines.append("no problems: every step holds the record and episode rules")
        return "\n".join(lines)

    def _header(self) -> str:
        versions = ", ".join(map(str, self.policy_versions)) or "none"
        where = (f"lines {self.rows[0].line}–{self.rows[-1].line}" if len(self.rows) > 1
                 else f"line {self.rows[0].line}")
        return (f"episode {printable(quoted(self.episode_id))} in {self.path} ({where}): "
                f"{len(self.rows)} "
                f"step{'s' if len(self.rows) != 1 else ''}, ended {self.ended}, "
                f"policy version{'s' if len(self.policy_versions) != 1 else ''} {versions}")

    def _width(self) -> int:
        if self.width is not None:
            return self.width
        return shutil.get_terminal_size(fallback=(100, 24)).columns


def show_episode(
    path: str | os.PathLike[str],
    episode: str | None = None,
    model: type[RolloutStepV1] = RolloutStep,
    *,
    width: int | None = None,
) -> EpisodeView:
    """One episode of a rollout file as an `EpisodeView`: the first complete one, or `episode`.

    Reading stops when that episode ends. Without a complete episode in the file, the first
    episode is shown as open. Raises InputError when the file is unreadable, holds no episode,
    has no episode `episode` (naming up to `NAMED_IDS` that it has) or holds more than
    `MAX_HELD_STEPS` unfinished steps before the episode's end.
    """
    name = os.fspath(path)
    eid, built, ended = _read(name, episode, model)
    columns = _column_order(built.rows, model)
    return EpisodeView(name, eid, built.rows, columns, ended, built.versions,
                       built.checker.found, width, built.checker.more, built.more_keys)


class _Collecting(StepChecker):
    """A StepChecker that keeps every problem in order (a plain list, not grouped)."""

    def __init__(self, model: type[RolloutStepV1]) -> None:
        super().__init__(model)
        self.found: list[Problem] = []
        self.more = 0  # problems beyond MAX_PROBLEMS, counted only

    @property
    def count(self) -> int:
        return len(self.found) + self.more

    def problems(self, problems: Any) -> None:
        for problem in problems:
            if len(self.found) < MAX_PROBLEMS:
                self.found.append(problem)
            else:
                self.more += 1


class _AbsentType:
    def __repr__(self) -> str:
        return "absent"


_Absent = _AbsentType()


class _Rows:
    """One episode's rows, built as its records arrive: each record is checked (record rules,
    then the episode rules, by one `StepChecker` per episode) and kept only as its cells, so
    memory holds the table, never the records (an image step is megabytes of JSON)."""

    def __init__(self, model: type[RolloutStepV1], specs: dict[str, Any]) -> None:
        self.model = model
        self.specs = specs
        self.checker = _Collecting(model)
        self.rows: list[StepRow] = []
        self.versions: list[Any] = []
        self.previous: dict[str, tuple[int, ...]] = {}
        self.more_keys = 0

    def add(self, n: int, record: Any, line_problems: list[Problem]) -> None:
        before = self.checker.count
        self.checker.problems(line_problems)
        checked = self.checker.record(n, record)
        values = _flat_values(checked[1], self.model) if checked else \
            _raw_values(record, self.model)
        if len(values) > MAX_COLUMNS:
            self.more_keys += len(values) - MAX_COLUMNS
            values = dict(list(values.items())[:MAX_COLUMNS])
        cells = {col: _cell(col, value, self.specs.get(col), self.previous)
                 for col, value in values.items() if col != "step"}
        step = values.get("step", _Absent)
        self.rows.append(StepRow(n, None if step is _Absent else _plain(step), cells,
                                 self.checker.count > before))
        version = values.get("policy_version", _Absent)
        if version is not _Absent and _plain(version) not in self.versions:
            self.versions.append(_plain(version))


# -- reading: until the chosen episode ends ------------------------------------------------

def _source(path: str, model: type[RolloutStepV1]) -> Iterator[Item]:
    if is_parquet(path):
        return iter_parquet_records(path, model)
    return iter(Lines(path, allow_partial_tail=False))


def _read(path: str, wanted: str | None, model: type[RolloutStepV1]) -> tuple[str, _Rows, str]:
    """(episode id, its rows, how it ended): the first episode to end, or `wanted`."""
    specs = _column_specs(model)
    held: dict[str, _Rows] = {}
    named: list[str] = []
    count = 0
    for item in _source(path, model):
        if isinstance(item, Parsed):
            n, record, problems = item.line, item.record, list(item.problems)
        else:
            (n, record), problems = item, []
        if not isinstance(record, dict):
            continue
        eid = record.get("episode_id")
        if not isinstance(eid, str):
            continue
        if len(named) < NAMED_IDS and eid not in named:
            named.append(eid)
        if wanted is not None and eid != wanted:
            continue
        rows = held.get(eid)
        if rows is None:
            rows = held[eid] = _Rows(model, specs)
        rows.add(n, record, problems)
        ends = [f for f in _END_FLAGS if _is_true(record.get(f))]
        if ends:
            return eid, rows, ends[0]
        count += 1
        if count >= MAX_HELD_STEPS:
            raise InputError(f"{path}: no episode ended within {MAX_HELD_STEPS} steps read; "
                             f"name one with --episode")
    if wanted is not None and wanted in held:
        return wanted, held[wanted], "open"
    if wanted is not None:
        have = ", ".join(map(quoted, named))
        raise InputError(f"{path}: no episode {quoted(wanted)}"
                         + (f"; episodes there include {have}" if named else "; it holds none"))
    if not held:
        raise InputError(f"{path}: no episode to show (no record with an episode_id)")
    first = next(iter(held))
    return first, held[first], "open"


def _is_true(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_)) and bool(value)


# -- values and cells ----------------------------------------------------------------------

def _flat_values(step: BaseModel, model: type[RolloutStepV1]) -> dict[str, Any]:
    """A validated step's fields by wire name, modalities as `observation.image`."""
    info = model_info(model)
    out: dict[str, Any] = {}
    for wire in info.wires:
        value = getattr(step, info.attr(wire))
        if value is None:
            continue
        if isinstance(value, BaseModel):
            value = modality_values(value)
        if isinstance(value, dict) and wire != "info":
            out.update({f"{wire}.{k}": v for k, v in value.items()})
        else:
            out[wire] = value
    return out


def _raw_values(record: Any, model: type[RolloutStepV1]) -> dict[str, Any]:
    """A record that did not validate, as it is (modalities flattened like a valid step's),
    the model's fields first."""
    if not isinstance(record, dict):
        return {}
    known = set(model_info(model).wires)
    out: dict[str, Any] = {}
    for key in sorted(record, key=lambda k: k not in known):
        value = record[key]
        if isinstance(value, dict) and key in ("observation", "next_observation"):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def _column_specs(model: type[RolloutStepV1]) -> dict[str, tuple[TensorSpec | None, set[str]]]:
    """Column name → (its TensorSpec, when the model declares one; its varying dims)."""
    out: dict[str, tuple[TensorSpec | None, set[str]]] = {}
    varying = set(getattr(model, "varying_dims", ()))
    for wire, spec in field_specs(model).items():
        if isinstance(spec, AnyObservation):
            spec = spec.spec
        if isinstance(spec, TensorSpec):
            out[wire] = (spec, varying)
        elif isinstance(spec, type) and issubclass(spec, BaseModel):
            sub_varying = varying | set(getattr(spec, "varying_dims", ()))
            for key, sub in field_specs(spec).items():
                out[f"{wire}.{key}"] = (sub if isinstance(sub, TensorSpec) else None, sub_varying)
    return out


def _cell(column: str, value: Any, spec: Any, previous: dict[str, tuple[int, ...]]) -> Cell:
    """`spec` is the column's (TensorSpec or None, varying dims), None for an unknown column."""
    if value is None:
        return Cell("null", {"null": True}, ("null",))
    if isinstance(value, (list, tuple)) and column != "info":  # a record that did not validate
        try:
            array = np.asarray(value)
        except ValueError:
            array = np.asarray(None, dtype=object)
        if array.dtype == object or array.ndim == 0:
            return Cell(f"list[{len(value)}] (ragged or mixed)", {"value": _jsonable(value)})
        return _tensor_cell(column, array, spec, previous, "list")
    if isinstance(value, np.ndarray) and value.ndim > 0:
        return _tensor_cell(column, value, spec, previous)
    marks: list[str] = []
    plain = _plain(value)
    if isinstance(plain, float) and spec is not None and spec[0] is not None:
        plain = _at_width(plain, spec[0].dtypes)
    if isinstance(plain, float) and not math.isfinite(plain):
        marks.append("non_finite")
    if column in _END_FLAGS and plain is True:
        marks.append("end")
    return Cell(_scalar_text(plain), {"value": _jsonable(plain)}, tuple(marks))


def _tensor_cell(column: str, array: np.ndarray, spec: Any,
                 previous: dict[str, tuple[int, ...]], dtype: str | None = None) -> Cell:
    """`dtype[shape]` and the first values; "list" for a JSON list that did not validate."""
    dtype = dtype or ("string" if array.dtype.kind == "U" else array.dtype.name)
    flat = array.reshape(-1)
    head = [_plain(x) for x in flat[:SHOWN_VALUES]]
    marks: list[str] = []
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        marks.append("non_finite")
    old = previous.get(column)
    previous[column] = array.shape
    if old is not None and old != array.shape and not _varying_only(spec, old, array.shape):
        marks.append("dim_jump")
    first = " ".join(_scalar_text(x) for x in head) + (" …" if flat.size > SHOWN_VALUES else "")
    text = f"{dtype}[{','.join(map(str, array.shape))}] {first}".rstrip()
    data = {"dtype": dtype, "shape": list(array.shape), "head": [_jsonable(x) for x in head]}
    return Cell(text, data, tuple(marks))


def _varying_only(spec: Any, old: tuple[int, ...], new: tuple[int, ...]) -> bool:
    """True when every axis that changed size is a dim the model declares varying."""
    if spec is None:
        return False
    tensor, varying = spec
    if tensor is None or len(old) != len(new) or len(tensor.shape) != len(new):
        return False
    if any(d.variadic for d in tensor.shape):
        return False
    changed = [d for d, a, b in zip(tensor.shape, old, new) if a != b]
    return all(d.name is not None and d.name in varying for d in changed)


def _at_width(value: float, dtypes: tuple[str, ...]) -> float:
    """A float of a float16 / float32 field as that width holds it (as a Parquet file or a
    batch does), so a JSON Lines file and a Parquet file of the same steps show alike."""
    if len(dtypes) == 1 and dtypes[0] in ("float16", "float32") and math.isfinite(value) \
            and abs(value) <= float(np.finfo(dtypes[0]).max):
        return _plain(np.dtype(dtypes[0]).type(value))
    return value


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds; a narrow float by its shortest digits
    (float32 0.1 is 0.1, not 0.10000000149011612)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (np.float16, np.float32)):
        return float(str(value))
    return value.item() if isinstance(value, np.generic) else value


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return json.dumps(_jsonable(value), ensure_ascii=False)
    return str(value)


def _jsonable(value: Any) -> Any:
    """JSON data for a value; non-finite floats as the strings "nan", "inf", "-inf"; long
    strings and keys shortened as every echoed value is (`core._text.shorten`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return shorten(value)
    if isinstance(value, dict):
        return {shorten(str(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray | np.generic):
        return _jsonable(value.tolist())
    return value


# -- layout --------------------------------------------------------------------------------

def _column_order(rows: list[StepRow], model: type[RolloutStepV1]) -> list[str]:
    """The model's fields in its order (modalities after their group), then unknown keys."""
    present: dict[str, None] = {}
    for row in rows:
        present.update(dict.fromkeys(row.cells))
    order = {wire: i for i, wire in enumerate(model_info(model).wires)}
    last = len(order)
    return sorted(present, key=lambda c: order.get(c.split(".", 1)[0], last))


def _row_dict(row: StepRow) -> dict[str, Any]:
    fields = {}
    for name, cell in row.cells.items():
        data = dict(cell.data)
        if cell.marks:
            data["marks"] = list(cell.marks)
        fields[shorten(name)] = data
    out: dict[str, Any] = {"line": row.line, "step": _jsonable(row.step), "fields": fields}
    if row.problem:
        out["problem"] = True
    return out


def _cut(text: str) -> str:
    text = shown(text)
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 1] + "…"


KEPT_LAST = ("terminated", "truncated", "reward")
"""Columns a narrow table gives up last (after the step number, which it always keeps)."""


def _table(rows: list[StepRow], columns: list[str], width: int) -> list[str]:
    """The aligned table in at most `width` characters: when it is wider, columns are left out
    from the right (the end flags and the reward last) and named under the table."""
    step_col = ["step", *((_scalar_text(r.step) if r.step is not None else "—")
                          + (" ✗" if r.problem else "") for r in rows)]
    table = {"step": step_col}
    for name in columns:
        if name != "episode_id":  # the same on every row: the header names it
            table[name] = [_cut(name), *(_cut(r.cells[name].shown()) if name in r.cells else "—"
                                         for r in rows)]
    sizes = {name: max(map(len, col)) for name, col in table.items()}
    drop_order = [c for c in reversed(table) if c not in KEPT_LAST and c != "step"]
    drop_order += [c for c in reversed(KEPT_LAST) if c in table]
    left_out: list[str] = []
    while drop_order and sum(sizes.values()) + 2 * (len(sizes) - 1) > width:
        name = drop_order.pop(0)
        del sizes[name]
        left_out.append(name)
    kept = [(table[name], sizes[name]) for name in table if name in sizes]
    lines = ["  ".join(col[i].ljust(size) for col, size in kept).rstrip()
             for i in range(len(step_col))]
    if left_out:
        names_out = [shown(c) for c in table if c in left_out]
        names = ", ".join(names_out[:10]) + (", …" if len(names_out) > 10 else "")
        lines.append(f"({len(names_out)} more column{'s' if len(names_out) != 1 else ''} not shown: "
                     f"{names}; widen with --width or use --format json)")
    return lines
