"""Rollout files: writing whole lines, reading every line or saying why not, episodes, reports."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from models import CartPoleStep, LLMStep

from gyre_contract.core._errors import ContractError, InputError
from gyre_contract.core._models import RolloutStep
from gyre_contract.core._validate import validate_step
from gyre_contract.io import _lines as line_reader
from gyre_contract.io._episodes import Episode
from gyre_contract.io._reading import read_episodes, read_steps
from gyre_contract.io._validation import validate_file
from gyre_contract.io._writer import write_steps

CORPUS = Path(__file__).parents[1] / "data" / "rollouts"
EXPECTED = {k: v for k, v in json.loads((CORPUS / "EXPECTED.json").read_text()).items()
            if not k.startswith("_")}
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def step(t: int, eid: str = "a", *, done: str = "", pv: int = 0, **extra: Any) -> dict[str, Any]:
    """A CartPole-like step record; `done` is "" / "terminated" / "truncated"."""
    record = {"observation": [0.01 * t, 0.1, -0.02, 0.3], "action": t % 2, "logprob": -0.69,
              "reward": 1.0, "step": t, "episode_id": eid, "terminated": done == "terminated",
              "truncated": done == "truncated", "policy_version": pv}
    record.update(extra)
    return record


def episode(eid: str, length: int, done: str = "terminated", **extra: Any) -> list[dict]:
    return [step(t, eid, done=done if t == length - 1 else "", **extra) for t in range(length)]


def write_lines(path: Path, lines: list[bytes], end: bytes = b"\n") -> Path:
    path.write_bytes(b"".join(line + end for line in lines))
    return path


def dumps(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record)


# -- the malformed corpus ----------------------------------------------------------------------

def test_corpus_has_one_expectation_per_file() -> None:
    assert {p.name for p in CORPUS.glob("*.jsonl")} == set(EXPECTED)


def _model(entry: dict[str, Any]) -> type:
    return CartPoleStep if entry.get("model") == "examples/models.py:CartPoleStep" else RolloutStep


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_reports_exactly_what_is_expected(name: str) -> None:
    entry = EXPECTED[name]
    report = validate_file(CORPUS / name, _model(entry),
                           require_complete=entry.get("require_complete", False))
    got = [{"line": p.line, "path": p.path, "message": p.message, "text": str(p)}
           for p in report.problems()]
    assert got == entry["problems"]
    assert report.problem_count == len(entry["problems"])
    assert report.exit_code() == (1 if entry["problems"] else 0)


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items()
                                        if e["problems"] and not e.get("require_complete")
                                        and n != "empty.jsonl"))
def test_read_steps_raises_on_the_first_expected_problem(name: str) -> None:
    entry = EXPECTED[name]
    with pytest.raises(ContractError) as info:
        list(read_steps(CORPUS / name, _model(entry)))
    assert str(info.value.problems[0]) == entry["problems"][0]["text"]


def test_crlf_line_ends_are_accepted() -> None:
    steps = list(read_steps(CORPUS / "crlf_line_ends.jsonl"))
    assert [s.step for s in steps] == [0, 1, 2]


def test_empty_file_reads_as_no_steps_but_does_not_validate() -> None:
    assert list(read_steps(CORPUS / "empty.jsonl")) == []
    assert validate_file(CORPUS / "empty.jsonl").exit_code() == 1


# -- line-level problems, word for word --------------------------------------------------------

def _problems(tmp_path: Path, *lines: bytes, end: bytes = b"\n") -> list[str]:
    path = write_lines(tmp_path / "r.jsonl", list(lines), end)
    return [str(p) for p in validate_file(path).problems()]


def test_nested_duplicate_key_is_found_with_its_path(tmp_path: Path) -> None:
    line = dumps(step(0, done="terminated", info={"seed": 1})).replace(
        b'{"seed":1}', b'{"seed":1,"seed":2}')
    assert _problems(tmp_path, line) == [
        "line 1: info.seed: duplicate key: expected each key once per object, "
        "got 'seed' 2 times (JSON readers keep only one)"]


def test_duplicate_key_with_spaces_and_escapes_is_found(tmp_path: Path) -> None:
    text = json.dumps(step(0, done="terminated", episode_id='say "hi"'))
    line = text.replace('"reward": 1.0', '"reward" : 1.0, "reward" :2.0').encode()
    assert _problems(tmp_path, line) == [
        "line 1: reward: duplicate key: expected each key once per object, "
        "got 'reward' 2 times (JSON readers keep only one)"]


def test_colons_inside_strings_are_not_taken_for_keys(tmp_path: Path) -> None:
    line = dumps(step(0, "env:0:ep:1", done="terminated", info={"note": "t=1: ok"}))
    assert _problems(tmp_path, line) == []


def test_integer_below_int64_in_a_list_is_found_with_its_path(tmp_path: Path) -> None:
    line = dumps(step(0, done="terminated")).replace(b"[0.0,", b"[-9223372036854775809,")
    assert _problems(tmp_path, line) == [
        "line 1: observation[0]: integer too large for 64 bits: expected an integer within "
        "int64 or uint64, got int -9223372036854775809"]


def test_uint64_sized_integer_is_left_to_the_model(tmp_path: Path) -> None:
    line = dumps(step(0, done="terminated")).replace(b'"step":0', b'"step":18446744073709551615')
    problems = _problems(tmp_path, line)
    assert len(problems) == 1 and problems[0].startswith("line 1: step: ")


def test_number_beyond_float64(tmp_path: Path) -> None:
    line = dumps(step(0, done="terminated")).replace(b'"reward":1.0', b'"reward":1e400')
    assert _problems(tmp_path, line) == [
        "line 1: number too large: expected a number that fits in float64, "
        "got 1e400 at column 72"]


def test_deep_nesting_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    deep = b'{"observation":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert _problems(tmp_path, deep) == [
        "line 1: nested too deeply: expected at most 1024 nested levels, got deeper at column 1040"]


def test_lone_surrogate_escape_is_a_problem(tmp_path: Path) -> None:
    line = dumps(step(0, done="terminated")).replace(b'"a"', b'"\\ud800"')
    assert _problems(tmp_path, line) == [
        "line 1: not valid JSON: expected one JSON object per line, got no low surrogate in "
        "string at column 99 near '\\\\ud800\",\"ter'"]


def test_json_that_is_not_an_object(tmp_path: Path) -> None:
    assert _problems(tmp_path, b'"text"', b"3", b"null") == [
        "line 1: not a JSON object: expected a JSON object {...} per line, got str 'text'",
        "line 2: not a JSON object: expected a JSON object {...} per line, got int 3",
        "line 3: not a JSON object: expected a JSON object {...} per line, got null",
    ]


def test_bom_then_bad_json_reports_both(tmp_path: Path) -> None:
    assert _problems(tmp_path, b"\xef\xbb\xbf{oops") == [
        "line 1: byte-order mark (BOM) at the start of the line: expected UTF-8 without a "
        "byte-order mark, got the bytes EF BB BF",
        "line 1: not valid JSON: expected one JSON object per line, got unexpected character "
        "at column 2 near 'oops'",
    ]


def test_bom_on_a_single_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + dumps(step(0, done="terminated")))
    assert [p.message for p in validate_file(path).problems()] == [
        "byte-order mark (BOM) at the start of the line"]


def test_whitespace_only_line_is_blank(tmp_path: Path) -> None:
    assert _problems(tmp_path, b"  \t") == [
        "line 1: blank line: expected one JSON object per line, got an empty line"]


def test_last_line_without_newline_that_parses_is_a_record(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(dumps(step(0)) + b"\n" + dumps(step(1, done="truncated")))
    assert [s.step for s in read_steps(path)] == [0, 1]
    assert validate_file(path).ok


def test_partial_tail_is_skipped_only_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(dumps(step(0)) + b"\n" + dumps(step(1))[:25])
    with pytest.raises(ContractError, match="line 2: truncated line"):
        list(read_steps(path))
    assert [s.step for s in read_steps(path, allow_partial_tail=True)] == [0]
    report = validate_file(path, allow_partial_tail=True)
    assert report.ok and report.partial_tail_bytes == 25 and report.lines == 2
    assert "partial tail: 25 bytes after line 1 not checked (no newline yet)" in report.to_text()


def test_overlong_lines_are_skipped_in_bounded_memory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(line_reader, "MAX_LINE_BYTES", 300)
    monkeypatch.setattr(line_reader, "CHUNK_BYTES", 64)
    long_line = dumps(step(0, info={"pad": "x" * 1000}))
    path = write_lines(tmp_path / "r.jsonl", [long_line, dumps(step(0, "b", done="terminated"))])
    path.write_bytes(path.read_bytes() + long_line)
    assert [str(p) for p in validate_file(path).problems()] == [
        f"line 1: line too long (not parsed): expected at most 300 bytes, got {len(long_line)} "
        "bytes",
        "line 3: truncated line (the writer was cut off mid-write?): expected a complete JSON "
        f"line ending in a newline, got {len(long_line)} bytes at the end of the file that do "
        "not parse, with no newline",
    ]


@SETTINGS
@given(data=st.binary(max_size=400), chunk=st.integers(1, 50), limit=st.integers(1, 60))
def test_line_splitting_matches_split_on_newline(data: bytes, chunk: int, limit: int,
                                                 monkeypatch, tmp_path: Path) -> None:
    """Over-long lines become their size; everything else is exactly bytes.split(b"\\n")."""
    monkeypatch.setattr(line_reader, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(line_reader, "MAX_LINE_BYTES", limit)
    path = tmp_path / "bytes.bin"
    path.write_bytes(data)
    with open(path, "rb") as handle:
        source = line_reader.LineSource(handle)
        got = [x.size if isinstance(x, line_reader.Overlong) else x for b in source for x in b]
        tail = source.tail
    *lines, last = data.split(b"\n")
    want = [len(x) if len(x) > limit else x for x in lines]
    assert got == want
    tail_got = tail.size if isinstance(tail, line_reader.Overlong) else tail
    assert tail_got == (None if not last else len(last) if len(last) > limit else last)


class _ReadOnly:
    """A handle with `read` and no `readinto` (as `LineSource` may be given)."""

    def __init__(self, handle: Any) -> None:
        self.read = handle.read


@SETTINGS
@given(data=st.lists(st.sampled_from([b"\n", b"\r\n", b"a", b'{"k": 1}', b"\xe9"]),
                     max_size=120).map(b"".join),
       chunk=st.integers(1, 50), limit=st.integers(1, 60), found=st.integers(1, 4),
       into=st.booleans(), block=st.integers(1, 9))
def test_chunked_reads_split_as_split_on_newline(data: bytes, chunk: int, limit: int, found: int,
                                                 into: bool, block: int, monkeypatch,
                                                 tmp_path: Path) -> None:
    """Read in chunks (`chunk_bytes`, straight into each chunk's buffer with `readinto` or by
    `read`): the lines (bytes, with any CR), their newline offsets and count and the tail are
    those of bytes.split(b"\\n"), a line cut across reads, one longer than a read, or none at
    all; the newlines compared a few bytes at a time (`BYTE_BLOCK`), and each chunk's buffer
    used again for a later one (`_Buffers`) once the chunk is dropped."""
    monkeypatch.setattr(line_reader, "MAX_LINE_BYTES", limit)
    monkeypatch.setattr(line_reader, "MAX_LINE_VALUES", limit)
    monkeypatch.setattr(line_reader, "_FOUND_ONE_BY_ONE", found)
    monkeypatch.setattr(line_reader, "BYTE_BLOCK", block)
    path = tmp_path / "bytes.bin"
    path.write_bytes(data)
    with open(path, "rb", buffering=0) as handle:
        source = line_reader.LineSource(handle if into else _ReadOnly(handle), chunk)
        got: list[Any] = []
        for block in source:
            if isinstance(block, line_reader.Chunk):
                raw = bytes(block.raw)
                assert block.newlines.tolist() == [i for i, c in enumerate(raw) if c == 10]
                assert block.n == raw.count(b"\n")
            got += [x.size if isinstance(x, line_reader.Overlong) else x for x in block]
        tail = source.tail
    assert all(x.__class__ is not bytearray for x in got)
    *lines, last = data.split(b"\n")
    assert got == [len(x) if len(x) > limit else x for x in lines]
    tail_got = tail.size if isinstance(tail, line_reader.Overlong) else tail
    assert tail_got == (None if not last else len(last) if len(last) > limit else last)
    assert tail_got is None or tail_got.__class__ is not bytearray


@SETTINGS
@given(lines=st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), min_size=1,
                      max_size=30), stop=st.integers(-3, 35), start=st.sampled_from([None, 0, 1]),
       bytearray_=st.booleans())
def test_a_chunks_lines_by_slice(lines: list[bytes], stop: int, start: int | None,
                                 bytearray_: bool) -> None:
    """A chunk's lines by slice are those of the whole list, whether the first lines are cut on
    their own (the whole chunk not split for them) or the whole chunk is split."""
    raw = b"".join(line + b"\n" for line in lines)
    chunk = line_reader.Chunk(bytearray(raw) if bytearray_ else raw)
    got = chunk[start:stop]
    assert got == lines[start:stop] and all(x.__class__ is bytes for x in got)
    assert chunk[:] == lines and chunk[start:stop] == lines[start:stop]


def _spied_buffers(monkeypatch) -> dict[str, int]:
    """How many chunk buffers `_Buffers.get` made and how many it gave again."""
    made = {"new": 0, "again": 0}
    get = line_reader._Buffers.get

    def spy(self: Any, size: int) -> bytearray:
        kept = [id(b) for b in self.kept]
        buffer = get(self, size)
        made["again" if id(buffer) in kept else "new"] += 1
        return buffer

    monkeypatch.setattr(line_reader._Buffers, "get", spy)
    return made


@pytest.mark.parametrize("hold", ["chunk", "memoryview", "numpy", "arrow", "nothing"])
def test_a_chunk_buffer_is_used_again_only_when_nothing_holds_it(monkeypatch, tmp_path, hold):
    """Each chunk's bytes stay what was read while anything holds them (the chunk, or only a
    memoryview, a numpy array or an Arrow buffer over them), however many chunks are read
    after; a buffer nothing holds goes to a later chunk."""
    pa = pytest.importorskip("pyarrow")
    made = _spied_buffers(monkeypatch)
    data = b"".join(b'{"i":%d,"pad":"%s"}\n' % (i, b"x" * (i % 13)) for i in range(400))
    path = tmp_path / "lines.jsonl"
    path.write_bytes(data)
    views = {"chunk": lambda c: c, "memoryview": lambda c: memoryview(c.raw),
             "numpy": lambda c: np.frombuffer(c.raw, np.uint8)[1:],
             "arrow": lambda c: pa.py_buffer(c.raw), "nothing": lambda c: None}
    held: list[Any] = []
    copies: list[bytes] = []
    with open(path, "rb", buffering=0) as handle:
        for chunk in line_reader.LineSource(handle, 97):
            assert isinstance(chunk, line_reader.Chunk)
            copies.append(bytes(chunk.raw))
            held.append(views[hold](chunk))
            del chunk
    assert b"".join(copies) == data and len(copies) > 40
    if hold == "nothing":
        assert made["new"] == 1 and made["again"] == len(copies)  # and the read at the end
        return
    assert made["again"] == 0
    for view, copy in zip(held, copies):
        got = bytes(view.raw) if hold == "chunk" else bytes(view)
        assert got == (copy[1:] if hold == "numpy" else copy)


@pytest.mark.parametrize("into", [True, False])
def test_a_chunk_size_over_the_line_limits_is_cut_to_them(monkeypatch, tmp_path, into):
    """A chunk size larger than a line may be (`MAX_LINE_VALUES`) still gives chunks, of at
    most that size (and the rest of the line before each): not lists of lines."""
    monkeypatch.setattr(line_reader, "MAX_LINE_VALUES", 100)
    data = b"".join(b'{"i":%d}\n' % i for i in range(200))
    path = tmp_path / "lines.jsonl"
    path.write_bytes(data)
    with open(path, "rb", buffering=0) as handle:
        blocks = list(line_reader.LineSource(handle if into else _ReadOnly(handle), 1000))
    assert len(blocks) > 10 and all(isinstance(b, line_reader.Chunk) for b in blocks)
    assert max(len(b.raw) for b in blocks) <= 100 + 10
    assert b"".join(bytes(b.raw) for b in blocks) == data


@pytest.mark.parametrize("into", [True, False])
def test_a_chunk_size_asked_before_each_read_is_followed(tmp_path, into):
    """`chunk_bytes` given as a function is asked before every read: the chunks follow it, the
    lines are all there, in order."""
    data = b"".join(b'{"i":%d}\n' % i for i in range(300))
    path = tmp_path / "lines.jsonl"
    path.write_bytes(data)
    asked = iter([50, 50] + [400] * 100)
    with open(path, "rb", buffering=0) as handle:
        blocks = list(line_reader.LineSource(handle if into else _ReadOnly(handle),
                                             lambda: next(asked)))
    sizes = [len(b.raw) for b in blocks]
    assert all(isinstance(b, line_reader.Chunk) for b in blocks)
    assert max(sizes[:2]) <= 50 + 10 < 400 - 10 <= max(sizes[2:]) <= 400 + 10
    assert b"".join(bytes(b.raw) for b in blocks) == data


@SETTINGS
@given(data=st.binary(max_size=300))
def test_any_bytes_give_problems_never_a_crash(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(data)
    report = validate_file(path)
    assert report.exit_code() in (0, 1)
    report.to_text()


# -- duplicate keys: the cheap test agrees with a full parse -----------------------------------

_keys = st.sampled_from(["a", "b", "c", "a:b", 'q"x', "é"])
_scalars = st.one_of(st.integers(-10, 10), st.booleans(), st.sampled_from(["s", ":", "{", '"']))
_pairs = st.recursive(
    st.lists(st.tuples(_keys, _scalars), max_size=4),
    lambda inner: st.lists(st.tuples(_keys, st.one_of(_scalars, inner,
                                                      st.lists(inner, max_size=2))), max_size=4),
    max_leaves=12,
)


def _render(pairs: Any, sep: str) -> str:
    if isinstance(pairs, list) and (not pairs or isinstance(pairs[0], tuple)):
        body = ",".join(f"{json.dumps(k)}{sep}{_render(v, sep)}" for k, v in pairs)
        return "{" + body + "}"
    if isinstance(pairs, list):
        return "[" + ",".join(_render(v, sep) for v in pairs) + "]"
    return json.dumps(pairs)


def _has_duplicates(text: str) -> bool:
    found = False

    def hook(items: list[tuple[str, Any]]) -> dict:
        nonlocal found
        found = found or len({k for k, _ in items}) != len(items)
        return dict(items)

    json.loads(text, object_pairs_hook=hook)
    return found


@SETTINGS
@given(pairs=_pairs, sep=st.sampled_from([":", ": ", " :", " : "]))
def test_duplicate_detection_agrees_with_a_full_parse(pairs: Any, sep: str) -> None:
    raw = _render(pairs, sep).encode()
    obj = orjson.loads(raw)
    found = any(p.message == "duplicate key" for p in line_reader.hidden_problems(raw, obj))
    assert found == _has_duplicates(raw.decode())


# -- writing -----------------------------------------------------------------------------------

def test_write_then_read_round_trips_models_and_dicts(tmp_path: Path) -> None:
    records = episode("a", 3) + episode("b", 2, "truncated")
    steps = [validate_step(r, CartPoleStep) for r in records[:3]] + records[3:]
    path = tmp_path / "r.jsonl"
    assert write_steps(path, steps) == 5
    back = list(read_steps(path, CartPoleStep))
    assert [orjson.dumps(s.to_record(), option=orjson.OPT_SERIALIZE_NUMPY) for s in back] == [
        orjson.dumps(r) for r in records]
    assert all(isinstance(s.observation, np.ndarray) for s in back)


def test_written_lines_take_the_fast_path(tmp_path: Path, monkeypatch) -> None:
    """write_steps output is orjson's canonical form, so no line needs the slow checks."""
    rows = [step(t, observation=np.random.default_rng(t).standard_normal(4).astype(np.float32),
                 info={"note": "a:b"}) for t in range(50)]
    path = tmp_path / "r.jsonl"
    write_steps(path, [validate_step(r, CartPoleStep) for r in rows])

    def slow(*args: Any) -> None:
        raise AssertionError("slow path taken")

    monkeypatch.setattr(line_reader, "_checked", slow)
    assert len(list(read_steps(path, CartPoleStep))) == 50


