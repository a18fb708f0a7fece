"""Records of ragged token lists checked on Arrow columns: the LLM step, a block at a time.

Why: an LLM step holds lists whose length changes from step to step (`action` [A], `logprob`
[A], `observation.token_ids` [P]) and an observation of modalities. `fastfile` makes no plan
for such a model, so every line of a completion file, every row of its Parquet twin and every
record a sampler hands the channel went through `validate_step` one at a time. As Arrow
columns a ragged list is one flat array of values and one of offsets, and the rules of such a
model are a few vectorised looks at them, whatever the lengths (`RaggedPlan.check`).

Which models (`ragged_plan`): every field a scalar or one list (a fixed size or a named dim) of
one dtype, modalities of such lists and plain strings, or `info`; every named dim declared
varying (the episode rules compare no dims from step to step: `LLMStep`'s P and A) and no field
with a choice of kinds; the registry's rules only.

What `check` looks at: nulls (a required field or modality absent, a null inside a list), each
list's length (a fixed size; the lengths of the fields that share a named dim agree on every
row: `step.dims_agree`), numbers (floats finite; with `widened`, numbers read as float64 /
int64 narrow to the dtype exactly: `columnrules.narrowed`), strings not empty (string tensors),
and log-probabilities <= 0 under an integer action. Like every bulk path it only ever accepts:
a block holding anything else gets None and is read record by record. pyarrow is imported
inside the functions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
from pydantic import BaseModel

from gyre_contract.core._dims import INT_RANGES, numpy_dtype
from gyre_contract.core._fields import kind_fields
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import JsonScalars, Modalities, RolloutStepV1, field_specs
from gyre_contract.core._registry import declare_fast_path
from gyre_contract.core._switches import fast_paths_enabled
from gyre_contract.core._tensor import TensorSpec
from gyre_contract.core._validate import tracks_dims
from gyre_contract.io._arrownumpy import numpy_of, valid_mask
from gyre_contract.io._columnrules import COLUMN_RULES, as_dtype, narrowed, scalars
from gyre_contract.io._fastfile import SIGNED, Block, CodedIds, coded_ids, registry_rules_only

RAGGED_FAST_PATH = declare_fast_path("ragged_columns", kinds=("field", "step"),
                                     implements=COLUMN_RULES)
"""The rules `RaggedPlan.check` implements (`columnrules.COLUMN_RULES`, named dims checked per
row): a block that breaks one is read record by record."""

PLAN_KEY = "raggedcols.plan"
"""The `ModelInfo.derived` key of a model's ragged plan."""


@dataclass(frozen=True)
class Leaf:
    """One column of values: a field, or one modality of a field of modalities."""

    path: str
    """The field's wire name, or `field.modality`."""
    wire: str
    child: str | None
    dtype: np.dtype
    list: bool
    """One list per record (else one value)."""
    size: int | None
    """The list's fixed size (None: a named dim, or no list)."""
    dim: str | None
    """The list's named dim."""
    required: bool
    """Required in its record (a modality: in its object)."""
    nonempty: bool
    """A string that must not be empty (a string tensor; a plain `str` modality may be)."""


