"""TiDGAP's restarts (planners/algorithms/tidgap.RestartEngine): the budget split into rounds, each a
fresh run from its own random stream. What holds by construction: each round is exactly the
run it would be alone (same stream, same budget, the seed plans given instead of re-made), the
seed plans are evaluated once, the budget and history contract hold, and the result is the
best round's best."""

from __future__ import annotations

import numpy as np
import pytest

from umpipe_bench.planners.algorithms.tidgap import RestartEngine, TiDGAP, TiDGAPEngine
from umpipe_bench.planners.search.base import Budget, PlannerError
from umpipe_bench.planners.search.loop import SearchLoop, Termination
from umpipe_bench.synthetic import synthetic_problem

PROBLEM = synthetic_problem(4, 16, 0)
BUDGET = "evals:30000"


@pytest.fixture
def made(monkeypatch):
    """The engines whose ``make_seeds`` ran (the seed plans made and evaluated)."""
    engines = []
    original = TiDGAPEngine.make_seeds

    def counting(self, evaluate):
        engines.append(self)
        return original(self, evaluate)

    monkeypatch.setattr(TiDGAPEngine, "make_seeds", counting)
    return engines


def _fresh(ss: np.random.SeedSequence) -> np.random.SeedSequence:
    """The same stream, not yet spawned from (``spawn`` advances a SeedSequence)."""
    return np.random.SeedSequence(ss.entropy, spawn_key=ss.spawn_key, pool_size=ss.pool_size)


def _run(planner: TiDGAP, mode: str, budget: str = BUDGET, seed: int = 0):
    s = dict(planner.config)
    b = Budget.parse(budget)
    objective = planner.make_objective(PROBLEM, mode, s)
    algo = planner.make_algorithm(PROBLEM, mode, s, b, seed, objective)
    loop = SearchLoop(objective, Termination(b))
    loop.run(algo)
    return algo, loop, objective, s


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_each_round_is_the_run_it_would_be_alone(mode, made):
    planner = TiDGAP(restarts=3, islands=1)
    algo, loop, objective, s = _run(planner, mode)
    assert isinstance(algo, RestartEngine) and len(algo.engines) == 3
    assert len(made) == 1  # the seed plans: made and evaluated once, in the first round
    assert loop.evaluations == algo.used <= 30000
    shares = [e.used for e in algo.engines]
    assert shares[0] <= 10000 and shares[1] <= 10000 and sum(shares) == loop.evaluations
    # replay every round alone: its own stream and budget share, the first round's seeds
    seeds = algo.engines[0].seeds
    left = 30000
    for r, e in enumerate(algo.engines):
        share = left if r == 2 else 10000
        alone = planner._engine(PROBLEM, mode, s, Budget(evaluations=share), algo.streams[r],
                                objective)
        if r:
            alone.preset_seeds = seeds
        solo = SearchLoop(objective, Termination(Budget(evaluations=share)))
        solo.run(alone)
        assert alone.used == e.used and alone.generation == e.generation
        assert alone.best_time == e.best_time
        assert np.array_equal(alone.pop_f, e.pop_f) and np.array_equal(alone.pop_k, e.pop_k)
        left -= e.used
    genome, T = algo.best()
    assert T == min(e.best_time for e in algo.engines) == algo.best_time
    assert T == objective.evaluate(genome)[0]
    # the rounds differ: their random individuals come from different streams
    assert not np.array_equal(algo.engines[0].pop_f, algo.engines[1].pop_f)


def test_island_rounds_are_the_runs_they_would_be_alone(made):
    """Rounds of raced islands (the default on gpt1-14 and vgg16): the seed plans are made once
    and given to the later rounds' islands, and each round replays alone."""
    planner = TiDGAP(restarts=2, population=512)
    algo, loop, objective, s = _run(planner, "recompute", budget="evals:240000")
    assert [type(e).__name__ for e in algo.engines] == ["IslandEngine", "IslandEngine"]
    assert len(made) == 1 and loop.evaluations == algo.used <= 240000
    first = algo.engines[0]
    assert algo.engines[1].seeds is first.seeds  # given, not re-made
    left = 240000
    for r, e in enumerate(algo.engines):
        share = left if r == 1 else 120000
        alone = planner._engine(PROBLEM, "recompute", s, Budget(evaluations=share),
                                _fresh(algo.streams[r]), objective)
        if r:
            alone.preset_seeds = first.seeds
        SearchLoop(objective, Termination(Budget(evaluations=share))).run(alone)
        assert alone.used == e.used and alone.best_time == e.best_time
        for a, b in zip(alone.islands, e.islands, strict=True):
            assert np.array_equal(a.pop_f, b.pop_f) and np.array_equal(a.pop_b, b.pop_b)
        left -= e.used
    assert algo.best()[1] == min(e.best_time for e in algo.engines)


def test_restarts_keep_the_contract_and_one_seed_gives_one_result():
    a = TiDGAP(restarts=2).plan(PROBLEM, mode="recompute", seed=3, budget=BUDGET)
    b = TiDGAP(restarts=2).plan(PROBLEM, mode="recompute", seed=3, budget=BUDGET)
    assert a.evaluations <= 30000 and a.evaluations == b.evaluations
    assert a.iteration_time == b.iteration_time and a.plan == b.plan
    best = [r.best for r in a.history]
    assert best == sorted(best, reverse=True)  # best so far never rises across rounds
    assert [r.evaluations for r in a.history] == sorted(r.evaluations for r in a.history)
    assert a.history[-1].evaluations == a.evaluations
    assert a.settings["restarts"] == 2
    auto = TiDGAP().plan(PROBLEM, mode="stash", seed=0, budget=BUDGET)
    assert auto.settings["restarts"] == 1  # auto: 30,000 evaluations buy one round


def test_rounds_share_a_generation_budget():
    algo, loop, _, _ = _run(TiDGAP(restarts=2, islands=1), "stash", budget="gens:30")
    assert loop.generation == 30
    assert [e.generation for e in algo.engines] == [15, 15]


@pytest.mark.parametrize("value", [0, -1, 1.5, "two", ""])
def test_restarts_setting_is_checked_at_construction(value):
    with pytest.raises(PlannerError, match="restarts must be 'auto' or an integer >= 1, got "):
        TiDGAP(restarts=value)
    assert TiDGAP(restarts="2").config["restarts"] == 2
    assert TiDGAP(restarts=" AUTO ").config["restarts"] == "auto"


def test_a_round_too_small_for_its_population_fails_before_the_run():
    planner = TiDGAP(restarts=1000)
    with pytest.raises(PlannerError, match=r"evals:3 is too small .*\(restarts=1000 gives "
                       r"each round 1/1000 of the budget\)"):
        planner.plan(PROBLEM, mode="stash", seed=0, budget="evals:3000")
