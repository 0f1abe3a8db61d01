"""Planners, in three rooms: ``evaluation/`` (the genome encoding and everything that computes
the iteration time of a population of genomes or plans fast, and the best-EDP reference),
``search/`` (the planner interface, the ask/tell loop, its history, settings, seeding and the
GA's variation) and ``algorithms/`` (DGAP, TiDGAP, stage descent, the greedy plans, the tuned
TiDGAP). Baselines live in :mod:`umpipe_bench.baselines`."""

from __future__ import annotations

from .search.base import Budget, Planner, PlannerError, PlanResult

__all__ = ["Budget", "PlanResult", "Planner", "PlannerError"]
