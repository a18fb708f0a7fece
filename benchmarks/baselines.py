"""The strongest code a competent engineer would write instead of gyre-contract: the baselines of
benchmarks/run.py, one per figure, each checked against the package by benchmarks/agreement.py.

Per record (`validate_step`):

- `BestStep`, `BestCartPoleStep`, `BestLLMStep`: pydantic models in strict mode, extra keys
  forbidden, every float `allow_inf_nan=False` and bounded to float32's range, integers bounded
  to int64's, `le=0` on log-probabilities where the action is an integer, `min_length=1` on ids,
  optional fields typed without `| None` (absent is the default, null is refused) and no Python
  validator at all: pydantic-core does all the work. Arrays stay lists (no numpy conversion).
- `BestStepOut`, `BestCartPoleStepOut`, `BestLLMStepOut`: the same models returning what
  `validate_step` returns, type for type (float32 and int64 arrays, numpy scalars where the
  package gives them), converted after the checks by numpy's callables (`np.float32`,
  `partial(np.array, dtype=...)`): no Python validator either. The targets compare with these.
- `StepStruct`, `CartPoleStruct`, `LLMStruct`: msgspec Structs with the same checks as `Meta`
  bounds (a `ge`/`le` bound also refuses NaN and infinities), `forbid_unknown_fields`, optional
  fields `T | UnsetType` (null refused); `msgspec.convert(record, type, strict=True)`.

Per file:

- `validate_polars(path)`: `pl.read_ndjson` with an explicit schema (float columns read as
  Float32: a value beyond float32's range becomes inf), then every check as one multi-threaded
  polars `select` (`polars_problems`).
- `validate_pyarrow(path)`: `pyarrow.json.read_json` (explicit schema, unexpected keys an error,
  multi-threaded) and the same checks in numpy (`step_problems`).
- `batch_jsonl(path)` / `batch_parquet(path)`: the same read and checks (`pq.read_table` for
  Parquet, its schema compared with the expected one), then numpy padding into `[B, T, ...]` and
  GAE: what `gyre-contract batch FILE --map examples/cartpole_map.json` builds, key for key.
- `token_batch(path)`: `pyarrow.json.read_json` of LLM completions (list columns), the token
  checks in numpy, then one boolean-mask scatter per padded field (prompt left-padded,
  response right-padded): the `TokenBatch` of `TOKEN_MAP`.
- `packed_batch(path)`: the same read and checks, then the packed rows of `PACKED_MAP` straight
  from the flat token lists: first-fit-decreasing placement (a stable argsort, one `np.argmax`
  per sample), every token's cell by index arithmetic, one scatter per `[M, S]` array,
  group_norm advantages in numpy.
- `JsonSchemaRs`: jsonschema-rs compiled from the exported `schemas/rollout_step.v1.json`, one
  `orjson.loads` + `is_valid` per line: the schema-only baseline (no episode rules).
- The limits: `raw_read(path)` (one `read()` of the file) and `typed_decode(path, struct)`
  (msgspec's typed decode of every line into Structs; `pq.read_table` for Parquet).

A baseline refuses a file by raising `Refused` (a reader's own error is one too): its verdict
is then "violated", as the package's exit 1 or 2. What each one cannot check is declared in
`agreement.py` (`GAPS`) and verified there: a declared gap that the baseline does catch, or a
disagreement not declared, fails the run. benchmarks/README.md lists them.

    python benchmarks/baselines.py --check    # the agreement checks alone (agreement.py)
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import msgspec
import numpy as np
import orjson
from msgspec import UNSET, Meta, UnsetType
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CARTPOLE_MAP = ROOT / "examples" / "cartpole_map.json"
STEP_SCHEMA_FILE = ROOT / "schemas" / "rollout_step.v1.json"
GAMMA, LAM = 0.99, 0.95  # as in examples/cartpole_map.json
F32_MAX = float(np.finfo(np.float32).max)
I64_MIN, I64_MAX = -(2**63), 2**63 - 1

REQUIRED = ("observation", "action", "reward", "step", "episode_id", "terminated", "truncated",
            "policy_version")
FLOATS = ("logprob", "value", "next_value", "reward", "entropy", "return")
"""The scalar float fields of a CartPole step (read as float32)."""

TOKEN_MAP = {"gyre_field_map": 1, "rows": "step", "fields": {
    **{k: {"from": k} for k in ("prompt_ids", "prompt_mask", "response_ids", "response_mask",
                                "response_length", "logprob", "ref_logprob", "reward",
                                "episode_id", "group_id", "policy_version", "step")},
    "advantage": {"from": "reward"}}}
"""The token map of the token-batch figure (docs/llm.md §2 plus `ref_logprob` and `group_id`)."""
PACKED_BUDGET = 4096
PACKED_MAP = {"gyre_field_map": 1, "rows": "step", "layout": "packed",
              "token_budget": PACKED_BUDGET, "fields": {
                  **{k: {"from": k} for k in ("input_ids", "position_ids", "pad_mask",
                                              "sample_index", "reward", "episode_id",
                                              "group_id", "policy_version", "step")},
                  "loss_mask": {"from": "response_mask"}, "logprobs": {"from": "logprob"},
                  "ref_logprobs": {"from": "ref_logprob"},
                  "advantages": {"op": "group_norm", "from": ["reward", "group_id"],
                                 "then": [{"op": "per_token"}]}}}
"""The packed map of the packed token-batch figure: the `PackedBatch` of GRPO (group_norm
advantages on each response token) in micro-batch rows of 4,096 tokens."""


class Refused(Exception):
    """A baseline found the input breaks the contract (its verdict: violated)."""


# -- per record: pydantic ------------------------------------------------------------------------

F32 = Annotated[float, Field(allow_inf_nan=False, ge=-F32_MAX, le=F32_MAX)]
LogProb = Annotated[float, Field(allow_inf_nan=False, ge=-F32_MAX, le=0)]
I64 = Annotated[int, Field(ge=I64_MIN, le=I64_MAX)]
Id = Annotated[str, Field(min_length=1)]
Scalar = str | I64 | F32 | bool
STRICT = ConfigDict(strict=True, extra="forbid")

# An optional field is typed without `| None` and defaults to None: absent gives None, null is
# refused (pydantic never validates a default), as the contract says (`field.not_null`).


class BestStep(BaseModel):
    """The default step model's fields for a flat-observation environment (CartPole)."""

    model_config = STRICT
    observation: list[F32]
    action: I64 | F32
    logprob: F32 = None  # type: ignore[assignment]
    ref_logprob: F32 = None  # type: ignore[assignment]
    entropy: F32 = None  # type: ignore[assignment]
    value: F32 = None  # type: ignore[assignment]
    next_value: F32 = None  # type: ignore[assignment]
    next_observation: list[F32] = None  # type: ignore[assignment]
    reward: F32
    return_: F32 = Field(None, alias="return")  # type: ignore[assignment]
    step: I64
    episode_id: Id
    terminated: bool
    truncated: bool
    policy_version: I64
    group_id: Id = None  # type: ignore[assignment]
    info: dict[str, Scalar] = None  # type: ignore[assignment]


