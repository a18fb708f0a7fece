"""Reliability round 2, hangs and unbounded memory: each case of the issue ends with a verdict.

Inputs that took minutes (a backtracking regex, `uniqueItems` on 5,000 objects) or gigabytes (a
zip-bomb `.npz`, a skewed batch, `per_step` chains, `/dev/zero` as a file) run through the real
CLI in a subprocess. The subprocess `timeout=` is a safety net against a hang taking the test
run down, not a timing assertion; memory is bounded with `RLIMIT_AS` where the issue names a
budget.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gyre_contract.cli._app import run

ROOT = Path(__file__).resolve().parent.parent
SAFETY_NET_S = 600
"""Only a hang reaches this; the commands below finish in seconds."""


def gyre(*argv: str | Path, memory_gb: float | None = None,
         timeout: float = SAFETY_NET_S) -> subprocess.CompletedProcess[str]:
    """Run `python -m gyre_contract ARGV` in a subprocess, optionally under RLIMIT_AS."""
    code = "import sys; from gyre_contract.cli import main; sys.exit(main(sys.argv[1:]))"
    if memory_gb is not None:
        limit = int(memory_gb * 2**30)
        code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, "
                f"({limit}, {limit})); " + code)
    return subprocess.run([sys.executable, "-c", code, *map(str, argv)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=os.environ.copy())


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """The stderr of a refused input: one line, no traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def step(episode: str, n: int, done: bool, **extra: object) -> dict[str, object]:
    record: dict[str, object] = {
        "episode_id": episode, "step": n, "observation": [0.0, 0.0, 0.0, 0.0], "action": 0,
        "reward": 1.0, "terminated": done, "truncated": False, "policy_version": 0}
    record.update(extra)
    return record


def write_jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# --- validate --schema: regexes on RE2, uniqueItems hashed -----------------------------------

def test_backtracking_pattern_gets_a_verdict(tmp_path: Path) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object",
                                  "properties": {"episode_id": {"pattern": "^(a+)+$"}}}))
    rollouts = write_jsonl(tmp_path / "r.jsonl", [step("a" * 40 + "!", 0, True),
                                                 step("a" * 41, 0, True)])
    proc = gyre("validate", rollouts, "--schema", schema, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["holds"] is False
    assert "does not match" in proc.stdout and "line 1" not in proc.stderr


def test_backtracking_pattern_properties_get_a_verdict(tmp_path: Path) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"info": {
        "type": "object", "patternProperties": {"^(a+)+$": {"type": "string"}},
        "additionalProperties": {"type": "integer"}}}}))
    rollouts = write_jsonl(tmp_path / "r.jsonl", [step("e", 0, True, info={"a" * 40 + "!": 1})])
    proc = gyre("validate", rollouts, "--schema", schema)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bad = write_jsonl(tmp_path / "b.jsonl", [step("e", 0, True, info={"a" * 40 + "!": "x"})])
    assert gyre("validate", bad, "--schema", schema).returncode == 1


@pytest.mark.parametrize("pattern", ["(?=a)b", "(a)\\1", "(?<!x)y"])
def test_a_pattern_re2_cannot_run_is_an_unusable_schema(tmp_path: Path, pattern: str) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"properties": {"nothing_has_this": {"pattern": pattern}}}))
    rollouts = write_jsonl(tmp_path / "r.jsonl", [step("e", 0, True)])
    proc = gyre("validate", rollouts, "--schema", schema)
    assert proc.returncode == 2
    assert "cannot be run in linear time" in one_line_error(proc)


def nested_unevaluated(levels: int) -> dict[str, object]:
    node: dict[str, object] = {"type": "object"}
    for _ in range(levels):
        node = {"anyOf": [node, {"properties": {"zz": {}}}], "unevaluatedProperties": False}
    return {"type": "object", "properties": {"info": node}}


