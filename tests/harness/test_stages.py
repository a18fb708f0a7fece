"""half_way (stage 2): map, collate, validate, call the loss once, report."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from gyre_contract.core._errors import ContractError, MissingFieldError
from gyre_contract.core._models import RolloutStep, TrainBatch
from gyre_contract.core._report import Report
from gyre_contract.core._tensor import Tensor
from gyre_contract.harness._recorder import Recorder
from gyre_contract.harness._stages import BatchReport, HalfWayReport, half_way
from gyre_contract.io._writer import write_steps
from gyre_contract.trainer._fieldmap import FieldMap

EXAMPLE_MAP = Path(__file__).resolve().parents[2] / "examples" / "cartpole_map.json"


def recorder() -> Recorder:
    from models import CartPoleStep

    rng = np.random.default_rng(1)

    def policy(obs: np.ndarray) -> dict:
        return {"action": int(rng.integers(2)), "logprob": -0.6931, "value": float(obs[2])}

    env = gym.make("CartPole-v1", max_episode_steps=10)
    return Recorder(env, policy, policy_version=4, value_fn=lambda obs: float(obs[2]),
                    run_id="hw", seed=0, model=CartPoleStep)


@pytest.fixture(scope="module")
def episodes() -> list:
    return recorder().collect_episodes(6)


class Scalar:
    """A 1-element tensor look-alike: `.numel()` and `.item()`, like torch."""

    def __init__(self, value: float) -> None:
        self.value = value

    def numel(self) -> int:
        return 1

    def item(self) -> float:
        return self.value


def test_half_way_reports_keys_shapes_dtypes_and_loss(episodes):
    seen = []

    def loss_fn(batch):
        seen.append(batch)
        return float(np.square(batch["advantage"][batch["mask"]]).mean())

    report = half_way(episodes, EXAMPLE_MAP, loss_fn, max_len=4)
    assert len(seen) == 1 and set(seen[0]) >= {"obs", "advantage", "return", "mask"}
    assert report.loss == pytest.approx(loss_fn(seen[0]))
    assert report.episodes == 6 and report.policy_versions == [4]
    assert report.time_steps == 4 and report.steps == sum(len(e) for e in episodes)
    assert report.fields["obs"] == ("ndarray", (report.rows, 4, 4), "float32")
    data = report.to_dict()
    assert data["stage"] == "half_way" and data["ok"] is True
    assert data["fields"]["policy_version"] == {"type": "ndarray", "shape": [report.rows],
                                                "dtype": "int64"}
    text = report.to_text().splitlines()
    assert text[0] == "stage 2 (half way): the batch is a valid TrainBatch"
    assert text[-2] == (f"B={report.rows} rows from 6 episodes, T=4, {report.steps} real steps "
                        f"of {report.rows * 4} ({report.padding:.1%} padding), policy "
                        f"versions 4")
    assert report.padding == pytest.approx(1 - report.steps / (report.rows * 4))
    assert data["padding"] == report.padding and data["trainer"] is None
    assert text[-1].startswith("loss: ") and text[-1].endswith(" (one call, no update)")


def test_half_way_reads_a_rollout_file_and_takes_a_map_dict(tmp_path, episodes):
    from models import CartPoleStep

    path = tmp_path / "r.jsonl"
    write_steps(path, recorder().record_episodes(3))
    fmap = json.loads(EXAMPLE_MAP.read_text())
    report = half_way(path, fmap, model=CartPoleStep)
    assert report.loss is None and report.episodes == 3
    assert report.to_text().splitlines()[-1] == "loss: not computed (no loss function given)"
    assert half_way(episodes, FieldMap.from_dict(fmap), lambda b: np.float32(1.5)).loss == 1.5
    assert half_way(episodes, fmap, lambda b: Scalar(2.0)).loss == 2.0
    assert half_way(episodes, fmap, lambda b: np.array([3.0])).loss == 3.0


@pytest.mark.parametrize(("result", "message"), [
    (float("inf"), "loss: the loss is not finite: expected a finite number, got inf"),
    (np.float32("nan"), "loss: the loss is not finite: expected a finite number, got nan"),
    (np.zeros(3), "loss: loss_fn returned no scalar: expected one number (a float, a 0-d array "
                  "or a 1-element tensor), got ndarray of shape [3]"),
    (True, "loss: loss_fn returned a bool: expected one number, got bool true"),
    ({"loss": 1.0}, "loss: loss_fn returned no scalar: expected one number (a float, a 0-d "
                    "array or a 1-element tensor), got object with keys [loss]"),
])
def test_a_loss_that_is_not_one_finite_number_fails_the_stage(episodes, result, message):
    with pytest.raises(ContractError) as err:
        half_way(episodes, EXAMPLE_MAP, lambda batch: result)
    assert str(err.value) == message


def test_a_loss_that_raises_fails_the_stage_and_keeps_the_cause(episodes):
    def loss_fn(batch):
        return batch["observations"]

    with pytest.raises(ContractError) as err:
        half_way(episodes, EXAMPLE_MAP, loss_fn)
    assert str(err.value) == ("loss: loss_fn raised on the batch: expected a loss computed from "
                              "the batch, got KeyError: 'observations'")
    assert isinstance(err.value.__cause__, KeyError)


def test_keys_or_shapes_off_fail_before_the_loss(episodes):
    fmap = json.loads(EXAMPLE_MAP.read_text())
    del fmap["fields"]["logprob"]
    called = []
    with pytest.raises(ContractError, match="logprob: missing required field"):
        half_way(episodes, fmap, called.append)

    class PinnedBatch(TrainBatch):
        obs: Tensor("float32", ["B", "T", 5], role="observation")

    with pytest.raises(ContractError, match=r"obs: wrong shape: expected float32\[B, T, 5\]"):
        half_way(episodes, EXAMPLE_MAP, called.append, batch_model=PinnedBatch)
    assert called == []


def test_missing_source_and_staleness(episodes):
    fmap = json.loads(EXAMPLE_MAP.read_text())
    fmap["fields"]["obs"] = {"from": "obs"}
    with pytest.raises(MissingFieldError, match="missing sample field: obs, have "):
        half_way(episodes, fmap)
    with pytest.raises(ContractError, match="stale policy version"):
        half_way(episodes, EXAMPLE_MAP, current_version=9, max_staleness=2)


def test_half_way_and_batch_reports_follow_the_report_protocol(episodes):
    report = half_way(episodes, EXAMPLE_MAP, lambda b: 0.25)
    assert isinstance(report, HalfWayReport) and isinstance(report, Report)
    assert report.ok and report.warnings == []
    assert (report.exit_code(), report.exit_code(strict=True)) == (0, 0)
    assert json.loads(report.render("json")) == report.to_dict()
    assert report.render() == report.render("text") == report.to_text()
    with pytest.raises(ValueError, match="unknown report format 'yaml'"):
        report.render("yaml")

    written = BatchReport(report, output="b.npz")
    assert written.ok and written.exit_code() == 0 and written.batch is report.batch
    assert written.to_dict() == {**report.to_dict(), "output": "b.npz"}
    assert json.loads(written.render("json")) == written.to_dict()
    assert written.to_text() == report.to_text() + "\nwrote b.npz"
    assert BatchReport(report).to_dict() == report.to_dict()


def test_the_step_model_argument_is_model_and_step_model_still_works(tmp_path):
    from models import CartPoleStep

    path = tmp_path / "r.jsonl"
    write_steps(path, recorder().record_episodes(2))

    class TooNarrow(RolloutStep):
        observation: Tensor("float32", [3], role="observation")

    with pytest.raises(ContractError, match=r"observation: wrong shape"):
        half_way(path, EXAMPLE_MAP, model=TooNarrow)
    assert half_way(path, EXAMPLE_MAP, model=CartPoleStep).episodes == 2
