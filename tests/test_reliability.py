"""Hostile inputs through the real CLI (in-process): every named hostile case gives the right
exit code, a one-line message (never a traceback), in bounded time and memory.

Each case is one file, given to every command that reads that kind of file: rollout files to
`validate`, `infer` and `batch`; schema files to `diff` (either side) and `validate --schema`;
map files to `batch --map`. The big files (100,000 levels, a 50 MB line, a million fields) are
generated in a temporary folder at test time.
"""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from gyre_contract.cli._app import run

ROOT = Path(__file__).resolve().parent.parent
STEP_SCHEMA = ROOT / "schemas" / "rollout_step.v1.json"
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"
CARTPOLE_MAP = ROOT / "examples" / "cartpole_map.json"

SMALL_MB = 64
BIG_MB = 1500
"""Budgets per command: generous for a shared 2-core CI runner, far below a hang or a blow-up."""

DEEP = 100_000
BIG_LINE = 50 * 2**20
MILLION = 1_000_000


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float
    peak_mb: float


def cli(*argv: str | Path, big: bool = False, trace: bool = True) -> Result:
    """Run the CLI in-process; check no traceback, a one-line stderr, and the memory budget
    (memory by tracemalloc, which `trace=False` skips for loops over hundreds of small files)."""
    out, err = io.StringIO(), io.StringIO()
    if trace:
        tracemalloc.start()
    start = time.perf_counter()
    try:
        code = run([str(a) for a in argv], out, err)
    finally:
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] / 2**20 if trace else 0.0
        tracemalloc.stop()
    result = Result(code, out.getvalue(), err.getvalue(), seconds, peak)
    assert "Traceback" not in result.err
    if code == 2:
        assert result.out == ""
        assert result.err.startswith("error: ") and result.err.count("\n") == 1, result.err
    elif code == 1 and argv[0] == "validate":
        assert result.err == "" and "\nproblems: " in result.out
    mb_max = BIG_MB if big else SMALL_MB  # memory only: wall time is for benchmarks/, not tests
    assert peak < mb_max, f"{argv}: {peak:.0f} MB"
    return result


def record(**changes: object) -> dict:
    base = {"observation": [0.01, -0.02, 0.03, 0.04], "action": 1, "logprob": -0.69,
            "reward": 1.0, "step": 0, "episode_id": "a", "terminated": True,
            "truncated": False, "policy_version": 0}
    base.update(changes)
    return base


GOOD_LINE = orjson.dumps(record())
GOOD_SCHEMA = {"type": "object", "properties": {"reward": {"type": "number"},
                                                 "step": {"type": "integer"}}}
GOOD_MAP = {"gyre_field_map": 1, "fields": {"reward": {"from": "reward"},
                                            "mask": {"op": "mask"}}}


def problems(out: str) -> list[str]:
    """The example problem lines of a text report (indented four spaces)."""
    return [line[4:] for line in out.splitlines() if line.startswith("    line ")
            or line.startswith("    no records")]


# -- the files ---------------------------------------------------------------------------------

def _random_bytes() -> bytes:
    return random.Random(7).randbytes(4096)


def _deep_rollout() -> bytes:
    return b'{"observation":' + b"[" * DEEP + b"]" * DEEP + b"}\n"


def _big_rollout() -> bytes:
    """One valid step of 50 MB: its `info` holds a 50 MB string (a valid record)."""
    return orjson.dumps(record(info={"note": "x" * BIG_LINE})) + b"\n"


def _million_fields() -> bytes:
    return b"{" + b",".join(b'"k%d":0' % i for i in range(MILLION)) + b"}\n"


ROLLOUT_CASES: dict[str, Callable[[], bytes]] = {
    "empty": lambda: b"",
    "random bytes": _random_bytes,
    "UTF-8 BOM": lambda: b"\xef\xbb\xbf" + GOOD_LINE + b"\n",
    "CRLF line ends": lambda: orjson.dumps(record(terminated=False)) + b"\r\n"
    + orjson.dumps(record(step=1)) + b"\r\n",
    "lone surrogate escape": lambda: GOOD_LINE.replace(b'"a"', b'"\\ud800"') + b"\n",
    "lone surrogate bytes": lambda: GOOD_LINE.replace(b'"a"', b'"\xed\xa0\x80"') + b"\n",
    "nesting 100,000 deep": _deep_rollout,
    "50 MB line": _big_rollout,
    "50 MB line cut mid-write": lambda: _big_rollout()[:-10],
    "a million fields": _million_fields,
    "integer beyond int64": lambda: GOOD_LINE.replace(b'"step":0', b'"step":18446744073709551616')
    + b"\n",
    "NaN literal": lambda: GOOD_LINE.replace(b'"reward":1.0', b'"reward":NaN') + b"\n",
    "Infinity literal": lambda: GOOD_LINE.replace(b'"reward":1.0', b'"reward":-Infinity') + b"\n",
    "duplicate key": lambda: GOOD_LINE[:-1] + b',"step":1}\n',
}
BIG = {"nesting 100,000 deep", "50 MB line", "50 MB line cut mid-write", "a million fields"}
CUT_SIZE = len(orjson.dumps(record(info={"note": ""}))) + BIG_LINE - 9

