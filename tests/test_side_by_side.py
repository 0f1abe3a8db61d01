"""Searches side by side under TiDGAP's default budget (setting ``searches``,
umpipe_bench/planners/search/side_by_side.py). Known by construction: search ``i`` is the
one-search run with seed ``search_seeds(seed, k)[i]``, so the result is the fastest of those
runs' plans with the evaluations of all; a fixed budget runs one search; a signal stops every
search and leaves no thread behind."""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import replace

import pytest

from umpipe_bench.planners.algorithms import tidgap
from umpipe_bench.planners.algorithms._tidgap_settings import Settle
from umpipe_bench.planners.search.base import PlannerError
from umpipe_bench.planners.search.history import History
from umpipe_bench.planners.search.side_by_side import merge_histories, search_seeds
from umpipe_bench.synthetic import synthetic_problem

SMALL = synthetic_problem(4, 12, 3)
QUICK = Settle(round_floor=2000, round_per_bit=1, min_rounds=2, max_rounds=6, patience=1,
               double_every=0)


def test_the_first_search_keeps_the_seed_and_the_others_derive_from_it():
    seeds = search_seeds(7, 3)
    assert seeds[0] == 7 and len(set(seeds)) == 3
    assert all(isinstance(s, int) and 0 <= s < 2**32 for s in seeds)
    assert search_seeds(7, 3) == seeds and search_seeds(8, 3)[1:] != seeds[1:]
    assert search_seeds(7, 1) == [7]
    assert search_seeds(None, 2) == [None, None]


def test_merged_history_counts_every_search_and_keeps_the_best_so_far():
    a, b = History(), History()
    a.append(0, 100, 0.5, 3.0)
    a.append(1, 300, 2.0, 2.0)
    b.append(0, 50, 1.0, 2.5)
    b.append(2, 400, 3.0, 1.5)
    a.extra["rounds"] = 3
    b.extra["rounds"] = 4
    m = merge_histories([a, b])
    assert [(r.generation, r.evaluations, r.wall_time, r.best) for r in m] == [
        (0, 100, 0.5, 3.0), (0, 150, 1.0, 2.5), (1, 350, 2.0, 2.0), (3, 700, 3.0, 1.5)]
    assert m.extra == {"searches": [{"rounds": 3}, {"rounds": 4}]}


def test_two_searches_give_the_faster_of_the_two_one_search_runs(monkeypatch):
    monkeypatch.setattr(tidgap, "SETTLE", QUICK)
    both = tidgap.TiDGAP(searches=2).plan(SMALL, mode="recompute", seed=3)
    again = tidgap.TiDGAP(searches=2).plan(SMALL, mode="recompute", seed=3)
    alone = [tidgap.TiDGAP(searches=1, threads=1).plan(SMALL, mode="recompute", seed=s)
             for s in search_seeds(3, 2)]
    best = min(range(2), key=lambda i: (alone[i].iteration_time, i))
    assert both.iteration_time == min(r.iteration_time for r in alone)
    assert both.plan == alone[best].plan
    assert both.evaluations == sum(r.evaluations for r in alone)
    assert both.settings["searches"] == 2 and both.settings["best_search"] == best
    assert both.settings["search_seeds"] == search_seeds(3, 2)
    assert both.settings["search_times"] == [r.iteration_time for r in alone]
    assert both.settings["search_evaluations"] == [r.evaluations for r in alone]
    assert both.seed == 3 and both.plan.meta["seed"] == 3
    assert (again.plan, again.iteration_time, again.evaluations) == (
        both.plan, both.iteration_time, both.evaluations)
    assert both.history[-1].evaluations == both.evaluations
    assert both.history[-1].best == both.iteration_time


def test_auto_runs_one_search_per_usable_core_and_a_fixed_budget_one(monkeypatch):
    from umpipe_bench.planners.search.base import Budget

    planner = tidgap.TiDGAP()
    settle = tidgap.settle_budget(SMALL)
    monkeypatch.setattr(tidgap, "usable_cores", lambda: 1)
    assert planner.searches(settle) == 1
    monkeypatch.setattr(tidgap, "usable_cores", lambda: 16)
    assert planner.searches(settle) == tidgap.AUTO_SEARCHES == 2
    assert planner.searches(Budget.parse("evals:3000")) == 1
    assert tidgap.TiDGAP(searches=3).searches(settle) == 3
    with pytest.raises(PlannerError, match=r"^tidgap setting 'searches': searches side by "
                       r"side run under the default budget only \(no --budget\); got 2 with "
                       r"the budget evals:3000$"):
        tidgap.TiDGAP(searches=2).plan(SMALL, budget="evals:3000")


def test_the_cap_note_names_the_searches(monkeypatch):
    monkeypatch.setattr(tidgap, "SETTLE", replace(QUICK, round_floor=10**9, seconds=2.0))
    cut = tidgap.TiDGAP(searches=2).plan(SMALL, mode="stash", seed=1)
    assert cut.stopped is not None
    assert cut.stopped.startswith("the default budget's 2 s cap ended the search after ")
    assert ("evaluations (2 searches side by side, 0+0 whole rounds), before its stop rule "
            "held in 2 of them; the plan is the best found so far") in cut.stopped
    assert f"after {cut.evaluations:,} evaluations" in cut.stopped


@pytest.fixture
def python_sigint():
    """SIGINT raises KeyboardInterrupt while the test runs (an earlier test of the session may
    have left the operating system's default there, which kills the process)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_signal_stops_every_search_and_leaves_no_thread(monkeypatch, python_sigint):
    monkeypatch.setattr(tidgap, "SETTLE", replace(QUICK, round_floor=10**9, seconds=60.0))
    tidgap.TiDGAP(searches=1).plan(SMALL, mode="stash", seed=1, budget="evals:3000")  # compile
    before = threading.active_count()
    timer = threading.Timer(1.5, signal.raise_signal, args=(signal.SIGINT,))
    t0 = time.perf_counter()
    timer.start()
    res = tidgap.TiDGAP(searches=2).plan(SMALL, mode="stash", seed=1, partial=True)
    took = time.perf_counter() - t0
    timer.join()
    assert isinstance(res.interrupted, KeyboardInterrupt)
    assert res.plan.meta["interrupted"] == "SIGINT"
    assert res.stopped is not None and res.stopped.endswith(
        "during the search; the plan is the best found so far")
    assert res.evaluations > 0 and took < 30
    assert threading.active_count() == before
    assert not [t for t in threading.enumerate() if t.name.startswith("umpipe search")]
    with pytest.raises(KeyboardInterrupt):  # without partial the signal is raised, as before
        timer = threading.Timer(1.5, signal.raise_signal, args=(signal.SIGINT,))
        timer.start()
        try:
            tidgap.TiDGAP(searches=2).plan(SMALL, mode="stash", seed=1)
        finally:
            timer.join()


def test_a_merged_history_keeps_the_first_last_improving_and_one_per_window():
    import numpy as np

    from umpipe_bench.planners.search.history import THIN_SECONDS, thinned

    t = np.array([0.0, 0.01, 0.02, 0.03, THIN_SECONDS + 0.001, THIN_SECONDS + 0.002, 0.2])
    best = np.array([5.0, 5.0, 4.0, 4.0, 4.0, 4.0, 4.0])
    h = thinned(np.arange(7), np.arange(7) * 10, t, best)
    # kept: the first, an improvement (2), a new window (4), the last (6)
    assert [r.evaluations for r in h] == [0, 20, 40, 60]
    assert [r.best for r in h] == [5.0, 4.0, 4.0, 4.0]
    assert len(thinned(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0))) == 0
