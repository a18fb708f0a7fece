"""JSON Lines read into columns by DuckDB (`ducklines`) = the line path, and it steps aside.

DuckDB casts what the contract refuses (a string `"17"` into an integer, `2.5` into an integer,
a number into a bool, `true` into a number, a string into a float, string elements into a list
of floats), keeps the first of two equal keys, ignores unknown keys and a trailing comma, and
reads `NaN`, `inf`, `Infinity`, `1e999`. Each case here is a clean file with one such line
among clean ones: DuckDB's reading of the chunk must not be taken (checked on columns) when the
line path refuses the record, and the report with the fast paths on must equal the report with
them off, problem for problem and line for line.
"""

from __future__ import annotations

import decimal
import json
import math
import random
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import test_arrow_lines as arrow_cases
import test_ragged_columns as ragged_cases
from fastpaths import report_both_ways
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyre_contract.core._errors import ContractError
from gyre_contract.core._models import RolloutStep
from gyre_contract.core._validate import validate_step
from gyre_contract.io import _arrowlines as arrowlines
from gyre_contract.io import _ducklines as ducklines
from gyre_contract.io import _lines as line_reader
from gyre_contract.io._fastfile import bulk_plan
from gyre_contract.io._lines import Chunk
from gyre_contract.io._raggedcols import ragged_plan
from gyre_contract.pinned import CartPoleStep, LLMStep

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

pytestmark = pytest.mark.usefixtures("fast_paths_on")
"""These tests are about the fast paths: on here even when CI runs with GYRE_FAST_PATHS=0."""

MODELS = pytest.mark.parametrize("model", [RolloutStep, CartPoleStep], ids=["unpinned", "pinned"])
CLEAN, AT, step, write = arrow_cases.CLEAN, arrow_cases.AT, arrow_cases.step, arrow_cases.write


@pytest.fixture(autouse=True)
def any_size(monkeypatch) -> None:
    """Every file here is read by DuckDB, however small (`ducklines.chosen`)."""
    monkeypatch.setattr(ducklines, "MIN_FILE_BYTES", 0)


@pytest.fixture
def taken(monkeypatch) -> list[bool]:
    """Per chunk DuckDB was given: whether its columns pass the column checks (`decode_chunk`;
    the episode rules come after, on any path)."""
    found: list[bool] = []
    read = ducklines.DuckLines.read

    def spy(self: ducklines.DuckLines, chunk: Any) -> Any:
        table = read(self, chunk)
        found.append(table is not None
                     and arrowlines.decode_chunk(self.plan, table) is not None)
        return table

    monkeypatch.setattr(ducklines.DuckLines, "read", spy)
    return found


def refused(line: bytes, model: type) -> bool:
    """Whether the line path refuses the record on `line` on its own (JSON or record rules)."""
    if b"\\" in line or line.count(b",}") or line.count(b",]"):
        return True  # not in these cases' lines unless broken on purpose
    try:
        record = orjson.loads(bytes(line))
    except orjson.JSONDecodeError:
        return True
    try:
        validate_step(record, model)
    except ContractError:
        return True
    return False


def put(field: bytes, literal: bytes, base: bytes | None = None) -> bytes:
    """Line AT with the value of `field` written as `literal` (text, whatever its JSON kind)."""
    line = base if base is not None else CLEAN[AT]
    key = b'"' + field + b'":'
    start = line.index(key) + len(key)
    if line[start:start + 1] == b"[":
        end = line.index(b"]", start) + 1
    else:
        end = min(j for j in (line.find(b",", start), line.find(b"}", start)) if j >= 0)
    return line[:start] + literal + line[end:]


TOKENS = {
    "int": b"2", "minus zero": b"-0", "float": b"2.5", "integral float": b"2.0",
    "exponent": b"1e2", "EXPONENT": b"1E2", "beyond int64": b"9223372036854775808",
    "beyond uint64": b"18446744073709551616", "twenty digits": b"99999999999999999999",
    "NaN": b"NaN", "nan": b"nan", "Infinity": b"Infinity", "-Infinity": b"-Infinity",
    "inf": b"inf", "1e999": b"1e999", "true": b"true", "false": b"false",
    "string int": b'"17"', "string float": b'"0.5"', "string true": b'"true"', "string": b'"x"',
    "string list": b'"[1]"', "string colon": b'"a:b"', "null": b"null", "list": b"[1]",
    "empty list": b"[]", "nested list": b"[[1]]", "object": b'{"a":1}', "empty object": b"{}",
}
"""Every kind of JSON token (and the literals DuckDB reads that JSON has not)."""

COLUMNS = {"float": b"reward", "optional float": b"value", "int": b"action",
           "int (episode)": b"policy_version", "bool": b"terminated", "string": b"episode_id",
           "list of float": b"observation"}
"""A field of each column kind of a CartPole plan."""


def cell_cases() -> dict[str, bytes]:
    cases = {f"{token} in {column}": put(field, literal)
             for column, field in COLUMNS.items() for token, literal in TOKENS.items()}
    for token, literal in TOKENS.items():  # an element of the list of floats
        cases[f"{token} in a list of floats"] = put(
            b"observation", b"[" + literal + b",-0.5,0.25,1.5]")
    return cases