# What `validate` says about each rollout file: exit code and the problems, word for word.
VALIDATE_EXPECTED: dict[str, tuple[int, list[str]]] = {
    "empty": (1, ["no records: expected at least one step record, got an empty file"]),
    "UTF-8 BOM": (1, ["line 1: byte-order mark (BOM) at the start of the line: expected UTF-8 "
                      "without a byte-order mark, got the bytes EF BB BF"]),
    "CRLF line ends": (0, []),
    "lone surrogate escape": (1, [
        "line 1: not valid JSON: expected one JSON object per line, got no low surrogate in "
        "string at column 102 near '\\\\ud800\",\"ter'"]),
    "lone surrogate bytes": (1, [
        "line 1: not UTF-8: expected UTF-8 text, got byte 0xED at column 102"]),
    "nesting 100,000 deep": (1, [
        "line 1: nested too deeply: expected at most 1024 nested levels, got deeper at column "
        "1040"]),
    "50 MB line": (0, []),
    "50 MB line cut mid-write": (1, [
        "line 1: truncated line (the writer was cut off mid-write?): expected a complete JSON "
        f"line ending in a newline, got {CUT_SIZE} bytes at the end of the file that do not "
        "parse, with no newline"]),
    "a million fields": (1, [
        "line 1: too many keys (record not validated): expected at most 10000 keys per record "
        "(counted through nested objects), got 1000000 keys"]),
    "integer beyond int64": (1, [
        "line 1: step: integer too large for 64 bits: expected an integer within int64 or "
        "uint64, got int 18446744073709551616"]),
    "NaN literal": (1, ["line 1: NaN/Infinity is not JSON: expected a finite JSON number, got "
                        "NaN at column 75"]),
    "Infinity literal": (1, ["line 1: NaN/Infinity is not JSON: expected a finite JSON number, "
                             "got -Infinity at column 75"]),
    "duplicate key": (1, ["line 1: step: duplicate key: expected each key once per object, got "
                          "'step' 2 times (JSON readers keep only one)"]),
}


@pytest.fixture(scope="module")
def rollout_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("rollouts")
    paths = {}
    for i, (name, make) in enumerate(ROLLOUT_CASES.items()):
        paths[name] = folder / f"case{i}.jsonl"
        paths[name].write_bytes(make())
    return paths


@pytest.mark.parametrize("name", list(ROLLOUT_CASES))
def test_validate_each_bad_rollout_file(name: str, rollout_files: dict[str, Path]) -> None:
    result = cli("validate", rollout_files[name], big=name in BIG)
    if name == "random bytes":
        assert result.code == 1 and "not UTF-8" in result.out
        return
    code, expected = VALIDATE_EXPECTED[name]
    assert (result.code, problems(result.out)) == (code, expected), result.out


@pytest.mark.parametrize("name", list(ROLLOUT_CASES))
def test_infer_each_bad_rollout_file(name: str, rollout_files: dict[str, Path]) -> None:
    path = rollout_files[name]
    result = cli("infer", path, big=name in BIG)
    if name in ("CRLF line ends", "50 MB line"):
        assert result.code == 0 and json.loads(result.out)["properties"]["observation"]
        return
    assert result.code == 2
    code, expected = VALIDATE_EXPECTED.get(name, (1, []))
    if name == "empty":
        assert result.err == f"error: {path}: no records\n"
    elif expected:  # infer refuses the first bad line with the same words validate uses
        assert result.err == f"error: {path}: {expected[0]}\n"
    else:
        assert result.err.startswith(f"error: {path}: line 1: not UTF-8: ")


@pytest.mark.parametrize("name", sorted(set(ROLLOUT_CASES) - {"50 MB line",
                                                              "50 MB line cut mid-write"}))
def test_batch_reads_each_bad_rollout_file(name: str, rollout_files: dict[str, Path]) -> None:
    """`batch` stops at the first bad line with exit 1 and names it (nothing silently dropped)."""
    result = cli("batch", rollout_files[name], "--map", CARTPOLE_MAP, big=name in BIG)
    if name == "CRLF line ends":  # a clean file: the map asks for value, which it lacks
        assert result.code == 1 and result.err.startswith("error: missing sample field: value")
        return
    assert result.code == 1
    first = result.err.splitlines()[0]
    code, expected = VALIDATE_EXPECTED.get(name, (1, []))
    if name == "empty":
        assert first == "error: episodes: nothing to collate: expected at least one episode, got none"
    elif expected:
        assert first == f"error: {expected[0]}"
    else:
        assert first.startswith("error: line 1: not UTF-8: ")


@pytest.mark.parametrize("name", sorted(set(ROLLOUT_CASES) - {"CRLF line ends", "50 MB line"}))
def test_runs_reads_each_bad_file_as_a_run_log(name: str, rollout_files: dict[str, Path]) -> None:
    """`runs` reads JSON Lines too: the same files are bad run logs, said in words."""
    result = cli("runs", rollout_files[name], big=name in BIG)
    assert result.code in (1, 2) and result.err.startswith("error: ")
    if name == "a million fields":
        assert result.err == ("error: line 1: too many keys: expected at most 100 keys (a "
                              "RunRecord has 13 fields), got 1000000 keys\n")


# -- memory that grows with a file's runs or episodes -------------------------------------------
# (a million runs or episodes, run in a subprocess under RLIMIT_AS: tests/test_bounds.py)

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_memory  # noqa: E402


def _peak_per_item(argv: list[str | Path], make: Callable[[Path, int], None], tmp_path: Path,
                   small: int, big: int) -> float:
    """Bytes of traced peak memory per item (run, episode) of a file of `big` items beyond one
    of `small`; a first run on a tiny file imports what the command needs (not measured)."""
    paths = []
    for n in (10, small, big):
        paths.append(tmp_path / f"{n}.jsonl")
        make(paths[-1], n)
    cli(*argv[:1], paths[0], *argv[1:])
    peaks = [cli(*argv[:1], path, *argv[1:]).peak_mb for path in paths[1:]]
    return (peaks[1] - peaks[0]) * 2**20 / (big - small)