@dataclass
class Ragged:
    """A column of lists: the values of every record's list one after another, and each
    record's length (0 where it has none; `present` says which have one, None: all)."""

    values: np.ndarray
    lengths: np.ndarray
    present: np.ndarray | None = None

    def per_record(self) -> list[np.ndarray | None]:
        """The column as one array per record (None where absent)."""
        bounds = np.r_[0, np.cumsum(self.lengths)].tolist()
        arrays = [self.values[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        if self.present is None:
            return list(arrays)
        return [a if p else None for a, p in zip(arrays, self.present.tolist())]


class NoDims:
    """`ColumnShapes` of a model whose named dims all vary: a step binds none to compare."""

    sizes: dict[str, Any] = {}
    binds_nothing = True

    def for_block(self, block: Block) -> NoDims:
        return self

    def per_episode(self, order: np.ndarray, starts: np.ndarray
                    ) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        return [{} for _ in starts], [{} for _ in starts]


class RaggedPlan:
    """The columns of one model of ragged lists and how they are checked (module doc)."""

    def __init__(self, model: type[RolloutStepV1], leaves: list[Leaf],
                 objects: dict[str, type[BaseModel]]) -> None:
        info = model_info(model)
        self.model = self.stats_model = model
        self.leaves = leaves
        self.objects = objects
        """Fields of modalities -> their model."""
        self.wires = list(info.wires)
        self.required = frozenset(info.required)
        self.has_info = any(isinstance(m, JsonScalars) for f in model.model_fields.values()
                            for m in f.metadata)
        action = next((leaf for leaf in leaves if leaf.path == "action"), None)
        self.discrete = action is not None and action.dtype.kind in "iu"
        self.bound: Any = NoDims()  # a bound plan's shapes: `raggedbinding.RaggedShapes`
        self.presence: tuple[str, ...] = ()
        self.extra: dict[str, Any] = {}
        specs = field_specs(model)
        self.array_wires = [w for w, s in specs.items()
                            if not (isinstance(s, TensorSpec) and s.is_scalar)]
        self.dims: dict[str, list[Leaf]] = {}
        for leaf in leaves:
            if leaf.dim is not None:
                self.dims.setdefault(leaf.dim, []).append(leaf)

    def by_wire(self) -> dict[str, list[Leaf]]:
        out: dict[str, list[Leaf]] = {}
        for leaf in self.leaves:
            out.setdefault(leaf.wire, []).append(leaf)
        return out

    def json_types(self) -> dict[str, Any]:
        """Wire -> the Arrow type pyarrow's JSON reader reads it as (`arrowlines`)."""
        import pyarrow as pa

        from gyre_contract.io._arrowschema import json_read_type

        out: dict[str, Any] = {}
        for wire, leaves in self.by_wire().items():
            types = [(leaf.child, json_read_type(_dtype_name(leaf.dtype), int(leaf.list)))
                     for leaf in leaves]
            out[wire] = types[0][1] if leaves[0].child is None else \
                pa.struct([pa.field(child, t) for child, t in types])
        return out

    def array_counts(self, block: Block) -> list[tuple[str, Any, tuple[int, ...], int]]:
        """(path, dtype, shape, records) of each tensor the block's records carry, in the order
        a record-by-record check first sees them (`report.FieldStats`); counted when first asked
        (a channel's `put` keeps no field table)."""
        counts = block.extra.get("array_counts")
        if counts is None:
            found = block.extra.pop("found", None)
            counts = block.extra["array_counts"] = [] if found is None else \
                self._array_counts(found)
        return counts

    def check(self, columns: Sequence[tuple[str, Any]], n: int, *, arrays: bool,
              widened: bool = False) -> Block | None:
        """The block of `n` records whose columns (name, Arrow array) are `columns`, checked
        (module doc); None when some record may break a rule. `arrays`: keep every column's
        values (`Block.ragged`, `Block.arrays`)."""
        if n == 0 or not fast_paths_enabled() or not RAGGED_FAST_PATH.usable():
            return None
        found = _Found(n)
        by_wire = self.by_wire()
        for wire, column in columns:
            leaves = by_wire.get(wire)
            nulls = column.null_count
            if leaves is None:
                if nulls == n:
                    continue  # a field no record carries (Parquet's `info` column)
                return None  # a column the plan does not know (`info`): record by record
            if nulls and wire in self.required:
                return None
            if nulls == n:
                continue
            found.counts[wire] = n - nulls
            if leaves[0].child is None:
                if not self._leaf(found, leaves[0], column, widened):
                    return None
                continue
            import pyarrow as pa

            if not pa.types.is_struct(column.type):
                return None
            names = [column.type.field(i).name for i in range(column.type.num_fields)]
            if not set(names) <= {leaf.child for leaf in leaves}:
                return None
            children = dict(zip(names, column.flatten()))  # nulls where the object is absent
            parent = None if not nulls else valid_mask(column)
            found.masks[wire] = np.ones(n, bool) if parent is None else parent
            for leaf in leaves:
                child = children.get(leaf.child or "")
                if child is None:
                    if leaf.required:
                        return None
                    continue
                if leaf.required and child.null_count != nulls:
                    return None  # a required modality absent from an object
                if child.null_count == n:
                    continue
                if not self._leaf(found, leaf, child, widened, parent):
                    return None
        return self._block(found, arrays) if self._holds(found) else None

    def from_records(self, records: Sequence[Any], arrays: bool = True) -> Block | None:
        """The block of records held in memory (dicts: what a sampler hands the channel),
        checked as `check` checks columns; None unless every value is of a type taken as it
        is: a list field a 1-D numpy array (an integer one for integers, a float one for
        floats), a modality field a dict, a scalar a Python `float` / `int` / `bool` / `str`
        (the record path decides anything else: a list, a numpy scalar, a model)."""
        n = len(records)
        if n == 0 or not fast_paths_enabled() or not RAGGED_FAST_PATH.usable():
            return None
        by_wire = self.by_wire()
        if {dict} != set(map(type, records)):
            return None  # a model: the record path reads it
        carried = set().union(*records)
        if not carried <= by_wire.keys():
            return None  # a key the plan does not know (`info`, a typo)
        found = _Found(n)
        for wire, leaves in by_wire.items():
            if wire not in carried:  # no record holds it
                if wire in self.required:
                    return None
                continue
            try:  # every record holds it (a required field): no mark of absence to look for
                values = list(map(itemgetter(wire), records))
                present, count = np.ones(n, bool), n
            except KeyError:
                values = [r.get(wire, _ABSENT) for r in records]
                present = np.fromiter((v is not _ABSENT for v in values), bool, n)
                count = int(present.sum())
            if not count:
                if wire in self.required:
                    return None
                continue
            if count < n and wire in self.required:
                return None
            found.counts[wire] = count
            held = values if count == n else [v for v in values if v is not _ABSENT]
            if leaves[0].child is None:
                if not _record_leaf(found, leaves[0], held, present):
                    return None
                continue
            if {dict} != set(map(type, held)):
                return None
            found.masks[wire] = present
            names = {leaf.child for leaf in leaves}
            inside = set().union(*held)
            if not inside <= names:
                return None
            for leaf in leaves:
                if leaf.child not in inside:  # no object holds it
                    if leaf.required:
                        return None
                    continue
                try:
                    inner = list(map(itemgetter(leaf.child), held))
                    mask = np.ones(count, bool)
                except KeyError:
                    inner = [v.get(leaf.child, _ABSENT) for v in held]
                    mask = np.fromiter((v is not _ABSENT for v in inner), bool, count)
                if leaf.required and not mask.all():
                    return None
                if not mask.any():
                    continue
                child_present = present.copy()
                child_present[present] = mask
                if not _record_leaf(found, leaf, inner if mask.all()
                                    else [v for v in inner if v is not _ABSENT], child_present):
                    return None
        return self._block(found, arrays) if self._holds(found) else None

    def _holds(self, found: _Found) -> bool:
        """The rules across a record's fields: required ones there, named dims agreeing,
        log-probabilities <= 0 under an integer action."""
        if not self.required <= found.counts.keys() or not self._dims_agree(found):
            return False
        if self.discrete and any(w in found.ragged and found.ragged[w].values.size
                                 and found.ragged[w].values.max() > 0 for w in SIGNED):
            return False  # step.logprob_nonpositive (and ref_logprob's)
        return not (self.discrete and any(
            w in found.values and (found.values[w][found.masks[w]] > 0).any() for w in SIGNED))

    def _leaf(self, found: _Found, leaf: Leaf, column: Any, widened: bool,
              parent: np.ndarray | None = None) -> bool:
        """Check one column of values; note what it holds in `found`. False: step aside."""
        import pyarrow.compute as pc

        n = found.n
        nulls = column.null_count
        present = None if not nulls else valid_mask(column)
        if leaf.dtype.kind == "U":
            if leaf.list:
                return False
            valid = column if present is None else column.drop_null()
            if leaf.nonempty and pc.min(pc.utf8_length(valid)).as_py() == 0:
                return False
            if leaf.path == "episode_id":
                encoded = pc.dictionary_encode(column)
                found.strings[leaf.path] = CodedIds(
                    numpy_of(encoded.indices).astype(np.int64), encoded.dictionary.to_pylist())
            else:
                found.strings[leaf.path] = column.to_pylist()
            found.masks[leaf.path] = np.ones(n, bool) if present is None else present
            return True
        if not leaf.list:
            flat = numpy_of(column if present is None else column.drop_null())
            values = _numbers(flat, leaf.dtype, widened)
            if values is None:
                return False
            if present is not None:
                full = np.full(n, np.nan if leaf.dtype.kind == "f" else 0, leaf.dtype)
                full[present] = values
                values = full
            found.values[leaf.path] = values
            found.masks[leaf.path] = np.ones(n, bool) if present is None else present
            return True
        flat_column = column.flatten()  # the values of the present lists, in order
        if flat_column.null_count:
            return False  # a null inside a list
        values = _numbers(numpy_of(flat_column), leaf.dtype, widened)
        if values is None:
            return False
        lengths = np.diff(numpy_of(column.offsets)).astype(np.int64, copy=False)
        if present is not None:
            lengths[~present] = 0  # a null list's offsets may span values (Arrow allows it)
        if leaf.size is not None:
            held = lengths if present is None else lengths[present]
            if np.any(held != leaf.size):
                return False  # a fixed size not held
        found.ragged[leaf.path] = Ragged(values, lengths, present)
        found.masks[leaf.path] = np.ones(n, bool) if present is None else present
        return True

    def _dims_agree(self, found: _Found) -> bool:
        """step.dims_agree: the lists sharing a named dim have one length on every record."""
        for leaves in self.dims.values():
            held = [found.ragged[leaf.path] for leaf in leaves if leaf.path in found.ragged]
            for other in held[1:]:
                first = held[0]
                both = (first.present if first.present is not None else True) & \
                    (other.present if other.present is not None else True)
                if np.any((first.lengths != other.lengths) & both):
                    return False
        return True

    def _block(self, found: _Found, arrays: bool) -> Block | None:
        n, values = found.n, found.values
        ids = found.strings.get("episode_id")
        if ids is None:
            return None
        block = Block(n=n, episode_id=ids, step=values["step"],
                      policy_version=values["policy_version"],
                      terminated=values["terminated"], truncated=values["truncated"],
                      key_counts=found.counts, lines=[], plan=self)  # type: ignore[arg-type]
        block.lists = {p: v for p, v in found.strings.items() if "." not in p}
        if arrays:
            block.extra["found"] = found  # `array_counts`, when asked
        else:
            block.extra["array_counts"] = self._array_counts(found)
        if arrays:
            block.arrays = dict(values)
            block.ragged = found.ragged
            block.extra.update(strings=found.strings, masks=found.masks)
        return block

    def _array_counts(self, found: _Found) -> list[tuple[str, Any, tuple[int, ...], int]]:
        """(path, dtype, shape, records) of each tensor (and string modality), ordered by the
        record that first holds it, then by field: the order `FieldStats.step` meets them."""
        entries: list[tuple[int, int, tuple[str, Any, tuple[int, ...]], int]] = []
        order = 0
        for wire in self.array_wires:
            for leaf in self.by_wire().get(wire, []):
                order += 1
                mask = found.masks.get(leaf.path)
                if mask is None:
                    continue
                rows = np.flatnonzero(mask)
                if not len(rows):
                    continue
                if leaf.dtype.kind == "U":
                    entries.append((int(rows[0]), order, (leaf.path, "string", ()), len(rows)))
                    continue
                lengths = found.ragged[leaf.path].lengths[rows]
                sizes, first, counts = np.unique(lengths, return_index=True, return_counts=True)
                for size, at, count in zip(sizes.tolist(), first.tolist(), counts.tolist()):
                    entries.append((int(rows[at]), order, (leaf.path, leaf.dtype, (size,)),
                                    count))
        entries.sort(key=lambda e: (e[0], e[1]))
        return [(*key, count) for _, _, key, count in entries]


@dataclass
class _Found:
    """What `RaggedPlan.check` has read of a block so far."""

    n: int

    def __post_init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.values: dict[str, np.ndarray] = {}
        self.masks: dict[str, np.ndarray] = {}
        self.strings: dict[str, Sequence[Any]] = {}
        self.ragged: dict[str, Ragged] = {}


_ABSENT = object()


def _record_leaf(found: _Found, leaf: Leaf, held: list[Any], present: np.ndarray) -> bool:
    """One leaf of in-memory records (`RaggedPlan.from_records`): its values where `present`
    (in order) checked and noted in `found`. False: the record path decides."""
    n = found.n
    every = bool(present.all())
    if leaf.dtype.kind == "U":
        if {str} != set(map(type, held)) or leaf.nonempty and not all(held):
            return False
        if leaf.path == "episode_id":
            found.strings[leaf.path] = coded_ids(held)
        else:
            values: list[Any] = held if every else [None] * n
            if not every:
                for i, v in zip(np.flatnonzero(present).tolist(), held):
                    values[i] = v
            found.strings[leaf.path] = values
        found.masks[leaf.path] = present
        return True
    if not leaf.list:
        values_ = scalars(held, leaf.dtype)
        if values_ is None:
            return False
        if not every:
            full = np.full(n, np.nan if leaf.dtype.kind == "f" else 0, leaf.dtype)
            full[present] = values_
            values_ = full
        found.values[leaf.path] = values_
        found.masks[leaf.path] = present
        return True
    accepted = _ARRAYS[leaf.dtype.kind]
    if {np.ndarray} != set(map(type, held)) \
            or any(d.kind not in accepted for d in set(map(_DTYPE, held))):
        return False
    try:  # one pass for the values; 1-D each: a 0-D array or mixed ndims raise, 2-D ones stay 2-D
        joined = np.concatenate(held) if held else np.zeros(0, leaf.dtype)
    except ValueError:
        return False
    if joined.ndim != 1:
        return False
    lengths = np.zeros(n, np.int64)
    lengths[present] = np.fromiter(map(len, held), np.int64, len(held))
    if leaf.size is not None and np.any(lengths[present] != leaf.size):
        return False
    if joined.dtype.kind == "u" and joined.size and int(joined.max()) > INT_RANGES["int64"][1]:
        return False
    flat = narrowed(joined if joined.dtype.kind != "u" else joined.astype(np.int64),
                    leaf.dtype) if leaf.dtype.kind != "b" else joined
    if flat is None:
        return False
    found.ragged[leaf.path] = Ragged(flat, lengths, None if every else present)
    found.masks[leaf.path] = present
    return True


_DTYPE = attrgetter("dtype")
_ARRAYS = {"f": "f", "i": "iu", "u": "iu", "b": "b"}
"""The numpy dtype kinds an array of a dtype kind is taken as (integers into floats: the
record path decides, as for a bool anywhere but a bool field)."""


def _numbers(flat: np.ndarray, dtype: np.dtype, widened: bool) -> np.ndarray | None:
    """`flat` as `dtype` when every value is what the record path reads (`narrowed`); None."""
    return narrowed(flat, dtype) if widened else as_dtype(flat, dtype)


def _dtype_name(dtype: np.dtype) -> str:
    return "string" if dtype.kind == "U" else dtype.name


def ragged_plan(model: type[BaseModel]) -> RaggedPlan | None:
    """The ragged plan of `model`, or None when it is not such a model (module doc), when fast
    paths are off or when a registered rule is not one `RAGGED_FAST_PATH` implements."""
    if not fast_paths_enabled() or not RAGGED_FAST_PATH.usable() \
            or not (isinstance(model, type) and issubclass(model, RolloutStepV1)):
        return None
    return model_info(model).derived(PLAN_KEY, _build)


def _build(model: type[BaseModel]) -> RaggedPlan | None:
    if not issubclass(model, RolloutStepV1) or not registry_rules_only(model) \
            or tracks_dims(model) or kind_fields(model):
        return None
    info = model_info(model)
    specs = field_specs(model)
    leaves: list[Leaf] = []
    objects: dict[str, type[BaseModel]] = {}
    for wire in info.wires:
        spec = specs.get(wire)
        required = wire in info.required
        if isinstance(spec, TensorSpec):
            leaf = _leaf(wire, wire, None, spec, required)
            if leaf is None:
                return None
            leaves.append(leaf)
        elif isinstance(spec, type) and issubclass(spec, Modalities):
            decorators = spec.__pydantic_decorators__
            if decorators.field_validators or decorators.model_validators:
                return None
            objects[wire] = spec
            inner, inner_specs = model_info(spec), field_specs(spec)
            for child in inner.wires:
                child_spec = inner_specs.get(child)
                child_required = child in inner.required
                if isinstance(child_spec, TensorSpec) and child_spec.shape:
                    leaf = _leaf(f"{wire}.{child}", wire, child, child_spec, child_required)
                elif child_spec is None and spec.model_fields[inner.attr(child)].annotation is str:
                    leaf = Leaf(f"{wire}.{child}", wire, child, np.dtype(np.str_), False, None,
                                None, child_required, False)
                else:
                    return None
                if leaf is None:
                    return None
                leaves.append(leaf)
        elif spec is None and any(isinstance(m, JsonScalars)
                                  for m in model.model_fields[info.attr(wire)].metadata):
            continue  # info: a block that holds it is read record by record
        else:
            return None
    if not {"step", "episode_id", "policy_version", "terminated", "truncated"} <= \
            {leaf.path for leaf in leaves if leaf.required}:
        return None
    return RaggedPlan(model, leaves, objects)


def _leaf(path: str, wire: str, child: str | None, spec: TensorSpec,
          required: bool) -> Leaf | None:
    """The column of one tensor field: one dtype, a scalar or one non-variadic dim."""
    if not isinstance(spec.dtype, str) or spec.dtype == "bfloat16" or len(spec.shape) > 1 \
            or not spec.finite:
        return None
    if spec.dtype in INT_RANGES and INT_RANGES[spec.dtype][1] >= 2**63:
        return None  # uint64 beyond int64: the record path
    dim = spec.shape[0] if spec.shape else None
    if dim is not None and (dim.variadic or dim.size == 0 or dim.size is None and not dim.name):
        return None
    if spec.dtype == "string" and dim is not None:
        return None
    dtype = np.dtype(np.str_) if spec.dtype == "string" else numpy_dtype(spec.dtype)
    return Leaf(path, wire, child, dtype, dim is not None, None if dim is None else dim.size,
                None if dim is None else dim.name, required, spec.dtype == "string")
