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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...memory import MemoryCapError, format_bytes
from ...plan import MODES
from ...problem import Problem
from .clock import chunk_rows, current
from .cores import usable_cores
from .family import FamilyEvaluator

__all__ = ["EdpBaseline", "EdpReference", "EdpScan", "best_edp", "clear_cache", "edp_points",
           "edp_reference", "edp_scan", "edp_times", "speedup"]

SCHEDULES = ("gpipe", "1f1b")
_cache: dict[tuple[int, str, str, float | None], tuple[Any, _Scan]] = {}
_points: dict[tuple[Any, ...], tuple[Any, np.ndarray]] = {}
_lock = threading.Lock()


class EdpScan:
    """EDP(M), M = 1..n (entry ``M-1``): ``times``, per-stage ``peaks`` [n, S], ``fits``.

    ``n`` is ``B`` (:attr:`complete`) unless a time budget ended the scan first
    (:func:`edp_scan` with ``partial``): then the entries are those of ``M = 1..n``."""

    def __init__(self, times: np.ndarray, peaks: np.ndarray, fits: np.ndarray,
                 capacity: np.ndarray | None, B: int | None = None) -> None:
        self.times, self.peaks, self.fits, self.capacity = times, peaks, fits, capacity
        self.B = len(times) if B is None else int(B)
        for a in (times, peaks, fits):
            a.setflags(write=False)

    @property
    def scanned(self) -> int:
        """How many M were scanned (``1..scanned``)."""
        return len(self.times)

    @property
    def complete(self) -> bool:
        return self.scanned == self.B


class _Scan:
    """A scan in progress: its evaluator and the M scanned so far, ``1..n`` (the cache's
    value; the arrays are filled in place, so a snapshot is a view, not a copy)."""

    def __init__(self, ev: FamilyEvaluator, schedule: str) -> None:
        self.ev, self.schedule = ev, schedule
        self.times = np.empty(ev.B)
        self.peaks = np.empty((ev.B, ev.S))
        self.fits = np.empty(ev.B, dtype=bool)
        self.n = 0
        self.view: EdpScan | None = None
        self.lock = threading.Lock()  # one thread extends a scan at a time

    def add(self, times: np.ndarray, peaks: np.ndarray) -> None:
        a, b = self.n, self.n + len(times)
        self.times[a:b], self.peaks[a:b], self.fits[a:b] = times, peaks, self.ev.fits(peaks)
        self.n = b
        self.view = None

    def snapshot(self) -> EdpScan:
        if self.view is None:
            n = self.n
            self.view = EdpScan(self.times[:n], self.peaks[:n], self.fits[:n],
                                self.ev.capacity, self.ev.B)
        return self.view


def clear_cache() -> None:
    """Forget every cached scan."""
    with _lock:
        _cache.clear()
        _points.clear()


def _check(mode: str, schedule: str) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    schedule = schedule.lower()
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; valid schedules: gpipe, 1f1b")
    return schedule


def edp_scan(problem: Problem, mode: str = "stash", schedule: str = "gpipe",
             memory_cap: float | None = None, partial: bool = False,
             upto: int | None = None) -> EdpScan:
    """Times, peaks and fit of EDP(M) for M = 1..B under ``schedule`` (cached).

    The scan runs in compiled calls of :func:`.evaluator.chunk_rows` rows, on the running
    plan's clock (:mod:`.clock`): once its deadline has passed (or a signal stopped the run),
    a scan stops between two calls and keeps what it has (a later call resumes it). Then
    ``partial=False`` raises :class:`~umpipe_bench.errors.TimeUp` (a phase of a search: the
    loop ends the run) and ``partial=True`` returns the M scanned so far (at least the first
    call's, unless a signal stopped the run). ``upto``: scan M = 1..upto at least, whatever
    the clock says (evaluations the search loop has already decided to make), and return the
    scan so far. Outside a run there is no deadline: the scan completes.
    """
    schedule = _check(mode, schedule)
    key = (id(problem), mode, schedule, memory_cap)
    with _lock:
        hit = _cache.get(key)
        scan = hit[1] if hit is not None and hit[0]() is problem else None
        if scan is None:
            scan = _Scan(FamilyEvaluator(problem, mode, memory_cap, threads=_threads()),
                         schedule)
            _cache[key] = (weakref.ref(problem, lambda _r, k=key: _cache.pop(k, None)), scan)
    goal = problem.B if upto is None else min(problem.B, int(upto))
    if scan.n < goal:
        with scan.lock:
            _extend(scan, problem, schedule, goal, partial, checked=upto is None)
    return scan.snapshot()


