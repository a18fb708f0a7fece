"""The field map (`map.json`, docs/contract.md §7): a declarative, reviewable recipe from sample columns to
the trainer's batch.

    {"gyre_field_map": 1,
     "fields": {
       "obs":       {"from": "observation"},
       "action":    {"from": "action", "cast": "int64"},
       "done":      {"op": "any", "from": ["terminated", "truncated"]},
       "advantage": {"op": "gae", "from": ["reward", "value", "terminated", "truncated",
                                           "next_value"], "gamma": 0.99, "lam": 0.95},
       "mask":      {"op": "mask"}}}

Ops run *after* collation, on `[B, T, ...]` arrays: `gae` and `discounted_return` need whole rows,
the `mask` and each row's `next_value`, which only exist once episodes are collated. Every source
name refers to a collated column (`observation`, `observation.image`, `reward`, ...) or to a key
`collate` adds (`mask`, `episode_id`, `policy_version`, `next_value`), never to another target.
Only the fields the map names reach the batch. A missing source raises `MissingFieldError`;
nothing is ever filled with a default. Ops come from a fixed registry; a map can never import,
eval, open a file or reach the network. Python code may add ops with `register_op`.
The ops themselves live in `gyre_contract.trainer._ops`; their public names are re-exported here.

Keys of a field spec: `op` (default `rename`), `from`, the op's own arguments, and:

- `then`: a chain of at most `MAX_THEN` (8) steps run in order on the op's result, each an object
  `{"op": NAME, ...arguments}` whose op takes exactly one input (cast, not, transpose, reshape,
  squeeze, unsqueeze, shift, episode_start, per_step, sum, or a custom op registered with one
  source; `step_ops()` lists them). A step has no `from`: its input is the result so far. Its
  arguments are checked like a field's. TorchRL's `next.done` `[B, T, 1]`:
  `{"op": "any", "from": ["terminated", "truncated"], "then": [{"op": "unsqueeze", "axis": -1}]}`.
- `cast`: a dtype the final result is cast to, losslessly or refused (after `then`).
- `comment`: free text for reviewers.

`and_not` takes two bool fields, `"from": [flag, exclude]`, and gives `flag AND NOT exclude`:
RLDS `truncated` is `{"op": "and_not", "from": ["is_last", "is_terminal"]}` (the last step of an
episode that did not terminate). `per_step` repeats a per-row column (`episode_id` `[B]`) on
each step, `[B, T]`, for a trainer that reads one per step (RLlib's `eps_id`). A map written
without these keys and ops reads as before.

The top-level layout keys (`rows`, `layout`, `batch_dims`, `pad_to`, `token_budget`) say what
one batch row is and how the trainer lays the batch out: the map's row layout, `FieldMap.layout`
(`trainer._layouts`: `EpisodeRows`, the default, a contiguous run of one episode per row,
`[B, T, ...]` with a `mask`; `TokenRows`, one token row per step, an LLM's generated turn, whose
column names the sources then refer to; `PackedRows`, those rows packed into micro-batch rows of
a token budget). The map asks its layout how to collate, which models to validate and read as,
which entries it refuses, how to lay the results out (`arrange`: packed rows put a per-token
result at its tokens) and how to describe itself; `batch_dims` and `layout`, written by
`diff --write-map`, let `FieldMap.batch` and `gyre-contract batch --trainer` run without
`--batch-dims` on the very schema the diff read.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gyre_contract.core._errors import FieldMapError, MissingFieldError
from gyre_contract.core._models import TrainBatch
from gyre_contract.core._validate import validate_batch
from gyre_contract.io._jsonfile import JSONFileError, read_json_file
from gyre_contract.schema._fieldtable import SchemaInput
from gyre_contract.trainer._batching import Source, build_batch
from gyre_contract.trainer._layouts import (
    LAYOUT_KEYS,
    EpisodeRows,
    RowLayout,
    parse_layout,
    per_step_columns,
)
from gyre_contract.trainer._ops import (
    NEEDS_MASK,
    ArgCheck,
    Op,
    OpFunction,
    cast_array,
    check_dtype,
    get_op,
    known_ops,
    number_text,
    ops_generation,
    register_op,
    run_op,
    step_ops,
    unregister_op,
)
from gyre_contract.trainer._trainerbatch import TrainerSchema

__all__ = [
    "COMMON_KEYS", "FORMAT_VERSION", "MAX_MAP_BYTES", "MAX_THEN", "ArgCheck", "FieldMap", "FieldSpec",
    "Op", "OpFunction", "Step", "as_field_map", "cast_array", "known_ops", "register_op",
    "step_ops", "unregister_op",
]

FORMAT_VERSION = 1
COMMON_KEYS = ("op", "from", "then", "cast", "comment")
"""Keys every field spec may hold; anything else must be an argument of its op."""
MAX_THEN = 8
"""Steps a `then` chain may hold at most: a map stays short enough to review."""
ADD_OP_HINT = "your own op: register_op in Python, or on the command line --ops MODULE_OR_FILE.py"
"""How to add an op, said after the list of known ops when a map names an unknown one."""
MAX_MAP_BYTES = 1024 * 1024
"""A larger map file is refused unread (FieldMapError): a map is a short, reviewed file."""


@dataclass(frozen=True)
class Step:
    """One step of a field's `then` chain: a one-input op and its arguments."""

    op: str
    args: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The step as it is written in a map file."""
        return {"op": self.op, **self.args}


@dataclass(frozen=True)
class FieldSpec:
    """One target field of the map: which op, from which sources, with which arguments, then
    which one-input steps, then which cast."""

    target: str
    op: str
    sources: tuple[str, ...]
    args: Mapping[str, Any]
    cast: str | None = None
    comment: str | None = None
    then: tuple[Step, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The spec as it is written in a map file."""
        out: dict[str, Any] = {} if self.op == "rename" else {"op": self.op}
        op = get_op(self.op)
        if self.sources:
            single = op is not None and op.sources in ("one", "none")
            out["from"] = self.sources[0] if single else list(self.sources)
        out.update(self.args)
        if self.then:
            out["then"] = [step.to_dict() for step in self.then]
        if self.cast is not None:
            out["cast"] = self.cast
        if self.comment is not None:
            out["comment"] = self.comment
        return out