LENIENT = {
    "duplicate key, DuckDB keeps the first": CLEAN[AT][:-1] + b',"reward":7.0}',
    "duplicate key, same value": put(b"action", b'0,"action":0'),
    "unknown key": CLEAN[AT][:-1] + b',"rewards":1.0}',
    "key in another case": CLEAN[AT][:-1] + b',"Reward":1.0}',
    "trailing comma in the object": CLEAN[AT][:-1] + b",}",
    "trailing comma with space": CLEAN[AT][:-1] + b", }",
    "trailing comma in a list": put(b"observation", b"[0.5,-0.5,0.25,1.5,]"),
    "empty object line": b"{}",
    "escaped quote in a string": put(b"episode_id", b'"ep\\"0"'),
    "escaped key": CLEAN[AT].replace(b'"reward"', b'"rew\\u0061rd"'),
    "unicode escape in a string": put(b"episode_id", b'"ep-\\u0030"'),
    "string with a colon and a null": put(b"value", b"null", put(b"episode_id", b'"ep:0"')),
    "number in a bool and true in a float": put(b"terminated", b"0", put(b"reward", b"true")),
    "number in a string and a string in an int": put(b"episode_id", b"17",
                                                     put(b"action", b'"0"')),
    "longer number in a string and a string in an int": put(b"episode_id", b"12345",
                                                            put(b"action", b'"0"')),
    "string true and number in bool": put(b"terminated", b"1",
                                          put(b"episode_id", b'"true"')),
    "true inside a string beside a number in a bool": put(b"truncated", b"0",
                                                          put(b"episode_id", b'"ep-true"')),
    "comma inside a string beside a trailing comma": put(b"episode_id", b'"e,p"')[:-1] + b",}",
    "control character in a string": put(b"episode_id", b'"ep\x01"'),
    "tab in a string": put(b"episode_id", b'"ep\t0"'),
    "NUL between tokens": CLEAN[AT].replace(b",", b",\x00", 1),
    "form feed between tokens": CLEAN[AT].replace(b",", b",\x0c", 1),
    "comment": CLEAN[AT][:-1] + b"/* c */}",
    "single quotes": CLEAN[AT].replace(b'"reward"', b"'reward'"),
    "leading zero": put(b"reward", b"01"),
    "plus sign": put(b"reward", b"+1"),
    "bare decimal point": put(b"reward", b".5"),
    "hex": put(b"reward", b"0x1"),
}
"""What DuckDB (yyjson) reads that JSON Lines or the contract refuse, and mixes of two that
cancel each other in a single byte count."""

ACCEPTED = {
    "spaces between tokens": CLEAN[AT].replace(b":", b": ").replace(b",", b" , "),
    "tab and CR between tokens": CLEAN[AT].replace(b",", b",\t\r", 2),
    "exponent in a float": put(b"reward", b"1e0"),
    "int in a float": put(b"reward", b"1"),
    "minus zero in an int": put(b"action", b"-0"),
}
"""Lines the line path takes: DuckDB's reading of them should be taken too (not idle)."""

CASES = {**cell_cases(), **LENIENT, **ACCEPTED,
         **{f"arrowlines: {k}": v for k, v in arrow_cases.CASES.items()}}


@MODELS
def test_duckdb_takes_the_clean_file(tmp_path, model, taken):
    assert report_both_ways(write(tmp_path, CLEAN), model)["holds"]
    assert taken == [True]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("model", [pytest.param(RolloutStep, marks=pytest.mark.slow),
                                   CartPoleStep], ids=["unpinned", "pinned"])
def test_a_chunk_duckdb_cannot_read_exactly_is_not_taken(tmp_path, model, case, taken):
    line = CASES[case]
    report = report_both_ways(write(tmp_path, arrow_cases.with_line(line)), model)
    assert len(taken) <= 1, case  # one chunk (none: the file is read without columns)
    if refused(line, model) or case in LENIENT:
        assert taken == [False] or not taken, case
    if case in ACCEPTED:
        assert taken == [True] and report["holds"], case


@pytest.mark.parametrize("eid", ["ep/0-é", "ep:true,false[{", "17", "null", "t", "[1]", "f:"])
@MODELS
def test_ids_holding_counted_bytes_are_taken(tmp_path, model, eid, taken):
    """An id holding the bytes the guards count (`:` `,` `[` `{` `t` `f`), a digit first, or
    non-ASCII: the counts leave out the bytes of each string value, so the chunk is taken."""
    lines = [orjson.dumps(step(t, eid=eid)) for t in range(80)]
    assert report_both_ways(write(tmp_path, lines), model)["holds"]
    assert taken == [True]