class BestCartPoleStep(BestStep):
    """Pinned CartPole: four observation floats, an integer action, logprob <= 0."""

    observation: Annotated[list[F32], Field(min_length=4, max_length=4)]
    next_observation: Annotated[list[F32], Field(min_length=4, max_length=4)] = None  # type: ignore[assignment]
    action: I64
    logprob: LogProb = None  # type: ignore[assignment]


class BestPrompt(BaseModel):
    model_config = STRICT
    token_ids: list[I64]
    text: str = None  # type: ignore[assignment]


class BestLLMStep(BestStep):
    """One generation: prompt token ids, generated ids, per-token log-probs <= 0."""

    observation: BestPrompt  # type: ignore[assignment]
    action: list[I64]  # type: ignore[assignment]
    logprob: list[LogProb] = None  # type: ignore[assignment]
    ref_logprob: list[LogProb] = None  # type: ignore[assignment]
    next_observation: BestPrompt = None  # type: ignore[assignment]
    loss_mask: list[bool] = None  # type: ignore[assignment]
    token_reward: list[F32] = None  # type: ignore[assignment]


# -- per record: pydantic, the package's output ---------------------------------------------------
# `validate_step` returns a tensor field as numpy: the observation a float32 array, the default
# model's action an int64 or float32 scalar and its log-probs float32 scalars, an LLM step's
# token ids, log-probs, mask and token rewards arrays. The models above return lists and Python
# numbers; these return what the package returns, type for type (agreement.py checks it): after
# pydantic-core's checks, numpy's own callables convert (no Python frame per value).

_F32, _I64, _BOOL = np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.bool_)
AsF32 = AfterValidator(np.float32)
F32Array = Annotated[list[F32], AfterValidator(partial(np.array, dtype=_F32))]
Obs4Array = Annotated[list[F32], Field(min_length=4, max_length=4),
                      AfterValidator(partial(np.array, dtype=_F32))]
I64Array = Annotated[list[I64], AfterValidator(partial(np.array, dtype=_I64))]
LogProbArray = Annotated[list[LogProb], AfterValidator(partial(np.array, dtype=_F32))]
BoolArray = Annotated[list[bool], AfterValidator(partial(np.array, dtype=_BOOL))]


