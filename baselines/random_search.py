"""``random-search``: the floor any GA must beat (MODEL.md §2 encoding, §4 evaluation).

Draws random plans from the same distribution as the GAs' random individuals
(:func:`umpipe_bench.planners.encoding.random_bits`: per chromosome a microbatch count
log-uniform in [1, B]) and keeps the best, with the same budget as a GA. It is seeded with
nothing (no EDP, no greedy plan): its starting point is its first random plan. Plans are drawn
and evaluated in batches by the population evaluator (bit-identical to the reference).

``gens:N`` means N batches (``batch`` setting, default 128 = one GA population).
"""

from __future__ import annotations

import time

import numpy as np
from tqdm.auto import tqdm

from umpipe_bench.planners.base import Budget, Planner, PlannerError, PlanResult
from umpipe_bench.planners.encoding import random_bits
from umpipe_bench.planners.evaluator import PopulationEvaluator, bits_to_plan
from umpipe_bench.planners.settings import resolve_settings
from umpipe_bench.problem import Problem
from umpipe_bench.simulator import gpipe_recurrence

__all__ = ["RandomSearch"]


class RandomSearch(Planner):
    """Best of N random plans (settings: ``batch``, ``backend``)."""

    name = "random-search"
    default_budget = "evals:200000"
    defaults = {"batch": 128, "backend": "auto"}

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        s = resolve_settings(self.name, self.defaults, self.settings)
        if s["batch"] < 1:
            raise PlannerError("planner 'random-search': batch must be >= 1")
        if budget.evaluations is None and budget.generations is None and budget.seconds is None:
            raise PlannerError("planner 'random-search' needs a finite budget")
        rng = np.random.default_rng(seed)
        ev = PopulationEvaluator(problem, mode, s["backend"])
        S, B = problem.S, problem.B
        cap = budget.evaluations
        if budget.generations is not None:
            g = budget.generations * s["batch"]
            cap = g if cap is None else min(cap, g)
        t0 = time.perf_counter()
        best_T, best = np.inf, None
        start = None
        done = 0
        history = []
        with tqdm(total=cap, disable=not progress, desc=self.name, unit="eval",
                  leave=False) as bar:
            while True:
                n = s["batch"] if cap is None else min(s["batch"], cap - done)
                if n <= 0:
                    break
                elapsed = time.perf_counter() - t0
                if budget.seconds is not None and done and elapsed >= budget.seconds:
                    break
                fb = random_bits(rng, n, S, B)
                bb = random_bits(rng, n, S, B) if mode == "recompute" else fb
                T = ev(fb, bb)
                if start is None:
                    start = float(T[0])
                i = int(np.argmin(T))
                if T[i] < best_T:
                    best_T, best = float(T[i]), (fb[i].copy(), bb[i].copy())
                done += n
                history.append({"evals": done, "best": best_T,
                                "time": time.perf_counter() - t0})
                bar.update(n)
        assert best is not None and start is not None
        plan = bits_to_plan(best[0], best[1], mode)
        return PlanResult(planner=self.name, plan=plan,
                          iteration_time=gpipe_recurrence(problem, plan), evaluations=done,
                          start_time=start, history=history, settings=s)
