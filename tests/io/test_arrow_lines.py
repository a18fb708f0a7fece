"""JSON Lines read into Arrow columns (`arrowlines`) = the line path, and it steps aside.

pyarrow's JSON reader takes more than JSON Lines allows (a blank line, a byte-order mark, two
objects on a line, NaN) and cannot say some things the line path reports (a `null` beside an
absent field, `16777217` beside `16777217.0`, a key written twice it sometimes keeps): a chunk
holding any of them must step aside, so that the report is the line path's, problem for problem
and line for line. Each case here is a clean file with one such line among clean ones; the
reader must take the clean file (so the case is not idle) and refuse the broken one, and the
report with the fast paths on must equal the report with them off.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
import test_ragged_columns as ragged_cases
from fastpaths import report_both_ways
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyre_contract.core._models import RolloutStep
from gyre_contract.io import _arrowlines as arrowlines
from gyre_contract.io import _ducklines as ducklines
from gyre_contract.pinned import CartPoleStep, LLMStep

pytest.importorskip("pyarrow")


pytestmark = pytest.mark.usefixtures("fast_paths_on")
"""These tests are about the fast paths: on here even when CI runs with GYRE_FAST_PATHS=0."""


@pytest.fixture(autouse=True)
def pyarrow_alone(monkeypatch) -> None:
    """These cases are pyarrow's reader's: DuckDB's (extra `fast`, `ducklines`), which reads a
    chunk before it, is left out (its own cases: tests/io/test_ducklines.py)."""
    monkeypatch.setattr(ducklines, "usable", lambda: False)


@pytest.fixture
def taken(monkeypatch) -> list[bool]:
    """Per chunk the Arrow reader was given: whether it took it (checked on columns)."""
    found: list[bool] = []
    decode = arrowlines.decode_chunk

    def spy(*args: Any, **kwargs: Any) -> Any:
        block = decode(*args, **kwargs)
        found.append(block is not None)
        return block

    monkeypatch.setattr(arrowlines, "decode_chunk", spy)
    return found


def step(t: int, eid: str = "ep-0", last: int = 79, **fields: Any) -> dict[str, Any]:
    return {"observation": [0.25 * t, -0.5, 0.25, 1.5], "action": t % 2, "logprob": -0.69,
            "value": 0.5, "reward": 1.0, "step": t, "episode_id": eid,
            "terminated": t == last, "truncated": False, "policy_version": 0, **fields}


CLEAN = [orjson.dumps(step(t)) for t in range(80)]
AT = 70
"""Where the broken line goes: after the lines an unpinned model is bound from (`binding`)."""


def write(tmp_path: Path, lines: list[bytes], name: str = "r.jsonl", end: bytes = b"\n") -> Path:
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines) + end)
    return path


def with_line(bad: bytes, at: int = AT) -> list[bytes]:
    return [*CLEAN[:at], bad, *CLEAN[at + 1:]]


def as_text(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record)


class Edited(bytes):
    """`bytes.replace` that must change something (a case that edits nothing tests nothing)."""

    def replace(self, old: bytes, new: bytes, count: int = -1) -> bytes:  # type: ignore[override]
        assert old in self, (old, bytes(self))
        return bytes.replace(self, old, new, count)


def line(t: int = AT, **fields: Any) -> Edited:
    return Edited(as_text(step(t, **fields)))


CASES = {
    "duplicate key": line()[:-1] + b',"reward":2.0}',
    "duplicate key, same value": line().replace(b'"action":0', b'"action":0,"action":0'),
    "NaN literal": line().replace(b'"reward":1.0', b'"reward":NaN'),
    "Infinity literal": line().replace(b'"value":0.5', b'"value":-Infinity'),
    "NaN in a list": line().replace(b"[17.5,", b"[NaN,"),
    "integer beyond float32's exact range": line().replace(b'"reward":1.0', b'"reward":16777217'),
    "integer beyond 2**53": line().replace(b'"value":0.5', b'"value":9007199254740993'),
    "float beyond float32's range": line().replace(b'"value":0.5', b'"value":1e39'),
    "integer beyond 64 bits": line().replace(b'"step":70', b'"step":18446744073709551616'),
    "null in an optional field": line().replace(b'"value":0.5', b'"value":null'),
    "null in a required field": line().replace(b'"reward":1.0', b'"reward":null'),
    "null in a list": line().replace(b"[17.5,", b"[null,"),
    "missing required field": as_text({k: v for k, v in step(AT).items() if k != "reward"}),
    "blank line": b"",
    "whitespace line": b"  \t",
    "two objects on a line": line() + line(AT + 1),
    "leading space": b" " + line(),
    "trailing space": line() + b" ",
    "byte-order mark": b"\xef\xbb\xbf" + line(),
    "CR line end": line() + b"\r",
    "not UTF-8": line(eid="ep-\xff").replace("ep-\xff".encode(), b"ep-\xff"),
    "a colon in an id, a null beside it": line(eid="ep:0").replace(b'"value":0.5',
                                                                   b'"value":null'),
    "an escaped colon in an id, a null beside it": line(eid="ep-0").replace(
        b'"ep-0"', b'"ep\\u003a0"').replace(b'"value":0.5', b'"value":null'),
    "an escaped colon (upper case) in an id, a null beside it": line(eid="ep-0").replace(
        b'"ep-0"', b'"ep\\u003A0"').replace(b'"reward":1.0', b'"reward":null'),
    "a colon in an id, a key twice": line(eid="ep:0").replace(b'"action":0',
                                                             b'"action":0,"action":0'),
    "float in an integer field": line().replace(b'"step":70', b'"step":70.0'),
    "bool in a float field": line().replace(b'"reward":1.0', b'"reward":true'),
    "string in a float field": line().replace(b'"reward":1.0', b'"reward":"1"'),
    "unknown key": line(trunctaed=True),
    "info": line(info={"seed": 3}),
    "empty id": line(eid=""),
    "short observation": line().replace(b"[17.5,-0.5,", b"[17.5,"),
    "positive logprob": line().replace(b'"logprob":-0.69', b'"logprob":0.5'),
    "not an object": b"[1, 2]",
    "not JSON": b'{"step": 3,',
}


@pytest.mark.parametrize("model", [RolloutStep, CartPoleStep], ids=["unpinned", "pinned"])
def test_the_reader_takes_the_clean_file(tmp_path, model, taken):
    assert report_both_ways(write(tmp_path, CLEAN), model)["holds"]
    assert taken == [True]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("model", [RolloutStep, CartPoleStep], ids=["unpinned", "pinned"])
def test_a_chunk_it_cannot_read_exactly_steps_aside(tmp_path, model, case, taken):
    report_both_ways(write(tmp_path, with_line(CASES[case])), model)
    assert taken == [False], case  # the line path's report, every problem on its line


TAKEN = {
    "an id with a colon": b"ep:0",
    "an id of colons, quotes, braces and commas": b'ep:{\\"a\\": [1, 2]}: ,:',
    "an id with an escaped backslash and a colon": b"ep\\\\:0",
    "an id with an escaped colon": b"ep\\u003a0",
}
"""Episode ids, as written between their quotes, that hold `:` inside strings: each colon in
the bytes is in one of the column's string values, counted there (`arrowlines.string_colons`);
an escaped one is in the value only, and there is no other colon to stand for."""


@pytest.mark.parametrize("case", list(TAKEN))
@pytest.mark.parametrize("model", [RolloutStep, CartPoleStep], ids=["unpinned", "pinned"])
def test_colons_inside_strings_are_read_on_columns(tmp_path, model, case, taken):
    lines = [Edited(line(t)).replace(b'"ep-0"', b'"' + TAKEN[case] + b'"') for t in range(80)]
    assert report_both_ways(write(tmp_path, lines), model)["holds"]
    assert taken == [True], case


def test_an_escaped_colon_is_what_could_hide_a_null(tmp_path, monkeypatch, taken):
    """`\\u003a` is a colon in the value and none in the bytes: counted from the values, it would
    stand for the colon of a `null` no column holds. Without the guard the chunk is taken and
    the null goes unreported; with it, the chunk steps aside and the line path reports it."""
    from fastpaths import fast_paths

    from gyre_contract import validate_file

    lines = [line(t, eid="ep:0") for t in range(80)]  # the same id, escaped on one line:
    lines[AT] = line(AT, eid="ep:0").replace(b'"ep:0"', b'"ep\\u003a0"').replace(
        b'"value":0.5', b'"value":null')  # as many colons as if it had its own and no null
    path = write(tmp_path, lines)
    found = report_both_ways(path, RolloutStep)  # the fast paths' report is the line path's
    assert [g["message"] for g in found["problems"]["groups"]] == ["null is not allowed"]
    assert taken == [False]  # with the guard: stepped aside
    monkeypatch.setattr(arrowlines, "_ESCAPED_COLON", re.compile(b"(?!)"))  # never matches
    with fast_paths(True):
        fast = validate_file(path, RolloutStep).to_dict()
    assert taken[-1] is True and fast["holds"]  # without it: the null is not seen


RAGGED = [ragged_cases.line(i, prompt=3 + i % 5, response=1 + i % 7) for i in range(80)]


def test_completions_whose_text_holds_colons_and_escapes(tmp_path, taken):
    """An LLM prompt's text ("Question 3:\\n..."): colons and escaped newlines, read on columns."""
    lines = []
    for i, clean in enumerate(RAGGED):
        record = json.loads(clean)
        record["observation"]["text"] = f"Question {i}:\nWhat is {i}:{i + 1}? \"a:b\"\t"
        lines.append(orjson.dumps(record))
    assert report_both_ways(write(tmp_path, lines), LLMStep)["holds"]
    assert taken == [True]
    hidden = lines[AT].replace(b'"reward":', b'"value":null,"reward":')
    report_both_ways(write(tmp_path, [*lines[:AT], hidden, *lines[AT + 1:]]), LLMStep)
    assert taken[-1] is False


