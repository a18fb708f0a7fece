"""What a data engineer would hand-write instead of gyre-contract: the baselines of benchmarks/run.py.

Each baseline does the same job as the package's command it is compared with, and no more:

- `orjson_loop(path)`: `for line in f: orjson.loads(line)`, the parse floor of `validate`.
- `batch_pyarrow_jsonl(path)`: `pyarrow.json.read_json` (its defaults, so multithreaded) + numpy
  padding into `[B, T, ...]` + GAE: what `gyre-contract batch FILE --map examples/cartpole_map.json`
  builds, key for key.
- `batch_orjson_jsonl(path)`: the same batch from an orjson parse loop + numpy.
- `batch_parquet(path)`: `pyarrow.parquet.read_table` + the same numpy padding and GAE.
- `PlainStep` / `pydantic_loop(path)`: a plain strict pydantic model of the default step fields,
  arrays converted with `np.asarray` and checked finite, per record; `PlainLLMStep` the same for
  an LLM turn (prompt token ids, action ids, per-token log-probs).
- `fastjsonschema_validator()`: fastjsonschema compiled from our exported step schema.

The padding groups rows by episode id (dictionary-encoded in order of first appearance, then a
stable sort, so episodes need not be contiguous in the file), allocates each `[B, T, ...]` array
once and fills it with one scatter per field; GAE runs backwards over T on all rows at once,
terminated steps not bootstrapped, truncated ones bootstrapped from `next_value`.

`python benchmarks/baselines.py --check` builds a small corpus, compares every baseline batch
with the package's batch of the same file (`half_way`) and the baseline GAE with
`gyre_contract.trainer.gae`, and exits 1 on any mismatch (benchmarks/run.py runs the same check
before it times a baseline).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CARTPOLE_MAP = ROOT / "examples" / "cartpole_map.json"
GAMMA, LAM = 0.99, 0.95  # as in examples/cartpole_map.json
SCALARS = {"action": np.int64, "reward": np.float32, "value": np.float32, "logprob": np.float32,
           "terminated": np.bool_, "truncated": np.bool_, "step": np.int64}


# -- (i) the parse floor --------------------------------------------------------------------------

def orjson_loop(path: str | Path) -> int:
    loads, n = orjson.loads, 0
    with open(path, "rb") as f:
        for line in f:
            loads(line)
            n += 1
    return n


# -- (ii, iii) file -> padded [B, T] arrays + GAE -------------------------------------------------

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
                next_value: np.ndarray, gamma: float = GAMMA, lam: float = LAM) -> dict[str, np.ndarray]:
    """Rows grouped by episode code → the batch of examples/cartpole_map.json (same keys/dtypes)."""
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
        arr = np.zeros((nb * nt, *src.shape[1:]), src.dtype)
        arr[dest] = src[order]
        out[key] = arr.reshape(nb, nt, *src.shape[1:])
    mask = np.zeros(nb * nt, bool)
    mask[dest] = True
    mask = mask.reshape(nb, nt)
    last = order[starts + lengths - 1]  # file row of each episode's last step
    ends_terminated = columns["terminated"][last]
    bootstrap = np.where(ends_terminated, 0.0, next_value[last])
    adv, ret = gae_padded(out["reward"], out["value"], out["terminated"], mask, lengths,
                          bootstrap, gamma, lam)
    return {"obs": out["observation"], "action": out["action"], "reward": out["reward"],
            "done": out["terminated"] | out["truncated"], "terminated": out["terminated"],
            "truncated": out["truncated"], "advantage": adv, "return": ret, "value": out["value"],
            "logprob": out["logprob"], "mask": mask,
            "policy_version": columns["policy_version"][order[starts]], "episode_id": names,
            "step": out["step"]}


def batch_from_table(table: Any) -> dict[str, np.ndarray]:
    """A pyarrow Table of step records (JSON or Parquet) → the padded batch with GAE."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    encoded = pc.dictionary_encode(table.column("episode_id").combine_chunks())
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names = encoded.dictionary.to_numpy(zero_copy_only=False).astype(str)
    obs = table.column("observation").combine_chunks()
    columns = {"observation": np.asarray(pc.list_flatten(obs).to_numpy(), np.float32).reshape(n, -1)}
    for key, dtype in SCALARS.items():
        columns[key] = table.column(key).to_numpy().astype(dtype, copy=False)
    columns["policy_version"] = table.column("policy_version").to_numpy().astype(np.int64, copy=False)
    if "next_value" in table.column_names:
        next_value = pc.fill_null(table.column("next_value").cast(pa.float64()), np.nan).to_numpy()
    else:
        next_value = np.full(n, np.nan)
    return pad_columns(codes, names, columns, next_value)


