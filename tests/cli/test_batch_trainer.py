"""`gyre-contract batch --trainer T.json`: the batch checked against a trainer's own schema and
written under its own keys (the map `diff --write-map` wrote runs into that trainer's batch)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from gyre_contract.cli._app import run
from gyre_contract.harness._stages import half_way
from gyre_contract.trainer._trainerbatch import trainer_schema

ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = ROOT / "examples" / "cartpole_rollouts.jsonl"
SAMPLER = ROOT / "schemas" / "rollout_step.v1.json"
PEERS = ROOT / "tests" / "data" / "peers"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run([str(a) for a in argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def write_map(tmp_path: Path, trainer: Path, dims: str) -> Path:
    target = tmp_path / f"{trainer.stem}_map.json"
    code, _, err = cli("diff", SAMPLER, trainer, "--batch-dims", dims, "--write-map", target)
    assert code == 0, err
    return target


def test_torchrl_map_runs_into_the_trainers_own_keys(tmp_path):
    trainer = PEERS / "torchrl_ppo.json"
    fmap = write_map(tmp_path, trainer, "B,T")
    out = tmp_path / "torchrl.npz"
    code, text, err = cli("batch", ROLLOUTS, "--map", fmap, "--trainer", trainer,
                          "--batch-dims", "B,T", "-o", out, "--format", "json")
    assert code == 0, err
    report = json.loads(text)
    assert report["trainer"] == str(trainer) and 0 < report["padding"] < 1
    with np.load(out, allow_pickle=False) as npz:
        keys = set(npz.files)
        assert {"next.reward", "next.done", "advantage"} <= keys
        assert npz["next.reward"].shape[-1] == 1 and npz["next.done"].dtype == np.bool_
    wanted = set(json.loads(trainer.read_text())["properties"]) - {"next"}
    assert wanted <= keys


def test_a_trainer_schema_that_cannot_describe_a_batch_is_exit_2(tmp_path):
    fmap = write_map(tmp_path, PEERS / "torchrl_ppo.json", "B,T")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"type": "object", "properties": {}}))
    code, _, err = cli("batch", ROLLOUTS, "--map", fmap, "--trainer", empty, "--batch-dims", "B,T")
    assert code == 2 and "no properties" in err and err.count("\n") == 1
    old = {k: v for k, v in json.loads(fmap.read_text()).items()
           if k not in ("batch_dims", "layout")}  # a map written before maps recorded dims
    fmap.write_text(json.dumps(old))
    code, _, err = cli("batch", ROLLOUTS, "--map", fmap, "--trainer", PEERS / "torchrl_ppo.json")
    assert code == 2 and "no batch dims" in err and "--batch-dims" in err
    code, _, err = cli("batch", ROLLOUTS, "--map", fmap, "--batch-dims", "B,T")
    assert code == 2 and "--trainer" in err


def test_a_batch_that_does_not_validate_lists_every_field_and_writes_nothing(tmp_path):
    fmap = tmp_path / "bad.json"
    fmap.write_text(json.dumps({"gyre_field_map": 1, "fields": {
        "observation": {"from": "observation"},
        "action": {"from": "action", "cast": "float32"},
        "state_value": {"from": "value"}}}))
    out = tmp_path / "never.npz"
    code, _, err = cli("batch", ROLLOUTS, "--map", fmap, "--trainer", PEERS / "torchrl_ppo.json",
                       "--batch-dims", "B,T", "-o", out)
    assert code == 1 and not out.exists()
    for name in ("action", "state_value", "advantage", "next.reward", "next.done",
                 "action_log_prob"):
        assert name in err, name
    assert "float32[" in err  # arrays shown as dtype[shape]


def test_a_flat_trainer_gets_real_steps_only(tmp_path):
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"type": "object", "required": ["obs", "rewards"], "properties": {
        "obs": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "rewards": {"type": "array", "items": {"type": "number"}}}}))
    fmap = write_map(tmp_path, flat, "M")
    out = tmp_path / "flat.npz"
    code, text, err = cli("batch", ROLLOUTS, "--map", fmap, "--trainer", flat, "--batch-dims",
                          "M", "-o", out, "--format", "json")
    assert code == 0, err
    steps = json.loads(text)["steps"]
    with np.load(out, allow_pickle=False) as npz:
        assert sorted(npz.files) == ["obs", "rewards"]
        assert npz["rewards"].shape == (steps,) and npz["obs"].shape == (steps, 4)


def test_half_way_takes_a_trainer_schema_and_keeps_its_names(tmp_path):
    trainer = PEERS / "torchrl_ppo.json"
    fmap = write_map(tmp_path, trainer, "B,T")
    seen = []
    report = half_way(ROLLOUTS, fmap, lambda b: seen.append(b) or 0.0, trainer=trainer,
                      batch_dims="B,T")
    assert "next.reward" in seen[0] and "obs" not in seen[0]
    assert report.to_dict()["padding"] == pytest.approx(1 - report.steps /
                                                        (report.rows * report.time_steps))
    with pytest.raises(ValueError):
        half_way(ROLLOUTS, fmap, trainer=trainer, batch_dims="B,T", batch_model=dict)


def test_trainer_schema_from_our_own_batch_model():
    from gyre_contract.core._models import TrainBatch

    schema = trainer_schema(TrainBatch)
    assert schema.batch_dims == ("B", "T") and "mask" in schema.table


def test_a_time_major_trainer_fed_batch_major_arrays_is_caught(tmp_path):
    trainer = tmp_path / "tm.json"
    trainer.write_text(json.dumps({"type": "object", "required": ["rewards"], "properties": {
        "rewards": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}}}))
    fmap = tmp_path / "m.json"
    fmap.write_text(json.dumps({"gyre_field_map": 1, "fields": {"rewards": {"from": "reward"}}}))
    code, _, err = cli("batch", ROLLOUTS, "--map", fmap, "--trainer", trainer, "--batch-dims",
                       "T,N")
    assert code == 1 and "rewards" in err and "dim T is 8 here but 40 in the batch" in err


# -- a Pendulum sampler on a vector env into TorchRL: the next observation on every step ---------

def pendulum_rollouts(path: Path, envs: int = 2, episodes: int = 3) -> list[dict]:
    """What a new user records: Pendulum-v1 on a vector env through `Recorder`, which writes the
    true final observation (`next_observation`) on each episode's last step only."""
    gym = pytest.importorskip("gymnasium")
    from gyre_contract import Recorder, write_steps

    rng = np.random.default_rng(0)

    def policy(obs):
        n = len(obs)
        return {"action": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
                "logprob": np.full(n, -1.2, np.float32), "value": obs[:, 0].astype(np.float32)}

    env = gym.make_vec("Pendulum-v1", num_envs=envs, vectorization_mode="sync")
    recorder = Recorder(env, policy, policy_version=0, value_fn=lambda o: float(o[0]), seed=0)
    records = list(recorder.record_episodes(episodes))
    write_steps(path, records)
    return records


