"""``random-search``: the floor any GA must beat (docs/MODEL.md §2 encoding, §4 evaluation).

Draws random plans from the same distribution as the GAs' random individuals
(:func:`umpipe_bench.planners.evaluation.encoding.random_bits`: per chromosome a microbatch count
log-uniform in [1, B]) and keeps the best, with the same budget as a GA. It is seeded with
nothing (no EDP, no greedy plan): its starting point is its first random plan. It is an
ask/tell algorithm on the shared search loop (:mod:`umpipe_bench.planners.search.loop`): each ask is
one batch of random plans, evaluated by the population evaluator (bit-identical to the
reference).

``gens:N`` means N batches after the first (``batch`` setting, default 128 = one GA
population).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from umpipe_bench.planners.evaluation.encoding import random_bits
from umpipe_bench.planners.evaluation.evaluator import BACKENDS
from umpipe_bench.planners.evaluation.objective import Genomes, Objective
from umpipe_bench.planners.search.base import Budget
from umpipe_bench.planners.search.loop import (
    Evaluate,
    SearchAlgorithm,
    SearchPlanner,
    TrackedAlgorithm,
)
from umpipe_bench.planners.search.settings import Setting, SettingsTable
from umpipe_bench.problem import Problem

__all__ = ["RandomSearch", "RandomSearchAlgorithm"]


class RandomSearchAlgorithm(TrackedAlgorithm):
    """Random batches; the loop keeps the best, and its evaluation budget caps the last batch."""

    def __init__(self, problem: Problem, mode: str, batch: int, budget: Budget,
                 seed: int | None) -> None:
        self.S, self.B, self.mode = problem.S, problem.B, mode
        self.batch = batch
        self.cap = budget.evaluations
        self.rng = np.random.default_rng(seed)
        self.done = 0

    def _draw(self, n: int) -> Genomes:
        f = random_bits(self.rng, n, self.S, self.B)
        b = random_bits(self.rng, n, self.S, self.B) if self.mode == "recompute" else f
        return Genomes(f, b)

    def setup(self, evaluate: Evaluate) -> None:
        g = self._draw(self.ask_size())
        t = evaluate(g)
        self.start_time = float(t[0])
        self.done += len(g)

    def ask_size(self) -> int:
        n = self.batch if self.cap is None else min(self.batch, self.cap - self.done)
        return max(n, 1)

    def ask(self) -> Genomes:
        return self._draw(self.ask_size())

    def tell(self, genomes: Genomes, times: np.ndarray) -> None:
        self.done += len(genomes)


class RandomSearch(SearchPlanner):
    """Best of N random plans (settings: ``batch``, ``backend``)."""

    name = "random-search"
    default_budget = "evals:200000"
    defaults = SettingsTable(
        Setting("batch", int, 128, "random plans drawn and evaluated per generation", low=1),
        Setting("backend", str, "auto", "evaluator of the GPipe schedule", choices=BACKENDS),
    )

    def make_algorithm(self, problem: Problem, mode: str, settings: dict[str, Any],
                       budget: Budget, seed: int | None, objective: Objective
                       ) -> SearchAlgorithm:
        return RandomSearchAlgorithm(problem, mode, int(settings["batch"]), budget, seed)
