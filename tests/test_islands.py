"""TiDGAP's islands (planners/algorithms/tidgap.IslandEngine): independent populations raced by
successive halving. What holds by construction: the budget and history contract, one seed one
result, the race keeps the better half of the islands at the documented budget fractions, and
the result is the best any island found."""

from __future__ import annotations

import numpy as np
import pytest

from umpipe_bench.planners.algorithms.tidgap import ISLAND_FLOOR, IslandEngine, TiDGAP, TiDGAPEngine
from umpipe_bench.planners.search.base import Budget, PlannerError
from umpipe_bench.planners.search.loop import SearchLoop, Termination
from umpipe_bench.synthetic import synthetic_problem

PROBLEM = synthetic_problem(4, 16, 0)
BUDGET = "evals:120000"  # buys a population of 512: four islands of 128


def _algorithm(planner: TiDGAP, mode: str = "stash", budget: str = BUDGET, seed: int = 0):
    s = dict(planner.config)
    b = Budget.parse(budget)
    objective = planner.make_objective(PROBLEM, mode, s)
    return planner.make_algorithm(PROBLEM, mode, s, b, seed, objective), objective, b


def test_islands_are_used_only_when_each_gets_the_floor_population():
    algo, _, _ = _algorithm(TiDGAP(population=512))
    assert isinstance(algo, IslandEngine) and len(algo.islands) == 4
    assert all(e.P == 512 // 4 >= ISLAND_FLOOR for e in algo.islands)
    algo, _, _ = _algorithm(TiDGAP(population=512), budget="evals:20000")  # population 128
    assert isinstance(algo, TiDGAPEngine)
    algo, _, _ = _algorithm(TiDGAP(population=512, islands=1))
    assert isinstance(algo, TiDGAPEngine)


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_race_keeps_the_better_half_at_the_race_points(mode):
    planner = TiDGAP(population=512, race=0.5, revive=0, mixed_islands=False)
    algo, objective, budget = _algorithm(planner, mode)
    loop = SearchLoop(objective, Termination(budget))
    algo.setup(loop.evaluate)
    assert algo.used == loop.evaluations  # the seeds were evaluated once, not per island
    points = list(algo.race_at)
    assert points == [0.25, 0.5]
    culls = []
    while not loop.termination.reached(loop.evaluations, 0, 0.0, algo.ask_size()):
        was_active = list(algo.active)
        g = algo.ask()
        algo.tell(g, loop.evaluate(g))
        assert algo.used == loop.evaluations
        if algo.active != was_active:
            keys = sorted((algo._key(algo.islands[i]), i) for i in was_active)
            assert algo.active == sorted(i for _, i in keys[:len(was_active) // 2])
            culls.append(loop.evaluations / budget.evaluations)
    assert len(culls) == 2 and algo.active and len(algo.active) == 1
    # each halving happens at the first generation that reaches its budget fraction
    assert points[0] <= culls[0] < points[1] <= culls[1] < 0.6
    genome, T = algo.best()
    assert T == min(e.best_time for e in algo.islands) == algo.best_time
    assert T == objective.evaluate(genome)[0]


def test_islands_keep_the_contract_and_one_seed_gives_one_result():
    a = TiDGAP(population=512).plan(PROBLEM, mode="recompute", seed=3, budget=BUDGET)
    b = TiDGAP(population=512).plan(PROBLEM, mode="recompute", seed=3, budget=BUDGET)
    assert a.evaluations <= 120000 and a.evaluations == b.evaluations
    assert a.iteration_time == b.iteration_time and a.plan == b.plan
    best = [r.best for r in a.history]
    assert best == sorted(best, reverse=True)  # best so far never rises
    assert [r.evaluations for r in a.history] == sorted(r.evaluations for r in a.history)


def test_islands_draw_their_own_random_individuals():
    algo, objective, budget = _algorithm(TiDGAP(population=512))
    loop = SearchLoop(objective, Termination(budget))
    algo.setup(loop.evaluate)
    pops = [e.pop_f[-8:].copy() for e in algo.islands]  # the random tail of each population
    for i in range(1, len(pops)):
        assert not np.array_equal(pops[0], pops[i])


@pytest.mark.parametrize("settings, message", [
    ({"islands": 0}, "islands must be >= 1"),
    ({"race": 0.0}, "race must be in"),
    ({"race": 1.5}, "race must be in"),
])
def test_island_settings_are_checked_at_construction(settings, message):
    with pytest.raises(PlannerError, match=message):
        TiDGAP(**settings)


def test_a_stalled_last_island_retires_and_the_best_stopped_one_resumes():
    """After the race, the last island that goes ``revive`` of the budget without improving
    retires; the best stopped island (by T, then caps) resumes with its own population, once
    per island; the result stays the best any island found, and the budget holds."""
    planner = TiDGAP(population=512, revive=0.05, mixed_islands=False)
    algo, objective, budget = _algorithm(planner, "stash")
    assert algo.revive_after == int(np.ceil(0.05 * budget.evaluations / 128))
    loop = SearchLoop(objective, Termination(budget))
    algo.setup(loop.evaluate)
    switches = []
    while not loop.termination.reached(loop.evaluations, 0, 0.0, algo.ask_size()):
        was_active = list(algo.active)
        frozen = {j: algo.islands[j].generation for j in range(4) if j not in was_active}
        g = algo.ask()
        algo.tell(g, loop.evaluate(g))
        for j, gen in frozen.items():  # stopped islands do not move
            assert algo.islands[j].generation == gen or j in algo.active
        if len(was_active) == 1 and algo.active != was_active:
            i = was_active[0]
            assert algo.islands[i].stale >= algo.revive_after
            candidates = [j for j in range(4) if j != i and j not in algo.retired | {i}]
            assert algo.active[0] == min(candidates + algo.active,
                                         key=lambda j: algo._key(algo.islands[j]))
            switches.append(i)
    assert switches and len(set(switches)) == len(switches)  # each island retires once
    assert loop.evaluations <= budget.evaluations
    _, T = algo.best()
    assert T == min(e.best_time for e in algo.islands)


def test_revive_setting():
    from umpipe_bench.planners.algorithms.tidgap import REVIVE_AUTO

    assert TiDGAP().config["revive"] == "auto" and REVIVE_AUTO == {"stash": 0.15,
                                                                     "recompute": 0.0}
    algo, _, b = _algorithm(TiDGAP(population=512), "recompute")
    assert algo.revive_after == 0  # auto: off in recompute
    algo, _, b = _algorithm(TiDGAP(population=512), "stash")
    assert algo.revive_after == int(np.ceil(0.15 * b.evaluations / 128))
    algo, _, b = _algorithm(TiDGAP(population=512, revive="0.3"), "recompute")
    assert algo.revive_after == int(np.ceil(0.3 * b.evaluations / 128))
    for bad in (1.5, -0.1, "soon"):
        with pytest.raises(PlannerError, match="revive"):
            TiDGAP(revive=bad)


def _rows(f: np.ndarray, k: np.ndarray | None) -> set[bytes]:
    n = f.shape[0]
    f = f.reshape(n, -1)
    return {f[i].tobytes() + (b"" if k is None else k[i].tobytes()) for i in range(n)}


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_islands_start_from_the_seed_plans_only_when_asked(mode):
    """``seed_islands`` false: no seed plan is in any island's population, and the seeds are
    kept to bound the result; true: every island holds every seed plan (both with
    ``mixed_islands`` false, which otherwise decides)."""
    for seeded in (False, True):
        algo, objective, budget = _algorithm(
            TiDGAP(population=512, seed_islands=seeded, mixed_islands=False), mode)
        loop = SearchLoop(objective, Termination(budget))
        algo.setup(loop.evaluate)
        assert algo.used == loop.evaluations  # the seeds are evaluated once either way
        if seeded:
            assert algo._seeds is None
            n = len(algo.islands[0].seed_labels)
            assert n >= 3
            seeds = _rows(algo.islands[0].pop_f[:n], algo.islands[0].pop_k[:n])
        else:
            assert algo._seeds is not None and algo.seed_labels == []
            s = algo._seeds
            seeds = _rows(s.fbits, s.caps)
            assert algo.start_time == min(float(s.times.min()),
                                          min(float(e.times.min()) for e in algo.islands))
        for e in algo.islands:
            held = _rows(e.pop_f, e.pop_k)
            assert (seeds <= held) if seeded else not (seeds & held)


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_a_result_is_never_worse_than_the_seed_plans(mode):
    """On the GPipe schedule (no EDP fallback after the run) one generation of random islands
    is far behind the seeds on this problem: the result is then the best seed plan
    (re-simulated), and the same as when the islands hold the seeds."""
    from umpipe_bench.simulator import gpipe_recurrence

    prob = synthetic_problem(8, 128, 1)
    out = []
    for seeded in (False, True):
        res = TiDGAP(population=512, schedule="gpipe", seed_islands=seeded,
                     mixed_islands=False).plan(
            prob, mode=mode, seed=0, budget="gens:1")
        assert res.iteration_time <= res.start_time
        assert gpipe_recurrence(prob, res.plan) == res.iteration_time
        out.append(res)
    assert out[0].iteration_time == out[0].start_time == out[1].start_time


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_mixed_islands_seed_half_and_keep_one_of_each_kind_at_the_first_halving(mode):
    """``mixed_islands``: island 1 holds every seed plan, island 0 every one but the stage
    descent's, islands 2-3 none; the first halving keeps the best island of each kind, the
    second the better of those two."""
    planner = TiDGAP(population=512, mixed_islands=True, race=0.5, revive=0)
    algo, objective, budget = _algorithm(planner, mode)
    loop = SearchLoop(objective, Termination(budget))
    algo.setup(loop.evaluate)
    assert algo.used == loop.evaluations and algo._seeds is not None
    made = algo._seeds.labels[0] == "descent"  # stash here: the descent finds nothing better
    assert made == (mode == "recompute")
    seeds = _rows(algo._seeds.fbits, algo._seeds.caps)
    descent = _rows(algo._seeds.fbits[:1], algo._seeds.caps[:1]) if made else set()
    for i, e in enumerate(algo.islands):
        held = _rows(e.pop_f, e.pop_k)
        if i == 0:
            assert seeds - descent <= held and not (descent & held)
        else:
            assert (seeds <= held) if i < 2 else not (seeds & held)
    seen = []
    while not loop.termination.reached(loop.evaluations, 0, 0.0, algo.ask_size()):
        was_active = list(algo.active)
        g = algo.ask()
        algo.tell(g, loop.evaluate(g))
        if algo.active != was_active:
            best = {kind: min((i for i in was_active if (i < 2) == kind),
                              key=lambda i: algo._key(algo.islands[i]), default=None)
                    for kind in (True, False)}
            if len(was_active) == 4:
                assert algo.active == sorted([best[True], best[False]])
            else:
                assert algo.active == [min(was_active, key=lambda i: algo._key(algo.islands[i]))]
            seen.append(len(algo.active))
    assert seen == [2, 1]
    genome, T = algo.best()
    assert T == objective.evaluate(genome)[0] == algo.best_time
