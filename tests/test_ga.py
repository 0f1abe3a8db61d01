"""DGAP/TiDGAP specifics: budgets, history, seeding, operators, settings, RNG hygiene."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from umpipe_bench.plan import Plan
from umpipe_bench.planners.algorithms.dgap import DGAP
from umpipe_bench.planners.algorithms.tidgap import TiDGAP
from umpipe_bench.planners.evaluation.encoding import edp_bits, random_bits
from umpipe_bench.planners.evaluation.evaluator import bits_to_plan
from umpipe_bench.planners.evaluation.reference import best_edp
from umpipe_bench.planners.search.base import PlannerError
from umpipe_bench.planners.search.operators import list_shift
from umpipe_bench.simulator import gpipe_recurrence
from umpipe_bench.synthetic import synthetic_problem

PROBLEM = synthetic_problem(4, 16, 0)


@pytest.mark.parametrize("cls", [DGAP, TiDGAP])
@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_budget_history_and_seeding(cls, mode):
    res = cls(population=32).plan(PROBLEM, mode=mode, budget="evals:700", seed=1)
    assert res.evaluations <= 700
    h = res.history
    assert h[0].generation == 0 and len(h) >= 10
    assert [r.generation for r in h] == list(range(len(h)))
    best = [r.best for r in h]
    assert all(b2 <= b1 for b1, b2 in itertools.pairwise(best))  # elitism: best never worsens
    assert h[-1].evaluations == res.evaluations
    assert res.iteration_time == pytest.approx(best[-1], rel=1e-12)
    # Seeded with the best EDP plan, so never worse than GPipe-EDP.
    assert res.start_time <= best_edp(PROBLEM, mode, "gpipe")[1]
    assert res.iteration_time <= res.start_time


def test_dgap_keeps_its_deap_logbook():
    res = DGAP(population=16).plan(PROBLEM, mode="recompute", budget="gens:4", seed=0)
    lb = res.history.extra["logbook"]
    assert [r["gen"] for r in lb] == [0, 1, 2, 3, 4]
    assert [r["nevals"] for r in lb] == [r.evaluations for r in res.history]
    assert [r["best"] for r in lb] == [r.best for r in res.history]


@pytest.mark.parametrize("cls", [DGAP, TiDGAP])
def test_generation_budget(cls):
    res = cls(population=16).plan(PROBLEM, mode="stash", budget="gens:5", seed=0)
    assert len(res.history) == 6  # generation 0 (the initial population) + 5


def test_seconds_budget_stops():
    res = TiDGAP().plan(PROBLEM, mode="stash", budget="secs:0.3", seed=0)
    assert res.wall_time < 5


@pytest.mark.parametrize("backend", ["numpy", "python"])
def test_tidgap_other_backends(backend):
    """The search runs on any backend (results may differ: numpy's T differs in the last ulps,
    which can flip a tie in selection); the reported T is the reference's."""
    res = TiDGAP(backend=backend, population=16, schedule="gpipe").plan(
        PROBLEM, mode="recompute", budget="gens:3", seed=4)
    assert res.settings["backend"] == backend
    assert res.iteration_time == gpipe_recurrence(PROBLEM, res.plan)
    assert res.iteration_time <= res.start_time * (1 + 1e-12)


def test_the_capped_schedule_needs_the_numba_evaluator_and_says_so_at_construction():
    with pytest.raises(PlannerError, match="capped schedule needs backend auto or numba"):
        TiDGAP(backend="numpy")
    with pytest.raises(PlannerError, match="schedule must be 'capped' or 'gpipe'"):
        TiDGAP(schedule="1f1b")


def test_the_former_value_family_is_read_as_capped():
    """Plan files, matrices and rows written with ``schedule=family`` still run the same
    search, and record the current name."""
    assert TiDGAP().config["schedule"] == "capped"
    assert TiDGAP(schedule="family").config == TiDGAP().config
    a = TiDGAP(population=16, schedule="family").plan(PROBLEM, mode="stash",
                                                       budget="evals:600", seed=1)
    b = TiDGAP(population=16, schedule="capped").plan(PROBLEM, mode="stash",
                                                       budget="evals:600", seed=1)
    assert a.iteration_time == b.iteration_time and a.plan == b.plan


def test_progress_bar_runs():
    TiDGAP(population=16).plan(PROBLEM, mode="stash", budget="gens:3", seed=0, progress=True)


def test_bad_settings_and_budgets_are_clear_errors():
    with pytest.raises(PlannerError, match="unknown setting.*valid: backend"):
        TiDGAP(popsize=3).plan(PROBLEM)
    with pytest.raises(PlannerError, match="elites"):
        DGAP(population=4, elites=4).plan(PROBLEM)
    with pytest.raises(PlannerError, match="not a valid int"):
        DGAP(population="many").plan(PROBLEM)
    with pytest.raises(PlannerError, match="too small"):
        TiDGAP().plan(PROBLEM, budget="evals:10")
    # string settings (from --set) are coerced
    res = TiDGAP(population="16", greedy_seeds="false").plan(PROBLEM, budget="gens:1")
    assert res.settings["population"] == 16 and res.settings["greedy_seeds"] is False


def test_dgap_leaves_global_random_alone():
    random.seed(123)
    expect = random.Random(123).random()
    DGAP(population=16).plan(PROBLEM, mode="stash", budget="gens:2", seed=0)
    assert random.random() == expect


def test_no_deap_creator_side_effects():
    from deap import creator

    DGAP(population=16).plan(PROBLEM, budget="gens:1")
    assert not [n for n in vars(creator) if n.lower().startswith(("fitness", "individual"))]


def test_single_sample_and_single_stage_problems():
    for S, B in ((3, 1), (1, 6), (2, 2)):
        p = synthetic_problem(S, B, 0)
        for cls in (DGAP, TiDGAP):
            res = cls(population=8).plan(p, mode="recompute", budget="gens:3", seed=0)
            res.plan.validate(p)


# ------------------------------------------------------------------ operators
def test_edp_bits_decode_to_edp():
    assert bits_to_plan(edp_bits(3, 10, 4), None, "stash") == Plan.edp(3, 10, 4)


def test_random_bits_density_spread():
    rng = np.random.default_rng(0)
    bits = random_bits(rng, 2000, 2, 64)
    counts = bits.sum(axis=2).mean(axis=1) + 1  # microbatches per stage
    assert counts.min() < 3 and counts.max() > 30  # log-uniform in [1, B]


def test_list_shift_stays_in_stage():
    random.seed(0)
    c = [0, 0, 0, 1, 0, 0, 0, 0]
    for _ in range(100):
        list_shift(c, 4, 8.0)
    assert sum(c[:4]) == 1 and sum(c[4:]) == 0
