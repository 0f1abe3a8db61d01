"""Planners over the schedule family (docs/SCHEDULES.md): never worse than the best GPipe-EDP
and the best 1F1B-EDP plan that fit, plans that fit a memory cap, T re-simulated."""

from __future__ import annotations

import pytest

from umpipe_bench.memory import MemoryCapError
from umpipe_bench.plan import Plan
from umpipe_bench.planners.evaluation.reference import best_edp, edp_scan
from umpipe_bench.registry import get_planner, get_problem
from umpipe_bench.simulator import simulate

# sim-s4-b16-s0 is the problem where 1F1B-EDP beat every GPipe-only plan by 11-16 %.
CASES = [("sim-s4-b16-s0", "stash"), ("sim-s4-b16-s0", "recompute"), ("sim-s3-b6-s0", "stash")]


@pytest.mark.parametrize("planner", ["tidgap", "dgap"])
@pytest.mark.parametrize("name,mode", CASES)
def test_family_planners_never_lose_to_either_equal_baseline(planner, name, mode):
    prob = get_problem(name)
    T_edp = min(best_edp(prob, mode, "gpipe")[1], best_edp(prob, mode, "1f1b")[1])
    for seed in (0, 1):
        res = get_planner(planner).plan(prob, mode=mode, budget="evals:1500", seed=seed)
        assert res.iteration_time <= T_edp * (1 + 1e-12), (seed, res.iteration_time, T_edp)
        tl = simulate(prob, res.plan, res.schedule)
        assert tl.iteration_time == pytest.approx(res.iteration_time, rel=1e-12)
        assert res.schedule == ("capped" if res.plan.caps is not None else res.schedule)


def test_family_beats_the_gpipe_only_search_where_1f1b_wins():
    prob = get_problem("sim-s4-b16-s0")
    fam = get_planner("tidgap").plan(prob, mode="stash", budget="evals:20000", seed=0)
    gp = get_planner("tidgap", schedule="gpipe").plan(prob, mode="stash",
                                                      budget="evals:20000", seed=0)
    assert fam.iteration_time < best_edp(prob, "stash", "1f1b")[1] < gp.iteration_time
    assert fam.plan.caps is not None and gp.plan.caps is None


def test_a_1f1b_edp_whose_m_does_not_divide_b_is_returned_when_nothing_beats_it():
    """The family reproduces torch's 1F1B exactly only when M divides B; with a budget too
    small to search, the answer is the better equal plan under its own schedule."""
    prob = get_problem("sim-s4-b16-s0")
    res = get_planner("tidgap", population=8, edp_seeds=1, greedy_seeds=False,
                      cap_rate=0.0).plan(prob, mode="stash", budget="gens:1", seed=0)
    T1 = best_edp(prob, "stash", "1f1b")[1]
    assert res.iteration_time <= T1 * (1 + 1e-12)


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_memory_capped_plans_fit(mode):
    prob = get_problem("sim-s8-b64-s0")
    scan = edp_scan(prob, "stash", "gpipe")
    cap = float(scan.peaks[int(scan.times.argmin())].max()) / 2
    capped = prob.with_memory_cap(cap)
    if mode == "stash":  # GPipe keeps every sample's activations: nothing fits half
        with pytest.raises(MemoryCapError):
            best_edp(capped, mode, "gpipe")
    res = get_planner("tidgap").plan(capped, mode=mode, budget="evals:4000", seed=0)
    tl = simulate(capped, res.plan, res.schedule)
    assert tl.fits_memory is True and max(tl.peak_memory) <= cap
    assert res.iteration_time <= best_edp(capped, mode, "1f1b")[1] * (1 + 1e-12)


def test_nothing_fits_names_stage_bytes_and_cap():
    prob = get_problem("sim-s4-b16-s0").with_memory_cap(1e6)
    with pytest.raises(MemoryCapError, match=r"stage \d+.*cap"):
        get_planner("tidgap").plan(prob, mode="stash", budget="evals:2000", seed=0)


def test_decoded_caps_at_or_above_b_mean_no_cap():
    prob = get_problem("sim-s3-b6-s0")
    res = get_planner("exact").plan(prob, mode="stash")
    assert res.plan.caps is None or min(res.plan.caps) < prob.B
    assert isinstance(res.plan, Plan)