@pytest.mark.parametrize("levels, code", [(8, 1), (18, 2)])
def test_nested_unevaluated_keywords_are_bounded(tmp_path: Path, levels: int, code: int) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(nested_unevaluated(levels)))
    rollouts = write_jsonl(tmp_path / "r.jsonl", [step("e", 0, True, info={"a": 1})])
    proc = gyre("validate", rollouts, "--schema", schema)
    assert proc.returncode == code, proc.stdout + proc.stderr
    if code == 2:
        assert "(MAX_UNEVALUATED_NESTING)" in one_line_error(proc)


def testunevaluated_nesting_follows_local_refs() -> None:
    from gyre_contract.io._schemakeywords import unevaluated_nesting

    chain: dict[str, object] = {f"d{i}": {"unevaluatedItems": False,
                                          "anyOf": [{"$ref": f"#/$defs/d{i + 1}"}]}
                                for i in range(12)}
    chain["d12"] = {"$ref": "#/$defs/d0"}  # a cycle is walked once
    assert unevaluated_nesting({"$ref": "#/$defs/d0", "$defs": chain}) == 12


DATA_SCHEMAS = ROOT / "tests" / "data" / "schemas"


def ref_chain(depth: int) -> dict[str, object]:
    """`$defs` d0..d{depth}: each `allOf` two `$ref`s to the next (2**depth paths to the last)."""
    defs: dict[str, object] = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2}
                               for i in range(depth)}
    defs[f"d{depth}"] = {"type": "object"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


@pytest.mark.parametrize("depth", [20, pytest.param(30, marks=pytest.mark.slow)])
def test_refs_that_multiply_are_refused_when_the_schema_is_loaded(tmp_path: Path,
                                                                  depth: int) -> None:
    """1.5 KB whose `$ref`s expand to 4 million subschemas: 25 s per record (depth 30: never
    finished); now refused before any record is read, with the numbers."""
    schema = DATA_SCHEMAS / "ref_bomb_20.json"
    if depth != 20:
        schema = tmp_path / "bomb.json"
        schema.write_text(json.dumps(ref_chain(depth)))
    assert json.loads((DATA_SCHEMAS / "ref_bomb_20.json").read_text())["$defs"] == \
        ref_chain(20)["$defs"]
    rollouts = write_jsonl(tmp_path / "r.jsonl", [step("e", 0, True)])
    proc = gyre("validate", rollouts, "--schema", schema)
    assert proc.returncode == 2 and proc.stdout == ""
    expanded = {20: "4,194,302", 30: "4,294,967,294"}[depth]
    assert one_line_error(proc) == (
        f"error: schema: its $refs expand to {expanded} subschemas ({3 * depth + 3} written), "
        f"more than 200,000 (MAX_EXPANDED_SUBSCHEMAS): each record would be checked against "
        f"all of them; #/$defs/d0 alone expands to {int(expanded.replace(',', '')) - 1:,}")


def test_the_expanded_size_counts_each_ref_where_it_is_used() -> None:
    from gyre_contract.io._schemakeywords import expanded_size

    assert expanded_size({"type": "object"}) == (1, 1, None)
    # d2 = 1; d1 = 1 + 2 * (1 + d2) = 5; d0 = 1 + 2 * (1 + d1) = 13; the root {"$ref"} adds 1
    assert expanded_size(ref_chain(2)) == (14, 9, ("#/$defs/d0", 13))
    assert expanded_size(ref_chain(200))[0] > 2**200  # counted in linear time (memoised)
    unused = {"$defs": ref_chain(30)["$defs"], "type": "object"}
    assert expanded_size(unused)[0] == 1  # $defs count only where a $ref uses them


def test_a_recursive_schema_still_validates(tmp_path: Path) -> None:
    """A tree (a node whose children are `$ref`s to the node, a root that refers to itself)
    counts each recursion once: the record's own nesting pays for the levels."""
    from gyre_contract.io._schemakeywords import expanded_size

    tree_schema = json.loads((DATA_SCHEMAS / "ref_tree.json").read_text())
    assert expanded_size(tree_schema)[0] < 50

    def tree(levels: int, leaf: object = 1.0) -> dict[str, object]:
        node: dict[str, object] = {"value": leaf}
        for _ in range(levels):
            node = {"value": 1.0, "left": node, "right": {"value": 2.0}, "children": [node]}
        return node

    def validate(record: dict[str, object]) -> tuple[int, str]:
        rollouts = write_jsonl(tmp_path / "r.jsonl", [record])
        out = io.StringIO()
        code = run(["validate", str(rollouts), "--schema", str(DATA_SCHEMAS / "ref_tree.json")],
                   out, io.StringIO())
        return code, out.getvalue()

    assert validate({"tree": tree(6), "again": {"tree": tree(3)}})[0] == 0
    code, out = validate({"tree": tree(6), "again": {"tree": tree(3, "x")}})
    assert code == 1 and "line 1: again.tree.left.left.left.value: 'x' is not of type" in out


def test_unevaluated_properties_with_pattern_properties_is_refused(tmp_path: Path) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"patternProperties": {"^(a+)+$": {}},
                                  "unevaluatedProperties": False}))
    rollouts = write_jsonl(tmp_path / "r.jsonl", [step("e", 0, True)])
    proc = gyre("validate", rollouts, "--schema", schema)
    assert proc.returncode == 2
    assert "backtracking" in one_line_error(proc)