@pytest.mark.parametrize(("old", "new"), [
    (b'"reward":1.0', b'"reward":[1.0]'), (b'"reward":1.0', b'"reward":{}'),
    (b'"value":0.5', b'"value":[0.5,{}]'), (b"[17.5,", b"[[17.5],"), (b"[17.5,", b"[{},"),
    (b'"reward":1.0', b'"reward":1.0,'), (b'"action":0', b'"action":true'),
])
def test_the_bytes_refuse_what_a_more_lenient_duckdb_would_read(monkeypatch, old, new):
    """DuckDB makes a null of an array or object where a scalar is (then the `"` count refuses
    the chunk) and errors on a list nested deeper than its type: a DuckDB that read `[1.0]` or
    `{}` as a number, or a nested list as its element, gives the clean line's columns, and the
    `[`, `{`, `,`, `t` counts refuse the bytes all the same."""
    reader = ducklines.DuckLines(bulk_plan(CartPoleStep))
    tables: list[Any] = []
    columns = ducklines.DuckLines._columns

    def keep(self: ducklines.DuckLines, table: Any, codes: np.ndarray, n: int) -> Any:
        tables.append(table)
        return columns(self, table, codes, n)

    monkeypatch.setattr(ducklines.DuckLines, "_columns", keep)
    assert reader.read(Chunk(b"\n".join(CLEAN) + b"\n")) is not None
    edited = b"\n".join(arrow_cases.with_line(CLEAN[AT].replace(old, new))) + b"\n"
    assert columns(reader, tables[-1], np.frombuffer(edited, np.uint8), len(CLEAN)) is None


@pytest.mark.parametrize("path", sorted((Path(__file__).parent.parent / "data" / "rollouts")
                                        .glob("*.jsonl")), ids=lambda p: p.name)
def test_the_malformed_files_get_the_line_paths_report(path):
    report_both_ways(path, RolloutStep)


def test_integer_and_bool_lists(tmp_path, taken):
    """An unpinned model bound to a list action (integers) and a loss mask (bools): lists read
    as text, cast or compared; any other token among them is not taken."""
    records = [step(t, last=79, action=[t % 3, 1], loss_mask=[True, t % 2 == 0])
               for t in range(80)]
    lines = [orjson.dumps(r) for r in records]
    assert report_both_ways(write(tmp_path, lines), RolloutStep)["holds"]
    assert taken == [True]
    valid = {b"action": (b"1", b"0", b"-0"), b"loss_mask": (b"true", b"false")}
    for field, good in ((b"action", b"1"), (b"loss_mask", b"true")):
        for bad in (b"2.0", b"2.5", b'"2"', b'"true"', b"true", b"false", b"1", b"0", b"null",
                    b"[2]", b"{}", b"1e2", b"NaN", b"99999999999999999999", b"-0"):
            if bad in valid[field]:
                continue
            taken.clear()
            edited = put(field, b"[" + bad + b"," + good + b"]", lines[AT])
            report_both_ways(write(tmp_path, [*lines[:AT], edited, *lines[AT + 1:]]),
                             RolloutStep)
            assert taken == [False], (field, bad)
    taken.clear()
    edited = put(b"action", b"[-0,1]", lines[AT])  # -0 is the integer 0 to the line path too
    assert report_both_ways(write(tmp_path, [*lines[:AT], edited, *lines[AT + 1:]]),
                            RolloutStep)["holds"]
    assert taken == [True]


def test_many_chunks_on_two_threads(tmp_path, monkeypatch, taken):
    """Small chunks, read two at a time (each thread its own DuckDB cursor and view of its
    chunk): every clean chunk taken, the broken one not, the line path's report."""
    from gyre_contract.io import _lines as lines

    monkeypatch.setattr(lines, "CHUNK_BYTES", 600)
    monkeypatch.setattr(ducklines, "CHUNK_FACTOR", 1)
    records = [orjson.dumps(step(t, eid=f"ep-{e}", last=3)) for e in range(40) for t in range(4)]
    records[101] = put(b"terminated", b"0", records[101])
    found = report_both_ways(write(tmp_path, records), RolloutStep)
    assert [p["line"] for g in found["problems"]["groups"] for p in g["examples"]] == [102]
    assert taken.count(False) == 1 and taken.count(True) >= 30


# -- random edits of valid CartPole lines: a hypothesis differential ---------------------------

LITERALS = [b"NaN", b"Infinity", b"-Infinity", b"inf", b"nan", b"1e999", b"null", b"16777217",
            b"9007199254740993", b"9223372036854775808", b"18446744073709551616", b"2.0",
            b"1e2", b"-0", b"true", b"false", b"[]", b"[1]", b"{}", b'{"a":1}', b'"17"',
            b'"0.5"', b'"true"', b'"a:b"', b'"a\\"b"', b'"a\\\\b"', b'"x,y"', b'"["']
FIELDS = [b"observation", b"action", b"logprob", b"value", b"reward", b"step", b"episode_id",
          b"terminated", b"truncated", b"policy_version"]