class BestStepOut(BestStep):
    """`BestStep` returning the default model's output."""

    observation: F32Array  # type: ignore[assignment]
    next_observation: F32Array = None  # type: ignore[assignment]
    action: Annotated[I64, AfterValidator(np.int64)] | Annotated[F32, AsF32]  # type: ignore[assignment]
    logprob: Annotated[F32, AsF32] = None  # type: ignore[assignment]
    ref_logprob: Annotated[F32, AsF32] = None  # type: ignore[assignment]


class BestCartPoleStepOut(BestCartPoleStep):
    """`BestCartPoleStep` returning `CartPoleStep`'s output."""

    observation: Obs4Array  # type: ignore[assignment]
    next_observation: Obs4Array = None  # type: ignore[assignment]
    ref_logprob: Annotated[F32, AsF32] = None  # type: ignore[assignment]


class BestPromptOut(BestPrompt):
    token_ids: I64Array  # type: ignore[assignment]


class BestLLMStepOut(BestLLMStep):
    """`BestLLMStep` returning `LLMStep`'s output."""

    observation: BestPromptOut  # type: ignore[assignment]
    next_observation: BestPromptOut = None  # type: ignore[assignment]
    action: I64Array  # type: ignore[assignment]
    logprob: LogProbArray = None  # type: ignore[assignment]
    ref_logprob: LogProbArray = None  # type: ignore[assignment]
    loss_mask: BoolArray = None  # type: ignore[assignment]
    token_reward: F32Array = None  # type: ignore[assignment]


# -- per record: msgspec -------------------------------------------------------------------------

MF32 = Annotated[float, Meta(ge=-F32_MAX, le=F32_MAX)]  # a bound refuses NaN and inf too
MLogProb = Annotated[float, Meta(ge=-F32_MAX, le=0)]
MI64 = Annotated[int, Meta(ge=I64_MIN, le=I64_MAX)]
MId = Annotated[str, Meta(min_length=1)]
MObs4 = Annotated[list[MF32], Meta(min_length=4, max_length=4)]


class StepStruct(msgspec.Struct, forbid_unknown_fields=True, rename={"return_": "return"}):
    """`BestStep` as a msgspec Struct."""

    observation: list[MF32]
    action: MI64 | MF32
    reward: MF32
    step: MI64
    episode_id: MId
    terminated: bool
    truncated: bool
    policy_version: MI64
    logprob: MF32 | UnsetType = UNSET
    ref_logprob: MF32 | UnsetType = UNSET
    entropy: MF32 | UnsetType = UNSET
    value: MF32 | UnsetType = UNSET
    next_value: MF32 | UnsetType = UNSET
    next_observation: list[MF32] | UnsetType = UNSET
    return_: MF32 | UnsetType = UNSET
    group_id: MId | UnsetType = UNSET
    info: dict[str, str | MI64 | MF32 | bool] | UnsetType = UNSET


class CartPoleStruct(StepStruct):
    """`BestCartPoleStep` as a msgspec Struct (also the typed-decode limit of CartPole files)."""

    observation: MObs4
    action: MI64
    logprob: MLogProb | UnsetType = UNSET
    next_observation: MObs4 | UnsetType = UNSET


class PromptStruct(msgspec.Struct, forbid_unknown_fields=True):
    token_ids: list[MI64]
    text: str | UnsetType = UNSET


class LLMStruct(StepStruct):
    """`BestLLMStep` as a msgspec Struct (also the typed-decode limit of completion files)."""

    observation: PromptStruct
    action: list[MI64]
    logprob: list[MLogProb] | UnsetType = UNSET
    ref_logprob: list[MLogProb] | UnsetType = UNSET
    next_observation: PromptStruct | UnsetType = UNSET
    loss_mask: list[bool] | UnsetType = UNSET
    token_reward: list[MF32] | UnsetType = UNSET


def msgspec_step(record: dict[str, Any], struct: type) -> Any:
    """msgspec's conversion of a record (a dict) into `struct`, strictly (no str -> int, ...)."""
    return msgspec.convert(record, struct, strict=True)


# -- per file: the schema and the checks -----------------------------------------------------------

def arrow_step_schema() -> Any:
    """The CartPole corpus' fields (and the default model's other optional scalars) for pyarrow."""
    import pyarrow as pa

    f32 = pa.float32()
    return pa.schema([("observation", pa.list_(f32)), ("action", pa.int64()), ("logprob", f32),
                      ("value", f32), ("next_value", f32), ("reward", f32), ("entropy", f32),
                      ("return", f32), ("step", pa.int64()), ("episode_id", pa.string()),
                      ("terminated", pa.bool_()), ("truncated", pa.bool_()),
                      ("policy_version", pa.int64()), ("group_id", pa.string())])