def test_ecma_unicode_escapes_and_end_anchor(tmp_path: Path) -> None:
    from gyre_contract.io._schemakeywords import compiled_pattern

    assert compiled_pattern("^\\u00e9$").search("é")
    assert not compiled_pattern("^a$").search("a\n")  # ECMA: `$` is the end, not before a \n


def test_unique_items_on_5000_objects(tmp_path: Path) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"properties": {"info": {"properties": {
        "items": {"type": "array", "uniqueItems": True}}}}}))
    objects = [{"k": i, "v": [i, {"x": str(i)}]} for i in range(5000)]
    good = write_jsonl(tmp_path / "g.jsonl", [step("e", 0, True, info={"items": objects})])
    bad = write_jsonl(tmp_path / "b.jsonl", [step("e", 0, True, info={
        "items": [*objects, {"v": [4999, {"x": "4999"}], "k": 4999.0}]})])
    assert gyre("validate", good, "--schema", schema).returncode == 0
    proc = gyre("validate", bad, "--schema", schema)
    assert proc.returncode == 1 and "item 5000 equals item 4999" in proc.stdout


def test_unique_items_follows_json_equality() -> None:
    from gyre_contract.io._schemakeywords import canonical

    assert canonical(1) == canonical(1.0)
    assert canonical(True) != canonical(1)
    assert canonical({"a": [1, None]}) == canonical({"a": [1.0, None]})
    assert canonical([0]) != canonical([False])


# --- infer on .npz: headers only -------------------------------------------------------------

def zip_bomb(path: Path, shape: tuple[int, ...], zeros_mb: int) -> Path:
    """An .npz whose one member declares `shape` (float32) and holds `zeros_mb` MB of zeros,
    compressed to a few hundred kB."""
    import zipfile

    from numpy.lib import format as npy

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("observation.npy", "w", force_zip64=True) as member:
            npy.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False,
                                                "shape": shape})
            block = bytes(2**20)
            for _ in range(zeros_mb):
                member.write(block)
    return path


def test_infer_reads_only_the_npy_headers_of_a_zip_bomb(tmp_path: Path) -> None:
    bomb = zip_bomb(tmp_path / "bomb.npz", (2**20, 2**10), zeros_mb=256)  # declares 4 GiB
    assert bomb.stat().st_size < 4 * 2**20
    proc = gyre("infer", bomb, memory_gb=2)
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    assert schema["properties"]["observation"]["x-gyre-dtype"] == "float32"
    assert schema["properties"]["observation"]["x-gyre-shape"] == ["B", "T"]


