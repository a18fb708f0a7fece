"""Token files checked against the unpinned `RolloutStep`: a ragged plan bound from their first
lines, later blocks checked on Arrow columns (`io._raggedbinding`).

A block the bound plan accepts gives the report the line path gives; a block holding anything
the bound plan did not bind (a float action, a NaN, a logprob longer than the action, ...) goes
line by line. `GYRE_FAST_PATHS=0` is the reference.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fast_file import both_ways, small_blocks  # noqa: F401  (a fixture, used by name)

import gyre_contract.io._raggedbinding as raggedbinding
from gyre_contract.core._models import RolloutStep
from gyre_contract.io._validation import validate_file

pytest.importorskip("pyarrow")


def token_record(i: int, prompt: int = 5, tokens: int = 4, **changes: Any) -> dict[str, Any]:
    """A one-turn completion: its own episode, step 0, terminated."""
    record = {"observation": {"token_ids": [(i * 7 + k) % 50000 for k in range(prompt)]},
              "action": [(i * 13 + k) % 50000 for k in range(tokens)],
              "logprob": [-0.125 * (k + 1) for k in range(tokens)],
              "ref_logprob": [-0.25 * (k + 1) for k in range(tokens)],
              "reward": float(i % 2), "step": 0, "episode_id": f"e{i}", "terminated": True,
              "truncated": False, "policy_version": 0, "group_id": f"g{i // 4}"}
    record.update(changes)
    return record


def token_lines(n: int = 120) -> list[dict[str, Any]]:
    return [token_record(i, prompt=3 + i % 5, tokens=2 + i % 7) for i in range(n)]


def turns(records: list[dict[str, Any]], at: int, lengths: list[int]) -> list[dict[str, Any]]:
    """Records with a multi-turn episode in place of `records[at]`: one step per length."""
    steps = [token_record(at, tokens=n, step=t, episode_id=f"turns{at}",
                          terminated=t == len(lengths) - 1) for t, n in enumerate(lengths)]
    return records[:at] + steps + records[at + 1:]


def write(path: Any, records: list[dict[str, Any]], raw: dict[int, bytes] | None = None) -> Any:
    lines = [orjson.dumps(r) for r in records]
    for at, line in (raw or {}).items():
        lines[at] = line
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


LATE = 90
"""A line beyond the first blocks (`small_blocks`: a few lines a block)."""


def _at(at: int, **changes: Any) -> Any:
    def change(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = list(records)
        out[at] = {**out[at], **changes}
        return out
    return change


def _drop(at: int, key: str) -> Any:
    def change(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = list(records)
        out[at] = {k: v for k, v in out[at].items() if k != key}
        return out
    return change


BREAKS = {
    "clean": lambda r: r,
    "float in action": _at(LATE, action=[1, 2.5, 3]),
    "float action": _at(LATE, action=[1.0, 2.0], logprob=[-0.5, -0.5], ref_logprob=[-1.0, -1.0]),
    "logprob longer than action": _at(LATE, action=[1, 2], logprob=[-0.5, -0.5, -0.5]),
    "positive logprob": _at(LATE, logprob=[0.5] * 8),
    "int beyond 2**24 in a float field": _at(LATE, action=[1, 2],
                                             logprob=[-(2**24 + 1), -0.5]),
    "missing required field": _drop(LATE, "reward"),
    "unknown field": _at(LATE, rewrad=1.0),
    "info": _at(LATE, info={"k": 1}),
    "empty action": _at(LATE, action=[], logprob=[], ref_logprob=[]),
    "float token ids": _at(LATE, observation={"token_ids": [1.5, 2.0]}),
    "another modality": _at(LATE, observation={"token_ids": [1, 2], "text": "hi"}),
    "tensor observation": _at(LATE, observation=[0.5, 0.25]),
    "scalar logprob": _at(LATE, logprob=-0.5),
    "next observation": _at(LATE, next_observation={"token_ids": [1]}),
    "int and float actions across blocks": lambda r: [
        {**x, "action": [float(a) + 0.5 for a in x["action"]]} if i >= 60 else x
        for i, x in enumerate(r)],
    "turns of one length": lambda r: turns(r, LATE, [3, 3, 3]),
    "turns of varying length": lambda r: turns(r, LATE, [3, 5, 4]),
    "turns with and without logprob": lambda r: turns(_drop(LATE, "logprob")(r), LATE, [3, 3]),
    "episode open across blocks": lambda r: turns(r, LATE, [3] * 30),
    "duplicate episode": _at(LATE, episode_id="e3"),
    "no ref_logprob in later blocks": lambda r: [
        {k: v for k, v in x.items() if k != "ref_logprob" or i < 60}
        for i, x in enumerate(turns(r, LATE, [3, 3, 3]))],
    "longer turns blocks later": lambda r: turns(r, LATE, [3] * 10 + [5] * 11),
    "next observation then a tensor blocks later": lambda r: next_observations(
        turns(r, LATE, [3] * 21), LATE, 20),
}


def next_observations(records: list[dict[str, Any]], at: int, steps: int
                      ) -> list[dict[str, Any]]:
    """Each step of the episode at `at` with a next observation of modalities, the last one
    (`steps` later, in another block) a tensor: a structure change the line path reports."""
    out = list(records)
    for t in range(steps):
        out[at + t] = {**out[at + t], "next_observation": {"token_ids": [1, 2]}}
    out[at + steps] = {**out[at + steps], "next_observation": [0.5]}
    return out
RAW_BREAKS = {
    "NaN logprob": (LATE, b'{"observation":{"token_ids":[1,2]},"action":[1,2],'
                          b'"logprob":[NaN,-0.5],"reward":0.0,"step":0,"episode_id":"x",'
                          b'"terminated":true,"truncated":false,"policy_version":0}'),
    "null logprob": (LATE, b'{"observation":{"token_ids":[1,2]},"action":[1,2],'
                           b'"logprob":null,"reward":0.0,"step":0,"episode_id":"x",'
                           b'"terminated":true,"truncated":false,"policy_version":0}'),
    "huge token id": (LATE, b'{"observation":{"token_ids":[1,2]},"action":[1,'
                            b'99999999999999999999],"reward":0.0,"step":0,"episode_id":"x",'
                            b'"terminated":true,"truncated":false,"policy_version":0}'),
}


def reports(path: Any, monkeypatch: Any, complete: bool = False) -> tuple[Any, Any]:
    return both_ways(monkeypatch, lambda: validate_file(
        path, RolloutStep, require_complete=complete).to_dict())


@pytest.fixture
def counted(monkeypatch):
    """How many blocks the bound ragged plan checked, and how many it accepted."""
    counts = {"checked": 0, "accepted": 0}
    check = raggedbinding.BoundRaggedPlan.check

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        block = check(self, *args, **kwargs)
        counts["checked"] += 1
        counts["accepted"] += block is not None
        return block

    monkeypatch.setattr(raggedbinding.BoundRaggedPlan, "check", counting)
    return counts


def test_a_clean_token_file_takes_the_ragged_columns(tmp_path, monkeypatch, counted):
    path = write(tmp_path / "t.jsonl", token_lines(2000))
    bulk, normal = reports(path, monkeypatch)
    assert bulk == normal
    assert bulk["holds"]
    assert counted["checked"] >= 1 and counted["accepted"] == counted["checked"]


@pytest.mark.parametrize("name", sorted(BREAKS))
@pytest.mark.parametrize("complete", [False, True])
@pytest.mark.usefixtures("small_blocks")
def test_a_break_after_the_first_block_gives_the_same_report(
        tmp_path, monkeypatch, counted, name, complete):
    path = write(tmp_path / "t.jsonl", BREAKS[name](token_lines()))
    bulk, normal = reports(path, monkeypatch, complete)
    assert bulk == normal
    assert counted["accepted"] > 0  # the bound plan took the clean blocks


@pytest.mark.parametrize("name", sorted(RAW_BREAKS))
@pytest.mark.usefixtures("small_blocks")
def test_a_raw_break_gives_the_same_report(tmp_path, monkeypatch, counted, name):
    at, line = RAW_BREAKS[name]
    path = write(tmp_path / "t.jsonl", token_lines(), {at: line})
    bulk, normal = reports(path, monkeypatch)
    assert bulk == normal
    assert counted["accepted"] > 0


@pytest.mark.usefixtures("small_blocks")
def test_varying_turns_are_reported_on_their_line(tmp_path, monkeypatch, counted):
    path = write(tmp_path / "t.jsonl", turns(token_lines(), LATE, [3, 5]))
    bulk, normal = reports(path, monkeypatch)
    assert bulk == normal and not bulk["holds"]


_token = st.integers(0, 2**31)
_logprob = st.one_of(st.floats(-20, 0, width=32), st.just(0.5), st.just(float(-(2**24 + 3))))


@st.composite
def token_files(draw: Any) -> list[dict[str, Any]]:
    """Small token files: mostly clean one-turn completions, sometimes a subtle break."""
    records = []
    for i in range(draw(st.integers(1, 40))):
        tokens = draw(st.integers(1, 4))
        record = token_record(i, prompt=draw(st.integers(1, 3)), tokens=tokens)
        kind = draw(st.sampled_from(["clean"] * 12 + ["float", "long", "sign", "big", "drop",
                                                       "turn", "empty"]))
        if kind == "float":
            record["action"] = [draw(st.floats(-2, 2, width=32))] * tokens
        elif kind == "long":
            record["logprob"] = [-0.5] * (tokens + 1)
        elif kind == "sign":
            record["logprob"] = [draw(_logprob) for _ in range(tokens)]
        elif kind == "big":
            record["action"] = [draw(_token) for _ in range(tokens)]
            record["ref_logprob"] = [float(draw(_token)) * -1 for _ in range(tokens)]
        elif kind == "drop":
            record.pop(draw(st.sampled_from(["logprob", "ref_logprob", "reward", "group_id"])))
        elif kind == "empty":
            record["observation"] = {"token_ids": []}
        elif kind == "turn" and records:
            previous = records[-1]
            previous["terminated"] = False
            record.update(episode_id=previous["episode_id"], step=previous["step"] + 1)
        records.append(record)
    return records


@pytest.mark.usefixtures("small_blocks")
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=token_files(), complete=st.booleans())
def test_random_token_files_give_the_same_report(tmp_path, monkeypatch, records, complete):
    path = write(tmp_path / "t.jsonl", records)
    bulk, normal = reports(path, monkeypatch, complete)
    assert bulk == normal
