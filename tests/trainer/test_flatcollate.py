"""Collating a file from its columns (`flatcollate`) = collating the episodes it reads into.

Same keys in the same order, same dtypes and values, for pinned and unpinned models, episodes
written one after the other or interleaved, rows cut by max_len, blocks checked in bulk or line
by line; and None (the episode path decides) where the columns cannot say the same.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "io"))
from fastpaths import same_arrays
from test_fast_file import cartpole_lines

from gyre_contract.core._errors import ContractError
from gyre_contract.core._models import RolloutStep
from gyre_contract.io._reading import read_episodes
from gyre_contract.trainer._collation import ROW_FIELDS, collate
from gyre_contract.trainer._flatcollate import collate_file


@pytest.fixture(autouse=True)
def fast_paths_on(monkeypatch):
    monkeypatch.setenv("GYRE_FAST_PATHS", "1")


@pytest.fixture
def small_blocks(monkeypatch):
    import gyre_contract.io._lines as lines

    monkeypatch.setattr(lines, "CHUNK_BYTES", 1500)


def colons(lines: list[bytes], every: int = 7) -> list[bytes]:
    """A ':' inside a string on some lines: valid, but the bulk reader (which counts ':' to
    rule out duplicate keys) leaves their blocks to the line path."""
    out = []
    for i, raw in enumerate(lines):
        if i % every == 0:
            raw = orjson.dumps({**orjson.loads(raw), "info": {"note": "a:b"}})
        out.append(raw)
    return out


FIELDS = [None, ["observation", "action", "reward", "terminated", "truncated", "value",
                 "policy_version", "step"], ["reward", "value", "mask", "logprob"]]


@pytest.mark.parametrize("model_name", ["pinned", "unpinned"])
@pytest.mark.parametrize("interleave", [1, 4])
@pytest.mark.parametrize("max_len", [None, 1, 3, 7])
@pytest.mark.parametrize("fields", range(len(FIELDS)))
@pytest.mark.parametrize("mixed", [False, True])
def test_columns_collate_as_episodes(cartpole_record, cartpole_model, tmp_path, small_blocks,
                                     model_name, interleave, max_len, fields, mixed):
    model = cartpole_model if model_name == "pinned" else RolloutStep
    lines = cartpole_lines(dict(cartpole_record), episodes=15, interleave=interleave)
    if mixed:
        lines = colons(lines)
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    wanted = FIELDS[fields]
    found = collate_file(path, model, fields=wanted, max_len=max_len)
    expected = collate(list(read_episodes(path, model)), fields=wanted, max_len=max_len)
    if found is None:
        # only with every column: `next_value` rides on truncated last steps (a partial
        # column), and which columns go in is the first episode's say
        assert wanted is None
        return
    batch, n_episodes = found
    assert n_episodes == 15
    same_arrays(batch, expected)


def test_a_colon_in_a_string_sends_the_block_to_the_line_path(cartpole_record, cartpole_model):
    from gyre_contract.io._fastfile import bulk_plan

    lines = cartpole_lines(dict(cartpole_record))
    plan = bulk_plan(cartpole_model)
    assert plan.decode(lines[1:6]) is not None
    assert plan.decode(colons(lines)[:6]) is None


def test_open_episodes_come_last_in_first_appearance_order(cartpole_record, tmp_path):
    lines = cartpole_lines(dict(cartpole_record), episodes=9, interleave=3)
    kept = [raw for raw in lines if orjson.loads(raw)["episode_id"] not in ("ep-1", "ep-4")
            or not (orjson.loads(raw)["terminated"] or orjson.loads(raw)["truncated"])]
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(kept) + b"\n")
    fields = ["reward", "step"]
    batch, _ = collate_file(path, RolloutStep, fields=fields)
    expected = collate(list(read_episodes(path, RolloutStep)), fields=fields)
    same_arrays(batch, expected)
    assert list(batch["episode_id"][-2:]) == ["ep-1", "ep-4"]


def test_a_bad_file_raises_as_reading_episodes_does(cartpole_record, tmp_path):
    lines = cartpole_lines(dict(cartpole_record))
    del lines[5]
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(ContractError) as flat:
        collate_file(path, RolloutStep, fields=["reward"])
    with pytest.raises(ContractError) as episodes:
        list(read_episodes(path, RolloutStep))
    assert str(flat.value) == str(episodes.value)


def test_what_columns_cannot_say_goes_to_episodes(cartpole_record, tmp_path, monkeypatch):
    lines = cartpole_lines(dict(cartpole_record))
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert collate_file(path, RolloutStep, fields=["next_value_typo"]) is None
    assert collate_file(path, RolloutStep, fields=["reward"], max_bytes=10) is None
    partial = [raw if i % 2 else orjson.dumps({k: v for k, v in orjson.loads(raw).items()
                                               if k != "value"})
               for i, raw in enumerate(lines)]
    path.write_bytes(b"\n".join(partial) + b"\n")
    assert collate_file(path, RolloutStep, fields=["value"]) is None
    monkeypatch.setenv("GYRE_FAST_PATHS", "0")
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert collate_file(path, RolloutStep, fields=["reward"]) is None


def test_ids_kept_once_per_run_collate_as_episodes(cartpole_record, tmp_path, small_blocks):
    """Episode ids are kept as numpy strings, one per run of steps: an id that comes back after
    others, in a later block, is the same episode; one that numpy would cut (a trailing NUL:
    "a" and "a\\0" are two episodes) sends the file to episodes."""
    lines = cartpole_lines(dict(cartpole_record), episodes=12, interleave=4)
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    found = collate_file(path, RolloutStep)
    assert found is not None
    same_arrays(found[0], collate(list(read_episodes(path, RolloutStep))))
    assert found[1] == 12
    record = {**cartpole_record, "step": 0, "terminated": True, "truncated": False}
    path.write_bytes(orjson.dumps({**record, "episode_id": "a"}) + b"\n"
                     + orjson.dumps({**record, "episode_id": "a\0"}) + b"\n")
    assert collate_file(path, RolloutStep) is None
    assert len(list(read_episodes(path, RolloutStep))) == 2


@pytest.mark.parametrize("max_len", [None, 3])
def test_v11_fields_collate_from_columns_as_episodes(cartpole_record, tmp_path, small_blocks,
                                                     max_len):
    from test_binding import token_fields

    lines = token_fields(colons(cartpole_lines(dict(cartpole_record), interleave=2)))
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    fields = ["action", "ref_logprob", "loss_mask", "token_reward", "group_id", "reward"]
    found = collate_file(path, RolloutStep, fields=fields, max_len=max_len)
    assert found is not None
    same_arrays(found[0], collate(list(read_episodes(path, RolloutStep)), fields=fields,
                           max_len=max_len))


def test_a_place_beyond_its_row_is_left_to_episodes():
    """The [B, T] scatter takes each step's cell as row * T + place: a place outside [0, T)
    (never from a checked file, whose steps count 0, 1, ...; a caller's own columns) would land
    in another row, so the columns step aside (None) instead (once: IndexError)."""
    from gyre_contract.io._columnar import FileColumns
    from gyre_contract.trainer._flatcollate import collate_columns

    def found(step: list[int]) -> FileColumns:
        n = len(step)
        return FileColumns({"reward": np.ones(n, np.float32), "step": np.array(step, np.int64)},
                           np.array(["a", "b"]), np.array([0, 0, 1, 1]), np.array([0, 1]),
                           np.array([2, 2]))

    ok = collate_columns(found([0, 1, 0, 1]))
    assert ok is not None and ok["reward"].shape == (2, 2) and ok["mask"].all()
    assert collate_columns(found([0, 1, 1, 2])) is None
    assert collate_columns(found([0, 1, -1, 0])) is None


@pytest.mark.parametrize("max_len", [None, 3])
def test_the_fields_scattered_on_two_threads_collate_as_episodes(cartpole_record, tmp_path,
                                                                 request, max_len):
    """Every field's scatter handed to `fill_all` (large batches: two threads at once), each
    into its own array: the batch is still the episodes' one, key for key."""
    lines = cartpole_lines(dict(cartpole_record), episodes=15, interleave=4)
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    wanted = FIELDS[1]
    expected = collate(list(read_episodes(path, RolloutStep)), fields=wanted, max_len=max_len)
    handed = request.getfixturevalue("fills_on_two_threads")  # from here on: two threads
    found = collate_file(path, RolloutStep, fields=wanted, max_len=max_len)
    assert found is not None
    assert handed == [len([f for f in wanted if f not in ROW_FIELDS])]  # one fill a [B, T] field
    same_arrays(found[0], expected)