def test_npz_headers_match_numpy(tmp_path: Path) -> None:
    import numpy as np

    from gyre_contract.schema._infer import npz_headers

    path = tmp_path / "b.npz"
    np.savez_compressed(path, a=np.zeros((3, 4), np.int64), b=np.ones(3, np.bool_))
    assert npz_headers(path) == {"a": (np.dtype(np.int64), (3, 4)), "b": (np.dtype(np.bool_), (3,))}


def bad_npz(tmp_path: Path, kind: str) -> Path:
    import zipfile

    import numpy as np

    path = tmp_path / "bad.npz"
    if kind == "member not .npy":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("notes.txt", "hello")
    elif kind == "member with a bad magic":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("a.npy", b"hello world, not an array")
    elif kind == "corrupt zip":
        np.savez_compressed(path, a=np.zeros(1000))
        data = bytearray(path.read_bytes())
        data[40:200] = bytes(160)
        path.write_bytes(bytes(data))
    elif kind == "a .npy named .npz":
        np.save(tmp_path / "a.npy", np.zeros(3))
        (tmp_path / "a.npy").rename(path)
    elif kind == "truncated zip":
        np.savez(path, a=np.zeros(1000))
        path.write_bytes(path.read_bytes()[:-30])
    return path


@pytest.mark.parametrize("kind", ["member not .npy", "member with a bad magic", "corrupt zip",
                                  "a .npy named .npz", "truncated zip"])
def test_infer_on_a_broken_npz_is_one_line_exit_2(tmp_path: Path, kind: str) -> None:
    proc = gyre("infer", bad_npz(tmp_path, kind))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot read as .npz" in one_line_error(proc)


# --- batch: the padded size is checked before allocating --------------------------------------

def skewed_rollouts(path: Path, long_steps: int, short_episodes: int) -> Path:
    """One episode of `long_steps` steps, then `short_episodes` one-step episodes."""
    line = ('{"episode_id":"%s","step":%d,"observation":[0.0,0.0,0.0,0.0],"action":0,'
            '"logprob":-0.5,"value":1.0,"reward":1.0,"terminated":%s,"truncated":false,'
            '"policy_version":0}\n')
    with path.open("w") as f:
        f.writelines(line % ("long", n, "true" if n == long_steps - 1 else "false")
                     for n in range(long_steps))
        f.writelines(line % (f"short-{i}", 0, "true") for i in range(short_episodes))
    return path


def test_a_skewed_batch_is_refused_with_the_numbers_and_the_remedy(tmp_path: Path) -> None:
    rollouts = skewed_rollouts(tmp_path / "r.jsonl", 12_000, 12_000)  # pads to 6.3 GiB
    proc = gyre("batch", rollouts, "--map", ROOT / "examples" / "cartpole_map.json",
                memory_gb=6)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = one_line_error(proc)
    assert "padded batch [B=12001, T=12000] would take 6.3 GiB" in line
    assert "MAX_BATCH_BYTES = 4.0 GiB" in line and "(--max-len 2)" in line


def test_collate_checks_the_padded_size_first() -> None:
    import numpy as np

    from gyre_contract.trainer._collation import BatchTooLargeError, collate

    episodes = [{"episode_id": np.array(["long"] * 1000), "reward": np.ones(1000, np.float32)}]
    episodes += [{"episode_id": np.array([f"s{i}"]), "reward": np.ones(1, np.float32)}
                 for i in range(1000)]
    with pytest.raises(BatchTooLargeError, match=r"\[B=1001, T=1000\].*--max-len (\d+)") as err:
        collate(episodes, max_bytes=1_000_000)
    suggested = int(str(err.value).split("--max-len ")[1].split(")")[0])
    out = collate(episodes, max_bytes=1_000_000, max_len=suggested)
    assert out["reward"].shape[1] == suggested
    assert collate(episodes, max_bytes=6_000_000)["reward"].shape == (1001, 1000)


