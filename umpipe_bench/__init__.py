"""umpipe-bench: unequal-microbatch pipeline parallelism, from profiles to real execution.

The pure core (problems, plans, schedules, the simulator, planners) imports no torch; only the
profiler and the runtime do.
"""

from __future__ import annotations

from .plan import Plan, PlanError
from .problem import Link, Problem, ProblemError, StageCosts, StageMemory
from .schedules import Op, build_schedule
from .simulator import Timeline, gpipe_recurrence, simulate

__all__ = [
    "Link",
    "Op",
    "Plan",
    "PlanError",
    "Problem",
    "ProblemError",
    "StageCosts",
    "StageMemory",
    "Timeline",
    "build_schedule",
    "gpipe_recurrence",
    "simulate",
]
__version__ = "0.1.0"
