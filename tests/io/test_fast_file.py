"""Bulk checking of rollout lines (fastfile, EpisodeTracker.add_columns) = the line-by-line path.

The bulk path only ever accepts: when it accepts a block, checking the block line by line finds
no problem and leaves the episode tracker in exactly the same state; when it gives up, nothing
has changed.
"""

from __future__ import annotations

import copy
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import ContractError
from gyre_contract.core._models import RolloutStep
from gyre_contract.core._validate import EpisodeTracker, validate_step
from gyre_contract.io._fastfile import bulk_plan
from gyre_contract.io._raggedcols import NoDims
from gyre_contract.io._validation import validate_file

pytestmark = pytest.mark.usefixtures("fast_paths_on")
"""These tests are about the fast paths: on here even when CI runs with GYRE_FAST_PATHS=0."""


SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def tracker_state(tracker: EpisodeTracker) -> tuple:
    return (tracker.steps, tracker.terminated, tracker.truncated, sorted(tracker.policy_versions),
            [(k, v.step, v.policy_version, v.line, v.dims) for k, v in tracker._open.items()],
            list(tracker._ended.items()))


def one_by_one(tracker: EpisodeTracker, records: list[dict], first_line: int) -> list[str]:
    problems = []
    for i, record in enumerate(records):
        problems += [str(p) for p in tracker.add(validate_step(record, tracker.model),
                                                 first_line + i)]
    return problems


def check_columns(tracker: EpisodeTracker, records: list[dict], first_line: int) -> None:
    """add_columns accepts exactly when adding one by one finds nothing, with the same state."""
    bulk = copy.deepcopy(tracker)
    accepted = bulk.add_columns(
        [r["episode_id"] for r in records], np.array([r["step"] for r in records], np.int64),
        np.array([r["policy_version"] for r in records], np.int64),
        np.array([r["terminated"] for r in records], bool),
        np.array([r["truncated"] for r in records], bool), first_line)
    before = tracker_state(tracker)
    problems = one_by_one(tracker, records, first_line)
    assert accepted == (not problems), problems
    assert tracker_state(bulk) == (tracker_state(tracker) if accepted else before)


steps = st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 3), st.integers(0, 2),
                  st.sampled_from(["", "", "", "terminated", "truncated", "both"]))


def records_of(base: dict, spec: list[tuple[str, int, int, str]]) -> list[dict]:
    return [dict(base, episode_id=eid, step=step, policy_version=version,
                 terminated=end in ("terminated", "both"), truncated=end in ("truncated", "both"))
            for eid, step, version, end in spec]


def natural(spec_len: int, n_episodes: int) -> list[tuple[str, int, int, str]]:
    """Interleaved well-formed episodes: what a vector env writes."""
    out, counters = [], [0] * n_episodes
    for i in range(spec_len):
        e = i % n_episodes
        out.append((f"ep{e}", counters[e], 1, "terminated" if counters[e] == 4 else ""))
        counters[e] = 0 if counters[e] == 4 else counters[e] + 1
        if counters[e] == 0:
            out[-1] = out[-1]
    return out


@SETTINGS
@given(prefix=st.lists(steps, max_size=6), block=st.lists(steps, min_size=1, max_size=12))
def test_add_columns_matches_add_random(cartpole_record, cartpole_model, prefix, block):
    tracker = EpisodeTracker(cartpole_model)
    one_by_one(tracker, records_of(cartpole_record, prefix), 1)
    check_columns(tracker, records_of(cartpole_record, block), len(prefix) + 1)


@pytest.mark.parametrize("n_episodes", [1, 2, 3])
def test_add_columns_accepts_well_formed_blocks(cartpole_record, cartpole_model, n_episodes):
    spec = [(f"x{eid}", s, v, e) for eid, s, v, e in natural(23, n_episodes)]
    tracker = EpisodeTracker(cartpole_model)
    records = records_of(cartpole_record, spec)
    one_by_one(tracker, records[:7], 1)
    check_columns(tracker, records[7:], 8)
    assert tracker.steps == 23


class Walked(NoDims):
    """`NoDims` that does not say so: `add_columns` walks every episode (`_bound`)."""

    binds_nothing = False


def add_spec(tracker: EpisodeTracker, spec: list[tuple[str, int, int, str]], first_line: int,
             shapes: Any) -> bool:
    ends = [e for _, _, _, e in spec]
    return tracker.add_columns(
        [eid for eid, _, _, _ in spec], np.array([s for _, s, _, _ in spec], np.int64),
        np.array([v for _, _, v, _ in spec], np.int64),
        np.array([e in ("terminated", "both") for e in ends], bool),
        np.array([e in ("truncated", "both") for e in ends], bool), first_line, shapes)


