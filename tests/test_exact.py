"""Answers known by construction: exact vs brute force, planners vs exact, greedy definitions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umpipe_bench.baselines.exact import pareto_minimal
from umpipe_bench.plan import Plan, bits_to_sizes
from umpipe_bench.planners.algorithms.greedy import (
    greedy_dp_plan,
    local_greedy_plan,
    local_greedy_sizes,
    pareto_prefix_dp,
)
from umpipe_bench.planners.evaluation.reference import best_edp, edp_times
from umpipe_bench.planners.search.base import PlannerError
from umpipe_bench.registry import get_planner, planner_names
from umpipe_bench.simulator import gpipe_recurrence, simulate
from umpipe_bench.synthetic import synthetic_problem

from .conftest import make_problem

pytestmark = pytest.mark.slow  # the fast tier (-m "not slow") leaves this module out

MODES = ("stash", "recompute")


def brute_force(problem, mode):
    """min T over every plan, through the reference recurrence."""
    comps = [bits_to_sizes(b) for b in itertools.product((0, 1), repeat=problem.B - 1)]
    S = problem.S
    if mode == "stash":
        plans = (Plan(fwd=c, bwd=c, mode=mode) for c in itertools.product(comps, repeat=S))
    else:
        plans = (Plan(fwd=c[:S], bwd=c[S:], mode=mode)
                 for c in itertools.product(comps, repeat=2 * S))
    return min(gpipe_recurrence(problem, p) for p in plans)


TINY = {
    "s2-b4": lambda: synthetic_problem(2, 4, 0),
    "s3-b3": lambda: synthetic_problem(3, 3, 1),
    "s1-b6": lambda: synthetic_problem(1, 6, 2),
    "hand-s2-b4": lambda: make_problem(
        fwd=[[1.0, 1.2, 3.3, 3.5], [0.5, 2.0, 2.1, 2.2]],
        bwd=[[2.0, 2.1, 2.2, 6.0], [1.0, 3.9, 4.0, 4.1]],
        rbwd=[[2.9, 3.0, 5.5, 9.0], [1.5, 5.0, 6.0, 6.3]],
        opt=[0.4, 0.1],
    ),
}


def brute_force_family(problem, mode):
    """min T over every plan and every cap vector (docs/SCHEDULES.md), through simulate()."""
    comps = [bits_to_sizes(b) for b in itertools.product((0, 1), repeat=problem.B - 1)]
    S, B = problem.S, problem.B
    if mode == "stash":
        parts = ((c, c) for c in itertools.product(comps, repeat=S))
    else:
        parts = ((c[:S], c[S:]) for c in itertools.product(comps, repeat=2 * S))
    caps = list(itertools.product(range(1, B + 1), repeat=S))
    return min(simulate(problem, Plan(fwd=f, bwd=b, mode=mode, caps=k)).iteration_time
               for f, b in parts for k in caps)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(TINY))
def test_exact_equals_brute_force(name, mode):
    problem = TINY[name]()
    res = get_planner("exact", schedule="gpipe").plan(problem, mode=mode)
    assert res.iteration_time == brute_force(problem, mode)
    assert res.settings["schedule"] == "gpipe"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["s2-b4", "s1-b6", "hand-s2-b4"])
def test_exact_over_the_family_equals_brute_force(name, mode):
    problem = TINY[name]()
    res = get_planner("exact").plan(problem, mode=mode)
    assert res.settings["schedule"] == "capped"
    assert res.iteration_time == brute_force_family(problem, mode)
    assert res.iteration_time <= brute_force(problem, mode)
    assert res.schedule == ("gpipe" if res.plan.caps is None else "capped")


def test_exact_refuses_the_family_when_told_and_too_large():
    problem = synthetic_problem(3, 6, 0)
    for told in ({"schedule": "capped"}, {"space": "family"}):  # the former name and value too
        with pytest.raises(PlannerError, match="the capped schedule"):
            get_planner("exact", **told).plan(problem, mode="recompute")
    with pytest.raises(PlannerError, match="schedule must be"):
        get_planner("exact", schedule="all")


@pytest.mark.parametrize("mode", MODES)
def test_exact_no_worse_than_any_gpipe_planner(mode):
    """Every planner whose plan runs under gpipe (1f1b's does not: another schedule)."""
    problem = synthetic_problem(2, 5, 3)
    T_exact = get_planner("exact").plan(problem, mode=mode).iteration_time
    for name in planner_names():
        if name == "exact":
            continue  # the reference itself (an evals:400 budget would cap its enumeration)
        budget = "evals:40" if name == "optuna-tpe" else "evals:400"
        res = get_planner(name).plan(problem, mode=mode, budget=budget, seed=0)
        if res.schedule == "gpipe":
            assert T_exact <= res.iteration_time * (1 + 1e-12), name


#: The plan space the GAs search (the optimum they are held to).
GA_SPACE = "auto"  # the family where exact can enumerate it, else the GPipe space


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("planner", ["dgap", "tidgap"])
@pytest.mark.parametrize("S,B,pseed", [(2, 5, 0), (3, 4, 1), (2, 6, 2)])
def test_gas_reach_exact(planner, mode, S, B, pseed):
    """DGAP and TiDGAP near the optimum on tiny problems at evals:3000: over the seeds, the
    median within 0.5 % and every seed within 2 % (results/perf/quality.md's criterion; 10 seeds for TiDGAP,
    3 for DGAP, whose list-simulator fitness is slow). Every seed within 0.5 % held for seeds
    0-2 only by luck: TiDGAP's runs stop at +0.42-0.48 % on some seeds of (3, 4, 1) and
    (2, 6, 2), a local optimum one coordinated change away (100k evaluations reach it)."""
    problem = synthetic_problem(S, B, pseed)
    T_exact = get_planner("exact", schedule=GA_SPACE).plan(problem, mode=mode).iteration_time
    seeds = range(10) if planner == "tidgap" else range(3)
    gaps = [get_planner(planner).plan(problem, mode=mode, budget="evals:3000", seed=seed)
            .iteration_time / T_exact - 1 for seed in seeds]
    assert min(gaps) >= -1e-12  # nothing beats the optimum
    assert sorted(gaps)[(len(gaps) - 1) // 2] <= 0.005, gaps
    assert max(gaps) <= 0.02, gaps


def test_exact_refuses_large_problems_naming_the_limit():
    with pytest.raises(PlannerError, match=r"refuses.*over the limit of 4,194,304"):
        get_planner("exact").plan(synthetic_problem(4, 16, 0), mode="stash")
    with pytest.raises(PlannerError, match="refuses"):
        get_planner("exact", max_evaluations=100).plan(synthetic_problem(2, 5, 0),
                                                       mode="recompute")


def test_pareto_minimal():
    X = np.array([[1, 5], [2, 2], [1, 5], [3, 1], [2, 3], [4, 4]], dtype=float)
    assert sorted(pareto_minimal(X).tolist()) == [0, 1, 3]


# ------------------------------------------------------------------ greedy constructions
def test_local_greedy_by_construction():
    """fwd per-sample cost is lowest at m=3, rbwd at m=4, fwd+bwd at m=2 (B=10)."""
    B = 10
    m = np.arange(1, B + 1, dtype=float)
    fwd = m * (1 + 0.1 * (m - 3) ** 2)
    bwd = m * (1 + 0.1 * (m - 1) ** 2)
    rbwd = m * (1 + 0.1 * (m - 4) ** 2)
    prob = make_problem(fwd=[fwd.tolist()], bwd=[bwd.tolist()], rbwd=[rbwd.tolist()])
    assert local_greedy_sizes(10, 3) == (3, 3, 3, 1)
    assert local_greedy_sizes(10, 5) == (5, 5)
    rec = local_greedy_plan(prob, "recompute")
    assert rec.fwd == ((3, 3, 3, 1),) and rec.bwd == ((4, 4, 2),)
    st_plan = local_greedy_plan(prob, "stash")
    assert st_plan.fwd == st_plan.bwd == ((2, 2, 2, 2, 2),)
    res = get_planner("local-greedy").plan(prob, mode="recompute")
    assert res.plan == rec


@pytest.mark.parametrize("B", [4, 7])
def test_greedy_dp_is_exact_on_one_stage_recompute(B):
    """With S = 1, T = sum fwd + sum rbwd + opt: the two prefix DPs are the optimum."""
    problem = synthetic_problem(1, B, 5)
    res = get_planner("greedy-dp").plan(problem, mode="recompute")
    assert res.iteration_time == pytest.approx(brute_force(problem, "recompute"), rel=1e-12)


def _chain(P, R, cost, link, start):
    V, W, a = start, 0.0, 0
    for p in P:
        a += p
        V = max(V, R[a]) + cost[p]
        if link is not None:
            W = max(W, V) + link[p]
    return W if link is not None else V


@settings(max_examples=80, deadline=None)
@given(B=st.integers(1, 8), seed=st.integers(0, 10_000), with_link=st.booleans())
def test_prefix_dp_is_exact(B, seed, with_link):
    rng = np.random.default_rng(seed)
    R = np.concatenate([[0.0], np.sort(rng.random(B)) * rng.random() * 4])
    cost = np.concatenate([[0.0], rng.random(B)])
    link = np.concatenate([[0.0], rng.random(B)]) if with_link else None
    start = float(rng.random())
    best = min(_chain(bits_to_sizes(b), R, cost, link, start)
               for b in itertools.product((0, 1), repeat=B - 1))
    P = pareto_prefix_dp(R, cost, link, start)
    assert sum(P) == B
    assert _chain(P, R, cost, link, start) == best


def test_greedy_dp_stash_ties_backward():
    plan = greedy_dp_plan(synthetic_problem(4, 16, 0), "stash")
    assert plan.bwd == plan.fwd


# ------------------------------------------------------------------ EDP references
@pytest.mark.parametrize("mode", MODES)
def test_best_edp_matches_scans(mode):
    problem = synthetic_problem(4, 12, 1)
    S, B = problem.S, problem.B
    g = [gpipe_recurrence(problem, Plan.edp(S, B, M, mode)) for M in range(1, B + 1)]
    o = [simulate(problem, Plan.edp(S, B, M, mode), "1f1b").iteration_time
         for M in range(1, B + 1)]
    np.testing.assert_array_equal(edp_times(problem, mode, "gpipe"), g)
    assert best_edp(problem, mode, "gpipe") == (int(np.argmin(g)) + 1, min(g))
    assert best_edp(problem, mode, "1f1b") == (int(np.argmin(o)) + 1, min(o))
    res = get_planner("1f1b").plan(problem, mode=mode)
    assert res.schedule == "1f1b" and res.iteration_time == min(o)
    assert get_planner("gpipe").plan(problem, mode=mode).iteration_time == min(g)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(0, 10**6), st.booleans(), st.booleans())
def test_compiled_prefix_dp_equals_the_reference(B, seed, with_link, coarse):
    """The compiled greedy-dp kernel keeps the same states in the same order (ties included:
    ``coarse`` rounds every figure so that ties are common)."""
    from umpipe_bench.planners.algorithms.greedy import prefix_dp_sizes

    rng = np.random.default_rng(seed)
    r = (lambda x: np.round(x * 4) / 4) if coarse else (lambda x: x)
    cost = r(np.concatenate([[0.0], np.cumsum(rng.random(B) + 0.1)]) ** 0.8)
    link = r(rng.random(B + 1) * 2) if with_link else None
    R = r(np.concatenate([[0.0], np.sort(rng.random(B) * 5)]))
    start = float(r(rng.random()))
    assert prefix_dp_sizes(R, cost, link, start) == pareto_prefix_dp(R, cost, link, start)
