"""`GYRE_FAST_PATHS=0` turns every fast path off and changes nothing a report says.

For every file of the malformed corpus (and a Parquet twin of each one Parquet can hold), under
both the unpinned and a pinned model, `validate_file` gives the same `to_dict()` (verdicts,
messages, line numbers, counts, field table) with the fast paths on and off; reading episodes
gives the same episodes or the same error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from models import CartPoleStep, LLMStep

from gyre_contract.core._errors import ContractError
from gyre_contract.core._models import RolloutStep
from gyre_contract.io._reading import read_episodes
from gyre_contract.io._validation import validate_file

CORPUS = Path(__file__).parents[1] / "data" / "rollouts"
FILES = sorted(p.name for p in CORPUS.glob("*.jsonl"))
MODELS = [RolloutStep, CartPoleStep]
PARQUET_TWINS = ["crlf_line_ends.jsonl", "dimension_jump.jsonl", "duplicate_key.jsonl",
                 "empty.jsonl", "open_episode.jsonl", "policy_version_decreasing.jsonl",
                 "step_after_terminated.jsonl", "step_gap.jsonl", "wrong_shape_pinned.jsonl"]
"""Corpus files whose records Parquet can hold (the others break JSON itself, or hold a value
no Arrow column takes: a list for a record, a null, an integer beyond 64 bits, an unknown key)."""


def both_ways(monkeypatch: pytest.MonkeyPatch, run: Any) -> tuple[Any, Any]:
    """`run()` with the fast paths on, then with `GYRE_FAST_PATHS=0`."""
    monkeypatch.delenv("GYRE_FAST_PATHS", raising=False)
    fast = run()
    with monkeypatch.context() as m:
        m.setenv("GYRE_FAST_PATHS", "0")
        normal = run()
    return fast, normal


def episodes_or_error(path: Path, model: type) -> tuple[list[tuple], str | None]:
    got = []
    try:
        for e in read_episodes(path, model):
            got.append((e.episode_id, e.lines, sorted(e.columns), len(e)))
    except ContractError as err:
        return got, str(err)
    return got, None


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("name", FILES)
def test_corpus_reports_do_not_depend_on_fast_paths(name: str, model: type, monkeypatch):
    path = CORPUS / name
    for complete in (False, True):
        fast, normal = both_ways(monkeypatch, lambda c=complete: validate_file(
            path, model, require_complete=c).to_dict())
        assert fast == normal
    fast, normal = both_ways(monkeypatch, lambda: episodes_or_error(path, model))
    assert fast == normal


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> Path:
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (extra 'parquet')")
    from gyre_contract.io._parquet import write_parquet

    folder = tmp_path_factory.mktemp("twins")
    for name in PARQUET_TWINS:
        records = [orjson.loads(line) for line in (CORPUS / name).read_bytes().splitlines()]
        write_parquet(folder / name.replace(".jsonl", ".parquet"), records, RolloutStep)
    return folder


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("name", PARQUET_TWINS)
def test_parquet_twin_reports_do_not_depend_on_fast_paths(name: str, model: type, twins: Path,
                                                          monkeypatch):
    path = twins / name.replace(".jsonl", ".parquet")
    for complete in (False, True):
        fast, normal = both_ways(monkeypatch, lambda c=complete: validate_file(
            path, model, require_complete=c).to_dict())
        assert fast == normal


def test_modalities_in_parquet_do_not_depend_on_fast_paths(tmp_path, llm_record, monkeypatch):
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (extra 'parquet')")
    from gyre_contract.io._parquet import write_parquet

    second = dict(llm_record, episode_id="p/1", observation={"token_ids": [7, 8, 9, 10]},
                  action=[5], logprob=[-0.3, -0.1])  # two log-probs for one token
    path = tmp_path / "llm.parquet"
    write_parquet(path, [llm_record, second], LLMStep)
    fast, normal = both_ways(monkeypatch, lambda: validate_file(path, LLMStep).to_dict())
    assert fast == normal and not fast["holds"]


def test_the_switch_turns_the_bulk_path_off(cartpole_record, tmp_path, monkeypatch):
    import gyre_contract.io._checking as checking

    lines = [orjson.dumps(dict(cartpole_record, step=t, terminated=t == 2)) for t in range(3)]
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    monkeypatch.delenv("GYRE_FAST_PATHS", raising=False)
    assert checking.bulk_plan_for(CartPoleStep) is not None
    monkeypatch.setenv("GYRE_FAST_PATHS", "0")
    assert checking.bulk_plan_for(CartPoleStep) is None
    assert validate_file(path, CartPoleStep).ok


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_shard_reports_do_not_depend_on_fast_paths(model: type, monkeypatch):
    """The corpus as one folder of shards: per-shard reports and episodes in two shards."""
    from gyre_contract.io._shards import validate_shards

    fast, normal = both_ways(monkeypatch, lambda: validate_shards(
        CORPUS, model, engine="local", allow_partial_tail=True).to_dict())
    assert fast == normal and fast["problems"]["cross_shard"]
