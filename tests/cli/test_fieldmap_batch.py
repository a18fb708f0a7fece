"""`FieldMap.batch`: the trainer's batch in memory in one call, exactly the arrays that
`gyre-contract batch --map M.json [--trainer T.json] -o B.npz` writes; and the batch dims a map
written by `diff --write-map` records, so `batch --trainer` on that schema needs no flag."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_token_maps import records as grpo_records

from gyre_contract.cli._app import run
from gyre_contract.core._errors import SchemaError
from gyre_contract.io import read_episodes, read_steps
from gyre_contract.io._writer import write_steps
from gyre_contract.pinned import CartPoleStep, LLMStep
from gyre_contract.schema import diff, json_schema
from gyre_contract.trainer import FieldMap
from gyre_contract.trainer._layouts import TokenRows

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"
CARTPOLE_MAP = ROOT / "examples" / "cartpole_map.json"
SAMPLER = ROOT / "schemas" / "rollout_step.v1.json"
PEERS = ROOT / "tests" / "data" / "peers"


def cli(*argv: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run([str(a) for a in argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def assert_same(got: dict[str, np.ndarray], written: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(written)
    for key, arr in written.items():
        assert got[key].dtype == arr.dtype and got[key].shape == arr.shape, key
        np.testing.assert_array_equal(got[key], arr, err_msg=key)


@pytest.fixture(scope="module")
def llm_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """GRPO rollouts, verl's schema without `x-gyre-batch-dims` (as verl's own code gives
    none), the LLM step schema, and the map `diff` writes between them."""
    root = tmp_path_factory.mktemp("llm")
    rollouts = root / "grpo.jsonl"
    write_steps(rollouts, grpo_records())
    verl = json.loads((PEERS / "verl_actor_batch.json").read_text())
    del verl["x-gyre-batch-dims"]
    (root / "verl.json").write_text(json.dumps(verl))
    (root / "llm_step.json").write_text(json.dumps(json_schema(LLMStep)))
    code, _, err = cli("diff", root / "llm_step.json", root / "verl.json", "--write-map",
                       root / "map.json")
    assert code == 0, err
    return {"rollouts": rollouts, "trainer": root / "verl.json", "map": root / "map.json"}


# -- one call, the same arrays as the .npz -----------------------------------------------------

def test_a_control_map_gives_the_arrays_batch_writes(tmp_path: Path) -> None:
    out = tmp_path / "b.npz"
    code, _, err = cli("batch", ROLLOUTS, "--map", CARTPOLE_MAP, "--model",
                       "gyre_contract.pinned:CartPoleStep", "-o", out)
    assert code == 0, err
    got = FieldMap.load(CARTPOLE_MAP).batch(ROLLOUTS, model=CartPoleStep)
    assert_same(got, npz(out))
    assert got["episode_id"].dtype.kind == "U"  # as the .npz holds it: no object arrays


def test_a_control_map_into_a_trainers_keys_gives_the_arrays_batch_writes(tmp_path: Path) -> None:
    trainer = PEERS / "torchrl_ppo.json"
    fmap = tmp_path / "map.json"
    assert cli("diff", SAMPLER, trainer, "--batch-dims", "B,T", "--write-map", fmap)[0] == 0
    out = tmp_path / "b.npz"
    code, _, err = cli("batch", ROLLOUTS, "--map", fmap, "--trainer", trainer, "-o", out)
    assert code == 0, err  # no --batch-dims: the map records B,T
    got = FieldMap.load(fmap).batch(ROLLOUTS, trainer=trainer)
    assert_same(got, npz(out))
    assert "next.reward" in got and got["next.reward"].shape[-1] == 1


def test_a_token_map_gives_the_arrays_batch_writes(llm_files: dict[str, Path],
                                                   tmp_path: Path) -> None:
    out = tmp_path / "b.npz"
    code, _, err = cli("batch", llm_files["rollouts"], "--map", llm_files["map"], "--trainer",
                       llm_files["trainer"], "-o", out)
    assert code == 0, err
    fmap = FieldMap.load(llm_files["map"])
    got = fmap.batch(llm_files["rollouts"], trainer=llm_files["trainer"])
    assert_same(got, npz(out))
    assert got["uid"].dtype.kind == "U" and got["input_ids"].shape[0] == len(grpo_records())
    # the same step records held in memory (dicts, or models) give the same arrays
    assert_same(fmap.batch(grpo_records(), trainer=llm_files["trainer"]), got)
    steps = list(read_steps(llm_files["rollouts"], LLMStep))
    assert_same(fmap.batch(steps, trainer=llm_files["trainer"]), got)


def test_step_records_of_a_control_map_are_validated_and_grouped() -> None:
    fmap = FieldMap.load(CARTPOLE_MAP)
    records = [json.loads(line) for line in ROLLOUTS.read_text().splitlines()]
    assert_same(fmap.batch(records, model=CartPoleStep), fmap.batch(ROLLOUTS, model=CartPoleStep))
    records[3]["reward"] = float("nan")
    with pytest.raises(Exception, match=r"records\[3\]\.reward"):
        fmap.batch(records, model=CartPoleStep)


def test_sources_can_be_built_again_and_an_iterator_is_consumed_loudly() -> None:
    fmap = FieldMap.load(CARTPOLE_MAP)
    episodes = list(read_episodes(ROLLOUTS, CartPoleStep))
    first = fmap.batch(episodes)
    assert_same(fmap.batch(episodes), first)  # a list: again
    assert_same(fmap.batch(ROLLOUTS, model=CartPoleStep), first)  # a path: read again
    stream = read_episodes(ROLLOUTS, CartPoleStep)
    assert_same(fmap.batch(stream), first)
    with pytest.raises(ValueError, match="consumed"):
        fmap.batch(stream)  # never an empty batch from a spent iterator


# -- the batch dims the map records ------------------------------------------------------------

def test_the_written_token_map_records_the_dims_diff_assumed(llm_files: dict[str, Path]) -> None:
    written = json.loads(llm_files["map"].read_text())
    assert written["batch_dims"] == ["B"] and written["layout"] == "padded"
    fmap = FieldMap.load(llm_files["map"])
    assert fmap.layout == TokenRows(batch_dims=("B",), name="padded")
    assert FieldMap.from_dict(fmap.to_dict()).to_dict() == fmap.to_dict()


@pytest.mark.parametrize(("peer", "dims", "layout"), [
    ("torchrl_ppo", "B,T", "batch"), ("cleanrl_ppo_storage", "T,B", "time_major"),
    ("sb3_rollout_samples", "M", "flat"),
])
def test_the_written_control_map_records_dims_and_layout(peer: str, dims: str,
                                                        layout: str) -> None:
    written = diff(CartPoleStep, PEERS / f"{peer}.json", batch_dims=dims).field_map()
    assert (written["batch_dims"], written["layout"]) == (dims.split(","), layout)
    assert FieldMap.from_dict(written).layout.batch_dims == tuple(dims.split(","))


def test_batch_on_the_schema_diff_read_needs_no_batch_dims(llm_files: dict[str, Path],
                                                           tmp_path: Path) -> None:
    code, out, err = cli("batch", llm_files["rollouts"], "--map", llm_files["map"],
                         "--trainer", llm_files["trainer"], "--format", "json")
    assert code == 0, err
    assert json.loads(out)["fields"]["input_ids"]["shape"][0] == len(grpo_records())
    # a map written before maps recorded dims: the flag is needed, and the hint lists `B`
    old = json.loads(llm_files["map"].read_text())
    del old["batch_dims"], old["layout"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    code, out, err = cli("batch", llm_files["rollouts"], "--map", tmp_path / "old.json",
                         "--trainer", llm_files["trainer"])
    assert code == 2 and err.count("\n") == 1 and "no batch dims" in err
    for spelling in ("B,T", "T,B", "M or T*N", "B (token rows"):
        assert spelling in err
    code, _, err = cli("batch", llm_files["rollouts"], "--map", tmp_path / "old.json",
                       "--trainer", llm_files["trainer"], "--batch-dims", "B")
    assert code == 0, err


def test_a_map_and_a_schema_naming_other_dims_is_refused(llm_files: dict[str, Path],
                                                        tmp_path: Path) -> None:
    fmap = json.loads(llm_files["map"].read_text())
    verl = json.loads(llm_files["trainer"].read_text()) | {"x-gyre-batch-dims": ["N"]}
    (tmp_path / "verl.json").write_text(json.dumps(verl))
    with pytest.raises(SchemaError, match=r"written for batch dims \[B\], but .* names \[N\]"):
        FieldMap.from_dict(fmap).batch(llm_files["rollouts"], trainer=tmp_path / "verl.json")
    (tmp_path / "map.json").write_text(json.dumps(fmap))
    code, _, err = cli("batch", llm_files["rollouts"], "--map", tmp_path / "map.json",
                       "--trainer", tmp_path / "verl.json")
    assert code == 2 and "diff --write-map" in err and err.count("\n") == 1
    # an explicit flag chooses
    got = FieldMap.from_dict(fmap).batch(llm_files["rollouts"], trainer=tmp_path / "verl.json",
                                         batch_dims="N")
    assert got["input_ids"].shape[0] == len(grpo_records())
