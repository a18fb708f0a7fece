"""Reliability round 2, hangs and unbounded memory: each case of the issue ends with a verdict.

Inputs that took minutes (a backtracking regex, `uniqueItems` on 5,000 objects) or gigabytes (a
zip-bomb `.npz`, a skewed batch, `per_step` chains, `/dev/zero` as a file) run through the real
CLI in a subprocess. The subprocess `timeout=` is a safety net against a hang taking the test
run down, not a timing assertion; memory is bounded with `RLIMIT_AS` where the issue names a
budget.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAFETY_NET_S = 600
"""Only a hang reaches this; the commands below finish in seconds."""


def gyre(*argv: str | Path, memory_gb: float | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m gyre_contract ARGV` in a subprocess, optionally under RLIMIT_AS."""
    code = "import sys; from gyre_contract.cli import main; sys.exit(main(sys.argv[1:]))"
    if memory_gb is not None:
        limit = int(memory_gb * 2**30)
        code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, "
                f"({limit}, {limit})); " + code)
    return subprocess.run([sys.executable, "-c", code, *map(str, argv)], capture_output=True,
                          text=True, timeout=SAFETY_NET_S, cwd=ROOT, env=os.environ.copy())


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


def test_ecma_unicode_escapes_and_end_anchor(tmp_path: Path) -> None:
    from gyre_contract.io.schemakeywords import compiled_pattern

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
    from gyre_contract.io.schemakeywords import canonical

    assert canonical(1) == canonical(1.0)
    assert canonical(True) != canonical(1)
    assert canonical({"a": [1, None]}) == canonical({"a": [1.0, None]})
    assert canonical([0]) != canonical([False])
