from __future__ import annotations

import multiprocessing as mp

import pytest

from umpipe_bench.profiler.corunner import co_runner


def _children() -> list:
    return [p for p in mp.active_children() if p.name == "umpipe-co-runner"]


def test_co_runner_runs_only_inside_its_block():
    with co_runner("tiny-known", {"hidden": 16, "rows": 2, "work": [1, 1]}, "float32", 0, 2):
        (proc,) = _children()
        assert proc.is_alive()
    assert not proc.is_alive() and _children() == []


def test_co_runner_disabled_starts_nothing():
    with co_runner("tiny-known", {}, "float32", 0, 2, enabled=False):
        assert _children() == []


def test_co_runner_stops_when_the_block_raises():
    with pytest.raises(RuntimeError, match="boom"):
        with co_runner("tiny-known", {"hidden": 16, "rows": 2, "work": [1]}, "float32", 0, 1):
            (proc,) = _children()
            raise RuntimeError("boom")
    assert not proc.is_alive()
