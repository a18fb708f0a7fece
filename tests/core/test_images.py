"""Integer images keep their dtype without a pin (docs/rollout-files.md#images).

An unpinned tensor observation is float32, except an integer ndarray: a uint8 image stays uint8
(not float32, 4x the memory). A modality's ndarray keeps its dtype; JSON ints (nested lists)
carry no dtype, so inside a modality they are int64 and as a tensor observation float32. The
compiled fast path, the explaining path, Parquet (both ways) and batches agree.
"""

from __future__ import annotations

import numpy as np
import pytest

from gyre_contract.core._validate import validate_batch, validate_step

INTEGER_DTYPES = ["uint8", "uint16", "int8", "int16", "int32", "int64"]


def _record(observation, step: int = 0, **extra) -> dict:
    return {"observation": observation, "action": 1, "reward": 1.0, "step": step,
            "episode_id": "img", "terminated": step == 2, "truncated": False,
            "policy_version": 0, **extra}


def _image(dtype: str = "uint8") -> np.ndarray:
    return (np.arange(4 * 6 * 3).reshape(4, 6, 3) % 200).astype(dtype)


@pytest.fixture(params=["1", "0"], ids=["fast", "explaining"])
def fast_paths(request, monkeypatch):
    monkeypatch.setenv("GYRE_FAST_PATHS", request.param)
    return request.param


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_an_integer_ndarray_observation_keeps_its_dtype(dtype, fast_paths):
    image = _image(dtype)
    step = validate_step(_record(image, next_observation=image))
    assert step.observation.dtype == np.dtype(dtype)
    assert step.next_observation.dtype == np.dtype(dtype)
    assert np.array_equal(step.observation, image)


def test_a_modality_ndarray_keeps_its_dtype_and_json_ints_are_int64(fast_paths):
    step = validate_step(_record({"image": _image(), "ids": [[1, 2], [3, 4]], "text": "hi"}))
    assert step.observation["image"].dtype == np.uint8
    assert step.observation["ids"].dtype == np.int64


def test_json_ints_and_float_arrays_as_an_observation_stay_float32(fast_paths):
    assert validate_step(_record(_image().tolist())).observation.dtype == np.float32
    assert validate_step(_record(_image().astype(np.float64))).observation.dtype == np.float32


def test_a_pin_still_decides(cartpole_model, cartpole_record):
    """A pinned float32 observation converts an integer ndarray, as it always did."""
    step = validate_step(dict(cartpole_record, observation=np.array([1, 2, 3, 4], np.uint8)),
                         cartpole_model)
    assert step.observation.dtype == np.float32


def test_a_batch_of_uint8_images_stays_uint8():
    b, t = 2, 3
    zeros = np.zeros((b, t), np.float32)
    flags = np.zeros((b, t), bool)
    batch = validate_batch({"obs": np.zeros((b, t, 4, 6, 3), np.uint8),
                            "action": np.zeros((b, t), np.int64),
                            "reward": zeros, "advantage": zeros, "logprob": zeros,
                            "mask": np.ones((b, t), bool), "done": flags, "terminated": flags,
                            "truncated": flags, "policy_version": np.zeros(b, np.int64)})
    assert batch.obs.dtype == np.uint8


@pytest.mark.parametrize("layout", ["tensor", "modality"])
def test_parquet_keeps_uint8_images(layout, fast_paths, tmp_path):
    pytest.importorskip("pyarrow")
    from gyre_contract.io._parquet import read_parquet_episodes, read_parquet_steps, write_parquet
    from gyre_contract.io._validation import validate_file

    image = _image()
    observation = image if layout == "tensor" else {"image": image, "text": "look"}
    path = tmp_path / "images.parquet"
    write_parquet(path, [validate_step(_record(observation, i)) for i in range(3)])
    report = validate_file(path)
    assert report.ok, report.to_text()

    def pixels(value):
        return value if layout == "tensor" else value["image"]

    steps = list(read_parquet_steps(path))
    assert [pixels(s.observation).dtype for s in steps] == [np.uint8] * 3
    assert np.array_equal(pixels(steps[0].observation), image)
    episode = next(iter(read_parquet_episodes(path)))
    column = episode.columns["observation"] if hasattr(episode, "columns") else episode["observation"]
    assert pixels(column).dtype == np.uint8 and pixels(column).shape == (3, 4, 6, 3)


def test_parquet_ragged_or_empty_images_get_the_same_report_both_ways(tmp_path, monkeypatch):
    """An integer column with several variable dims is read as arrays in one conversion with the
    fast paths on and row by row with them off: a ragged or empty row stays a list both ways."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from gyre_contract.core._models import RolloutStep
    from gyre_contract.io._arrowschema import to_arrow_schema
    from gyre_contract.io._validation import validate_file

    schema = to_arrow_schema(RolloutStep, sample=_record(_image()))
    images = [_image().tolist(), [[[1, 2, 3]], [[4, 5]]], [], [[]], _image().tolist()]
    rows = [dict(_record(image, i), terminated=i == len(images) - 1)
            for i, image in enumerate(images)]
    path = tmp_path / "ragged.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    reports = {}
    for switch in ("1", "0"):
        monkeypatch.setenv("GYRE_FAST_PATHS", switch)
        report = validate_file(path)
        reports[switch] = (report.ok, report.to_dict())
    assert reports["1"] == reports["0"]
    assert not reports["1"][0]
