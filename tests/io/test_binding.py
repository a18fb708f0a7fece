"""Files checked against the unpinned `RolloutStep`: bound from their first lines, checked in bulk.

A block the bound plan accepts gives the report and the episodes the line path gives; a block
that disagrees with what was bound (another shape, another dtype, an integer action in a file
of float actions, a defect) goes line by line. `GYRE_FAST_PATHS=0` is the reference.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_file import (
    DEFECTS,
    both_ways,
    cartpole_lines,
    episodes_as_data,
    phantom,
    same_columns,
    small_blocks,  # noqa: F401  (a fixture)
    with_defects,
)

from gyre_contract.core._endedids import EndedEpisodes, episode_key
from gyre_contract.core._errors import ContractError
from gyre_contract.core._models import RolloutStep
from gyre_contract.io._binding import bind_plan
from gyre_contract.io._reading import read_episodes
from gyre_contract.io._validation import validate_file

pytestmark = pytest.mark.usefixtures("fast_paths_on")
"""These tests are about the fast paths: on here even when CI runs with GYRE_FAST_PATHS=0."""


def spaced(lines: list[bytes]) -> list[bytes]:
    """The same records written by `json.dumps` (", " and ": " separators)."""
    out = []
    for raw in lines:
        try:
            out.append(json.dumps(orjson.loads(raw)).encode())
        except orjson.JSONDecodeError:
            out.append(raw)
    return out


def replaced(lines: list[bytes], at: int, **changes: Any) -> list[bytes]:
    out = list(lines)
    out[at] = orjson.dumps({**orjson.loads(out[at]), **changes})
    return out


def float_actions(lines: list[bytes]) -> list[bytes]:
    return [orjson.dumps({**orjson.loads(raw), "action": [0.25, -0.5]}) for raw in lines]


def early_steps(lines: list[bytes], **changes: Any) -> list[bytes]:
    """`changes` on the first two steps of each episode: with small blocks, many an episode
    starts in a block the bound plan refuses and goes on in one it accepts."""
    out = []
    for raw in lines:
        record = orjson.loads(raw)
        out.append(orjson.dumps({**record, **changes}) if record["step"] < 2 else raw)
    return out


def first_observation(lines: list[bytes], scalar: bool) -> list[bytes]:
    """Each observation its first value alone: a number (shape []) or a list of one ([1])."""
    out = []
    for raw in lines:
        record = orjson.loads(raw)
        first = record["observation"][0]
        out.append(orjson.dumps({**record, "observation": first if scalar else [first]}))
    return out


def token_fields(lines: list[bytes]) -> list[bytes]:
    """The v1.1 step fields on every line: a two-token action, one group per 4 episodes."""
    out = []
    for raw in lines:
        record = orjson.loads(raw)
        number = int(record["episode_id"].split("-")[1])
        record.update(action=[3, 4], ref_logprob=-0.5, loss_mask=[True, False],
                      token_reward=[0.1, 0.2], group_id=f"g-{number // 4}")
        out.append(orjson.dumps(record))
    return out


VARIANTS = {
    "clean": lambda base: cartpole_lines(base),
    "defects": lambda base: with_defects(cartpole_lines(base), DEFECTS),
    "phantom": lambda base: with_defects(cartpole_lines(base), [(60, phantom(base))]),
    "spaced": lambda base: spaced(cartpole_lines(base, interleave=3)),
    "spaced defects": lambda base: spaced(with_defects(cartpole_lines(base), DEFECTS)),
    # an observation of another size mid-episode: episode.dims_fixed, on the line path
    "dimension jump": lambda base: replaced(cartpole_lines(base), 40, observation=[0.0] * 5),
    "dimension jump late": lambda base: replaced(cartpole_lines(base), 70,
                                                 observation=[0.0] * 3),
    "early dimension": lambda base: early_steps(cartpole_lines(base, interleave=3),
                                                observation=[0.0] * 5),
    "early float action": lambda base: early_steps(cartpole_lines(base, interleave=3),
                                                   action=0.5),
    # a float action in a file of integer actions: episode.dtype_fixed
    "float action": lambda base: replaced(cartpole_lines(base), 33, action=1.0),
    "float actions": lambda base: float_actions(cartpole_lines(base)),
    "int among floats": lambda base: replaced(float_actions(cartpole_lines(base)), 50,
                                              action=[1, 2]),
    "mixed among floats": lambda base: replaced(float_actions(cartpole_lines(base)), 50,
                                                action=[1, 2.5]),
    "next observation": lambda base: replaced(cartpole_lines(base), 8,
                                              next_observation=[0.5] * 4),
    "token fields": lambda base: token_fields(cartpole_lines(base)),
    "token mask too long": lambda base: replaced(token_fields(cartpole_lines(base)), 44,
                                                 loss_mask=[True, True, False]),
    "positive ref logprob": lambda base: replaced(token_fields(cartpole_lines(base)), 52,
                                                  ref_logprob=0.25),
    "empty group": lambda base: replaced(token_fields(cartpole_lines(base)), 23, group_id=""),
    "group versions": lambda base: replaced(token_fields(cartpole_lines(base)), 6,
                                            policy_version=0, group_id="g-2"),
    "positive logprob": lambda base: replaced(cartpole_lines(base), 45, logprob=0.5),
    "modalities": lambda base: replaced(cartpole_lines(base), 3,
                                        observation={"pixels": [1, 2], "state": [0.5]}),
    # a field of shape [] binds its `*dims` to []: [] then [1] in an episode is a dims change
    "scalar observations": lambda base: first_observation(cartpole_lines(base, interleave=3),
                                                          True),
    "scalar then one": lambda base: replaced(first_observation(
        cartpole_lines(base, interleave=3), True), 70, observation=[0.5]),
    "one then scalar": lambda base: replaced(first_observation(
        cartpole_lines(base, interleave=3), False), 70, observation=0.5),
    "scalar action then two": lambda base: replaced(cartpole_lines(base), 33, action=[1, 0]),
    "no logprob first": lambda base: [orjson.dumps({k: v for k, v in orjson.loads(raw).items()
                                                    if k != "logprob" or i > 20})
                                      for i, raw in enumerate(cartpole_lines(base))],
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("tail", [b"\n", b"\n{\"observation\": [1"])
def test_reports_are_identical_without_a_pinned_model(cartpole_record, tmp_path, monkeypatch,
                                                       small_blocks, variant, tail):  # noqa: F811
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(VARIANTS[variant](cartpole_record)) + tail)
    for complete in (False, True):
        bulk, normal = both_ways(monkeypatch, lambda c=complete: validate_file(
            path, RolloutStep, require_complete=c, allow_partial_tail=True).to_dict())
        assert bulk == normal


@pytest.mark.parametrize("variant", ["clean", "defects", "dimension jump", "float actions",
                                     "spaced", "next observation", "scalar then one",
                                     "one then scalar", "scalar action then two"])
def test_episodes_are_identical_without_a_pinned_model(cartpole_record, tmp_path, monkeypatch,
                                                        small_blocks, variant):  # noqa: F811
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(VARIANTS[variant](cartpole_record)) + b"\n")

    def run() -> Any:
        got = []
        try:
            for episode in read_episodes(path, RolloutStep):
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


@pytest.mark.parametrize("variant", ["clean", "spaced", "float actions", "token fields",
                                     "scalar observations"])
def test_the_bound_plan_is_taken(cartpole_record, tmp_path, monkeypatch, variant):
    import gyre_contract.io._checking as checking

    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(VARIANTS[variant](cartpole_record)) + b"\n")
    monkeypatch.setattr(checking, "validate_step", None)  # any line-by-line step would fail
    assert validate_file(path, RolloutStep).ok


@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_scalar_then_a_list_is_a_dims_change(cartpole_record, tmp_path, monkeypatch, fast):
    """A scalar action, then [2] in the same episode: the episode's columns could not be
    stacked, so the episode rule names the line (not a ValueError from numpy)."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(VARIANTS["scalar action then two"](cartpole_record)) + b"\n")
    monkeypatch.setenv("GYRE_FAST_PATHS", fast)
    report = validate_file(path, RolloutStep)
    assert [(p.line, p.expected, p.got.split()[0]) for p in report.problems()] == [
        (34, "act=[] as earlier in the episode", "act=[2]")]
    with pytest.raises(ContractError, match="line 34: .*dimension changed within the episode"):
        list(read_episodes(path, RolloutStep))