def test_a_file_without_its_last_newline(tmp_path, taken):
    """The bytes after the last newline are the line path's (a record, or a truncated line)."""
    for end, holds in ((b"", True), (b"\n" + CLEAN[0][:20], False)):
        found = report_both_ways(write(tmp_path, CLEAN, end=end), RolloutStep)
        assert found["holds"] is holds
    assert taken and all(taken)


def test_the_next_chunk_is_read_after_one_steps_aside(tmp_path, monkeypatch, taken):
    """Small chunks: the broken one steps aside, the others are read into columns."""
    from gyre_contract.io import _lines as lines

    monkeypatch.setattr(lines, "CHUNK_BYTES", 600)
    monkeypatch.setattr(arrowlines, "CHUNK_FACTOR", 1)
    records = [as_text(step(t, eid=f"ep-{e}", last=3)) for e in range(8) for t in range(4)]
    records[9] = records[9].replace(b'"value":0.5', b'"value":null')
    found = report_both_ways(write(tmp_path, records), RolloutStep)
    assert [p["line"] for g in found["problems"]["groups"] for p in g["examples"]] == [10]
    assert False in taken and taken.count(True) >= 2


# -- the bytes and the columns give one verdict: a hypothesis differential ---------------------

SPECIAL = [b"NaN", b"Infinity", b"-Infinity", b"null", b"16777217", b"9007199254740993",
           b"1e39", b"true", b'"x"', b"[]", b"1", b"-0", b"0.1", b"1E2"]
