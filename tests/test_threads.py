"""The ``threads`` setting: the family evaluator's row split and TiDGAP's ``auto`` rule."""

from __future__ import annotations

import numpy as np
import pytest

from umpipe_bench.planners.algorithms.tidgap import TiDGAP
from umpipe_bench.planners.evaluation.encoding import random_bits
from umpipe_bench.planners.evaluation.evaluator import run_row_blocks
from umpipe_bench.planners.evaluation.family import FamilyEvaluator
from umpipe_bench.planners.search.base import PlannerError
from umpipe_bench.planners.search.caps import random_caps
from umpipe_bench.planners.search.threads import (
    AUTO_WORK,
    FAMILY_AUTO_WORK,
    apply_threads,
    parse_threads,
)
from umpipe_bench.synthetic import synthetic_problem

PROBLEM = synthetic_problem(4, 12, 3)


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_family_threads_split_rows_bit_identically(mode):
    """Any split of the rows over threads gives the single-thread T and peaks bit for bit."""
    rng = np.random.default_rng(5)
    n = 37
    fb = random_bits(rng, n, PROBLEM.S, PROBLEM.B)
    bb = random_bits(rng, n, PROBLEM.S, PROBLEM.B)
    caps = random_caps(rng, n, PROBLEM.S, PROBLEM.B)
    T1, p1 = FamilyEvaluator(PROBLEM, mode).evaluate(fb, bb, caps)
    for threads in (2, 3):
        ev = FamilyEvaluator(PROBLEM, mode, threads=threads)
        ev.MIN_ROWS_PER_THREAD = 1
        T, p = ev.evaluate(fb, bb, caps)
        assert np.array_equal(T, T1) and np.array_equal(p, p1)


def test_row_blocks_cover_every_row_once():
    seen = np.zeros(50, dtype=int)

    def run(a: int, b: int) -> None:
        seen[a:b] += 1

    for threads, min_rows in ((1, 1), (2, 1), (3, 7), (4, 100)):
        seen[:] = 0
        run_row_blocks(50, run, threads, min_rows)
        assert (seen == 1).all()


def test_family_evaluator_refuses_zero_threads():
    with pytest.raises(ValueError, match="threads must be >= 1"):
        FamilyEvaluator(PROBLEM, "stash", threads=0)


def test_parse_threads():
    assert parse_threads("t", "auto") == "auto"
    assert parse_threads("t", " AUTO ") == "auto"
    assert parse_threads("t", "2") == 2 and parse_threads("t", 3) == 3
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(PlannerError, match="threads must be 'auto' or an integer >= 1"):
            parse_threads("t", bad)


class _Ev:
    threads = 1
    MIN_ROWS_PER_THREAD = 32


def test_auto_splits_a_call_exactly_from_the_work_threshold(monkeypatch):
    """``auto``: 2 threads for a call of N rows exactly when N*S*B >= AUTO_WORK."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)))
    S, B = 16, 32
    ev = _Ev()
    apply_threads(ev, "auto", S, B)
    assert ev.threads == 2
    blocks: list[tuple[int, int]] = []
    n_big = -(-AUTO_WORK // (S * B)) + 1
    for n in (n_big - 3, n_big + 1):
        blocks.clear()
        run_row_blocks(n, lambda a, b: blocks.append((a, b)), ev.threads,
                       ev.MIN_ROWS_PER_THREAD)
        assert len(blocks) == (2 if n * S * B >= AUTO_WORK else 1)
    apply_threads(ev, 3, S, B)
    assert ev.threads == 3


@pytest.mark.parametrize("schedule, work", [("capped", FAMILY_AUTO_WORK), ("gpipe", AUTO_WORK)])
def test_tidgap_auto_splits_each_evaluator_from_its_own_threshold(monkeypatch, schedule, work):
    """TiDGAP's objective: the schedule family's evaluator splits a call from
    FAMILY_AUTO_WORK on (its plans cost more each), the GPipe evaluator from AUTO_WORK."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    p = synthetic_problem(8, 64, 0)
    planner = TiDGAP(schedule=schedule, backend="numba")
    settings = planner.check_settings(dict(planner.config))
    ev = planner.make_objective(p, "stash", settings).evaluator
    assert ev.threads == 2
    split = [n for n in range(1, 400)
             if min(ev.threads, n // ev.MIN_ROWS_PER_THREAD) > 1]
    assert split[0] == -(-work // (p.S * p.B))


def test_auto_uses_one_thread_on_one_core(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    ev = _Ev()
    apply_threads(ev, "auto", 64, 1024)
    assert ev.threads == 1


def test_auto_counts_the_cores_the_process_may_use_not_the_machines(monkeypatch):
    """Under ``taskset -c 0`` on a machine of 8 cores every ``auto`` thread count is 1: the
    evaluators' and the EDP reference scans'."""
    from umpipe_bench.planners.evaluation import reference

    monkeypatch.setattr("os.cpu_count", lambda: 8)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    ev = _Ev()
    apply_threads(ev, "auto", 64, 1024)
    assert ev.threads == 1 and reference._threads() == 1
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 3, 5})
    apply_threads(ev, "auto", 64, 1024)
    assert ev.threads == 2 and reference._threads() == 2


def test_tidgap_threads_setting_checked_at_construction_and_results_do_not_depend_on_it():
    with pytest.raises(PlannerError, match="threads"):
        TiDGAP(threads="many")
    assert TiDGAP().config["threads"] == "auto"
    runs = []
    for threads in (1, 2, "auto"):
        planner = TiDGAP(threads=threads, population=64)
        res = planner.plan(PROBLEM, mode="recompute", budget="gens:4", seed=1)
        runs.append((res.iteration_time, res.evaluations, res.plan))
    assert runs[0] == runs[1] == runs[2]