@pytest.fixture
def small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files read 64 KiB at a time: what is measured is what is kept, not the read buffer."""
    import gyre_contract.io._lines as lines

    monkeypatch.setattr(lines, "CHUNK_BYTES", 2**16)


def test_runs_keeps_a_few_numbers_per_run(tmp_path: Path, small_reads: None) -> None:
    """About 100 bytes a run (`Summary`: each run's times and final metrics in arrays), never
    the runs themselves (1.3 KB each once, traced; a run log of a million runs took 2.7 GB)."""

    def make(path: Path, n: int) -> None:
        bench_memory.make("run-log-1m", path, n)

    assert _peak_per_item(["runs"], make, tmp_path, 200, 800) < 500


def test_batch_keeps_columns_not_lines_per_episode(tmp_path: Path, small_reads: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Many one-step episodes: about 150 bytes an episode, traced (its columns, its id once, its
    row of the batch), never the lines or a dict of ids (530 bytes an episode once). The file's
    columns are a fast path: `GYRE_FAST_PATHS=0` collates `Episode` objects, as it always did."""
    monkeypatch.setenv("GYRE_FAST_PATHS", "1")

    def make(path: Path, n: int) -> None:
        bench_memory.make("episodes-1m", path, n)

    assert _peak_per_item(["batch", "--map", CARTPOLE_MAP], make, tmp_path, 2000, 8000) < 350


# -- schema files --------------------------------------------------------------------------------

def _deep_schema(levels: int) -> bytes:
    return b'{"type":"object","properties":{"x":' * levels + b"{}" + b"}}" * levels


def _schema(**changes: object) -> bytes:
    return json.dumps({**GOOD_SCHEMA, **changes}).encode()


SCHEMA_CASES: dict[str, tuple[Callable[[], bytes], str | None]] = {
    # name: (file bytes, the error after "error: PATH: ", or None when the schema is fine)
    "empty": (lambda: b"", "not JSON: Expecting value at line 1 column 1"),
    "random bytes": (_random_bytes, "not UTF-8 text (byte 1)"),
    "UTF-8 BOM": (lambda: b"\xef\xbb\xbf" + _schema(),
                  "not JSON: Unexpected UTF-8 BOM (decode using utf-8-sig) at line 1 column 1"),
    "CRLF line ends": (lambda: json.dumps(GOOD_SCHEMA, indent=1).replace("\n", "\r\n").encode(),
                       None),
    "lone surrogate escape": (lambda: _schema(title="\\ud800").replace(b"\\\\", b"\\"),
                              "not JSON: lone surrogate \\ud800 in a string (not valid Unicode)"),
    "lone surrogate bytes": (lambda: _schema(title="X").replace(b'"X"', b'"\xed\xa0\x80"'),
                             "not UTF-8 text (byte 104)"),
    "nesting 100,000 deep": (lambda: _deep_schema(DEEP), "not JSON: nested too deeply"),
    "nesting 100 deep (parses)": (lambda: _deep_schema(100),
                                  "#" + "/properties/x" * 65 + ": nested deeper than 64 "
                                  "(MAX_DEPTH)"),
    "50 MB file": (lambda: b'{"description": "' + b"x" * BIG_LINE + b'"}',
                   "schema file is {size} bytes, more than the limit of 8388608 "
                   "(MAX_SCHEMA_BYTES)"),
    "a million fields": (lambda: b'{"type":"object","properties":{'
                         + b",".join(b'"k%d":{}' % i for i in range(MILLION)) + b"}}",
                         "schema file is {size} bytes, more than the limit of 8388608 "
                         "(MAX_SCHEMA_BYTES)"),
    "5,001 fields": (lambda: b'{"type":"object","properties":{'
                     + b",".join(b'"k%d":{}' % i for i in range(5001)) + b"}}",
                     "more than 5000 fields (MAX_FIELDS)"),
    "250,000 fields (under the byte limit)": (
        lambda: b'{"type":"object","properties":{'
        + b",".join(b'"k%d":1' % i for i in range(250_000)) + b"}}",
        "more than 200000 subschemas (MAX_NODES)"),
    "integer beyond int64": (lambda: _schema(properties={"obs": {
        "type": "array", "items": {"type": "number"}, "minItems": 2**70, "maxItems": 2**70}}),
        None),
    "integer of 5,000 digits": (lambda: _schema().replace(b'"integer"}', b'"integer", "maximum": '
                                                          + b"9" * 5000 + b"}"),
                                "not JSON: integer literal with more than 4300 digits"),
    "NaN literal": (lambda: _schema().replace(b'"integer"}', b'"integer", "maximum": NaN}'),
                    "not JSON: NaN is not a JSON number"),
    "Infinity literal": (lambda: _schema().replace(b'"integer"}', b'"integer", "maximum": '
                                                   b"Infinity}"),
                         "not JSON: Infinity is not a JSON number"),
    "duplicate key": (lambda: _schema().replace(b'"type": "object"',
                                                b'"type": "object", "type": "array"'),
                      'not JSON: duplicate key "type" (JSON readers keep only one)'),
}
BIG_SCHEMAS = {"nesting 100,000 deep", "50 MB file", "a million fields",
               "250,000 fields (under the byte limit)"}


@pytest.fixture(scope="module")
def schema_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("schemas")
    paths = {}
    for i, (name, (make, _)) in enumerate(SCHEMA_CASES.items()):
        paths[name] = folder / f"schema{i}.json"
        paths[name].write_bytes(make())
    return paths


@pytest.mark.parametrize("name", list(SCHEMA_CASES))
def test_diff_each_bad_schema_on_either_side(name: str, schema_files: dict[str, Path]) -> None:
    path, message = schema_files[name], SCHEMA_CASES[name][1]
    sides = [("diff", path, STEP_SCHEMA), ("diff", STEP_SCHEMA, path)]
    for argv in sides[:1] if name in BIG_SCHEMAS else sides:  # one load_schema serves both
        result = cli(*argv, big=name in BIG_SCHEMAS)
        if message is None:
            assert result.code in (0, 1) and "summary" in result.out.lower()
        else:
            message = message.format(size=path.stat().st_size)
            assert (result.code, result.err) == (2, f"error: {path}: {message}\n")


@pytest.mark.parametrize("name", sorted(set(SCHEMA_CASES) - {"5,001 fields"}))  # a diff limit
def test_validate_with_each_bad_schema(name: str, schema_files: dict[str, Path]) -> None:
    path, message = schema_files[name], SCHEMA_CASES[name][1]
    result = cli("validate", ROLLOUTS, "--schema", path, big=name in BIG_SCHEMAS)
    if message is None:
        assert result.code == 0
    else:
        message = message.format(size=path.stat().st_size)
        assert (result.code, result.err) == (2, f"error: {path}: {message}\n")


# -- map files -----------------------------------------------------------------------------------

def _map(**changes: object) -> bytes:
    return json.dumps({**GOOD_MAP, **changes}).encode()


MAP_CASES: dict[str, tuple[Callable[[], bytes], str | None]] = {
    "empty": (lambda: b"", "not JSON: Expecting value at line 1 column 1"),
    "random bytes": (_random_bytes, "not UTF-8 text (byte 1)"),
    "UTF-8 BOM": (lambda: b"\xef\xbb\xbf" + _map(),
                  "not JSON: Unexpected UTF-8 BOM (decode using utf-8-sig) at line 1 column 1"),
    "CRLF line ends": (lambda: CARTPOLE_MAP.read_bytes().replace(b"\n", b"\r\n"), None),
    "lone surrogate escape": (lambda: _map(comment="\\ud800").replace(b"\\\\", b"\\"),
                              "not JSON: lone surrogate \\ud800 in a string (not valid Unicode)"),
    "lone surrogate bytes": (lambda: _map(comment="X").replace(b'"X"', b'"\xed\xa0\x80"'),
                             "not UTF-8 text (byte 100)"),
    "nesting 100,000 deep": (lambda: b'{"a":' * DEEP + b"1" + b"}" * DEEP,
                             "not JSON: nested too deeply"),
    "50 MB file": (lambda: b'{"comment": "' + b"x" * BIG_LINE + b'"}',
                   "field map file is {size} bytes, more than the limit of 1048576 "
                   "(MAX_MAP_BYTES)"),
    "a million fields": (lambda: b'{"gyre_field_map":1,"fields":{'
                         + b",".join(b'"k%d":{"from":"reward"}' % i for i in range(MILLION))
                         + b"}}",
                         "field map file is {size} bytes, more than the limit of 1048576 "
                         "(MAX_MAP_BYTES)"),
    "integer beyond int64": (lambda: _map(fields={"advantage": {
        "op": "gae", "from": ["reward", "value", "terminated", "truncated", "next_value"],
        "gamma": 2**64, "lam": 0.95}}),
        'fields.advantage: "gamma" must be a number in [0, 1], got 18446744073709551616'),
    "integer of 5,000 digits": (lambda: _map().replace(b'"gyre_field_map": 1',
                                                       b'"gyre_field_map": ' + b"9" * 5000),
                                "not JSON: integer literal with more than 4300 digits"),
    "NaN literal": (lambda: _map().replace(b'"gyre_field_map": 1', b'"gyre_field_map": NaN'),
                    "not JSON: NaN is not a JSON number"),
    "Infinity literal": (lambda: _map().replace(b'"gyre_field_map": 1',
                                                b'"gyre_field_map": -Infinity'),
                         "not JSON: -Infinity is not a JSON number"),
    "duplicate key": (lambda: _map().replace(b'"fields"', b'"fields": {}, "fields"'),
                      'not JSON: duplicate key "fields" (JSON readers keep only one)'),
}
BIG_MAPS = {"nesting 100,000 deep", "50 MB file", "a million fields"}


@pytest.fixture(scope="module")
def map_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("maps")
    paths = {}
    for i, (name, (make, _)) in enumerate(MAP_CASES.items()):
        paths[name] = folder / f"map{i}.json"
        paths[name].write_bytes(make())
    return paths


@pytest.mark.parametrize("name", list(MAP_CASES))
def test_batch_with_each_bad_map(name: str, map_files: dict[str, Path]) -> None:
    path, message = map_files[name], MAP_CASES[name][1]
    result = cli("batch", ROLLOUTS, "--map", path, big=name in BIG_MAPS)
    if message is None:
        assert result.code == 0 and "reward" in result.out
    else:
        message = message.format(size=path.stat().st_size)
        assert (result.code, result.err) == (2, f"error: {path}: {message}\n")


# -- names from data never break the one-line message -------------------------------------------

def test_line_breaks_in_names_stay_on_one_line(tmp_path: Path) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {
        "a\nb": {"type": "array", "minItems": "x"}}}))
    result = cli("diff", schema, STEP_SCHEMA)
    assert result.err == (f"error: {schema}: #/properties/a\\nb/minItems: expected a "
                          "non-negative integer, got str 'x'\n")
    fmap = tmp_path / "m.json"
    fmap.write_text(json.dumps({"gyre_field_map": 1, "fields": {"a\r\nb": {"from": "reward",
                                                                          "cast": "x\ny"}}}))
    result = cli("batch", ROLLOUTS, "--map", fmap)
    assert result.code == 2 and "a\\r\\nb" in result.err


