"""EDP baselines: GPipe and 1F1B with the best equal split (docs/MODEL.md §2 EDP,
docs/SCHEDULES.md).

What GPipe and PipeDream-flush (1F1B) users run today: every stage the same balanced split of
B into M microbatches, with M the best of 1..B that fits the problem's memory caps (scanned
exhaustively: B evaluations). These are the times the paper's speedups are measured against.
When no M fits, planning fails with a message naming the stage, the bytes and the cap.
"""

from __future__ import annotations

from typing import ClassVar

from umpipe_bench.plan import Plan
from umpipe_bench.planners.evaluation.reference import best_edp, edp_times
from umpipe_bench.planners.search.base import Budget, Planner, PlanResult
from umpipe_bench.problem import Problem

__all__ = ["GPipeEDP", "OneFOneBEDP"]


class _BestEDP(Planner):
    defaults: ClassVar[dict] = {}  # no settings: a misspelt one fails at construction
    schedule: ClassVar[str] = "gpipe"
    default_budget = "evals:1000000"

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        M, T = best_edp(problem, mode, self.schedule)
        times = edp_times(problem, mode, self.schedule)
        return PlanResult(
            planner=self.name,
            plan=Plan.edp(problem.S, problem.B, M, mode),
            iteration_time=T,
            schedule=self.schedule,
            evaluations=problem.B,
            start_time=float(times[0]),
            history=[{"M": m + 1, "iteration_time": float(t)} for m, t in enumerate(times)],
            settings={"M": M},
        )


class GPipeEDP(_BestEDP):
    """EDP(M), best M in 1..B that fits, gpipe schedule (budget ignored: B evaluations)."""

    name = "gpipe"
    schedule = "gpipe"


class OneFOneBEDP(_BestEDP):
    """EDP(M), best M in 1..B that fits, 1F1B schedule (the paper's PipeDream comparison)."""

    name = "1f1b"
    schedule = "1f1b"
