"""The benchmarks' harness runs, and its agreement check catches a baseline that checks less.

Speed is measured in benchmarks/ (ratios within one run), never here: these tests check that
`benchmarks/run.py --smoke` produces every figure with its load, free cores and CPU ratio, and that
`benchmarks/agreement.py` (every baseline gives the package's verdicts and arrays) fails on a
baseline that validates nothing and on a stale declared gap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import agreement  # noqa: E402

import gyre_contract  # noqa: E402


def test_a_baseline_that_checks_nothing_disagrees(monkeypatch: pytest.MonkeyPatch) -> None:
    """An accept-everything baseline (the old orjson loop, per record) is reported, case by case."""
    def default(r: dict) -> object:
        return gyre_contract.validate_step(r, gyre_contract.RolloutStep)

    monkeypatch.setattr(agreement, "record_sides",
                        lambda: {"nothing": ("cartpole", default, lambda r: None)})
    problems, rows = agreement.check_records()
    refused = [case for _, case, ours, _ in rows if ours]
    assert refused and len(problems) == len(refused)
    assert "nothing: 'observation NaN': the package refuses, the baseline accepts" in problems


def test_a_baseline_returning_less_than_the_package_is_reported(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The targets compare with models returning the package's output; one returning lists, or
    float64 where the package gives float32, fails the output check."""
    import baselines

    assert agreement.check_outputs() == []
    monkeypatch.setattr(baselines, "BestStepOut", baselines.BestStep)
    problems = agreement.check_outputs()
    assert "pydantic out: 'valid': step.observation: list, the package's ndarray" in problems
    assert "pydantic out: 'valid': step.logprob: float, the package's float32" in problems
    assert not [p for p in problems if "pinned" in p or "LLM" in p]
    ours = gyre_contract.validate_step(agreement.cartpole_record())
    wider = ours.model_copy(update={"observation": ours.observation.astype("float64")})
    assert agreement.same_output(ours, wider, "step") == [
        "step.observation: float64[4], the package's float32[4]"]
    assert agreement.same_output(ours, ours.model_copy(), "step") == []


def test_a_declared_gap_that_the_baseline_covers_is_stale() -> None:
    assert agreement.judge("polars", "unknown key", True, True) == [
        "polars: 'unknown key' is declared a gap but the verdicts agree (update GAPS)"]
    assert agreement.judge("polars", "unknown key", True, False) == []
    assert agreement.judge("polars", "step skipped", True, True) == []


def test_the_corpus_with_prompt_texts_is_what_real_completions_hold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its texts hold escaped newlines and quotes and colons (what a reader's checks on the
    bytes must not send line by line), and the baseline's batch equals the package's."""
    pytest.importorskip("pyarrow")
    import baselines
    import corpus

    monkeypatch.setenv("GYRE_BENCH_CACHE", str(tmp_path))
    path = corpus.llm_corpus(24, text=True)
    raw = path.read_bytes()
    assert raw.count(b"Question ") == 24 and b"\\n" in raw and b'\\"####' in raw
    assert corpus.llm_corpus(24) != path  # a corpus of its own, cached beside the other
    token_map = agreement.write_token_map(tmp_path)
    ours = gyre_contract.half_way(path, token_map).batch
    assert agreement.compare(ours, baselines.token_batch(path, text=True), "texts") == []


@pytest.mark.slow
def test_run_smoke_gives_every_figure_with_its_load(tmp_path: Path) -> None:
    for module in ("polars", "pyarrow", "jsonschema_rs", "gymnasium"):
        pytest.importorskip(module)
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--smoke", "--json", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=900,
        env={**os.environ, "GYRE_BENCH_CACHE": str(tmp_path / "corpora")})
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["run"]["agreement"]["mismatches"] == []
    assert data["run"]["agreement"]["verdicts"] > 200
    figures = data["figures"]
    assert {f["section"] for f in figures} == {"validate_step", "validate", "batch", "parquet",
                                               "tokens", "startup", "rss", "collate", "diff"}
    for f in figures:
        assert f["ratio"] > 0 and f["rounds"] >= 1
        assert f["cores"] >= 1 and 0 <= f["free_cores"] <= f["cores"] and f["load_start"] >= 0
        assert f["verdict"].split()[0] in ("PASS", "FAIL", "info")
        # every timed figure has its CPU ratio beside the wall-time one (memory figures: none)
        assert (f["cpu_ratio"] is None) == (f["section"] == "rss"), f["name"]
        assert f["cpu_ratio"] is None or f["cpu_ratio"] > 0
    with_limits = [f for f in figures if f["section"] in ("validate", "batch", "parquet", "tokens")
                   and f["target"]]
    assert with_limits and all(f["raw_fraction"] and f["typed_fraction"] for f in with_limits)
