"""The coarse start (umpipe_bench/planners/search/coarse.py). Known by construction: a plan of
the problem with its samples merged in pairs, every microbatch and cap doubled, is a plan of
the problem with the same T and the same peak memory; a search started from it is never
slower than it; ``coarse=auto`` starts every search but the first coarse on problems of at
least 32 samples, under the default budget only."""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from umpipe_bench.codec import plan_to_bits
from umpipe_bench.errors import TimeUp
from umpipe_bench.plan import Plan
from umpipe_bench.planners.algorithms import _tidgap_engine, tidgap
from umpipe_bench.planners.algorithms._tidgap_settings import Settle
from umpipe_bench.planners.evaluation.clock import RunClock
from umpipe_bench.planners.evaluation.objective import FamilyObjective, Genomes
from umpipe_bench.planners.search import coarse
from umpipe_bench.planners.search.base import Budget
from umpipe_bench.simulator import simulate
from umpipe_bench.synthetic import synthetic_problem

QUICK = Settle(round_floor=2000, round_per_bit=1, min_rounds=2, max_rounds=6, patience=1,
               double_every=0)


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_a_halved_plan_doubled_has_the_same_time_and_peak(mode):
    p = synthetic_problem(4, 24, 5)
    half = coarse.halve_problem(p)
    assert (half.S, half.B) == (4, 12)
    small, full = FamilyObjective(half, mode), FamilyObjective(p, mode)
    rng = np.random.default_rng(1)
    for _ in range(20):
        f = rng.integers(0, 2, (1, 4, 11), dtype=np.uint8)
        b = f.copy() if mode == "stash" else rng.integers(0, 2, (1, 4, 11), dtype=np.uint8)
        k = rng.integers(1, 13, (1, 4))
        plan = small.decode(Genomes(f, b, k))
        big = coarse.double_plan(plan, 24)
        assert big.B == 24 and big.caps == tuple(2 * c for c in plan.caps)
        t = float(small.evaluate(Genomes(f, b, k))[0])
        a, c = simulate(half, plan, "capped"), simulate(p, big, "capped")
        fb, bb = plan_to_bits(big)
        kernel = float(full.evaluate(Genomes(fb[None], bb[None], np.array([big.caps])))[0])
        assert a.iteration_time == t == c.iteration_time == kernel
        assert np.allclose(a.peak_memory, c.peak_memory, rtol=1e-12)


def test_an_odd_batch_gives_the_extra_sample_to_every_last_microbatch():
    plan = Plan(fwd=((3, 2), (5,)), bwd=((1, 4), (5,)), mode="recompute", caps=(5, 2))
    big = coarse.double_plan(plan, 11)
    assert big.fwd == ((6, 5), (11,)) and big.bwd == ((2, 9), (11,))
    assert big.caps == (11, 5)
    assert coarse.halve_problem(synthetic_problem(2, 11, 1)).B == 5


def test_auto_starts_every_search_but_the_first_coarse_on_large_batches():
    settle = tidgap.settle_budget(synthetic_problem(2, 32, 1))
    big, small = synthetic_problem(2, 32, 1), synthetic_problem(2, 31, 1)
    auto = tidgap.TiDGAP()
    assert [auto.coarse(big, settle, i) for i in range(3)] == [False, True, True]
    assert not auto.coarse(small, settle, 1)
    assert not auto.coarse(big, Budget.parse("evals:5000"), 1)
    assert tidgap.TiDGAP(coarse=True).coarse(small, settle, 0)
    assert not tidgap.TiDGAP(coarse=False).coarse(big, settle, 1)


