"""TiDGAP: DGAP's search with both levels of the paper's acceleration (MODEL.md §4).

Same encoding, seeding, operators (distributions), elitism and budget accounting as
:mod:`.dgap`; what changes is how a generation is computed:

* **evaluation**: the changed offspring of a whole generation are evaluated in one call of
  :class:`.evaluator.PopulationEvaluator`, all individuals and all microbatches at once
  (``backend``: ``auto`` = compiled numba loops, bit-identical to the reference; ``numpy`` =
  the closed form as matrix operations; ``torch`` = the closed form on a torch device);
* **variation**: the population is two uint8 arrays ``[P, S*(B-1)]`` (forward and backward
  chromosomes); tournament selection, two-point crossover and mutation are array operations on
  the whole population (:mod:`.operators`), so no per-individual Python object, clone or
  fitness wrapper is created (DEAP's bookkeeping alone costs more than the evaluation:
  PERF-ANCHORS.md).

The history is still a DEAP ``Logbook``; elitism keeps the best ``elites`` distinct
individuals (a hall of fame over arrays). Randomness comes from one
``numpy.random.Generator(seed)``: same seed, same result (for evaluation and generation
budgets; a seconds budget stops wherever the clock says).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..plan import Plan
from ..problem import Problem
from ..simulator import gpipe_recurrence
from .base import Budget, Planner, PlannerError, PlanResult
from .encoding import initial_population, seed_plans
from .evaluator import BACKENDS, PopulationEvaluator, bits_to_plan
from .ga import GA_DEFAULTS, check_ga_settings, new_logbook, population_size, record, run_engine
from .operators import array_crossover, array_mutation, array_tournament

__all__ = ["TiDGAP", "TiDGAPEngine"]


class TiDGAPEngine:
    """One TiDGAP run over array populations; :func:`.ga.run_engine` drives it."""

    def __init__(self, problem: Problem, mode: str, settings: dict[str, Any],
                 population: int, seed: int | None,
                 evaluator: PopulationEvaluator | None = None) -> None:
        self.problem, self.mode, self.settings = problem, mode, settings
        self.S, self.B = problem.S, problem.B
        self.L = self.S * (self.B - 1)
        self.P = population
        self.elites = int(settings["elites"])
        self.rng = np.random.default_rng(seed)
        self.evaluator = evaluator or PopulationEvaluator(
            problem, mode, settings.get("backend", "auto"), settings.get("device") or None)
        self.logbook = new_logbook()
        self.generation = 0
        self.evaluations = 0
        self.start_time = float("inf")
        self.seed_labels: list[str] = []
        self.pop_f = np.zeros((0, self.L), np.uint8)
        self.pop_b = self.pop_f
        self.times = np.zeros(0)
        self.elite_idx = np.zeros(0, np.int64)
        self._t0 = time.perf_counter()

    def _eval(self, f: np.ndarray, b: np.ndarray) -> np.ndarray:
        shape = (f.shape[0], self.S, self.B - 1)
        return self.evaluator(f.reshape(shape), b.reshape(shape))

    def initialize(self) -> None:
        self._t0 = time.perf_counter()
        seeds = seed_plans(self.problem, self.mode, self._eval,
                           int(self.settings["edp_seeds"]), bool(self.settings["greedy_seeds"]))
        fb, bb, n_seed = initial_population(self.problem, self.mode, self.P, self.rng, seeds)
        self.seed_labels = seeds.labels[:n_seed]
        self.pop_f = fb.reshape(self.P, self.L).copy()
        self.pop_b = self.pop_f if self.mode == "stash" else bb.reshape(self.P, self.L).copy()
        times = np.empty(self.P)
        times[:n_seed] = seeds.times[:n_seed]
        times[n_seed:] = self._eval(self.pop_f[n_seed:], self.pop_b[n_seed:])
        self.times = times
        self.evaluations = seeds.evaluations + (self.P - n_seed)
        self.start_time = float(times.min())
        self._update_elites()
        record(self, times, self.evaluations, self.times[self.elite_idx[0]], self._t0)

    def _update_elites(self) -> None:
        """The best ``elites`` distinct individuals of the population (a hall of fame: with
        elitism the population always holds the best ever found)."""
        order = np.argsort(self.times, kind="stable")
        chosen: list[int] = []
        for i in order:
            if all(not (np.array_equal(self.pop_f[i], self.pop_f[j])
                        and np.array_equal(self.pop_b[i], self.pop_b[j])) for j in chosen):
                chosen.append(int(i))
                if len(chosen) == self.elites:
                    break
        self.elite_idx = np.array(chosen, dtype=np.int64)

    def max_step_evaluations(self) -> int:
        return self.P - self.elites

    def step(self) -> None:
        s, rng = self.settings, self.rng
        n_off = self.P - self.elites
        sel = array_tournament(rng, self.times, n_off, int(s["tournament"]))
        off_f = self.pop_f[sel]
        off_b = off_f if self.mode == "stash" else self.pop_b[sel]
        # Crossover: one decision per pair, then each chromosome with its own cut points.
        pairs = np.flatnonzero(rng.random(n_off // 2) < float(s["cxpb"]))
        changed = np.zeros(n_off, dtype=bool)
        changed[2 * pairs] = changed[2 * pairs + 1] = True
        array_crossover(rng, off_f, pairs)
        if self.mode == "recompute":
            array_crossover(rng, off_b, pairs)
        # Mutation: one decision per offspring, then each chromosome.
        mut = np.flatnonzero(rng.random(n_off) < float(s["mutpb"]))
        changed[mut] = True
        stage_len = self.B - 1
        array_mutation(rng, off_f, mut, stage_len, float(s["flip_rate"]), float(s["shift_rate"]))
        if self.mode == "recompute":
            array_mutation(rng, off_b, mut, stage_len, float(s["flip_rate"]),
                           float(s["shift_rate"]))
        off_t = self.times[sel]
        idx = np.flatnonzero(changed)
        if idx.size:
            off_t[idx] = self._eval(off_f[idx], off_b[idx])
        self.evaluations += int(idx.size)
        el = self.elite_idx
        self.pop_f = np.concatenate([off_f, self.pop_f[el]])
        self.pop_b = self.pop_f if self.mode == "stash" else np.concatenate(
            [off_b, self.pop_b[el]])
        self.times = np.concatenate([off_t, self.times[el]])
        self._update_elites()
        self.generation += 1
        record(self, self.times, idx.size, self.times[self.elite_idx[0]], self._t0)

    def best(self) -> tuple[Plan, float]:
        i = int(self.elite_idx[0])
        shape = (self.S, self.B - 1)
        plan = bits_to_plan(self.pop_f[i].reshape(shape), self.pop_b[i].reshape(shape),
                            self.mode)
        return plan, float(self.times[i])


class TiDGAP(Planner):
    """DGAP with whole-population evaluation and variation as array operations.

    Settings (``--set``): the GA settings of :data:`.ga.GA_DEFAULTS` plus ``backend``
    (auto, numba, numpy, torch, python) and ``device`` (torch backend: e.g. ``cuda``).
    """

    name = "tidgap"
    default_budget = "evals:200000"
    defaults = {**GA_DEFAULTS, "backend": "auto", "device": ""}

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        s = check_ga_settings(self.name, self.defaults, self.settings)
        if s["backend"] not in BACKENDS:
            raise PlannerError(
                f"planner 'tidgap': backend {s['backend']!r} unknown; valid: {', '.join(BACKENDS)}")
        P = population_size(self.name, problem, s, budget)
        engine = TiDGAPEngine(problem, mode, s, P, seed)
        run_engine(engine, budget, progress, self.name)
        plan, _ = engine.best()
        # Report the reference simulator's T (identical for the numba backend).
        T = gpipe_recurrence(problem, plan)
        return PlanResult(
            planner=self.name, plan=plan, iteration_time=T, evaluations=engine.evaluations,
            start_time=engine.start_time, history=engine.logbook,
            settings={**s, "population": P, "backend": engine.evaluator.backend},
        )
