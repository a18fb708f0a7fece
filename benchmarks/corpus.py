"""Realistic benchmark corpora, generated once and cached on disk keyed by their parameters.

Two corpora, both written with the package's own writer (`write_steps`: JSON Lines, or Parquet
for a `.parquet` path), in the DEFAULT step model's fields (no pinned model needed to read them):

- **CartPole** (`cartpole_corpus`): real Gymnasium `CartPole-v1` episodes (time limit 200 steps)
  played by a mix of a uniformly random policy (a quarter of the episodes) and a simple
  heuristic (push towards the side the pole falls to) that takes a random action with a
  probability drawn per episode from U(0.1, 0.9). Episode lengths therefore span the whole
  range, 8 or 9 steps to 200 (median about 60, about 30% cut by the time limit).
  Every step has `observation` float32 [4], `action` int, `logprob` (the true log-probability of
  the action under that mixture policy), `value` (a noisy critic: the discounted return-to-go,
  gamma 0.99, bootstrapped at a time-limit cut, times 1 + N(0, 0.1)), `reward`, `step`,
  `episode_id`, `terminated`, `truncated`, `policy_version` (one more every 64 episodes); the
  last step of a truncated episode also has `next_value`. A pool of real episodes is simulated
  (as many steps as the corpus, up to 200,000) and replayed, with fresh episode ids, until the
  corpus holds exactly `lines` steps; the very last episode is cut by a budget (truncated, with
  its `next_value`) when the lines run out mid-episode, so every episode is complete.
- **LLM token completions** (`llm_corpus`): one single-turn generation per line, prompts of 32-256
  and responses of 64-1,024 tokens (both log-uniform), `observation.token_ids`, `action` (the
  generated ids), `logprob` (one per token, <= 0), a scalar `reward`, `terminated`. Groups of
  `group_size` samples share a prompt; when the default model has the v1.1 fields, each line
  also carries `group_id` and `ref_logprob`. With `text` (`llm --text`), each prompt's text
  too, in a Qwen chat template (`CHAT_PROMPT`: escaped newlines and quotes, colons inside the
  string), as real completions carry it.

    python benchmarks/corpus.py cartpole --lines 200000            # build (or find) and describe
    python benchmarks/corpus.py cartpole --lines 200000 --format parquet
    python benchmarks/corpus.py llm --lines 2000
    python benchmarks/corpus.py llm --lines 2000 --text

The cache lives in `$GYRE_BENCH_CACHE`, else `<tmp>/gyre-bench-corpus`; a file's name holds every
parameter and `CORPUS_VERSION`, so a changed generator never serves an old file. Files are
written under a temporary name and renamed, so processes building the same corpus at once never
see half a file. Beside each file, `<name>.meta.json` holds its description (episode count,
length histogram and median, bytes).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gyre_contract import RolloutStep, write_steps  # noqa: E402

CORPUS_VERSION = 1
"""Bump when the generator's output changes: the cache key holds it."""

GAMMA = 0.99
TIME_LIMIT = 200
POOL_MAX_STEPS = 200_000
EPISODES_PER_VERSION = 64
LENGTH_BINS = (1, 10, 20, 40, 80, 120, 160, 200, 201)
"""Histogram bin edges of episode lengths ([1, 10), [10, 20), ..., [200, 201) = exactly 200)."""

FORMATS = ("jsonl", "parquet")


def cache_dir() -> Path:
    path = Path(os.environ.get("GYRE_BENCH_CACHE") or Path(tempfile.gettempdir()) / "gyre-bench-corpus")
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- CartPole: real episodes ----------------------------------------------------------------------

@dataclass(frozen=True)
class Episode:
    """One simulated CartPole episode, as arrays over its steps."""

    observation: np.ndarray  # float32 [L, 4]
    action: np.ndarray  # int64 [L]
    logprob: np.ndarray  # float32 [L]
    value: np.ndarray  # float32 [L]
    terminated: bool
    next_value: float  # V(s_L) when cut by the time limit (else unused)

    def __len__(self) -> int:
        return len(self.action)


def simulate_cartpole(steps: int, seed: int = 0, random_share: float = 0.25) -> list[Episode]:
    """Play CartPole-v1 (time limit 200) until at least `steps` steps; see the module docstring.

    `random_share` of the episodes (evenly spread) are played by the uniformly random policy.
    """
    import gymnasium as gym

    env = gym.make("CartPole-v1", max_episode_steps=TIME_LIMIT)
    rng = np.random.default_rng(seed)
    episodes: list[Episode] = []
    total = 0
    while total < steps:
        random_policy = (len(episodes) * random_share) % 1 < random_share
        eps = 1.0 if random_policy else float(rng.uniform(0.1, 0.9))
        obs, _ = env.reset(seed=int(rng.integers(2**31)))
        observations, actions, logps = [], [], []
        while True:
            greedy = 1 if obs[2] + 0.5 * obs[3] > 0 else 0
            action = int(rng.integers(2)) if rng.random() < eps else greedy
            # the mixture policy: eps/2 per action plus (1 - eps) on the greedy one
            prob = eps / 2 + (1 - eps) * (action == greedy)
            observations.append(obs)
            actions.append(action)
            logps.append(math.log(prob))
            obs, _reward, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        length = len(actions)
        # a noisy critic: the discounted return-to-go, bootstrapped at a time-limit cut
        tail = 0.0 if terminated else (1 - GAMMA ** 100) / (1 - GAMMA)
        returns = np.empty(length)
        g = tail
        for t in range(length - 1, -1, -1):
            g = 1.0 + GAMMA * g
            returns[t] = g
        noise = 1 + 0.1 * rng.standard_normal(length + 1)
        value = (returns * noise[:length]).astype(np.float32)
        episodes.append(Episode(np.asarray(observations, np.float32), np.asarray(actions, np.int64),
                                np.asarray(logps, np.float32), value, bool(terminated),
                                float(np.float32(tail * noise[length]))))
        total += length
    env.close()
    return episodes