@pytest.mark.parametrize(("kind", "content"), [
    ("schema", b'{"type":"object","properties":{"\\ud800":{"type":"number"}}}'),
    ("map", b'{"gyre_field_map":1,"fields":{"\\udc00":{"from":"reward"}}}'),
])
def test_lone_surrogates_in_a_real_process(kind: str, content: bytes, tmp_path: Path) -> None:
    """A real stdout/stderr encodes strictly: a lone surrogate must be refused before output."""
    path = tmp_path / f"{kind}.json"
    path.write_bytes(content)
    argv = (["diff", str(path), str(STEP_SCHEMA)] if kind == "schema"
            else ["batch", str(ROLLOUTS), "--map", str(path)])
    proc = subprocess.run([sys.executable, "-m", "gyre_contract", *argv], capture_output=True,
                          cwd=ROOT, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == b""
    assert b"Traceback" not in proc.stderr and proc.stderr.count(b"\n") == 1
    assert b"lone surrogate \\u" in proc.stderr


# -- foreign schemas: the JSON-Schema-Test-Suite, read where it lies ------------------------------

SUITE = ROOT / "tests" / "data" / "json-schema-test-suite" / "tests" / "draft2020-12"  # vendored


def suite_schemas() -> list[tuple[str, object]]:
    assert SUITE.is_dir(), f"the vendored JSON-Schema-Test-Suite is missing: {SUITE}"
    return [(f"{path.stem}[{i}]", case["schema"]) for path in sorted(SUITE.glob("*.json"))
            for i, case in enumerate(json.loads(path.read_text(encoding="utf-8")))]


@pytest.fixture
def no_reach(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict:
    """Fail loudly if anything connects a socket, resolves a host, or opens the secret file."""
    import builtins
    import io as io_module
    import os
    import socket
    import urllib.request

    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"$defs": {"a": {"type": "number"}},
                                  "type": "object", "properties": {"a": {"type": "number"}}}))
    calls: list[str] = []

    def refuse(what: str) -> Callable[..., object]:
        def fail(*args: object, **kwargs: object) -> object:
            calls.append(f"{what}{args[:2]}")
            raise AssertionError(f"{what} called with {args[:2]}")
        return fail

    monkeypatch.setattr(socket.socket, "connect", refuse("socket.connect"))
    monkeypatch.setattr(socket, "create_connection", refuse("socket.create_connection"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("socket.getaddrinfo"))
    monkeypatch.setattr(urllib.request, "urlopen", refuse("urlopen"))
    for module, name in ((builtins, "open"), (io_module, "open"), (os, "open")):
        original = getattr(module, name)

        def guarded(file: object, *args: object, _original: Callable = original,
                    _name: str = name, **kwargs: object) -> object:
            if "secret" in str(file):
                calls.append(f"{_name}({file})")
                raise AssertionError(f"{_name} opened {file}")
            return _original(file, *args, **kwargs)

        monkeypatch.setattr(module, name, guarded)
    return {"secret": secret, "calls": calls}


def test_every_suite_schema_on_either_side_of_diff_and_in_validate(
        tmp_path: Path, no_reach: dict) -> None:
    """test_fieldtable covers field_table() on the suite; this runs the CLI on every schema,
    raw and as a property, against a table `infer` made from real data, on both sides."""
    inferred = tmp_path / "inferred.json"
    assert cli("infer", ROLLOUTS, "-o", inferred).code == 0
    rollout = tmp_path / "one.jsonl"
    rollout.write_bytes(GOOD_LINE + b"\n")
    path = tmp_path / "foreign.json"
    codes = {0: 0, 1: 0, 2: 0}
    remote_refused = 0
    for _name, schema in suite_schemas():
        for doc in (schema, {"type": "object", "properties": {"x": schema}}):
            path.write_text(json.dumps(doc))
            for argv in (("diff", path, inferred), ("diff", inferred, path)):
                result = cli(*argv, trace=False)
                codes[result.code] += 1
                remote_refused += "never fetched" in result.err
        result = cli("validate", rollout, "--schema", path, trace=False)
        codes[result.code] += 1
    assert no_reach["calls"] == []
    assert codes[0] + codes[1] > 400 and codes[2] > 100  # most read, the rest refused
    assert remote_refused > 10  # refRemote.json and friends: refused, not fetched


def _ref_cases(secret: Path) -> dict[str, dict]:
    """Remote and file refs in every place a subschema can hold one."""
    refs = [f"file://{secret}", f"file://{secret}#/$defs/a", str(secret), "secret.json",
            "secret.json#/$defs/a", "../secret.json", "https://example.invalid/s.json",
            "http://127.0.0.1:9/s.json#/a", "//example.invalid/s.json"]
    cases = {}
    for i, ref in enumerate(refs):
        cases[f"properties {ref}"] = {"type": "object", "properties": {"x": {"$ref": ref}}}
        where = ["items", "allOf", "$defs", "not"][i % 4]
        inner: dict = {"$ref": ref}
        holder = {"items": {"type": "array", "items": inner},
                  "allOf": {"allOf": [inner]},
                  "$defs": {"$ref": "#/$defs/y"},
                  "not": {"not": inner}}[where]
        doc: dict = {"type": "object", "properties": {"x": holder}}
        if where == "$defs":
            doc["$defs"] = {"y": inner}
        cases[f"{where} {ref}"] = doc
    cases["relative to a file $id"] = {"$id": f"file://{secret.parent}/", "type": "object",
                                       "properties": {"x": {"$ref": "secret.json"}}}
    return cases


def test_remote_and_file_refs_are_refused_and_never_followed(tmp_path: Path,
                                                             no_reach: dict) -> None:
    rollout = tmp_path / "one.jsonl"
    rollout.write_bytes(GOOD_LINE + b"\n")
    path = tmp_path / "refs.json"
    for name, doc in _ref_cases(no_reach["secret"]).items():
        path.write_text(json.dumps(doc))
        for argv in (("diff", path, STEP_SCHEMA), ("diff", STEP_SCHEMA, path),
                     ("validate", rollout, "--schema", path)):
            result = cli(*argv)
            assert result.code == 2, (name, argv[0], result)
            assert "points outside this document; only local refs such as '#/$defs/Name' are " \
                   "resolved, and remote or file refs are never fetched" in result.err, name
    assert no_reach["calls"] == []


def test_dynamic_refs_and_meta_schemas_are_never_followed(tmp_path: Path,
                                                          no_reach: dict) -> None:
    rollout = tmp_path / "one.jsonl"
    rollout.write_bytes(GOOD_LINE + b"\n")
    path = tmp_path / "dyn.json"
    secret = no_reach["secret"]
    for doc in ({"type": "object", "properties": {"x": {"$dynamicRef": f"file://{secret}"}}},
                {"$schema": f"file://{secret}", "type": "object", "properties": {"x": {}}},
                {"type": "object", "properties": {"x": {"$dynamicRef": "https://e.invalid/a"}},
                 "$vocabulary": {f"file://{secret}": True}}):
        path.write_text(json.dumps(doc))
        for argv in (("diff", path, STEP_SCHEMA), ("validate", rollout, "--schema", path)):
            assert cli(*argv).code in (0, 1, 2)
    assert no_reach["calls"] == []


def test_ref_cycles_are_detected(tmp_path: Path) -> None:
    rollout = tmp_path / "one.jsonl"
    rollout.write_bytes(GOOD_LINE + b"\n")
    path = tmp_path / "cycle.json"
    path.write_text(json.dumps({"type": "object", "properties": {"reward": {"$ref": "#/$defs/a"}},
                                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}))
    result = cli("diff", path, STEP_SCHEMA)
    assert (result.code, result.err) == (2, f"error: {path}: #/properties/reward: $ref cycle: "
                                            "#/$defs/a -> #/$defs/b -> #/$defs/a\n")
    result = cli("validate", rollout, "--schema", path)
    assert (result.code, result.err) == (2, "error: schema: validation never ends: a $ref leads "
                                            "back to itself without descending into the record "
                                            "($ref cycle)\n")
    path.write_text(json.dumps({"$ref": "#"}))
    assert cli("validate", rollout, "--schema", path).code == 2


# -- nothing lost: whole lines, crashed writers, concurrent writers, growing files ---------------

def steps(eid: str, count: int, *, pad: int = 0, done: bool = True) -> list[dict]:
    return [record(step=t, episode_id=eid, terminated=done and t == count - 1,
                   info={"pad": "x" * pad}) for t in range(count)]


def test_write_steps_documents_its_guarantee() -> None:
    from gyre_contract.io._writer import write_steps

    doc = " ".join((write_steps.__doc__ or "").split())
    assert "the OS only ever receives whole lines" in doc
    assert "with `fsync=True` it is also on disk" in doc
    assert "can leave at most one partial last line, which the reader reports" in doc
    assert "O_APPEND" in doc


def test_write_steps_hands_the_os_whole_lines_and_fsyncs_when_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from gyre_contract.io import _writer as writer
    monkeypatch.setattr(writer, "WRITE_BATCH_BYTES", 500)
    writes: list[bytes] = []
    fsyncs: list[int] = []
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: (writes.append(bytes(data)),
                                                       real_write(fd, data))[1])
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd))

    def failing() -> object:
        yield from steps("a", 7, pad=100, done=False)
        raise RuntimeError("sampler crashed")

    path = tmp_path / "r.jsonl"
    with pytest.raises(RuntimeError, match="sampler crashed"):
        writer.write_steps(path, failing(), fsync=True)
    assert len(writes) > 1 and all(chunk.endswith(b"\n") for chunk in writes)
    assert len(fsyncs) == 1  # even when the steps raise
    assert path.read_bytes() == b"".join(writes)
    result = cli("validate", path)
    assert result.code == 0 and "7 lines, 7 valid steps, 1 episode (1 open" in result.out


