"""Greedy baselines: ``local-greedy`` and ``greedy-dp`` (definitions in
:mod:`umpipe_bench.planners.algorithms.greedy`, where DGAP/TiDGAP take their seeds from).

Both are deterministic constructions: one plan, one evaluation, no budget or seed used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from umpipe_bench.plan import Plan
from umpipe_bench.planners.algorithms.greedy import greedy_dp_plan, local_greedy_plan
from umpipe_bench.planners.search.base import Budget, Planner, PlanResult
from umpipe_bench.problem import Problem
from umpipe_bench.simulator import gpipe_recurrence

__all__ = ["GreedyDP", "LocalGreedy"]


class _Construction(Planner):
    defaults: ClassVar[dict] = {}  # no settings: a misspelt one fails at construction
    default_budget = "evals:1"
    build: Callable[[Problem, str], Plan | None]

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        plan = type(self).build(problem, mode)
        assert plan is not None  # no time limit given: the construction completes
        T = gpipe_recurrence(problem, plan)
        return PlanResult(planner=self.name, plan=plan, iteration_time=T, evaluations=1,
                          start_time=T, history=[{"iteration_time": T}])


class LocalGreedy(_Construction):
    """Each stage its own best size per sample, repeated, remainder last (docs/MODEL.md §2)."""

    name = "local-greedy"
    build = staticmethod(local_greedy_plan)


class GreedyDP(_Construction):
    """Stage by stage exact prefix DP given the times fixed upstream/downstream
    (docs/MODEL.md §4)."""

    name = "greedy-dp"
    build = staticmethod(greedy_dp_plan)
