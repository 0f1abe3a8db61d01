"""TiDGAP's default budget (grows with S*(B-1)) and its restart rounds."""

from __future__ import annotations

import pytest

from umpipe_bench.planners.algorithms._tidgap_settings import settle_budget
from umpipe_bench.planners.algorithms.tidgap import (
    BUDGET_CAP,
    BUDGET_PER_BIT,
    BUDGET_WORK,
    MAX_RESTARTS,
    ROUND_FLOOR,
    TiDGAP,
    auto_restarts,
    default_evaluations,
)
from umpipe_bench.planners.search.base import Budget, PlannerError
from umpipe_bench.synthetic import synthetic_problem

SMALL = synthetic_problem(4, 12, 3)


def test_the_full_fixed_budget_is_a_capped_work_floor_or_a_per_bit_budget():
    assert default_evaluations(SMALL) == BUDGET_CAP  # 44 bits: the work floor is capped
    mid = synthetic_problem(32, 256, 0)  # 8160 bits: the work floor
    assert default_evaluations(mid) == BUDGET_WORK // (32 * 255) < BUDGET_CAP
    assert default_evaluations(mid) > BUDGET_PER_BIT * 32 * 255
    big = synthetic_problem(64, 1024, 0)  # the per-bit budget
    assert default_evaluations(big) == BUDGET_PER_BIT * 64 * 1023 > BUDGET_WORK // (64 * 1023)
    assert TiDGAP().budget_for(big) == settle_budget(big)  # the default stops by its rule
    assert TiDGAP.default_budget == f"evals:{BUDGET_CAP}"


def test_auto_restarts_give_each_round_its_floor():
    assert auto_restarts(SMALL, Budget.parse(f"evals:{BUDGET_CAP}")) == MAX_RESTARTS
    assert auto_restarts(SMALL, Budget.parse(f"evals:{2 * ROUND_FLOOR - 1}")) == 1
    assert auto_restarts(SMALL, Budget.parse(f"evals:{2 * ROUND_FLOOR}")) == 2
    assert auto_restarts(SMALL, Budget.parse(f"evals:{100 * ROUND_FLOOR}")) == MAX_RESTARTS
    assert auto_restarts(SMALL, Budget.parse("gens:100000")) == 1
    big = synthetic_problem(64, 1024, 0)  # a round needs 64 evaluations per bit there
    assert auto_restarts(big, Budget.parse(f"evals:{default_evaluations(big)}")) == 1
    assert auto_restarts(big, Budget.parse(f"evals:{2 * 64 * 64 * 1023}")) == 2


def test_plan_without_a_budget_uses_the_problem_budget(monkeypatch):
    """No budget: :meth:`TiDGAP.budget_for` the problem; a given budget overrides it."""
    monkeypatch.setattr(TiDGAP, "budget_for", lambda self, problem: "evals:900")
    res = TiDGAP(population=16).plan(SMALL, mode="stash", seed=0)
    assert 800 < res.evaluations <= 900
    res = TiDGAP(population=16).plan(SMALL, mode="stash", seed=0, budget="evals:500")
    assert res.evaluations <= 500


@pytest.mark.parametrize("name", ["patience", "polish"])
def test_the_local_search_settings_are_gone(name):
    """``patience`` and ``polish`` (local generations around the best) did not help at the
    default budget and left the planner: passing one is an unknown setting."""
    with pytest.raises(PlannerError, match=f"unknown setting.*{name}"):
        TiDGAP(**{name: 1})


def test_plan_json_records_the_budget_the_planner_used(monkeypatch, capsys):
    """`plan --json` without --budget reports the problem's budget (`budget_for`), not the
    planner's class default (it recorded evals:200000 on problems where TiDGAP spent more)."""
    import json

    from umpipe_bench.cli import main
    from umpipe_bench.planners.search.base import Planner

    assert Planner.budget_for(TiDGAP(), SMALL) == TiDGAP.default_budget  # the base hook
    monkeypatch.setattr(TiDGAP, "budget_for", lambda self, problem: "evals:700")
    assert main(["plan", "--problem", "sim-s4-b12-s3", "--planner", "tidgap", "--set", "population=16",
                 "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["budget"] == "evals:700"
    assert out["evaluations"] <= 700