@st.composite
def mutated_files(draw: Any) -> tuple[list[bytes], list[int]]:
    """Clean CartPole lines (18 episodes of 4 steps), a few edited as text: a value's JSON kind
    swapped (a number quoted, a string or bool unquoted), a special literal, a key added,
    written twice or dropped, a trailing comma, an id with `:` `"` `\\` or `true`."""
    lines = [orjson.dumps(step(t, eid=f"ep-{e}", last=3)) for e in range(18) for t in range(4)]
    edited = []
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(AT - 6, len(lines) - 1))
        line = lines[i]
        field = draw(st.sampled_from(FIELDS))
        key = b'"' + field + b'":'
        if key not in line:
            continue
        edit = draw(st.sampled_from(["literal", "quote", "unquote", "twice", "drop", "add",
                                     "comma", "id"]))
        start = line.index(key) + len(key)
        value = line[start:line.index(b"]", start) + 1] if line[start:start + 1] == b"[" \
            else line[start:min(j for j in (line.find(b",", start), line.find(b"}", start))
                                if j >= 0)]
        if edit == "literal":
            line = put(field, draw(st.sampled_from(LITERALS)), line)
        elif edit == "quote":
            line = put(field, b'"' + value + b'"', line)
        elif edit == "unquote":
            line = put(field, value.strip(b'"') or b"0", line)
        elif edit == "twice":
            line = line[:-1] + b"," + key + draw(st.sampled_from([value, b"0", b'"x"'])) + b"}"
        elif edit == "drop":
            record = json.loads(line)
            record.pop(field.decode())
            line = orjson.dumps(record)
        elif edit == "add":
            line = line[:-1] + draw(st.sampled_from([b',"next_value":1.5}', b',"group_id":"g"}',
                                                     b',"x":1}', b',"Step":1}']))
        elif edit == "comma":
            line = line[:-1] + b",}"
        else:
            line = put(b"episode_id", draw(st.sampled_from(
                [b'"ep:1"', b'"ep\\"1"', b'"ep\\\\1"', b'"true"', b'"ep-true"', b'"17"',
                 b'"f,a[l{s}e"'])), line)
        lines[i] = line
        edited.append(i)
    return lines, edited


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mutated=mutated_files(), pinned=st.booleans())
def test_mutated_lines_get_the_line_paths_report(tmp_path, mutated, pinned, taken):
    lines, edited = mutated
    model = CartPoleStep if pinned else RolloutStep
    taken.clear()
    report_both_ways(write(tmp_path, lines), model)
    if any(refused(lines[i], model) for i in edited):
        assert True not in taken  # one chunk: its columns never pass with a refused record


# -- what DuckDB reads a float literal as: the line path's double, bit for bit -----------------

def float_literals(rng: random.Random, n: int) -> list[bytes]:
    """JSON number literals of every form: the shortest text of random doubles (subnormals and
    extremes too), random digit strings with and without fraction, exponent and sign (up to 40
    digits), and the exact decimal midpoints between neighbouring doubles (round half to even)."""
    out: list[bytes] = []
    while len(out) < n:
        kind = rng.randrange(3)
        if kind == 0:
            x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
            if not math.isfinite(x):
                continue
            text = repr(x)
        elif kind == 1:
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40)))
            whole = digits[:rng.randint(1, len(digits))].lstrip("0") or "0"
            text = whole + ("." + digits[len(whole):] if len(digits) > len(whole) else "")
            if rng.random() < 0.5:
                text += rng.choice("eE") + rng.choice(["", "-", "+"]) + str(rng.randint(0, 330))
        else:
            x = rng.uniform(-1.0, 1.0) * 10.0 ** rng.randint(-300, 300)
            bits = int.from_bytes(struct.pack("<d", x), "little")
            above = struct.unpack("<d", (bits + 1).to_bytes(8, "little"))[0]
            with decimal.localcontext() as exact:
                exact.prec = 1200
                text = format((decimal.Decimal(x) + decimal.Decimal(above)) / 2, "e")
        if rng.random() < 0.5 and not text.startswith("-"):
            text = "-" + text
        out.append(text.encode())
    return out


def _line_path_double(literal: bytes) -> float:
    try:
        return float(orjson.loads(literal))
    except orjson.JSONDecodeError:  # beyond the largest double
        return -math.inf if literal.startswith(b"-") else math.inf


@pytest.mark.parametrize("seed", range(3))
def test_float_literals_read_as_the_line_path_reads_them(seed):
    """DuckDB reads a float field as DOUBLE (yyjson's parse): each literal's double is the one
    the line path reads (orjson; `-0`, an integer, is 0.0 on both), bit for bit; a literal
    beyond the doubles, which the line path refuses, is an infinity the column rules refuse."""
    literals = float_literals(random.Random(seed), 4000)
    lines = [put(b"value", literal, CLEAN[t % len(CLEAN)]) for t, literal in enumerate(literals)]
    table = ducklines.DuckLines(bulk_plan(CartPoleStep)).read(Chunk(b"\n".join(lines) + b"\n"))
    assert table is not None
    got = table.column("value").to_numpy()
    expected = np.array([_line_path_double(literal) for literal in literals])
    wrong = np.flatnonzero(got.view(np.int64) != expected.view(np.int64))
    assert not len(wrong), [(literals[i], got[i], expected[i]) for i in wrong[:5]]


