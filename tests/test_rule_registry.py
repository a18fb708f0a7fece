"""Every registered rule, broken on purpose, through every path: each path must name the rule.

The registry (`gyre_contract.core._registry`, rules in `core._rules`) holds each rule once, with a
builder of an input that breaks exactly it. For every rule and every model it applies to, the
broken input goes through each public entry point — `validate_step` (default and pinned
models), `validate_episode`, `validate_batch`, `validate_file` on JSON Lines with the fast paths
on (the bulk reader for a simple model) and off (`GYRE_FAST_PATHS=0`, line by line), on a
Parquet file, and `validate_shards` on a local Ray — and every problem reported must name that
rule. A path that accepted the input (a rule it does not know) reports nothing and fails here.

`test_every_fast_path_implements_every_rule` fails when a rule is registered that a fast path does
not declare (the fast path would step aside for good); the fixture `extra_rule` shows it does.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gyre_contract.core import _registry as registry
from gyre_contract.core._errors import ContractError, Problem
from gyre_contract.core._fastpath import fast_plan
from gyre_contract.core._models import RolloutStep, TrainBatch
from gyre_contract.core._registry import Rule
from gyre_contract.core._tokens import PackedBatch, TokenBatch
from gyre_contract.core._validate import validate_batch, validate_episode, validate_step
from gyre_contract.io import _fastfile  # noqa: F401  (declares the bulk reader's fast path)
from gyre_contract.io._fastfile import bulk_plan
from gyre_contract.io._validation import validate_file
from gyre_contract.pinned import CartPoleBatch, CartPoleStep, LLMStep

pytestmark = pytest.mark.usefixtures("fast_paths_on")
"""These tests are about the fast paths: on here even when CI runs with GYRE_FAST_PATHS=0."""


ROOT = Path(__file__).resolve().parent.parent

CLEAN = {
    "cartpole": {
        "observation": [0.01, -0.02, 0.03, 0.04], "action": 1, "logprob": -0.69, "value": 0.5,
        "reward": 1.0, "step": 0, "episode_id": "ep-0", "terminated": False, "truncated": False,
        "policy_version": 0, "info": {"seed": 3},
    },
    "llm": {
        "observation": {"token_ids": [101, 2023, 2003], "text": "2+2="},
        "action": [1016, 102], "logprob": [-0.1, -0.05], "reward": 1.0, "step": 0,
        "episode_id": "prompt-7/0", "terminated": True, "truncated": False, "policy_version": 3,
    },
}
STEP_MODELS = [(RolloutStep, "cartpole"), (RolloutStep, "llm"), (CartPoleStep, "cartpole"),
               (LLMStep, "llm")]
"""(model, clean record) pairs: the default model with both records, each pinned model."""
BATCH_MODELS = [TrainBatch, CartPoleBatch, TokenBatch, PackedBatch]

RECORD_RULES = [r.name for r in registry.all_rules() if r.kind in ("field", "step", "episode")]
BATCH_RULES = [r.name for r in registry.all_rules("batch")]
FILE_PATHS = ["jsonl_bulk", "jsonl_lines", "parquet", "ray"]

NOT_IN_JSON = {"field.finite": "JSON has no non-finite number: the line reader refuses the "
                               "literal before any record rule (tests/io/test_rollout.py)"}
NOT_IN_PARQUET = {
    "episode.structure_fixed": "a Parquet column has one type for the whole file: a list column "
                               "or a struct of modalities, never one then the other",
    "episode.dtype_fixed": "a Parquet column has one type for the whole file: the action is int64 "
                           "or float32 on every row (`write_parquet` refuses the other)",
}
ALSO = {"step.next_observation_shape": {"step.dims_agree"}}
"""Rules that cannot be broken alone: under the default model the observation and the next
one share the dim `*obs`, so a different shape also breaks `step.dims_agree`."""


def clean_batch(model: type) -> dict[str, Any]:
    """B=2 rows of T=3 steps, the second row one step of padding (a token batch: B=2 rows, the
    first with one prompt token of left padding and two response tokens of right padding)."""
    if model.gyre_kind == "token_batch":
        return clean_token_batch()
    if model.gyre_kind == "packed_batch":
        return clean_packed_batch()
    mask = np.array([[True, True, True], [True, True, False]])
    done = np.array([[False, False, True], [False, True, False]])
    obs = np.zeros((2, 3, 4), np.float32)
    return {"obs": obs, "action": np.ones((2, 3), np.int64), "reward": np.ones((2, 3), np.float32),
            "done": done, "terminated": done.copy(), "truncated": np.zeros((2, 3), bool),
            "advantage": np.zeros((2, 3), np.float32), "logprob": np.full((2, 3), -0.5, np.float32),
            "mask": mask, "policy_version": np.array([4, 4]), "episode_id": np.array(["a", "b"])}


def clean_token_batch() -> dict[str, Any]:
    response_mask = np.array([[True, True, False, False], [True, True, True, True]])
    return {"prompt_ids": np.array([[0, 5, 6], [7, 8, 9]]),
            "prompt_mask": np.array([[False, True, True], [True, True, True]]),
            "response_ids": np.where(response_mask, 11, 0), "response_mask": response_mask,
            "response_length": np.array([2, 4]), "logprob": np.full((2, 4), -0.5, np.float32),
            "ref_logprob": np.full((2, 4), -0.25, np.float32),
            "advantage": np.zeros(2, np.float32), "reward": np.ones(2, np.float32),
            "group_id": np.array(["g", "g"]), "episode_id": np.array(["a", "b"]),
            "policy_version": np.array([4, 4]), "step": np.array([0, 0])}


def clean_packed_batch() -> dict[str, Any]:
    """M=2 micro-batch rows of S=5 tokens holding B=3 samples: sample 0 (4 tokens) and the tail
    padding in row 0, samples 1 (3 tokens) and 2 (2 tokens) in row 1."""
    index = np.array([[0, 0, 0, 0, -1], [1, 1, 1, 2, 2]])
    loss = np.array([[False, False, True, True, False], [False, True, True, False, True]])
    return {"input_ids": np.where(index >= 0, 7, 0), "pad_mask": index >= 0,
            "position_ids": np.array([[0, 1, 2, 3, 0], [0, 1, 2, 0, 1]]), "sample_index": index,
            "loss_mask": loss, "advantages": np.where(loss, 0.5, 0.0).astype(np.float32),
            "logprobs": np.where(loss, -0.5, 0.0).astype(np.float32),
            "reward": np.ones(3, np.float32), "episode_id": np.array(["a", "b", "c"]),
            "policy_version": np.array([4, 4, 4])}


def batch_cases() -> list[Any]:
    """(rule, batch model) pairs where the rule's builder breaks the model's clean batch."""
    return [pytest.param(name, model, id=f"{name}-{model.__name__}")
            for name in BATCH_RULES for model in BATCH_MODELS
            if registry.get_rule(name).violate(clean_batch(model), model) is not None]


# -- helpers ---------------------------------------------------------------------------------


def broken(name: str, model: type, record: str) -> list[Any]:
    """The rule's broken inputs under `model` from a clean record (its builder's and its
    variants'; none when `model` cannot break it)."""
    return registry.get_rule(name).violations(dict(CLEAN[record]), model)


