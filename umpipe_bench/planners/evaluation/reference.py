"""Reference times: the best EDP(M) plan under a schedule that fits memory (docs/MODEL.md §2,
docs/SCHEDULES.md).

The numbers every speedup is measured against: ``gpipe`` is EDP with the best M in 1..B under
the gpipe schedule, ``1f1b`` the same under torch's 1F1B (the paper's PipeDream comparison).
With a memory cap (``memory_cap`` bytes, or the problem's stage/device capacities) only the M
whose per-stage peak fits count: "the best M that fits". Shared by the ``gpipe``/``1f1b``
baselines, the planners' seeds, the ``plan`` CLI and the benchmark suite.

:class:`EdpReference` is the one comparison of a plan with them: the best GPipe-EDP and
1F1B-EDP plans that fit (:func:`edp_reference`), the speedup ``T_EDP / T - 1`` over each and
over the better of the two (:meth:`EdpReference.speedups`), and the EDP plan that beats a
candidate, if any (:meth:`EdpReference.faster_than`).

Both scans run in the family's numba evaluator (:class:`.family.FamilyEvaluator`),
bit-identical to the list simulator: B individuals, milliseconds even at S = 64, B = 1024.
Results are cached per problem object, mode, schedule and cap.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...memory import MemoryCapError, format_bytes
from ...plan import MODES
from ...problem import Problem
from .family import FamilyEvaluator

__all__ = ["EdpBaseline", "EdpReference", "EdpScan", "best_edp", "clear_cache", "edp_reference",
           "edp_scan", "edp_times", "speedup"]

SCHEDULES = ("gpipe", "1f1b")
_cache: dict[tuple[int, str, str, float | None], tuple[Any, EdpScan]] = {}
_lock = threading.Lock()


class EdpScan:
    """EDP(M), M = 1..B (entry ``M-1``): ``times``, per-stage ``peaks`` [B, S], ``fits``."""

    def __init__(self, times: np.ndarray, peaks: np.ndarray, fits: np.ndarray,
                 capacity: np.ndarray | None) -> None:
        self.times, self.peaks, self.fits, self.capacity = times, peaks, fits, capacity
        for a in (times, peaks, fits):
            a.setflags(write=False)


def clear_cache() -> None:
    """Forget every cached scan."""
    with _lock:
        _cache.clear()


def _check(mode: str, schedule: str) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    schedule = schedule.lower()
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; valid schedules: gpipe, 1f1b")
    return schedule


def edp_scan(problem: Problem, mode: str = "stash", schedule: str = "gpipe",
             memory_cap: float | None = None) -> EdpScan:
    """Times, peaks and fit of EDP(M) for M = 1..B under ``schedule`` (cached)."""
    schedule = _check(mode, schedule)
    key = (id(problem), mode, schedule, memory_cap)
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit[0]() is problem:
            return hit[1]
    ev = FamilyEvaluator(problem, mode, memory_cap)
    times, peaks = ev.edp_scan(schedule)
    scan = EdpScan(times, peaks, ev.fits(peaks), ev.capacity)
    with _lock:
        _cache[key] = (weakref.ref(problem, lambda _r, k=key: _cache.pop(k, None)), scan)
    return scan


def edp_times(problem: Problem, mode: str = "stash", schedule: str = "gpipe",
              memory_cap: float | None = None) -> np.ndarray:
    """Iteration time of EDP(M) for M = 1..B (entry ``M-1``); ``inf`` where it does not fit."""
    scan = edp_scan(problem, mode, schedule, memory_cap)
    return np.where(scan.fits, scan.times, np.inf)


def best_edp(problem: Problem, mode: str = "stash", schedule: str = "gpipe",
             memory_cap: float | None = None) -> tuple[int, float]:
    """``(M, T)`` of the best EDP(M) that fits, M in 1..B (ties: smallest M).

    Raises :class:`umpipe_bench.memory.MemoryCapError` when no M fits, naming the stage, the
    bytes the leanest EDP plan needs there and the cap.
    """
    scan = edp_scan(problem, mode, schedule, memory_cap)
    if not scan.fits.any():
        assert scan.capacity is not None
        over = (scan.peaks - scan.capacity).max(axis=1)
        i = int(np.argmin(over))
        s = int(np.argmax(scan.peaks[i] - scan.capacity))
        need, cap = float(scan.peaks[i, s]), float(scan.capacity[s])
        raise MemoryCapError(
            f"problem {problem.name!r} ({mode}): no EDP(M) plan under {schedule} fits memory; "
            f"the leanest, EDP({i + 1}), needs {format_bytes(need)} ({need:.0f} bytes) on stage "
            f"{s}, whose cap is {format_bytes(cap)} ({cap:.0f} bytes)")
    times = np.where(scan.fits, scan.times, np.inf)
    i = int(np.argmin(times))
    return i + 1, float(times[i])


@dataclass(frozen=True)
class EdpBaseline:
    """Best EDP under one schedule that fits memory: its iteration time and microbatch count
    (both None when no M fits the problem's memory caps)."""

    schedule: str
    mode: str
    T: float | None
    M: int | None


def speedup(T_base: float | None, T: float) -> float | None:
    """``T_base / T - 1``: how much faster ``T`` is than the reference (None without one)."""
    return None if T_base is None else T_base / T - 1.0


@dataclass(frozen=True)
class EdpReference:
    """The best GPipe-EDP and 1F1B-EDP plans that fit memory, what every plan is compared with
    (module docstring). ``errors``: the :class:`~umpipe_bench.memory.MemoryCapError` of each
    schedule under which no EDP(M) fits."""

    gpipe: EdpBaseline
    one_f_one_b: EdpBaseline
    errors: dict[str, MemoryCapError] = field(default_factory=dict, compare=False)

    def baselines(self) -> tuple[EdpBaseline, EdpBaseline]:
        """Both references, GPipe first (the order ties are broken in)."""
        return self.gpipe, self.one_f_one_b

    @property
    def best(self) -> EdpBaseline | None:
        """The better reference that fits (ties: GPipe; None when neither fits)."""
        return self.faster_than(float("inf"))

    @property
    def best_T(self) -> float | None:
        """T of the better reference that fits (None when neither does)."""
        best = self.best
        return None if best is None else best.T

    def of(self, schedule: str) -> EdpBaseline:
        """The reference under ``schedule`` (``T``, ``M`` None when no EDP(M) fits)."""
        return {"gpipe": self.gpipe, "1f1b": self.one_f_one_b}[schedule]

    def fitting(self, schedule: str) -> EdpBaseline:
        """The reference under ``schedule``; its :class:`MemoryCapError` when none fits."""
        if schedule in self.errors:
            raise self.errors[schedule]
        return self.of(schedule)

    def speedups(self, T: float) -> dict[str, float | None]:
        """``{"gpipe", "1f1b", "best_edp"}``: the speedup of ``T`` over each reference."""
        return {"gpipe": speedup(self.gpipe.T, T), "1f1b": speedup(self.one_f_one_b.T, T),
                "best_edp": speedup(self.best_T, T)}

    def faster_than(self, T: float) -> EdpBaseline | None:
        """The fastest reference that fits and is strictly faster than ``T`` (ties: GPipe)."""
        best, out = T, None
        for b in self.baselines():
            if b.T is not None and b.T < best:
                best, out = b.T, b
        return out


def edp_reference(problem: Problem, mode: str = "stash") -> EdpReference:
    """The best GPipe-EDP and 1F1B-EDP plans of ``problem`` that fit (:func:`best_edp`)."""
    found, errors = {}, {}
    for schedule in SCHEDULES:
        try:
            M, T = best_edp(problem, mode, schedule)
        except MemoryCapError as exc:
            errors[schedule] = exc
            found[schedule] = EdpBaseline(schedule, mode, None, None)
        else:
            found[schedule] = EdpBaseline(schedule, mode, float(T), int(M))
    return EdpReference(found["gpipe"], found["1f1b"], errors)