# -- the map -------------------------------------------------------------------------------

class FieldMap:
    """A checked field map. Build it with `FieldMap.load(path)` or `FieldMap.from_dict(d)`."""

    def __init__(self, fields: Mapping[str, FieldSpec], *, source: str = "field map",
                 layout: RowLayout | None = None) -> None:
        self.fields: dict[str, FieldSpec] = dict(fields)
        self.source = source
        self.layout: RowLayout = layout if layout is not None else EpisodeRows()
        """What one row of the batch is, and the trainer layout the map was written for."""

    def __repr__(self) -> str:
        layout = "" if self.layout == EpisodeRows() else f", layout={self.layout!r}"
        return f"FieldMap({self.source!r}, fields=[{', '.join(self.fields)}]{layout})"

    @property
    def batch_model(self) -> Any:
        """The batch model a built batch is validated as by default: the layout's (`TrainBatch`
        for runs of episodes, `TokenBatch` for token rows)."""
        return self.layout.batch_model

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> FieldMap:
        """Read and check a `map.json` file (InputError if unreadable, FieldMapError if bad).

        Strict JSON: UTF-8, no NaN/Infinity, no duplicate keys, no lone surrogates, at most
        `MAX_MAP_BYTES`. Nothing in the file is imported, evaluated or opened."""
        path = Path(path)
        try:
            data = read_json_file(path, what="field map", max_bytes=MAX_MAP_BYTES,
                                  limit_name="MAX_MAP_BYTES")
        except JSONFileError as err:
            raise FieldMapError(f"{path}: {err}") from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "field map") -> FieldMap:
        """Check a map given as parsed JSON; every problem is reported in one FieldMapError."""
        problems: list[str] = []
        fields: dict[str, FieldSpec] = {}
        if not isinstance(data, Mapping):
            raise FieldMapError(f"{source}: expected a JSON object with keys gyre_field_map and "
                                f"fields, got {_json_type(data)}")
        allowed = ("gyre_field_map", "fields", *LAYOUT_KEYS, "comment")
        extra = sorted(set(data) - set(allowed))
        if extra:
            problems.append(f"unknown top-level keys {extra}; allowed: {', '.join(allowed)}")
        layout = parse_layout(data, problems)
        version = data.get("gyre_field_map")
        if "gyre_field_map" not in data:
            problems.append(f'not a field map: no "gyre_field_map" key (expected '
                            f'"gyre_field_map": {FORMAT_VERSION})')
        elif version != FORMAT_VERSION or isinstance(version, bool):
            problems.append(f"unsupported field-map version {json.dumps(version)}; this "
                            f"gyre-contract reads version {FORMAT_VERSION}")
        specs = data.get("fields")
        if not isinstance(specs, Mapping) or not specs:
            problems.append(f'"fields" must be a non-empty object mapping each trainer field to '
                            f"its spec, got {_json_type(specs)}")
        else:
            for target, spec in specs.items():
                parsed = _parse_spec(target, spec, problems)
                if parsed is not None:
                    fields[target] = parsed
        if layout is not None and not problems:
            problems += layout.field_problems({t: _reads(spec) for t, spec in fields.items()})
        if problems:
            raise FieldMapError(_render(source, problems))
        return cls(fields, source=source, layout=layout)

    def to_dict(self) -> dict[str, Any]:
        """The map as JSON-ready data (what `load` reads)."""
        return {"gyre_field_map": FORMAT_VERSION, **self.layout.to_dict(),
                "fields": {t: s.to_dict() for t, s in self.fields.items()}}

    def batch(self, source: Source, *, trainer: SchemaInput | TrainerSchema | None = None,
              batch_dims: tuple[str, ...] | list[str] | str | None = None,
              model: Any = None) -> dict[str, np.ndarray]:
        """The trainer's batch in memory, in one call: exactly the arrays
        `gyre-contract batch --map M.json [--trainer T.json] -o` writes (nested names joined
        with `.`), validated as `self.batch_model` or, with `trainer=` (a JSON Schema path or
        dict, ours or foreign, or a `TrainerSchema`), against that schema under its keys.

        `source`: a rollout file (JSON Lines or Parquet; read on every call), episodes, or step
        records (dicts or step models, validated as `model`: default `RolloutStep`, `LLMStep`
        for token rows). A list can be passed again; an iterator such as `read_episodes(path)`
        is consumed by the call. The trainer schema's batch dims: `batch_dims=`, else the
        schema's own, else the ones this map records. Raises ContractError (the batch breaks
        the contract or the schema), SchemaError (the schema cannot describe a batch)."""
        return build_batch(self, source, trainer=trainer, batch_dims=batch_dims,
                           model=model).arrays

    def describe(self) -> str:
        """How this map makes the batch, in plain terms, one clause per field that does more
        than copy a same-named source, joined by "; " (what a run record's `notes` start with):
        "done ← terminated OR truncated; advantage by GAE γ=0.99 λ=0.95, truncation
        bootstrapped from next_value; mask from padding". Each op describes itself."""
        clauses = [self.layout.describe()] if self.layout.describe() else []
        for target, spec in self.fields.items():
            op = get_op(spec.op)
            text = op.text(target, spec.sources, spec.args) if op is not None else \
                f"{target} ← {spec.op}({', '.join(spec.sources)})"
            if spec.then or spec.cast is not None:
                text = text or f"{target} ← {spec.sources[0]}"
            if spec.then:
                text += ", then " + ", ".join(_step_text(step) for step in spec.then)
            if spec.cast is not None:
                text += f" as {spec.cast}"
            if text:
                clauses.append(text)
        return "; ".join(clauses)

    def sources(self) -> list[str]:
        """Every source name the map reads, in first-use order, including the columns its ops
        read besides their sources (`mask`; `response_mask`, `prompt_mask`, ... for token ops)."""
        return list(self._derived()[0])

    def reads(self) -> dict[str, tuple[str, ...]]:
        """Per target, the columns its entry reads (its sources and what its ops read besides):
        what the row layout checks and lays the results out by."""
        return dict(self._derived()[1])

    def sparse_sources(self) -> list[str]:
        """The sources only some steps carry that the map may read (the final observation of
        `next`): read by no entry as a whole column, and not part of (or containing) a group
        another entry reads. Collation gives each a `<name>_present` mask and requires every
        other source on every step (a step without one is `MissingFieldError`)."""
        return list(self._derived()[2])

    def _derived(self) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], tuple[str, ...]]:
        """(`sources`, `reads`, `sparse_sources`), worked out once per state of the map's
        entries and of the op registry (a batch per `get` reads them every time): cached under
        the entries themselves (`FieldSpec` is frozen: an entry added, removed or replaced
        changes the key, which holds the entries by identity and keeps them alive) and
        `ops_generation` (an op registered, replaced or removed)."""
        specs = tuple(self.fields.values())
        key = (ops_generation(), tuple(self.fields), tuple(map(id, specs)))
        held = getattr(self, "_held", None)
        if held is not None and held[0] == key:
            return held[2]
        reads = {target: _reads(spec) for target, spec in self.fields.items()}
        sources = tuple(dict.fromkeys(name for names in reads.values() for name in names))
        found = (sources, reads, tuple(self._sparse(sources)))
        self._held = (key, specs, found)
        return found

    def _sparse(self, sources: tuple[str, ...]) -> list[str]:
        sparse: list[str] = []
        for spec in self.fields.values():
            op = get_op(spec.op)
            sparse += [spec.sources[i] for i in (op.sparse if op is not None else ())
                       if i < len(spec.sources)]
        full: set[str] = set()
        for spec in self.fields.values():
            op = get_op(spec.op)
            full.update(name for i, name in enumerate(spec.sources)
                        if op is None or i not in op.sparse)
        full.update(name for name in sources if name not in sparse)
        return [name for name in dict.fromkeys(sparse)
                if not any(_overlaps(name, other) for other in full)]

    def apply(self, columns: Mapping[str, Any]) -> dict[str, Any]:
        """Build every target field from collated `[B, T, ...]` columns (see `collate`), laid
        out as the map's row layout lays a batch out (`RowLayout.arrange`: packed token rows
        put each per-token result at its tokens' positions).

        A source that names a group (`observation` with columns `observation.image`, ...) is a
        dict of its modalities. Only the targets the map names are returned.
        """
        out: dict[str, Any] = {}
        columns = _Columns(columns)  # ops may share work within this call (`memo`)
        for target, spec in self.fields.items():
            op = self._registered(target, spec.op)
            inputs = [_source(columns, name) for name in spec.sources]
            value = run_op(op, inputs, columns, spec.args, spec.sources)
            for step in spec.then:
                value = run_op(self._registered(target, step.op), [value], columns, step.args)
            if spec.cast is not None:
                value = cast_array(value, spec.cast)
            out[target] = value
        return self.layout.arrange(out, columns, self.reads())

    def _registered(self, target: str, name: str) -> Op:
        """The op named `name`; a custom op unregistered since the map was checked is an error."""
        op = get_op(name)
        if op is None:
            raise FieldMapError(f"{self.source}: fields.{target}: op {name!r} is no longer "
                                f"registered; known ops: {', '.join(known_ops())}; {ADD_OP_HINT}")
        return op

    def to_train_batch(
        self,
        episodes: Iterable[Any],
        *,
        max_len: int | None = None,
        current_version: int | None = None,
        max_staleness: int | None = None,
        batch_model: Any = None,
    ) -> Any:
        """Collate episodes, apply the map, validate the result as `batch_model` (default
        `self.batch_model`: a `TrainBatch`, docs/contract.md §4, or for step rows a `TokenBatch`)."""
        batch = self.build(episodes, max_len=max_len)
        return _validate(batch, batch_model or self.batch_model, current_version, max_staleness)

    def build(self, episodes: Iterable[Any], *, max_len: int | None = None) -> dict[str, Any]:
        """Collate only the columns the map reads, then apply the map; not validated."""
        return self.apply(self.collated(episodes, max_len=max_len))

    def collated(self, episodes: Iterable[Any], *, max_len: int | None = None
                 ) -> dict[str, Any]:
        """The collated columns the map reads, as its layout collates them (what `apply` runs
        on): for runs of episodes `[B, T, ...]` with `mask` and the per-row keys (the mask tells a
        report how much of the batch is padding); for token rows the `TokenBatch` columns with
        `episode_id` and `policy_version` (the staleness checks of `half_way` and `full_loop`
        read it even when the trainer does not). `episodes`: episodes, or for token rows a flat
        list of step records too."""
        return self.layout.collate(episodes, fields=self.sources(), max_len=max_len,
                                   sparse=self.sparse_sources(), source=self.source)

    def collated_block(self, columns: Mapping[str, Any], *, episodes: Any = None
                       ) -> dict[str, Any]:
        """`collated` of a block of step columns (a channel's delivery: steps of several
        episodes; a column of token lists may be a `Ragged`), straight from the columns where
        its layout can (the same arrays), else of `layout.from_block(columns)`. `episodes`:
        (each step's episode code in order of first appearance, the ids by code) when the
        caller knows them."""
        found = self.layout.collate_block(columns, fields=self.sources(),
                                          sparse=self.sparse_sources(), episodes=episodes)
        if found is not None:
            return found
        return self.collated(self.layout.from_block(per_step_columns(columns)))

    def collated_file(self, path: str | os.PathLike[str], model: Any, *,
                      max_len: int | None = None) -> tuple[dict[str, Any], int] | None:
        """`collated` of a rollout file straight from its columns, with the number of
        episodes; None when only episodes can say (and for token rows)."""
        return self.layout.collate_file(path, model, fields=self.sources(), max_len=max_len,
                                        sparse=self.sparse_sources(),
                                        flat_tokens=flat_tokens(self.fields.values()))


