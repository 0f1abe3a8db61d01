"""DGAP: the dual-chromosome genetic algorithm on DEAP (UMPIPE; docs/MODEL.md §2 and §4).

An individual holds two chromosomes of cut bits (forward and backward partitions of every
stage; :mod:`..evaluation.encoding`); in stash mode the backward chromosome is tied to the forward
one, so an individual holds the forward one only. Fitness is the reference simulator
(:func:`umpipe_bench.simulator.gpipe_recurrence`), one individual at a time: this is the
baseline that TiDGAP accelerates. One generation, DEAP style:

1. ``population - elites`` offspring by tournament selection, cloned;
2. ``algorithms.varAnd``: each pair mates with probability ``cxpb`` (two-point crossover on
   each chromosome separately), each offspring mutates with probability ``mutpb`` (bit flips
   and boundary shifts on each chromosome; :mod:`..search.operators`);
3. the changed offspring are evaluated; the ``HallOfFame`` keeps the best distinct individuals
   ever seen, and the best ``elites`` of them join the next population (elitism).

DGAP plugs into the shared search loop (:mod:`..search.loop`) through :class:`DGAPEngine`, an
ask/tell adapter around DEAP's toolbox: ``ask`` runs selection and ``varAnd`` and hands the loop the
offspring without a valid fitness; ``tell`` sets their fitness and updates the ``HallOfFame``
and a DEAP ``Logbook`` (kept in the typed history's ``extra["logbook"]``). The loop's objective
is the reference recurrence one individual at a time (the ``python`` evaluator backend).

The initial population is seeded (:func:`..search.seeding.seed_plans`): best EDP(M) plans, the
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
from collections.abc import Callable
from typing import Any

import numpy as np
from deap import algorithms, base, tools

from ...plan import Plan
from ...problem import Problem
from ...simulator import gpipe_recurrence, simulate
from ..evaluation.objective import CutBitsObjective, FamilyObjective, Genomes, Objective
from ..search.base import Budget
from ..search.caps import clamp_caps, memory_cap_limits, random_caps
from ..search.ga import (
    GA_DEFAULTS,
    SCHEDULE_SETTINGS,
    check_ga_settings,
    check_schedule_setting,
    ga_population,
)
from ..search.loop import Evaluate, History, SearchAlgorithm, SearchPlanner
from ..search.operators import list_cap_crossover, list_cap_mutation, list_crossover, list_mutation
from ..search.seeding import add_family_seeds, initial_population, seed_plans

__all__ = ["DGAP", "DGAPEngine", "Individual", "make_toolbox", "new_logbook"]


class FitnessMin(base.Fitness):
    """Single objective: iteration time, minimized."""

    weights = (-1.0,)


class Individual(list):
    """A list of chromosomes (``[fwd]`` in stash mode, ``[fwd, bwd]`` in recompute mode),
    plus the cap genes ``K[s]`` last when the run searches the schedule family."""

    def __init__(self, chromosomes: Any = ()) -> None:
        super().__init__(chromosomes)
        self.fitness = FitnessMin()


def decode(ind: list[list[int]], S: int, B: int, mode: str, family: bool = False) -> Plan:
    """An individual -> :class:`Plan` (stash: backward tied to forward; ``family``: the last
    chromosome is the caps), by :meth:`Plan.from_bits` (:mod:`umpipe_bench.codec`)."""
    shape = (S, B - 1)
    fb = np.asarray(ind[0], dtype=np.uint8).reshape(shape)
    bb = None if mode == "stash" else np.asarray(ind[1], dtype=np.uint8).reshape(shape)
    return Plan.from_bits(fb, bb, mode, ind[-1] if family else None)


def new_logbook() -> tools.Logbook:
    """DGAP's DEAP Logbook: one row per generation (population ``min``/``avg``, ``best``)."""
    lb = tools.Logbook()
    lb.header = ["gen", "evals", "nevals", "min", "avg", "best"]
    return lb