def test_a_coarse_start_is_a_seed_plan_and_never_slower_than_it(monkeypatch):
    monkeypatch.setattr(tidgap, "SETTLE", QUICK)
    seen = []
    add = _tidgap_engine.add_start_seed

    def spy(*args, **kw):
        out = add(*args, **kw)
        seen.append(out)
        return out

    monkeypatch.setattr(_tidgap_engine, "add_start_seed", spy)
    p = synthetic_problem(3, 16, 4)
    for mode in ("stash", "recompute"):
        seen.clear()
        res = tidgap.TiDGAP(searches=1, coarse=True).plan(p, mode=mode, seed=2)
        s = res.settings
        assert s["coarse"] is True and s["searches"] == 1
        assert len(seen) == 1 and "coarse" in seen[0].labels  # the first round's seeds
        at = seen[0].labels.index("coarse")
        assert seen[0].times[at] == s["coarse_time"]  # B even: the same T, to the bit
        assert res.iteration_time <= s["coarse_time"]
        assert 0 < s["coarse_evaluations"] < res.evaluations == res.history[-1].evaluations
        gens = [r.generation for r in res.history]
        assert gens == sorted(gens)
        ev = [r.evaluations for r in res.history]
        best = [r.best for r in res.history]
        assert ev == sorted(ev) and best == sorted(best, reverse=True)
        assert best[-1] == res.iteration_time
        again = tidgap.TiDGAP(searches=1, coarse=True).plan(p, mode=mode, seed=2)
        assert (again.plan, again.evaluations) == (res.plan, res.evaluations)


def test_a_phase_deadline_ends_the_phase_not_the_run_and_keeps_a_signal():
    clock = RunClock(60.0)
    clock.tick(10)
    with clock.until(0.05):
        time.sleep(0.06)
        with pytest.raises(TimeUp):
            clock.check()
    assert clock.stopped is None and clock.end == clock.start + 60.0
    clock.check()  # the run goes on
    clock.tick(5)
    assert clock.evaluations == 15  # the next phase counts on
    with clock.until(0.01):
        time.sleep(0.02)
        with pytest.raises(TimeUp):
            clock.check()
        clock.stop("interrupted")  # a signal after the phase's deadline
    assert clock.stopped == "interrupted"


@pytest.fixture
def python_sigint():
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_signal_in_the_coarse_search_returns_its_plan_doubled(monkeypatch, python_sigint):
    monkeypatch.setattr(tidgap, "SETTLE", replace(QUICK, round_floor=10**9, seconds=60.0))
    p = synthetic_problem(3, 32, 2)
    tidgap.TiDGAP(searches=1).plan(p, mode="stash", seed=1, budget="evals:3000")  # compile
    timer = threading.Timer(1.5, signal.raise_signal, args=(signal.SIGINT,))
    t0 = time.perf_counter()
    timer.start()
    res = tidgap.TiDGAP(searches=1, coarse=True).plan(p, mode="stash", seed=1, partial=True)
    took = time.perf_counter() - t0
    timer.join()
    assert isinstance(res.interrupted, KeyboardInterrupt) and took < 14  # inside the coarse
    assert res.plan.B == 32 and res.plan.meta["interrupted"] == "SIGINT"
    tl = simulate(p, res.plan, res.schedule)
    assert tl.iteration_time == res.iteration_time


def test_the_setting_given_reaches_every_search_side_by_side(monkeypatch):
    monkeypatch.setattr(tidgap, "SETTLE", QUICK)
    p = synthetic_problem(3, 32, 4)
    for given, each in ((False, [False, False]), (True, [True, True]), ("auto", [False, True])):
        res = tidgap.TiDGAP(searches=2, coarse=given).plan(p, mode="stash", seed=1)
        assert res.settings["search_coarse"] == each
        times = res.settings["search_coarse_times"]
        assert [t is not None for t in times] == each


def test_a_memory_cap_no_halved_plan_fits_leaves_the_search_alone(monkeypatch):
    """Under a cap that only one-sample microbatches meet, no plan of the halved problem fits
    (its smallest microbatch is two samples): the search runs without a coarse plan."""
    monkeypatch.setattr(tidgap, "SETTLE", QUICK)
    p = synthetic_problem(2, 32, 1)
    one = Plan(fwd=((1,) * 32,) * 2, bwd=((1,) * 32,) * 2, mode="stash", caps=(1, 1))
    capped = p.with_memory_cap(float(max(simulate(p, one, "capped").peak_memory)) * 1.000001)
    res = tidgap.TiDGAP(searches=1, coarse=True).plan(capped, mode="stash", seed=0)
    assert res.settings["coarse"] is True and res.settings["coarse_time"] is None
    tl = simulate(capped, res.plan, res.schedule)
    assert tl.fits_memory is not False and tl.iteration_time == res.iteration_time
    assert res.iteration_time <= simulate(capped, one, "capped").iteration_time