def as_field_map(source: FieldMap | Mapping[str, Any] | str | os.PathLike[str]) -> FieldMap:
    """A `FieldMap` from itself, its JSON data (`from_dict`) or a `map.json` path (`load`)."""
    if isinstance(source, FieldMap):
        return source
    if isinstance(source, Mapping):
        return FieldMap.from_dict(source)
    return FieldMap.load(source)


class _Columns(dict[str, Any]):
    """The collated columns as ops see them during one `FieldMap.apply`: a dict, plus `memo`
    where an op keeps what another target of the same map reuses (GAE's advantage and return)."""

    def __init__(self, columns: Mapping[str, Any]) -> None:
        super().__init__(columns)
        self.memo: dict[Any, Any] = {}


def _validate(batch: Mapping[str, Any], model: Any, current_version: int | None,
              max_staleness: int | None) -> Any:
    return validate_batch(batch, model or TrainBatch, current_version=current_version,
                          max_staleness=max_staleness)



def _step_text(step: Step) -> str:
    """One `then` step in plain terms: its op with its arguments ("unsqueeze axis=-1")."""
    args = " ".join(f"{k}={number_text(v)}" for k, v in step.args.items())
    return f"{step.op} {args}" if args else step.op


def _reads(spec: FieldSpec) -> tuple[str, ...]:
    """The columns one entry reads: its sources, `mask` for the ops that need it, and what its
    ops read besides their sources (`response_mask`, `prompt_mask`, ... for token ops)."""
    ops = (spec.op, *(step.op for step in spec.then))
    implicit = ("mask",) if NEEDS_MASK.intersection(ops) else ()
    read = [name for op, names in ((spec.op, spec.sources),
                                   *((step.op, ()) for step in spec.then))
            if (found := get_op(op)) is not None
            for name in found.columns_read(names)]
    return tuple(dict.fromkeys((*spec.sources, *implicit, *read)))


