"""Sharded validation and batching: the local engine, and Ray Data on a local Ray (2 CPUs).

The Ray tests share one local Ray started by a module-scoped fixture; they are skipped, with
the reason, when ray is not importable.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow", reason="pyarrow is not installed (extra 'parquet')")

from gyre_contract.core._errors import ContractError, InputError
from gyre_contract.io._parquet import write_parquet
from gyre_contract.io._shards import shard_paths, validate_shards
from gyre_contract.io._validation import validate_file
from gyre_contract.io._writer import write_steps
from gyre_contract.trainer._fieldmap import FieldMap

# Ray's own modules raise deprecation warnings about Ray's own settings; they are not ours.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "examples" / "cartpole_map.json"


def episode(eid: str, n: int, *, truncated_at_end: bool = False) -> list[dict]:
    last = n - 1
    return [{"observation": [0.01 * i, 0.1, -0.02, 0.3], "action": i % 2, "logprob": -0.69,
             "value": 0.5, "reward": 1.0, "step": i, "episode_id": eid,
             "terminated": i == last and not truncated_at_end,
             "truncated": i == last and truncated_at_end, "policy_version": 0,
             **({"next_value": 0.4} if i == last and truncated_at_end else {})}
            for i in range(n)]


def shard_records(k: int) -> list[dict]:
    """Shard k: three episodes (the last one truncated), 4 + 5 + 3 = 12 steps."""
    return (episode(f"s{k}-a", 4) + episode(f"s{k}-b", 5)
            + episode(f"s{k}-c", 3, truncated_at_end=True))


def write_shards(folder: Path, fmt: str) -> list[Path]:
    """8 shards; defects planted in shard 2 (a step gap at line 6) and shard 5 (a line that is
    not JSON at line 2 for JSON Lines, a positive logprob at row 2 for Parquet, and a step after
    its episode ended at line 10)."""
    folder.mkdir()
    paths = []
    for k in range(8):
        records = shard_records(k)
        if k == 2:
            records[5]["step"] = 3
        if k == 5:
            records.insert(9, dict(records[8], step=5))
        path = folder / f"shard-{k}.{fmt}"
        if fmt == "jsonl":
            write_steps(path, records)
            if k == 5:
                lines = path.read_text().splitlines(keepends=True)
                lines[1] = "{this is not json\n"
                path.write_text("".join(lines))
        else:
            if k == 5:
                records[1]["logprob"] = 0.5
            write_parquet(path, records, _model())
        paths.append(path)
    return paths


def _model():
    from models import CartPoleStep

    return CartPoleStep


def parquet_dataset(paths: list[Path]):
    """A Dataset of the shards' rows with a `path` column, one block per shard, as
    `ray.data.read_parquet(paths, include_paths=True)` gives (built here without Ray's file
    listing, which needs aiohttp for its fsspec check)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray.data

    tables = []
    for path in paths:
        table = pq.read_table(path)
        tables.append(table.append_column("path", pa.array([str(path)] * table.num_rows)))
    return ray.data.from_arrow(tables)


def problem_lines(report) -> list[tuple[str, int | None, str]]:
    return [(Path(shard).name, p.line, p.message) for shard, p in report.problems()]


def strip_paths(data: dict) -> dict:
    data = dict(data, source="")
    data["shards"] = [dict(s, path=Path(s["path"]).name) for s in data["shards"]]
    return data


# -- without Ray -----------------------------------------------------------------------------

def test_shard_paths_from_a_glob_a_folder_or_a_list(tmp_path):
    for name in ("b.jsonl", "a.parquet", "c.txt"):
        (tmp_path / name).write_text("")
    assert [Path(p).name for p in shard_paths(tmp_path)] == ["a.parquet", "b.jsonl"]
    assert [Path(p).name for p in shard_paths(str(tmp_path / "*.jsonl"))] == ["b.jsonl"]
    assert [Path(p).name for p in shard_paths([tmp_path / "c.txt"])] == ["c.txt"]
    with pytest.raises(InputError, match=r"^no shard matches '.*\*\.pq'$"):
        shard_paths(str(tmp_path / "*.pq"))


