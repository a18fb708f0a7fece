"""Bulk checking of rollout lines for simple step models: typed decoding, vectorised rules.

Why: the per-line path builds a pydantic instance per step and feeds the episode tracker one
step at a time, several microseconds a line, while parsing a line costs well under one. For a
*simple* model (every field a scalar or a tensor of fixed dims, one dtype each, no modalities,
no named dims: CartPole-like), a block of lines is decoded by msgspec into typed structs (types,
ranges, unknown keys and nulls checked in C), the line-level traps the normal reader looks for
are ruled out on the whole block at once, and the episode rules run vectorised
(`EpisodeTracker.add_columns`).

Like the fast path of `validate_step`, this only ever accepts: a block holding anything unusual
(any error, a duplicate key, an escape sequence, an integer literal in a float field beyond the
range where the float holds it exactly, ...) gets None and is checked line by line by the
normal path, which decides and explains. `tests/io/test_fast_file.py` pins that reports are
identical either way.

It implements the registry's `field` and `step` rules listed in `FAST_PATH` (the episode rules
are `EpisodeTracker.add_columns`'s); while a rule of those kinds is registered that it does not
list, `bulk_plan` gives None for every model, as it does under `GYRE_FAST_PATHS=0`.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, compress, repeat
from operator import attrgetter, is_not, ne
from typing import Annotated, Any, overload

import msgspec
import numpy as np
from msgspec.structs import astuple
from pydantic import BaseModel

from gyre_contract.core._dims import FLOAT_DTYPES, FLOAT_EXACT_INT, FLOAT_MAX, INT_RANGES, numpy_dtype
from gyre_contract.core._fields import TOKEN_FIELDS
from gyre_contract.core._modelinfo import model_info
from gyre_contract.core._models import JsonScalars, RolloutStepV1, field_specs
from gyre_contract.core._registry import declare_fast_path
from gyre_contract.core._rules import FIELD_RULES
from gyre_contract.core._switches import fast_paths_enabled
from gyre_contract.core._tensor import TensorSpec
from gyre_contract.io._episodes import Episode

_COLON = ord(":")
MAX_INFO_KEYS = 1000
"""Far below the reader's per-record key limit, whatever the model's own fields."""
_EPISODE_FIELDS = ("episode_id", "step", "policy_version", "terminated", "truncated")


class CodedIds(Sequence[str]):
    """A column of episode ids as a code per row into the distinct ids, in order of first
    appearance (what an Arrow column's dictionary encoding gives): the ids row by row are made
    only when asked, and runs of one id are found on the codes (`id_runs`)."""

    __slots__ = ("codes", "ids", "_values")

    def __init__(self, codes: np.ndarray, ids: list[str]) -> None:
        self.codes = codes
        self.ids = ids
        self._values: list[str] | None = None

    @property
    def values(self) -> list[str]:
        if self._values is None:
            self._values = np.array(self.ids, dtype=object)[self.codes].tolist()
        return self._values

    def __len__(self) -> int:
        return len(self.codes)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if index.__class__ is int:
            return self.ids[self.codes[index]]
        return self.values[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)


def coded_ids(ids: Sequence[str]) -> CodedIds:
    """A list of episode ids as `CodedIds`. A sampler's steps mostly come in runs of one
    episode: then the runs are found first (one comparison a step) and each run's id is looked
    up once; steps of many episodes interleaved (a probe of the first ones shows short runs) are
    looked up one by one."""
    n = len(ids)
    probe = min(n, _RUN_PROBE)
    if n < 2 or sum(map(ne, ids[1:probe], ids[:probe - 1])) * 4 > probe:
        distinct = list(dict.fromkeys(ids))
        codes = dict(zip(distinct, range(len(distinct))))
        return CodedIds(np.fromiter(map(codes.__getitem__, ids), np.int64, n), distinct)
    starts, run_ids = id_runs(ids)
    distinct = list(dict.fromkeys(run_ids))
    codes = dict(zip(distinct, range(len(distinct))))
    run_codes = np.fromiter(map(codes.__getitem__, run_ids), np.int64, len(run_ids))
    return CodedIds(np.repeat(run_codes, np.diff(starts, append=n)), distinct)


_RUN_PROBE = 64
"""How many ids `coded_ids` compares first to choose between runs and one look-up a step."""


def id_runs(ids: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """(the first row of each run of equal ids, the id of each run) of a column of ids."""
    n = len(ids)
    if not n:
        return np.zeros(0, np.int64), []
    if isinstance(ids, CodedIds):
        codes = ids.codes
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
        return starts, [ids.ids[c] for c in codes[starts].tolist()]
    changes = np.fromiter(map(ne, ids[1:], ids[:-1]), bool, n - 1)
    starts = np.r_[0, np.flatnonzero(changes) + 1]
    return starts, [ids[i] for i in starts.tolist()]


@dataclass
class Block:
    """A run of lines that hold clean step records, as columns (one entry per line)."""

    n: int
    episode_id: Sequence[str]
    step: np.ndarray
    policy_version: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    key_counts: dict[str, int]
    """Wire name -> how many lines carry the key."""
    lines: list[bytes]
    """The lines themselves: `columns` decodes them again when asked (rarely)."""
    plan: BulkPlan
    arrays: dict[str, np.ndarray | None] | None = None
    """Each field as an array where it is numbers (see `BulkPlan.episode`), else None."""
    lists: dict[str, Sequence[Any]] = field(default_factory=dict)
    """Fields whose `arrays` entry is None, as in `columns`."""
    layout: list[tuple[str, np.ndarray | None, bool]] | None = None
    """(wire, its `arrays` entry, whether some line lacks it) per field, for `episode`."""
    present: dict[str, np.ndarray] = field(default_factory=dict)
    """Per wire of `BulkPlan.presence`: which lines carry it (a plan bound from data)."""
    ragged: dict[str, Any] = field(default_factory=dict)
    """A plan of ragged lists (`raggedcols`): each list field as a `raggedcols.Ragged`."""
    extra: dict[str, Any] = field(default_factory=dict)
    """What else the block's plan keeps with it (`raggedcols`: modalities, tensor counts)."""
    _columns: dict[str, tuple[Any, ...]] | None = None

    @property
    def columns(self) -> dict[str, tuple[Any, ...]]:
        """Each field some line carries -> its value on every line (None where absent), as the
        normal path validates it, except that a tensor is still a list."""
        if self._columns is None:
            records = list(map(self.plan.decode_line, self.lines))
            self._columns = {wire: tuple(map(self.plan.attrs[wire], records))
                             for wire in self.key_counts}
        return self._columns

    def column(self, wire: str) -> Sequence[Any]:
        """One field of `columns`."""
        values = self.lists.get(wire)
        return self.columns[wire] if values is None else values


class BulkPlan:
    """The msgspec decoder and column plan of one simple step model."""

    def __init__(self, model: type[RolloutStepV1], fields: list[tuple[str, str, Any, bool]],
                 discrete: bool, no_ints: frozenset[str] = frozenset(),
                 specs: dict[str, Any] | None = None) -> None:
        self.model = model
        self.no_ints = no_ints
        """Wires decoded as `int | float` whose values must all be floats (see `binding`)."""
        self.presence: tuple[str, ...] = ()
        """Wires whose presence per line `Block.present` records (set by `binding`)."""
        self.bound: Any = None
        """For a plan bound from a file's data: its `binding.Binding` (dims and kinds)."""
        self.stats_model: type[RolloutStepV1] = model
        """The model whose tensor fields the report's field table lists (`array_counts`)."""
        self.extra: dict[str, Any] = {}
        """What other readers derive from this plan and keep with it (a Parquet JSON decoder)."""
        self.fields = fields  # (wire, struct attribute, msgspec type, required)
        struct = msgspec.defstruct(
            f"{model.__name__}Record",
            [(attr, kind) if required else (attr, kind, None)  # a null on the wire still fails
             for _, attr, kind, required in fields],
            kw_only=True, forbid_unknown_fields=True, gc=False,
            rename={attr: wire for wire, attr, _, _ in fields})
        self.decode_line = msgspec.json.Decoder(struct).decode
        by_attr = {attr: wire for wire, attr, _, _ in fields}
        self.wires = [by_attr[attr] for attr in struct.__struct_fields__]
        self.attrs = {wire: attrgetter(attr) for wire, attr, _, _ in fields}
        self.required = {wire for wire, _, _, required in fields if required}
        self.discrete = discrete  # a discrete action: every logprob must be <= 0
        specs = field_specs(model) if specs is None else specs  # token fields: `bound_specs`
        self.specs = {wire: specs[wire] for wire, _, _, _ in fields if wire in specs}
        self.dtypes = {wire: numpy_dtype(spec.dtype) for wire, spec in self.specs.items()}
        self.shapes = {wire: tuple(d.size for d in spec.shape) for wire, spec in self.specs.items()}

    def decode(self, lines: list[Any], arrays: bool = False) -> Block | None:
        """The block's columns when every line is a clean record, else None (see module doc).

        `arrays`: also make each field's array over the block (`episode` needs them), while
        the decoded records are at hand; they are dropped before returning.
        The cyclic GC is paused meanwhile: a block allocates many containers that hold no cycle,
        and scanning them would cost more than decoding (measured in benchmarks/README.md).
        """
        if not lines:
            return None
        if not gc.isenabled():
            return self._decode(lines, arrays)
        gc.disable()
        try:
            return self._decode(lines, arrays)
        finally:
            gc.enable()

    def _decode(self, lines: list[Any], arrays: bool) -> Block | None:
        parts = []
        for start in range(0, len(lines), _PART_LINES):
            part = self._decode_part(lines[start:start + _PART_LINES], arrays)
            if part is None:
                return None
            parts.append(part)
        counts = {}
        for wire in self.wires:
            count = sum(part.counts.get(wire, 0) for part in parts)
            if count:
                counts[wire] = count
        block = Block(n=len(lines), episode_id=_joined([p.episode_id for p in parts]),
                      step=_joined([p.step for p in parts]),
                      policy_version=_joined([p.policy_version for p in parts]),
                      terminated=_joined([p.terminated for p in parts]),
                      truncated=_joined([p.truncated for p in parts]),
                      key_counts=counts, lines=lines, plan=self,
                      present={wire: _joined([p.present[wire] for p in parts])
                               for wire in self.presence})
        if arrays:
            block.arrays, block.lists = {}, {}
            for wire in counts:
                column = self._block_column(wire, counts[wire], block.n, parts)
                if isinstance(column, np.ndarray):
                    block.arrays[wire] = column
                else:
                    block.arrays[wire] = None
                    block.lists[wire] = column
        return block

    def _decode_part(self, lines: list[Any], arrays: bool) -> _Part | None:
        """`decode` of a few lines (see `_PART_LINES`): their counts and episode columns, and
        with `arrays` every field they carry, as an array (numbers) or a tuple."""
        try:
            records = list(map(self.decode_line, lines))
        except (msgspec.DecodeError, msgspec.ValidationError, TypeError):
            return None  # a bad or unusual line: the normal path reads this block and explains
        n = len(records)
        # Every ':' of a line follows a key or sits in a string, and every key written is
        # followed by one: as many ':' as distinct keys means no key is written twice.
        colons = np.count_nonzero(np.frombuffer(b"\n".join(lines), np.uint8) == _COLON)
        keys = n * len(self.required)
        counts: dict[str, int] = {}
        columns: dict[str, tuple[Any, ...]] = {}
        for wire, values in zip(self.wires, zip(*map(astuple, records))):  # field by field
            if wire in self.required:
                count = n
            elif keys == colons:
                continue  # every ':' is a key's counted so far: no line holds this key
            else:
                count = n - values.count(None)
                keys += count
            if count:
                counts[wire], columns[wire] = count, values
        del records
        if "info" in counts:
            sizes = [len(i) for i in columns["info"] if i is not None]
            if max(sizes) > MAX_INFO_KEYS:
                return None  # a record with very many keys: the normal path bounds and reports
            keys += sum(sizes)
        if colons != keys:
            return None
        if self.discrete and not all(_nonpositive(columns[wire]) for wire in SIGNED
                                     if wire in columns):
            return None  # step.logprob_nonpositive, step.ref_logprob_nonpositive
        for wire in self.no_ints:
            if wire in columns and _has_int(columns[wire], counts[wire] < n):
                return None  # an integer literal: the unpinned model reads another dtype
        part = _Part(n, counts, columns["episode_id"],
                     np.fromiter(columns["step"], np.int64, n),
                     np.fromiter(columns["policy_version"], np.int64, n),
                     np.fromiter(columns["terminated"], bool, n),
                     np.fromiter(columns["truncated"], bool, n))
        for wire in self.presence:
            count = counts.get(wire, 0)
            part.present[wire] = np.full(n, bool(count)) if count in (0, n) else \
                np.fromiter(map(is_not, columns[wire], repeat(None)), bool, n)
        if arrays:
            part.values = {wire: self._part_column(wire, values, counts[wire], part)
                           for wire, values in columns.items()}
        return part

    def _part_column(self, wire: str, values: tuple[Any, ...], count: int, part: _Part) -> Any:
        """A field over a part's lines: an array of a float field (NaN where absent) or of a
        required number field, else the values themselves."""
        dtype = self.dtypes.get(wire)
        if dtype is None or dtype.kind == "U":
            return values
        shape, n = self.shapes[wire], part.n
        if dtype.kind == "f" and count < n:
            out = np.full((n, *shape), np.nan, dtype)
            mask = np.fromiter(map(is_not, values, repeat(None)), bool, n)
            out[mask] = _array(compress(values, mask), count, dtype, shape)
            return out
        if dtype.kind != "f" and wire not in self.required:
            return values  # a whole array or a list over the block: decided by `_block_column`
        if wire in _BLOCK_ARRAYS and not shape and getattr(part, wire).dtype == dtype:
            return getattr(part, wire)  # the same numbers, made already
        return _array(values, n, dtype, shape)

    def _block_column(self, wire: str, count: int, n: int, parts: list[_Part]
                      ) -> np.ndarray | tuple[Any, ...]:
        """The block's array of a field, or its values as in `columns`."""
        dtype = self.dtypes.get(wire)
        pieces = [part.values.get(wire) for part in parts]
        if dtype is not None and dtype.kind == "f":
            return _joined([np.full((part.n, *self.shapes[wire]), np.nan, dtype)
                            if piece is None else piece
                            for part, piece in zip(parts, pieces)])
        if all(piece.__class__ is np.ndarray for piece in pieces):
            return _joined(pieces)
        values = tuple(chain.from_iterable(repeat(None, part.n) if piece is None else piece
                                           for part, piece in zip(parts, pieces)))
        if count == n and dtype is not None and dtype.kind != "U":
            return _array(values, n, dtype, self.shapes[wire])
        return values

    def array_counts(self, block: Block) -> list[tuple[str, np.dtype, tuple[int, ...], int]]:
        """(wire, dtype, shape, lines) of each tensor field the block carries, for the report."""
        out = []
        for wire, spec in field_specs(self.stats_model).items():
            if wire in block.key_counts and wire in self.dtypes and not (
                    isinstance(spec, TensorSpec) and spec.is_scalar):
                out.append((wire, self.dtypes[wire], self.shapes[wire], block.key_counts[wire]))
        return out

    def episode(self, episode_id: str, parts: list[tuple[Block, Any]], lines: list[int]
                ) -> Episode:
        """The `Episode` of the rows `parts` [(block, rows: a slice or indices), ...] hold.

        The columns are those `episodes.episode_from_steps` builds from the same steps: numbers
        come from one array per block and field, sliced per episode.
        """
        if len(parts) == 1:  # the usual case: the whole episode inside one block
            return Episode(episode_id, self._one_block_columns(*parts[0]), lines)
        columns: dict[str, Any] = {}
        for wire, _, _, _ in self.fields:
            column = self._array_column(wire, parts)
            if column is _AS_LIST:
                column = self._list_column(wire, parts)
            if column is not None:
                columns[wire] = column
        return Episode(episode_id, columns, lines)

    def _one_block_columns(self, block: Block, rows: Any) -> dict[str, Any]:
        """`episode`'s columns when all its rows are in `block` (same result, fewer steps)."""
        if block.layout is None:
            arrays, n, counts = self._arrays(block), block.n, block.key_counts
            block.layout = [(wire, arrays[wire], counts[wire] < n)
                            for wire, _, _, _ in self.fields if wire in arrays]
        contiguous = rows.__class__ is slice
        columns: dict[str, Any] = {}
        for wire, array, partial in block.layout:
            if array is None:
                column = self._list_column(wire, [(block, rows)])
                if column is None:
                    continue
            else:
                column = array[rows]
                if contiguous:
                    column = column.copy()
                if partial and np.isnan(column.reshape(len(column), -1)[:, 0]).all():
                    continue  # a float NaN marks a step without the field: none has it
            columns[wire] = column
        return columns

    def _array_column(self, wire: str, parts: list[tuple[Block, Any]]) -> Any:
        """The column from block arrays; None when no step has the field; _AS_LIST otherwise."""
        dtype = self.dtypes.get(wire)
        pieces, partial = [], False
        for block, rows in parts:
            array = self._arrays(block).get(wire)
            if array is None:
                if wire in block.key_counts or dtype is None or dtype.kind != "f":
                    return _AS_LIST
                length = rows.stop - rows.start if rows.__class__ is slice else len(rows)
                array = np.full((length, *self.shapes[wire]), np.nan, dtype)
                partial = True
            else:
                partial = partial or block.key_counts[wire] < block.n
                array = array[rows]
            pieces.append(array)
        column = np.concatenate(pieces) if len(pieces) > 1 else pieces[0].copy()
        if partial and np.isnan(column.reshape(len(column), -1)[:, 0]).all():
            return None  # a float NaN here marks a step without the field: none has it
        return column

    def _arrays(self, block: Block) -> dict[str, np.ndarray | None]:
        """Per field of the block: one array over its lines (floats NaN where absent), or None
        for a field that stays a list (strings, `info`, a non-float field some lines lack)."""
        if block.arrays is None:
            again = self._decode(block.lines, arrays=True)
            assert again is not None and again.arrays is not None  # these lines decoded before
            block.arrays, block.lists = again.arrays, again.lists
        return block.arrays

    def _list_column(self, wire: str, parts: list[tuple[Block, Any]]) -> Any:
        values: list[Any] = []
        for block, rows in parts:
            column = block.column(wire) if wire in block.key_counts else None
            if column is None:
                values += [None] * (rows.stop - rows.start if rows.__class__ is slice
                                    else len(rows))
            elif rows.__class__ is slice:
                values += column[rows]
            else:
                values += [column[i] for i in rows]
        if wire == "episode_id":  # one id per episode: np.array(values) without the scan
            return np.full(len(values), values[0])
        missing = values.count(None)
        if missing == len(values):
            return None
        if wire == "info":
            return values
        spec, dtype = self.specs[wire], self.dtypes[wire]
        if not missing:
            return np.array(values, dtype=dtype)
        if spec.dtype in FLOAT_DTYPES:
            out = np.full((len(values), *self.shapes[wire]), np.nan, dtype=dtype)
            present = [i for i, v in enumerate(values) if v is not None]
            out[present] = np.array([values[i] for i in present], dtype=dtype)
            return out
        if spec.shape:
            return [None if v is None else np.array(v, dtype=dtype) for v in values]
        return values


@dataclass
class _Part:
    """What `BulkPlan._decode_part` makes of a few lines."""

    n: int
    counts: dict[str, int]
    episode_id: tuple[str, ...]
    step: np.ndarray
    policy_version: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    values: dict[str, Any] = field(default_factory=dict)
    present: dict[str, np.ndarray] = field(default_factory=dict)


def _joined(pieces: list[Any]) -> Any:
    """Arrays or tuples of consecutive parts as one."""
    if len(pieces) == 1:
        return pieces[0]
    if pieces[0].__class__ is tuple:
        return tuple(chain.from_iterable(pieces))
    return np.concatenate(pieces)


_PART_LINES = 1024
"""Lines decoded at once: their objects are still in the CPU cache when read into columns and
freed before the next lines are decoded (twice as fast as a whole block at once)."""
_BLOCK_ARRAYS = frozenset({"step", "policy_version", "terminated", "truncated"})
"""Fields whose array `_decode_part` makes anyway (as `_Part` attributes)."""
_AS_LIST = object()
"""`_array_column`'s answer when the column must be built from the values themselves."""


def _array(values: Iterable[Any], n: int, dtype: np.dtype, shape: tuple[int, ...]
           ) -> np.ndarray:
    """Numbers of one field over `n` lines (`shape` per line) as one array.

    A scalar or [N] field is read by `np.fromiter` (flattened first): cheaper than numpy's
    discovery of a sequence, to the same values."""
    if not shape:
        return np.fromiter(values, dtype, n)
    if len(shape) == 1:
        flat = np.fromiter(chain.from_iterable(values), dtype, n * shape[0])
        return flat.reshape(n, shape[0])
    return np.array(list(values), dtype=dtype)


def _has_int(values: tuple[Any, ...], partial: bool) -> bool:
    """Whether a value (or tensor element) of `values` was an integer literal."""
    present = [v for v in values if v is not None] if partial else values
    if present and present[0].__class__ is list:
        present = list(chain.from_iterable(present))
        while present and present[0].__class__ is list:
            present = list(chain.from_iterable(present))
    return int in set(map(type, present))


SIGNED = ("logprob", "ref_logprob")
"""Fields whose values are <= 0 under a discrete action."""


def bound_specs(specs: dict[str, Any]) -> dict[str, Any]:
    """The token fields of free shape (`*name`) with the one shape this reader accepts for them,
    which `step.token_fields_shape` allows beside an action of fixed shape: the action's shape
    (`ref_logprob`: one value, []). Another shape fails decoding: the normal path explains."""
    action = specs.get("action")
    if not isinstance(action, TensorSpec) or any(d.size is None for d in action.shape):
        return {}
    out = {}
    for wire in TOKEN_FIELDS:
        spec = specs.get(wire)
        if isinstance(spec, TensorSpec) and len(spec.shape) == 1 and spec.shape[0].variadic:
            out[wire] = replace(spec, shape=() if wire == "ref_logprob" else action.shape)
    return out


def _nonpositive(logprobs: Sequence[Any]) -> bool:
    present = [v for v in logprobs if v is not None] if None in logprobs else logprobs
    return max(present) <= 0


FAST_PATH = declare_fast_path(
    "bulk_jsonl", kinds=("field", "step"),
    implements=[*(r.name for r in FIELD_RULES),  # msgspec's typed decoding (`_msgspec_type`)
                # the plan exists only where these cannot be broken or are checked (`_build`):
                "step.dims_agree",  # no named dims
                "step.logprob_shape",  # a scalar logprob
                "step.logprob_nonpositive",  # `_nonpositive`
                "step.token_fields_shape",  # `bound_specs`: the action's fixed shape
                "step.ref_logprob_nonpositive",  # `_nonpositive`
                "step.next_observation_structure", "step.next_observation_modalities",
                "step.next_observation_shape"])  # one fixed tensor shape for both
"""The rules the bulk reader implements: each one a block breaks makes it refuse the block."""

PLAN_KEY = "fastfile.bulk_plan"
"""The `ModelInfo.derived` key of a model's bulk plan."""


def bulk_plan(model: type[BaseModel]) -> BulkPlan | None:
    """The bulk plan of `model`, or None when it is not simple enough, when fast paths are off
    (`GYRE_FAST_PATHS=0`) or when a registered rule is not in `FAST_PATH`. Asked once a file."""
    if not fast_paths_enabled() or not (isinstance(model, type)
                                        and issubclass(model, RolloutStepV1)):
        return None
    return model_info(model).derived(PLAN_KEY, _build)


def build_plan(model: type[RolloutStepV1], no_ints: frozenset[str] = frozenset()
               ) -> BulkPlan | None:
    """A new bulk plan of `model` (not cached; see `_build`), or None."""
    return _build(model, no_ints) if fast_paths_enabled() else None


_INFO_INT = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_INFO_FLOAT = Annotated[float, msgspec.Meta(gt=-(2.0**63), lt=2.0**64)]
"""The normal reader takes integer literals within int64/uint64 and reports any beyond; an `info`
float strictly inside these bounds cannot have been such a literal."""
_CROSS = "_cross_field_rules"


def _cross_rules() -> Any:
    return RolloutStepV1.__pydantic_decorators__.model_validators[_CROSS].func


def registry_rules_only(model: type[BaseModel]) -> bool:
    """Whether `model` validates with the registry's rules only: no validator of its own
    (a bulk plan cannot know what one would refuse)."""
    decorators = model.__pydantic_decorators__
    return not decorators.field_validators and decorators.model_validators.keys() == {_CROSS} \
        and decorators.model_validators[_CROSS].func is _cross_rules()


def _build(model: type[BaseModel], no_ints: frozenset[str] = frozenset()) -> BulkPlan | None:
    """The plan of `model`; None when it is not simple enough. `no_ints`: wires whose numbers
    must be written as floats (read as `int | float`, refused when an integer comes)."""
    if not FAST_PATH.usable() or not issubclass(model, RolloutStepV1):
        return None  # a registered rule this reader does not implement: the normal path
    if not registry_rules_only(model):
        return None  # rules of the project's own: only the normal path knows them
    specs = field_specs(model)
    specs = {**specs, **bound_specs(specs)}
    names = model_info(model)
    fields = []
    for name, info in model.model_fields.items():
        wire = names.wire(name)
        spec = specs.get(wire)
        if spec is None and any(isinstance(m, JsonScalars) for m in info.metadata):
            kind: Any = dict[str, str | _INFO_INT | _INFO_FLOAT | bool]
        elif isinstance(spec, TensorSpec):
            kind = _msgspec_type(spec, wire in no_ints)
        else:
            return None  # an observation of modalities, free-form observation, plain field
        if kind is None:
            return None
        fields.append((wire, name, kind, info.is_required()))
    if {f[0] for f in fields} < {*_EPISODE_FIELDS, "action", "logprob", "observation",
                                 "next_observation"}:
        return None
    if not {f[0] for f in fields if f[3]} >= set(_EPISODE_FIELDS):
        return None  # an episode field some line may lack: the normal path
    obs, nxt = specs.get("observation"), specs.get("next_observation")
    if not isinstance(obs, TensorSpec) or not isinstance(nxt, TensorSpec) \
            or obs.shape != nxt.shape:
        return None
    action, logprob = specs["action"], specs["logprob"]
    if not logprob.is_scalar:
        return None  # logprob's shape rules and per-element sign: the normal path
    return BulkPlan(model, fields, discrete=action.dtype in INT_RANGES, no_ints=no_ints,
                    specs=specs)


def _msgspec_type(spec: TensorSpec, ints_too: bool = False) -> Any:
    """The msgspec type that accepts exactly a subset of what the normal path accepts;
    `ints_too`: a float leaf also takes any integer literal, as an int (see `_has_int`)."""
    if not isinstance(spec.dtype, str) or spec.dtype in ("bfloat16", "string") and spec.shape:
        return None
    if any(d.size is None or d.size == 0 for d in spec.shape):
        return None  # named or zero-size dims: the normal path
    if spec.dtype == "string":
        return Annotated[str, msgspec.Meta(min_length=1)]
    if not spec.finite:
        return None
    leaf = _number(spec.dtype, any_int=ints_too)
    for dim in reversed(spec.shape):
        # a type built at run time, for msgspec: not a static annotation
        leaf = Annotated[list[leaf], msgspec.Meta(  # type: ignore[valid-type]
            min_length=dim.size, max_length=dim.size)]
    return leaf


def _any_int() -> Any:
    """An integer literal (one beyond int64 fails decoding: the block goes line by line)."""
    return Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


def _number(dtype: str, any_int: bool = False) -> Any:
    """A number of `dtype`. A float field reads a float literal within the dtype's range, and an
    integer literal (decoded as an int: msgspec would round it into a float field) only where
    the dtype holds it exactly, as the normal path does (`dims.FLOAT_EXACT_INT`; `any_int`:
    any integer literal within 64 bits)."""
    if dtype == "bool":
        return bool
    if dtype in INT_RANGES:
        lo, hi = INT_RANGES[dtype]
        return Annotated[int, msgspec.Meta(ge=lo, le=hi)] if hi < 2**63 else None
    if dtype not in FLOAT_DTYPES:
        return None
    top, exact = FLOAT_MAX[dtype], FLOAT_EXACT_INT[dtype]
    ints = _any_int() if any_int else Annotated[int, msgspec.Meta(ge=-exact, le=exact)]
    return Annotated[float, msgspec.Meta(ge=-top, le=top)] | ints