def continuous_torchrl(tmp_path: Path) -> Path:
    """The TorchRL PPO schema with Pendulum's continuous action `[B, T, 1]`."""
    schema = json.loads((PEERS / "torchrl_ppo.json").read_text())
    schema["properties"]["action"] = {"type": "array", "items": {"type": "array", "items": {
        "type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 1}}}
    path = tmp_path / "torchrl_continuous.json"
    path.write_text(json.dumps(schema))
    return path


def test_pendulum_recorder_into_torchrl_gives_the_true_next_observation(tmp_path):
    """Once `next.observation <- next_observation` RENAMED and a "valid" batch with NaN on 4776
    of 4800 values of real steps; now the diff writes `next` and every value is the next step's
    observation, or the recorded final one on an episode's last step."""
    rollouts = tmp_path / "pendulum.jsonl"
    records = pendulum_rollouts(rollouts)
    sampler, fmap, trainer = tmp_path / "s.json", tmp_path / "m.json", continuous_torchrl(tmp_path)
    assert cli("infer", rollouts, "-o", sampler)[0] == 0
    code, text, err = cli("diff", sampler, trainer, "--batch-dims", "B,T", "--write-map", fmap)
    assert code == 0, err
    assert "next.observation  next(observation, next_observation)" in text
    out = tmp_path / "b.npz"
    code, _, err = cli("batch", rollouts, "--map", fmap, "--trainer", trainer, "--batch-dims",
                       "B,T", "-o", out)
    assert code == 0, err
    by_episode: dict[str, list[dict]] = {}
    for r in records:
        by_episode.setdefault(r["episode_id"], []).append(r)
    with np.load(out, allow_pickle=False) as npz:
        mask, nxt = npz["collector.mask"], npz["next.observation"]
        assert np.isfinite(nxt[mask]).all()
        for b, steps in enumerate(by_episode.values()):  # all 200 steps long: file order
            want = [s["observation"] for s in steps[1:]] + [steps[-1]["next_observation"]]
            assert np.array_equal(nxt[b, :len(steps)], np.array(want, np.float32))
            assert np.array_equal(npz["observation"][b, 1:len(steps)], nxt[b, :len(steps) - 1])


def test_an_open_episode_without_a_final_observation_fails_the_batch_naming_it(tmp_path):
    rollouts = tmp_path / "pendulum.jsonl"
    records = pendulum_rollouts(rollouts, envs=1, episodes=2)
    # an open episode, as a sampler stopped mid-way leaves it: a bootstrap value (GAE needs
    # one), no final observation
    cut = [r for r in records if r["episode_id"] != "run-0-1" or r["step"] < 50]
    cut[-1]["next_value"] = 0.5
    from gyre_contract import write_steps

    write_steps(rollouts, cut)
    fmap, trainer = tmp_path / "m.json", continuous_torchrl(tmp_path)
    assert cli("diff", SAMPLER, trainer, "--batch-dims", "B,T", "--write-map", fmap)[0] == 0
    code, _, err = cli("batch", rollouts, "--map", fmap, "--trainer", trainer, "--batch-dims",
                       "B,T")
    assert code == 1
    assert "none on the last step of 1 episode: 'run-0-1' (row 1, open)" in err
