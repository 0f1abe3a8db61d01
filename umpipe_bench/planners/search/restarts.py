"""Restart rounds: a budget split into independent runs of one search, the best round wins.

Any :class:`.loop.SearchAlgorithm` that counts the evaluations it asked for (``used``) and its
``generation``, and keeps its evaluated seed plans (``seeds``, ``preset_seeds``) can be a
round; TiDGAP's runs are (:mod:`..algorithms.tidgap`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from ..evaluation.objective import Genomes
from .base import Budget
from .loop import Evaluate, SearchAlgorithm
from .seeding import Seeds

__all__ = ["RestartEngine", "Round"]


class Round(Protocol):
    """What a round of :class:`RestartEngine` must offer beyond the ask/tell hooks."""

    generation: int
    best_time: float
    start_time: float
    seeds: Seeds | None  # the seed plans, evaluated (after setup)
    preset_seeds: Seeds | None  # set before setup: seed plans already evaluated

    @property
    def used(self) -> int: ...  # evaluations asked for, seed plans included
    def setup(self, evaluate: Evaluate) -> None: ...
    def ask_size(self) -> int: ...
    def ask(self) -> Genomes: ...
    def tell(self, genomes: Genomes, times: np.ndarray) -> None: ...
    def best(self) -> tuple[Genomes, float]: ...


class RestartEngine(SearchAlgorithm):
    """``R`` independent runs (rounds) one after another, each with ``1/R`` of the budget.

    A TiDGAP run converges to one basin early and then polishes it (on vgg16 the island race
    at 4,000,000 evaluations ends where it ends at 1,000,000,
    `git show ddbefaf:results/perf/quality.md`); runs from different random streams end in different
    basins. So ``restarts`` rounds, each a fresh run (a :class:`Round`: for TiDGAP an island race
    or one population, built by ``build`` for the round's budget and random stream, spawned from
    the run's seed), and the result is the best round's best. The seed plans are evaluated once, in
    the first round; later rounds are given them. A round ends when its share of the budget is spent
    (evaluations: the next generation would not fit; generations; seconds); the last round gets all
    the rest.
    """

    def __init__(self, build: Callable[[Budget, np.random.SeedSequence], Round],
                 budget: Budget, rounds: int, seed: int | None) -> None:
        self.build, self.budget, self.rounds = build, budget, rounds
        self.streams = np.random.SeedSequence(seed).spawn(rounds)
        self.engines: list[Round] = []
        self._evaluate: Evaluate | None = None
        self.generation = 0
        self._round_t0 = time.perf_counter()  # when the current round began (seconds share)

    def _share(self, r: int) -> Budget:
        """Round ``r``'s budget: an equal share, the last round everything left."""
        b, R = self.budget, self.rounds
        last = r == R - 1
        ev = (None if b.evaluations is None else
              b.evaluations - self.used if last else b.evaluations // R)
        gens = (None if b.generations is None else
                b.generations - self.generation if last else max(1, b.generations // R))
        secs = None if b.seconds is None else b.seconds / R
        return Budget(evaluations=ev, generations=gens, seconds=secs)

    @property
    def current(self) -> Round:
        return self.engines[-1]

    @property
    def used(self) -> int:
        return sum(e.used for e in self.engines)

    @property
    def best_time(self) -> float:  # type: ignore[override]
        return min((e.best_time for e in self.engines), default=float("inf"))

    @property
    def start_time(self) -> float:  # type: ignore[override]
        return self.engines[0].start_time if self.engines else float("inf")

    def _start_round(self, evaluate: Evaluate) -> None:
        r = len(self.engines)
        self._round_budget = self._share(r)
        self._round_t0 = time.perf_counter()
        e = self.build(self._round_budget, self.streams[r])
        if self.engines:
            e.preset_seeds = self.engines[0].seeds
        self.engines.append(e)
        e.setup(evaluate)

    def setup(self, evaluate: Evaluate) -> None:
        self._evaluate = evaluate
        self._start_round(evaluate)

    def _round_over(self) -> bool:
        b = self._round_budget
        e = self.current  # each round counts its own evaluations and generations
        if b.evaluations is not None and e.used + e.ask_size() > b.evaluations:
            return True
        if b.generations is not None and e.generation >= b.generations:
            return True
        return b.seconds is not None and time.perf_counter() - self._round_t0 >= b.seconds

    def ask_size(self) -> int:
        return self.current.ask_size()

    def ask(self) -> Genomes:
        return self.current.ask()

    def tell(self, genomes: Genomes, times: np.ndarray) -> None:
        self.current.tell(genomes, times)
        self.generation += 1
        if len(self.engines) < self.rounds and self._round_over():
            assert self._evaluate is not None
            self._start_round(self._evaluate)

    def best(self) -> tuple[Genomes, float]:
        """The best round's best (the first of equal ones)."""
        out = [e.best() for e in self.engines]
        return min(out, key=lambda gt: gt[1])