FLAT_READERS = frozenset({"per_token"})
"""The ops that take `response_mask` as its real tokens alone (`tokenops.ResponseValues`)."""


def flat_tokens(specs: Iterable[FieldSpec]) -> tuple[str, ...]:
    """The columns every entry reading them only renames (or, for `response_mask`, reads
    through a `per_token` whose result is the entry's, not cast nor taken by another step): a
    layout that puts per-token values on the real tokens alone (packed rows) may collate them
    as those (`RowLayout.collate_file`). None of them when an op is not a built-in (what it
    reads of the columns is its own)."""
    specs = list(specs)
    ops = {name: get_op(name) for spec in specs for name in (spec.op, *(s.op for s in spec.then))}
    found = {name: op for name, op in ops.items() if op is not None and op.builtin}
    if len(found) < len(ops):
        return ()
    kept: dict[str, bool] = {}
    for spec in specs:
        plain = not spec.then and spec.cast is None
        readers = [(spec.op, spec.sources), *((step.op, ()) for step in spec.then)]
        for name in _reads(spec):
            through = [i for i, (op, names) in enumerate(readers)
                       if name in found[op].columns_read(names)]
            if name == "response_mask" and name not in spec.sources:
                # its result leaves the entry as it is: nothing after it reads ResponseValues
                ok = through == [len(readers) - 1] and spec.cast is None and \
                    readers[-1][0] in FLAT_READERS
            else:
                ok = plain and spec.op == "rename" and spec.sources == (name,)
            kept[name] = kept.get(name, True) and ok
    return tuple(name for name, ok in kept.items() if ok)