# -- LLM completions: ragged token lists and an object of modalities --------------------------

LLM_CLEAN = [ragged_cases.line(i, prompt=3 + i % 5, response=1 + i % 7) for i in range(80)]
"""Completions (`test_ragged_columns.completion`): an object of modalities (`observation`:
`token_ids`, `text`), token ids, log-probs, strings, bools."""
LLM_COLUMNS = {"token ids": b"token_ids", "action": b"action", "logprob": b"logprob",
               "text": b"text", "group id": b"group_id", "reward": b"reward",
               "bool": b"terminated", "int": b"policy_version"}
"""A field of each column kind of `LLMStep`'s ragged plan (`token_ids`, `text`: modalities)."""


def first_element(field: bytes, literal: bytes, line: bytes) -> bytes:
    """`line` with the first element of the list `field` written as `literal`."""
    start = line.index(b'"' + field + b'":[') + len(field) + 4
    end = min(j for j in (line.find(b",", start), line.find(b"]", start)) if j >= 0)
    return line[:start] + literal + line[end:]


def llm_cell_cases() -> dict[str, bytes]:
    base = LLM_CLEAN[AT]
    cases = {f"{token} as {column}": put(field, literal, base)
             for column, field in LLM_COLUMNS.items() for token, literal in TOKENS.items()}
    for field in (b"token_ids", b"action", b"logprob"):
        for token, literal in TOKENS.items():
            cases[f"{token} in {field.decode()}"] = first_element(field, literal, base)
    return cases


def observation(value: bytes, base: bytes | None = None) -> bytes:
    """Line AT with the whole `observation` written as `value`."""
    line = base if base is not None else LLM_CLEAN[AT]
    start = line.index(b'"observation":') + len(b'"observation":')
    return line[:start] + value + line[line.index(b"}", start) + 1:]


LLM_LENIENT = {
    **{f"observation {name}": observation(value) for name, value in {
        "a number": b"5", "a string": b'"x"', "true": b"true", "null": b"null",
        "a list": b"[1,2,3]", "a list of the object": b'[{"token_ids":[1,2,3]}]',
        "empty": b"{}", "without token ids": b'{"text":"a"}',
        "with an unknown modality": b'{"token_ids":[1,2,3],"image":[1]}',
        "with token ids twice": b'{"token_ids":[1,2,3],"token_ids":[4]}',
        "with a trailing comma": b'{"token_ids":[1,2,3],"text":"a",}',
        "with token ids nested": b'{"token_ids":[[1,2,3]]}',
        "with token ids an object": b'{"token_ids":{"a":1}}',
        "with a null modality": b'{"token_ids":[1,2,3],"text":null}',
        "with a number as text": b'{"token_ids":[1,2,3],"text":12}',
        "with a nested object": b'{"token_ids":[1,2,3],"text":"a","more":{"x":1}}',
    }.items()},
    "observation a number beside an object in the logprobs": first_element(
        b"logprob", b"{}", observation(b"5")),
    "observation empty beside a trailing comma": observation(b"{}")[:-1] + b",}",
    "a trailing comma in the token ids": LLM_CLEAN[AT].replace(b'"token_ids":[1,',
                                                               b'"token_ids":[1,,'),
    "a float token id and a string one": first_element(
        b"token_ids", b"2.0", first_element(b"action", b'"7"', LLM_CLEAN[AT])),
    "a modality at the top": LLM_CLEAN[AT][:-1] + b',"token_ids":[1]}',
    "the observation twice": LLM_CLEAN[AT][:-1] + b',"observation":{"token_ids":[1]}}',
    **{f"ragged: {k}": v for k, v in ragged_cases.CASES.items()},
}
"""What DuckDB reads into an object of modalities (any value is an object there, with every
modality null) or a token list that the line path refuses or explains otherwise."""

LLM_ACCEPTED = {
    "spaces between tokens": LLM_CLEAN[AT].replace(b":", b": ").replace(b",", b" , "),
    "the modalities in another order": observation(b'{"text":"2+2=","token_ids":[1,2,3]}'),
    "no text": observation(b'{"token_ids":[1,2,3]}'),
    "minus zero as a token id": first_element(b"action", b"-0", LLM_CLEAN[AT]),
    "a text holding counted bytes": observation(b'{"token_ids":[1],"text":"t:f,[{}]"}'),
}
"""Lines the line path takes: DuckDB's reading of them is taken too."""

LLM_CASES = {**llm_cell_cases(), **LLM_LENIENT, **LLM_ACCEPTED}


def test_duckdb_takes_a_clean_completion_file(tmp_path, taken):
    assert report_both_ways(write(tmp_path, LLM_CLEAN), LLMStep)["holds"]
    assert taken == [True]