def test_a_name_that_exists_is_taken_literally_before_it_is_read_as_a_glob(tmp_path):
    """`validate 'dir/run[1].jsonl'` once checked dir/run1.jsonl: `[1]` read as a glob class."""
    import io
    import json

    from gyre_contract.cli._app import run
    from gyre_contract.io._shards import is_shard_source

    literal, other = tmp_path / "run[1].jsonl", tmp_path / "run1.jsonl"
    bad = episode("a", 3)
    bad[2]["step"] = 5
    literal.write_text("".join(json.dumps(r) + "\n" for r in bad))
    other.write_text("".join(json.dumps(r) + "\n" for r in episode("b", 2)))
    assert not is_shard_source(literal) and shard_paths(str(literal)) == [str(literal)]
    out, err = io.StringIO(), io.StringIO()
    assert run(["validate", str(literal), "--format", "json"], out, err) == 1
    assert json.loads(out.getvalue())["path"] == str(literal)
    assert json.loads(out.getvalue())["counts"]["steps"] == 3
    # a pattern that is no file's name is still a glob; a folder whose name looks like one is
    # searched as the folder it is
    assert shard_paths(str(tmp_path / "run[0-9].jsonl")) == [str(other)]
    folder = tmp_path / "shards[1]"
    folder.mkdir()
    (tmp_path / "shards1").mkdir()
    (tmp_path / "shards1" / "decoy.jsonl").write_text("")
    (folder / "x.jsonl").write_text("")
    assert shard_paths(folder) == [str(folder / "x.jsonl")]


def test_local_engine_reports_each_shard_as_validate_file_does(tmp_path, cartpole_model):
    paths = write_shards(tmp_path / "shards", "jsonl")
    report = validate_shards(str(tmp_path / "shards" / "*.jsonl"), cartpole_model, engine="local")
    for path, shard in zip(paths, report.shards):
        single = validate_file(path, cartpole_model)
        assert shard.to_dict() == single.to_dict()
    found = problem_lines(report)
    assert ("shard-2.jsonl", 6, "step does not follow the previous step") in found
    assert ("shard-5.jsonl", 2, "not valid JSON") in found
    assert ("shard-5.jsonl", 10, "step after the episode ended (a phantom reset transition?)") \
        in found
    assert {shard for shard, _, _ in found} == {"shard-2.jsonl", "shard-5.jsonl"}
    counts = report.counts()
    assert (counts["shards"], counts["lines"], counts["steps"], counts["episodes"]) == \
        (8, 97, 96, 24)
    assert report.exit_code() == 1


def test_an_episode_id_in_two_shards_is_reported(tmp_path, cartpole_model):
    write_steps(tmp_path / "a.jsonl", episode("x", 2))
    write_steps(tmp_path / "b.jsonl", episode("y", 1) + episode("x", 2))
    report = validate_shards([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], cartpole_model,
                             engine="local")
    assert all(s.ok for s in report.shards) and not report.ok
    (problem,) = report.cross_shard
    assert str(problem) == (
        f"episode_id: episode id appears in two shards: expected each episode in one shard, got "
        f"episode 'x' in {tmp_path / 'a.jsonl'} (line 1) and {tmp_path / 'b.jsonl'} (line 2)")


def test_text_report_lists_shards_fields_counts_and_problems_by_shard(tmp_path, monkeypatch,
                                                                     cartpole_model):
    monkeypatch.chdir(tmp_path)
    write_steps("a.jsonl", episode("x", 2))
    records = episode("y", 3)
    records[2]["step"] = 5
    write_parquet("b.parquet", records + episode("x", 1), cartpole_model)
    report = validate_shards(["a.jsonl", "b.parquet"], cartpole_model, engine="local")
    text = report.to_text().splitlines()
    assert text[:5] == [
        "a.jsonl, b.parquet: 2 shards checked against model CartPoleStep",
        "",
        "  a.jsonl           2 lines         2 steps  holds",
        "  b.parquet         4 rows          4 steps  1 problem",
        ""]
    assert text[6] == "observation     float32  [4]    float32 [4]        6"
    assert text[-8:] == [
        "counts: 6 lines/rows, 6 valid steps, 3 episodes (0 open, 3 terminated, 0 truncated), "
        "policy versions 0..0 (1 seen)",
        "",
        "problems: 2",
        "  b.parquet:",
        "    step: step does not follow the previous step (once)",
        "      line 3: step: step does not follow the previous step: expected 2 (previous step "
        "+ 1), got 5",
        "  across shards (1):",
        "    episode_id: episode id appears in two shards: expected each episode in one shard, "
        "got episode 'x' in a.jsonl (line 1) and b.parquet (line 4)",
    ]


