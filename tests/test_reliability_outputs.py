"""Reliability round 2, part 3: atomic outputs, appends after a torn line, one line instead of a
traceback, and the smaller cases (docs/robustness.md, "Outputs, appends and the terminal")."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import orjson
import pytest

from gyre_contract.cli._app import run
from gyre_contract.harness._runlog import RunLog
from gyre_contract.io._writer import write_steps

ROOT = Path(__file__).resolve().parent.parent
STEP_SCHEMA = ROOT / "schemas" / "rollout_step.v1.json"
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"
CARTPOLE_MAP = ROOT / "examples" / "cartpole_map.json"
OLD = b"the previous good output\n"
RUN = {"run_id": "a", "config": "small", "rollout_s": 1.0, "train_s": 2.0, "total_s": 3.5,
       "n_steps": 10, "n_episodes": 1, "batch_shape": [1, 10], "policy_version": 0,
       "started_at": "2026-11-29T10:00:00Z"}


def cli(*argv: str | Path) -> tuple[int, str, str]:
    """Run the CLI in-process; never a traceback, and exit 2 is one `error:` line or usage line."""
    out, err = io.StringIO(), io.StringIO()
    code = run([str(a) for a in argv], out, err)
    assert "Traceback" not in err.getvalue()
    if code == 2 and "json" in [str(a) for a in argv]:  # the error is a JSON object on stdout
        assert err.getvalue() == "" and json.loads(out.getvalue())["exit_code"] == 2
    elif code == 2:
        assert out.getvalue() == "" and err.getvalue().count("\n") == 1, err.getvalue()
    return code, out.getvalue(), err.getvalue()


def one_error(*argv: str | Path, code: int = 2) -> str:
    """The single `error: ...` line of a failing command, checked for its exit code."""
    got, out, err = cli(*argv)
    assert got == code, (got, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def records(n: int = 3) -> list[dict]:
    return [orjson.loads(line) for line in ROLLOUTS.read_bytes().splitlines()[:n]]


# -- atomic outputs ------------------------------------------------------------------------------

def _outputs(tmp_path: Path) -> dict[str, tuple[list[str | Path], Path]]:
    """Each command that writes an output file, with the file it writes."""
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    return {
        "batch -o": (["batch", ROLLOUTS, "--map", CARTPOLE_MAP, "-o", tmp_path / "b.npz"],
                     tmp_path / "b.npz"),
        "infer -o": (["infer", ROLLOUTS, "-o", tmp_path / "s.json"], tmp_path / "s.json"),
        "diff --write-map": (["diff", STEP_SCHEMA, STEP_SCHEMA, "--write-map", tmp_path / "m.json"],
                             tmp_path / "m.json"),
        "export": (["export", "--out-dir", schemas], schemas / "rollout_step.v1.json"),
    }


@pytest.mark.parametrize("command", ["batch -o", "infer -o", "diff --write-map", "export"])
def test_a_full_disk_leaves_the_previous_output(tmp_path, monkeypatch, command) -> None:
    argv, target = _outputs(tmp_path)[command]
    target.write_bytes(OLD)

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)  # the data reaches the disk at fsync, or fails
    err = one_error(*argv)
    assert "No space left on device" in err
    assert target.read_bytes() == OLD
    assert not [p for p in target.parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("command", ["batch -o", "infer -o", "diff --write-map", "export"])
def test_outputs_are_written_whole(tmp_path, command) -> None:
    argv, target = _outputs(tmp_path)[command]
    target.write_bytes(OLD)
    assert cli(*argv)[0] == 0
    assert target.read_bytes() != OLD and target.stat().st_mode & 0o777 == 0o644 & ~_umask()
    assert [p.name for p in target.parent.iterdir() if p.name.startswith(".")] == []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_writer_killed_mid_write_leaves_the_previous_npz(tmp_path) -> None:
    """A real `batch -o` process, SIGKILLed while numpy is writing the .npz (made slow here)."""
    target = tmp_path / "batch.npz"
    np.savez(target, old=np.arange(3))
    before = target.read_bytes()
    child = textwrap.dedent(f"""
        import sys, time
        import numpy as np
        from gyre_contract.cli._app import run

        def slow_write_array(member, array, **kwargs):
            member.write(b"partial")  # half a zip member on disk, then the kill
            member.flush()
            print("writing", flush=True)
            time.sleep(120)

        np.lib.format.write_array = slow_write_array
        run(["batch", {str(ROLLOUTS)!r}, "--map", {str(CARTPOLE_MAP)!r}, "-o", {str(target)!r}])
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"writing\n", proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert target.read_bytes() == before
    with np.load(target, allow_pickle=False) as data:
        assert data["old"].tolist() == [0, 1, 2]