def test_what_is_bound(cartpole_record):
    lines = cartpole_lines(cartpole_record)
    plan = bind_plan(RolloutStep, lines)
    assert plan is not None
    assert plan.shapes["observation"] == (4,) and plan.dtypes["observation"] == np.float32
    assert plan.dtypes["action"] == np.int64 and plan.shapes["action"] == ()
    assert plan.stats_model is RolloutStep
    floats = bind_plan(RolloutStep, float_actions(lines))
    assert floats is not None and floats.no_ints == {"action"}
    assert floats.dtypes["action"] == np.float32 and floats.shapes["action"] == (2,)
    # first lines that disagree bind nothing
    assert bind_plan(RolloutStep, replaced(lines, 2, observation=[0.0] * 5)) is None
    assert bind_plan(RolloutStep, [b"not json", *lines]) is None
    assert bind_plan(RolloutStep, replaced(lines, 2, observation={"a": [1]})) is None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "discard"]),
                          st.text(min_size=1, max_size=6), st.integers(1, 10**9)),
                max_size=300),
       st.integers(2, 64))
def test_ended_episodes_is_a_dict_of_lines(ops, buffer):
    import gyre_contract.core._endedids as endedids

    old = endedids._BUFFER
    endedids._BUFFER = buffer  # small runs: exercise the merges
    try:
        ended, reference = EndedEpisodes(), {}
        for op, eid, line in ops:
            if op == "add" and eid not in reference:
                ended.add(eid, line if line % 3 else None)
                reference[eid] = line if line % 3 else None
            elif op == "discard":
                ended.discard(eid)
                reference.pop(eid, None)
            assert len(ended) == len(reference)
        for eid, line in reference.items():
            assert eid in ended and ended.line(eid) == line
        more = [f"more-{i}" for i in range(buffer + 3)]  # a batch that crosses the buffer
        ended.add_many(more, list(range(len(more))))
        assert len(ended) == len(reference) + len(more)
        assert ended.line(more[-1]) == len(more) - 1 and ended.any_of(more[:1])
        for eid in more:
            ended.discard(eid)
        others = [f"x{i}" for i in range(20)]
        assert ended.any_of(others) == any(o in reference for o in others)
        assert ended.any_of(list(reference)[:3]) == bool(reference)
        assert sorted(ended.items()) == sorted((episode_key(k), v) for k, v in reference.items())
    finally:
        endedids._BUFFER = old


@pytest.mark.parametrize("raw", [
    b'{"step": 1, "step": 2}',  # a duplicate key, written with ", " separators
    b'{"a": 1180591620717411303424}',  # an integer beyond 64 bits
    b'{"a": 1, "b": {"c": 2, "c": 3}}',  # a nested duplicate
])
def test_spaced_lines_with_hidden_problems_are_still_found(raw):
    from gyre_contract.io._lines import Parsed, hidden_problems

    obj = orjson.loads(raw) if b"11805916" not in raw else json.loads(raw)
    assert hidden_problems(raw, obj)  # the slow check finds it ...
    from gyre_contract.io._lines import Lines  # ... and the reader does not skip that check

    items = list(Lines.parse(Lines.__new__(Lines), 1, [raw]))
    assert items[0].__class__ is Parsed and items[0].problems


def test_a_spaced_clean_line_is_a_record():
    from gyre_contract.io._lines import Lines

    raw = json.dumps({"a": [1.5, -2e-05], "b": "caf\u00e9", "c": None}).encode()
    assert list(Lines.parse(Lines.__new__(Lines), 7, [raw])) == [(7, orjson.loads(raw))]
