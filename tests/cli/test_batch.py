"""`gyre-contract batch` on a real CartPole rollout file with the hand-written example map."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from gyre_contract.cli._app import run
from gyre_contract.harness._recorder import Recorder
from gyre_contract.io._writer import write_steps

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_MAP = ROOT / "examples" / "cartpole_map.json"
GAMMA, LAM = 0.99, 0.95  # as in examples/cartpole_map.json
WEIGHTS = np.array([0.3, -0.2, 1.5, 0.4], np.float32)


def value_of(obs: np.ndarray) -> float:
    return float(np.tanh(obs @ WEIGHTS) * 5)


def record(path: Path, *, with_next_value: bool, episodes: int = 10) -> Path:
    """CartPole with a 12-step time limit: some episodes terminate, the rest are truncated."""
    from models import CartPoleStep

    rng = np.random.default_rng(0)

    def policy(obs: np.ndarray) -> dict:
        return {"action": int(rng.integers(2)), "logprob": float(np.log(0.5)),
                "value": value_of(obs)}

    env = gym.make("CartPole-v1", max_episode_steps=12)
    recorder = Recorder(env, policy, policy_version=2, run_id="cp", seed=3, model=CartPoleStep,
                        value_fn=value_of if with_next_value else None)
    write_steps(path, recorder.record_episodes(episodes))
    assert recorder.n_terminated and recorder.n_truncated
    return path


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory) -> Path:
    return record(tmp_path_factory.mktemp("cp") / "rollouts.jsonl", with_next_value=True)


def reference_advantages(path: Path, max_len: int | None = None) -> dict[str, list[float]]:
    """Straight from the JSON lines, one episode at a time, in float64.

    With `max_len`, each episode is cut into chunks as `collate` cuts it: a chunk that ends
    mid-episode bootstraps from the next chunk's first value and its λ-trace restarts there.
    """
    episodes: dict[str, list[dict]] = defaultdict(list)
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        episodes[rec["episode_id"]].append(rec)
    out: dict[str, list[float]] = {}
    for eid, steps in episodes.items():
        size = max_len or len(steps)
        out[eid] = []
        for start in range(0, len(steps), size):
            chunk = steps[start:start + size]
            after = steps[start + size]["value"] if start + size < len(steps) else None
            out[eid] += chunk_advantages(chunk, after)
    return out


def chunk_advantages(steps: list[dict], value_after: float | None) -> list[float]:
    adv, following = [0.0] * len(steps), 0.0
    for t in reversed(range(len(steps))):
        s = steps[t]
        if s["terminated"]:
            v_next = 0.0
        elif t + 1 < len(steps):
            v_next = steps[t + 1]["value"]
        else:
            v_next = s["next_value"] if value_after is None else value_after
        delta = s["reward"] + GAMMA * v_next - s["value"]
        following = delta + GAMMA * LAM * (following if t + 1 < len(steps) else 0.0)
        adv[t] = following
    return adv


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("max_len", [None, 5])
def test_batch_writes_an_npz_that_matches_an_independent_reference(rollouts, tmp_path, max_len):
    target = tmp_path / "batch.npz"
    extra = ["--max-len", str(max_len)] if max_len else []
    code, out, err = cli("batch", str(rollouts), "--map", str(EXAMPLE_MAP), "-o", str(target),
                         *extra)
    assert (code, err) == (0, "")
    assert out.startswith("stage 2 (half way): the batch is a valid TrainBatch\n")
    assert f"wrote {target}" in out
    with np.load(target, allow_pickle=False) as npz:
        batch = {k: npz[k] for k in npz.files}
    assert batch["episode_id"].dtype.kind == "U" and batch["obs"].dtype == np.float32
    assert batch["obs"].shape[1:] == (max_len or 12, 4)
    expected = reference_advantages(rollouts, max_len)
    got: dict[str, list[float]] = defaultdict(list)
    for b, eid in enumerate(batch["episode_id"]):
        got[str(eid)] += batch["advantage"][b][batch["mask"][b]].tolist()
    assert got.keys() == expected.keys()
    for eid, adv in expected.items():
        np.testing.assert_allclose(got[eid], adv, atol=1e-5, rtol=1e-5)


def test_truncated_episodes_bootstrap_and_terminated_ones_do_not(rollouts, tmp_path):
    target = tmp_path / "b.npz"
    assert cli("batch", str(rollouts), "--map", str(EXAMPLE_MAP), "-o", str(target))[0] == 0
    records = [json.loads(line) for line in rollouts.read_text().splitlines()]
    last = {r["episode_id"]: r for r in records if r["terminated"] or r["truncated"]}
    with np.load(target) as npz:
        for b, eid in enumerate(npz["episode_id"]):
            n = int(npz["mask"][b].sum())
            rec = last[str(eid)]
            tail = float(npz["advantage"][b, n - 1])
            if rec["terminated"]:
                assert tail == pytest.approx(rec["reward"] - rec["value"], abs=1e-5)
            else:
                assert tail == pytest.approx(
                    rec["reward"] + GAMMA * rec["next_value"] - rec["value"], abs=1e-5)


def test_truncation_without_next_value_is_exit_1_naming_the_episode(tmp_path):
    path = record(tmp_path / "r.jsonl", with_next_value=False)
    code, out, err = cli("batch", str(path), "--map", str(EXAMPLE_MAP))
    assert (code, out) == (1, "")
    assert err.startswith("error: next_value: ")
    assert "(episode 'cp-0-" in err and "ends truncated" in err
    assert 'or pass truncation="terminal"' in err


def test_missing_source_field_is_exit_1_with_the_exact_message(rollouts, tmp_path):
    fmap = tmp_path / "m.json"
    fmap.write_text(json.dumps({"gyre_field_map": 1, "fields": {"obs": {"from": "obsv"}}}))
    code, out, err = cli("batch", str(rollouts), "--map", str(fmap))
    assert code == 1
    assert err == ("error: missing sample field: obsv, have [action, episode_id, logprob, mask, "
                   "next_observation, next_value, observation, policy_version, reward, step, "
                   "terminated, truncated, value]\n")


@pytest.mark.parametrize("suffix,fast", [(".jsonl", "1"), (".jsonl", "0"), (".parquet", "1")])
def test_an_optional_source_one_step_lacks_is_missing_not_non_finite(tmp_path, monkeypatch,
                                                                      suffix, fast):
    """`validate` holds (logprob is optional); the map reads it, so `batch` says it is missing,
    where: once it said `logprob: not finite ... rows [0]`. Same words on every path."""
    monkeypatch.setenv("GYRE_FAST_PATHS", fast)
    records = [json.loads(line) for line in (ROOT / "examples" /
                                             "cartpole_rollouts.jsonl").read_text().splitlines()]
    del records[2]["logprob"]
    path = tmp_path / f"r{suffix}"
    write_steps(path, records)
    assert cli("validate", str(path))[0] == 0
    code, out, err = cli("batch", str(path), "--map", str(EXAMPLE_MAP))
    assert (code, out) == (1, "")
    assert err.startswith("error: missing sample field: logprob on step 2 of episode "
                          "'cartpole-0-0' (line 3), have [action, episode_id, observation, ")
    assert "not finite" not in err
    code, out, _ = cli("batch", str(path), "--map", str(EXAMPLE_MAP), "--format", "json")
    problem = json.loads(out)["problems"][0]
    assert (code, problem["path"], problem["line"]) == (1, "logprob", 3)


def test_with_format_json_a_failing_map_is_a_json_object_on_stdout(rollouts, tmp_path):
    """The exit code is the one text gives; the error is data a script reads, not stderr text."""
    fmap = tmp_path / "m.json"
    fmap.write_text(json.dumps({"gyre_field_map": 1, "fields": {"obs": {"from": "obsv"}}}))
    code, out, err = cli("batch", str(rollouts), "--map", str(fmap), "--format", "json")
    report = json.loads(out)
    assert (code, err) == (1, "")
    assert (report["stage"], report["ok"], report["exit_code"]) == ("half_way", False, 1)
    assert report["error"].startswith("missing sample field: obsv, have [action, ")
    assert [p["path"] for p in report["problems"]] == ["obsv"]
    path = record(tmp_path / "r.jsonl", with_next_value=False)  # an op that fails (GAE)
    code, out, err = cli("batch", str(path), "--map", str(EXAMPLE_MAP), "--format", "json")
    report = json.loads(out)
    assert (code, err, report["ok"], report["exit_code"]) == (1, "", False, 1)
    assert report["problems"][0]["path"] == "next_value" and "ends truncated" in report["error"]
    code, out, err = cli("batch", str(rollouts), "--format", "json", "--map",
                         str(ROOT / "tests/data/maps/bad_version.json"))
    report = json.loads(out)
    assert (code, err, report["exit_code"], report["problems"]) == (2, "", 2, [])
    assert "unsupported field-map version 2" in report["error"]


def test_bad_map_and_unreadable_input_are_exit_2(rollouts, tmp_path):
    code, _, err = cli("batch", str(rollouts), "--map", str(ROOT / "tests/data/maps/bad_version.json"))
    assert code == 2 and "unsupported field-map version 2" in err
    code, _, err = cli("batch", str(tmp_path / "none.jsonl"), "--map", str(EXAMPLE_MAP))
    assert code == 2 and err.startswith("error: no such file")
    code, _, err = cli("batch", str(rollouts), "--map", str(EXAMPLE_MAP), "--max-len", "0")
    assert (code, err) == (2, "error: --max-len must be at least 1, got 0\n")


@pytest.mark.parametrize("flag", ["--max-staleness", "--current-version"])
@pytest.mark.parametrize("value", ["-1", "1.5", "x"])
def test_a_negative_or_non_integer_version_bound_is_a_usage_error(rollouts, flag, value):
    """Once `--max-staleness -1` ran and reported "expected 3..2": a window nothing meets."""
    code, out, err = cli("batch", str(rollouts), "--map", str(EXAMPLE_MAP), flag, value)
    assert (code, out) == (2, "")
    assert err == f"gyre-contract batch: argument {flag}: must be a whole number >= 0, " \
                  f"got '{value}'\n"


def test_half_way_refuses_a_negative_staleness_bound(rollouts):
    from gyre_contract.harness._stages import half_way

    with pytest.raises(ValueError, match="max_staleness must be >= 0, got -1"):
        half_way(rollouts, EXAMPLE_MAP, max_staleness=-1)


def test_loss_is_imported_from_the_named_module_and_called_once(rollouts, tmp_path, monkeypatch):
    (tmp_path / "my_loss.py").write_text(
        "import numpy as np\n"
        "CALLS = []\n"
        "def loss(batch):\n"
        "    CALLS.append(sorted(batch))\n"
        "    m = batch['mask']\n"
        "    return float((batch['advantage'][m] ** 2).mean())\n"
        "def nan_loss(batch):\n"
        "    return np.float32('nan')\n"
        "def broken(batch):\n"
        "    return batch['obs_typo']\n")
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("batch", str(rollouts), "--map", str(EXAMPLE_MAP), "--loss",
                         "my_loss:loss", "--format", "json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["ok"] is True and report["loss"] > 0
    assert report["fields"]["obs"]["shape"][2] == 4
    import my_loss

    assert len(my_loss.CALLS) == 1 and "advantage" in my_loss.CALLS[0]
    code, _, err = cli("batch", str(rollouts), "--map", str(EXAMPLE_MAP), "--loss",
                       "my_loss.py:nan_loss")
    assert (code, err) == (1, "error: loss: the loss is not finite: expected a finite number, "
                              "got nan\n")
    code, _, err = cli("batch", str(rollouts), "--map", str(EXAMPLE_MAP), "--loss",
                       "my_loss:broken")
    assert (code, err) == (1, "error: loss: loss_fn raised on the batch: expected a loss "
                              "computed from the batch, got KeyError: 'obs_typo'\n")
    code, _, err = cli("batch", str(rollouts), "--map", str(EXAMPLE_MAP), "--loss", "nomod:f")
    assert code == 2 and "--loss: cannot import 'nomod'" in err


def test_a_loss_that_edits_the_batch_in_place_does_not_change_what_is_written(
        rollouts, tmp_path, monkeypatch):
    """In-place advantage normalisation once reached the .npz (NaN rewards, done on padding,
    exit 0): the loss gets a copy, the written batch is the validated one."""
    (tmp_path / "inplace_loss.py").write_text(
        "import numpy as np\n"
        "def loss(batch):\n"
        "    adv = batch['advantage']\n"
        "    adv -= adv.mean()\n"
        "    adv /= adv.std() + 1e-8\n"
        "    batch['reward'][:] = np.nan\n"
        "    batch['done'][:] = True\n"
        "    batch['obs'] *= 0\n"
        "    batch['mask'] = ~batch['mask']\n"
        "    return float(np.abs(adv).mean())\n")
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("batch", str(rollouts), "--map", str(EXAMPLE_MAP), "-o", "plain.npz")
    assert (code, err) == (0, "")
    code, out, err = cli("batch", str(rollouts), "--map", str(EXAMPLE_MAP), "-o", "loss.npz",
                         "--loss", "inplace_loss:loss", "--format", "json")
    assert (code, err) == (0, "") and json.loads(out)["loss"] > 0
    with np.load(tmp_path / "plain.npz") as plain, np.load(tmp_path / "loss.npz") as after:
        assert sorted(plain.files) == sorted(after.files)
        for key in plain.files:
            np.testing.assert_array_equal(after[key], plain[key], err_msg=key)


def test_an_action_int_then_float_within_an_episode_is_exit_1_and_nothing_written(tmp_path):
    """Once `batch` wrote action [[1, 1]] for actions 1 then 1.5 and exited 0."""
    base = {"observation": [0.1, 0.2], "logprob": -0.5, "reward": 1.0, "episode_id": "a",
            "truncated": False, "policy_version": 0}
    rows = [dict(base, action=1, step=0, terminated=False),
            dict(base, action=1.5, step=1, terminated=True)]
    rollouts = tmp_path / "mixed.jsonl"
    rollouts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fmap = tmp_path / "map.json"
    fmap.write_text(json.dumps({"gyre_field_map": 1, "fields": {
        "obs": {"from": "observation"}, "action": {"from": "action"},
        "reward": {"from": "reward"}, "done": {"op": "any", "from": ["terminated", "truncated"]},
        "advantage": {"from": "reward"}, "logprob": {"from": "logprob"},
        "policy_version": {"from": "policy_version"}, "mask": {"op": "mask"}}}))
    target = tmp_path / "a.npz"
    code, _, err = cli("batch", str(rollouts), "--map", str(fmap), "-o", str(target))
    assert (code, err) == (1, "error: line 2: action: dtype changed within the episode: "
                              "expected int64 as earlier in the episode, got float32 1.5\n")
    assert not target.exists()
    rows[1]["action"] = 2
    rollouts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = cli("batch", str(rollouts), "--map", str(fmap), "-o", str(target))
    assert (code, err) == (0, "")
    with np.load(target) as batch:
        assert batch["action"].tolist() == [[1, 2]]


def test_help_says_loss_imports_only_the_named_module():
    code, out, _ = cli("batch", "--help")
    assert code == 0
    assert "Only the module named here is imported" in " ".join(out.split())
    assert "nothing is ever imported because a data or map file says so" in " ".join(out.split())


def test_real_subprocess_and_numpy_only_load(rollouts, tmp_path):
    target = tmp_path / "sub.npz"
    proc = subprocess.run(
        [sys.executable, "-m", "gyre_contract", "batch", str(rollouts), "--map",
         str(EXAMPLE_MAP), "-o", str(target), "--format", "json"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["output"] == str(target)
    check = subprocess.run(
        [sys.executable, "-c", "import sys, numpy as np; d = np.load(sys.argv[1], "
         "allow_pickle=False); print(sorted(d.files)); print('gyre_contract' in sys.modules)",
         str(target)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    assert "'advantage'" in check.stdout and check.stdout.endswith("False\n")


@pytest.mark.parametrize("name", ["file", "allow_pickle", "args"])
def test_npz_keeps_a_field_named_like_a_savez_argument(tmp_path, name):
    """`np.savez(f, **batch)` dropped a field called `allow_pickle` (taken as its flag) and
    failed with a TypeError on one called `file`; every field reaches the file."""
    from gyre_contract.cli._batch import write_npz

    target = write_npz(tmp_path / "b.npz", {name: np.arange(3), "obs": {"x": np.ones((2, 2))}})
    with np.load(target, allow_pickle=False) as loaded:
        assert sorted(loaded.files) == sorted([name, "obs.x"])
        assert loaded[name].tolist() == [0, 1, 2] and loaded["obs.x"].shape == (2, 2)
