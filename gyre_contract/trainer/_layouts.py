"""The row layouts of a field map (docs/contract.md §7, docs/llm.md §2, §4): what one row of the
trainer's batch is, as one object the map owns (`FieldMap.layout`) and every caller asks,
instead of testing the map's `"rows"`.

- `EpisodeRows` (`"rows": "episode"`, the default): a row is a contiguous run of one episode,
  `[B, T, ...]` columns with a `mask` (`collate`), handed to the trainer as `batch` `[B, T]`,
  `time_major` `[T, B]` or `flat` `[M]` (real steps only);
- `TokenRows` (`"rows": "step"`, `"layout": "padded"`): a row is one step, an LLM's generated
  turn: prompt `[B, P]` left-padded, response `[B, R]` right-padded (`collate_tokens`), a
  `TokenBatch` by default; `pad_to` (`{"P": 512, "R": 1024}`) fixes the widths, and a longer
  row is refused, never cut;
- `PackedRows` (`"layout": "packed"`, `token_budget`): the token rows, collated and mapped as
  `TokenRows`, then packed into micro-batch rows of `token_budget` tokens `[M, S]`
  (`_packing`); a `PackedBatch` by default.

`parse_layout` builds a layout from the map's layout keys (`LAYOUT_KEYS`) and `to_dict` writes
them back. What the callers ask of a layout: the batch and step models, collation (episodes,
step records, a file, a channel's block of steps), how rows and episodes are counted, how the
trainer's own schema sees the rows (`fit_trainer`), which of the map's entries it refuses
(`field_problems`, when the map loads) and how the map's results are laid out (`arrange`, at
the end of `FieldMap.apply`), the report's row statistics (`stats`, `_rowstats`), its clause in
`FieldMap.describe()` and which sampler fields its own columns come from (the channel's
handshake). Another layout is one more subclass listed in `ROW_LAYOUTS`, not a branch in its
callers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np

from gyre_contract.core._errors import (
    ContractError,
    GyreError,
    InputError,
    Problem,
    SchemaError,
    describe,
)
from gyre_contract.core._models import RolloutStep, TrainBatch
from gyre_contract.core._switches import fast_paths_enabled
from gyre_contract.core._tokens import PackedBatch, TokenBatch
from gyre_contract.io._raggedcols import Ragged
from gyre_contract.io._reading import (
    episodes_from_records,
    numbered_steps,
    read_episodes,
    steps_from_records,
)
from gyre_contract.io._tokencolumns import TokenColumns, read_token_columns
from gyre_contract.pinned import LLMStep
from gyre_contract.schema._fieldtable import shape_text
from gyre_contract.schema._layouts import layout_of, parse_batch_dims
from gyre_contract.trainer._collation import DERIVED_FIELDS, collate, episodes_of
from gyre_contract.trainer._flatcollate import collate_block, collate_file
from gyre_contract.trainer._packing import (
    PACKED_COLUMNS,
    PACKED_TOKEN_COLUMNS,
    ResponseTokens,
    pack_columns,
)
from gyre_contract.trainer._rowstats import RowStats, packed_row_stats, token_row_stats
from gyre_contract.trainer._tokens import (
    LAYOUT_FIELDS,
    PROMPT_SOURCES,
    RESPONSE_SOURCE,
    collate_token_columns,
    collate_tokens,
)

PROMPT_COLUMNS = ("prompt_ids", "prompt_mask")
"""The collated prompt columns `[B, P]`, which a packed map's entries never read."""

LAYOUT_KEYS = ("rows", "batch_dims", "layout", "pad_to", "token_budget")
"""The top-level keys of a field map that say how its rows are laid out."""


