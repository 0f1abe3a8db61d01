"""Budget strings and the search loop's termination (planners/search/base.py, planners/search/loop.py)."""

from __future__ import annotations

import re

import pytest

from umpipe_bench.planners.search.base import Budget, PlannerError
from umpipe_bench.planners.search.caps import extra_family_seeds
from umpipe_bench.planners.search.loop import Termination
from umpipe_bench.registry import get_planner
from umpipe_bench.synthetic import synthetic_problem


@pytest.mark.parametrize("text,expect", [
    ("evals:100", Budget(evaluations=100)),
    ("evals:1e5,secs:2.5", Budget(evaluations=100000, seconds=2.5)),
    ("gens:3, secs:1", Budget(generations=3, seconds=1.0)),
])
def test_parse(text, expect):
    assert Budget.parse(text) == expect
    assert Budget.parse(str(expect)) == expect


@pytest.mark.parametrize("text,match", [
    ("evals:1.5", "evals must be a whole number, got 1.5"),
    ("gens:2.5", "gens must be a whole number"),
    ("evals:100,evals:200", "evals given twice"),
    ("secs:1,secs:2", "secs given twice"),
    ("secs:0", "secs must be positive"),
    ("evals:-3", "not one of|must be positive"),
    ("evals:inf", "positive and finite"),
    ("evals:x", "is not a number"),
    ("time:3", "part 'time:3' is not one of evals:N, gens:N, secs:X"),
])
def test_bad_budgets_are_one_clear_line(text, match):
    with pytest.raises(PlannerError, match=match) as info:
        Budget.parse(text)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["tidgap", "dgap"])
@pytest.mark.parametrize("greedy", [True, False])
def test_the_hinted_minimum_budget_is_the_true_minimum(name, greedy):
    problem = synthetic_problem(3, 8, 0)
    planner = get_planner(name, greedy_seeds=greedy)
    with pytest.raises(PlannerError, match="too small") as info:
        planner.plan(problem, budget="evals:5")
    least = int(re.search(r"use at least evals:(\d+)", str(info.value)).group(1))
    res = planner.plan(problem, budget=f"evals:{least}")
    assert res.evaluations <= least
    with pytest.raises(PlannerError, match="too small"):
        planner.plan(problem, budget=f"evals:{least - 1}")


def test_many_elites_never_overrun_the_budget():
    """The population floor (elites + 2) counts in the minimum: no run exceeds its budget.
    B = 8 EDP seeds + 2 greedy + 12, and with the schedule family its 1F1B-EDP seeds too."""
    problem = synthetic_problem(3, 8, 0)
    for schedule, extra in (("gpipe", 0), ("family", extra_family_seeds(problem, "stash"))):
        planner = get_planner("tidgap", elites=10, population=64, schedule=schedule)
        least = 22 + extra
        with pytest.raises(PlannerError, match=f"use at least evals:{least}$"):
            planner.plan(problem, budget="evals:15")
        assert planner.plan(problem, budget=f"evals:{least}").evaluations <= least


def test_termination_first_reached_stops():
    t = Termination(Budget(evaluations=100, generations=5))
    assert not t.reached(50, 4, 0.0, 50)
    assert t.reached(51, 4, 0.0, 50)  # the next generation would overrun the budget
    assert t.reached(0, 5, 0.0, 1)
    with pytest.raises(PlannerError, match="finite budget"):
        Termination(Budget(), "tidgap")