def test_chained_per_step_is_bounded_before_allocating(tmp_path: Path) -> None:
    fmap = tmp_path / "m.json"
    fmap.write_text(json.dumps({"gyre_field_map": 1, "fields": {"obs": {
        "op": "per_step", "from": "observation",
        "then": [{"op": "per_step"}, {"op": "per_step"}, {"op": "per_step"}]}}}))
    proc = gyre("batch", ROOT / "examples" / "cartpole_rollouts.jsonl", "--map", fmap,
                memory_gb=2)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = one_line_error(proc)
    assert "per_step" in line and "12.2 GiB" in line and "MAX_BATCH_BYTES" in line


# --- devices and pipes: bounded readers -------------------------------------------------------

SCHEMA = ROOT / "schemas" / "rollout_step.v1.json"
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"
MAP = ROOT / "examples" / "cartpole_map.json"

AS_SCHEMA_MAP_OR_RUN_LOG = {
    "validate --schema": lambda f: ("validate", ROLLOUTS, "--schema", f),
    "diff (left)": lambda f: ("diff", f, SCHEMA),
    "diff (right)": lambda f: ("diff", SCHEMA, f),
    "batch --map": lambda f: ("batch", ROLLOUTS, "--map", f),
    "runs": lambda f: ("runs", f),
}


@pytest.mark.parametrize("command", [*AS_SCHEMA_MAP_OR_RUN_LOG, "validate", "batch rollouts"])
def test_dev_zero_is_refused_unread(command: str) -> None:
    argv = {"validate": lambda f: ("validate", f),
            "batch rollouts": lambda f: ("batch", f, "--map", MAP),
            **AS_SCHEMA_MAP_OR_RUN_LOG}[command]("/dev/zero")
    proc = gyre(*argv, memory_gb=2)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not a regular file (a character device)" in one_line_error(proc)


_ENDLESS = "import sys\nf = open(sys.argv[1], 'wb')\nwhile True:\n    f.write(b'[' * 65536)\n"