def _overlaps(a: str, b: str) -> bool:
    """One name is the other, or a group holding it (`next_observation` and
    `next_observation.image`)."""
    return a == b or a.startswith(f"{b}.") or b.startswith(f"{a}.")


def _source(columns: Mapping[str, Any], name: str) -> Any:
    if name in columns:
        return columns[name]
    prefix = f"{name}."
    group = {k[len(prefix):]: v for k, v in columns.items() if k.startswith(prefix)}
    if group:
        return group
    raise MissingFieldError(name, columns.keys())



# -- parsing -------------------------------------------------------------------------------

def _parse_spec(target: str, spec: Any, problems: list[str]) -> FieldSpec | None:
    where = f"fields.{target}"
    if not target:
        problems.append("fields: a trainer field name must be non-empty")
        return None
    if not isinstance(spec, Mapping):
        problems.append(f'{where}: expected an object such as {{"from": "..."}}, '
                        f"got {_json_type(spec)}")
        return None
    op_name = spec.get("op", "rename")
    op = get_op(op_name) if isinstance(op_name, str) else None
    if op is None:
        problems.append(f"{where}: unknown op {json.dumps(op_name)}{_did_you_mean(op_name, known_ops())}"
                        f"; known ops: {', '.join(known_ops())}; {ADD_OP_HINT}")
        return None
    count = len(problems)
    sources = _parse_sources(where, op, spec, problems)
    args = {k: v for k, v in spec.items() if k not in COMMON_KEYS}
    _check_args(where, op, args, problems)
    cast = spec.get("cast")
    if "cast" in spec and (msg := check_dtype(cast)):
        problems.append(f"{where}: cast must be {msg}")
    comment = spec.get("comment")
    if "comment" in spec and not isinstance(comment, str):
        problems.append(f"{where}: comment must be a string, got {_json_type(comment)}")
    named = sources[0] if op.name == "rename" and len(sources) == 1 else None
    then = _parse_then(where, spec["then"], problems, named) if "then" in spec else ()
    if len(problems) > count:
        return None
    return FieldSpec(target, op.name, sources, args, cast, comment, then)