@pytest.mark.parametrize("case", list(LLM_CASES))
def test_a_completion_chunk_duckdb_cannot_read_exactly_is_not_taken(tmp_path, case, taken):
    line = LLM_CASES[case]
    lines = [*LLM_CLEAN[:AT], line, *LLM_CLEAN[AT + 1:]]
    report = report_both_ways(write(tmp_path, lines), LLMStep)
    assert len(taken) <= 1, case
    if refused(line, LLMStep) or case in LLM_LENIENT:
        assert taken == [False] or not taken, case
    if case in LLM_ACCEPTED:
        assert taken == [True] and report["holds"], case


def test_completion_columns_are_pyarrows(tmp_path):
    """DuckDB's columns of a chunk of completions are the ones pyarrow's reader makes: the
    object of modalities a struct, token ids int64 lists, log-probs float64 lists, equal."""
    chunk = Chunk(b"\n".join(LLM_CLEAN) + b"\n")
    plan = ragged_plan(LLMStep)
    assert plan is not None and ducklines.simple(plan)
    duck = ducklines.DuckLines(plan).read(chunk)
    arrow = arrowlines.ArrowLines(plan).read(chunk)  # new: a used reader reads more fields
    assert duck is not None and arrow is not None
    assert duck.column_names == arrow.column_names
    for name in duck.column_names:
        assert duck.column(name).type == arrow.column(name).type, name
        assert duck.column(name).to_pylist() == arrow.column(name).to_pylist(), name


LLM_FIELDS = [b"token_ids", b"text", b"action", b"logprob", b"ref_logprob", b"reward", b"step",
              b"episode_id", b"group_id", b"terminated", b"truncated", b"policy_version"]


@st.composite
def mutated_completions(draw: Any) -> tuple[list[bytes], list[int]]:
    """Clean completions, a few edited as text: a value or one list element replaced by a
    literal, quoted, written twice, a modality added or dropped, a trailing comma."""
    lines = list(LLM_CLEAN[:40])  # one chunk
    edited = []
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        field = draw(st.sampled_from(LLM_FIELDS))
        edit = draw(st.sampled_from(["literal", "element", "quote", "twice", "modality",
                                     "comma", "observation"]))
        literal = draw(st.sampled_from(LITERALS))
        key = b'"' + field + b'":'
        if edit == "literal":
            line = put(field, literal, line)
        elif edit == "element":
            if line[line.index(key) + len(key):][:1] == b"[":
                line = first_element(field, literal, line)
        elif edit == "quote":
            line = line.replace(key + b"[", key + b'"[', 1) if b"[" in literal \
                else put(field, b'"1"', line)
        elif edit == "twice":
            line = line.replace(key, key + literal + b"," + key, 1)
        elif edit == "modality":
            line = line.replace(b'"observation":{', draw(st.sampled_from(
                [b'"observation":{"x":1,', b'"observation":{"text":"a",', b'"observation":{,',
                 b'"observation":{"token_ids":[1],'])), 1)
        elif edit == "comma":
            line = line.replace(b"]", b",]", 1) if draw(st.booleans()) else line[:-1] + b",}"
        else:
            line = observation(literal, line)
        lines[i] = line
        edited.append(i)
    return lines, edited


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mutated=mutated_completions())
def test_mutated_completions_get_the_line_paths_report(tmp_path, mutated, taken):
    lines, edited = mutated
    taken.clear()
    report_both_ways(write(tmp_path, lines), LLMStep)
    if any(refused(lines[i], LLMStep) for i in edited):
        assert True not in taken


# -- which files are read here ------------------------------------------------------------------

def test_a_small_file_is_read_without_importing_duckdb(tmp_path, monkeypatch):
    """Below `MIN_FILE_BYTES` (unless duckdb is imported already) pyarrow's reader reads the file
    and duckdb is not imported for it; at that size and over, and for a plan DuckDB cannot read,
    the choice follows the rule."""
    monkeypatch.setattr(ducklines, "MIN_FILE_BYTES", 1000)
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    small.write_bytes(b"".join(CLEAN[:2]))
    large.write_bytes(b"\n".join(CLEAN) + b"\n")
    assert len(small.read_bytes()) < 1000 <= len(large.read_bytes())
    plan = bulk_plan(CartPoleStep)
    monkeypatch.delitem(sys.modules, "duckdb")
    imported = []
    monkeypatch.setattr(ducklines, "usable", lambda: imported.append(True) or True)
    assert not ducklines.chosen(small, plan) and not imported
    assert not ducklines.chosen(tmp_path / "missing.jsonl", plan) and not imported
    assert ducklines.chosen(large, plan) and imported
    ragged = ragged_plan(LLMStep)
    assert ragged is not None and ducklines.chosen(large, ragged)  # LLM token lists too
    with monkeypatch.context() as other:
        other.setattr(ducklines, "simple", lambda plan: False)
        assert not ducklines.chosen(large, plan) and not ducklines.chosen(large, ragged)
    monkeypatch.setitem(sys.modules, "duckdb", object())  # imported already: any size
    assert ducklines.chosen(small, plan)
    monkeypatch.undo()  # the real `usable`, duckdb imported
    monkeypatch.setattr(ducklines, "MIN_FILE_BYTES", 1000)
    assert ducklines.chosen(large, plan)
    for switch, on in (("GYRE_DUCKDB", "0"), ("GYRE_FAST_PATHS", "0")):
        with monkeypatch.context() as env:
            env.setenv(switch, on)
            assert not ducklines.chosen(large, plan), switch