class LayoutError(ValueError):
    """A layout that cannot be: every problem, as the map's parser reports them."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Need:
    """A column a layout makes from the sampler's fields: one of `names` must be written (an
    integer one, with `integer`)."""

    names: tuple[str, ...]
    integer: bool = False


class RowLayout:
    """What one row of the batch is. Subclasses set the class attributes and the methods."""

    rows: ClassVar[str]
    """The map's `"rows"` value."""
    rows_text: ClassVar[str]
    """What a row is, in a few words (for messages)."""
    names: ClassVar[tuple[str, ...]]
    """The map's `"layout"` values this layout takes (the trainer's layout of such rows)."""
    keys: ClassVar[tuple[str, ...]] = ()
    """The further layout keys (`LAYOUT_KEYS`) this layout reads."""
    batch_model: ClassVar[Any]
    """The batch model a built batch is validated as by default."""
    step_model: ClassVar[Any]
    """The step model rollouts are read as by default."""

    def __init__(self, *, batch_dims: Iterable[str] | None = None, name: str | None = None) -> None:
        self.batch_dims = tuple(batch_dims) if batch_dims is not None else None
        """The trainer's leading batch dims the map was written for (None: not recorded)."""
        self.name = name
        """The trainer's batch layout the map was written for (None: not recorded)."""
        found = self.problems()
        if found:
            raise LayoutError(found)

    def problems(self) -> list[str]:
        """What is wrong with this layout's recorded trainer layout and batch dims."""
        if self.name is not None and self.name not in self.names:
            return [f'"layout" of a map with "rows": "{self.rows}" must be one of '
                    f'{", ".join(json.dumps(a) for a in self.names)}, got {json.dumps(self.name)}']
        return []

    def __repr__(self) -> str:
        parts = [f"{k}={v!r}" for k, v in self.to_dict().items() if k != "rows"]
        return f"{type(self).__name__}({', '.join(parts)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowLayout) and type(other) is type(self) and \
            other.to_dict() == self.to_dict()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def to_dict(self) -> dict[str, Any]:
        """The map's layout keys (what `parse_layout` reads; the default rows are left out)."""
        out: dict[str, Any] = {} if self.rows == EpisodeRows.rows else {"rows": self.rows}
        if self.batch_dims is not None:
            out["batch_dims"] = list(self.batch_dims)
        if self.name is not None:
            out["layout"] = self.name
        return out

    def describe(self) -> str:
        """Its clause in `FieldMap.describe()` ("" for nothing worth saying)."""
        return ""

    # -- collation -----------------------------------------------------------------------------

    def collate(self, items: Iterable[Any], *, fields: list[str], max_len: int | None = None,
                sparse: list[str] | None = None, source: str = "field map") -> dict[str, Any]:
        """The collated columns of `items` (what `read`, `from_records` or `from_block` gave)
        that a map reading `fields` needs, with the columns the layout adds itself."""
        raise NotImplementedError

    def collate_file(self, path: str | os.PathLike[str], model: Any, *, fields: list[str],
                     max_len: int | None = None, sparse: list[str] | None = None,
                     flat_tokens: Collection[str] = ()) -> tuple[dict[str, Any], int] | None:
        """`collate` of a file straight from its columns, with its number of episodes; None
        when only `read` can say. `flat_tokens`: the columns the map only renames (and
        `response_mask` when only `per_token` reads it), which a layout that lays out real
        tokens alone may keep as those (`tokenops.ResponseValues`)."""
        return None

    def read(self, path: str | os.PathLike[str], model: Any) -> list[Any]:
        """A rollout file as what `collate` takes."""
        raise NotImplementedError

    def from_records(self, records: list[Any], model: Any) -> list[Any]:
        """Step records (dicts or step models, in stream order), validated as `model`, as what
        `collate` takes."""
        raise NotImplementedError

    def from_block(self, columns: Mapping[str, Any]) -> list[Any]:
        """A block of step columns (a channel's segments, steps of several episodes) as what
        `collate` takes."""
        raise NotImplementedError

    def collate_block(self, columns: Mapping[str, Any], *, fields: list[str],
                      sparse: list[str] | None = None, episodes: Any = None
                      ) -> dict[str, Any] | None:
        """`collate(from_block(columns))` straight from the columns; None when only
        `from_block` can say. `episodes`: (each step's episode code, the ids by code)."""
        return None

    # -- counting ------------------------------------------------------------------------------

    def count_episodes(self, items: list[Any], columns: Mapping[str, Any]) -> int:
        """How many episodes collated `items` hold."""
        raise NotImplementedError

    def row_mask(self, columns: Mapping[str, Any]) -> np.ndarray:
        """A `[B, T]` mask True on real steps: what counts a batch's rows and steps."""
        raise NotImplementedError

    def shape(self, columns: Mapping[str, Any]) -> tuple[int, int]:
        """The batch's two leading sizes, as a run record keeps them."""
        rows, width = np.shape(self.row_mask(columns))
        return int(rows), int(width)

    def row_keys(self, columns: Mapping[str, Any]) -> RowKeys:
        """The mask, versions and episode ids of collated columns (what the staleness rule and
        the loop's checks read when the batch is the trainer's own)."""
        versions = columns.get("policy_version")
        return RowKeys(self.row_mask(columns),
                       np.asarray(versions if versions is not None else [], dtype=np.int64),
                       columns.get("episode_id"))

    def stats(self, columns: Mapping[str, Any], current_version: int | None
              ) -> RowStats | None:
        """What a report says of these rows beyond their count (None: nothing)."""
        return None

    # -- the map's fields ----------------------------------------------------------------------

    def field_problems(self, reads: Mapping[str, tuple[str, ...]]) -> list[str]:
        """What this layout refuses of a map's entries (`reads`: per target, the columns its
        entry reads), one message each; checked when the map is loaded."""
        return []

    def arrange(self, built: dict[str, Any], columns: Mapping[str, Any],
                reads: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
        """The map's results (`built`, per target) laid out as this layout's batch: as they
        are, by default."""
        return built

    # -- the trainer's own schema and the sampler's -------------------------------------------

    def fit_trainer(self, schema: Any, flat: dict[str, np.ndarray], mask: Any
                    ) -> tuple[dict[str, np.ndarray], Any]:
        """The mapped arrays as a trainer's schema (`TrainerSchema`) sees these rows, and the
        `[B, T]` mask of their real steps (None: every row is real); ContractError when the
        schema reads another layout."""
        raise NotImplementedError

    def needs(self, source: str) -> tuple[Need, ...] | None:
        """For a source the map reads that this layout makes itself, the sampler fields it is
        made from (`()`: none, such as `mask`); None for a sampler's own field."""
        raise NotImplementedError


class NumberedSteps(list[Any]):
    """Step records read from a file, in file order, with the line of each (`lines`): a row
    a layout refuses is named with its line."""

    def __init__(self, numbered: Iterable[tuple[int, Any]]) -> None:
        pairs = list(numbered)
        super().__init__(step for _, step in pairs)
        self.lines = [line for line, _ in pairs]


@dataclass(frozen=True)
class RowKeys:
    """The per-row keys of a collated batch, for checks a trainer's own batch may not hold."""

    mask: np.ndarray
    policy_version: np.ndarray
    episode_id: np.ndarray | None


# -- runs of one episode: [B, T] -----------------------------------------------------------------

class EpisodeRows(RowLayout):
    """A row is a contiguous run of one episode: `[B, T, ...]` columns with a `mask` (`collate`)."""

    rows = "episode"
    rows_text = "a run of one episode per row, the default"
    names = ("batch", "time_major", "flat")
    batch_model = TrainBatch
    step_model = RolloutStep

    def problems(self) -> list[str]:
        found = super().problems()
        if found or self.batch_dims is None or self.name is None:
            return found
        kind = layout_of(self.batch_dims).kind
        if self.name != kind:
            return [f'"layout" {json.dumps(self.name)} does not fit "batch_dims" '
                    f'{shape_text(self.batch_dims)}, which is the {json.dumps(kind)} layout']
        return []

    def collate(self, items: Iterable[Any], *, fields: list[str], max_len: int | None = None,
                sparse: list[str] | None = None, source: str = "field map") -> dict[str, Any]:
        wanted = [n for n in fields if n not in DERIVED_FIELDS]
        return collate(items, max_len=max_len, fields=wanted, sparse=sparse)

    def collate_file(self, path: str | os.PathLike[str], model: Any, *, fields: list[str],
                     max_len: int | None = None, sparse: list[str] | None = None,
                     flat_tokens: Collection[str] = ()) -> tuple[dict[str, Any], int] | None:
        wanted = [n for n in fields if n not in DERIVED_FIELDS]
        return collate_file(path, model, fields=wanted, max_len=max_len, sparse=sparse)

    def read(self, path: str | os.PathLike[str], model: Any) -> list[Any]:
        return list(read_episodes(path, model))

    def from_records(self, records: list[Any], model: Any) -> list[Any]:
        return episodes_from_records(records, model)

    def from_block(self, columns: Mapping[str, Any]) -> list[Any]:
        return episodes_of(columns, columns["episode_id"])

    def collate_block(self, columns: Mapping[str, Any], *, fields: list[str],
                      sparse: list[str] | None = None, episodes: Any = None
                      ) -> dict[str, Any] | None:
        wanted = [n for n in fields if n not in DERIVED_FIELDS]
        return collate_block(columns, fields=wanted, sparse=sparse, episodes=episodes)

    def count_episodes(self, items: list[Any], columns: Mapping[str, Any]) -> int:
        return len(items)

    def row_mask(self, columns: Mapping[str, Any]) -> np.ndarray:
        return np.asarray(columns["mask"])

    def fit_trainer(self, schema: Any, flat: dict[str, np.ndarray], mask: Any
                    ) -> tuple[dict[str, np.ndarray], Any]:
        if schema.layout.kind == "flat":  # real steps only: the mask selects them
            flat = schema.real_steps(flat)
        return flat, mask

    def needs(self, source: str) -> tuple[Need, ...] | None:
        return () if source in DERIVED_FIELDS else None


# -- one row per step: token rows [B, L] ----------------------------------------------------------

class TokenRows(RowLayout):
    """A row is one step, an LLM's generated turn: the `TokenBatch` columns (`collate_tokens`),
    padded to the longest prompt and response, or to the fixed widths of `pad_to`
    (`{"P": 512, "R": 1024}`)."""

    rows = "step"
    rows_text = "one token row per step"
    names = ("padded",)
    keys = ("pad_to",)
    batch_model: ClassVar[Any] = TokenBatch
    step_model = LLMStep
    WIDTHS: ClassVar[tuple[str, ...]] = ("P", "R")
    """The padded dims `pad_to` may fix: the prompt's and the response's widths."""

    def __init__(self, *, batch_dims: Iterable[str] | None = None, name: str | None = None,
                 pad_to: Mapping[str, int] | None = None) -> None:
        self.pad_to = dict(pad_to) if isinstance(pad_to, Mapping) else pad_to
        """Fixed widths of the padded dims (`{"P": 512, "R": 1024}`); None: the longest row's."""
        super().__init__(batch_dims=batch_dims, name=name)

    def problems(self) -> list[str]:
        found = super().problems()
        if self.batch_dims is not None and len(self.batch_dims) != 1:
            found.append(f'"batch_dims" of a map with "rows": "{self.rows}" is one dim (token '
                         f'rows [B, ...]), got {shape_text(self.batch_dims)}')
        pad_to: Any = self.pad_to
        if pad_to is not None and not (
                isinstance(pad_to, dict) and pad_to and set(pad_to) <= set(self.WIDTHS)
                and all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                        for v in pad_to.values())):
            found.append(f'"pad_to" must map "P" (the prompt width) and/or "R" (the response '
                         f'width) to a whole number > 0, such as {{"P": 512, "R": 1024}}, got '
                         f'{json.dumps(pad_to)}')
        return found

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.pad_to is not None:
            out["pad_to"] = dict(self.pad_to)
        return out

    def describe(self) -> str:
        return "one token row per step"

    def collate(self, items: Iterable[Any], *, fields: list[str], max_len: int | None = None,
                sparse: list[str] | None = None, source: str = "field map") -> dict[str, Any]:
        if max_len is not None:
            raise InputError(f"{source}: max_len splits episodes into [B, T] rows; a map of "
                             f"token rows has one row per step")
        # policy_version comes whenever every step records it: the staleness checks of half_way
        # and full_loop read it even when the trainer does not
        return collate_tokens(items, fields=[n for n in fields if n not in self.made_here],
                              pad_to=self.pad_to, lines=getattr(items, "lines", None),
                              **self._limits())

    made_here: ClassVar[frozenset[str]] = frozenset((*LAYOUT_FIELDS, "mask"))
    """Sources the layout makes itself: never asked of the steps by name."""

    def _limits(self) -> dict[str, Any]:
        """Further limits `collate_tokens` checks every row against (a subclass's)."""
        return {}

    def collate_file(self, path: str | os.PathLike[str], model: Any, *, fields: list[str],
                     max_len: int | None = None, sparse: list[str] | None = None,
                     flats: dict[str, np.ndarray] | None = None,
                     flat_only: Collection[str] = (), flat_tokens: Collection[str] = ()
                     ) -> tuple[dict[str, Any], int] | None:
        """The file's steps read as columns (`io._tokencolumns`: token lists as flat values
        and lengths, no step object), collated as their objects would be (`collate`);
        `flats`, `flat_only`: see `collate_token_columns`; padded rows keep no column flat
        (`flat_tokens` is for packed rows)."""
        if max_len is not None:
            return None  # `collate` explains
        found = read_token_columns(path, model)
        if found is None:
            return None
        columns = collate_token_columns(
            found, fields=[n for n in fields if n not in self.made_here], pad_to=self.pad_to,
            flats=flats, flat_only=flat_only, **self._limits())
        if columns is None:
            return None
        return columns, len(np.unique(cast(np.ndarray, columns["episode_id"])))

    def read(self, path: str | os.PathLike[str], model: Any) -> list[Any]:
        return NumberedSteps(numbered_steps(path, model))

    def from_records(self, records: list[Any], model: Any) -> list[Any]:
        return steps_from_records(records, model)

    def from_block(self, columns: Mapping[str, Any]) -> list[Any]:
        return [columns]

    def collate_block(self, columns: Mapping[str, Any], *, fields: list[str],
                      sparse: list[str] | None = None, episodes: Any = None
                      ) -> dict[str, Any] | None:
        """The block's columns as a file's (`TokenColumns`: token lists as `Ragged`, no array
        per step) through `collate_token_columns`; None where the steps' columns must say it
        (a problem is explained by them, naming the step as they do)."""
        if not fast_paths_enabled() or "episode_id" not in columns:
            return None
        n = len(columns["episode_id"])
        # lines only word messages, and a problem goes to the steps' columns to be worded
        found = TokenColumns(n, _dotted(columns), frozenset(), np.arange(1, n + 1))
        try:
            return collate_token_columns(
                found, fields=[n for n in fields if n not in self.made_here],
                pad_to=self.pad_to, **self._limits())
        except GyreError:
            return None

    def count_episodes(self, items: list[Any], columns: Mapping[str, Any]) -> int:
        return len(np.unique(columns["episode_id"]))

    def row_mask(self, columns: Mapping[str, Any]) -> np.ndarray:
        return np.ones((len(columns["response_length"]), 1), dtype=bool)  # each row: one step

    def shape(self, columns: Mapping[str, Any]) -> tuple[int, int]:
        rows, width = np.shape(columns["response_mask"])  # [B, R]
        return int(rows), int(width)

    def stats(self, columns: Mapping[str, Any], current_version: int | None) -> RowStats:
        return token_row_stats(columns, current_version)

    def fit_trainer(self, schema: Any, flat: dict[str, np.ndarray], mask: Any
                    ) -> tuple[dict[str, np.ndarray], Any]:
        if len(schema.batch_dims) != 1:
            raise ContractError(Problem(
                "rows", "one batch dim (token rows [B, ...])",
                f"batch dims {shape_text(schema.batch_dims)}",
                "a map of token rows builds one row per step; this trainer reads another "
                "layout"))
        return flat, None  # one row per step: none is selected, every row is real

    def needs(self, source: str) -> tuple[Need, ...] | None:
        if source in ("episode_id", "policy_version"):
            return ()
        if source in LAYOUT_FIELDS:
            return (Need(PROMPT_SOURCES, integer=True), Need((RESPONSE_SOURCE,)))
        return None