def as_file_records(rule: Rule, bad: Any, record: str) -> list[dict[str, Any]]:
    """A whole file: one clean, finished episode first, then the broken record(s)."""
    clean = [dict(CLEAN[record], episode_id="clean", step=i, terminated=i == 1, truncated=False)
             for i in range(2)]
    return clean + (bad if isinstance(bad, list) else [bad])


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_parquet_file(path: Path, records: list[dict[str, Any]], model: type) -> Path | None:
    """The records as a Parquet file, or None when `write_parquet` refuses them (a column type
    that cannot hold the broken value: the Parquet path cannot carry it under this model)."""
    import pyarrow as pa

    from gyre_contract.io._parquet import write_parquet

    try:
        write_parquet(path, records, model)
    except (ContractError, pa.ArrowInvalid):
        return None
    return path


def build_parquet_file(path: Path, records: list[dict[str, Any]], model: type) -> Path | None:
    """The records as a Parquet file written with plain pyarrow, as another tool would (no
    `write_parquet` checks), or None when one Arrow column cannot hold them.

    A column's type is inferred from the broken record(s) first. A required key missing from a
    record leaves the whole column out (a row cannot lack a column; its null is `field.not_null`);
    a key only some records have is null elsewhere. When the clean records do not fit the broken
    value's column type (reward `true` after floats), the file holds the broken record(s) alone.
    Fields laid out as JSON text (`info`) are written as their JSON text. A table whose columns
    do not give the records' values back as they are (pyarrow reads `[16777217, 1.5]` or an int
    among float rewards as floats) is not the same data: the broken records alone are tried, then
    None (Parquet cannot carry it as JSON does).
    """
    import orjson
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gyre_contract.core._modelinfo import model_info
    from gyre_contract.core._models import JsonScalars
    from gyre_contract.io._arrowschema import spec_of

    info = model_info(model)
    clean = [r for r in records if r.get("episode_id") == "clean"]
    bad = [r for r in records if r.get("episode_id") != "clean"]

    def table(rows: list[dict[str, Any]]) -> Any:
        names = list(dict.fromkeys(k for r in rows for k in r))
        columns = {}
        for name in names:
            if name in info.required and any(name not in r for r in rows):
                continue
            json_text = name in info.wires and isinstance(spec_of(model, name), JsonScalars)
            values = [r.get(name) for r in rows]
            if json_text:
                values = [None if v is None else orjson.dumps(v).decode() for v in values]
            first = values[len(clean):] + values[:len(clean)] if rows is records else values
            columns[name] = pa.array(values, type=pa.array(first).type)
            if orjson.dumps(columns[name].to_pylist()) != orjson.dumps(values):
                raise TypeError(f"column {name} does not hold the values as they are")
        return pa.table(columns)

    try:
        built = table(records)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        try:
            built = table(bad)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            return None
    pq.write_table(built, path)
    return path


