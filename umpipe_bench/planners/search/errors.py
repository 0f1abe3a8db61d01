"""The planners' error: a planner was asked for something it cannot do (one line, exit 2)."""

from __future__ import annotations

from ...errors import UmpipeError

__all__ = ["PlannerError"]


class PlannerError(UmpipeError):
    """A planner was asked for something it cannot do (bad budget, problem too large...)."""