_STEP_EXAMPLE = '{"op": "unsqueeze", "axis": -1}'


def _parse_then(where: str, raw: Any, problems: list[str], named: str | None = None
                ) -> tuple[Step, ...]:
    """Check a `then` chain: a list of 1 to MAX_THEN one-input steps. `named`: the column the
    first step's input is a copy of (the field's `from` when its op is a rename)."""
    if not isinstance(raw, list):
        problems.append(f'{where}: "then" must be a list of steps such as [{_STEP_EXAMPLE}], '
                        f"got {_json_type(raw)}")
        return ()
    if not 1 <= len(raw) <= MAX_THEN:
        problems.append(f'{where}: "then" must hold 1 to {MAX_THEN} steps, got {len(raw)}')
        return ()
    steps = [_parse_step(f"{where}.then[{i}]", item, problems, named if i == 0 else None)
             for i, item in enumerate(raw)]
    return tuple(step for step in steps if step is not None)


def _parse_step(where: str, raw: Any, problems: list[str], named: str | None = None
                ) -> Step | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: expected an object such as {_STEP_EXAMPLE}, "
                        f"got {_json_type(raw)}")
        return None
    allowed = ", ".join(step_ops())
    name = raw.get("op")
    op = get_op(name) if isinstance(name, str) else None
    if op is None:
        what = f"unknown op {json.dumps(name)}" if "op" in raw else 'a step needs "op"'
        problems.append(f"{where}: {what}{_did_you_mean(name, step_ops())}; ops a step may use: "
                        f"{allowed}")
        return None
    if op.named and op.sources == "one":
        problems.append(_unnamed_input(where, op, raw, named))
        return None
    if op.name not in step_ops():
        why = "does nothing in a chain" if op.name == "rename" else \
            "does not take exactly one input"
        problems.append(f'{where}: op "{op.name}" {why}; a step\'s only input is the result so '
                        f"far; ops a step may use: {allowed}")
        return None
    if "from" in raw:
        problems.append(f'{where}: a step takes no "from": its input is the result so far')
        return None
    count = len(problems)
    args = {k: v for k, v in raw.items() if k != "op"}
    _check_args(where, op, args, problems, common=("op",))
    return Step(op.name, args) if len(problems) == count else None