def polars_step_schema() -> dict[str, Any]:
    import polars as pl

    types = {"observation": pl.List(pl.Float32), "action": pl.Int64, "step": pl.Int64,
             "policy_version": pl.Int64, "episode_id": pl.String, "group_id": pl.String,
             "terminated": pl.Boolean, "truncated": pl.Boolean}
    return {name: types.get(name, pl.Float32) for name in arrow_step_schema().names}


def _episode_problems(codes: np.ndarray, step: np.ndarray, done: np.ndarray,
                      version: np.ndarray) -> list[str]:
    """The episode rules on rows grouped by episode code, in file order within each episode."""
    order = np.argsort(codes, kind="stable")
    c, s, d, v = codes[order], step[order], done[order], version[order]
    first = np.ones(len(c), bool)
    first[1:] = c[1:] != c[:-1]
    last = np.ones(len(c), bool)
    last[:-1] = first[1:]
    found = []
    if np.any(s[first] != 0):
        found.append("episode.starts_at_zero")
    inner = ~first[1:]
    if np.any((s[1:] - s[:-1])[inner] != 1):
        found.append("episode.step_contiguous")
    if np.any(d & ~last):
        found.append("episode.no_step_after_end")
    if np.any((v[1:] < v[:-1]) & inner):
        found.append("episode.policy_version_monotonic")
    return found


def _finite(values: np.ndarray) -> bool:
    """Finite everywhere (float32 columns: a value beyond float32's range was read as inf)."""
    return bool(np.isfinite(values).all())


def step_problems(table: Any) -> list[str]:
    """Every check of the contract on a pyarrow Table of CartPole steps, in numpy: required
    fields present (not null), floats finite, ids not empty, logprob <= 0 (integer actions), one
    observation length per episode, and the episode rules. The rules broken (empty: valid)."""
    import pyarrow.compute as pc

    found = []
    names = set(table.column_names)
    if any(c not in names or table.column(c).null_count for c in REQUIRED):
        found.append("field.required")
    for name in FLOATS:
        if name in names and not _finite(_values(table.column(name))):
            found.append("field.finite")
            break
    obs = table.column("observation").combine_chunks() if "observation" in names else None
    if obs is not None:
        flat = pc.list_flatten(obs)
        if flat.null_count or not _finite(flat.to_numpy(zero_copy_only=False)):
            found.append("field.finite")
    if "logprob" in names and np.any(_values(table.column("logprob")) > 0):
        found.append("step.logprob_nonpositive")
    if found:
        return sorted(set(found))
    ids = table.column("episode_id").combine_chunks()
    if pc.any(pc.equal(pc.utf8_length(ids), 0)).as_py():
        return ["field.nonempty_string"]
    codes = pc.dictionary_encode(ids).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    lengths = pc.list_value_length(obs).to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    same = codes[order][1:] == codes[order][:-1]
    if np.any(same & (lengths[order][1:] != lengths[order][:-1])):
        found.append("episode.dims_fixed")
    done = (table.column("terminated").to_numpy() | table.column("truncated").to_numpy())
    return found + _episode_problems(codes, table.column("step").to_numpy(), done,
                                     table.column("policy_version").to_numpy())


def _values(column: Any) -> np.ndarray:
    """A nullable float column's non-null values."""
    import pyarrow.compute as pc

    return pc.drop_null(column).to_numpy()


def polars_problems(df: Any) -> list[str]:
    """`step_problems` as polars expressions, evaluated in one multi-threaded `select`."""
    import polars as pl

    ep = pl.col("episode_id")
    done = pl.col("terminated") | pl.col("truncated")
    position = pl.int_range(pl.len()).over(ep)
    floats = [c for c in FLOATS if c in df.columns]
    obs = pl.col("observation")
    checks = {
        "field.required": pl.any_horizontal([pl.col(c).is_null() for c in REQUIRED]).any(),
        "field.finite": pl.any_horizontal(
            [~pl.col(c).is_finite() for c in floats]
            + [~obs.list.eval(pl.element().is_finite().fill_null(False)).list.all()]).any(),
        "step.logprob_nonpositive": (pl.col("logprob") > 0).any(),
        "field.nonempty_string": (ep.str.len_bytes() == 0).any(),
        "episode.dims_fixed": (obs.list.len().n_unique().over(ep) > 1).any(),
        "episode.starts_at_zero": ((position == 0) & (pl.col("step") != 0)).any(),
        "episode.step_contiguous": (pl.col("step").diff().over(ep) != 1).any(),
        "episode.no_step_after_end": (done & (position < pl.len().over(ep) - 1)).any(),
        "episode.policy_version_monotonic": (pl.col("policy_version").diff().over(ep) < 0).any(),
    }
    row = df.select(**checks).row(0, named=True)
    return [name for name, broken in row.items() if broken]


