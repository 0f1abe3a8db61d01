"""TiDGAP's islands: independent populations raced by successive halving (:mod:`.tidgap`)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ...problem import Problem
from ..evaluation.objective import Genomes, JoinedGenomes, Objective
from ..search.base import Budget
from ..search.loop import Evaluate, SearchAlgorithm
from ..search.seeding import Seeds
from ._tidgap_engine import TiDGAPEngine
from ._tidgap_settings import REVIVE_AUTO
from .descent import without_descent

__all__ = ["IslandEngine"]


class IslandEngine(SearchAlgorithm):
    """``K`` independent TiDGAP populations (islands) raced by successive halving.

    A run's outcome is mostly decided early: on vgg16 stash with a population of 256, the
    runs that end far from the best plan are already far behind after an eighth of the budget
    (`git show ddbefaf:results/perf/quality.md`). So ``K`` islands (each ``population / K``, its own
    random stream from the run's seed, all seeded with the same EDP/greedy/family plans, evaluated
    together in one objective call per generation) run side by side, and at evenly spaced
    points up to the ``race`` fraction of the budget the worse half of the islands (by best T,
    ties by caps) stops; the last island gets the rest of the budget, unless it goes
    ``revive`` of the budget without improving (counted in generations; not with a seconds
    budget): then it retires and the best stopped island resumes where it stopped, once per
    island. The budget fraction is the largest of evaluations, generations and seconds used
    over their limits.
    """

    def __init__(self, problem: Problem, mode: str, settings: dict[str, Any],
                 population: int, seed: int | np.random.SeedSequence | None,
                 objective: Objective, budget: Budget, islands: int, race: float) -> None:
        self.budget = budget
        per = population // islands
        root = (seed if isinstance(seed, np.random.SeedSequence)
                else np.random.SeedSequence(seed))
        streams = root.spawn(islands)
        self.islands = [TiDGAPEngine(problem, mode, settings, per, ss, objective,
                                     budget.evaluations) for ss in streams]
        self.active = list(range(islands))
        halvings = max(1, int(np.ceil(np.log2(islands))))
        self.race_at = [race * (i + 1) / halvings for i in range(halvings)]
        self.generation = 0
        self._sizes: list[int] = []
        self._t0 = time.perf_counter()
        self.seed_labels: list[str] = []
        # revive: generations the last island may go without improving (0: never revive)
        revive = settings.get("revive", 0.0)
        revive = REVIVE_AUTO[mode] if revive == "auto" else float(revive)
        if budget.evaluations:
            self.revive_after = int(np.ceil(revive * budget.evaluations / per))
        elif budget.generations:
            self.revive_after = int(np.ceil(revive * budget.generations))
        else:
            self.revive_after = 0  # a seconds budget: no generation count to compare with
        self.retired: set[int] = set()
        self.seed_islands = bool(settings.get("seed_islands", True))
        # mixed_islands: the first half of the islands from the seeds, the rest random; a
        # halving keeps the better half of each kind while each kind has two or more
        self.mixed = bool(settings.get("mixed_islands", True))
        self._seeds: Seeds | None = None  # the seed plans, when kept out of the islands
        self.preset_seeds: Seeds | None = None  # given by RestartEngine (evaluated once)
        self.seeds: Seeds | None = None  # every seed plan, evaluated

    @property
    def used(self) -> int:
        """Evaluations asked for so far, all islands (seeds counted once)."""
        return sum(e.used for e in self.islands)

    @property
    def best_time(self) -> float:  # type: ignore[override]
        return min(min(e.best_time for e in self.islands), self._seed_time())

    def _seed_time(self) -> float:
        """T of the best seed plan kept out of the islands (inf: none kept)."""
        s = self._seeds
        return float(s.times.min()) if s is not None and s.times.size else float("inf")

    @property
    def start_time(self) -> float:  # type: ignore[override]
        return min(min(e.start_time for e in self.islands), self._seed_time())

    def _fraction(self) -> float:
        b, f = self.budget, 0.0
        if b.evaluations:
            f = max(f, self.used / b.evaluations)
        if b.generations:
            f = max(f, self.generation / b.generations)
        if b.seconds:
            f = max(f, (time.perf_counter() - self._t0) / b.seconds)
        return f

    def setup(self, evaluate: Evaluate) -> None:
        self._t0 = time.perf_counter()
        first = self.islands[0]
        # once, counted by the first island (or given: a later restart round)
        seeds = (self.preset_seeds if self.preset_seeds is not None
                 else first.make_seeds(evaluate))
        full = self.seeds = seeds
        if not self.seed_islands or self.mixed:
            # the seed plans stay out of (some) populations (they take them over: on vgg16 the
            # islands then share the seeds' basins); they still bound the result (best())
            self._seeds = seeds
            seeds = Seeds(seeds.fbits[:0], seeds.bbits[:0], seeds.times[:0], [], 0,
                          None if seeds.caps is None else seeds.caps[:0])
        for i, e in enumerate(self.islands):
            e.populate(self._island_seeds(i, full, seeds), evaluate)
        self.seed_labels = first.seed_labels

    def ask_size(self) -> int:
        return sum(self.islands[i].ask_size() for i in self.active)

    def ask(self) -> JoinedGenomes:
        """The active islands' offspring, one batch (not copied together: the loop evaluates
        it in compiled calls of a few rows, :mod:`..evaluation.clock`)."""
        parts = [self.islands[i].ask() for i in self.active]
        self._sizes = [len(g) for g in parts]
        return JoinedGenomes(parts)

    def tell(self, genomes: Genomes | JoinedGenomes, times: np.ndarray) -> None:
        self.generation += 1
        a = 0
        for i, n in zip(self.active, self._sizes):
            self.islands[i].tell(genomes.rows(a, a + n), times[a:a + n])
            a += n
        while len(self.active) > 1 and self.race_at and self._fraction() >= self.race_at[0]:
            self.race_at.pop(0)
            kinds = ([[i for i in self.active if i < self._half],
                      [i for i in self.active if i >= self._half]] if self.mixed else [])
            if kinds and min(len(k) for k in kinds) >= 2:
                self.active = sorted(j for k in kinds for j in self._better_half(k))
            else:
                self.active = sorted(self._better_half(self.active))
        if self.revive_after and not self.race_at and len(self.active) == 1:
            i = self.active[0]
            if self.islands[i].stale >= self.revive_after:
                # the last island has stalled: it retires (its best still counts) and the best
                # stopped island resumes where it stopped
                rest = [j for j in range(len(self.islands)) if j != i and j not in self.retired]
                if rest:
                    self.retired.add(i)
                    self.active = [min(rest, key=lambda j: self._key(self.islands[j]))]

    def _island_seeds(self, i: int, full: Seeds, seeds: Seeds) -> Seeds:
        """The seed plans island ``i`` starts from. With two or more seeded islands the first
        one starts without the stage descent's plan (:mod:`.descent`): a plan that much
        better takes a population over, so one seeded island keeps the EDP/greedy start."""
        if not (self.mixed and i < self._half):
            return seeds
        return without_descent(full) if i == 0 and self._half >= 2 else full

    @property
    def _half(self) -> int:
        """Islands ``0.._half-1`` start from the seeds under ``mixed_islands``."""
        return len(self.islands) // 2

    def _better_half(self, ids: list[int]) -> list[int]:
        rank = sorted(ids, key=lambda i: self._key(self.islands[i]))
        return rank[:max(1, len(rank) // 2)]

    @staticmethod
    def _key(e: TiDGAPEngine) -> tuple[float, int]:
        i = int(e.elite_idx[0])
        return float(e.times[i]), int(e.tie[i])

    def best(self) -> tuple[Genomes, float]:
        """The best island's best; the best seed plan when the seeds were kept out of some
        islands (``seed_islands`` false, ``mixed_islands``) and it is strictly faster, so the
        result is never worse than the seeds."""
        e = min(self.islands, key=self._key)
        g, t = e.best()
        s = self._seeds
        if s is not None and self._seed_time() < t:
            i = int(np.argmin(s.times))
            caps = None if s.caps is None or g.caps is None else s.caps[i:i + 1]
            f = s.fbits[i:i + 1]
            return (Genomes(f, s.bbits[i:i + 1] if self.islands[0].recompute else f, caps),
                    float(s.times[i]))
        return g, t