def batch_pyarrow_jsonl(path: str | Path) -> dict[str, np.ndarray]:
    import pyarrow.json as pj

    return batch_from_table(pj.read_json(path))


def batch_parquet(path: str | Path) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    return batch_from_table(pq.read_table(path))


def batch_orjson_jsonl(path: str | Path) -> dict[str, np.ndarray]:
    loads = orjson.loads
    with open(path, "rb") as f:
        records = [loads(line) for line in f]
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(r["episode_id"], len(index)) for r in records), np.int64,
                        len(records))
    columns = {"observation": np.array([r["observation"] for r in records], np.float32)}
    for key, dtype in {**SCALARS, "policy_version": np.int64}.items():
        columns[key] = np.array([r[key] for r in records], dtype)
    next_value = np.array([r.get("next_value", np.nan) for r in records], np.float64)
    return pad_columns(codes, np.array(list(index), str), columns, next_value)


# -- (iv) plain pydantic + numpy per record -------------------------------------------------------

def _finite_array(dtype: Any) -> AfterValidator:
    def convert(value: Any) -> np.ndarray:
        arr = np.asarray(value, dtype=dtype)
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise ValueError("not finite")
        return arr
    return AfterValidator(convert)


FloatArray = Annotated[list[float], _finite_array(np.float32)]
STRICT = ConfigDict(strict=True, extra="forbid")


class PlainStep(BaseModel):
    """The default step model's fields, as a data engineer would write them in plain pydantic."""

    model_config = STRICT
    observation: FloatArray
    action: int | float
    logprob: float | None = None
    entropy: float | None = None
    value: float | None = None
    next_value: float | None = None
    next_observation: FloatArray | None = None
    reward: float
    return_: float | None = Field(None, alias="return")
    step: int = Field(ge=0)
    episode_id: str = Field(min_length=1)
    terminated: bool
    truncated: bool
    policy_version: int = Field(ge=0)
    info: dict[str, str | int | float | bool] | None = None
    ref_logprob: float | FloatArray | None = None  # the optional LLM fields of contract v1.1
    group_id: str | None = Field(None, min_length=1)
    loss_mask: list[bool] | None = None
    token_reward: float | FloatArray | None = None


IntArray = Annotated[list[int], AfterValidator(lambda v: np.asarray(v, dtype=np.int64))]


class PlainPrompt(BaseModel):
    model_config = STRICT
    token_ids: IntArray
    text: str | None = None


class PlainLLMStep(BaseModel):
    """`PlainStep` for an LLM turn: the prompt's token ids, the action's ids, one finite float32
    log-prob per action token (the same strict fields, checks and conversions otherwise)."""

    model_config = STRICT
    observation: PlainPrompt
    action: IntArray
    logprob: FloatArray | None = None
    entropy: float | None = None
    value: float | None = None
    next_value: float | None = None
    next_observation: PlainPrompt | None = None
    reward: float
    return_: float | None = Field(None, alias="return")
    step: int = Field(ge=0)
    episode_id: str = Field(min_length=1)
    terminated: bool
    truncated: bool
    policy_version: int = Field(ge=0)
    info: dict[str, str | int | float | bool] | None = None
    ref_logprob: FloatArray | None = None
    group_id: str | None = Field(None, min_length=1)
    loss_mask: list[bool] | None = None
    token_reward: FloatArray | None = None


