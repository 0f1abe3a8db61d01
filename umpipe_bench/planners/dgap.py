"""DGAP: the dual-chromosome genetic algorithm on DEAP (UMPIPE; MODEL.md §2 and §4).

An individual holds two chromosomes of cut bits (forward and backward partitions of every
stage; :mod:`.encoding`); in stash mode the backward chromosome is tied to the forward one, so
an individual holds the forward one only. Fitness is the reference simulator
(:func:`umpipe_bench.simulator.gpipe_recurrence`), one individual at a time: this is the
baseline that TiDGAP accelerates. One generation, DEAP style:

1. ``population - elites`` offspring by tournament selection, cloned;
2. ``algorithms.varAnd``: each pair mates with probability ``cxpb`` (two-point crossover on
   each chromosome separately), each offspring mutates with probability ``mutpb`` (bit flips
   and boundary shifts on each chromosome; :mod:`.operators`);
3. the changed offspring are evaluated; the ``HallOfFame`` keeps the best distinct individuals
   ever seen, and the best ``elites`` of them join the next population (elitism).

The initial population is seeded (:func:`.encoding.seed_plans`): best EDP(M) plans, the
local-greedy and greedy-dp plans, then random individuals. With elitism the result is never
worse than the best seed, hence never worse than the best EDP plan under gpipe.

DEAP classes are built here, not with ``creator.create`` (which mutates a global module and
warns when repeated); the toolbox is built per run by :func:`make_toolbox`. DEAP's operators
draw from the ``random`` module; each run keeps its own ``random`` state and restores the
caller's around every call, so runs are reproducible and do not disturb other code.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from deap import algorithms, base, tools

from ..plan import Plan
from ..problem import Problem
from ..simulator import gpipe_recurrence
from .base import Budget, Planner, PlanResult
from .encoding import initial_population, seed_plans
from .ga import GA_DEFAULTS, check_ga_settings, new_logbook, population_size, record, run_engine
from .operators import list_crossover, list_mutation

__all__ = ["DGAP", "DGAPEngine", "Individual", "make_toolbox"]


class FitnessMin(base.Fitness):
    """Single objective: iteration time, minimized."""

    weights = (-1.0,)


class Individual(list):
    """A list of chromosomes (``[fwd]`` in stash mode, ``[fwd, bwd]`` in recompute mode)."""

    def __init__(self, chromosomes: Any = ()) -> None:
        super().__init__(chromosomes)
        self.fitness = FitnessMin()


def decode(ind: list[list[int]], S: int, B: int, mode: str) -> Plan:
    """An individual -> :class:`Plan` (stash: backward tied to forward)."""
    L = B - 1
    fb = [ind[0][s * L:(s + 1) * L] for s in range(S)]
    bb = fb if mode == "stash" else [ind[1][s * L:(s + 1) * L] for s in range(S)]
    return Plan.from_bits(fb, bb, mode)


def make_toolbox(problem: Problem, mode: str, settings: dict[str, Any]) -> base.Toolbox:
    """A fresh DEAP toolbox: ``evaluate``, ``select``, ``mate``, ``mutate``, ``clone``."""
    S, B = problem.S, problem.B
    stage_len = B - 1
    flip, shift = float(settings["flip_rate"]), float(settings["shift_rate"])

    def evaluate(ind: Individual) -> tuple[float]:
        return (gpipe_recurrence(problem, decode(ind, S, B, mode)),)

    def mate(a: Individual, b: Individual) -> tuple[Individual, Individual]:
        for ca, cb in zip(a, b):
            list_crossover(ca, cb)
        return a, b

    def mutate(a: Individual) -> tuple[Individual]:
        for c in a:
            list_mutation(c, stage_len, flip, shift)
        return (a,)

    tb = base.Toolbox()
    tb.register("evaluate", evaluate)
    tb.register("select", tools.selTournament, tournsize=int(settings["tournament"]))
    tb.register("mate", mate)
    tb.register("mutate", mutate)
    tb.register("clone", copy.deepcopy)
    return tb


class DGAPEngine:
    """One DGAP run (see the module docstring); :func:`.ga.run_engine` drives it."""

    def __init__(self, problem: Problem, mode: str, settings: dict[str, Any],
                 population: int, seed: int | None) -> None:
        self.problem, self.mode, self.settings = problem, mode, settings
        self.P = population
        self.elites = int(settings["elites"])
        self.np_rng = np.random.default_rng(seed)
        self._rand_state = random.Random(seed).getstate()
        self.toolbox = make_toolbox(problem, mode, settings)
        self.hof = tools.HallOfFame(self.elites)
        self.logbook = new_logbook()
        self.generation = 0
        self.evaluations = 0
        self.population: list[Individual] = []
        self.start_time = float("inf")
        self.seed_labels: list[str] = []
        self._t0 = time.perf_counter()

    def _with_random(self, fn: Callable[[], None]) -> None:
        outer = random.getstate()
        random.setstate(self._rand_state)
        try:
            fn()
        finally:
            self._rand_state = random.getstate()
            random.setstate(outer)

    def _evaluate_bits(self, fb: np.ndarray, bb: np.ndarray) -> np.ndarray:
        """The reference, one individual at a time (used for the seeding scan)."""
        S, B, mode = self.problem.S, self.problem.B, self.mode
        out = np.empty(fb.shape[0])
        for n in range(fb.shape[0]):
            ind = [fb[n].reshape(-1).tolist(), bb[n].reshape(-1).tolist()]
            out[n] = gpipe_recurrence(self.problem, decode(ind, S, B, mode))
        return out

    def initialize(self) -> None:
        self._t0 = time.perf_counter()
        seeds = seed_plans(self.problem, self.mode, self._evaluate_bits,
                           int(self.settings["edp_seeds"]), bool(self.settings["greedy_seeds"]))
        fb, bb, n_seed = initial_population(self.problem, self.mode, self.P, self.np_rng, seeds)
        self.seed_labels = seeds.labels[:n_seed]
        self.evaluations = seeds.evaluations
        pop = []
        for n in range(self.P):
            chroms = [fb[n].reshape(-1).tolist()]
            if self.mode == "recompute":
                chroms.append(bb[n].reshape(-1).tolist())
            ind = Individual(chroms)
            if n < n_seed:
                ind.fitness.values = (float(seeds.times[n]),)
            else:
                ind.fitness.values = self.toolbox.evaluate(ind)
                self.evaluations += 1
            pop.append(ind)
        self.population = pop
        self.hof.update(pop)
        times = np.array([ind.fitness.values[0] for ind in pop])
        self.start_time = float(times.min())
        record(self, times, self.evaluations, self.hof[0].fitness.values[0], self._t0)

    def max_step_evaluations(self) -> int:
        return self.P - self.elites

    def step(self) -> None:
        def gen() -> None:
            tb = self.toolbox
            offspring = tb.select(self.population, self.P - self.elites)
            offspring = algorithms.varAnd(offspring, tb, self.settings["cxpb"],
                                          self.settings["mutpb"])
            invalid = [ind for ind in offspring if not ind.fitness.valid]
            for ind in invalid:
                ind.fitness.values = tb.evaluate(ind)
            self.evaluations += len(invalid)
            self.hof.update(offspring)
            self.population = offspring + [tb.clone(e) for e in self.hof[: self.elites]]
            self.generation += 1
            times = np.array([ind.fitness.values[0] for ind in self.population])
            record(self, times, len(invalid), self.hof[0].fitness.values[0], self._t0)

        self._with_random(gen)

    def best(self) -> tuple[Plan, float]:
        ind = self.hof[0]
        return decode(ind, self.problem.S, self.problem.B, self.mode), ind.fitness.values[0]


class DGAP(Planner):
    """Dual-chromosome GA on DEAP, reference fitness one individual at a time.

    Settings (``--set``): population, cxpb, mutpb, flip_rate, shift_rate, tournament, elites,
    edp_seeds, greedy_seeds (see :data:`.ga.GA_DEFAULTS`).
    """

    name = "dgap"
    default_budget = "evals:20000"
    defaults = dict(GA_DEFAULTS)

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        s = check_ga_settings(self.name, self.defaults, self.settings)
        P = population_size(self.name, problem, s, budget)
        engine = DGAPEngine(problem, mode, s, P, seed)
        run_engine(engine, budget, progress, self.name)
        plan, T = engine.best()
        return PlanResult(
            planner=self.name, plan=plan, iteration_time=T, evaluations=engine.evaluations,
            start_time=engine.start_time, history=engine.logbook,
            settings={**s, "population": P},
        )