def chunk_sizes(monkeypatch: Any, reader: type) -> list[int]:
    """The size of each chunk `reader.read` is given, in order (`DuckLines`, `ArrowLines`)."""
    sizes: list[int] = []
    read = reader.read
    monkeypatch.setattr(reader, "read",
                        lambda self, chunk: sizes.append(len(chunk.raw)) or read(self, chunk))
    return sizes


def chunked_file(tmp_path: Path, monkeypatch: Any) -> tuple[Path, int, list[int]]:
    """A CartPole file of many chunks at `lines.CHUNK_BYTES` 2000, the length of its longest
    line (a chunk starts with the rest of the line before it), and the list the size of each
    chunk DuckDB is given goes into."""
    from gyre_contract.io import _lines as lines

    monkeypatch.setattr(lines, "CHUNK_BYTES", 2000)
    records = [orjson.dumps(step(t, eid=f"ep-{e}", last=3)) for e in range(100) for t in range(4)]
    sizes = chunk_sizes(monkeypatch, ducklines.DuckLines)
    return write(tmp_path, records), max(map(len, records)) + 1, sizes


def test_a_file_read_here_comes_in_chunks_of_its_size(tmp_path, monkeypatch, taken):
    """A file chosen for DuckDB is read in chunks of `ducklines.chunk_bytes()`, pyarrow's alone
    in `arrowlines.chunk_bytes()` (each a multiple of `lines.CHUNK_BYTES`)."""
    path, longest, sizes = chunked_file(tmp_path, monkeypatch)
    assert report_both_ways(path, CartPoleStep)["holds"]
    assert len(sizes) == len(taken) >= 2 and all(taken)
    assert max(sizes) <= ducklines.chunk_bytes() + longest < path.stat().st_size
    assert max(sizes) > arrowlines.chunk_bytes() + longest


def test_an_unpinned_file_is_chosen_by_the_plan_its_first_lines_bind(tmp_path, monkeypatch,
                                                                      taken):
    """Without a pinned model the plan is known once the first chunk binds it (`Binder`): that
    chunk is DuckDB's size when the file is `likely` to be read there, and DuckDB reads it and
    the chunks after it; a file that is not likely starts at pyarrow's size."""
    path, longest, sizes = chunked_file(tmp_path, monkeypatch)
    assert report_both_ways(path, RolloutStep)["holds"]
    assert len(sizes) == len(taken) >= 3 and all(taken)
    assert arrowlines.chunk_bytes() + longest < sizes[0] <= ducklines.chunk_bytes() + longest
    sizes.clear()
    monkeypatch.setattr(ducklines, "likely", lambda path: False)
    assert report_both_ways(path, RolloutStep)["holds"]
    assert sizes[0] <= arrowlines.chunk_bytes() + longest < max(sizes[1:]) \
        <= ducklines.chunk_bytes() + longest


ESCAPED_LINES = """
import sys
import orjson
from gyre_contract.io import _arrowlines as arrowlines, _ducklines as ducklines, _lines as lines
from gyre_contract.io import validate_file
from gyre_contract.pinned import LLMStep
path = sys.argv[1]
ducklines.MIN_FILE_BYTES = 0
lines.CHUNK_BYTES = 2000
sizes = []
read = arrowlines.ArrowLines.read
arrowlines.ArrowLines.read = lambda self, chunk: sizes.append(len(chunk.raw)) or read(self, chunk)
report = validate_file(path, LLMStep)
print(orjson.dumps({"holds": report.to_dict()["holds"], "sizes": sizes,
                    "duckdb": "duckdb" in sys.modules}).decode())
"""


def escaped_completions(escaped: range, n: int = 400) -> list[bytes]:
    """`n` completions; those in `escaped` with a prompt text holding escapes."""
    return [orjson.dumps(ragged_cases.completion(
        i, prompt=3 + i % 5, response=1 + i % 7,
        observation={"token_ids": [1, 2, 3], "text": 'Q\n"2+2"' if i in escaped else "Q"}))
        for i in range(n)]


def test_a_file_whose_first_chunk_holds_an_escape_is_read_by_pyarrow_alone(tmp_path):
    """DuckDB's path reads no chunk with a backslash (an LLM prompt's newlines): a file whose
    first chunk holds one is read by pyarrow in its chunks, and duckdb is not imported for it
    (~0.14 s and ~45 MB: 100 MB of such completions, fresh `validate`, 135-139 MB against
    196 MB)."""
    import subprocess

    records = escaped_completions(range(400))
    path = tmp_path / "llm.jsonl"
    path.write_bytes(b"\n".join(records) + b"\n")
    out = subprocess.run([sys.executable, "-c", ESCAPED_LINES, str(path)], capture_output=True,
                         text=True, check=True, timeout=120)
    found = json.loads(out.stdout)
    assert found["holds"] and not found["duckdb"]
    sizes, longest = found["sizes"], max(map(len, records)) + 1
    assert len(sizes) >= 3 and 2 * 2000 + longest < sizes[0] <= 5 * 2000 + longest
    assert max(sizes[1:]) <= 2 * 2000 + longest  # the first chunk only at DuckDB's size