def make_toolbox(problem: Problem, mode: str, settings: dict[str, Any]) -> base.Toolbox:
    """A fresh DEAP toolbox: ``evaluate``, ``select``, ``mate``, ``mutate``, ``clone``."""
    S, B = problem.S, problem.B
    stage_len = B - 1
    flip, shift = float(settings["flip_rate"]), float(settings["shift_rate"])
    family = settings.get("schedule", "gpipe") == "capped"
    cap_rate = float(settings.get("cap_rate", 0.0))
    nbits = 2 if mode == "recompute" else 1

    def evaluate(ind: Individual) -> tuple[float]:
        if family:
            return (simulate(problem, decode(ind, S, B, mode, True)).iteration_time,)
        return (gpipe_recurrence(problem, decode(ind, S, B, mode)),)

    def mate(a: Individual, b: Individual) -> tuple[Individual, Individual]:
        for ca, cb in zip(a[:nbits], b[:nbits]):
            list_crossover(ca, cb)
        if family:
            list_cap_crossover(a[-1], b[-1])
        return a, b

    def mutate(a: Individual) -> tuple[Individual]:
        for c in a[:nbits]:
            list_mutation(c, stage_len, flip, shift)
        if family:
            list_cap_mutation(a[-1], B, cap_rate)
        return (a,)

    tb = base.Toolbox()
    tb.register("evaluate", evaluate)
    tb.register("select", tools.selTournament, tournsize=int(settings["tournament"]))
    tb.register("mate", mate)
    tb.register("mutate", mutate)
    tb.register("clone", copy.deepcopy)
    return tb


class DGAPEngine(SearchAlgorithm):
    """One DGAP run as an ask/tell algorithm around a DEAP toolbox (module docstring)."""

    def __init__(self, problem: Problem, mode: str, settings: dict[str, Any],
                 population: int, seed: int | None,
                 objective: Objective | None = None) -> None:
        self.problem, self.mode, self.settings = problem, mode, settings
        self.S, self.B = problem.S, problem.B
        self.P = population
        self.elites = int(settings["elites"])
        self.np_rng = np.random.default_rng(seed)
        self._rand_state = random.Random(seed).getstate()
        self.objective = objective or CutBitsObjective(problem, mode, "python")
        self.family = isinstance(self.objective, FamilyObjective)
        self.toolbox = make_toolbox(problem, mode, settings)
        self.hof = tools.HallOfFame(self.elites)
        self.logbook = new_logbook()
        self.generation = 0
        self.evaluations = 0
        self.population: list[Individual] = []
        self.seed_labels: list[str] = []
        self._offspring: list[Individual] = []
        self._invalid: list[Individual] = []
        self.best_time = float("inf")
        self.start_time = float("inf")

    def _with_random(self, fn: Callable[[], Any]) -> Any:
        outer = random.getstate()
        random.setstate(self._rand_state)
        try:
            return fn()
        finally:
            self._rand_state = random.getstate()
            random.setstate(outer)

    def _to_genomes(self, inds: list[Individual]) -> Genomes:
        shape = (len(inds), self.S, self.B - 1)
        f = np.array([ind[0] for ind in inds], dtype=np.uint8).reshape(shape)
        k = (np.array([ind[-1] for ind in inds], dtype=np.int64).reshape(len(inds), self.S)
             if self.family else None)
        if self.mode == "stash":
            return Genomes(f, f, k)
        return Genomes(f, np.array([ind[1] for ind in inds], dtype=np.uint8).reshape(shape), k)

    def _record(self, nevals: int) -> None:
        times = np.array([ind.fitness.values[0] for ind in self.population])
        self.best_time = float(self.hof[0].fitness.values[0])
        self.logbook.record(gen=self.generation, evals=int(nevals), nevals=self.evaluations,
                            min=float(times.min()), avg=float(times.mean()),
                            best=self.best_time)

    def setup(self, evaluate: Evaluate) -> None:
        def bits_eval(fb: np.ndarray, bb: np.ndarray) -> np.ndarray:
            self.evaluations += fb.shape[0]
            return evaluate(Genomes(fb, fb if self.mode == "stash" else bb))

        seeds = seed_plans(self.problem, self.mode, bits_eval,
                           int(self.settings["edp_seeds"]), bool(self.settings["greedy_seeds"]))
        if self.family:
            def counted(g: Genomes) -> np.ndarray:
                self.evaluations += len(g)
                return evaluate(g)
            seeds = add_family_seeds(self.problem, self.mode, seeds, counted)
        fb, bb, n_seed = initial_population(self.problem, self.mode, self.P, self.np_rng, seeds)
        self.seed_labels = seeds.labels[:n_seed]
        if self.family:
            caps = np.full((self.P, self.S), self.B, np.int64)
            caps[:n_seed] = seeds.caps[:n_seed]
            caps[n_seed:] = random_caps(self.np_rng, self.P - n_seed, self.S, self.B)
            clamp_caps(caps[n_seed:], memory_cap_limits(self.problem, self.mode))
        pop = []
        for n in range(self.P):
            chroms = [fb[n].reshape(-1).tolist()]
            if self.mode == "recompute":
                chroms.append(bb[n].reshape(-1).tolist())
            if self.family:
                chroms.append(caps[n].tolist())
            pop.append(Individual(chroms))
        for n in range(n_seed):
            pop[n].fitness.values = (float(seeds.times[n]),)
        rest = pop[n_seed:]
        if rest:
            g = self._to_genomes(rest)
            times = (evaluate(g) if self.family else bits_eval(*self._split(g)))
            if self.family:
                self.evaluations += len(rest)
            for ind, t in zip(rest, times):
                ind.fitness.values = (float(t),)
        self.population = pop
        self.hof.update(pop)
        self.start_time = min(ind.fitness.values[0] for ind in pop)
        self._record(self.evaluations)

    @staticmethod
    def _split(g: Genomes) -> tuple[np.ndarray, np.ndarray]:
        return g.fwd, g.bwd

    def ask_size(self) -> int:
        return self.P - self.elites

    def ask(self) -> Genomes:
        def gen() -> None:
            tb = self.toolbox
            offspring = tb.select(self.population, self.P - self.elites)
            self._offspring = algorithms.varAnd(offspring, tb, self.settings["cxpb"],
                                                self.settings["mutpb"])

        self._with_random(gen)
        self._invalid = [ind for ind in self._offspring if not ind.fitness.valid]
        return self._to_genomes(self._invalid)

    def tell(self, genomes: Genomes, times: np.ndarray) -> None:
        for ind, t in zip(self._invalid, times):
            ind.fitness.values = (float(t),)
        self.evaluations += len(self._invalid)
        self.hof.update(self._offspring)
        tb = self.toolbox
        self.population = self._offspring + [tb.clone(e) for e in self.hof[: self.elites]]
        self.generation += 1
        self._record(len(self._invalid))

    def best(self) -> tuple[Genomes, float]:
        ind = self.hof[0]
        return self._to_genomes([ind]), float(ind.fitness.values[0])

    def best_plan(self) -> tuple[Plan, float]:
        ind = self.hof[0]
        return (decode(ind, self.S, self.B, self.mode, self.family),
                float(ind.fitness.values[0]))