_CRASHING_WRITER = """
import os, signal, sys
import orjson
from gyre_contract.io._writer import write_steps
path, count = sys.argv[1], int(sys.argv[2])
rec = lambda t: {"observation": [0.0, 0.0, 0.0, 0.0], "action": 1, "reward": 1.0, "step": t,
                 "episode_id": "a", "terminated": False, "truncated": False,
                 "policy_version": 0}
write_steps(path, [rec(t) for t in range(count)], append=True)
line = orjson.dumps(rec(count)) + b"\\n"
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
os.write(fd, line[: len(line) // 2])  # the process dies in the middle of this line
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_writer_killed_mid_line_leaves_one_partial_line_reported_by_number(
        tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    proc = subprocess.run([sys.executable, "-c", _CRASHING_WRITER, str(path), "10"],
                          cwd=ROOT, timeout=120, check=False, capture_output=True)
    assert proc.returncode == -9  # SIGKILL: the writer really died
    partial = len(path.read_bytes()) - len(path.read_bytes().rsplit(b"\n", 1)[0]) - 1
    result = cli("validate", path)
    assert result.code == 1
    assert problems(result.out) == [
        "line 11: truncated line (the writer was cut off mid-write?): expected a complete JSON "
        f"line ending in a newline, got {partial} bytes at the end of the file that do not "
        "parse, with no newline"]
    result = cli("validate", path, "--allow-partial-tail")
    assert result.code == 0
    assert (f"partial tail: {partial} bytes after line 10 not checked (no newline yet)"
            in result.out)
    assert "10 lines" not in result.out and "11 lines, 10 valid steps" in result.out


_ENDLESS_WRITER = """
import sys
from gyre_contract.io._writer import write_steps
path = sys.argv[1]
pad = "x" * 200_000
t = 0
while True:
    write_steps(path, [{"observation": [0.0, 0.0, 0.0, 0.0], "action": 1, "reward": 1.0,
                        "step": t, "episode_id": "a", "terminated": False, "truncated": False,
                        "policy_version": 0, "info": {"pad": pad}}], append=True)
    t += 1
