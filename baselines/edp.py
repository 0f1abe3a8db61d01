"""EDP baselines: GPipe and 1F1B with the best equal split (MODEL.md §2 EDP, §3 schedules).

What GPipe and PipeDream-flush (1F1B) users run today: every stage the same balanced split of
B into M microbatches, with M the best of 1..B for the problem (scanned exhaustively: B
simulator evaluations). These are the times the paper's speedups are measured against.
"""

from __future__ import annotations

from typing import ClassVar

from umpipe_bench.plan import Plan
from umpipe_bench.planners.base import Budget, Planner, PlanResult
from umpipe_bench.planners.reference import edp_times
from umpipe_bench.planners.settings import resolve_settings
from umpipe_bench.problem import Problem

__all__ = ["GPipeEDP", "OneFOneBEDP"]


class _BestEDP(Planner):
    schedule: ClassVar[str] = "gpipe"
    default_budget = "evals:1000000"

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        resolve_settings(self.name, {}, self.settings)
        times = edp_times(problem, mode, self.schedule)
        M = int(times.argmin()) + 1
        return PlanResult(
            planner=self.name,
            plan=Plan.edp(problem.S, problem.B, M, mode),
            iteration_time=float(times[M - 1]),
            schedule=self.schedule,
            evaluations=problem.B,
            start_time=float(times[0]),
            history=[{"M": m + 1, "iteration_time": float(t)} for m, t in enumerate(times)],
            settings={"M": M},
        )


class GPipeEDP(_BestEDP):
    """EDP(M), best M in 1..B, gpipe schedule (budget ignored: the scan is B evaluations)."""

    name = "gpipe"
    schedule = "gpipe"


class OneFOneBEDP(_BestEDP):
    """EDP(M), best M in 1..B, 1F1B schedule (the paper's PipeDream comparison)."""

    name = "1f1b"
    schedule = "1f1b"
