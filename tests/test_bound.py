"""The lower bound on T (docs/SIMNETS.md, "The bound"): below every optimum, every planner's
result and every schedule of the family; reached where it is known to be."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umpipe_bench.bound import (
    gap_to_bound,
    lower_bound,
    min_composition_cost,
    named_lower_bound,
    stage_bound,
)
from umpipe_bench.plan import Plan, bits_to_sizes
from umpipe_bench.planners.evaluation.reference import best_edp, edp_times
from umpipe_bench.planners.search.base import PlannerError
from umpipe_bench.problem import Link
from umpipe_bench.registry import get_planner, planner_names
from umpipe_bench.schedules import gpipe
from umpipe_bench.simnets import FAMILIES, family_problem
from umpipe_bench.simulator import SimulationError, gpipe_recurrence, simulate
from umpipe_bench.synthetic import synthetic_problem

from .conftest import make_problem, random_stage_order

pytestmark = pytest.mark.slow  # the fast tier (-m "not slow") leaves this module out

MODES = ("stash", "recompute")
REL = 1e-12  # float rounding of sums taken in another order

TINY = {
    "sim-s2-b8-s0": lambda: synthetic_problem(2, 8, 0),
    "sim-s3-b6-s1": lambda: synthetic_problem(3, 6, 1),
    **{f"{f}-s2-b7": (lambda f=f: family_problem(f, 2, 7, 1.0, 2)) for f in FAMILIES},
    "mix-dc-s3-b5": lambda: family_problem("mix", 3, 5, 0.7, 4, decorrelated=True),
}


def test_min_composition_cost_by_brute_force():
    rng = np.random.default_rng(0)
    cost = np.concatenate([np.zeros((3, 1)), rng.uniform(0.1, 2.0, (3, 7))], axis=1)
    B = 7
    comps = [bits_to_sizes([(c >> i) & 1 for i in range(B - 1)]) for c in range(2 ** (B - 1))]
    want = [min(sum(cost[s, p] for p in comp) for comp in comps) for s in range(3)]
    np.testing.assert_allclose(min_composition_cost(cost), want, rtol=REL)


@pytest.mark.parametrize("name", sorted(TINY))
@pytest.mark.parametrize("mode", MODES)
def test_never_above_the_exact_optimum(name, mode):
    p = TINY[name]()
    opt = get_planner("exact").plan(p, mode=mode).iteration_time
    assert lower_bound(p, mode) <= opt * (1 + REL)


@pytest.mark.parametrize("name", sorted(TINY))
@pytest.mark.parametrize("mode", MODES)
def test_never_above_any_edp_plan_under_gpipe_or_1f1b(name, mode):
    p = TINY[name]()
    lb = lower_bound(p, mode)
    for schedule in ("gpipe", "1f1b"):
        assert lb <= edp_times(p, mode, schedule).min() * (1 + REL)


def _identical_linear(S: int, B: int, f: float, b: float, opt: float):
    m = np.arange(1, B + 1)
    return make_problem(fwd=[f * m] * S, bwd=[b * m] * S, opt=[opt] * S,
                        links=[Link(0.0, 0.0, 0.0, 1.0)] * (S - 1))


@pytest.mark.parametrize("S,B,opt", [(1, 5, 0.0), (4, 9, 0.0), (6, 16, 0.3)])
@pytest.mark.parametrize("mode", MODES)
def test_tight_on_identical_linear_stages(S, B, opt, mode):
    """Known by construction: EDP(B) gives (B+S-1)(f+b) + opt (docs/MODEL.md §4), and so does the
    bound at the last stage: (S-1) f to arrive, B (f+b) of work, (S-1) b down, then opt."""
    f, b = 1.0, 2.0
    p = _identical_linear(S, B, f, b, opt)
    back = b if mode == "stash" else f + b
    want = (B + S - 1) * (f + back) + opt
    assert gpipe_recurrence(p, Plan.edp(S, B, B, mode)) == pytest.approx(want, rel=REL)
    assert lower_bound(p, mode) == pytest.approx(want, rel=REL)
    assert best_edp(p, mode, "gpipe")[1] == pytest.approx(want, rel=REL)


def test_parts_of_the_bound():
    p = _identical_linear(3, 4, 1.0, 2.0, 0.5)
    bd = stage_bound(p, "stash")
    assert bd.head == (0.0, 1.0, 2.0)
    assert bd.work == (12.0, 12.0, 12.0)
    assert bd.tail == (0.5, 2.5, 4.5)
    assert bd.critical == "stage 2" and bd.value == 18.5


def test_gap_and_named_bound():
    p = synthetic_problem(4, 16, 0)
    lb = lower_bound(p, "stash")
    assert gap_to_bound(p, "stash", 2 * lb) == pytest.approx(1.0)
    assert named_lower_bound("sim-s4-b16-s0", "stash") == lb
    assert named_lower_bound("no-such-problem", "stash") is None


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode must be one of"):
        lower_bound(synthetic_problem(2, 3, 0), "keep")


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), mode=st.sampled_from(MODES),
       family=st.sampled_from(FAMILIES), h=st.sampled_from((0.0, 0.5, 1.0)))
def test_never_above_random_plans_in_random_schedules(seed, mode, family, h):
    """Any plan, any op order of the family that does not deadlock: T >= the bound."""
    rng = np.random.default_rng(seed)
    S, B = int(rng.integers(1, 5)), int(rng.integers(1, 10))
    p = family_problem(family, S, B, h, seed % 7)
    fb = rng.integers(0, 2, (S, B - 1))
    bb = fb if mode == "stash" else rng.integers(0, 2, (S, B - 1))
    plan = Plan.from_bits(fb, bb, mode)
    lb = lower_bound(p, mode)
    assert lb <= gpipe_recurrence(p, plan) * (1 + REL)
    ops = [random_stage_order(row, rng) for row in gpipe(plan)]
    try:
        T = simulate(p, plan, "custom", ops=ops).iteration_time
    except SimulationError as exc:  # an input error: only a deadlock may end the case here
        assert "deadlocks" in str(exc)
        return  # this order deadlocks: not a schedule
    assert lb <= T * (1 + REL)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), mode=st.sampled_from(MODES),
       family=st.sampled_from(FAMILIES))
def test_never_above_the_capped_family(seed, mode, family):
    """Any plan under any in-flight caps (docs/SCHEDULES.md's family rule): T >= the bound."""
    rng = np.random.default_rng(seed)
    S, B = int(rng.integers(1, 6)), int(rng.integers(1, 12))
    p = family_problem(family, S, B, 1.0, seed % 5)
    fb = rng.integers(0, 2, (S, B - 1))
    bb = fb if mode == "stash" else rng.integers(0, 2, (S, B - 1))
    caps = tuple(int(k) for k in rng.integers(1, B + 1, S))
    plan = Plan.from_bits(fb, bb, mode).with_caps(caps)
    assert lower_bound(p, mode) <= simulate(p, plan, "capped").iteration_time * (1 + REL)


# ------------------------------------------------------------ the contract over every planner
CONTRACT_PROBLEMS = {
    "sim-s2-b5": lambda: synthetic_problem(2, 5, 0),
    "sim-s4-b16-s0": lambda: synthetic_problem(4, 16, 0),
    "sim-mix-s4-b12-h1-s0": lambda: family_problem("mix", 4, 12, 1.0, 0),
}
BUDGET = "evals:400"
BUDGET_OVERRIDES = {"optuna-tpe": "evals:20"}


@pytest.mark.parametrize("planner", planner_names())
@pytest.mark.parametrize("problem_name", sorted(CONTRACT_PROBLEMS))
@pytest.mark.parametrize("mode", MODES)
def test_never_above_any_planners_result(planner, problem_name, mode):
    p = CONTRACT_PROBLEMS[problem_name]()
    try:
        res = get_planner(planner).plan(p, mode=mode, budget=BUDGET_OVERRIDES.get(planner, BUDGET),
                                        seed=0)
    except PlannerError as exc:
        if "refuses" in str(exc):
            pytest.skip(f"{planner} refuses {problem_name}: {exc}")
        raise
    assert lower_bound(p, mode) <= res.iteration_time * (1 + REL)