def not_naming(rule: str, problems: list[Problem]) -> list[str]:
    """What is wrong with `problems` as the report of breaking `rule` (and only it): nothing,
    or that nothing names it, or the problems that name another rule or none."""
    if not any(p.rule == rule for p in problems):
        return [f"no problem names {rule}: {[str(p) for p in problems]}"]
    allowed = {rule} | ALSO.get(rule, set())
    return [f"{p} (rule {p.rule})" for p in problems if p.rule not in allowed]


def step_problems(bad: dict[str, Any], model: type) -> list[Problem]:
    try:
        validate_step(bad, model)
    except ContractError as err:
        return err.problems
    return []


def applicable(name: str) -> list[tuple[type, str, Any]]:
    return [(m, rec, bad) for m, rec in STEP_MODELS for bad in broken(name, m, rec)]


# -- the registry itself -----------------------------------------------------------------------


def test_every_rule_breaks_under_some_model():
    for name in RECORD_RULES:
        assert applicable(name), f"{name}: no model under which its builder breaks it"
    for name in BATCH_RULES:
        assert any(registry.get_rule(name).violate(clean_batch(m), m) is not None
                   for m in BATCH_MODELS), name


def test_every_fast_path_implements_every_rule():
    """A rule a fast path does not declare makes it step aside for good: declare it (and
    implement it), or this fails. Lists the fast paths each uncovered rule leaves."""
    import gyre_contract.io._arrowlines  # declares arrow_jsonl (and ragged_columns)
    import gyre_contract.io._ducklines  # declares duck_jsonl
    import gyre_contract.io._parquetcols  # declares parquet_columns
    import gyre_contract.io._recordcols  # noqa: F401  (declares record_columns)

    assert set(registry.fast_paths()) >= {"compiled_step", "bulk_jsonl", "bulk_episode",
                                          "parquet_columns", "arrow_jsonl", "ragged_columns",
                                          "record_columns", "duck_jsonl"}
    uncovered = {r.name: registry.uncovered(r.name) for r in registry.all_rules()}
    assert {k: v for k, v in uncovered.items() if v} == {}
    assert fast_plan(CartPoleStep) is not None and fast_plan(LLMStep) is not None
    assert bulk_plan(CartPoleStep) is not None
    from gyre_contract.io._raggedcols import ragged_plan

    assert ragged_plan(LLMStep) is not None and ragged_plan(CartPoleStep) is None


@pytest.fixture
def extra_rule():
    """A rule registered for the explaining path only (no fast path declares it), then removed."""
    rule = Rule("step.reward_not_42", "step", ("reward is 42",),
                lambda s: [Problem("reward", "not 42", "42", "reward is 42")] if s.reward == 42
                else [], lambda r, m: dict(r, reward=42.0))
    with registry.registered(rule):
        yield rule


def test_a_rule_no_fast_path_declares_is_caught(extra_rule):
    from gyre_contract.io._arrowlines import ARROW_FAST_PATH
    from gyre_contract.io._ducklines import DUCK_FAST_PATH
    from gyre_contract.io._parquetcols import PARQUET_FAST_PATH
    from gyre_contract.io._raggedcols import ragged_plan
    from gyre_contract.io._recordcols import RECORDS_FAST_PATH

    assert set(registry.uncovered(extra_rule.name)) == {
        "compiled_step", "bulk_jsonl", "parquet_columns", "arrow_jsonl", "ragged_columns",
        "record_columns", "duck_jsonl"}
    assert fast_plan(CartPoleStep) is None and bulk_plan(CartPoleStep) is None  # step aside
    assert not PARQUET_FAST_PATH.usable() and not ARROW_FAST_PATH.usable()
    assert not DUCK_FAST_PATH.usable()
    assert not RECORDS_FAST_PATH.usable()
    assert ragged_plan(LLMStep) is None
    problems = step_problems(dict(CLEAN["cartpole"], reward=42.0), CartPoleStep)
    assert [p.rule for p in problems] == [extra_rule.name]  # never skipped meanwhile


