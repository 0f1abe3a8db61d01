"""Planners: the interface, DGAP and TiDGAP. Baselines live in ``baselines/``."""

from __future__ import annotations

from .base import Budget, Planner, PlannerError, PlanResult

__all__ = ["Budget", "PlanResult", "Planner", "PlannerError"]