def cartpole_records(lines: int, seed: int = 0, random_share: float = 0.25) -> Iterator[dict[str, Any]]:
    """Exactly `lines` step records of complete episodes (default model fields)."""
    pool = simulate_cartpole(min(lines, POOL_MAX_STEPS), seed, random_share)
    written, n = 0, 0
    while written < lines:
        ep = pool[n % len(pool)]
        length = min(len(ep), lines - written)
        cut = length < len(ep)  # the corpus budget ends mid-episode: a truncation
        terminated = ep.terminated and not cut
        next_value = float(ep.value[length]) if cut else ep.next_value
        episode_id = f"cartpole-{seed}-{n // len(pool)}-{n % len(pool)}"
        version = n // EPISODES_PER_VERSION
        obs, action = ep.observation, ep.action.tolist()
        logp, value = ep.logprob.tolist(), ep.value.tolist()
        for t in range(length):
            last = t == length - 1
            record = {"observation": obs[t], "action": action[t], "logprob": logp[t],
                      "value": value[t], "reward": 1.0, "step": t, "episode_id": episode_id,
                      "terminated": last and terminated, "truncated": last and not terminated,
                      "policy_version": version}
            if last and not terminated:
                record["next_value"] = next_value
            yield record
        written += length
        n += 1


def cartpole_corpus(lines: int, fmt: str = "jsonl", seed: int = 0, random_share: float = 0.25) -> Path:
    """The cached CartPole corpus of exactly `lines` steps as JSON Lines or Parquet (built once).

    `random_share=1.0`: every episode played at random (lengths 8 to about 60, median about 20),
    five times the episodes of the default mix per line: what stresses per-episode state.
    """
    share = "" if random_share == 0.25 else f"-r{random_share:g}"
    return _cached(f"cartpole-v{CORPUS_VERSION}-s{seed}{share}-{lines}", fmt,
                   lambda: cartpole_records(lines, seed, random_share))


# -- LLM token completions ------------------------------------------------------------------------

def log_uniform(rng: np.random.Generator, low: int, high: int, n: int) -> np.ndarray:
    """n integers in [low, high], log-uniformly distributed."""
    return np.exp(rng.uniform(np.log(low), np.log(high + 1), n)).astype(np.int64).clip(low, high)


def has_v11_fields() -> bool:
    """Whether the default step model knows the v1.1 LLM fields (`group_id`, `ref_logprob`)."""
    return {"group_id", "ref_logprob"} <= set(RolloutStep.model_fields)


CHAT_PROMPT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
               "Question {g}: A farmer has {a} sheep and buys {b} more at the market. How many "
               "sheep does the farmer have now?\nThink step by step, then give the answer as "
               "\"#### <number>\".<|im_end|>\n<|im_start|>assistant\n")
"""The text of a group's prompt when a corpus has one: a Qwen chat template, whose newlines and
quotes are escaped in JSON and whose colons are inside a string."""