def _unnamed_input(where: str, op: Op, raw: Mapping[str, Any], named: str | None) -> str:
    """Why an op that finds its input's mask by the input's name cannot be a `then` step."""
    if named is not None:
        looked = ", ".join(f'"{c}"' for c in op.columns_read((named,)))
        found = f' (for "{named}" it reads the column {looked})'
        fix = json.dumps({"from": named, **raw})
        fix = f"; write it as the field's own op: {fix}"
    else:
        found, fix = (" (X_mask for X_ids or X, response_length for a response column)",
                      "; make it the field's own op, on a named column, and chain the rest "
                      "after it")
    return (f'{where}: op "{op.name}" finds the mask of its input by the input\'s name{found}, '
            f"but a step's input is the result so far, which has no name and so no mask to "
            f"find{fix}")


def _parse_sources(where: str, op: Op, spec: Mapping[str, Any], problems: list[str]
                   ) -> tuple[str, ...]:
    raw = spec.get("from")
    if op.sources == "none":
        if raw is None:
            return ()
        if isinstance(raw, str) and raw:
            return (raw,)
        problems.append(f'{where}: op "{op.name}" takes at most one source name in "from"')
        return ()
    if raw is None:
        problems.append(f'{where}: op "{op.name}" needs "from" ({_sources_text(op)})')
        return ()
    if op.sources == "one":
        if isinstance(raw, str) and raw:
            return (raw,)
        problems.append(f'{where}: op "{op.name}" needs "from" to be one field name, '
                        f"got {json.dumps(raw)}")
        return ()
    if not isinstance(raw, list) or not raw or not all(isinstance(s, str) and s for s in raw):
        problems.append(f'{where}: op "{op.name}" needs "from" to be a list of field names '
                        f"({_sources_text(op)}), got {json.dumps(raw)}")
        return ()
    if isinstance(op.sources, tuple) and len(raw) != len(op.sources):
        problems.append(f'{where}: op "{op.name}" needs {len(op.sources)} sources in "from" '
                        f"({_sources_text(op)}), got {len(raw)}")
        return ()
    return tuple(raw)


def _sources_text(op: Op) -> str:
    if isinstance(op.sources, tuple):
        return "in order: " + ", ".join(op.sources)
    return {"one": "one field name", "many": "a list of field names"}.get(op.sources, "")


def _check_args(where: str, op: Op, args: Mapping[str, Any], problems: list[str], *,
                common: Iterable[str] = COMMON_KEYS) -> None:
    if op.args is None:
        return
    unknown = sorted(set(args) - set(op.args))
    if unknown:
        allowed = sorted({*op.args, *common} - ({"from"} if op.sources == "none" else set()))
        hints = "".join(_did_you_mean(u, allowed) for u in unknown)
        problems.append(f'{where}: op "{op.name}" does not take {", ".join(unknown)}{hints}; '
                        f"allowed keys: {', '.join(allowed)}")
    for name in op.required:
        if name not in args:
            problems.append(f'{where}: op "{op.name}" needs argument "{name}"')
    for name, value in args.items():
        check = op.args.get(name)
        if check is not None and (msg := check(value)):
            problems.append(f'{where}: "{name}" must be {msg}')


def _did_you_mean(name: Any, options: Iterable[str]) -> str:
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" (did you mean {json.dumps(close[0])}?)" if close else ""


def _render(source: str, problems: list[str]) -> str:
    if len(problems) == 1:
        return f"{source}: {problems[0]}"
    return f"{source}: {len(problems)} problems: " + "; ".join(problems)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {json.dumps(value)}"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, Mapping) else type(value).__name__