"""


def _wait_for_size(path: Path, size: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while (not path.exists() or path.stat().st_size < size) and time.monotonic() < deadline:
        assert proc.poll() is None, "the writer stopped on its own"
        time.sleep(0.01)


def test_a_writer_killed_at_any_moment_loses_at_most_its_last_line(tmp_path: Path) -> None:
    for attempt in range(3):
        path = tmp_path / f"r{attempt}.jsonl"
        proc = subprocess.Popen([sys.executable, "-c", _ENDLESS_WRITER, str(path)], cwd=ROOT)
        try:
            _wait_for_size(path, 2_000_000 * (attempt + 1), proc)
        finally:
            proc.kill()
            proc.wait(30)
        result = cli("validate", path)
        found = problems(result.out)
        last = path.read_bytes().count(b"\n") + 1  # the line after the last newline
        assert found == [] or (len(found) == 1 and found[0].startswith(
            f"line {last}: truncated line")), found
        assert cli("validate", path, "--allow-partial-tail").code == 0


_APPENDER = """
import sys
from gyre_contract.io._writer import write_steps
path, eid, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for start in range(0, n, 25):
    write_steps(path, [{"observation": [0.0, 0.0, 0.0, 0.0], "action": 1, "reward": 1.0,
                        "step": t, "episode_id": eid, "terminated": t == n - 1,
                        "truncated": False, "policy_version": 0, "info": {"pad": "y" * 500}}
                       for t in range(start, min(start + 25, n))], append=True)