def llm_records(lines: int, seed: int = 0, group_size: int = 8, v11: bool = False,
                vocab: int = 50_000, text: bool = False) -> Iterator[dict[str, Any]]:
    """`lines` single-turn generations (see the module docstring), numpy arrays of declared dtypes;
    with `text`, each prompt's text beside its token ids (`CHAT_PROMPT`)."""
    rng = np.random.default_rng(seed)
    groups = -(-lines // group_size)
    prompt_len = log_uniform(rng, 32, 256, groups)
    response_len = log_uniform(rng, 64, 1024, lines)
    for i in range(lines):
        g = i // group_size
        if i % group_size == 0:
            prompt = np.random.default_rng((seed, g)).integers(0, vocab, prompt_len[g])
        a = int(response_len[i])
        logprob = np.log(rng.uniform(0.05, 1.0, a)).astype(np.float32)
        observation: dict[str, Any] = {"token_ids": prompt}
        if text:
            observation["text"] = CHAT_PROMPT.format(g=g, a=10 + g % 89, b=1 + g % 23)
        record: dict[str, Any] = {
            "observation": observation, "action": rng.integers(0, vocab, a),
            "logprob": logprob, "reward": float(rng.integers(2)), "step": 0,
            "episode_id": f"llm-{seed}-{i}", "terminated": True, "truncated": False,
            "policy_version": g // 16}
        if v11:
            record["group_id"] = f"prompt-{seed}-{g}"
            record["ref_logprob"] = np.minimum(
                logprob + rng.normal(0, 0.05, a).astype(np.float32), 0).astype(np.float32)
        yield record


def llm_corpus(lines: int, fmt: str = "jsonl", seed: int = 0, group_size: int = 8,
               v11: bool | None = None, text: bool = False) -> Path:
    """The cached LLM corpus; `v11=None` adds the v1.1 fields when the default model has them;
    `text` adds each prompt's text (`CHAT_PROMPT`)."""
    v11 = has_v11_fields() if v11 is None else v11
    name = f"llm-v{CORPUS_VERSION}-s{seed}-g{group_size}-{'v11' if v11 else 'v1'}" \
        f"{'-text' if text else ''}-{lines}"
    return _cached(name, fmt, lambda: llm_records(lines, seed, group_size, v11, text=text))


# -- cache and description ------------------------------------------------------------------------

def _cached(stem: str, fmt: str, records: Any) -> Path:
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    path = cache_dir() / f"{stem}.{fmt}"
    if path.exists() and meta_path(path).exists():
        return path
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.{fmt}")
    try:
        write_steps(tmp, records())
        meta = describe(tmp)
        meta["file"] = path.name
        tmp_meta = tmp.with_suffix(".meta.tmp")
        tmp_meta.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        os.replace(tmp_meta, meta_path(path))
    finally:
        for leftover in (tmp, tmp.with_suffix(".meta.tmp")):
            leftover.unlink(missing_ok=True)
    return path


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def episode_lengths(path: Path) -> np.ndarray:
    """Steps per episode (in order of first appearance), read with pyarrow (JSONL or Parquet)."""
    import pyarrow.compute as pc

    table = _read_table(path, ["episode_id"])
    codes = pc.dictionary_encode(table.column("episode_id")).combine_chunks().indices
    return np.bincount(codes.to_numpy(zero_copy_only=False))


def _read_table(path: Path, columns: list[str]) -> Any:
    import pyarrow as pa

    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path, columns=columns)
    import pyarrow.json as pj

    # parse only these columns (an explicit schema, other keys ignored): far less memory
    types = {"episode_id": pa.string(), "action": pa.list_(pa.int64()),
             "observation": pa.struct([("token_ids", pa.list_(pa.int64()))])}
    options = pj.ParseOptions(explicit_schema=pa.schema([(c, types[c]) for c in columns]),
                              unexpected_field_behavior="ignore")
    return pj.read_json(path, parse_options=options)


def describe(path: Path) -> dict[str, Any]:
    """Lines, episodes, episode-length median/percentiles/histogram and bytes of a corpus file.

    For an LLM corpus (every episode one step): prompt and response token-length statistics.
    """
    if path.name.lstrip(".").startswith("llm-"):
        return describe_tokens(path)
    lengths = episode_lengths(path)
    hist, _ = np.histogram(lengths, bins=LENGTH_BINS)
    labels = [f"{lo}-{hi - 1}" if hi - 1 > lo else f"{lo}" for lo, hi in zip(LENGTH_BINS, LENGTH_BINS[1:])]
    return {"lines": int(lengths.sum()), "episodes": int(lengths.size), "bytes": path.stat().st_size,
            "length_min": int(lengths.min()), "length_median": float(np.median(lengths)),
            "length_max": int(lengths.max()),
            "length_percentiles": {str(p): float(np.percentile(lengths, p)) for p in (10, 25, 75, 90)},
            "length_histogram": dict(zip(labels, hist.tolist()))}


def describe_tokens(path: Path) -> dict[str, Any]:
    import pyarrow.compute as pc

    table = _read_table(path, ["observation", "action"])
    prompt = pc.list_value_length(pc.struct_field(table.column("observation").combine_chunks(),
                                                  "token_ids")).to_numpy()
    response = pc.list_value_length(table.column("action").combine_chunks()).to_numpy()

    def stats(x: np.ndarray) -> dict[str, float]:
        return {"min": int(x.min()), "median": float(np.median(x)), "mean": float(x.mean()),
                "max": int(x.max()), "total": int(x.sum())}

    return {"lines": int(len(response)), "bytes": path.stat().st_size,
            "prompt_tokens": stats(prompt), "response_tokens": stats(response)}


def load_meta(path: Path) -> dict[str, Any]:
    return json.loads(meta_path(path).read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("cartpole", "llm"))
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--format", choices=FORMATS, default="jsonl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--text", action="store_true",
                        help="LLM: each prompt's text beside its token ids (a chat template)")
    parser.add_argument("--random-share", type=float, default=0.25,
                        help="CartPole: the share of episodes played by the random policy")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.kind == "cartpole":
        path = cartpole_corpus(args.lines, args.format, args.seed, args.random_share)
    else:
        path = llm_corpus(args.lines, args.format, seed=args.seed, text=args.text)
    print(path)
    print(json.dumps(load_meta(path), indent=1))
    print(f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