def test_unknown_engine_is_an_input_error(tmp_path, cartpole_model):
    with pytest.raises(InputError, match=r"^unknown engine 'spark'; known: ray, local$"):
        validate_shards(tmp_path, cartpole_model, engine="spark")


# -- on a local Ray ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_local(ray_session):
    """The session's local Ray (tests/conftest.py)."""
    return ray_session


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_ray_engine_finds_planted_defects_with_shard_and_line(ray_local, tmp_path, fmt,
                                                              cartpole_model):
    write_shards(tmp_path / "shards", fmt)
    source = str(tmp_path / "shards" / f"*.{fmt}")
    on_ray = validate_shards(source, cartpole_model, engine="ray")
    local = validate_shards(source, cartpole_model, engine="local")
    assert on_ray.to_dict() == local.to_dict()  # parity: same verdicts, counts and problems
    assert on_ray.to_text() == local.to_text()
    bad_row_5 = "not valid JSON" if fmt == "jsonl" else "positive log-probability"
    found = problem_lines(on_ray)
    for planted in [(f"shard-2.{fmt}", 6, "step does not follow the previous step"),
                    (f"shard-5.{fmt}", 2, bad_row_5),
                    (f"shard-5.{fmt}", 10, "step after the episode ended (a phantom reset "
                                           "transition?)")]:
        assert planted in found
    assert {shard for shard, _, _ in found} == {f"shard-2.{fmt}", f"shard-5.{fmt}"}
    assert [s.ok for s in on_ray.shards] == [k not in (2, 5) for k in range(8)]


def test_validate_dataset_on_parquet_shards_equals_the_file_check(ray_local, tmp_path,
                                                                  cartpole_model):
    from gyre_contract.io._dataset import validate_dataset

    paths = write_shards(tmp_path / "shards", "parquet")
    ds = parquet_dataset(paths)
    from_dataset = validate_dataset(ds, cartpole_model, batch_size=5)
    from_files = validate_shards([str(p) for p in paths], cartpole_model, engine="local")
    assert strip_paths(from_dataset.to_dict()) == strip_paths(from_files.to_dict())


def test_validate_dataset_reports_an_episode_split_across_shards(ray_local, tmp_path,
                                                                 cartpole_model):
    import ray.data

    from gyre_contract.io._dataset import validate_dataset

    rows = [dict(r, path="a", row=i + 1) for i, r in enumerate(episode("x", 2))]
    rows += [dict(r, path="b", row=i + 1) for i, r in enumerate(episode("x", 1))]
    ds = ray.data.from_items(rows)
    report = validate_dataset(ds, cartpole_model, row_column="row")
    assert [str(p) for p in report.cross_shard] == [
        "episode_id: episode id appears in two shards: expected each episode in one shard, got "
        "episode 'x' in a (line 1) and b (line 1)"]
    with pytest.raises(InputError, match=r"^the dataset has no column 'shard'; have \["):
        validate_dataset(ds, cartpole_model, shard_column="shard")


