"""Independent searches side by side: one search per core, the best plan wins
(docs/SEARCH.md, "Searches side by side").

A search of the default budget settles into the basin its first rounds found, and on the
problems whose runs the 60 s cap ends one run makes one or two rounds there; which basin is
luck. Its evaluator splits big calls over two threads, but the search's time is mostly its
walks of a few hundred plans a batch, which a second thread barely shortens. Two whole
searches, each on one core from its own seed, give the same plans per search and two basins
instead of one. :func:`run_side_by_side` runs ``k`` copies of a planner's search in threads
(the compiled evaluators release the GIL), each under a clock of its own with the run's
deadline, and returns the best result.

Known by construction: search ``i`` is exactly the planner's run with seed
``search_seeds(seed, k)[i]`` (the first is ``seed`` itself), so the plan is the best of those
runs, and for a run its rule ends, the same seed gives the same plan.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from ..evaluation.clock import RunClock, running
from ..evaluation.clock import current as current_clock
from .history import History, thinned

if TYPE_CHECKING:
    from ...problem import Problem
    from .base import Budget, PlanResult

__all__ = ["merge_histories", "run_side_by_side", "search_seeds"]


def search_seeds(seed: int | None, k: int) -> list[int | None]:
    """The seeds of ``k`` searches: ``seed`` itself first, then ``k - 1`` derived from it
    (numpy's ``SeedSequence``; None: every search draws its own)."""
    if seed is None:
        return [None] * k
    rest = np.random.SeedSequence([int(seed), 1]).generate_state(k - 1) if k > 1 else []
    return [int(seed), *(int(x) for x in rest)]


def merge_histories(histories: list[History]) -> History:
    """One history of searches that ran at the same time: at each record of any of them (in
    time order, ties by search), the evaluations of all so far (each one's last record) and
    the best T of all so far; :func:`thinned` to the records that tell something. Each
    search's own ``extra`` (e.g. its restart ``rounds``) stays its own, in ``extra["searches"]``
    in search order."""
    parts = [(h.column("wall_time"), h.column("evaluations"), h.column("generation"),
              h.column("best")) for h in histories]
    t = np.concatenate([c[0] for c in parts]).astype(np.float64)
    # each record's increments over its own search's previous one sum to the totals so far
    ev = np.concatenate([np.diff(c[1], prepend=0) for c in parts]).astype(np.int64)
    gen = np.concatenate([np.diff(c[2], prepend=0) for c in parts]).astype(np.int64)
    best = np.concatenate([c[3] for c in parts]).astype(np.float64)
    who = np.concatenate([np.full(len(c[0]), i) for i, c in enumerate(parts)])
    pos = np.concatenate([np.arange(len(c[0])) for c in parts])
    order = np.lexsort((pos, who, t))
    out = thinned(np.cumsum(gen[order]), np.cumsum(ev[order]), t[order],
                  np.minimum.accumulate(best[order]))
    out.extra["searches"] = [dict(h.extra) for h in histories]
    return out


def _clock_like(parent: RunClock) -> RunClock:
    """A clock with the run's start and deadline, without a progress bar."""
    clock = RunClock(parent.seconds, parent.start)
    clock.end = parent.end
    clock.phase = parent.phase
    return clock


def run_side_by_side(make: Any, k: int, problem: Problem, mode: str, budget: Budget,
                     seed: int | None) -> PlanResult:
    """``k`` searches in threads, ``make(i)`` building search ``i``'s planner; the result of the
    fastest plan (the first of equal ones), with the evaluations of all, their history merged
    (:func:`merge_histories`) and one note if the cap or a signal ended any.

    The calling thread draws the run's progress (its clock: the evaluations of all, the best
    T of all) and takes the signals: SIGINT or SIGTERM stops every search's clock, each ends
    with its best plan so far, and the result carries the signal as ``interrupted``.
    """
    parent = current_clock()
    seeds = search_seeds(seed, k)
    clocks = [_clock_like(parent) for _ in range(k)]
    results: list[PlanResult | None] = [None] * k
    errors: list[BaseException | None] = [None] * k
    # waited on instead of Thread.join: a join that a signal interrupts can leave the thread
    # looking finished while it still runs (a known CPython fault)
    ended = [threading.Event() for _ in range(k)]

    def work(i: int) -> None:
        try:
            with running(clocks[i]):
                results[i] = make(i)._plan(problem, mode=mode, budget=budget,
                                           seed=seeds[i], progress=False)
        except BaseException as exc:  # handed to the calling thread
            errors[i] = exc
            for c in clocks:  # the others stop too: the run fails as one
                c.stop("interrupted")
        finally:
            ended[i].set()

    threads = [threading.Thread(target=work, args=(i,), name=f"umpipe search {i}",
                                daemon=True) for i in range(k)]
    interrupted: KeyboardInterrupt | None = None
    parent.phase = f"{k} searches side by side"
    for t in threads:
        t.start()
    try:
        _wait(ended, clocks, parent)
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (Terminated)
        interrupted = exc
        for c in clocks:
            c.stop("interrupted")
        for e in ended:
            e.wait()
    for t in threads:
        t.join()  # each has set its event: this returns at once
    for exc in errors:
        if exc is not None:
            raise exc
    done = [r for r in results if r is not None]
    assert len(done) == k
    i = min(range(k), key=lambda j: (done[j].iteration_time, j))
    res = done[i]
    each = {"search_times": [r.iteration_time for r in done],
            "search_evaluations": [r.evaluations for r in done],
            "search_coarse": [bool(r.settings.get("coarse", False)) for r in done],
            "search_coarse_times": [r.settings.get("coarse_time") for r in done]}
    res.evaluations = sum(each["search_evaluations"])
    note = _note(done, res.evaluations, budget, interrupted)
    res.history = merge_histories([r.history for r in done])
    res.settings = {**res.settings, "searches": k, "search_seeds": seeds, "best_search": i,
                    **each}
    res.interrupted, res.stopped = interrupted, note
    return res


def _wait(ended: list[threading.Event], clocks: list[RunClock], parent: RunClock) -> None:
    """Wait for every search to end, moving the run's progress bar meanwhile."""
    def tick() -> None:
        parent.tick(sum(c.evaluations for c in clocks), min(c.best for c in clocks))

    for e in ended:
        while not e.wait(parent.PROGRESS_EVERY):
            tick()
    tick()


def _note(done: list[PlanResult], total: int, budget: Budget,
          interrupted: KeyboardInterrupt | None) -> str | None:
    """One line when a signal or the default budget's cap ended a search (None: every search
    ended as its budget says); ``total``: the searches' evaluations."""
    if interrupted is not None:
        why = str(interrupted) or "interrupted"
        return f"{why} during the search; the plan is the best found so far"
    cut = [r for r in done if r.stopped is not None]
    if not cut:
        return None
    if not budget.settle or budget.seconds is None:
        return cut[0].stopped
    rounds = "+".join(str(r.history.extra.get("rounds", "?")) for r in done)
    return (f"the default budget's {budget.seconds:g} s cap ended the search after "
            f"{total:,} evaluations ({len(done)} searches side by side, {rounds} whole "
            f"rounds), before its stop rule held in {len(cut)} of them; the plan is the best "
            "found so far (--budget evals:N or secs:X searches longer)")