@pytest.mark.parametrize("command", list(AS_SCHEMA_MAP_OR_RUN_LOG))
def test_an_endless_pipe_is_read_up_to_the_limit(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "endless"
    os.mkfifo(fifo)
    writer = subprocess.Popen([sys.executable, "-c", _ENDLESS, str(fifo)],
                              stderr=subprocess.DEVNULL)
    try:
        proc = gyre(*AS_SCHEMA_MAP_OR_RUN_LOG[command](fifo), memory_gb=2)
    finally:
        writer.kill()
        writer.wait()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = one_line_error(proc)
    assert "bytes, the limit (MAX_" in line and str(fifo) in line  # which file: every command


def test_a_pipe_is_still_a_rollout_source(tmp_path: Path) -> None:
    fifo = tmp_path / "rollouts"
    os.mkfifo(fifo)
    copy = "import shutil, sys\nshutil.copyfileobj(open(sys.argv[1], 'rb'), open(sys.argv[2], 'wb'))"
    writer = subprocess.Popen([sys.executable, "-c", copy, str(ROLLOUTS), str(fifo)])
    try:
        proc = gyre("validate", fifo)
    finally:
        writer.wait(timeout=SAFETY_NET_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def shard_folder(tmp_path: Path) -> Path:
    """A folder of shards: one rollout file and a FIFO that nobody writes (it blocked forever)."""
    folder = tmp_path / "shards"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(ROLLOUTS.read_bytes())
    os.mkfifo(folder / "b.jsonl")
    return folder


@pytest.mark.parametrize("listing", ["folder", "glob"])
def test_a_fifo_found_by_listing_is_skipped_with_a_warning(tmp_path: Path, listing: str) -> None:
    folder = shard_folder(tmp_path)
    source = folder if listing == "folder" else folder / "*.jsonl"
    # the timeout only turns the old hang into a failure; it is not a timing assertion
    proc = gyre("validate", source, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stdout + proc.stderr
    assert f"warnings: 1\n  skipped {folder / 'b.jsonl'}: not a regular file (a FIFO); a pipe " \
        "is read only when named itself\n" in proc.stdout
    assert "1 shards checked" in proc.stdout and "holds: no problems" in proc.stdout
    out = io.StringIO()
    assert run(["validate", str(source), "--format", "json", "--strict"], out, io.StringIO()) == 1
    report = json.loads(out.getvalue())
    assert report["skipped"] == [{"code": "skipped_not_a_regular_file", "kind": "a FIFO",
                                  "path": str(folder / "b.jsonl"), "message": report["skipped"][0]
                                  ["message"]}]
    assert [s["path"] for s in report["shards"]] == [str(folder / "a.jsonl")]


def test_devices_and_sockets_found_by_listing_are_skipped(tmp_path: Path) -> None:
    import socket

    folder = shard_folder(tmp_path)
    os.unlink(folder / "b.jsonl")
    (folder / "zero.jsonl").symlink_to("/dev/zero")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(folder / "s.jsonl"))
        out, err = io.StringIO(), io.StringIO()
        assert run(["validate", str(folder)], out, err) == 0, out.getvalue() + err.getvalue()
    finally:
        sock.close()
    assert f"skipped {folder / 's.jsonl'}: not a regular file (a socket)\n" in out.getvalue()
    assert f"skipped {folder / 'zero.jsonl'}: not a regular file (a character device)\n" in \
        out.getvalue()


def test_a_glob_that_finds_only_a_fifo_is_one_line(tmp_path: Path) -> None:
    folder = shard_folder(tmp_path)
    proc = gyre("validate", folder / "b*", timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert one_line_error(proc) == (f"error: no shard matches '{folder / 'b*'}' (skipped: "
                                    f"{folder / 'b.jsonl'}, not regular files)")


def test_a_small_pipe_is_read_whole(tmp_path: Path) -> None:
    from gyre_contract.io._jsonfile import read_bounded

    fifo = tmp_path / "schema"
    os.mkfifo(fifo)
    copy = "import shutil, sys\nshutil.copyfileobj(open(sys.argv[1], 'rb'), open(sys.argv[2], 'wb'))"
    writer = subprocess.Popen([sys.executable, "-c", copy, str(SCHEMA), str(fifo)])
    try:
        data = read_bounded(fifo, what="schema", max_bytes=2**20, limit_name="X")
    finally:
        writer.wait(timeout=SAFETY_NET_S)
    assert data == SCHEMA.read_bytes()


def test_an_overlong_pattern_is_refused(tmp_path: Path) -> None:
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"properties": {"episode_id": {"pattern": "a" * 5000}}}))
    rollouts = write_jsonl(tmp_path / "r.jsonl", [step("e", 0, True)])
    proc = gyre("validate", rollouts, "--schema", schema)
    assert proc.returncode == 2
    assert "(MAX_PATTERN_BYTES)" in one_line_error(proc)


# --- memory within the documented limits: a 100 MB line, a million runs, a million episodes ----
# The inputs come from benchmarks/bench_memory.py (generated here, never committed); the same
# figures with peak RSS are in docs/robustness.md.

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_memory  # noqa: E402

from gyre_contract.io._lines import MAX_LINE_VALUES  # noqa: E402

CARTPOLE_MAP = ROOT / "examples" / "cartpole_map.json"


def _too_many_values(n_lists: int, size: int) -> str:
    """What a `lists-line` of `n_lists` empty lists in `size` bytes is refused with."""
    return (f"line 1: too many values (not parsed): expected at most {MAX_LINE_VALUES} values "
            f"per line (each ',' ':' '[' '{{' outside strings), got {2 * n_lists + 26} in "
            f"{size} bytes")