def test_escapes_after_the_first_chunk_send_the_rest_to_pyarrow(tmp_path, monkeypatch, taken):
    """Escapes from the middle of the file on: DuckDB reads the chunks before them, and after
    `MAX_DUCK_MISSES` chunks in a row that pyarrow read instead, pyarrow reads the rest in its
    own chunks (the same report both ways)."""
    from gyre_contract.io import _checking as checking
    from gyre_contract.io import _lines as lines

    monkeypatch.setattr(lines, "CHUNK_BYTES", 2000)
    records = escaped_completions(range(200, 1000), 1000)
    path = write(tmp_path, records, "llm.jsonl")
    sizes = chunk_sizes(monkeypatch, arrowlines.ArrowLines)
    assert report_both_ways(path, LLMStep)["holds"]
    longest = max(map(len, records)) + 1
    assert True in taken  # DuckDB read the chunks before the escapes
    misses = checking._Columns.MAX_DUCK_MISSES
    # sizes: pyarrow's readings with the fast paths on (DuckDB's misses, then its own chunks);
    # the run with them off reads no chunk into columns
    big = [s > 2 * 2000 + longest for s in sizes]
    switch = big.index(False)
    assert all(big[:switch]) and not any(big[switch:])  # DuckDB's size, then pyarrow's to the end
    # the misses, and the chunks read ahead of the switch (up to `READERS` + 1 in flight, and
    # the two threads may both be missing when it is made)
    assert misses <= switch <= misses + arrowlines.READERS + 2
    assert len(sizes) - switch >= 10


def test_a_file_is_likely_read_here_by_its_size_and_switches_without_importing_duckdb(
        tmp_path, monkeypatch):
    """`likely` (the first chunk's size before a plan is bound): the size rule of `chosen` and
    its switches, duckdb found installed, never imported for the question."""
    import importlib.util

    monkeypatch.setattr(ducklines, "MIN_FILE_BYTES", 1000)
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    small.write_bytes(b"".join(CLEAN[:2]))
    large.write_bytes(b"\n".join(CLEAN) + b"\n")
    monkeypatch.delitem(sys.modules, "duckdb")
    assert ducklines.likely(large) and not ducklines.likely(small)
    assert not ducklines.likely(tmp_path / "missing.jsonl") and "duckdb" not in sys.modules
    for switch, on in (("GYRE_DUCKDB", "0"), ("GYRE_FAST_PATHS", "0")):
        with monkeypatch.context() as env:
            env.setenv(switch, on)
            assert not ducklines.likely(large), switch
    with monkeypatch.context() as env:
        env.setattr(importlib.util, "find_spec", lambda name: None)  # not installed
        assert not ducklines.likely(large)
    monkeypatch.setitem(sys.modules, "duckdb", object())  # imported already: any size
    assert ducklines.likely(small)


def test_an_unpinned_llm_file_is_read_here_in_its_chunks(tmp_path, monkeypatch, llm_record,
                                                         taken):
    """A file whose first lines bind a ragged plan (LLM token lists) is read by DuckDB in
    DuckDB's chunks from the first, every clean chunk taken: on 100 MB of completions DuckDB
    parses a chunk in under half the CPU time of pyarrow's reader."""
    from gyre_contract.io import _lines as lines

    monkeypatch.setattr(lines, "CHUNK_BYTES", 2000)
    records = [orjson.dumps(dict(llm_record, episode_id=f"p-{e}", action=[7] * (1 + e % 9),
                                 logprob=[-0.5] * (1 + e % 9))) for e in range(400)]
    path = write(tmp_path, records, "llm.jsonl")
    sizes = chunk_sizes(monkeypatch, ducklines.DuckLines)
    for model in (RolloutStep, LLMStep):
        sizes.clear()
        taken.clear()
        assert report_both_ways(path, model)["holds"]
        longest = max(map(len, records)) + 1
        assert len(sizes) == len(taken) >= 3 and all(taken), model
        assert arrowlines.chunk_bytes() + longest < max(sizes) \
            <= ducklines.chunk_bytes() + longest, model


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200).map(lambda b: b.replace(b"\\", b"")),
       block=st.integers(1, 64), start=st.integers(0, 5))
def test_byte_counts_in_blocks_equal_a_count_over_the_whole(data, block, start, monkeypatch):
    """`_counts` compares a block at a time into one mask: the counts of every block add up
    to a count over all the bytes, wherever the blocks end (a slice not at the start too)."""
    monkeypatch.setattr(line_reader, "BYTE_BLOCK", block)
    codes = np.frombuffer(b'",[{tf' + data, np.uint8)[start:]
    expected = [int(np.count_nonzero(codes == c)) for c in b'",[{tf']
    assert ducklines._counts(codes).tolist() == expected
