"""One contract for every planner of chunk plans (``plan --devices D --planner NAME``).

For each planner, problem, device count and memory mode: the plan fits the problem and the
devices, the reported T and peaks are the Python path's (chunk_order + simulate_devices) for
that plan, the plan file round-trips, the same seed gives the same result, the result is never
slower than the planner's own starting point nor than the best torch schedule the chunk rule
reproduces, and a memory cap binds the plan. A planner may refuse a problem only with a
:class:`PlannerError` that says so ("refuses"), e.g. ``chunk-exact`` on anything but tiny
problems; such a case is skipped with the message.
"""

from __future__ import annotations

import pytest

from umpipe_bench.baselines.chunk_exact import ChunkExact
from umpipe_bench.chunk_torch import random_split_problem, simulate_plan
from umpipe_bench.chunkplan import ChunkPlan
from umpipe_bench.planners.algorithms.chunk_search import ChunkSearch
from umpipe_bench.planners.search.base import PlannerError
from umpipe_bench.synthetic import synthetic_problem

PLANNERS = {"chunk-search": ChunkSearch, "chunk-exact": ChunkExact}
PROBLEMS = {
    "split-l3-b3": lambda: random_split_problem(3, 3, 1),  # split costs: both kinds of space
    "plain-l4-b4": lambda: synthetic_problem(4, 4, 0),  # no split costs: unsplit only
    "split-l8-b8": lambda: random_split_problem(8, 8, 2),  # layouts loop and v fit on D = 2
}
BUDGET = {"chunk-search": "evals:2500", "chunk-exact": None}

_cache: dict[tuple, object] = {}


def run(name, problem_name, D, mode, seed=0, fresh=False, memory_cap=None):
    key = (name, problem_name, D, mode, seed, memory_cap)
    if fresh or key not in _cache:
        problem = PROBLEMS[problem_name]()
        try:
            res = PLANNERS[name]().plan(problem, D, mode=mode, budget=BUDGET[name], seed=seed,
                                        memory_cap=memory_cap)
        except PlannerError as exc:
            if "refuses" in str(exc):
                pytest.skip(f"{name} refuses {problem_name}: {exc}")
            raise
        if fresh:
            return problem, res
        _cache[key] = (problem, res)
    return _cache[key]


CASES = [(n, p, D, m) for n in PLANNERS for p in PROBLEMS for D in (2, 3)
         for m in ("stash", "recompute")
         if not (p == "split-l3-b3" and D == 3)]


@pytest.mark.parametrize("name,problem_name,D,mode", CASES)
def test_contract(name, problem_name, D, mode, tmp_path):
    problem, res = run(name, problem_name, D, mode)
    plan = res.plan
    assert plan.D == D and sum(plan.layers) == problem.S and plan.B == problem.B
    assert plan.mode == mode
    assert plan.split <= problem.has_split_backward
    tl = simulate_plan(problem, plan)
    assert tl.iteration_time == res.iteration_time
    if res.peak_memory is not None:
        assert list(tl.peak_memory) == pytest.approx(res.peak_memory, rel=0, abs=0)
    assert res.iteration_time <= res.start_time
    # every reproduced torch schedule of a layout the planner searched is one of its seeds or
    # in its enumeration (chunk-exact searches layout one: the schedules at v = 1)
    layouts = res.settings.get("layouts", "one,loop,v").split(",")
    mine = [b for b in res.baselines if b.exact and b.T is not None
            and ("one" in layouts if b.v == 1 else "loop" in layouts)]
    assert mine and res.iteration_time <= min(b.T for b in mine)
    path = tmp_path / "plan.json"
    plan.save(path)
    assert ChunkPlan.load(path) == plan
    assert res.evaluations > 0 and res.wall_time > 0


@pytest.mark.parametrize("name", list(PLANNERS))
def test_same_seed_same_result(name):
    a = run(name, "split-l3-b3", 2, "recompute", seed=5, fresh=True)[1]
    b = run(name, "split-l3-b3", 2, "recompute", seed=5, fresh=True)[1]
    assert a.plan == b.plan and a.iteration_time == b.iteration_time
    assert a.evaluations == b.evaluations


@pytest.mark.parametrize("name", list(PLANNERS))
def test_a_memory_cap_binds(name):
    problem, free = run(name, "split-l3-b3", 2, "stash")
    cap = 0.95 * max(free.peak_memory)
    _, res = run(name, "split-l3-b3", 2, "stash", memory_cap=cap)
    assert max(simulate_plan(problem, res.plan).peak_memory) <= cap
    assert res.memory_cap == cap
    if name == "chunk-exact":  # the optimum can only get slower under a tighter cap
        assert res.iteration_time >= free.iteration_time