def test_write_parquet_on_a_full_disk_leaves_the_previous_file(tmp_path, monkeypatch) -> None:
    pytest.importorskip("pyarrow")
    from gyre_contract.core._errors import InputError

    target = tmp_path / "steps.parquet"
    write_steps(target, records(3))
    before = target.read_bytes()

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(InputError, match="No space left on device"):
        write_steps(target, records(5), fsync=True)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["steps.parquet"]


# -- appends after a torn line --------------------------------------------------------------------

def test_write_steps_appends_on_a_fresh_line_after_a_torn_one(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    first, second, third = records(3)
    write_steps(path, [first, second])
    with path.open("ab") as f:
        f.write(orjson.dumps(third)[:30])  # a full disk cut this append short
    write_steps(path, [third], append=True)
    lines = path.read_bytes().splitlines()
    assert len(lines) == 4 and orjson.loads(lines[3]) == third
    code, out, _ = cli("validate", path)
    assert code == 1
    assert "line 3: not valid JSON" in out and "line 4" not in out
    assert "3 valid steps" in out  # the good record after the torn line is kept


def test_runlog_appends_on_a_fresh_line_and_runs_keeps_the_rest(tmp_path) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_bytes(orjson.dumps(RUN) + b"\n" + orjson.dumps(RUN)[:25])
    log = RunLog(path)
    kept, torn = log.scan()
    log.append(kept[0])
    assert path.read_bytes().count(b"\n") == 3
    records_, torn = log.scan()
    assert len(records_) == 2 and [p.line for p in torn] == [2]
    code, out, _ = cli("runs", path)
    assert code == 0
    assert "2 runs" in out and "skipped 1 torn line(s):" in out and "  line 2: bad line" in out
    code, out, _ = cli("runs", path, "--format", "json")
    assert code == 0 and json.loads(out)["warnings"][0].startswith("line 2: bad line")
    with pytest.raises(ValueError, match="line 2: bad line"):
        log.read()  # read() still refuses a torn line; scan() is the tolerant reader


# -- tracebacks become one line -------------------------------------------------------------------

def _npz_cases(tmp_path: Path) -> dict[str, Path]:
    import zipfile

    member = tmp_path / "member.npz"
    with zipfile.ZipFile(member, "w") as z:
        z.writestr("a.npy", b"not an npy header")
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(b"PK\x03\x04" + b"garbage" * 20)
    npy = tmp_path / "one.npz"
    with npy.open("wb") as f:
        np.save(f, np.zeros(3))
    return {"member": member, "corrupt": corrupt, "npy": npy}


@pytest.mark.parametrize(("case", "says"), [
    ("member", "member 'a' is not a .npy array"),
    ("corrupt", "File is not a zip file"),
    ("npy", "it holds one array (.npy), not a zip of arrays"),
])
def test_infer_on_a_bad_npz_is_one_line(tmp_path, case, says) -> None:
    assert says in one_error("infer", _npz_cases(tmp_path)[case])


def test_infer_names_a_directory_and_a_fifo(tmp_path) -> None:
    assert "is a directory" in one_error("infer", tmp_path)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    assert "not a regular file (a FIFO" in one_error("infer", fifo)
    assert "no such file" in one_error("infer", tmp_path / "missing.jsonl")


@pytest.fixture
def parquet_file(tmp_path) -> Path:
    pytest.importorskip("pyarrow")
    path = tmp_path / "steps.parquet"
    write_steps(path, records(20))
    return path


def test_a_duplicated_parquet_column_is_reported(parquet_file, tmp_path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(parquet_file)
    dup = tmp_path / "dup.parquet"
    pq.write_table(table.append_column("reward", table.column("reward")), dup)
    code, out, _ = cli("validate", dup)
    assert code == 1
    assert "reward: duplicated column: expected each column once, got 2 columns named 'reward'" \
        in out and "missing required column" not in out
    code, out, _ = cli("validate", dup, "--format", "json")
    assert code == 1 and json.loads(out)["problems"]["count"] == 1
    assert "duplicated column" in one_error("batch", dup, "--map", CARTPOLE_MAP, code=1)


@pytest.mark.slow  # a local Ray cluster
def test_a_duplicated_parquet_column_on_ray(parquet_file, tmp_path) -> None:
    pytest.importorskip("ray.data", reason="ray[data] is not installed (extra 'ray')")
    import pyarrow.parquet as pq

    table = pq.read_table(parquet_file)
    dup = tmp_path / "dup.parquet"
    pq.write_table(table.append_column("reward", table.column("reward")), dup)
    proc = subprocess.run([sys.executable, "-m", "gyre_contract", "validate", str(dup),
                           "--engine", "ray"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "duplicated column" in proc.stdout


def _schema_with_shape(tmp_path: Path, name: str, shape: list) -> Path:
    doc = json.loads(STEP_SCHEMA.read_text())
    doc["properties"]["observation"]["x-gyre-shape"] = shape
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("shape", [["²"], ["9" * 5000], [10**30], ["٣"]],
                         ids=["superscript", "5000-digit string", "10**30", "arabic digit"])
def test_a_bad_fixed_dim_is_one_line_in_diff_and_compat(tmp_path, shape) -> None:
    bad = _schema_with_shape(tmp_path, "bad.json", shape)
    for argv in (["diff", STEP_SCHEMA, bad], ["diff", bad, STEP_SCHEMA],
                 ["compat", STEP_SCHEMA, bad], ["compat", bad, STEP_SCHEMA]):
        assert "a fixed dim is an integer below 2**63" in one_error(*argv)
    code, out, err = cli("diff", bad, STEP_SCHEMA, "--format", "json")  # data on stdout
    assert (code, err) == (2, "")
    assert "a fixed dim is an integer below 2**63" in json.loads(out)["error"]


def test_a_run_log_config_nested_300_deep_is_one_line(tmp_path) -> None:
    path = tmp_path / "runs.jsonl"
    line = json.dumps(RUN).replace('"config": "small"', '"config": ' + '{"a": ' * 300 + "1" +
                                   "}" * 300)
    path.write_text(line + "\n")
    err = one_error("runs", path, code=1)
    assert "line 1: config: config nested too deeply: expected at most 64" in err
    code, out, err = cli("runs", path, "--format", "json")  # the error is data on stdout
    report = json.loads(out)
    assert (code, err, report["command"], report["exit_code"]) == (1, "", "runs", 1)
    assert "line 1: config: config nested too deeply: expected at most 64" in report["error"]


def test_export_check_on_a_file_that_is_not_utf8_says_drifted(tmp_path) -> None:
    assert cli("export", "--out-dir", tmp_path)[0] == 0
    target = tmp_path / "rollout_step.v1.json"
    target.write_bytes(target.read_bytes() + b"\xff\xfe")
    code, out, _ = cli("export", "--check", "--out-dir", tmp_path, "--format", "json")
    assert code == 1 and json.loads(out)["drifted"] == [str(target)]


def test_episode_start_on_a_per_episode_column_is_one_line(tmp_path) -> None:
    fmap = tmp_path / "map.json"
    fmap.write_text(json.dumps({"gyre_field_map": 1, "fields": {
        "obs": {"from": "observation"}, "x": {"op": "episode_start", "from": "policy_version"}}}))
    err = one_error("batch", ROLLOUTS, "--map", fmap)
    assert "episode_start needs a per-step column [B, T]" in err


@pytest.mark.parametrize(("body", "says"), [
    ("return 10**400", "the loss is not finite"),
    ("raise SystemExit(0)", "loss_fn raised on the batch: expected a loss computed from the "
                            "batch, got SystemExit: 0"),
])
def test_a_loss_that_overflows_or_exits_fails_the_batch(tmp_path, monkeypatch, body, says) -> None:
    (tmp_path / "myloss.py").write_text(f"def loss(batch):\n    {body}\n")
    monkeypatch.chdir(tmp_path)
    err = one_error("batch", ROLLOUTS, "--map", CARTPOLE_MAP, "--loss", "myloss.py:loss",
                    code=1)  # never 0: the user's code failed
    assert says in err
    code, out, err = cli("batch", ROLLOUTS, "--map", CARTPOLE_MAP, "--loss", "myloss.py:loss",
                         "--format", "json")  # with --format json the error is data on stdout
    report = json.loads(out)
    assert (code, err, report["ok"], report["exit_code"]) == (1, "", False, 1)
    assert says in report["error"]


# -- smaller ----------------------------------------------------------------------------------

def test_runs_refuses_duplicate_keys_and_integers_over_64_bits(tmp_path) -> None:
    path = tmp_path / "runs.jsonl"
    good = json.dumps(RUN)
    path.write_text("\n".join([good, good[:-1] + ', "run_id": "b"}',
                               good.replace('"policy_version": 0', '"policy_version": ' +
                                            "9" * 30)]) + "\n")
    code, _, err = cli("runs", path)
    assert code == 1
    assert "line 2: run_id: duplicate key" in err
    assert "line 3: policy_version: integer too large for 64 bits" in err


def test_runs_json_is_strict_even_when_a_value_overflows(tmp_path) -> None:
    path = tmp_path / "runs.jsonl"
    huge = dict(RUN, rollout_s=1e308, total_s=1e308)
    path.write_text(json.dumps(huge) + "\n" + json.dumps(dict(huge, total_s=5e-324)) + "\n")
    code, out, _ = cli("runs", path, "--format", "json")
    assert code == 0

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in strict JSON output")

    doc = json.loads(out, parse_constant=refuse)
    assert doc["configs"][0]["rollout_s"]["median"] is None  # (1e308 + 1e308) / 2 overflows
    code, out, _ = cli("runs", path)
    assert code == 0 and max(len(line) for line in out.splitlines()) < 120


def test_parquet_info_refuses_duplicate_keys_and_integers_over_64_bits(parquet_file,
                                                                      tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(parquet_file)
    info = [None] * table.num_rows
    info[2] = '{"a": 1, "a": 2}'
    info[4] = '{"n": ' + "9" * 30 + "}"
    index = table.schema.get_field_index("info")
    bad = tmp_path / "info.parquet"
    pq.write_table(table.set_column(index, table.schema.field("info"),
                                    pa.array(info, pa.string())), bad)
    code, out, _ = cli("validate", bad)
    assert code == 1
    assert "line 3: info.a: duplicate key" in out
    assert "line 5: info.n: integer too large for 64 bits" in out


def test_dictionary_encoded_and_null_typed_parquet_columns_are_read(parquet_file,
                                                                    tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(parquet_file)
    episode = table.schema.get_field_index("episode_id")
    table = table.set_column(episode, "episode_id", pc.dictionary_encode(table.column(episode)))
    value = table.schema.get_field_index("value")
    table = table.set_column(value, "value", pa.nulls(table.num_rows, pa.null()))
    path = tmp_path / "encoded.parquet"
    pq.write_table(table, path)
    assert pq.read_schema(path).field("episode_id").type.value_type == pa.string()
    code, out, _ = cli("validate", path)
    assert code == 0, out
    required_null = table.set_column(table.schema.get_field_index("reward"), "reward",
                                     pa.nulls(table.num_rows, pa.null()))
    pq.write_table(required_null, path)
    code, out, _ = cli("validate", path)
    assert code == 1 and "reward: null is not allowed" in out


@pytest.mark.parametrize("value", ["nan", "5", "-0.1", "inf", "abc"])
@pytest.mark.parametrize("flag", ["--gamma", "--lam"])
def test_diff_gamma_and_lam_are_checked_at_the_flag(tmp_path, flag, value) -> None:
    out_map = tmp_path / "m.json"
    code, out, err = cli("diff", STEP_SCHEMA, STEP_SCHEMA, "--write-map", out_map, flag, value)
    assert code == 2 and f"argument {flag}: must be a number in [0, 1]" in err
    assert not out_map.exists()


def test_a_nested_field_and_a_literal_dotted_name_collide_loudly(tmp_path) -> None:
    nested = {"type": "object", "properties": {
        "obs": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
        "obs.x": {"type": "string"}}, "required": ["obs", "obs.x"]}
    path = tmp_path / "collide.json"
    path.write_text(json.dumps(nested))
    for argv in (["diff", path, STEP_SCHEMA], ["diff", STEP_SCHEMA, path],
                 ["compat", path, path]):
        assert "two fields named 'obs.x'" in one_error(*argv)


FORGED = "x\nholds: no problems\x1b[2J"


def test_names_titles_and_configs_cannot_forge_report_lines(tmp_path) -> None:
    steps = records(2)
    steps[1][FORGED] = 1
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in steps))
    schema = json.loads(STEP_SCHEMA.read_text())
    schema["properties"][FORGED] = {"type": "number", "title": FORGED}
    schema_path = tmp_path / "s.json"
    schema_path.write_text(json.dumps(schema))
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps(dict(RUN, config=FORGED)) + "\n")
    for argv in (["validate", rollouts], ["diff", schema_path, STEP_SCHEMA],
                 ["diff", STEP_SCHEMA, schema_path], ["compat", schema_path, STEP_SCHEMA],
                 ["runs", runs]):
        code, out, err = cli(*argv)
        text = out + err
        assert "\x1b" not in text and "\nholds: no problems\\x1b" not in text
        assert "x\\nholds: no problems\\x1b[2J" in text, (argv, text)
        assert not any(line.startswith("holds: no problems\\x1b") for line in text.splitlines())


def test_a_reader_that_goes_away_is_not_an_error(tmp_path) -> None:
    """`gyre-contract validate F | head -1`: the pipe closes first; the verdict is the exit code."""
    bad = tmp_path / "bad.jsonl"
    steps = records(3)
    steps[1]["reward"] = "x"
    bad.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in steps))
    for path, expected in ((ROLLOUTS, 0), (bad, 1)):
        for fmt in ("text", "json"):
            proc = subprocess.Popen(
                [sys.executable, "-m", "gyre_contract", "validate", str(path), "--format", fmt],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": str(ROOT)})
            assert proc.stdout is not None and proc.stderr is not None
            proc.stdout.close()  # the reader is gone before the report is written
            err = proc.stderr.read()
            proc.stderr.close()
            assert proc.wait(timeout=120) == expected, err
            assert err == b""
