"""The run clock: one wall-clock deadline for every phase of a planner run, and the size of
every compiled call (docs/ARCHITECTURE.md, "Search planners", "Budgets and signals").

A ``secs:X`` budget is a limit on the whole run, not on its search loop alone: the EDP
reference scans, the seed plans (EDP scan, greedy plans, the schedule family's 1F1B-EDP
plans), the stage descent, the initial population, every generation, restart rounds and
islands all run on one :class:`RunClock`, started when :meth:`..search.base.Planner.plan` is called
(the command line starts it when the command starts, so imports, loading the problem, the
first numba compile and the report count too).

Python runs a signal handler, and this module can look at the clock, only between two
compiled calls; so no compiled call may run long. Every batch is cut into calls of at most
:func:`chunk_rows` rows (:data:`CHUNK_WORK` units of ``S*B`` work per thread: under 0.1 s at
S = 128, B = 2048 on the machine the figures in results/perf/budgets-signals.md come from,
a few milliseconds typically). Between two calls:

* :meth:`RunClock.tick` moves the progress bar (at most four times a second);
* :meth:`RunClock.check` raises :class:`~umpipe_bench.errors.TimeUp` once the deadline has
  passed, which the search loop catches: the run ends with the best plan it has evaluated;
* SIGINT and SIGTERM raise (``KeyboardInterrupt``, :class:`~umpipe_bench.errors.Terminated`),
  and the search loop ends the same way.

A library's own call (an outside optimizer's ask or tell) cannot be cut; the outside planners
read the clock between their calls, and the CMA-ES ones refuse genomes so long that one call
takes seconds (:mod:`umpipe_bench.baselines.outside`).

The clock of the running plan is ambient (:func:`current`), so a scan deep inside a phase
(:mod:`..evaluation.reference`, :func:`..algorithms.greedy.greedy_dp_plan`) checks the same
deadline without a clock passed down to it. Outside a run :func:`current` is a clock without a
deadline: a scan then runs to its end (chunked all the same, so signals still act).

Results do not depend on the chunking: every compiled call evaluates rows independently, so
a batch cut into calls gives the same times as one call, and evaluation and generation budgets
give the same plans as ever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar

from ...errors import TimeUp

__all__ = ["CHUNK_WORK", "LibraryCalls", "RunClock", "TimeUp", "chunk_rows", "current",
           "running"]

#: Work units (``S*B``: one row's cut bits) one compiled call gets per thread (module
#: docstring). The costliest rows measured are random plans of the capped schedule at
#: S = 128, B = 2048 (up to 48 ms, about 185 ns a unit; an EDP row 2-14 ms): a call stays
#: under 0.1 s, one row per thread there (results/perf/budgets-signals.md).
CHUNK_WORK = 500_000


def chunk_rows(S: int, B: int, threads: int = 1) -> int:
    """Rows of an ``[N, S, B-1]`` batch one compiled call evaluates: :data:`CHUNK_WORK`
    units per thread, at least one row."""
    return max(1, CHUNK_WORK // max(1, S * B)) * max(1, int(threads))


class RunClock:
    """The deadline of one run (``seconds`` from ``start``, a ``time.perf_counter`` value;
    None: no deadline; less ``reserve``), its current phase and its progress bar.

    ``progress``: draw a tqdm bar (imported only then) that moves with every :meth:`tick`:
    elapsed seconds of a time budget, else evaluations of an evaluation budget, else
    generations.
    """

    #: Seconds between progress-bar refreshes.
    PROGRESS_EVERY: ClassVar[float] = 0.25

    def __init__(self, seconds: float | None = None, start: float | None = None, *,
                 progress: bool = False, desc: str = "plan", evaluations: int | None = None,
                 generations: int | None = None, reserve: float = 0.0) -> None:
        self.start = time.perf_counter() if start is None else float(start)
        self.seconds = None if seconds is None else float(seconds)
        #: The deadline the phases check: ``reserve`` seconds before the budget's end, left
        #: for what follows them (the final plan, a command's report and exit).
        self.end = (float("inf") if seconds is None
                    else self.start + max(0.0, float(seconds) - reserve))
        #: What the run is doing (shown on the bar and named when the deadline passes in it).
        self.phase = "setup"
        #: Why the run ended early: None, ``"time"`` or ``"interrupted"``.
        self.stopped: str | None = None
        self.evaluations = 0
        self.generation = 0
        self.best = float("inf")
        self.progress, self._desc = progress, desc
        self._budget_evals, self._budget_gens = evaluations, generations
        self._bar: Any = None
        self._lock = threading.Lock()
        self._signalled = False  # stop("interrupted") was called
        self._base = 0  # evaluations of the phases before (until())
        self._shown = 0.0
        self._last = 0.0

    # --------------------------------------------------------------------- the deadline
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def remaining(self) -> float:
        return self.end - time.perf_counter()

    def expired(self) -> bool:
        """The deadline has passed, or the run was stopped (:meth:`stop`)."""
        return self.stopped is not None or time.perf_counter() >= self.end

    def check(self, need: float = 0.0) -> None:
        """:meth:`tick`, then :class:`TimeUp` if the deadline has passed, or will within
        ``need`` seconds (a call that long cannot end in time; between two compiled calls:
        the search loop catches it)."""
        self.tick()
        if self.stopped is None and time.perf_counter() + need >= self.end:
            with self._lock:
                if self.stopped is None:
                    self.stopped = "time"
        if self.stopped is not None:
            budget = "" if self.seconds is None else f" secs:{self.seconds:g}"
            raise TimeUp(f"the time budget{budget} ended during {self.phase}")

    @contextmanager
    def share(self, fraction: float) -> Iterator[RunClock]:
        """Within the block, the deadline is ``fraction`` of the time budget after the start
        (no earlier than it is): a phase that may take only part of the budget."""
        end = self.end
        if self.seconds is not None:
            self.end = min(end, self.start + fraction * self.seconds)
        try:
            yield self
        finally:
            self.end = end

    @contextmanager
    def until(self, seconds: float | None) -> Iterator[RunClock]:
        """Within the block, the deadline is at most ``seconds`` from now (None: as it is):
        a phase of the run that ends on its own deadline, after which the run goes on. When
        that deadline ends the phase, the clock runs again after the block (a :meth:`stop`
        for a signal meanwhile stays); the evaluations the phase noted count on (the next
        phase's :meth:`tick` adds to them)."""
        end = self.end
        if seconds is not None:
            self.end = min(end, time.perf_counter() + seconds)
        try:
            yield self
        finally:
            with self._lock:
                self.end = end
                if self.stopped == "time" and time.perf_counter() < end:
                    self.stopped = "interrupted" if self._signalled else None
            self._base = self.evaluations

    def stop(self, why: str) -> None:
        """Mark the run as ended (``"time"``, ``"interrupted"``): from now on every phase
        that checks the clock does no new work."""
        with self._lock:
            if self.stopped is None:
                self.stopped = why
            self._signalled = self._signalled or why == "interrupted"

    # --------------------------------------------------------------------- progress
    def tick(self, evaluations: int | None = None, best: float | None = None) -> None:
        """Note progress (evaluations so far, best T so far) and move the bar, at most
        every :data:`PROGRESS_EVERY` seconds."""
        if evaluations is not None:
            self.evaluations = self._base + evaluations
        if best is not None and best < self.best:
            self.best = best
        if not self.progress:
            return
        now = time.perf_counter()
        if now - self._last < self.PROGRESS_EVERY:
            return
        self._last = now
        bar = self._bar
        if bar is None:
            from tqdm.auto import tqdm

            total, unit = self._bar_total()
            bar = self._bar = tqdm(total=total, desc=self._desc, unit=unit, leave=False)
        value = self._bar_value()
        bar.update(value - self._shown)
        self._shown = value
        bar.set_postfix(phase=self.phase, best=f"{self.best:.6g}", evals=self.evaluations,
                        refresh=False)
        bar.refresh()

    def _bar_total(self) -> tuple[float | None, str]:
        if self.seconds is not None:
            return round(self.seconds, 1), "s"
        if self._budget_evals is not None:
            return self._budget_evals, "eval"
        return self._budget_gens, "gen"

    def _bar_value(self) -> float:
        if self.seconds is not None:
            return round(min(self.elapsed(), self.seconds), 1)
        if self._budget_evals is not None:
            return self.evaluations
        return self.generation

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


#: The clock of the run in progress (:func:`running`).
_CURRENT: ContextVar[RunClock | None] = ContextVar("umpipe_run_clock", default=None)


def current() -> RunClock:
    """The running plan's clock; outside a run, a fresh clock without a deadline."""
    clock = _CURRENT.get()
    return RunClock() if clock is None else clock


@contextmanager
def running(clock: RunClock) -> Iterator[RunClock]:
    """Within the block, ``clock`` is :func:`current`; its bar is closed at the end of the
    outermost block that runs it."""
    nested = _CURRENT.get() is clock
    token = _CURRENT.set(clock)
    try:
        yield clock
    finally:
        _CURRENT.reset(token)
        if not nested:
            clock.close()


class LibraryCalls:
    """The guard for a library call that cannot be cut (an outside optimizer's ask): no call
    starts that could not end before the deadline if it takes twice the last one's time."""

    def __init__(self) -> None:
        self.last = 0.0  # seconds the last guarded call took

    @contextmanager
    def call(self) -> Iterator[None]:
        """Check the running clock for twice the last call's time, then time this one."""
        current().check(need=2.0 * self.last)
        t0 = time.perf_counter()
        yield
        self.last = time.perf_counter() - t0
