"""Messages and exits: a megabyte-long name or value is echoed shortened in every command, text
and JSON; `infer` warns about fields only some lines carry; `export --check` says a folder is
missing (docs/robustness.md, "Every hostile input, every command")."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gyre_contract.cli._app import run
from gyre_contract.core._errors import Problem

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"
CARTPOLE_MAP = ROOT / "examples" / "cartpole_map.json"
STEP_SCHEMA = ROOT / "schemas" / "rollout_step.v1.json"
TRAIN_SCHEMA = ROOT / "schemas" / "train_batch.v1.json"
N = 1_048_576
KEY, VALUE = "k" * (N - 1) + "K", "v" * (N - 1) + "V"
SHORT_KEY = "k" * 32 + "…" + "k" * 15 + "K (1,048,576 chars)"


def cli(*argv: str | Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run([str(a) for a in argv], out, err)
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue(), err.getvalue()


def test_shortened_text_keeps_both_ends_and_the_length() -> None:
    from gyre_contract.core._text import quoted, shorten, shorten_path

    assert shorten("a" * 80) == "a" * 80
    assert shorten(KEY) == SHORT_KEY
    assert quoted("a" * N) == f"'{'a' * 32}…{'a' * 16}' (1,048,576 chars)"
    assert quoted("abc") == "'abc'"
    assert shorten_path(f"info.{KEY}.x") == f"info.{SHORT_KEY}.x"
    problem = Problem(f"info.{KEY}", "a known key", f"str {VALUE!r}", "unknown field", line=3)
    assert problem.path == f"info.{KEY}"  # the data stays exact; what is echoed is short
    assert problem.to_dict()["path"] == f"info.{SHORT_KEY}"
    assert len(str(problem)) < 3000 and len(json.dumps(problem.to_dict())) < 3000


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, Path]:
    """A rollout file whose second line has a 1 MiB unknown key, whose third line has a 1 MiB
    string for a number and whose episode id is 1 MiB long; a step schema and a trainer schema
    with a 1 MiB field and a 1 MiB title; a map with a 1 MiB trainer key."""
    lines = ROLLOUTS.read_text().splitlines()[:30]
    records = [json.loads(line) for line in lines]
    records[1][KEY] = 1
    records[2]["reward"] = VALUE
    records[3]["info"] = {KEY: {"x": 1}}
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text("".join(json.dumps(r) + "\n" for r in records))
    long_id = tmp_path / "id.jsonl"
    long_id.write_text("".join(json.dumps({**r, "episode_id": VALUE}) + "\n"
                               for r in [json.loads(line) for line in lines[:5]]))
    files = {"rollouts": rollouts, "long id": long_id}
    for name, source in (("sampler", STEP_SCHEMA), ("trainer", TRAIN_SCHEMA)):
        schema = json.loads(source.read_text())
        schema["title"] = VALUE
        schema["properties"][KEY] = {"type": "number"}
        schema["required"] = [*schema.get("required", []), KEY]
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(schema))
    fmap = json.loads(CARTPOLE_MAP.read_text())
    fmap["fields"][KEY[N // 2:]] = {"from": "reward"}  # half: a map file holds at most 1 MiB
    files["map"] = tmp_path / "m.json"
    files["map"].write_text(json.dumps(fmap))
    return files


COMMANDS = {
    "validate": lambda f: ["validate", f["rollouts"]],
    "validate --schema": lambda f: ["validate", f["rollouts"], "--schema", f["sampler"]],
    "validate (a long episode id)": lambda f: ["validate", f["long id"], "--require-complete"],
    "batch": lambda f: ["batch", f["rollouts"], "--map", CARTPOLE_MAP],
    "batch --map (a long key)": lambda f: ["batch", ROLLOUTS, "--map", f["map"]],
    "batch --trainer": lambda f: ["batch", ROLLOUTS, "--map", CARTPOLE_MAP, "--trainer",
                                  f["trainer"]],
    "diff (sampler)": lambda f: ["diff", f["sampler"], STEP_SCHEMA],
    "diff (trainer)": lambda f: ["diff", STEP_SCHEMA, f["trainer"]],
    "compat (old)": lambda f: ["compat", f["sampler"], STEP_SCHEMA],
    "compat (new)": lambda f: ["compat", STEP_SCHEMA, f["sampler"]],
    "show": lambda f: ["show", f["rollouts"]],
    "show (a long episode id)": lambda f: ["show", f["long id"]],
    "show --episode (no such)": lambda f: ["show", ROLLOUTS, "--episode", VALUE],
    "infer": lambda f: ["infer", f["long id"]],
}


@pytest.mark.parametrize(("command", "fmt"), [
    (command, fmt) for command in sorted(COMMANDS) for fmt in ("text", "json")
    if (command, fmt) != ("infer", "json")])  # infer prints the schema itself, no JSON report
def test_a_megabyte_name_or_value_is_echoed_shortened(hostile, command, fmt) -> None:
    """Once: 14 MB of output for one 1 MiB key (a table padded to its width, every problem)."""
    argv = COMMANDS[command](hostile)
    if fmt == "json":
        argv += ["--format", "json"]
    code, out, err = cli(*argv)
    assert code in (0, 1, 2), (code, err)
    assert len(out) + len(err) < 100_000, (command, len(out), len(err))  # a copy is 1 MiB
    if fmt == "json":
        json.loads(out)  # still JSON
    if command != "infer":  # the inferred schema holds the episode id's type, not its value
        echoed = out + err
        assert "k" * 100 not in echoed and "v" * 100 not in echoed, echoed
        assert "…" in echoed and ("(1,048,576 chars)" in echoed or "(524,288 chars)" in echoed)


# -- infer: fields only some lines carry ----------------------------------------------------------

def test_infer_warns_about_fields_only_some_lines_carry(tmp_path) -> None:
    """`trunctaed` on one line of three entered the schema silently (exit 0, nothing said)."""
    typo = ROOT / "tests" / "data" / "rollouts" / "typo_key.jsonl"
    code, out, err = cli("infer", typo)
    assert code == 0 and "trunctaed" in json.loads(out)["properties"]
    assert err.splitlines() == [
        "warning: field 'truncated' is on 2 of 3 lines: optional in the schema",
        "warning: field 'trunctaed' is on 1 of 3 lines: optional in the schema; a typo of "
        "'truncated'?"]
    code, out, err = cli("infer", typo, "-o", tmp_path / "s.json")
    assert code == 0 and out == "" and err.splitlines()[-1] == f"wrote {tmp_path / 's.json'} " \
        "(9 fields)" and err.count("warning: ") == 2


def test_infer_names_a_rarely_carried_field_but_not_every_optional_one_as_a_typo() -> None:
    """The example file carries `next_observation` and `next_value` on last steps only: each is
    named with its count, none is called a typo of `observation` (which every line carries)."""
    code, _, err = cli("infer", ROLLOUTS)
    assert code == 0
    assert err.splitlines() == [
        "warning: field 'next_observation' is on 8 of 263 lines: optional in the schema",
        "warning: field 'next_value' is on 4 of 263 lines: optional in the schema"]
    steady = ROOT / "tests" / "data" / "rollouts" / "crlf_line_ends.jsonl"
    assert cli("infer", steady)[2] == ""  # every line carries every field: nothing to say


# -- export --check outside a checkout --------------------------------------------------------------

def test_export_check_says_a_missing_folder_is_missing(tmp_path, monkeypatch) -> None:
    """Outside a checkout there is no `schemas/`: once every file was "drifted" (exit 1)."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("export", "--check")
    assert (code, out) == (2, "")
    assert err == ("error: no such folder: schemas (export --check compares the schemas "
                   "committed there with the models; run it in the repository's root, or name "
                   "the folder with --out-dir DIR)\n")
    code, out, err = cli("export", "--check", "--format", "json")
    assert code == 2 and err == "" and json.loads(out)["error"].startswith("no such folder")
    (tmp_path / "afile").write_text("x")
    assert cli("export", "--check", "--out-dir", "afile")[2].startswith("error: not a folder: afile")


def test_export_check_names_a_missing_file_apart_from_a_drifted_one(tmp_path) -> None:
    assert cli("export", "--out-dir", tmp_path)[0] == 0
    (tmp_path / "token_batch.v1.json").unlink()
    (tmp_path / "train_batch.v1.json").write_text("{}")
    code, out, _ = cli("export", "--check", "--out-dir", tmp_path)
    assert code == 1
    assert f"missing: {tmp_path / 'token_batch.v1.json'} (run" in out
    assert f"drifted: {tmp_path / 'train_batch.v1.json'} (run" in out
    code, out, _ = cli("export", "--check", "--out-dir", tmp_path, "--format", "json")
    report = json.loads(out)
    assert code == 1 and report["missing"] == [str(tmp_path / "token_batch.v1.json")]
    assert sorted(report["drifted"]) == sorted(map(str, (tmp_path / "token_batch.v1.json",
                                                         tmp_path / "train_batch.v1.json")))