@SETTINGS
@given(blocks=st.lists(st.lists(steps, min_size=1, max_size=10), min_size=1, max_size=4))
@example(blocks=[[("a", 0, 0, ""), ("b", 0, 0, "")], [("a", 1, 0, ""), ("b", 1, 1, "terminated")],
                 [("a", 2, 1, "truncated"), ("c", 0, 1, "")]])
def test_a_run_that_binds_nothing_skips_the_walk_and_ends_the_same(llm_model, blocks):
    """A ragged model's runs (`NoDims`: no dim or kind to keep) skip the per-episode walk: the
    same verdicts and the same tracker (dims and kinds included) as walking it."""
    skipped, walked = EpisodeTracker(llm_model), EpisodeTracker(llm_model)
    line = 1
    for spec in blocks:
        assert add_spec(skipped, spec, line, NoDims()) == add_spec(walked, spec, line, Walked())
        assert tracker_state(skipped) == tracker_state(walked)
        assert [v.kinds for v in skipped._open.values()] == \
            [v.kinds for v in walked._open.values()]
        line += len(spec)


def test_add_columns_refuses_models_with_named_dims(llm_model):
    tracker = EpisodeTracker(llm_model)
    assert not tracker.add_columns(["a"], np.array([0]), np.array([0]), np.array([True]),
                                   np.array([False]), 1)
    assert tracker.steps == 0


# -- decoding a block ------------------------------------------------------------------------

def test_simple_models_only(cartpole_model, llm_model):
    assert bulk_plan(cartpole_model) is not None
    assert bulk_plan(llm_model) is None and bulk_plan(RolloutStep) is None


def lines_of(records: list[dict]) -> list[bytes]:
    return [orjson.dumps(r) for r in records]


def test_clean_block_decodes(cartpole_record, cartpole_model):
    records = records_of(cartpole_record, [("a", 0, 0, ""), ("a", 1, 0, "truncated")])
    records[1]["next_value"] = 0.5
    block = bulk_plan(cartpole_model).decode(lines_of(records))
    assert block is not None and block.n == 2 and list(block.episode_id) == ["a", "a"]
    assert block.step.tolist() == [0, 1] and block.truncated.tolist() == [False, True]
    assert block.key_counts["next_value"] == 1 and "entropy" not in block.key_counts
    assert block.key_counts["observation"] == 2


def normal_verdict(raw: bytes, model: Any, tmp_path: Any) -> bool:
    """What the line-by-line reader decides for one line on its own (line and record rules)."""
    from gyre_contract.io._lines import Lines

    path = tmp_path / "one.jsonl"
    path.write_bytes(raw + b"\n")
    items = list(Lines(path, allow_partial_tail=False))
    if len(items) != 1 or items[0].__class__ is not tuple:
        return False
    try:
        validate_step(items[0][1], model)
    except ContractError:
        return False
    return True


HEAD = b'{"observation":[0.1,0.2,0.3,0.4],"action":1,"episode_id":"e","terminated":false,'
GOOD = HEAD + b'"truncated":false,"policy_version":0,"step":0,"reward":1.0,"logprob":-0.5}'


@pytest.mark.parametrize("raw", [
    GOOD,
    GOOD.replace(b'"step":0', b'"step":0,"step":1'),  # duplicate key: readers keep the last
    GOOD.replace(b'"step":0', b'"step":0, "step" :1'),
    GOOD.replace(b"}", b',"info":{"k":1,"k":2}}'),
    GOOD.replace(b"}", b',"info":{"k":99999999999999999999}}'),  # beyond 64 bits
    GOOD.replace(b"}", b',"info":{"k":-9223372036854775809}}'),
    GOOD.replace(b"}", b',"info":{"k":18446744073709551615}}'),
    GOOD.replace(b"}", b',"value":99999999999999999999}'),
    GOOD.replace(b"}", b',"value":-9223372036854775809}'),
    GOOD.replace(b"}", b',"value":18446744073709551616}'),
    GOOD.replace(b"}", b',"value":1e39}'),
    GOOD.replace(b"}", b',"value":null}'),
    GOOD.replace(b"}", b',"trunctaed":true}'),
    GOOD.replace(b"}", b',"info":{"a:b":1}}'),
    GOOD.replace(b"}", b',"info":{"k":"x\\"y"}}'),
    GOOD.replace(b"}", b',"info":{"k\\u0062":1,"kb":2}}'),
    GOOD.replace(b"}", b',"next_observation":[1,2,3,16777217]}'),
    GOOD.replace(b"}", b',"next_observation":[1,2,3,16777216]}'),
    GOOD.replace(b"}", b',"next_observation":[0.5,2,3,16777217]}'),
    GOOD.replace(b"}", b',"next_observation":[0.5,2,3,true]}'),
    GOOD.replace(b'"logprob":-0.5', b'"logprob":0.5'),
    GOOD.replace(b'"logprob":-0.5', b'"logprob":1e-50'),
    GOOD.replace(b'"reward":1.0', b'"reward":1'),
    GOOD.replace(b'"reward":1.0', b'"reward":123456789012345678'),
    GOOD.replace(b'"episode_id":"e"', b'"episode_id":""'),
    GOOD.replace(b'"episode_id":"e"', b'"episode_id":"\\u00e9"'),
    GOOD.replace(b'"action":1', b'"action":1.0'),
    GOOD + b" ", GOOD + b"\r", b" " + GOOD, b"\xef\xbb\xbf" + GOOD, b"", GOOD[:-1],
])
def test_block_decode_never_accepts_what_the_line_reader_refuses(cartpole_model, raw, tmp_path):
    if bulk_plan(cartpole_model).decode([raw]) is not None:
        assert normal_verdict(raw, cartpole_model, tmp_path), raw