def test_fast_paths_come_back_when_the_extra_rule_is_gone(extra_rule):
    registry.unregister(extra_rule.name)
    try:
        assert fast_plan(CartPoleStep) is not None and bulk_plan(CartPoleStep) is not None
    finally:
        registry.register(extra_rule)


def test_fast_paths_off_at_run_time(monkeypatch):
    from gyre_contract.io._recordcols import check_records

    plan = bulk_plan(CartPoleStep)
    record = dict(CLEAN["cartpole"], observation=np.zeros(4, np.float32))
    del record["info"]
    assert check_records(plan, [record]) is not None
    monkeypatch.setenv("GYRE_FAST_PATHS", "0")
    assert fast_plan(CartPoleStep) is None and bulk_plan(CartPoleStep) is None
    assert check_records(plan, [record]) is None  # a plan made before: still steps aside


def test_problems_carry_their_rule_in_to_dict():
    problem = step_problems(dict(CLEAN["cartpole"], logprob=0.5), CartPoleStep)[0]
    assert problem.to_dict()["rule"] == "step.logprob_nonpositive"
    assert "rule" not in Problem("x", "a", "b", "m").to_dict()


EXPLAINING = {"gyre_contract/core/_models.py": set(),
              "gyre_contract/core/_validate.py": {"_field_problem", "_problems_of"}}
"""The explaining path's modules, and the functions in each allowed to build a `Problem`
(`_field_problem` and `_problems_of` translate pydantic's per-field errors, each named by
`rules.field_rule`)."""


def test_the_explaining_path_holds_no_rule_of_its_own():
    """A check written into the models or the tracker rather than registered (one more `if` in
    `step_cross_problems`) would be skipped by every fast path and by the walk above, which only
    knows registered rules: no `Problem` is built there outside the registry."""
    built = []
    for rel, allowed in EXPLAINING.items():
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) or func.name in allowed:
                continue
            built += [f"{rel}:{n.lineno} ({func.name})" for n in ast.walk(func)
                      if isinstance(n, ast.Call) and isinstance(n.func, ast.Name | ast.Attribute)
                      and (getattr(n.func, "id", None) or getattr(n.func, "attr", None))
                      in ("Problem", "by_rule")]
    assert built == [], "register the rule in core.rules instead"
    source = ast.parse((ROOT / "gyre_contract/core/_models.py").read_text(encoding="utf-8"))
    cross = next(f for f in ast.walk(source)
                 if isinstance(f, ast.FunctionDef) and f.name == "step_cross_problems")
    assert ast.unparse(cross.body[-1]) == "return run('step', None, step)" \
        and len([s for s in cross.body if not isinstance(s, ast.Expr)]) == 1

# -- in memory: validate_step, validate_episode, validate_batch ---------------------------------


@pytest.mark.parametrize("name", RECORD_RULES)
def test_in_memory_paths_name_the_rule(name):
    rule = registry.get_rule(name)
    for model, record, bad in applicable(name):
        if rule.kind == "episode":
            try:
                validate_episode(bad, model, **rule.options)
                problems: list[Problem] = []
            except ContractError as err:
                problems = err.problems
            assert not_naming(name, problems) == [], (model.__name__, record)
        else:
            assert not_naming(name, step_problems(bad, model)) == [], (model.__name__, record)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "normal"])
def test_validate_step_names_the_rule_pinned_and_default(fast, monkeypatch):
    """Both ways of validate_step, per model: the pinned models have compiled fast plans."""
    monkeypatch.setenv("GYRE_FAST_PATHS", "1" if fast else "0")
    for name in RECORD_RULES:
        if registry.get_rule(name).kind == "episode":
            continue
        for model, _record, bad in applicable(name):
            assert not_naming(name, step_problems(bad, model)) == [], (name, model.__name__)