# -- packed token rows: [M, S] micro-batch rows of a token budget ---------------------------------

class PackedRows(TokenRows):
    """Token rows packed into micro-batch rows of `token_budget` tokens, `[M, S]` (`_packing`):
    the rows are collated as `TokenRows` (the map's ops run on them: group_norm, kl, per_token,
    ...), then placed first-fit-decreasing, and each per-response-token result `[B, R, ...]` is
    put at its tokens' positions; per-row results stay `[B]`, one per sample. From a file, the
    columns the map only renames (and `response_mask` under `per_token`: `flat_tokens`) are
    kept as their real tokens (`ResponseValues`) and never padded."""

    names = ("packed",)
    keys = ("token_budget",)
    batch_model = PackedBatch
    made_here = TokenRows.made_here | frozenset(PACKED_COLUMNS)

    def __init__(self, *, batch_dims: Iterable[str] | None = None, name: str | None = None,
                 token_budget: int | None = None) -> None:
        self.token_budget: Any = token_budget
        """The tokens of one micro-batch row, S."""
        super().__init__(batch_dims=batch_dims, name=name)

    def problems(self) -> list[str]:
        found = super().problems()
        budget = self.token_budget
        if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
            found.append(f'"layout": "packed" needs "token_budget": the tokens of one '
                         f'micro-batch row, a whole number > 0 such as 4096, got '
                         f'{json.dumps(budget)}')
        return found

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "token_budget": self.token_budget}

    def describe(self) -> str:
        return (f"token rows packed into micro-batch rows of {self.token_budget} tokens "
                f"(first-fit-decreasing)")

    def _limits(self) -> dict[str, Any]:
        return {"token_budget": self.token_budget}

    def collate(self, items: Iterable[Any], *, fields: list[str], max_len: int | None = None,
                sparse: list[str] | None = None, source: str = "field map") -> dict[str, Any]:
        columns = super().collate(items, fields=fields, max_len=max_len, sparse=sparse,
                                  source=source)
        columns.update(pack_columns(columns, self.token_budget))
        return columns

    def collate_file(self, path: str | os.PathLike[str], model: Any, *, fields: list[str],
                     max_len: int | None = None, sparse: list[str] | None = None,
                     flats: dict[str, np.ndarray] | None = None,
                     flat_only: Collection[str] = (), flat_tokens: Collection[str] = ()
                     ) -> tuple[dict[str, Any], int] | None:
        flats = {} if flats is None else flats
        # the token ids go into the packed rows from their flat values: padded only when read;
        # a response column only renamed (or spread by per_token) is its real tokens alone
        kept = {"prompt_ids", "response_ids", "loss_mask"} - set(fields)
        kept.update(n for n in flat_tokens if n not in LAYOUT_FIELDS or n == "response_mask")
        found = super().collate_file(path, model, fields=fields, max_len=max_len,
                                     sparse=sparse, flats=flats, flat_only={*flat_only, *kept})
        if found is None:
            return None
        columns, episodes = found
        columns.update(pack_columns(columns, self.token_budget, flats=flats))
        return columns, episodes

    def collate_block(self, columns: Mapping[str, Any], *, fields: list[str],
                      sparse: list[str] | None = None, episodes: Any = None
                      ) -> dict[str, Any] | None:
        found = super().collate_block(columns, fields=fields, sparse=sparse, episodes=episodes)
        if found is not None:
            found.update(pack_columns(found, self.token_budget))
        return found

    def row_mask(self, columns: Mapping[str, Any]) -> np.ndarray:
        return np.ones((len(columns["episode_id"]), 1), dtype=bool)  # each sample: one step

    def shape(self, columns: Mapping[str, Any]) -> tuple[int, int]:
        rows, budget = np.shape(columns["sample_index"])  # [M, S]
        return int(rows), int(budget)

    def stats(self, columns: Mapping[str, Any], current_version: int | None) -> RowStats:
        return packed_row_stats(columns, current_version)

    def needs(self, source: str) -> tuple[Need, ...] | None:
        return super().needs("response_ids" if source in PACKED_COLUMNS else source)

    def field_problems(self, reads: Mapping[str, tuple[str, ...]]) -> list[str]:
        found = []
        for target, names in reads.items():
            packed = [n for n in names if n in PACKED_COLUMNS]
            rows = [n for n in names if n not in PACKED_COLUMNS]
            prompt = [n for n in rows if n in PROMPT_COLUMNS]
            if packed and rows:
                found.append(f"fields.{target}: reads the packed columns {packed} and the "
                             f"token rows' {rows}: an entry reads one or the other")
            elif prompt:
                found.append(f"fields.{target}: reads {prompt}: a packed map puts per-token "
                             f"values on the response tokens ([B, R] columns: logprob, "
                             f"response_mask, per_token, kl); the prompt is in the layout's "
                             f"own {', '.join(PACKED_TOKEN_COLUMNS)}")
        return found

    def arrange(self, built: dict[str, Any], columns: Mapping[str, Any],
                reads: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
        tokens = ResponseTokens(columns)
        out: dict[str, Any] = {}
        problems = []
        per_token = [t for t, v in built.items() if tokens.fits(v) and not (
            reads.get(t) and all(n in PACKED_COLUMNS for n in reads[t]))]
        scattered = dict(zip(per_token, tokens.scatter_all([built[t] for t in per_token])))
        for target, value in built.items():
            names = reads.get(target, ())
            if names and all(n in PACKED_COLUMNS for n in names):
                out[target] = value  # the layout's own columns, renamed or cast
            elif target in scattered:
                out[target] = scattered[target]
            elif np.ndim(value) >= 1 and np.shape(value)[0] == tokens.rows:
                out[target] = value  # one per sample: sample_index indexes it
            else:
                problems.append(Problem(
                    target, f"[B, R, ...] (one per response token, B={tokens.rows}, "
                    f"R={tokens.width}) or [B, ...] (one per sample)", describe(value),
                    "a packed map's entry is per response token or per sample"))
        if problems:
            raise ContractError(problems)
        return out


def _dotted(columns: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Columns with modalities flattened to dotted names (`observation.token_ids`)."""
    flat: dict[str, Any] = {}
    for key, column in columns.items():
        if isinstance(column, Mapping):
            flat.update(_dotted(column, f"{prefix}{key}."))
        else:
            flat[prefix + key] = column
    return flat


def per_step_columns(columns: Mapping[str, Any]) -> dict[str, Any]:
    """`columns` with each `Ragged` column as one array per step (what episodes and step
    objects hold): the form `from_block` takes."""
    return {key: per_step_columns(column) if isinstance(column, Mapping) else
            column.per_record() if isinstance(column, Ragged) else column
            for key, column in columns.items()}


ROW_LAYOUTS: tuple[type[RowLayout], ...] = (EpisodeRows, TokenRows, PackedRows)
"""Every row layout a map may name; the first one taking a map's `"rows"` is its default."""


def parse_layout(data: Mapping[str, Any], problems: list[str]) -> RowLayout | None:
    """The row layout a map's layout keys (`LAYOUT_KEYS`) describe; each problem is appended
    to `problems` (then None)."""
    rows = data.get("rows", EpisodeRows.rows)
    name = data.get("layout")
    taking = [c for c in ROW_LAYOUTS if c.rows == rows]
    if not taking:
        spelled = " or ".join(dict.fromkeys(f'"{c.rows}" ({c.rows_text})' for c in ROW_LAYOUTS))
        problems.append(f'"rows" must be {spelled}, got {json.dumps(rows)}')
        return None
    cls = next((c for c in taking if name in c.names), taking[0])
    count = len(problems)
    batch_dims = _parse_batch_dims(data["batch_dims"], problems) if "batch_dims" in data \
        else None
    for key in LAYOUT_KEYS[3:]:
        if key in data and key not in cls.keys:
            problems.append(f'"{key}" is not a key of a map with "rows": "{cls.rows}"'
                            + (f', "layout": "{name}"' if name is not None else ""))
    if len(problems) > count:
        return None
    extra = {key: data[key] for key in cls.keys if key in data}
    try:
        return cls(batch_dims=batch_dims, name=name, **extra)
    except LayoutError as err:
        problems.extend(err.problems)
        return None


def _parse_batch_dims(raw: Any, problems: list[str]) -> tuple[str, ...] | None:
    """The map's `batch_dims`: a non-empty list of dim names (`["B", "T"]`, `["T*N"]`)."""
    if isinstance(raw, list) and raw and all(isinstance(d, str) for d in raw):
        try:
            dims = parse_batch_dims(",".join(raw))
        except SchemaError:  # reported below, as the map's problem
            dims = None
        if dims is not None and len(dims) == len(raw):
            return dims
    problems.append(f'"batch_dims" must be a list of dim names such as ["B", "T"], ["T", "B"], '
                    f'["M"], ["T*N"] or ["B"], got {json.dumps(raw)}')
    return None