"""


def test_two_real_processes_appending_to_one_file(tmp_path: Path) -> None:
    """Also in test_rollout (multiprocessing); here as two separate interpreters + the CLI."""
    path = tmp_path / "shared.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", _APPENDER, str(path), eid, "600"],
                              cwd=ROOT) for eid in ("p", "q")]
    assert [p.wait(120) for p in procs] == [0, 0]
    result = cli("validate", path, "--require-complete")
    assert result.code == 0, result.out
    assert "1200 lines, 1200 valid steps, 2 episodes (0 open, 2 terminated" in result.out


def test_an_interleaved_line_is_never_unnoticed(tmp_path: Path) -> None:
    """What an unsafe writer (no O_APPEND, or a write split in two) would leave: found."""
    a, b = orjson.dumps(record(episode_id="a")), orjson.dumps(record(episode_id="b"))
    path = tmp_path / "r.jsonl"
    path.write_bytes(a[:40] + b + b"\n" + a[40:] + b"\n")
    result = cli("validate", path)
    assert result.code == 1
    assert [p.split(":")[0] for p in problems(result.out)] == ["line 1", "line 2"]


_SLOW_WRITER = """
import os, sys, time
from pathlib import Path
import orjson
path, go = sys.argv[1], Path(sys.argv[2])
line = orjson.dumps({"observation": [0.0, 0.0, 0.0, 0.0], "action": 1, "reward": 1.0,
                     "step": 1, "episode_id": "a", "terminated": True, "truncated": False,
                     "policy_version": 0}) + b"\\n"
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
os.write(fd, line[:30])
Path(sys.argv[2] + ".half").touch()
while not go.exists():
    time.sleep(0.01)
