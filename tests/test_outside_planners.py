"""The outside optimizers (umpipe_bench/baselines/outside.py) pass the planner contract suite.

The contract suite parametrizes over the *installed* entry points; these planners are run
through its own test functions here too, so they are checked before a reinstall."""

from __future__ import annotations

import numpy as np
import pytest

from tests import test_planners_contract as contract
from umpipe_bench.baselines import outside
from umpipe_bench.planners.search.base import PlannerError
from umpipe_bench.registry import planner_names, register_planner
from umpipe_bench.synthetic import synthetic_problem

pytestmark = pytest.mark.slow  # the fast tier (-m "not slow") leaves this module out

OUTSIDE = {c.name: c for c in (outside.OptunaCMAES, outside.CMAES, outside.OptunaGA, outside.NevergradNGOpt,
                               outside.NevergradDiscreteOnePlusOne, outside.PymooGA)}
for _name, _cls in OUTSIDE.items():
    if _name not in planner_names():
        register_planner(_name, _cls)

CASES = [(n, p, m) for n in OUTSIDE for p in contract.PROBLEMS for m in ("stash", "recompute")]


@pytest.mark.parametrize("name,problem_name,mode", CASES)
def test_contract(name, problem_name, mode):
    pytest.importorskip(OUTSIDE[name].library)
    contract.test_valid_plan(name, problem_name, mode)
    contract.test_never_worse_than_its_start(name, problem_name, mode)
    contract.test_same_seed_same_result(name, problem_name, mode)


@pytest.mark.parametrize("name", sorted(OUTSIDE))
def test_budget_is_never_exceeded_and_history_is_typed(name):
    pytest.importorskip(OUTSIDE[name].library)
    p = synthetic_problem(3, 6, 0)
    res = OUTSIDE[name]().plan(p, mode="recompute", budget="evals:50", seed=1)
    assert 6 < res.evaluations <= 50
    records = res.history.records()  # the search loop's typed history
    ev = [r["evaluations"] for r in records]
    best = [r["best"] for r in records]
    assert ev == sorted(ev) and ev[-1] == res.evaluations and ev[0] == 6  # the EDP scan
    assert best == sorted(best, reverse=True) and best[-1] == res.iteration_time
    assert set(records[0]) == {"generation", "evaluations", "wall_time", "best"}


def test_settings_are_checked_when_the_planner_is_built():
    with pytest.raises(PlannerError, match="unknown setting"):
        outside.OptunaGA(population=3)
    with pytest.raises(PlannerError, match="schedule must be 'gpipe' or 'capped', got '1f1b'"):
        outside.NevergradNGOpt(schedule="1f1b")
    with pytest.raises(PlannerError, match="binary operators need schedule 'gpipe'"):
        outside.PymooGA(schedule="capped")


def test_the_former_setting_name_family_is_read_as_schedule():
    """Matrices and leaderboard rows written with ``family=`` still build the same planner."""
    assert outside.NevergradNGOpt(family="capped").config == outside.NevergradNGOpt(
        schedule="capped").config
    with pytest.raises(PlannerError, match="schedule must be"):
        outside.NevergradNGOpt(family="1f1b")
    with pytest.raises(PlannerError, match="leaves no batch"):
        outside.PymooGA().plan(synthetic_problem(2, 8, 0), budget="evals:5")


def test_capped_genomes_reach_capped_plans():
    pytest.importorskip("nevergrad")
    p = synthetic_problem(4, 16, 0)
    res = outside.NevergradDiscreteOnePlusOne(schedule="capped").plan(
        p, mode="stash", budget="evals:200", seed=0)
    assert res.schedule in ("gpipe", "capped")
    assert np.isfinite(res.iteration_time) and res.iteration_time <= res.start_time