def _extend(scan: _Scan, problem: Problem, schedule: str, goal: int, partial: bool,
            checked: bool) -> None:
    """Scan more M, from ``scan.n + 1`` to ``goal`` or until the clock says stop (only when
    ``checked``; :func:`edp_scan`)."""
    clock = current()
    ev = scan.ev
    step = chunk_rows(problem.S, problem.B, ev.threads)
    ev.MIN_ROWS_PER_THREAD = max(1, -(-_THREAD_WORK // (problem.S * problem.B)))
    phase = clock.phase
    clock.phase = f"the {'GPipe' if schedule == 'gpipe' else '1F1B'}-EDP scan"
    while scan.n < goal:
        if checked and (scan.n or clock.stopped == "interrupted"):
            if partial and clock.expired():
                break
            clock.check()  # TimeUp once the deadline has passed (the phase names the scan)
        Ms = range(scan.n + 1, min(goal, scan.n + step) + 1)
        scan.add(*ev.edp_scan(schedule, Ms))
        clock.tick()
    clock.phase = phase


#: Work ``N*S*B`` of a scan's call from which it is split over two threads (as the search's
#: evaluators: :mod:`..search.threads`).
_THREAD_WORK = 100_000


def _threads() -> int:
    return max(1, min(2, usable_cores()))


def edp_times(problem: Problem, mode: str = "stash", schedule: str = "gpipe",
              memory_cap: float | None = None, partial: bool = False,
              upto: int | None = None) -> np.ndarray:
    """Iteration time of EDP(M) for M = 1..B (entry ``M-1``); ``inf`` where it does not fit
    (``partial``, ``upto``: M = 1..n of a scan a time budget ended, :func:`edp_scan`)."""
    scan = edp_scan(problem, mode, schedule, memory_cap, partial, upto)
    return np.where(scan.fits, scan.times, np.inf)


def edp_points(problem: Problem, mode: str, schedule: str, Ms: Sequence[int]) -> np.ndarray:
    """:func:`edp_times` at the given M only (``inf`` where EDP(M) does not fit): read from
    the scan when it has them, else evaluated alone (the same kernel: the same numbers) and
    cached."""
    schedule = _check(mode, schedule)
    Ms = tuple(int(M) for M in Ms)
    key = (id(problem), mode, schedule, None)
    with _lock:
        hit = _cache.get(key)
        scan = hit[1] if hit is not None and hit[0]() is problem else None
        points = _points.get((*key, Ms))
    if scan is not None and Ms and scan.n >= max(Ms):
        t = edp_times(problem, mode, schedule, upto=max(Ms))
        return np.array([t[M - 1] for M in Ms])
    if points is not None and points[0]() is problem:
        return points[1]
    ev = FamilyEvaluator(problem, mode)
    T, peak = ev.edp_scan(schedule, Ms)
    out = np.where(ev.fits(peak), T, np.inf)
    out.setflags(write=False)
    with _lock:
        k = (*key, Ms)
        _points[k] = (weakref.ref(problem, lambda _r, k=k: _points.pop(k, None)), out)
    return out


def best_edp(problem: Problem, mode: str = "stash", schedule: str = "gpipe",
             memory_cap: float | None = None, partial: bool = False) -> tuple[int, float]:
    """``(M, T)`` of the best EDP(M) that fits, M in 1..B (ties: smallest M; ``partial``: of
    the M scanned before a time budget ended, :func:`edp_scan`).

    Raises :class:`umpipe_bench.memory.MemoryCapError` when no M fits, naming the stage, the
    bytes the leanest EDP plan needs there and the cap.
    """
    scan = edp_scan(problem, mode, schedule, memory_cap, partial)
    if not scan.fits.any():
        of = "" if scan.complete else f" (of EDP(1..{scan.scanned}), all the time allowed)"
        if not scan.scanned:
            raise MemoryCapError(f"problem {problem.name!r} ({mode}): no EDP(M) plan under "
                                 f"{schedule} was scanned before the run stopped")
        assert scan.capacity is not None
        over = (scan.peaks - scan.capacity).max(axis=1)
        i = int(np.argmin(over))
        s = int(np.argmax(scan.peaks[i] - scan.capacity))
        need, cap = float(scan.peaks[i, s]), float(scan.capacity[s])
        raise MemoryCapError(
            f"problem {problem.name!r} ({mode}): no EDP(M) plan under {schedule} fits memory"
            f"{of}; the leanest, EDP({i + 1}), needs {format_bytes(need)} ({need:.0f} bytes) "
            f"on stage {s}, whose cap is {format_bytes(cap)} ({cap:.0f} bytes)")
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
    #: ``{schedule: (M scanned, B)}`` of each scan a time budget ended before M = B
    #: (:func:`edp_scan` with ``partial``); empty when both are complete.
    incomplete: dict[str, tuple[int, int]] = field(default_factory=dict, compare=False)

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


def edp_reference(problem: Problem, mode: str = "stash", partial: bool = False
                  ) -> EdpReference:
    """The best GPipe-EDP and 1F1B-EDP plans of ``problem`` that fit (:func:`best_edp`);
    ``partial``: of the M scanned before the running plan's time budget ended (the run's
    clock, :mod:`.clock`), named in :attr:`EdpReference.incomplete`."""
    found, errors, incomplete = {}, {}, {}
    if partial:  # both scans advance together, so a time budget cuts them at the same M
        clock, B = current(), problem.B
        step = chunk_rows(problem.S, B, _threads())
        goal = step
        while goal < B and not clock.expired():
            for schedule in SCHEDULES:
                edp_scan(problem, mode, schedule, upto=goal)
            goal += step
    for schedule in SCHEDULES:
        try:
            M, T = best_edp(problem, mode, schedule, partial=partial)
        except MemoryCapError as exc:
            errors[schedule] = exc
            found[schedule] = EdpBaseline(schedule, mode, None, None)
        else:
            found[schedule] = EdpBaseline(schedule, mode, float(T), int(M))
        if partial:
            scan = edp_scan(problem, mode, schedule, partial=True)
            if not scan.complete:
                incomplete[schedule] = (scan.scanned, problem.B)
    return EdpReference(found["gpipe"], found["1f1b"], errors, incomplete)
