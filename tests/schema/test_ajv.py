"""The exported schemas under ajv (JavaScript), the most used JSON Schema validator, in strict mode.

`tests/js/check_schemas.mjs` registers the x-gyre keywords from the vocabulary meta-schema
(docs/contract.md §5), compiles every file in `schemas/` plus the pinned models' schemas in ajv's
default strict mode, checks each against the meta-schema, and validates a corpus of records: the
good records, one record per registered field and step rule broken on purpose (the registry's
own builders), and every JSON object line of `tests/data/rollouts/`. Its verdicts must equal
Python's jsonschema on every record, never refuse a record `validate_step` accepts, and refuse
every record `validate_step` refuses for a rule a plain validator can check (`PLAIN_RULES`).

Skipped only when `node` is missing; the npm dependencies (ajv, pinned in package-lock.json) are
installed by `.ci/run`, or here with `npm ci` when `node_modules` is absent.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
from jsonschema import Draft202012Validator

from gyre_contract.core import _registry as registry
from gyre_contract.core._errors import ContractError
from gyre_contract.core._models import RolloutStepV1
from gyre_contract.core._validate import validate_step
from gyre_contract.pinned import CartPoleStep, LLMStep
from gyre_contract.schema._export import json_schema, vocabulary_schema

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "tests" / "js"

PLAIN_RULES = frozenset({"field.required", "field.unknown", "field.object", "field.not_null",
                         "field.shape", "field.nonempty_string", "field.info_scalars"})
"""Rules JSON Schema expresses fully: ajv must refuse a record that breaks one of them. The rest
(lossless dtype narrowing, finiteness, dims across fields, logprob sign and shape, the
next_observation rules, every episode rule) only gyre-contract checks (docs/contract.md §5).
`field.shape` only under a pinned model: a `*rest` shape of any rank cannot say "not ragged"."""

CLEAN: dict[str, dict[str, Any]] = {
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
    "image": {
        "observation": {"pixels": [[[0, 255, 7]]], "text": "look"}, "action": 2, "logprob": -1.5,
        "reward": 0.0,
        "step": 4, "episode_id": "img-1", "terminated": False, "truncated": True,
        "policy_version": 1, "next_value": 0.5,
    },
}
PAIRS = [(RolloutStepV1, "cartpole"), (RolloutStepV1, "llm"), (RolloutStepV1, "image"),
         (CartPoleStep, "cartpole"), (LLMStep, "llm")]


def _python_verdict(record: Any, model: type) -> tuple[bool, set[str]]:
    try:
        validate_step(record, model)
    except ContractError as err:
        return False, {p.rule for p in err.problems}
    return True, set()


def _cases() -> list[dict[str, Any]]:
    cases = []
    for model, name in PAIRS:
        clean = CLEAN[name]
        cases.append({"model": model, "record": clean, "label": f"{model.__name__}/{name}/clean"})
        for rule in registry.all_rules():
            if rule.kind not in ("field", "step"):
                continue
            broken = rule.violate(clean, model)
            if broken is not None and _is_json(broken):
                cases.append({"model": model, "record": broken,
                              "label": f"{model.__name__}/{name}/{rule.name}"})
    for path in sorted((ROOT / "tests" / "data" / "rollouts").glob("*.jsonl")):
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            cases.append({"model": RolloutStepV1, "record": record,
                          "label": f"{path.name}:{number}"})
    return cases


def _is_json(record: Any) -> bool:
    """False for what JSON cannot carry (NaN, infinities): no validator ever sees it."""
    try:
        json.dumps(record, allow_nan=False)
    except ValueError:
        return False
    return True


@pytest.fixture(scope="module")
def ajv_run(tmp_path_factory) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    if not (JS / "node_modules" / "ajv").is_dir():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=JS, check=True,
                       capture_output=True, timeout=600)
    cases = _cases()
    corpus = {"schemas": [json_schema(CartPoleStep), json_schema(LLMStep)],
              "cases": [{"schema": json_schema(c["model"])["$id"], "record": c["record"]}
                        for c in cases]}
    path = tmp_path_factory.mktemp("ajv") / "corpus.json"
    path.write_text(json.dumps(corpus), encoding="utf-8")
    done = subprocess.run([node, str(JS / "check_schemas.mjs"), str(ROOT / "schemas"), str(path)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return cases, json.loads(done.stdout)


def test_every_schema_compiles_in_strict_mode_with_the_vocabulary(ajv_run):
    _, result = ajv_run
    names = {p.name for p in (ROOT / "schemas").glob("*.json")} - {"gyre_vocabulary.v1.json"}
    assert names <= set(result["schemas"])
    for name, entry in result["schemas"].items():
        assert entry["compiled"] and entry["meets_meta_schema"], (name, entry["errors"])
    assert result["warnings"] == []
    assert result["keywords"] == list(vocabulary_schema()["properties"])


def test_ajv_agrees_with_jsonschema_and_validate_step(ajv_run):
    cases, result = ajv_run
    assert len(result["verdicts"]) == len(cases)
    checked_plain = set()
    for case, verdict in zip(cases, result["verdicts"]):
        label, record, model = case["label"], case["record"], case["model"]
        python_plain = Draft202012Validator(json_schema(model)).is_valid(record)
        assert verdict["valid"] == python_plain, (label, verdict["errors"])
        ours, rules = _python_verdict(record, model)
        if ours:
            assert verdict["valid"], (label, "ajv refuses a record validate_step accepts",
                                      verdict["errors"])
            continue
        plain = PLAIN_RULES - ({"field.shape"} if model is RolloutStepV1 else set())
        if rules & plain:
            checked_plain |= rules & plain
            assert not verdict["valid"], (label, "ajv accepts a record breaking", rules)
    assert checked_plain == PLAIN_RULES, "a plain rule the corpus never broke"


def test_a_malformed_x_gyre_keyword_fails_the_meta_schema(tmp_path):
    """The meta-schema checks the keywords' form: a dtype that does not exist is refused."""
    doc = json_schema(RolloutStepV1)
    doc["properties"]["reward"]["x-gyre-dtype"] = "float33"
    validator = Draft202012Validator(vocabulary_schema())
    assert not validator.is_valid(doc)
    assert validator.is_valid(json_schema(RolloutStepV1))