def test_a_line_just_over_the_value_limit_is_refused_unparsed(tmp_path: Path) -> None:
    """13 MB of empty lists in an unknown field: counted on the bytes, never parsed (once: 64
    bytes a list parsed, about 300 MB)."""
    n = MAX_LINE_VALUES // 2 - 12
    path = tmp_path / "crowded.jsonl"
    bench_memory.make("lists-line", path, n)
    proc = gyre("validate", path, memory_gb=0.5)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"    {_too_many_values(n, path.stat().st_size - 1)}\n" in proc.stdout  # no newline


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lists-line", "numbers-line"])
def test_a_100_mb_line_takes_every_command_less_than_1_gb(tmp_path: Path, name: str) -> None:
    """Lines of 94-110 MiB (33 million empty lists in an unknown field, 94 MiB; a valid
    observation of 33 million numbers, 110 MiB): 3.0 and 1.6 GB of RSS once, now refused by
    MAX_LINE_VALUES under a 1 GiB address-space limit, by every command that reads them."""
    path = tmp_path / "line.jsonl"
    bench_memory.make(name, path)
    said = "line 1: too many values (not parsed): expected at most"
    proc = gyre("validate", path, memory_gb=1)
    assert proc.returncode == 1 and said in proc.stdout, proc.stdout + proc.stderr
    proc = gyre("batch", path, "--map", CARTPOLE_MAP, memory_gb=1)
    assert proc.returncode == 1 and proc.stderr.startswith(f"error: {said}"), proc.stderr
    proc = gyre("infer", path, memory_gb=1)
    assert proc.returncode == 2 and said in one_line_error(proc)


@pytest.mark.slow
def test_runs_on_300000_runs_stays_under_half_a_gigabyte(tmp_path: Path) -> None:
    """A run log of 300,000 runs (74 MB): 810 MB of RSS once (every `RunRecord` held), now a few
    numbers per run (`Summary`, 76 MB)."""
    path = tmp_path / "runs.jsonl"
    bench_memory.make("run-log-1m", path, 300_000)
    proc = gyre("runs", path, memory_gb=0.5)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{path}: 300000 runs, 8 configurations\n")


def peak_rss_of(*argv: str | Path, env: dict[str, str] | None = None) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in bytes) of `python -m gyre_contract ARGV` (with `env` added
    to the environment), the peak as the kernel counted it for the child (`wait4`). An
    address-space limit cannot bound a command that reads through pyarrow: its thread pools
    reserve about 1.5 GB they never touch."""
    code = "import sys; from gyre_contract.cli import main; sys.exit(main(sys.argv[1:]))"
    with subprocess.Popen([sys.executable, "-c", code, *map(str, argv)], cwd=ROOT,
                          env={**os.environ, **(env or {})},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, stderr, usage.ru_maxrss * 1024


@pytest.mark.slow
@pytest.mark.parametrize(("duckdb", "bound"), [("0", 512), ("1", 640)],
                         ids=["pyarrow reader", "duckdb reader"])
def test_batch_of_a_million_one_step_episodes_stays_bounded(tmp_path: Path, duckdb: str,
                                                                 bound: int) -> None:
    """1,000,000 one-step episodes (170 MB): 670 MB of RSS once (every block's lines and a dict
    of ids kept), 350 MB on the line path, about 420-460 MB on Arrow columns read by pyarrow (of
    which pyarrow's libraries and thread arenas about 110 MB, the batch itself about 90 MB),
    about 530 MB read by DuckDB (extra `fast`: its library and per-thread memory ~100 MB)."""
    if duckdb == "1":
        pytest.importorskip("duckdb")
    path = tmp_path / "episodes.jsonl"
    bench_memory.make("episodes-1m", path)
    out = tmp_path / "batch.npz"
    code, stderr, peak = peak_rss_of("batch", path, "--map", CARTPOLE_MAP, "-o", out,
                                     env={"GYRE_DUCKDB": duckdb})
    assert code == 0, stderr
    assert peak < bound * 2**20, f"peak RSS {peak / 2**20:.0f} MiB"
    import numpy as np

    with np.load(out, allow_pickle=False) as batch:
        assert batch["mask"].shape == (1_000_000, 1) and batch["mask"].all()
        assert batch["episode_id"][-1] == "e999999"
