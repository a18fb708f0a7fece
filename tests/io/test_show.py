"""`show_episode`: one episode step by step, marks, problems with rule names, bounded reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gyre_contract.core._errors import InputError
from gyre_contract.io import _show as show_module
from gyre_contract.io import write_steps
from gyre_contract.io._show import EpisodeView, show_episode
from gyre_contract.pinned import CartPoleStep

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cartpole_rollouts.jsonl"
CORPUS = ROOT / "tests" / "data" / "rollouts"


def step(eid: str, t: int, *, end: str | None = None, **extra: Any) -> dict[str, Any]:
    record = {"observation": [0.5, float(t), -1.0, 2.0], "action": t % 2, "logprob": -0.5,
              "reward": 1.0, "step": t, "episode_id": eid, "terminated": end == "terminated",
              "truncated": end == "truncated", "policy_version": 0}
    record.update(extra)
    return record


def write_lines(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                            for r in records), encoding="utf-8")
    return path


def test_first_complete_episode_by_default_with_interleaved_episodes(tmp_path: Path) -> None:
    # episode "a" starts first but "b" ends first: "b" is the first complete episode
    path = write_lines(tmp_path / "r.jsonl", [
        step("a", 0), step("b", 0), step("a", 1), step("b", 1, end="truncated", next_value=0.5),
        step("a", 2, end="terminated")])
    view = show_episode(path, width=200)
    assert isinstance(view, EpisodeView)
    assert (view.episode_id, len(view.rows), view.ended) == ("b", 2, "truncated")
    assert [row.line for row in view.rows] == [2, 4]
    assert view.ok and view.exit_code() == 0
    named = show_episode(path, "a", width=200)
    assert (named.episode_id, [r.step for r in named.rows], named.ended) == ("a", [0, 1, 2],
                                                                              "terminated")


def test_table_rows_start_with_the_step_and_show_tensors_as_dtype_shape(tmp_path: Path) -> None:
    view = show_episode(EXAMPLE, model=CartPoleStep, width=300)
    text = view.to_text()
    header, blank, columns, first = text.splitlines()[:4]
    assert header.startswith("episode 'cartpole-0-0' in ") and "40 steps, ended truncated" in header
    assert "policy version 0" in header and blank == ""
    assert columns.split()[:3] == ["step", "observation", "action"]
    assert first.split()[:3] == ["0", "float32[4]", "0.01251"]
    assert "…" in first  # only the first values of a tensor
    last = text.splitlines()[3 + 39]
    assert last.split()[0] == "39" and "true ◀" in last


def test_next_observation_is_absent_not_nan_on_steps_that_lack_it() -> None:
    view = show_episode(EXAMPLE, width=300)
    rows = view.rows
    assert "next_observation" not in rows[0].cells and "next_observation" in rows[-1].cells
    text = view.to_text()
    assert "nan" not in text.lower()
    at = text.splitlines()[2].index("next_observation")
    assert text.splitlines()[3][at] == "—"
    assert text.splitlines()[3 + 39][at:].startswith("float32[4] ")
    data = view.to_dict()
    assert "next_observation" not in data["steps"][0]["fields"]
    assert data["steps"][-1]["fields"]["next_observation"]["shape"] == [4]


def test_null_and_broken_rules_are_marked_and_listed_with_rule_names(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "r.jsonl", [
        step("a", 0), step("a", 1, reward=None), step("a", 2, logprob=0.3),
        step("a", 3, end="terminated")])
    view = show_episode(path, width=300)
    assert not view.ok and view.exit_code() == 1
    rules = [p.rule for p in view.problems]
    assert rules == ["field.not_null", "step.logprob_nonpositive"]
    assert [p.line for p in view.problems] == [2, 3]
    assert view.rows[1].cells["reward"].marks == ("null",)
    text = view.to_text()
    assert "[field.not_null]" in text and "[step.logprob_nonpositive]" in text
    assert "2 problems in episode 'a':" in text
    assert [r.problem for r in view.rows] == [False, True, True, False]


def test_dim_jump_is_marked_and_the_episode_rule_named() -> None:
    view = show_episode(CORPUS / "dimension_jump.jsonl", width=300)
    cells = [row.cells["observation"] for row in view.rows]
    assert [("dim_jump" in c.marks) for c in cells] == [False, False, True]
    assert cells[2].text.startswith("float32[5]")
    assert "episode.dims_fixed" in [p.rule for p in view.problems]
    assert "^" in view.to_text().splitlines()[5]


def test_a_declared_varying_dim_is_not_a_jump(tmp_path: Path) -> None:
    from gyre_contract.pinned import LLMStep

    def llm(t: int, n: int, end: bool = False) -> dict[str, Any]:
        return {"observation": {"token_ids": [1, 2, 3][: 1 + t]}, "action": list(range(n)),
                "logprob": [-0.1] * n, "reward": 0.0, "step": t, "episode_id": "g",
                "terminated": end, "truncated": False, "policy_version": 0}

    path = write_lines(tmp_path / "llm.jsonl", [llm(0, 2), llm(1, 3, end=True)])
    view = show_episode(path, model=LLMStep, width=300)
    assert view.ok, view.problems
    assert "observation.token_ids" in view.columns
    assert all("dim_jump" not in c.marks for r in view.rows for c in r.cells.values())


def test_non_finite_values_are_marked(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gyre_contract.io._arrowschema import to_arrow_schema

    records = [step("a", 0), step("a", 1, end="terminated")]
    records[1]["reward"] = float("nan")
    schema = to_arrow_schema(CartPoleStep)
    table = pa.Table.from_pylist(
        [{**r, "observation": np.asarray(r["observation"], np.float32)} for r in records],
        schema=schema)
    pq.write_table(table, tmp_path / "r.parquet")
    view = show_episode(tmp_path / "r.parquet", model=CartPoleStep, width=300)
    assert "non_finite" in view.rows[1].cells["reward"].marks
    assert "field.finite" in [p.rule for p in view.problems]
    data = json.loads(view.render("json"))  # no NaN in the JSON
    assert data["steps"][1]["fields"]["reward"] == {"value": "nan", "marks": ["non_finite"]}


def test_parquet_file_shows_the_same_episode(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from gyre_contract.io import read_steps
    from gyre_contract.io._parquet import write_parquet

    write_parquet(tmp_path / "r.parquet", read_steps(EXAMPLE, CartPoleStep), CartPoleStep)
    a = show_episode(EXAMPLE, model=CartPoleStep, width=300)
    b = show_episode(tmp_path / "r.parquet", model=CartPoleStep, width=300)
    assert a.to_text().splitlines()[1:] == b.to_text().splitlines()[1:]
    assert (b.episode_id, len(b.rows), b.ended) == (a.episode_id, 40, "truncated")
    assert [r.line for r in b.rows] == list(range(1, 41))  # Parquet rows, numbered from 1


def test_reading_stops_at_the_episode_end(tmp_path: Path) -> None:
    # what follows the chosen episode is never read: a broken tail does not matter
    path = write_lines(tmp_path / "r.jsonl", [step("a", 0), step("a", 1, end="terminated"),
                                              "not json", '{"truncated', ])
    view = show_episode(path)
    assert view.ok and len(view.rows) == 2


def test_unfinished_steps_held_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(show_module, "MAX_HELD_STEPS", 3)
    path = write_lines(tmp_path / "r.jsonl", [step(f"e{i}", 0) for i in range(5)])
    with pytest.raises(InputError, match="no episode ended within 3 steps"):
        show_episode(path)


def test_an_open_episode_is_shown_when_none_is_complete() -> None:
    view = show_episode(CORPUS / "open_episode.jsonl")
    assert view.ended == "open" and view.ok
    assert "ended open" in view.to_text().splitlines()[0]


def test_no_such_episode_names_a_few_that_exist(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "r.jsonl", [step(f"e{i}", 0, end="terminated")
                                              for i in range(9)])
    with pytest.raises(InputError) as err:
        show_episode(path, "zz")
    message = str(err.value)
    assert "no episode 'zz'" in message and "'e0', 'e1', 'e2', 'e3', 'e4'" in message
    assert "'e5'" not in message and "\n" not in message
    with pytest.raises(InputError, match="no episode to show"):
        show_episode(write_lines(tmp_path / "empty.jsonl", []))


def test_a_narrow_table_leaves_columns_out_and_names_them() -> None:
    text = show_episode(EXAMPLE, width=60).to_text()
    table = text.splitlines()[2:3 + 40]
    assert all(len(line) <= 60 for line in table)
    header = table[0].split()
    assert header[0] == "step" and "terminated" in header and "truncated" in header
    note = text.splitlines()[3 + 40]
    assert note.startswith("(") and "not shown:" in note and "next_observation" in note


def test_json_is_the_report_as_data(tmp_path: Path) -> None:
    view = show_episode(EXAMPLE, width=80)
    data = json.loads(view.render("json"))
    assert data == view.to_dict()
    assert data["columns"][0] == "step" and data["length"] == 40 and data["ok"] is True
    first = data["steps"][0]
    assert first["line"] == 1 and first["step"] == 0
    assert first["fields"]["observation"] == {"dtype": "float32", "shape": [4],
                                              "head": [0.012509546, 0.03972138, 0.02756857]}
    assert data["steps"][-1]["fields"]["truncated"] == {"value": True, "marks": ["end"]}


def test_same_view_with_fast_paths_off(monkeypatch: pytest.MonkeyPatch) -> None:
    on = show_episode(CORPUS / "dimension_jump.jsonl", width=200).to_dict()
    monkeypatch.setenv("GYRE_FAST_PATHS", "0")
    assert show_episode(CORPUS / "dimension_jump.jsonl", width=200).to_dict() == on


def test_written_steps_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    write_steps(path, [step("x", 0), step("x", 1, end="terminated", next_value=0.0)])
    view = show_episode(path)
    assert view.ok and [r.step for r in view.rows] == [0, 1]


def test_hostile_records_stay_short(tmp_path: Path) -> None:
    many = {f"k{i}\n\x1b[31m": i for i in range(300)}
    path = write_lines(tmp_path / "r.jsonl", [step("a", t, end="terminated" if t == 2 else None,
                                                   **many) for t in range(3)])
    view = show_episode(path, width=120)
    assert view.exit_code() == 1
    assert len(view.problems) == show_module.MAX_PROBLEMS and view.more_problems == 700
    assert all(len(r.cells) <= show_module.MAX_COLUMNS for r in view.rows)
    assert view.more_keys > 0 and view.rows[0].step == 0  # the model's fields come first
    text = view.to_text()
    assert "\x1b" not in text and "… and 700 more" in text
    assert all(line.isprintable() for line in text.splitlines())
    assert json.loads(view.render("json"))["more_problems"] == 700
