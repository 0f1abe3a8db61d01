"""The planners' error: a planner was asked for something it cannot do (one line, exit 2)."""

from __future__ import annotations

from ...errors import InputError

__all__ = ["PlannerError"]


#: a planner was asked for something it cannot do (bad budget, problem too large...)
PlannerError = InputError