def test_write_serialises_numpy_values(tmp_path: Path) -> None:
    record = step(0, done="terminated", observation=np.arange(4, dtype=np.float32),
                  action=np.int64(1), reward=np.float32(0.5))
    record["info"] = {"tag": np.str_("x")}
    path = tmp_path / "r.jsonl"
    write_steps(path, [record])
    assert path.read_bytes() == (
        b'{"observation":[0.0,1.0,2.0,3.0],"action":1,"logprob":-0.69,"reward":0.5,"step":0,'
        b'"episode_id":"a","terminated":true,"truncated":false,"policy_version":0,'
        b'"info":{"tag":"x"}}\n')


def test_append_adds_lines_and_fsync_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    write_steps(path, [step(0)])
    write_steps(path, [step(1, done="terminated")], append=True, fsync=True)
    assert [s.step for s in read_steps(path)] == [0, 1]
    write_steps(path, [step(0, "z", done="terminated")])
    assert [s.episode_id for s in read_steps(path)] == ["z"]


def test_write_refuses_nan_and_none_and_keeps_earlier_lines(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    bad = step(1, reward=float("nan"), value=None)
    with pytest.raises(ContractError) as info:
        write_steps(path, [step(0), bad, step(2)])
    assert str(info.value) == (
        "2 problems:\n"
        "  steps[1].reward: non-finite float cannot be written: expected a finite number, got nan\n"
        "  steps[1].value: None cannot be written: expected a value (null is never valid in a "
        "record), got None")
    assert [s.step for s in read_steps(path)] == [0]


def test_write_refuses_nan_inside_an_array(tmp_path: Path) -> None:
    obs = np.array([0.0, np.inf, 0.0, 0.0], dtype=np.float32)
    with pytest.raises(ContractError, match=r"steps\[0\]\.observation: non-finite float cannot "
                                            r"be written: expected finite numbers, got float32"):
        write_steps(tmp_path / "r.jsonl", [step(0, observation=obs)])


def test_string_null_is_not_mistaken_for_a_null(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    write_steps(path, [step(0, "null", done="terminated")])
    assert [s.episode_id for s in read_steps(path)] == ["null"]


def test_write_to_a_missing_folder_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot open .* for writing: No such file"):
        write_steps(tmp_path / "no" / "r.jsonl", [step(0)])


def _append_worker(path: str, eid: str, n: int) -> None:
    for start in range(0, n, 50):
        batch = [step(t, eid, done="truncated" if t == n - 1 else "",
                      info={"pad": "x" * 300}) for t in range(start, min(start + 50, n))]
        write_steps(path, batch, append=True)


def test_two_processes_appending_never_interleave_a_line(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.jsonl")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_worker, args=(path, eid, 1000)) for eid in ("p", "q")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    report = validate_file(path, require_complete=True)
    assert report.ok, report.to_text()
    assert (report.lines, report.episodes, report.truncated) == (2000, 2, 2)


# -- reading -----------------------------------------------------------------------------------

def test_missing_file_and_directory_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file: "):
        list(read_steps(tmp_path / "nope.jsonl"))
    with pytest.raises(InputError, match="is a directory, not a rollout file: "):
        validate_file(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read anything")
def test_unreadable_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"")
    path.chmod(0)
    with pytest.raises(InputError, match="cannot read"):
        validate_file(path)


def test_read_steps_applies_the_episode_rules(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    write_steps(path, episode("a", 2) + [step(2, "a")])
    steps = read_steps(path)
    assert [next(steps).step, next(steps).step] == [0, 1]
    with pytest.raises(ContractError, match="line 3: episode_id: step after the episode ended"):
        next(steps)


def test_read_steps_streams(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    write_steps(path, [step(0)])
    with open(path, "ab") as f:
        f.write(b"not json\n")
    steps = read_steps(path)
    assert next(steps).step == 0
    with pytest.raises(ContractError, match="line 2: not valid JSON"):
        next(steps)


# -- episodes ----------------------------------------------------------------------------------

def test_interleaved_episodes_are_grouped_and_emitted_when_they_end(tmp_path: Path) -> None:
    a, b, c = episode("a", 3), episode("b", 2, "truncated", next_value=0.5), episode("c", 2, "")
    rows = [a[0], b[0], a[1], c[0], b[1], a[2], c[1]]
    path = tmp_path / "r.jsonl"
    write_steps(path, rows)
    eps = list(read_episodes(path, CartPoleStep))
    assert [(e.episode_id, len(e), e.lines) for e in eps] == [
        ("b", 2, [2, 5]), ("a", 3, [1, 3, 6]), ("c", 2, [4, 7])]
    assert [(e.terminated, e.truncated, e.is_open) for e in eps] == [
        (False, True, False), (True, False, False), (False, False, True)]
    assert [e.episode_id for e in read_episodes(path, CartPoleStep, include_open=False)] == [
        "b", "a"]


def test_episode_columns_have_the_validated_dtypes(tmp_path: Path) -> None:
    rows = episode("a", 3, "truncated", value=0.1)
    rows[-1]["next_value"] = 0.25
    rows[0]["info"] = {"seed": 7}
    path = tmp_path / "r.jsonl"
    write_steps(path, rows)
    (ep,) = read_episodes(path, CartPoleStep)
    cols = ep.columns
    assert cols["observation"].dtype == np.float32 and cols["observation"].shape == (3, 4)
    assert cols["action"].dtype == np.int64 and cols["action"].tolist() == [0, 1, 0]
    assert cols["reward"].dtype == np.float32 and cols["terminated"].dtype == np.bool_
    assert cols["episode_id"].dtype.kind == "U" and cols["step"].dtype == np.int64
    assert np.isnan(cols["next_value"][:2]).all() and cols["next_value"][2] == np.float32(0.25)
    assert cols["info"] == [{"seed": 7}, None, None]
    assert ep.lines == [1, 2, 3]


def test_varying_dims_become_lists_and_modalities_nested_dicts(tmp_path: Path, llm_record) -> None:
    second = dict(llm_record, step=1, action=[5, 6, 7], logprob=[-0.1, -0.2, -0.3],
                  observation={"token_ids": [1, 2], "text": "hi"})
    first = dict(llm_record, terminated=False)
    path = tmp_path / "r.jsonl"
    write_steps(path, [first, second])
    (ep,) = read_episodes(path, LLMStep)
    cols = ep.columns
    assert [a.tolist() for a in cols["action"]] == [[1016, 102], [5, 6, 7]]
    assert [a.dtype for a in cols["logprob"]] == [np.float32, np.float32]
    assert set(cols["observation"]) == {"token_ids", "text"}
    assert [a.tolist() for a in cols["observation"]["token_ids"]] == [[101, 2023, 2003], [1, 2]]
    assert cols["observation"]["text"].tolist() == ["2+2=", "hi"]


def test_unpinned_modalities_stack_when_shapes_agree(tmp_path: Path) -> None:
    rows = [step(t, done="terminated" if t == 1 else "",
                 observation={"image": [[t, 0], [0, t]], "text": f"t{t}"}) for t in range(2)]
    path = tmp_path / "r.jsonl"
    write_steps(path, rows)
    (ep,) = read_episodes(path)
    assert ep.columns["observation"]["image"].shape == (2, 2, 2)
    assert ep.columns["observation"]["image"].dtype == np.int64
    assert ep.columns["observation"]["text"].tolist() == ["t0", "t1"]


def test_read_episodes_raises_on_a_bad_line(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="line 3: step: step does not follow"):
        list(read_episodes(CORPUS / "step_gap.jsonl"))


def test_episode_is_a_plain_dataclass() -> None:
    ep = Episode("x", {"step": np.arange(2), "terminated": np.array([False, True]),
                       "truncated": np.array([False, False])})
    assert len(ep) == 2 and ep.terminated and ep.lines is None


# -- the report --------------------------------------------------------------------------------

def test_identical_problems_are_grouped(tmp_path: Path) -> None:
    rows = [step(t, done="truncated" if t == 9_999 else "", reward="x") for t in range(10_000)]
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"".join(dumps(r) + b"\n" for r in rows))
    report = validate_file(path)
    (group,) = report.groups
    assert (group.path, group.count, [p.line for p in group.examples]) == ("reward", 10_000,
                                                                           [1, 2, 3])
    text = report.to_text()
    assert "  reward: not a number (10000 times)\n" in text
    assert "    ... and 9997 more" in text
    assert report.to_dict()["problems"]["groups"][0]["count"] == 10_000


def test_indices_are_grouped_together(tmp_path: Path) -> None:
    rows = [step(0, observation=[0.0, 1.0, "x", 0.0]), step(1, observation=["y", 1.0, 0.0, 0.0])]
    path = write_lines(tmp_path / "r.jsonl", [dumps(r) for r in rows])
    report = validate_file(path, CartPoleStep)
    assert [(g.path, g.count) for g in report.groups] == [("observation", 2)]


def test_many_distinct_paths_share_one_group_and_the_field_table_is_capped(
        tmp_path: Path) -> None:
    record = step(0, done="terminated", **{f"x{i:02d}": i for i in range(30)})
    path = write_lines(tmp_path / "r.jsonl", [dumps(record)])
    report = validate_file(path)
    assert [(g.path, g.count) for g in report.groups] == [
        *((f"x{i:02d}", 1) for i in range(10)), ("*", 20)]
    assert report.problem_count == 30 and report.more_fields == 10
    assert [f.name for f in report.fields][-20:] == [f"x{i:02d}" for i in range(20)]
    assert report.fields[-1].dtype == "JSON int"
    assert "  ... and 10 more keys not in the model, not listed\n" in report.to_text()


def test_report_fields_and_counts(tmp_path: Path) -> None:
    rows = episode("a", 3) + episode("b", 2, "truncated", pv=1) + episode("c", 1, "")
    rows[0]["trunctaed"] = True
    path = tmp_path / "r.jsonl"
    write_steps(path, rows)
    report = validate_file(path, CartPoleStep)
    fields = {f.name: (f.dtype, f.shape, f.count) for f in report.fields}
    assert fields["observation"] == ("float32", "[4]", 6)
    assert fields["action"] == ("int64", "[]", 6)
    assert fields["trunctaed"][2] == 1
    counts = report.to_dict()["counts"]
    assert counts == {"lines": 6, "records": 6, "steps": 5, "episodes": 3, "open_episodes": 1,
                      "terminated": 1, "truncated": 1, "policy_versions": [0, 1]}
    assert "6 lines, 5 valid steps, 3 episodes (1 open, 1 terminated, 1 truncated)" in (
        report.to_text())


def test_report_shows_varying_shapes_as_ranges(tmp_path: Path, llm_record) -> None:
    rows = [dict(llm_record, episode_id=f"p{i}", action=[1] * (i + 1), logprob=[-0.1] * (i + 1))
            for i in range(3)]
    path = tmp_path / "r.jsonl"
    write_steps(path, rows)
    report = validate_file(path, LLMStep)
    fields = {f.name: (f.dtype, f.shape, f.declared) for f in report.fields}
    assert fields["action"] == ("int64", "[1..3]", "int64 [A]")
    assert fields["observation.token_ids"] == ("int64", "[3]", "int64 [P]")
    assert fields["observation.text"][0] == "string"


def test_json_schema_mode_checks_records_without_episode_rules(tmp_path: Path) -> None:
    schema = json.loads((Path(__file__).parents[2] / "schemas" / "rollout_step.v1.json")
                        .read_text())
    report = validate_file(CORPUS / "typo_key.jsonl", schema=schema)
    assert report.episodes is None and "episode rules not checked" in report.to_text()
    assert [(p.line, p.path) for p in report.problems()][:1] == [(3, "")]
    assert validate_file(CORPUS / "step_gap.jsonl", schema=schema).ok


# -- the report protocol ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["step_gap.jsonl", "crlf_line_ends.jsonl"])
def test_file_report_follows_the_report_protocol(name: str) -> None:
    import io
    import warnings

    from gyre_contract.cli._app import run
    from gyre_contract.core._report import Report

    report = validate_file(CORPUS / name)
    assert isinstance(report, Report) and report.warnings == []
    assert report.ok == (report.problem_count == 0)
    assert report.exit_code() == report.exit_code(strict=True) == (0 if report.ok else 1)
    assert report.render("text") == report.to_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, err = io.StringIO(), io.StringIO()
        code = run(["validate", str(CORPUS / name), "--format", "json"], out, err)
    assert (code, err.getvalue()) == (report.exit_code(), "")
    assert out.getvalue() == report.render("json") + "\n"
    assert json.loads(out.getvalue()) == report.to_dict()


# -- a field keeps its kind within an episode (reliability round 2) ------------------------------

@pytest.mark.parametrize("fast", ["1", "0"])
@pytest.mark.parametrize(("change", "rule", "expected"), [
    ({"action": [1, 1.5]}, "episode.dtype_fixed",
     "line 2: action: dtype changed within the episode: expected int64 as earlier in the "
     "episode, got float32 1.5"),
    ({"observation": [[0.5, 0.5], {"x": [0.5, 0.5]}]}, "episode.structure_fixed",
     "line 2: observation: structure changed within the episode: expected a tensor as earlier "
     "in the episode, got object with keys [x]"),
], ids=["int-then-float-action", "tensor-then-object-observation"])
def test_a_field_keeps_its_kind_within_an_episode(change: dict, rule: str, expected: str,
                                                   fast: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Once `validate` held and reading cast the action to the first step's int64 (or crashed
    on the observation): now every reader names the rule, and nothing is cast."""
    monkeypatch.setenv("GYRE_FAST_PATHS", fast)
    records = episode("a", 2)
    for key, values in change.items():
        for record, value in zip(records, values):
            record[key] = value
    path = write_lines(tmp_path / "mixed.jsonl", [dumps(r) for r in records])
    report = validate_file(path)
    assert [str(p) for p in report.problems()] == [expected]
    assert [p.rule for p in report.problems()] == [rule]
    with pytest.raises(ContractError, match="changed within the episode"):
        list(read_episodes(path))


@pytest.mark.parametrize("fast", ["1", "0"])
def test_an_episode_ended_by_both_flags_counts_as_terminated(tmp_path: Path, fast: str,
                                                            monkeypatch) -> None:
    """Both flags true: terminated wins (the contract, like Gymnasium), in the counts of the bulk
    path and of the line path alike."""
    monkeypatch.setenv("GYRE_FAST_PATHS", fast)
    base = {"observation": [0.0, 0.1], "action": 0, "reward": 1.0, "policy_version": 0}
    rows = [{**base, "step": i, "episode_id": "a", "terminated": i == 2, "truncated": i == 2}
            for i in range(3)]
    rows += [{**base, "step": 0, "episode_id": "b", "terminated": False, "truncated": True},
             {**base, "step": 0, "episode_id": "c", "terminated": True, "truncated": True}]
    path = tmp_path / "both.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = validate_file(path)
    assert report.ok
    assert (report.terminated, report.truncated) == (2, 1)
