"""Reference times: the best EDP(M) plan under a schedule (MODEL.md §2 EDP, §3, §4).

The numbers every speedup is measured against: ``gpipe`` is EDP with the best M in 1..B under
the gpipe schedule, ``1f1b`` the same under 1F1B (the paper's PipeDream comparison). Shared by
the ``gpipe``/``1f1b`` baselines, the ``plan`` CLI and the benchmark suite.

gpipe times come from the numba population evaluator (bit-identical to
:func:`umpipe_bench.simulator.gpipe_recurrence`; the reference loop when numba is missing).
1f1b has no recurrence form (MODEL.md §4), so each M goes through the list-schedule
:func:`umpipe_bench.simulator.simulate`: ``O(S * B^2)`` operations for the scan, seconds for
the largest sim problems, so results are cached per problem object, mode and schedule.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from ..plan import MODES, Plan
from ..problem import Problem
from ..simulator import gpipe_recurrence, simulate
from .encoding import edp_bits
from .evaluator import PopulationEvaluator

__all__ = ["best_edp", "clear_cache", "edp_times"]

_cache: dict[tuple[int, str, str], tuple[Any, np.ndarray]] = {}
_lock = threading.Lock()


def clear_cache() -> None:
    """Forget every cached scan."""
    with _lock:
        _cache.clear()


def _scan(problem: Problem, mode: str, schedule: str) -> np.ndarray:
    S, B = problem.S, problem.B
    if schedule == "gpipe":
        ev = PopulationEvaluator(problem, mode, "auto")
        if ev.backend == "numba":
            fb = np.stack([edp_bits(S, B, M) for M in range(1, B + 1)])
            return ev(fb, fb)
        return np.array([gpipe_recurrence(problem, Plan.edp(S, B, M, mode))
                         for M in range(1, B + 1)])
    return np.array([simulate(problem, Plan.edp(S, B, M, mode), schedule).iteration_time
                     for M in range(1, B + 1)])


def edp_times(problem: Problem, mode: str = "stash", schedule: str = "gpipe") -> np.ndarray:
    """Iteration time of EDP(M) for M = 1..B (entry ``M-1``), under ``schedule``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    schedule = schedule.lower()
    if schedule not in ("gpipe", "1f1b"):
        raise ValueError(f"unknown schedule {schedule!r}; valid schedules: gpipe, 1f1b")
    key = (id(problem), mode, schedule)
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit[0]() is problem:
            return hit[1].copy()
    times = _scan(problem, mode, schedule)
    times.setflags(write=False)
    with _lock:
        _cache[key] = (weakref.ref(problem, lambda _r, k=key: _cache.pop(k, None)), times)
    return times.copy()


def best_edp(problem: Problem, mode: str = "stash", schedule: str = "gpipe") -> tuple[int, float]:
    """``(M, T)`` of the best EDP(M), M in 1..B, under ``schedule`` (ties: smallest M)."""
    times = edp_times(problem, mode, schedule)
    i = int(np.argmin(times))
    return i + 1, float(times[i])
