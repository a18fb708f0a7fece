"""Fixtures shared by the trainer tests."""

from __future__ import annotations

import pytest

from gyre_contract.trainer import _tokens as tokens


@pytest.fixture
def fills_on_two_threads(monkeypatch) -> list[int]:
    """Every `fill_all` run on its two threads, whatever the size; how many fills each call
    was handed, in order."""
    handed: list[int] = []
    real_fill_all = tokens.fill_all

    def fill_all(fills):
        handed.append(len(fills))
        real_fill_all(fills)

    monkeypatch.setattr(tokens, "PARALLEL_CELLS", 0)
    monkeypatch.setattr(tokens, "fill_all", fill_all)
    return handed