def pydantic_loop(path: str | Path) -> int:
    """`PlainStep.model_validate_json` on every line (strict JSON: ints stay ints)."""
    validate, n = PlainStep.model_validate_json, 0
    with open(path, "rb") as f:
        for line in f:
            validate(line)
            n += 1
    return n


# -- (v) fastjsonschema on our exported schema ----------------------------------------------------

def fastjsonschema_validator(model: Any = None) -> Any:
    """fastjsonschema's compiled validator of `json_schema(model)` (default: the default model)."""
    import fastjsonschema

    from gyre_contract.core._models import RolloutStep
    from gyre_contract.schema._export import json_schema

    return fastjsonschema.compile(json_schema(model or RolloutStep))


# -- the self-check -------------------------------------------------------------------------------

def compare(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], label: str) -> list[str]:
    """Every key of `ours` present in `theirs` with equal shape, dtype kind and values."""
    problems = []
    for key, a in ours.items():
        b = theirs.get(key)
        if b is None:
            problems.append(f"{label}: {key} missing")
            continue
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype.kind != b.dtype.kind:
            problems.append(f"{label}: {key} is {b.dtype}{list(b.shape)}, the package's "
                            f"{a.dtype}{list(a.shape)}")
        elif a.dtype.kind == "f":
            if not np.allclose(a, b, rtol=1e-4, atol=1e-4):
                worst = float(np.nanmax(np.abs(a.astype(np.float64) - b)))
                problems.append(f"{label}: {key} differs by up to {worst:.3g}")
        elif not np.array_equal(a, b):
            problems.append(f"{label}: {key} differs at {int((a != b).sum())} positions")
    return problems


def self_check(jsonl: Path, parquet: Path | None = None) -> list[str]:
    """Mismatches between the baselines and the package on the same corpus (empty: all agree)."""
    from gyre_contract.harness._stages import half_way
    from gyre_contract.trainer._advantages import gae

    ours = half_way(jsonl, CARTPOLE_MAP).batch
    problems = compare(ours, batch_pyarrow_jsonl(jsonl), "pyarrow.json + numpy")
    problems += compare(ours, batch_orjson_jsonl(jsonl), "orjson + numpy")
    if parquet is not None:
        problems += compare(ours, batch_parquet(parquet), "pq.read_table + numpy")
        problems += compare(half_way(parquet, CARTPOLE_MAP).batch, ours, "package Parquet vs JSONL")
    # the baseline GAE against the package's gae on the same padded arrays
    b = batch_pyarrow_jsonl(jsonl)
    lengths = b["mask"].sum(1)
    rows = np.arange(len(lengths))
    with open(jsonl, "rb") as f:
        next_by_episode = {r["episode_id"]: r["next_value"] for r in map(orjson.loads, f)
                           if "next_value" in r}
    next_value = np.array([next_by_episode.get(e, np.nan) for e in b["episode_id"]])
    ends_terminated = b["terminated"][rows, lengths - 1]
    adv, ret = gae(b["reward"], b["value"], b["terminated"], b["truncated"], b["mask"], next_value,
                   gamma=GAMMA, lam=LAM)
    mine = gae_padded(b["reward"], b["value"], b["terminated"], b["mask"], lengths,
                      np.where(ends_terminated, 0.0, next_value))
    problems += compare({"advantage": adv, "return": ret},
                        {"advantage": mine[0], "return": mine[1]}, "gae_padded vs trainer.gae")
    if not problems and not np.any(b["truncated"]):
        problems.append("the corpus has no truncated episode: the check would not test bootstrapping")
    return problems


def main(argv: list[str] | None = None) -> int:
    from corpus import cartpole_corpus

    parser = argparse.ArgumentParser(description="check the baselines against the package")
    parser.add_argument("--check", action="store_true", required=True)
    parser.add_argument("--lines", type=int, default=20_000)
    args = parser.parse_args(argv)
    jsonl, parquet = cartpole_corpus(args.lines), cartpole_corpus(args.lines, "parquet")
    problems = self_check(jsonl, parquet)
    for p in problems:
        print(f"MISMATCH {p}")
    print("baselines agree with the package" if not problems else f"{len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