def test_train_batches_hold_whole_episodes_of_one_shard(ray_local, tmp_path, cartpole_model):
    from gyre_contract.core._models import TrainBatch
    from gyre_contract.io._dataset import iter_train_batches

    paths = [tmp_path / f"s{k}.parquet" for k in range(2)]
    for k, path in enumerate(paths):
        write_parquet(path, shard_records(k), cartpole_model)
    ds = parquet_dataset(paths)
    batches = list(iter_train_batches(ds, FieldMap.load(MAP), cartpole_model,
                                      episodes_per_batch=2))
    assert all(isinstance(b, TrainBatch) for b in batches)
    ids = [b.episode_id.tolist() for b in batches]
    assert ids == [["s0-a", "s0-b"], ["s1-a", "s1-b"], ["s0-c"], ["s1-c"]]
    assert [b.mask.sum(axis=1).tolist() for b in batches] == [[4, 5], [4, 5], [3], [3]]
    assert batches[0].obs.shape == (2, 5, 4) and batches[2].truncated[0, 2]
    assert np.isfinite(batches[2].advantage[0]).all()


def test_train_batches_stop_at_the_first_broken_rule_naming_shard_and_row(
        ray_local, tmp_path, cartpole_model):
    from gyre_contract.io._dataset import iter_train_batches

    records = shard_records(0)
    records[5]["step"] = 3
    path = tmp_path / "bad.parquet"
    write_parquet(path, records, cartpole_model)
    ds = parquet_dataset([path])
    with pytest.raises(ContractError) as info:
        list(iter_train_batches(ds, FieldMap.load(MAP), cartpole_model))
    assert str(info.value) == (
        f"line 6: {path}: step: step does not follow the previous step: expected 1 (previous "
        f"step + 1), got 3")


# -- the command line ----------------------------------------------------------------------------

def test_cli_checks_a_glob_of_shards_and_ray_prints_the_same_report(ray_local, tmp_path):
    import io

    from gyre_contract.cli._app import run

    write_shards(tmp_path / "shards", "jsonl")
    source = str(tmp_path / "shards" / "*.jsonl")
    outputs = []
    for engine in ([], ["--engine", "local"], ["--engine", "ray"]):
        out, err = io.StringIO(), io.StringIO()
        code = run(["validate", source, "--model", "models:CartPoleStep", *engine], out, err)
        assert (code, err.getvalue()) == (1, "")
        outputs.append(out.getvalue())
    assert outputs[0] == outputs[1] == outputs[2]
    assert f"{tmp_path / 'shards' / 'shard-5.jsonl'}:" in outputs[0]
    assert "      line 2: not valid JSON: expected one JSON object per line" in outputs[0]


def test_cli_address_without_ray_engine_is_a_usage_error(tmp_path):
    import io

    from gyre_contract.cli._app import run

    out, err = io.StringIO(), io.StringIO()
    code = run(["validate", str(tmp_path), "--address", "auto"], out, err)
    assert (code, err.getvalue()) == (2, "error: --address needs --engine ray\n")


def test_cli_subprocess_validates_a_folder_of_shards(tmp_path):
    import json
    import subprocess
    import sys

    write_shards(tmp_path / "shards", "parquet")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "examples")]))
    done = subprocess.run(
        [sys.executable, "-m", "gyre_contract", "validate", str(tmp_path / "shards"), "--model",
         "models:CartPoleStep", "--format", "json"],
        capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["counts"]["shards"] == 8 and not report["holds"]
    assert [Path(s["path"]).name for s in report["shards"] if not s["holds"]] == \
        ["shard-2.parquet", "shard-5.parquet"]


# -- the report protocol ---------------------------------------------------------------------------

def test_shards_report_follows_the_report_protocol(tmp_path):
    import io
    import json
    import warnings

    from gyre_contract.cli._app import run
    from gyre_contract.core._report import Report

    write_shards(tmp_path / "shards", "jsonl")
    report = validate_shards(tmp_path / "shards", _model(), engine="local")
    assert isinstance(report, Report) and not report.ok and report.warnings == []
    assert (report.exit_code(), report.exit_code(strict=True)) == (1, 1)
    assert report.render("json") == json.dumps(report.to_dict(), indent=2, allow_nan=False,
                                               ensure_ascii=False)
    assert report.render("text") == report.to_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, err = io.StringIO(), io.StringIO()
        code = run(["validate", str(tmp_path / "shards"), "--model", "models:CartPoleStep",
                    "--format", "json"], out, err)
    assert (code, err.getvalue()) == (1, "")
    printed = json.loads(out.getvalue())
    assert printed == json.loads(json.dumps(report.to_dict()))
