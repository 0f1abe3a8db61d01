"""Stage descent (planners/algorithms/descent.py): coordinate descent over per-stage equal splits and
caps, TiDGAP's extra seed. What holds by construction: on one stage a sweep is an exhaustive
scan of the equal splits; the result is never worse than its start and its T is the
objective's T of the returned genome; the allowance bounds the evaluations; a budget whose
share does not pay for one sweep runs the search exactly as without the descent."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from umpipe_bench.planners.algorithms.descent import (
    DENSE_COUNTS,
    DESCENT_SHARE,
    add_descent_seed,
    descent_allowance,
    descent_counts,
    stage_descent,
    sweep_cost,
)
from umpipe_bench.planners.algorithms.tidgap import TiDGAP
from umpipe_bench.planners.evaluation.encoding import edp_bits
from umpipe_bench.planners.evaluation.objective import CutBitsObjective, FamilyObjective, Genomes
from umpipe_bench.planners.search.base import Budget
from umpipe_bench.planners.search.loop import SearchLoop, Termination
from umpipe_bench.synthetic import synthetic_problem


class Counted:
    """An objective's evaluate that counts what it was asked."""

    def __init__(self, objective):
        self.objective, self.n = objective, 0

    def __call__(self, g: Genomes) -> np.ndarray:
        self.n += len(g)
        return self.objective.evaluate(g)


@pytest.mark.parametrize("B", [1, 2, 16, 64, 65, 256, 1024])
def test_counts_are_every_count_to_64_then_a_grid_to_B(B):
    c = descent_counts(B)
    assert c == sorted(set(c)) and c[0] == 1 and c[-1] == B
    assert c[:min(B, DENSE_COUNTS)] == list(range(1, min(B, DENSE_COUNTS) + 1))
    assert all(b <= 1.25 * a + 1 for a, b in pairwise(c))


@pytest.mark.parametrize("B", [8, 16, 40])
def test_one_stage_is_an_exhaustive_scan_of_equal_splits(B):
    # S = 1, no caps: the first sweep tries every count 1..B on the only stage, so the
    # descent ends at the best EDP(M) whatever it starts from
    problem = synthetic_problem(1, B, 3)
    obj = CutBitsObjective(problem, "stash", "numba")
    scan = obj.evaluate(Genomes(*(2 * [np.stack([edp_bits(1, B, M) for M in range(1, B + 1)])])))
    start = edp_bits(1, B, 1)
    t0 = float(obj.evaluate(Genomes(start[None], start[None]))[0])
    d = stage_descent(obj.evaluate, start, start, None, t0, "stash")
    assert d.time == pytest.approx(float(scan.min()), rel=0, abs=0)
    assert np.array_equal(d.fbits, edp_bits(1, B, int(np.argmin(scan)) + 1))


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_never_worse_and_its_time_is_its_genomes(mode):
    problem = synthetic_problem(6, 48, 1)
    obj = FamilyObjective(problem, mode)
    f = edp_bits(6, 48, 4)
    caps = np.full(6, 48, np.int64)
    t0 = float(obj.evaluate(Genomes(f[None], f[None], caps[None]))[0])
    count = Counted(obj)
    d = stage_descent(count, f, f, caps, t0, mode)
    assert d.time < t0  # EDP(4) is far from the best plan here
    assert count.n == d.evaluations and d.sweeps >= 1
    again = obj.evaluate(Genomes(d.fbits[None], d.bbits[None], d.caps[None]))[0]
    assert again == d.time
    if mode == "stash":
        assert np.array_equal(d.fbits, d.bbits)


def test_the_allowance_bounds_the_evaluations():
    problem = synthetic_problem(6, 48, 1)
    obj = FamilyObjective(problem, "recompute")
    f = edp_bits(6, 48, 4)
    caps = np.full(6, 48, np.int64)
    t0 = float(obj.evaluate(Genomes(f[None], f[None], caps[None]))[0])
    full = stage_descent(obj.evaluate, f, f, caps, t0, "recompute")
    for allowance in (0, 47, 48, 200, full.evaluations - 1):
        count = Counted(obj)
        d = stage_descent(count, f, f, caps, t0, "recompute", allowance)
        assert count.n == d.evaluations <= allowance
        assert full.time <= d.time <= t0


def test_allowance_rule():
    p = synthetic_problem(4, 16, 0)
    one = sweep_cost(4, 16, "stash", True)
    on = {"descent": True, "schedule": "capped"}
    assert descent_allowance(p, "stash", {"descent": False}, 10**9) == 0
    assert descent_allowance(p, "stash", on, None) is None
    need = int(np.ceil(one / DESCENT_SHARE))
    assert descent_allowance(p, "stash", on, need) == one
    assert descent_allowance(p, "stash", on, need - 20) == 0
    assert sweep_cost(4, 16, "recompute", False) == 4 * 2 * 16


def test_descent_seed_goes_first_only_when_faster():
    problem = synthetic_problem(5, 32, 2)
    obj = FamilyObjective(problem, "stash")
    from umpipe_bench.planners.search.seeding import add_family_seeds, seed_plans

    seeds = seed_plans(problem, "stash", lambda f, b: obj.evaluate(Genomes(f, b)))
    seeds = add_family_seeds(problem, "stash", seeds, obj.evaluate)
    out = add_descent_seed(seeds, obj.evaluate, "stash", None)
    assert out.labels[0] == "descent" and out.labels[1:] == seeds.labels
    assert out.times[0] < seeds.times.min() and out.evaluations > seeds.evaluations
    # from its own end point it finds nothing better: no new seed, the cost still counted
    again = add_descent_seed(out, obj.evaluate, "stash", 0)
    assert again.labels == out.labels and again.evaluations == out.evaluations


def _run(planner: TiDGAP, problem, mode: str, budget: str):
    s = dict(planner.config)
    b = Budget.parse(budget)
    objective = planner.make_objective(problem, mode, s)
    algo = planner.make_algorithm(problem, mode, s, b, 0, objective)
    loop = SearchLoop(objective, Termination(b))
    loop.run(algo)
    return algo, loop


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_tidgap_seeds_from_the_descent_within_its_budget(mode):
    problem = synthetic_problem(8, 64, 0)
    algo, loop = _run(TiDGAP(islands=1, restarts=1), problem, mode, "evals:60000")
    assert algo.seeds.labels[0] == "descent"
    assert algo.seeds.evaluations <= 60000 * DESCENT_SHARE + problem.B + 10
    assert loop.evaluations <= 60000
    assert loop.history.rows[0].best == algo.seeds.times[0]


def test_a_budget_too_small_for_a_sweep_runs_as_without_descent():
    problem = synthetic_problem(8, 64, 0)
    budget = "evals:5000"  # 10 % is below one sweep (8 stages x (64 + 11))
    assert 5000 * DESCENT_SHARE < sweep_cost(8, 64, "stash", True)
    a = TiDGAP(islands=1, restarts=1).plan(problem, mode="stash", seed=4, budget=budget)
    b = TiDGAP(islands=1, restarts=1, descent=False).plan(problem, mode="stash", seed=4,
                                                          budget=budget)
    assert a.iteration_time == b.iteration_time and a.plan == b.plan