class DGAP(SearchPlanner):
    """Dual-chromosome GA on DEAP, reference fitness one individual at a time.

    Settings: :data:`..search.ga.GA_DEFAULTS` and :data:`..search.ga.SCHEDULE_SETTINGS`
    (docs/SETTINGS.md); with cap genes the fitness is the list simulator one plan at a time,
    without them the GPipe recurrence.
    """

    name = "dgap"
    default_budget = "evals:20000"
    defaults = GA_DEFAULTS.plus(*SCHEDULE_SETTINGS.rows.values())

    def check_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        s = check_ga_settings(self.name, settings)
        check_schedule_setting(self.name, s)
        return s

    def make_objective(self, problem: Problem, mode: str, settings: dict[str, Any]
                       ) -> Objective:
        if settings["schedule"] == "capped":
            return FamilyObjective(problem, mode, "python")
        return CutBitsObjective(problem, mode, "python")

    def make_algorithm(self, problem: Problem, mode: str, settings: dict[str, Any],
                       budget: Budget, seed: int | None, objective: Objective
                       ) -> SearchAlgorithm:
        P = ga_population(self.name, problem, mode, settings, budget)
        return DGAPEngine(problem, mode, settings, P, seed, objective)

    def finish(self, history: History, algo: SearchAlgorithm) -> None:
        assert isinstance(algo, DGAPEngine)
        history.extra["logbook"] = algo.logbook

