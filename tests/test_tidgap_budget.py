"""TiDGAP's default budget (grows with S*(B-1)) and the ``polish`` setting."""

from __future__ import annotations

import itertools

import pytest

from umpipe_bench.planners.algorithms.tidgap import (
    BUDGET_CAP,
    BUDGET_PER_BIT,
    BUDGET_WORK,
    MAX_RESTARTS,
    ROUND_FLOOR,
    TiDGAP,
    TiDGAPEngine,
    auto_restarts,
    default_evaluations,
)
from umpipe_bench.planners.search.base import Budget, PlannerError
from umpipe_bench.synthetic import synthetic_problem

SMALL = synthetic_problem(4, 12, 3)


def test_default_budget_is_a_capped_work_floor_or_a_per_bit_budget():
    assert default_evaluations(SMALL) == BUDGET_CAP  # 44 bits: the work floor is capped
    mid = synthetic_problem(32, 256, 0)  # 8160 bits: the work floor
    assert default_evaluations(mid) == BUDGET_WORK // (32 * 255) < BUDGET_CAP
    assert default_evaluations(mid) > BUDGET_PER_BIT * 32 * 255
    big = synthetic_problem(64, 1024, 0)  # the per-bit budget
    assert default_evaluations(big) == BUDGET_PER_BIT * 64 * 1023 > BUDGET_WORK // (64 * 1023)
    assert TiDGAP().budget_for(big) == f"evals:{BUDGET_PER_BIT * 64 * 1023}"
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


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2])
def test_polish_is_checked_at_construction(bad):
    with pytest.raises(PlannerError, match="polish must be in"):
        TiDGAP(polish=bad)


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_polish_spends_the_budget_tail_on_local_generations_and_keeps_the_contract(mode):
    """With ``polish``, the generations after (1 - polish) of the budget are local ones (every
    offspring is the best plus one move); the best never gets worse; evaluations <= budget."""
    budget = 3000
    res = TiDGAP(population=32, polish=0.5, islands=1).plan(SMALL, mode=mode, seed=2,
                                                 budget=f"evals:{budget}")
    assert res.evaluations <= budget
    best = [r.best for r in res.history]
    assert all(b2 <= b1 for b1, b2 in itertools.pairwise(best))
    planner = TiDGAP(population=32, polish=0.5, islands=1)
    settings = dict(planner.config)
    objective = planner.make_objective(SMALL, mode, settings)
    eng = TiDGAPEngine(SMALL, mode, settings, 32, 2, objective, evaluations=budget)
    eng.initialize()
    phases = []
    while eng.used + eng.ask_size() <= budget:
        eng.step()
        phases.append((eng.used, eng.polishing))
    assert any(p for _, p in phases) and not phases[0][1]
    first = next(u for u, p in phases if p)
    assert first >= budget * 0.5 and all(p for u, p in phases if u > first)
    assert eng.phase == "local"


def test_no_polish_without_an_evaluation_budget():
    eng = TiDGAPEngine(SMALL, "stash", dict(TiDGAP(polish=0.5, islands=1).config), 16, 0,
                       TiDGAP().make_objective(SMALL, "stash", dict(TiDGAP().config)),
                       evaluations=None)
    assert eng.polish_from is None
    assert Budget.parse("gens:3").evaluations is None


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
