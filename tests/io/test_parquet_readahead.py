"""`ParquetRows.blocks` decodes the next record batch on a helper thread while the caller checks
the current one: one batch ahead and never more, an unreadable batch reported after the rows
before it (as without the read-ahead), and a caller that stops early leaves no thread behind."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed (extra 'parquet')")

from gyre_contract.core._errors import InputError  # noqa: E402
from gyre_contract.core._models import RolloutStep  # noqa: E402
from gyre_contract.io._parquet import ParquetRows, write_parquet  # noqa: E402

ROWS, GROUP = 64, 16


def steps_file(tmp_path: Path) -> Path:
    path = tmp_path / "steps.parquet"
    write_parquet(path, [{"observation": [0.1, 0.2, 0.3, 0.4], "action": 1, "reward": 1.0,
                          "step": i, "episode_id": "e", "terminated": i == ROWS - 1,
                          "truncated": False, "policy_version": 0} for i in range(ROWS)],
                  rows_per_group=GROUP)
    return path


class CountingFile:
    """A ParquetFile whose batches are counted as they are pulled from it."""

    def __init__(self, handle: object) -> None:
        self.handle, self.pulled = handle, 0

    def iter_batches(self, **kwargs: object):
        for batch in self.handle.iter_batches(**kwargs):  # type: ignore[attr-defined]
            self.pulled += 1
            yield batch


def ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("gyre-parquet-ahead")]


def test_the_next_batch_is_read_while_the_caller_holds_one(tmp_path):
    rows = ParquetRows(steps_file(tmp_path), RolloutStep, batch_rows=GROUP)
    counting = rows.handle = CountingFile(rows.handle)
    blocks = rows.blocks()
    held = []
    for first, batch in blocks:
        held.append((first, batch.num_rows))
        deadline = time.monotonic() + 10
        while counting.pulled < min(len(held) + 1, ROWS // GROUP) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert counting.pulled == min(len(held) + 1, ROWS // GROUP)  # one ahead, never more
    assert held == [(1 + i * GROUP, GROUP) for i in range(ROWS // GROUP)]


def test_an_unreadable_batch_is_reported_after_the_rows_before_it(tmp_path):
    path = steps_file(tmp_path)
    column = pq.ParquetFile(path).metadata.row_group(2).column(0)
    offset = column.dictionary_page_offset or column.data_page_offset
    data = bytearray(path.read_bytes())
    data[offset:offset + 16] = b"\xff" * 16  # the page header of the third batch's first column
    path.write_bytes(bytes(data))
    read = []
    with pytest.raises(InputError, match="after row 32: "):
        for first, batch in ParquetRows(path, RolloutStep, batch_rows=GROUP).blocks():
            read.append((first, batch.num_rows))
    assert read == [(1, GROUP), (17, GROUP)]


def test_a_caller_that_stops_early_leaves_no_thread(tmp_path):
    blocks = ParquetRows(steps_file(tmp_path), RolloutStep, batch_rows=GROUP).blocks()
    first, _ = next(blocks)
    assert first == 1
    blocks.close()
    assert not ahead_threads()