"""Literals written in place of a value: the reader reads some, the line path refuses some."""


@st.composite
def edited_files(draw: Any) -> list[bytes]:
    """Clean CartPole lines (18 episodes), a few of the last ones edited as text (after the lines
    an unpinned model is bound from): a value replaced by a special literal, a null or a
    duplicate key inserted, a blank line, a BOM, a space, a key added or dropped, a colon put
    in an id (as itself or escaped)."""
    lines = [as_text(step(t, eid=f"ep-{e}", last=3)) for e in range(18) for t in range(4)]
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(AT - 6, len(lines) - 1))
        line = lines[i]
        edit = draw(st.sampled_from(["value", "dup", "blank", "bom", "space", "key", "drop",
                                     "colon"]))
        if edit == "value":
            key = draw(st.sampled_from([b'"reward":', b'"value":', b'"step":', b'"action":',
                                        b'"logprob":', b'"terminated":']))
            if key not in line:
                continue
            start = line.index(key) + len(key)
            end = min(j for j in (line.find(b",", start), line.find(b"}", start)) if j >= 0)
            line = line[:start] + draw(st.sampled_from(SPECIAL)) + line[end:]
        elif edit == "colon":  # in the id, as itself or escaped (the same value)
            line = line.replace(b'"ep-', draw(st.sampled_from(
                [b'"ep:', b'"ep\\u003a', b'"ep\\u003A', b'"e:p:', b'"ep\\u002d'])), 1)
        elif edit == "dup":
            line = line[:-1] + b',"reward":0.5}'
        elif edit == "blank":
            line = draw(st.sampled_from([b"", b" ", b"\r"]))
        elif edit == "bom":
            line = b"\xef\xbb\xbf" + line
        elif edit == "space":
            line = line.replace(b",", b", ", 1)
        elif edit == "key":
            line = line[:-1] + draw(st.sampled_from([b',"next_value":1.5}', b',"group_id":"g"}',
                                                     b',"entropy":null}', b',"x":1}']))
        else:
            record = json.loads(line)
            record.pop(draw(st.sampled_from(sorted(record))))
            line = as_text(record)
        lines[i] = line
    return lines


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lines=edited_files(), pinned=st.booleans())
def test_bytes_edited_anywhere_get_the_line_paths_report(tmp_path, lines, pinned):
    report_both_ways(write(tmp_path, lines), CartPoleStep if pinned else RolloutStep)


@pytest.mark.parametrize(("values", "taken"), [
    ([0.5, -16777215.0], True),          # within the range where float32 holds every integer
    ([16777216.0], False), ([-16777216.0], False),  # at its edge: 2**24 + 1 reads as 2**24
    ([-0.5, float("nan")], False), ([float("-inf"), 0.5], False), ([0.5, float("inf")], False),
    ([], True),
])
def test_floats_read_as_float64_narrow_only_when_the_line_path_reads_them_alike(values, taken):
    import numpy as np

    from gyre_contract.io._columnrules import narrowed

    got = narrowed(np.array(values, np.float64), np.dtype(np.float32))
    assert (got is not None) is taken
    if got is not None:
        assert got.dtype == np.float32 and got.tolist() == values
