"""The maps `diff` writes, executed: real step records -> episodes -> `FieldMap.build` -> the
arrays each real library's trainer reads (TorchRL, CleanRL, RLlib, SB3, Tianshou, RLDS)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gyre_contract.io._episodes import Episode
from gyre_contract.io._reading import read_episodes
from gyre_contract.io._writer import write_steps
from gyre_contract.schema._diffing import diff
from gyre_contract.schema._diffreport import DiffReport
from gyre_contract.trainer._advantages import gae
from gyre_contract.trainer._collation import collate
from gyre_contract.trainer._fieldmap import FieldMap

ROOT = Path(__file__).resolve().parents[2]
STEP = ROOT / "schemas" / "rollout_step.v1.json"
BATCH = ROOT / "schemas" / "train_batch.v1.json"
PEERS = ROOT / "tests" / "data" / "peers"
KINDS = {"number": "fiu", "integer": "iu", "bool": "b", "string": "U"}
# episode id -> (length, terminated at the end, truncated at the end)
ENDS = {"ep0": (3, True, False), "ep1": (4, False, True), "ep2": (2, True, True)}
REAL_STEPS = sum(n for n, _, _ in ENDS.values())


def records(box_action: bool = False) -> list[dict]:
    """Step records of three episodes, interleaved as a vector env writes them; actions are
    discrete, or one-dimensional continuous with `box_action`."""
    out = []
    for k, (eid, (n, term, trunc)) in enumerate(ENDS.items()):
        for t in range(n):
            last = t == n - 1
            out.append({
                "observation": [float(k), float(t), 0.0, 1.0],
                "action": [0.5 * t] if box_action else t % 2,
                "logprob": -0.7, "entropy": 0.6, "value": 0.5 + 0.1 * t,
                "next_value": 0.5 + 0.1 * (t + 1),
                "next_observation": [float(k), float(t + 1), 0.0, 1.0],
                "reward": 1.0 + t, "step": t, "episode_id": eid,
                "terminated": last and term, "truncated": last and trunc, "policy_version": 0})
    return sorted(out, key=lambda r: (r["step"], r["episode_id"]))


def read_back(folder: Path, box_action: bool = False) -> list[Episode]:
    """The records written to a rollout file and read back as episodes."""
    path = folder / "rollouts.jsonl"
    write_steps(path, records(box_action))
    return list(read_episodes(path))


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: pytest.TempPathFactory) -> list[Episode]:
    return read_back(tmp_path_factory.mktemp("rollouts"))


@pytest.fixture(scope="module")
def cols(episodes: list[Episode]) -> dict:
    """Every collated column, the reference the mapped arrays are checked against."""
    return collate(episodes)


def build(report: DiffReport, episodes: list[Episode]) -> dict:
    """Apply the map the report writes; it must leave nothing out."""
    assert "map_incomplete" not in [w.code for w in report.warnings]
    fmap = FieldMap.from_dict(report.field_map())
    assert set(fmap.fields) - {"mask", "collector.mask"} == set(report.trainer.names())
    return fmap.build(episodes)


def assert_trainer_layout(report: DiffReport, out: dict, mask: np.ndarray) -> None:
    """Each output, laid out as the trainer reads it, has the trainer's dtype, rank, fixed dims
    and batch dims."""
    rows, steps = mask.shape
    lead = {"batch": (rows, steps), "time_major": (steps, rows), "flat": (REAL_STEPS,)}
    for name, value in out.items():
        if name not in report.trainer:
            continue  # the flat layout's mask
        field = report.trainer[name]
        arr = value[mask] if report.layout.kind == "flat" else value
        dtypes = (field.dtype,) if isinstance(field.dtype, str) else field.dtype
        assert any(arr.dtype.kind in KINDS[d] if d in KINDS else arr.dtype == np.dtype(d)
                   for d in dtypes), (name, arr.dtype, field.dtype)
        assert arr.ndim == len(field.shape), (name, arr.shape, field.shape)
        assert arr.shape[:len(lead[report.layout.kind])] == lead[report.layout.kind], name
        fixed = [(got, want) for got, want in zip(arr.shape, field.shape) if isinstance(want, int)]
        assert all(got == want for got, want in fixed), (name, arr.shape, field.shape)


def reference_gae(cols: dict) -> tuple[np.ndarray, np.ndarray]:
    return gae(cols["reward"], cols["value"], cols["terminated"], cols["truncated"],
               cols["mask"], cols["next_value"], gamma=0.99, lam=0.95)


def test_the_rollout_reads_as_three_interleaved_episodes(cols: dict) -> None:
    assert cols["mask"].shape == (3, 4) and int(cols["mask"].sum()) == REAL_STEPS


def test_torchrl_gets_b_t_1_done_advantage_and_value_target(episodes, cols) -> None:
    r = diff(STEP, PEERS / "torchrl_ppo.json", batch_dims="B,T")
    out = build(r, episodes)
    assert_trainer_layout(r, out, cols["mask"])
    done = out["next.done"]
    assert done.dtype == np.bool_ and done.shape == (3, 4, 1)
    np.testing.assert_array_equal(done[..., 0], cols["terminated"] | cols["truncated"])
    np.testing.assert_array_equal(out["next.terminated"][..., 0], cols["terminated"])
    np.testing.assert_array_equal(out["next.truncated"][..., 0], cols["truncated"])
    adv, ret = reference_gae(cols)
    for key, want in (("advantage", adv), ("value_target", ret), ("next.reward", cols["reward"]),
                      ("state_value", cols["value"])):
        assert out[key].dtype == np.float32 and out[key].shape == (3, 4, 1), key
        np.testing.assert_allclose(out[key][..., 0], want, rtol=1e-6, err_msg=key)
    assert out["action"].dtype == np.int64 and out["next.observation"].shape == (3, 4, 4)


def test_cleanrl_gets_time_major_float_dones(episodes, cols) -> None:
    r = diff(STEP, PEERS / "cleanrl_ppo_storage.json", batch_dims="T,N")
    out = build(r, episodes)
    assert_trainer_layout(r, out, cols["mask"])
    assert out["dones"].dtype == np.float32 and out["dones"].shape == (4, 3)
    np.testing.assert_array_equal(out["dones"], (cols["terminated"] | cols["truncated"]).T)
    np.testing.assert_array_equal(out["obs"], cols["observation"].transpose(1, 0, 2))
    np.testing.assert_array_equal(out["rewards"], cols["reward"].T)


@pytest.mark.parametrize(("peer", "batch_dims", "advantage", "box_action"), [
    ("rllib_learner_batch", "B", "advantages", False),
    ("sb3_rollout_samples", "M", "advantages", True),  # SB3 reads actions as [M, action_dim]
    ("tianshou_ppo", "B", "adv", False),
])
def test_flat_trainers_select_real_steps_with_the_written_mask(
        tmp_path, cols, peer: str, batch_dims: str, advantage: str, box_action: bool) -> None:
    r = diff(STEP, PEERS / f"{peer}.json", batch_dims=batch_dims)
    assert r.layout.kind == "flat"
    out = build(r, read_back(tmp_path, box_action))
    np.testing.assert_array_equal(out["mask"], cols["mask"])
    assert_trainer_layout(r, out, out["mask"])
    adv, _ = reference_gae(cols)
    flat = out[advantage][out["mask"]]
    assert flat.shape == (REAL_STEPS,)
    np.testing.assert_allclose(flat, adv[cols["mask"]], rtol=1e-6)


def test_rllib_loss_mask_and_episode_ids(episodes, cols) -> None:
    r = diff(STEP, PEERS / "rllib_learner_batch.json", batch_dims="B")
    out = build(r, episodes)
    np.testing.assert_array_equal(out["loss_mask"], cols["mask"])
    real = out["mask"]
    rows = np.broadcast_to(cols["episode_id"][:, None], real.shape)
    assert out["eps_id"].shape == (3, 4)
    np.testing.assert_array_equal(out["eps_id"][real], rows[real])  # one id per step
    assert out["actions"].dtype == np.int64 and out["obs"][real].shape == (REAL_STEPS, 4)


def test_rlds_truncated_is_is_last_and_not_is_terminal() -> None:
    r = diff(PEERS / "rlds_steps.json", BATCH)
    fmap = FieldMap.from_dict(r.field_map())
    assert fmap.fields["truncated"].op == "and_not"
    # RLDS episodes: ends by termination, by a time limit, and an unfinished one
    ends = [(3, True), (4, False), (2, None)]
    eps = []
    for k, (n, terminal) in enumerate(ends):
        last = np.arange(n) == n - 1
        eps.append(Episode(f"rlds-{k}", {
            "observation": np.full((n, 2), k, np.float32), "action": np.arange(n),
            "reward": np.ones(n, np.float32), "discount": np.ones(n, np.float32),
            "is_first": np.arange(n) == 0, "is_last": last & (terminal is not None),
            "is_terminal": last & bool(terminal)}, None))
    out = fmap.build(eps)
    for key in ("done", "terminated", "truncated", "mask"):
        assert out[key].dtype == np.bool_ and out[key].shape == (3, 4), key
    np.testing.assert_array_equal(out["terminated"].nonzero(), ([0], [2]))
    np.testing.assert_array_equal(out["truncated"].nonzero(), ([1], [3]))
    np.testing.assert_array_equal(out["done"], out["terminated"] | out["truncated"])


# -- an LLM rollout: token ids and per-token log-probs of varying length ---------------------

# episode id -> (prompt lengths P, generation lengths A) of its steps; the last step ends it
LLM_EPISODES = {"q0-s0": ([3, 6], [2, 4]), "q0-s1": ([3], [5]), "q1-s0": ([4, 7], [3, 1])}


def llm_records() -> list[dict]:
    """LLMStep records: prompt {token_ids [P], text}, generated token ids [A], their log-probs
    [A] (all different, so a wrong sum shows), one reward per generation; q0-s1 is truncated."""
    out = []
    for k, (eid, (prompts, gens)) in enumerate(LLM_EPISODES.items()):
        for t, (p, a) in enumerate(zip(prompts, gens)):
            last = t == len(gens) - 1
            out.append({
                "observation": {"token_ids": list(range(1, p + 1)), "text": f"{eid} turn {t}"},
                "action": list(range(10 + k, 10 + k + a)),
                "logprob": [-0.25 * (i + 1) - 0.125 * k for i in range(a)],
                "value": 0.5, "next_value": 0.25, "reward": float(last),
                "step": t, "episode_id": eid, "terminated": last and eid != "q0-s1",
                "truncated": last and eid == "q0-s1", "policy_version": 3})
    return out


def test_llm_steps_map_to_a_valid_train_batch(tmp_path: Path) -> None:
    from gyre_contract.core._models import TrainBatch
    from gyre_contract.core._validate import validate_batch
    from gyre_contract.pinned import LLMStep

    r = diff(LLMStep, TrainBatch)
    assert r.counts()["missing"] == 0
    path = tmp_path / "llm.jsonl"
    write_steps(path, llm_records())
    episodes = list(read_episodes(path, LLMStep))
    assert "map_incomplete" not in [w.code for w in r.warnings]
    fmap = FieldMap.from_dict(r.field_map())
    assert set(fmap.fields) == set(r.trainer.names())  # every TrainBatch field, mask included
    out = fmap.build(episodes)
    batch = validate_batch(out, TrainBatch, current_version=3, max_staleness=0)
    assert batch.logprob.shape == batch.mask.shape == (3, 2)
    records = {(rec["episode_id"], rec["step"]): rec for rec in llm_records()}
    for b, eid in enumerate(batch.episode_id):
        for t in range(int(batch.mask[b].sum())):
            rec = records[(str(eid), t)]
            assert batch.logprob[b, t] == np.float32(sum(np.float32(x) for x in rec["logprob"]))
            p = len(rec["observation"]["token_ids"])
            assert batch.obs["token_ids"][b, t, :p].tolist() == rec["observation"]["token_ids"]
            assert batch.obs["token_ids_mask"][b, t].sum() == p
            assert batch.obs["text"][b, t] == rec["observation"]["text"]
            assert batch.action[b, t, :len(rec["action"])].tolist() == rec["action"]
    assert batch.obs["token_ids"].dtype == np.int64 and batch.obs["token_ids"].shape == (3, 2, 7)
    assert batch.action.shape == (3, 2, 5)
    assert not batch.logprob[~batch.mask].any()  # padding steps sum to 0, masked out


def test_a_schema_inferred_from_llm_steps_gets_the_same_obs_and_logprob(tmp_path: Path) -> None:
    from gyre_contract.core._models import TrainBatch
    from gyre_contract.schema._infer import infer_schema

    path = tmp_path / "llm.jsonl"
    write_steps(path, llm_records())
    fields = diff(infer_schema(path), TrainBatch).field_map()["fields"]
    assert fields["obs"] == {"from": "observation"}
    assert fields["logprob"] == {"op": "masked_sum", "from": ["logprob", "logprob_mask"],
                                 "axis": 2}