os.write(fd, line[30:])
"""


def test_validating_a_file_still_being_appended_to(tmp_path: Path) -> None:
    path, go = tmp_path / "live.jsonl", tmp_path / "go"
    path.write_bytes(orjson.dumps(record(terminated=False)) + b"\n")
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, str(path), str(go)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "go.half").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        result = cli("validate", path, "--allow-partial-tail")
        assert result.code == 0
        assert "counts: 2 lines, 1 valid step, 1 episode (1 open" in result.out
        assert "partial tail: 30 bytes after line 1 not checked (no newline yet)" in result.out
        assert cli("validate", path).code == 1  # without the flag the cut line is a problem
    finally:
        go.touch()
        assert proc.wait(60) == 0
    result = cli("validate", path, "--require-complete")
    assert result.code == 0 and "2 lines, 2 valid steps" in result.out


# -- no code from data ----------------------------------------------------------------------------

@pytest.fixture
def tripwire(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A module `gyre_tripwire` on the path that records being imported, and guards on import,
    eval, exec and compile of anything naming it."""
    import builtins
    import importlib

    marker = tmp_path / "imported.txt"
    (tmp_path / "gyre_tripwire.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
        "def boom(*a, **k):\n    raise SystemExit('boom')\nBoom = boom\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    calls: list[str] = []
    for module, name in ((builtins, "__import__"), (importlib, "import_module"),
                         (builtins, "eval"), (builtins, "exec"), (builtins, "compile")):
        original = getattr(module, name)

        def guarded(*args: object, _original: Callable = original, _name: str = name,
                    **kwargs: object) -> object:
            if args and "tripwire" in str(args[0]):
                calls.append(f"{_name}({args[0]!r})")
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, guarded)
    sys.modules.pop("gyre_tripwire", None)
    return {"marker": marker, "calls": calls}


HOSTILE_STRINGS = ["gyre_tripwire", "gyre_tripwire:boom", "__import__('gyre_tripwire')",
                   "eval(\"__import__('gyre_tripwire')\")", "os.system", "gyre_tripwire.py",
                   "file:///etc/passwd"]


def test_map_files_never_import_eval_or_open(tmp_path: Path, tripwire: dict) -> None:
    path = tmp_path / "hostile_map.json"
    specs = [{"op": s} for s in HOSTILE_STRINGS] + [{"from": s} for s in HOSTILE_STRINGS] + [
        {"op": "__import__", "from": "gyre_tripwire"}, {"op": "eval", "from": "x"},
        {"from": "reward", "cast": "gyre_tripwire:Boom"},
        {"op": "gae", "from": ["reward", "value", "terminated", "truncated", "next_value"],
         "gamma": "__import__('gyre_tripwire')", "lam": 0.95}]
    for spec in specs:
        path.write_text(json.dumps({"gyre_field_map": 1, "comment": HOSTILE_STRINGS[2],
                                    "fields": {"reward": spec}}))
        assert cli("batch", ROLLOUTS, "--map", path).code in (1, 2)
    assert tripwire["calls"] == [] and not tripwire["marker"].exists()
    assert "gyre_tripwire" not in sys.modules


def test_schemas_and_rollouts_never_import_eval_or_open(tmp_path: Path, tripwire: dict) -> None:
    schema = tmp_path / "hostile_schema.json"
    rollout = tmp_path / "hostile.jsonl"
    rollout.write_bytes(b"".join(orjson.dumps(record(
        step=i, terminated=i == len(HOSTILE_STRINGS) - 1, info={"model": s, "loss": s}))
        + b"\n" for i, s in enumerate(HOSTILE_STRINGS)))
    for text in HOSTILE_STRINGS:
        doc = {"$schema": text, "$id": f"urn:{text}", "title": text, "type": "object",
               "properties": {"reward": {"type": "number", "x-gyre-role": text,
                                         "x-gyre-dtype": text, "default": text,
                                         "format": text, "pattern": "^[a-z]*$"},
                              text: {"$comment": text, "examples": [text]}}}
        schema.write_text(json.dumps(doc))
        assert cli("diff", schema, STEP_SCHEMA).code in (0, 1, 2)
        assert cli("diff", STEP_SCHEMA, schema).code in (0, 1, 2)
        assert cli("validate", rollout, "--schema", schema).code in (0, 1, 2)
    assert cli("validate", rollout).code == 0
    assert cli("infer", rollout).code == 0
    assert tripwire["calls"] == [] and not tripwire["marker"].exists()
    assert "gyre_tripwire" not in sys.modules


def test_model_and_loss_import_only_what_the_command_line_names(tmp_path: Path,
                                                                tripwire: dict) -> None:
    rollout = tmp_path / "r.jsonl"
    rollout.write_bytes(orjson.dumps(record(info={"model": "gyre_tripwire:Boom"})) + b"\n")
    (tmp_path / "named_model.py").write_text(
        "from gyre_contract.core._models import RolloutStep\nclass Step(RolloutStep):\n    pass\n")
    (tmp_path / "named_loss.py").write_text(
        "import numpy as np\ndef loss(batch):\n    return float(np.mean(batch['reward']))\n")
    assert cli("validate", rollout, "--model", "named_model:Step").code == 0
    assert cli("validate", rollout, "--model", str(tmp_path / "named_model.py") + ":Step"
               ).code == 0
    result = cli("batch", ROLLOUTS, "--map", CARTPOLE_MAP, "--loss", "named_loss:loss")
    assert result.code == 0 and "loss" in result.out
    assert "named_model" in sys.modules and "named_loss" in sys.modules
    assert tripwire["calls"] == [] and not tripwire["marker"].exists()
    for command, option in (("validate", "--model"), ("batch", "--loss")):
        out = io.StringIO()
        assert run([command, "--help"], out, io.StringIO()) == 0
        text = " ".join(out.getvalue().split())
        assert f"{option} " in text and "Only the module named here is imported" in text
        assert "nothing is ever imported because a data or" in text
    sys.modules.pop("named_model", None)
    sys.modules.pop("named_loss", None)