def validate_polars(path: str | Path) -> int:
    """`pl.read_ndjson` (explicit schema) + the checks in polars: the number of rows, or Refused."""
    import polars as pl

    try:
        df = pl.read_ndjson(path, schema=polars_step_schema())
    except (pl.exceptions.PolarsError, OSError) as err:
        raise Refused(f"polars: {str(err).splitlines()[0]}") from err
    problems = polars_problems(df)
    if problems:
        raise Refused(", ".join(problems))
    return df.height


def read_steps_arrow(path: str | Path) -> Any:
    """`pyarrow.json.read_json` with the explicit schema, unexpected keys an error, all threads."""
    import pyarrow as pa
    import pyarrow.json as pj

    options = pj.ParseOptions(explicit_schema=arrow_step_schema(),
                              unexpected_field_behavior="error")
    try:
        return pj.read_json(path, parse_options=options,
                            read_options=pj.ReadOptions(use_threads=True))
    except (pa.ArrowInvalid, OSError) as err:
        raise Refused(f"pyarrow.json: {str(err).splitlines()[0]}") from err


def validate_pyarrow(path: str | Path) -> int:
    """`pyarrow.json.read_json` + the checks in numpy: the number of rows, or Refused."""
    table = read_steps_arrow(path)
    problems = step_problems(table)
    if problems:
        raise Refused(", ".join(problems))
    return table.num_rows


class JsonSchemaRs:
    """jsonschema-rs on the exported step schema, one `orjson.loads` + `is_valid` per line."""

    def __init__(self, schema_file: Path = STEP_SCHEMA_FILE) -> None:
        import jsonschema_rs

        self.validator = jsonschema_rs.validator_for(orjson.loads(schema_file.read_bytes()))

    def record(self, record: Any) -> bool:
        return bool(self.validator.is_valid(record))

    def file(self, path: str | Path) -> int:
        loads, valid, n = orjson.loads, self.validator.is_valid, 0
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                try:
                    ok = valid(loads(line))
                except orjson.JSONDecodeError as err:
                    raise Refused(f"line {n}: not JSON") from err
                if not ok:
                    raise Refused(f"line {n}: breaks the schema")
        return n


# -- the limits ----------------------------------------------------------------------------------

def raw_read(path: str | Path) -> int:
    """The raw-read limit: one `read()` of the whole file."""
    with open(path, "rb") as f:
        return len(f.read())


def typed_decode(path: str | Path, struct: type = CartPoleStruct) -> int:
    """The typed-decode limit: msgspec decodes every line into `struct` (Parquet: read_table)."""
    if str(path).endswith((".parquet", ".pq")):
        import pyarrow.parquet as pq

        return int(pq.read_table(path).num_rows)
    with open(path, "rb") as f:
        return len(msgspec.json.Decoder(struct).decode_lines(f.read()))


# -- file -> padded [B, T] arrays + GAE ------------------------------------------------------------

def gae_padded(reward: np.ndarray, value: np.ndarray, terminated: np.ndarray, mask: np.ndarray,
               lengths: np.ndarray, bootstrap: np.ndarray, gamma: float = GAMMA,
               lam: float = LAM) -> tuple[np.ndarray, np.ndarray]:
    """GAE over right-padded `[B, T]` rows; `bootstrap[b]` is V after row b's last step.

    δ_t = r_t + γ(1 − terminated_t)V_{t+1} − V_t, A_t = δ_t + γλA_{t+1}; padding gives 0.
    """
    nb, nt = reward.shape
    v = np.where(mask, value, 0.0).astype(np.float64)
    v_next = np.zeros_like(v)
    v_next[:, :-1] = v[:, 1:]
    rows = np.flatnonzero(lengths > 0)
    v_next[rows, lengths[rows] - 1] = bootstrap[rows]
    delta = np.where(mask, reward + gamma * (~terminated) * v_next - v, 0.0)
    adv = np.empty_like(delta)
    acc = np.zeros(nb)
    decay = gamma * lam
    for t in range(nt - 1, -1, -1):
        acc = delta[:, t] + decay * acc
        adv[:, t] = acc
    returns = np.where(mask, adv + v, 0.0)
    return adv.astype(np.float32), returns.astype(np.float32)