def test_every_batch_model_breaks_under_its_own_rules_only():
    """The shared rules (dims, extras, staleness) break every batch model; the `[B, T]` rules
    only a TrainBatch, the token rules only a TokenBatch."""
    pairs = {(p.values[0], p.values[1]) for p in batch_cases()}
    for name in BATCH_RULES:
        models = {m for n, m in pairs if n == name}
        phase = registry.get_rule(name).phase
        expected = set(BATCH_MODELS) if phase in ("shape", "staleness") else \
            {TokenBatch} if phase.startswith("token") else \
            {PackedBatch} if phase.startswith("packed") else {TrainBatch, CartPoleBatch}
        assert models == expected, name


@pytest.mark.parametrize(("name", "model"), batch_cases())
def test_validate_batch_names_the_rule(name, model):
    rule = registry.get_rule(name)
    validate_batch(clean_batch(model), model, **rule.options)  # the clean batch holds
    bad = rule.violate(clean_batch(model), model)
    with pytest.raises(ContractError) as err:
        validate_batch(bad, model, **rule.options)
    assert not_naming(name, err.value.problems) == []


# -- files: JSON Lines both ways, Parquet, Ray ------------------------------------------------


def file_cases() -> list[Any]:
    cases = []
    for name in RECORD_RULES:
        for path in FILE_PATHS:
            if path.startswith("jsonl") and name in NOT_IN_JSON:
                continue  # JSON Lines cannot carry the broken value (see NOT_IN_JSON)
            if path == "parquet" and name in NOT_IN_PARQUET:
                continue  # one type per column: Parquet cannot carry it (see NOT_IN_PARQUET)
            cases.append(pytest.param(name, path, id=f"{name}-{path}"))
    return cases


def file_problems(path: Path, model: type, options: dict[str, Any]) -> list[Problem]:
    report = validate_file(path, model, **options)
    return report.problems()


@pytest.mark.parametrize(("name", "path"), [c for c in file_cases() if c.values[1] != "ray"])
def test_files_name_the_rule(name, path, tmp_path, monkeypatch):
    rule = registry.get_rule(name)
    monkeypatch.setenv("GYRE_FAST_PATHS", "0" if path == "jsonl_lines" else "1")
    options = dict(rule.options)
    checked = 0
    for i, (model, record, bad) in enumerate(applicable(name)):
        records = as_file_records(rule, bad, record)
        if path == "parquet":
            file = build_parquet_file(tmp_path / f"{i}.parquet", records, model)
            if file is None:
                continue
        else:
            file = write_jsonl(tmp_path / f"{i}.jsonl", records)
        problems = file_problems(file, model, options)
        assert not_naming(name, problems) == [], (model.__name__, record)
        checked += 1
    assert checked, f"{name}: no model under which {path} can carry the broken input"


@pytest.fixture(scope="module")
def ray_reports(tmp_path_factory, ray_session):
    """Every rule's files as shards, checked on the session's local Ray, one call per model."""
    from gyre_contract.io._shards import validate_shards

    folder = tmp_path_factory.mktemp("ray_rules")
    shards: dict[type, list[tuple[str, int, Path]]] = {}
    for name in RECORD_RULES:
        rule = registry.get_rule(name)
        for i, (model, record, bad) in enumerate(applicable(name)):
            records = as_file_records(rule, bad, record)
            stem = f"{name}-{model.__name__}-{i}".replace(".", "_")
            if name in NOT_IN_JSON:
                file = write_parquet_file(folder / f"{stem}.parquet", records, model)
                if file is None:
                    continue
            else:
                file = write_jsonl(folder / f"{stem}.jsonl", records)
            shards.setdefault(model, []).append((name, i, file))
    out: dict[str, list[Problem]] = {name: [] for name in RECORD_RULES}
    checked: dict[str, int] = {name: 0 for name in RECORD_RULES}
    for model, items in shards.items():
        for complete in (False, True):
            chosen = [(n, f) for n, _, f in items
                      if bool(registry.get_rule(n).options.get("require_complete")) == complete]
            if not chosen:
                continue
            report = validate_shards([str(f) for _, f in chosen], model, engine="ray",
                                     require_complete=complete)
            by_shard = {str(f): n for n, f in chosen}
            for shard, problem in report.problems():
                if shard:  # not the ids shared by shards (every shard has "clean")
                    out[by_shard[str(shard)]].append(problem)
            for n, _ in chosen:
                checked[n] += 1
    return out, checked


@pytest.mark.slow  # a local Ray cluster
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")
@pytest.mark.parametrize("name", RECORD_RULES)
def test_ray_shards_name_the_rule(name, ray_reports):
    problems, checked = ray_reports
    assert checked[name] >= 1
    assert not_naming(name, problems[name]) == []