def test_the_usual_line_is_accepted(cartpole_model, tmp_path):
    assert bulk_plan(cartpole_model).decode([GOOD]) is not None
    assert normal_verdict(GOOD, cartpole_model, tmp_path)


# -- episodes from a block -------------------------------------------------------------------

def same_columns(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f")))
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(
            same_columns(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def test_block_episodes_equal_read_episodes(cartpole_record, cartpole_model, tmp_path):
    from gyre_contract.io._assembly import episode_rows
    from gyre_contract.io._reading import read_episodes

    records = []
    for eid, length, end in [("a", 3, "terminated"), ("b", 2, "truncated"), ("c", 2, "")]:
        for t in range(length):
            last = t == length - 1
            record = dict(cartpole_record, episode_id=eid, step=t, observation=[t, 0.5, 1.0, 2.0],
                          terminated=last and end == "terminated",
                          truncated=last and end == "truncated")
            if last and end == "truncated":
                record["next_value"] = 0.25
                record["next_observation"] = [1.0, 2.0, 3.0, 4.0]
            if t == 1:
                record["info"] = {"seed": 7, "name": "x"}
            records.append(record)
    records.insert(4, records.pop(5))  # c's first step between b's: interleaved
    raw = lines_of(records)
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(raw) + b"\n")
    expected = list(read_episodes(path, cartpole_model))
    plan = bulk_plan(cartpole_model)
    block = plan.decode(raw)
    assert block is not None
    got = []
    for eid, rows, _done in episode_rows(block):
        numbers = range(block.n)[rows] if isinstance(rows, slice) else rows
        got.append(plan.episode(eid, [(block, rows)], [i + 1 for i in numbers]))
    assert [e.episode_id for e in got] == [e.episode_id for e in expected]
    for a, b in zip(expected, got):
        assert a.lines == b.lines and list(a.columns) == list(b.columns)
        for key in a.columns:
            assert same_columns(a.columns[key], b.columns[key]), key


# -- whole files: the same report and the same episodes with and without the bulk path ---------

def cartpole_lines(base: dict, episodes: int = 12, interleave: int = 1) -> list[bytes]:
    """Well-formed episodes of 3..9 steps; every third truncated with a next_value."""
    rng = np.random.default_rng(3)
    pending = []
    for e in range(episodes):
        length = int(rng.integers(3, 10))
        rows = []
        for t in range(length):
            last = t == length - 1
            record = dict(base, episode_id=f"ep-{e}", step=t, policy_version=e // 4,
                          observation=rng.standard_normal(4).round(3).tolist(),
                          logprob=-round(float(rng.random()), 3) - 0.01,
                          terminated=last and e % 3 != 2, truncated=last and e % 3 == 2)
            if last and e % 3 == 2:
                record["next_value"] = 0.5
            if t == 1 and e % 2:
                record["info"] = {"seed": e}
            rows.append(record)
        pending.append(rows)
    out: list[dict] = []
    for group in range(0, episodes, interleave):  # `interleave` episodes written step by step
        chunk = pending[group:group + interleave]
        for t in range(max(map(len, chunk))):
            out += [rows[t] for rows in chunk if t < len(rows)]
    return lines_of(out)


DEFECTS: list[tuple[int, bytes | None]] = [
    (5, None),  # delete a line: a step gap
    (9, b'{"oops": 1}'),
    (14, b"not json"),
    (20, b""),
]


def with_defects(lines: list[bytes], defects: list[tuple[int, bytes | None]]) -> list[bytes]:
    out = list(lines)
    for at, raw in sorted(defects, reverse=True):
        if raw is None:
            del out[at]
        else:
            out[at] = raw
    return out


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few lines, so that one file mixes bulk and line-by-line blocks."""
    import gyre_contract.io._lines as lines

    monkeypatch.setattr(lines, "CHUNK_BYTES", 1500)


def both_ways(monkeypatch, run: Any) -> tuple[Any, Any]:
    """`run()` with the fast paths on, then off (`GYRE_FAST_PATHS=0`: every line one by one)."""
    with monkeypatch.context() as m:
        m.setenv("GYRE_FAST_PATHS", "1")
        bulk = run()
    with monkeypatch.context() as m:
        m.setenv("GYRE_FAST_PATHS", "0")
        normal = run()
    return bulk, normal


def test_fast_paths_off_means_no_bulk_plan_and_no_bulk_episodes(cartpole_model, monkeypatch):
    tracker = EpisodeTracker(cartpole_model)
    monkeypatch.setenv("GYRE_FAST_PATHS", "0")
    assert bulk_plan(cartpole_model) is None
    assert not tracker.add_columns(["a"], np.array([0]), np.array([0]), np.array([True]),
                                   np.array([False]), 1)
    assert tracker.steps == 0
    monkeypatch.setenv("GYRE_FAST_PATHS", "1")
    assert bulk_plan(cartpole_model) is not None
    assert tracker.add_columns(["a"], np.array([0]), np.array([0]), np.array([True]),
                               np.array([False]), 1)


def phantom(base: dict) -> bytes:
    """A step of ep-0 after its terminated step (the classic autoreset bug)."""
    return orjson.dumps(dict(base, episode_id="ep-0", step=40, observation=[0.0] * 4))


@pytest.mark.parametrize("interleave", [1, 3])
@pytest.mark.parametrize("defects", [[], DEFECTS, [(30, b'{"step": 1, "step": 2}')], "phantom"])
@pytest.mark.parametrize("tail", [b"\n", b"", b"\n{\"observation\": [1"])
def test_validate_file_reports_are_identical(cartpole_record, cartpole_model, tmp_path,
                                             monkeypatch, small_blocks, interleave, defects,
                                             tail):
    from gyre_contract.io._validation import validate_file

    if defects == "phantom":
        defects = [(60, phantom(cartpole_record))]
    lines = with_defects(cartpole_lines(cartpole_record, interleave=interleave), defects)
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines) + tail)
    for complete in (False, True):
        bulk, normal = both_ways(monkeypatch, lambda c=complete: validate_file(
            path, cartpole_model, require_complete=c, allow_partial_tail=True).to_dict())
        assert bulk == normal


def test_the_bulk_path_is_taken(cartpole_record, cartpole_model, tmp_path, monkeypatch):
    import gyre_contract.io._checking as checking
    from gyre_contract.io._validation import validate_file

    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(cartpole_lines(cartpole_record)) + b"\n")
    monkeypatch.delenv("GYRE_FAST_PATHS", raising=False)  # CI also runs with it set to 0
    monkeypatch.setattr(checking, "validate_step", None)  # any line-by-line step would fail
    assert validate_file(path, cartpole_model).ok


def episodes_as_data(episodes: list[Any]) -> list[tuple]:
    return [(e.episode_id, e.lines, list(e.columns)) for e in episodes]


@pytest.mark.parametrize("part_lines", [1024, 2])
@pytest.mark.parametrize("interleave", [1, 3])
@pytest.mark.parametrize("defects", [[], [(25, b'{"oops": 1}')]])
def test_read_episodes_is_identical(cartpole_record, cartpole_model, tmp_path, monkeypatch,
                                   small_blocks, interleave, defects, part_lines):
    """Also when a block is decoded in parts of 2 lines, some with a field and some without."""
    import gyre_contract.io._fastfile as fastfile
    from gyre_contract.io._reading import read_episodes

    monkeypatch.setattr(fastfile, "_PART_LINES", part_lines)
    lines = with_defects(cartpole_lines(cartpole_record, interleave=interleave), defects)
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    def run() -> Any:
        got = []
        try:
            for episode in read_episodes(path, cartpole_model):
                got.append(episode)
        except ContractError as err:
            return got, str(err)
        return got, None

    (bulk, bulk_error), (normal, normal_error) = both_ways(monkeypatch, run)
    assert bulk_error == normal_error
    assert episodes_as_data(bulk) == episodes_as_data(normal)
    for a, b in zip(bulk, normal):
        for key in a.columns:
            assert same_columns(a.columns[key], b.columns[key]), (a.episode_id, key)


CORPUS = Path(__file__).parents[1] / "data" / "rollouts"


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.jsonl")))
def test_corpus_reports_are_identical_with_fast_paths_off(name, cartpole_model, monkeypatch):
    """Every defect file: the same verdicts, problems and line numbers with GYRE_FAST_PATHS=0."""
    for model in (cartpole_model, RolloutStep):
        for complete in (False, True):
            run = partial(validate_file, CORPUS / name, model, require_complete=complete)
            bulk, normal = both_ways(monkeypatch, run)
            assert bulk.to_dict() == normal.to_dict(), (model.__name__, complete)