def pad_columns(codes: np.ndarray, names: np.ndarray, columns: dict[str, np.ndarray],
                next_value: np.ndarray) -> dict[str, np.ndarray]:
    """Rows grouped by episode code → the batch of examples/cartpole_map.json (same keys/dtypes).

    Episodes need not be contiguous: a stable sort by code, one scatter per field.
    """
    nb = len(names)
    order = np.argsort(codes, kind="stable")
    lengths = np.bincount(codes, minlength=nb)
    nt = int(lengths.max())
    starts = np.zeros(nb, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    row = codes[order]
    dest = row * nt + (np.arange(len(order)) - starts[row])
    out: dict[str, np.ndarray] = {}
    for key, src in columns.items():
        if key == "policy_version":
            continue
        arr = np.zeros((nb * nt, *src.shape[1:]), src.dtype)
        arr[dest] = src[order]
        out[key] = arr.reshape(nb, nt, *src.shape[1:])
    mask = np.zeros(nb * nt, bool)
    mask[dest] = True
    mask = mask.reshape(nb, nt)
    last = order[starts + lengths - 1]  # file row of each episode's last step
    bootstrap = np.where(columns["terminated"][last], 0.0, next_value[last])
    adv, ret = gae_padded(out["reward"], out["value"], out["terminated"], mask, lengths, bootstrap)
    return {"obs": out["observation"], "action": out["action"], "reward": out["reward"],
            "done": out["terminated"] | out["truncated"], "terminated": out["terminated"],
            "truncated": out["truncated"], "advantage": adv, "return": ret, "value": out["value"],
            "logprob": out["logprob"], "mask": mask,
            "policy_version": columns["policy_version"][order[starts]], "episode_id": names,
            "step": out["step"]}


def batch_from_table(table: Any, check: bool = True) -> dict[str, np.ndarray]:
    """A pyarrow Table of CartPole steps → (checked) → the padded batch with GAE."""
    import pyarrow.compute as pc

    if check:
        problems = step_problems(table)
        if problems:
            raise Refused(", ".join(problems))
    n = table.num_rows
    encoded = pc.dictionary_encode(table.column("episode_id").combine_chunks())
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names = encoded.dictionary.to_numpy(zero_copy_only=False).astype(str)
    obs = pc.list_flatten(table.column("observation").combine_chunks())
    columns = {"observation": obs.to_numpy(zero_copy_only=False).reshape(n, -1)}
    for key in ("action", "reward", "value", "logprob", "terminated", "truncated", "step",
                "policy_version"):
        columns[key] = table.column(key).to_numpy()
    next_value = pc.fill_null(table.column("next_value"), np.nan).to_numpy().astype(np.float64)
    return pad_columns(codes, names, columns, next_value)


def batch_jsonl(path: str | Path, check: bool = True) -> dict[str, np.ndarray]:
    """`pyarrow.json.read_json` (explicit schema, multi-threaded) + checks + numpy + GAE."""
    return batch_from_table(read_steps_arrow(path), check)


def batch_parquet(path: str | Path, check: bool = True) -> dict[str, np.ndarray]:
    """`pq.read_table` + the file's schema compared with the step fields + the same checks,
    numpy and GAE. A column this code does not read (`info`, `loss_mask`, ...) must be empty."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if check:
        expected, known = arrow_step_schema(), step_field_names()
        for field in table.schema:
            if field.name not in known:
                raise Refused(f"unknown column {field.name}")
            want = expected.field(field.name).type if field.name in expected.names else None
            if want is None:
                if table.column(field.name).null_count != table.num_rows:
                    raise Refused(f"column {field.name} is not read by this baseline")
            elif field.type != want and not _widens(field.type, want):
                raise Refused(f"{field.name} is {field.type}, expected {want}")
    return batch_from_table(table, check)


def step_field_names() -> frozenset[str]:
    """The step record's keys, from the exported schema."""
    return frozenset(orjson.loads(STEP_SCHEMA_FILE.read_bytes())["properties"])


def _widens(got: Any, want: Any) -> bool:
    """A Parquet column the package reads as `want` without loss (float32 lists, int32 ...)."""
    import pyarrow as pa

    if pa.types.is_list(got) and pa.types.is_list(want):
        return _widens(got.value_type, want.value_type)
    return bool(pa.types.is_integer(got) and pa.types.is_integer(want)
                or pa.types.is_floating(got) and pa.types.is_floating(want)
                and got.bit_width <= want.bit_width)


# -- completions -> token batch ------------------------------------------------------------------

def arrow_token_schema(text: bool = False) -> Any:
    """The completions' schema; `text`: the observation's text too (a corpus with prompt texts:
    an absent field in the schema costs the reader time, so it is there only when present)."""
    import pyarrow as pa

    f32, i64 = pa.float32(), pa.int64()
    modalities = [("token_ids", pa.list_(i64)), *([("text", pa.string())] if text else [])]
    return pa.schema([("observation", pa.struct(modalities)),
                      ("action", pa.list_(i64)), ("logprob", pa.list_(f32)),
                      ("ref_logprob", pa.list_(f32)), ("reward", f32), ("step", i64),
                      ("episode_id", pa.string()), ("group_id", pa.string()),
                      ("terminated", pa.bool_()), ("truncated", pa.bool_()),
                      ("policy_version", i64)])


def token_problems(table: Any, prompt: Any, lengths: np.ndarray) -> list[str]:
    """The token checks on completions: required fields, floats finite, log-probs <= 0 and
    one per action token, ids not empty, and the episode rules (one step per episode here)."""
    import pyarrow.compute as pc

    found = []
    if any(table.column(c).null_count for c in REQUIRED) or prompt.null_count:
        return ["field.required"]
    if not _finite(table.column("reward").to_numpy()):
        found.append("field.finite")
    for name in ("logprob", "ref_logprob"):
        col = table.column(name).combine_chunks()
        if col.null_count == len(col):
            continue
        per_row = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        if col.null_count or np.any(per_row != lengths):  # a missing row: a ragged batch
            found.append("step.token_fields_shape" if name == "ref_logprob"
                         else "step.logprob_shape")
        flat = pc.list_flatten(col)
        values = flat.to_numpy(zero_copy_only=False)
        if flat.null_count or not _finite(values):
            found.append("field.finite")
        elif np.any(values > 0):
            found.append("step.logprob_nonpositive")
    ids = table.column("episode_id").combine_chunks()
    if pc.any(pc.equal(pc.utf8_length(ids), 0)).as_py():
        found.append("field.nonempty_string")
    if found:
        return found
    codes = pc.dictionary_encode(ids).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    done = table.column("terminated").to_numpy() | table.column("truncated").to_numpy()
    return _episode_problems(codes, table.column("step").to_numpy(), done,
                             table.column("policy_version").to_numpy())


def _scatter(values: Any, mask: np.ndarray, dtype: Any) -> np.ndarray:
    out = np.zeros(mask.shape, dtype)
    out[mask] = values.to_numpy(zero_copy_only=False)
    return out


def _token_columns(path: str | Path, check: bool, text: bool = False
                   ) -> tuple[Any, Any, Any, np.ndarray, np.ndarray]:
    """(table, prompt lists, action lists, prompt lengths, action lengths) of completions read by
    `pyarrow.json` (explicit schema, unknown keys refused) and checked (`token_problems`)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    options = pj.ParseOptions(explicit_schema=arrow_token_schema(text),
                              unexpected_field_behavior="error")
    try:
        table = pj.read_json(path, parse_options=options)
    except (pa.ArrowInvalid, OSError) as err:
        raise Refused(f"pyarrow.json: {str(err).splitlines()[0]}") from err
    prompt = pc.struct_field(table.column("observation").combine_chunks(), "token_ids")
    action = table.column("action").combine_chunks()
    p_len = pc.list_value_length(prompt).to_numpy(zero_copy_only=False).astype(np.int64)
    a_len = pc.list_value_length(action).to_numpy(zero_copy_only=False).astype(np.int64)
    if check:
        problems = token_problems(table, prompt, a_len)
        if problems:
            raise Refused(", ".join(problems))
    return table, prompt, action, p_len, a_len


def token_batch(path: str | Path, check: bool = True, text: bool = False
                ) -> dict[str, np.ndarray]:
    """Completions (JSON Lines) → the padded token batch of `TOKEN_MAP`: prompt left-padded,
    response right-padded, one boolean-mask scatter per field (`text`: the prompts have texts,
    read and type-checked, not batched)."""
    import pyarrow.compute as pc

    table, prompt, action, p_len, a_len = _token_columns(path, check, text)
    p, r = int(p_len.max()), int(a_len.max())
    prompt_mask = np.arange(p) >= (p - p_len)[:, None]
    response_mask = np.arange(r) < a_len[:, None]
    out = {"prompt_ids": _scatter(pc.list_flatten(prompt), prompt_mask, np.int64),
           "prompt_mask": prompt_mask,
           "response_ids": _scatter(pc.list_flatten(action), response_mask, np.int64),
           "response_mask": response_mask, "response_length": a_len}
    for name in ("logprob", "ref_logprob"):
        out[name] = _scatter(pc.list_flatten(table.column(name).combine_chunks()),
                             response_mask, np.float32)
    reward = table.column("reward").to_numpy()
    out.update(reward=reward, advantage=reward,
               episode_id=table.column("episode_id").to_numpy(zero_copy_only=False).astype(str),
               group_id=table.column("group_id").to_numpy(zero_copy_only=False).astype(str),
               policy_version=table.column("policy_version").to_numpy(),
               step=table.column("step").to_numpy())
    return out



# -- completions -> packed token rows ------------------------------------------------------------

def first_fit_decreasing(lengths: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(row, first column) of each sample placed first-fit-decreasing (longest first, ties in
    input order) into rows of `budget` tokens, and the number of rows. First fit has no
    vectorised form: one `np.argmax` over the open rows' room per sample."""
    row = np.empty(lengths.size, np.int64)
    col = np.empty(lengths.size, np.int64)
    room = np.empty(lengths.size, np.int64)
    rows = 0
    for i in np.argsort(-lengths, kind="stable").tolist():
        size = int(lengths[i])
        at = int(np.argmax(room[:rows] >= size)) if rows else 0
        if rows == 0 or room[at] < size:
            at = rows
            room[at] = budget
            rows += 1
        row[i], col[i] = at, budget - room[at]
        room[at] -= size
    return row, col, rows


def group_norm(reward: np.ndarray, group_id: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """GRPO's advantage: (r - its group's mean) / (the group's unbiased std + eps), exactly 0
    in a group of equal rewards; a group of one row is refused (no baseline)."""
    _, index = np.unique(group_id, return_inverse=True)
    counts = np.bincount(index)
    if np.any(counts == 1):
        raise Refused("group_norm: a group of one row")
    r = reward.astype(np.float64)
    dev = r - (np.bincount(index, weights=r) / counts)[index]
    top = np.full(counts.size, -np.inf)
    low = np.full(counts.size, np.inf)
    np.maximum.at(top, index, r)
    np.minimum.at(low, index, r)
    dev[(top == low)[index]] = 0.0
    sd = np.sqrt(np.bincount(index, weights=dev * dev) / (counts - 1))[index]
    return (dev / (sd + eps)).astype(np.float32)


def packed_batch(path: str | Path, budget: int = PACKED_BUDGET, check: bool = True
                 ) -> dict[str, np.ndarray]:
    """Completions (JSON Lines) → the packed token batch of `PACKED_MAP`, from the flat token
    lists straight into `[M, S]` (no padded `[B, R]` on the way): each sample's prompt then
    response placed first-fit-decreasing, every token's cell by index arithmetic (`np.repeat`
    of each sample's first cell plus its offset), one scatter per array; group_norm
    advantages spread over each response's tokens by one `np.repeat`."""
    import pyarrow.compute as pc

    table, prompt, action, p_len, a_len = _token_columns(path, check)
    length = p_len + a_len
    if check and (np.any(length > budget) or np.any(length == 0)):
        raise Refused("a sample does not fit the token budget")
    group_id = table.column("group_id").to_numpy(zero_copy_only=False).astype(str)
    reward = table.column("reward").to_numpy()
    advantage = group_norm(reward, group_id)
    row, col, m = first_fit_decreasing(length, budget)
    cells = m * budget
    b = length.size
    first = row * budget + col
    samples = np.arange(b)
    p_start = np.cumsum(p_len) - p_len
    a_start = np.cumsum(a_len) - a_len
    p_off = np.arange(int(p_len.sum())) - np.repeat(p_start, p_len)
    a_off = np.arange(int(a_len.sum())) - np.repeat(a_start, a_len)
    p_dest = np.repeat(first, p_len) + p_off
    a_dest = np.repeat(first + p_len, a_len) + a_off
    ids = np.zeros(cells, np.int64)
    ids[p_dest] = pc.list_flatten(prompt).to_numpy()
    ids[a_dest] = pc.list_flatten(action).to_numpy()
    sample_index = np.full(cells, -1, np.int64)
    sample_index[p_dest] = np.repeat(samples, p_len)
    sample_index[a_dest] = np.repeat(samples, a_len)
    used = np.bincount(row, weights=length, minlength=m).astype(np.int64)
    position = np.tile(np.arange(budget, dtype=np.int64), m)
    position -= np.repeat(used, budget)  # the tail: one more run from 0 after the last sample
    position[p_dest] = p_off
    position[a_dest] = np.repeat(p_len, a_len) + a_off
    loss_mask = np.zeros(cells, bool)
    loss_mask[a_dest] = True
    out = {"input_ids": ids, "position_ids": position, "pad_mask": sample_index >= 0,
           "sample_index": sample_index, "loss_mask": loss_mask}
    per_token = {"logprobs": pc.list_flatten(table.column("logprob").combine_chunks()),
                 "ref_logprobs": pc.list_flatten(table.column("ref_logprob").combine_chunks())}
    for name, values in per_token.items():
        out[name] = np.zeros(cells, np.float32)
        out[name][a_dest] = values.to_numpy()
    out["advantages"] = np.zeros(cells, np.float32)
    out["advantages"][a_dest] = np.repeat(advantage, a_len)
    out = {k: v.reshape(m, budget) for k, v in out.items()}
    out.update(reward=reward, group_id=group_id, policy_version=table.column(
        "policy_version").to_numpy(), step=table.column("step").to_numpy(),
        episode_id=table.column("episode_id").to_numpy(zero_copy_only=False).astype(str))
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import agreement

    sys.exit(agreement.main())
