"""`gyre-contract diff | compat | infer` in-process, plus one real subprocess."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from gyre_contract.cli._app import run
from gyre_contract.trainer._fieldmap import FieldMap

ROOT = Path(__file__).resolve().parents[2]
STEP = str(ROOT / "schemas" / "rollout_step.v1.json")
BATCH = str(ROOT / "schemas" / "train_batch.v1.json")
PEERS = ROOT / "tests" / "data" / "peers"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_diff_text_ok_and_strict() -> None:
    code, out, err = cli("diff", STEP, BATCH)
    assert code == 0 and err == ""
    assert out.startswith("gyre-contract diff\n")
    assert "NEEDS CONVERSION (4)" in out
    assert out.splitlines()[-1].startswith("summary: 9 same, 1 renamed, 4 need conversion, "
                                           "0 missing, 8 unused")
    assert "\x1b[" not in out  # StringIO is not a terminal
    assert cli("diff", STEP, BATCH, "--strict")[0] == 1


def test_diff_missing_exits_1_and_json_validates() -> None:
    v1_0 = str(ROOT / "tests" / "data" / "schemas" / "rollout_step.v1.0.json")  # no ref_logprob
    code, out, _ = cli("diff", v1_0, str(PEERS / "verl_actor_batch.json"), "--batch-dims", "B",
                       "--format", "json")
    assert code == 1
    report = json.loads(out)
    schema = json.loads((ROOT / "schemas" / "diff_report.v1.json").read_text())
    jsonschema.validate(report, schema)
    missing = {e["trainer_field"]: e for e in report["entries"] if e["tier"] == "missing"}
    # verl's uid is the prompt's group: never the episode_id the sampler records
    assert missing["uid"]["sampler_fields"] == []
    assert "episode_id is never one" in missing["uid"]["reason"]
    assert report["summary"]["exit_code"] == 1


def test_diff_markdown() -> None:
    code, out, _ = cli("diff", STEP, BATCH, "--format", "markdown")
    assert code == 0
    assert out.startswith("### gyre-contract diff: `")
    assert "| tier | trainer field | from sampler | dtype | shape | why |" in out


def test_write_map_and_rename(tmp_path: Path) -> None:
    path = tmp_path / "map.json"
    code, _, err = cli("diff", STEP, str(PEERS / "rllib_learner_batch.json"), "--batch-dims",
                       "B", "--rename", "vf_preds=next_value", "--write-map", str(path),
                       "--gamma", "0.9")
    assert code == 0
    assert err == f"wrote {path}\n"
    fmap = FieldMap.load(path)
    assert fmap.fields["vf_preds"].sources == ("next_value",)
    assert fmap.fields["advantages"].args["gamma"] == 0.9


@pytest.mark.parametrize(("argv", "message"), [
    (["--rename", "nope"], "error: --rename takes TRAINER=SAMPLER, got 'nope'\n"),
    (["--batch-dims", "B,,2x"], "error: --batch-dims must be names separated by commas "
                                "(B,T (batch-major), T,B (time-major), M or T*N (flat: real "
                                "steps only), B (token rows: one per generation), M (packed "
                                "token rows)), got 'B,,2x'\n"),
])
def test_bad_options_exit_2_with_one_line(argv: list[str], message: str) -> None:
    code, out, err = cli("diff", STEP, BATCH, *argv)
    assert (code, out, err) == (2, "", message)


def test_remote_ref_is_exit_2_never_fetched(tmp_path: Path) -> None:
    trainer = tmp_path / "t.json"
    trainer.write_text(json.dumps({"type": "object", "properties": {
        "obs": {"$ref": "https://example.com/obs.json"}}}))
    code, out, err = cli("diff", STEP, str(trainer))
    assert code == 2 and out == ""
    assert err == (f"error: {trainer}: #/properties/obs: $ref 'https://example.com/obs.json' "
                   f"points outside this document; only local refs such as '#/$defs/Name' are "
                   f"resolved, and remote or file refs are never fetched\n")


def test_unreadable_file_is_exit_2(tmp_path: Path) -> None:
    code, _, err = cli("diff", STEP, str(tmp_path / "missing.json"))
    assert code == 2
    assert err.startswith("error: ") and "cannot read" in err


def test_compat_cli() -> None:
    code, out, _ = cli("compat", STEP, STEP, "--mode", "full")
    assert (code, out) == (0, f"gyre-contract compat (full): {STEP} -> {STEP}\n  no changes\n"
                              f"summary: 0 changes, compatible (full)\n")
    code, out, _ = cli("compat", STEP, BATCH, "--format", "json")
    assert code == 1
    report = json.loads(out)
    assert report["compatible"] is False
    assert {"field-removed", "layout-changed"} <= {c["rule"] for c in report["changes"]}


def test_infer_cli(tmp_path: Path) -> None:
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text('{"obs": [1.0, 2.0], "rew": 1, "done": false}\n'
                        '{"obs": [1.5, 2.5], "rew": 0.5, "done": true}\n')
    out_path = tmp_path / "s.json"
    code, out, err = cli("infer", str(rollouts), "-o", str(out_path))
    assert (code, out, err) == (0, "", f"wrote {out_path} (3 fields)\n")
    doc = json.loads(out_path.read_text())
    assert doc["properties"]["obs"]["x-gyre-shape"] == [2]
    code, out, _ = cli("diff", str(out_path), BATCH)
    assert code == 1  # no value, so no advantage: the contract is broken
    code, _, err = cli("infer", str(tmp_path / "none.jsonl"))
    assert code == 2 and "no such file" in err


def test_real_subprocess() -> None:
    proc = subprocess.run([sys.executable, "-m", "gyre_contract", "diff", STEP,
                           str(PEERS / "torchrl_ppo.json"), "--batch-dims", "B,T"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "next.reward" in proc.stdout and "add a trailing dim of 1" in proc.stdout


def test_infer_diff_write_map_then_batch(tmp_path: Path) -> None:
    """The path a repo with no schema takes: infer, diff against the batch, write, run the map."""
    rollouts = ROOT / "examples" / "cartpole_rollouts.jsonl"
    inferred, map_path = tmp_path / "sampler.json", tmp_path / "map.json"
    assert cli("infer", str(rollouts), "-o", str(inferred))[0] == 0
    code, out, _ = cli("diff", str(inferred), BATCH, "--write-map", str(map_path))
    assert code == 0 and "0 missing" in out
    code, out, err = cli("batch", str(rollouts), "--map", str(map_path))
    assert code == 0, err
    assert "the batch is a valid TrainBatch" in out


# -- the report protocol: what the CLI prints is the report's own rendering ----------------------

@pytest.mark.parametrize("trainer", [BATCH, str(PEERS / "verl_actor_batch.json")])
def test_diff_report_protocol_matches_the_cli(trainer: str) -> None:
    from gyre_contract.core._report import Report
    from gyre_contract.schema._diffing import diff

    report = diff(STEP, trainer, batch_dims="B" if "verl" in trainer else None)
    assert isinstance(report, Report)
    assert report.ok == (report.counts()["missing"] == 0)
    assert [w.to_dict() for w in report.warnings] == report.to_dict()["warnings"]
    extra = ("--batch-dims", "B") if "verl" in trainer else ()
    code, out, _ = cli("diff", STEP, trainer, *extra, "--format", "json")
    assert json.loads(out) == report.to_dict() and out == report.render("json") + "\n"
    assert code == report.exit_code() == (0 if report.ok else 1)
    assert cli("diff", STEP, trainer, *extra, "--format", "markdown")[1] == \
        report.render("markdown")
    assert cli("diff", STEP, trainer, *extra)[1] == report.render("text") == report.to_text()
    strict = cli("diff", STEP, trainer, *extra, "--strict")[0]
    assert strict == report.exit_code(strict=True) == 1  # a conversion fails --strict
    with pytest.raises(ValueError, match="unknown report format"):
        report.render("html")


def test_compat_report_protocol_matches_the_cli() -> None:
    from gyre_contract.core._report import Report
    from gyre_contract.schema._compatibility import compat

    for old, new, mode in ((STEP, STEP, "full"), (STEP, BATCH, "backward")):
        report = compat(old, new, mode)
        assert isinstance(report, Report) and report.warnings == []
        code, out, _ = cli("compat", old, new, "--mode", mode, "--format", "json")
        assert json.loads(out) == report.to_dict() and out == report.render("json") + "\n"
        assert cli("compat", old, new, "--mode", mode)[1] == report.render("text")
        assert code == report.exit_code() == report.exit_code(strict=True) == \
            (0 if report.ok else 1)
        assert report.to_dict()["compatible"] is report.ok


@pytest.mark.parametrize("option", ["--gamma", "--lam"])
def test_diff_refuses_a_non_finite_discount(option: str) -> None:
    code, out, err = cli("diff", STEP, BATCH, option, "nan")
    assert (code, out) == (2, "")
    assert err == f"gyre-contract diff: argument {option}: must be a number in [0, 1], got 'nan'\n"


def test_strict_json_carries_the_exit_code_the_command_returns() -> None:
    """`--strict --format json`: the summary says strict and gives the code actually returned
    (a conversion fails --strict), like validate's JSON; compat takes --strict the same way."""
    schema = json.loads((ROOT / "schemas" / "diff_report.v1.json").read_text())
    for extra, want in (((), 0), (("--strict",), 1)):
        code, out, _ = cli("diff", STEP, BATCH, "--format", "json", *extra)
        summary = json.loads(out)["summary"]
        jsonschema.validate(json.loads(out), schema)
        assert (code, summary["strict"], summary["exit_code"]) == (want, bool(extra), want)
    old = str(ROOT / "tests" / "data" / "schemas" / "rollout_step.v1.0.json")
    for extra in ((), ("--strict",)):
        code, out, _ = cli("compat", old, STEP, "--format", "json", *extra)
        summary = json.loads(out)["summary"]
        assert (summary["strict"], summary["exit_code"]) == (bool(extra), code)
