"""Counting a line's values, keys and nesting on its bytes (`linescan`), and refusing a line of
too many values or keys without parsing it: same counts as the parsed record, same verdicts."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyre_contract.io import _lines as line_reader
from gyre_contract.io import _linescan as linescan
from gyre_contract.io._linescan import scan, surely_json
from gyre_contract.io._validation import validate_file

SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def lexed(raw: bytes) -> int:
    """The values by a plain character loop, as `scan` documents them: every two-backslash
    pair, then every backslash-quote pair removed; quotes toggle strings."""
    values, inside = 0, False
    for c in raw.replace(b"\\\\", b"").replace(b'\\"', b""):
        if c == 0x22:
            inside = not inside
        elif not inside and c in b",:[{":
            values += 1
    return values


JSONISH = st.lists(st.sampled_from([b"{", b"}", b"[", b"]", b'"', b":", b",", b"\\", b'\\"',
                                    b"\\\\", b"a", b"1", b" ", b"\xc3\xa9"]), max_size=40)


@SETTINGS
@given(pieces=JSONISH, block=st.integers(1, 12))
def test_values_are_counted_as_a_plain_lexer_whatever_the_block_size(pieces, block,
                                                                    monkeypatch):
    """Any bytes (the count decides before the line is known to be JSON)."""
    monkeypatch.setattr(linescan, "BLOCK_BYTES", block)
    raw = b"".join(pieces)
    assert scan(raw).values == lexed(raw)


def documents(depth: int = 4) -> Any:
    keys = st.text(alphabet='ab:"\\[{,é', max_size=3)
    scalars = st.one_of(st.integers(-5, 5), st.text(alphabet='x:"\\[]{},é', max_size=4),
                        st.none(), st.booleans())
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=25)


def _count_keys(value: Any) -> int:
    """Keys through nested objects, not into lists (what MAX_RECORD_KEYS counts)."""
    if not isinstance(value, dict):
        return 0
    return len(value) + sum(_count_keys(v) for v in value.values())


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@SETTINGS
@given(record=st.dictionaries(st.text(max_size=3), documents(), max_size=5),
       block=st.integers(1, 16), ascii_only=st.booleans(), indent=st.sampled_from([None, 1]))
def test_scan_counts_what_the_parsed_record_holds(record, block, ascii_only, indent, monkeypatch):
    """On a JSON object without duplicate keys: `keys` is the parsed record's key count, `top`
    its own keys, `depth` its nesting."""
    monkeypatch.setattr(linescan, "BLOCK_BYTES", block)
    raw = json.dumps(record, ensure_ascii=ascii_only, indent=indent).encode()
    counts = scan(raw)
    assert counts.keys == _count_keys(record)
    assert counts.top == len(record)
    assert counts.depth == _depth(record)


MUTATIONS = [b"{", b"}", b"[", b"]", b'"', b":", b",", b"\\", b"\\u", b"\\ud800", b"\\udc00",
             b"\\x", b"1e400", b"1E5", b"9" * 20, b"NaN", b"-", b".", b"0", b"01", b"\t", b"\x00",
             b"\xed\xa0\x80", b"\xff", b"\xc3", b"\xef\xbb\xbf", b"tru", b"null", b" "]


@SETTINGS
@given(record=documents(), edits=st.lists(st.tuples(st.integers(0, 10**6),
                                                    st.sampled_from(MUTATIONS),
                                                    st.integers(0, 2)), max_size=3),
       block=st.integers(1, 16))
def test_surely_json_only_says_so_of_what_orjson_parses_into_an_object(record, edits, block,
                                                                       monkeypatch):
    monkeypatch.setattr(linescan, "BLOCK_BYTES", block)
    raw = bytearray(json.dumps({"r": record}, ensure_ascii=False).encode())
    for at, piece, cut in edits:
        at %= len(raw) + 1
        raw[at:at + cut] = piece
    raw = bytes(raw)
    if surely_json(raw, scan(raw)):
        assert orjson.loads(raw).__class__ is dict


def test_surely_json_doubts_what_orjson_refuses_or_may_refuse() -> None:
    for raw in (b'{"a":1e400}', b'{"a":' + b"1" * 400 + b"}", b'{"a":"\xff"}',
                b'{"a":"\xed\xa0\x80"}', b'{"a":"\\ud800"}', b'{"a":NaN}', b'[{"a":1}]',
                b'\xef\xbb\xbf{"a":1}', b'{"a":' + b"[" * 1100 + b"]" * 1100 + b"}",
                b'{"a":1} x', b'{"a":1,}'):
        assert not surely_json(raw, scan(raw)), raw
    assert surely_json(b'{"a":[1,-0.5,"x\\"y:,",{"b":null}],"c":"\xc3\xa9"}',
                       scan(b'{"a":[1,-0.5,"x\\"y:,",{"b":null}],"c":"\xc3\xa9"}'))


# -- the reader's limits on the bytes --------------------------------------------------------

def _record(**extra: Any) -> dict[str, Any]:
    return {"observation": [0.0, 0.1, 0.2, 0.3], "action": 1, "logprob": -0.69, "reward": 1.0,
            "step": 0, "episode_id": "a", "terminated": True, "truncated": False,
            "policy_version": 0, **extra}


def _problems(path: Path, **kwargs: Any) -> list[str]:
    return [str(p) for p in validate_file(path, **kwargs).problems()]


@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_line_of_too_many_values_is_reported_unparsed_on_every_path(tmp_path, monkeypatch,
                                                                      fast):
    monkeypatch.setenv("GYRE_FAST_PATHS", fast)
    monkeypatch.setattr(line_reader, "MAX_LINE_VALUES", 100)
    monkeypatch.setattr(line_reader, "CHUNK_BYTES", 64)  # the line spans several reads
    crowded = orjson.dumps(_record(junk=[[]] * 60, episode_id="b"))
    good = orjson.dumps(_record())
    path = tmp_path / "r.jsonl"
    path.write_bytes(good + b"\n" + crowded + b"\n" + good.replace(b'"a"', b'"c"') + b"\n"
                     + crowded)
    expected = ("too many values (not parsed): expected at most 100 values per line (each ',' "
                f"':' '[' '{{' outside strings), got 144 in {len(crowded)} bytes")
    assert _problems(path) == [f"line 2: {expected}", f"line 4: {expected}"]
    report = validate_file(path, allow_partial_tail=True)  # a tail may still be being written
    assert [str(p) for p in report.problems()] == [f"line 2: {expected}"]
    assert report.partial_tail_bytes == len(crowded)


class _Spy:
    """`orjson` as the line reader sees it, counting the lines it parses."""

    def __init__(self) -> None:
        self.parsed: list[int] = []
        self.JSONDecodeError = orjson.JSONDecodeError
        self.dumps = orjson.dumps

    def loads(self, raw: bytes) -> Any:
        self.parsed.append(len(raw))
        return orjson.loads(raw)


def test_a_record_of_too_many_keys_is_refused_without_being_parsed(tmp_path, monkeypatch):
    spy = _Spy()
    monkeypatch.setattr(line_reader, "orjson", SimpleNamespace(
        loads=spy.loads, dumps=orjson.dumps, JSONDecodeError=orjson.JSONDecodeError))
    keys = {f"k{i}": 0 for i in range(line_reader.MAX_RECORD_KEYS + 1)}
    path = tmp_path / "r.jsonl"
    path.write_bytes(orjson.dumps(keys) + b"\n" + orjson.dumps({"x": keys}) + b"\n")
    expected = ("too many keys (record not validated): expected at most 10000 keys per record "
                "(counted through nested objects), got {} keys")
    assert _problems(path) == [f"line 1: {expected.format(10001)}",
                               f"line 2: {expected.format(10002)}"]
    assert all(size < 1000 for size in spy.parsed)  # neither big line was parsed


@pytest.mark.parametrize(("tweak", "says"), [
    (lambda raw: raw + b" x", "not valid JSON: expected one JSON object per line, got "
                              "unexpected content after document at column 98904"),
    (lambda raw: raw.replace(b'"k7":0', b'"k7":NaN'), "NaN/Infinity is not JSON"),
    (lambda raw: raw.replace(b'"k7":0', b'"k7":1e400'), "number too large"),
    (lambda raw: raw.replace(b'"k7"', b'"k\xff"'), "not UTF-8"),
    (lambda raw: b"[" + raw + b"]", "not a JSON object"),
])
def test_a_line_of_many_keys_that_is_not_json_says_so_first(tmp_path, tweak, says):
    """The bytes decide a refusal only for a line the parser would take: any other line is
    parsed, and what the parser says comes first, as it always did."""
    keys = {f"k{i}": 0 for i in range(line_reader.MAX_RECORD_KEYS + 1)}
    path = tmp_path / "r.jsonl"
    path.write_bytes(tweak(orjson.dumps(keys)) + b"\n")
    found = _problems(path)
    assert len(found) == 1 and found[0].startswith(f"line 1: {says}"), found


def test_a_byte_order_mark_before_many_keys_gives_both_problems(tmp_path):
    keys = {f"k{i}": 0 for i in range(line_reader.MAX_RECORD_KEYS + 1)}
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + orjson.dumps(keys) + b"\n")
    found = _problems(path)
    assert [p.split(":")[0:2] for p in found] == [
        ["line 1", " byte-order mark (BOM) at the start of the line"],
        ["line 1", " too many keys (record not validated)"]]
