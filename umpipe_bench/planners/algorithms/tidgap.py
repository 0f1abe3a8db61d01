"""TiDGAP: DGAP's search with both levels of the paper's acceleration (docs/MODEL.md §4).

Same encoding, seeding (plus one seed plan of its own, the stage descent below), operator
distributions, elitism and budget accounting as :mod:`.dgap`; what changes is how a generation
is computed:

* **evaluation**: the changed offspring of a whole generation are evaluated in one call of
  the objective (:class:`..evaluation.objective.CutBitsObjective`: all individuals and all
  microbatches at once; ``backend`` auto = compiled numba loops, bit-identical to the reference;
  numpy = the closed form as matrix operations; torch = the closed form on a torch device);
* **variation**: the population is two preallocated uint8 buffers ``[P, S*(B-1)]`` per
  chromosome (this generation and the next, swapped); selection, crossover and mutation of a
  whole generation are one compiled call (:mod:`..search._variation`) that writes the changed
  offspring first, so the evaluator reads one contiguous slice. No per-individual Python
  object, clone, fitness wrapper or per-generation plan decoding.

Robustness over seeds (the same budget, less luck) comes from a large population (up to 1024,
:func:`..search.ga.population_size`), mutation that moves boundaries more than it adds or removes
them (DGAP's flip rate, four times its shift rate: on the schedule family, at the same budget, the
median gap to the best plan then known fell from +3.2 % to +2.0 % on vgg16 recompute and from
+2.4 % to +1.6 % on gpt1-14 stash, `git show ddbefaf:results/perf/quality.md`) and a stage-copy
mutation (a stage takes a neighbour stage's partition, ``copy_rate``), and from three means measured
on the schedule family (`git show ddbefaf:results/perf/quality.md`):

* **equal T prefers larger caps**: T is a maximum over paths, so most cap genes do not change
  it, and without a preference they drift to low values that later block the moves a better
  plan needs. Selection and elitism break ties in T by the caps' sum
  (:func:`..search._variation.cap_ties`); with it every seed of gpt1-14 stash reached the plan only
  one run in 24 had found, and some a better one;
* **forward/backward copies** (recompute, ``sync_rate``): a mutation may give one stage's
  backward chromosome its forward partition, or the reverse. Runs got stuck with coarse
  forward microbatches on the first stages and fine backward ones, a valley for one-bit
  moves; with the copy the vgg16 recompute median over 20 seeds fell from 1.034 to 1.017;
* **islands** (``islands``, 4): a run's outcome is mostly decided early, so four populations
  of a quarter each run side by side from the same seeds, and the worse half stops at evenly
  spaced points up to the ``race`` fraction of the budget (:class:`IslandEngine`). Only when
  each island gets at least :data:`ISLAND_FLOOR` individuals (gpt1-14, vgg16; not at S = 64,
  B = 1024, where the budget buys a population of 128);
* **mixed islands** (``mixed_islands``, true): half the islands start from the seed plans and
  half from random individuals, and a halving keeps the better half of each kind while each
  kind has two or more. Seeded islands alone share the seeds' basins (the seed plans, far
  better than random ones, take the populations over); random islands alone
  (``seed_islands=false``) find better basins on vgg16 but lose 2-7 % on vgg16-cuda, where
  the 1F1B-EDP seed leads to the best plans. With both kinds, at 1,000,000 evaluations vgg16's
  median gaps went from +2.2 % (seeded) to +1.14 % / +1.43 % (stash / recompute, 40 seeds) and
  vgg16-cuda kept the seeded plans (`git show ddbefaf:results/perf/quality.md`);
* **restarts** (``restarts``; ``auto``: :func:`auto_restarts`, 8 on gpt1-14 and vgg16 at the
  default budget, 1 at S = 64, B = 1024): a run settles into one basin within about 1,000,000
  evaluations and then stays there (vgg16 stash, seeds 0-2: the same T at 4,000,000 as at
  1,000,000, to 0.03 %), so the budget is split into rounds, each a fresh run from its own
  random stream, and the best round wins (:class:`RestartEngine`). On vgg16, seeds 0-9,
  against the best plans then known: one run of 1,000,000, median gap +1.58 % /
  +1.30 % (stash / recompute), worst +4.03 % / +4.69 %; four rounds +1.33 % / +0.68 %, worst
  +2.19 % / +1.25 %; eight rounds +0.92 % / +0.50 %, worst +1.55 % / +1.25 % (the default's
  figures with the stage descent: results/perf/quality.md);
* **revival** (``revive``; ``auto``: 15 % of the budget in stash, off in recompute): when the
  last island has not improved for that share of the budget, it retires and the best stopped
  island resumes. On gpt1-14 stash a run that ends in the trap at +2.01 % has its last
  improvement at a quarter to a half of the budget; with revival the seeds within 2 % of the
  best plan rose from 54 to 72 of 80 (seeds 0-79), vgg16 stash unchanged.

* **stage descent** (``descent``, true): before the search, one more seed plan, made from the
  best seed plan by coordinate descent over per-stage equal splits and caps
  (:mod:`.descent`; at most :data:`.descent.DESCENT_SHARE` of an evaluation budget, and only
  when that pays for one whole sweep). The GA moves one cut bit at a time, so on a long
  chromosome it cannot change how many microbatches a stage uses; the descent moves whole
  stages. At S = 64, B = 1024 (seed 0, default budget) T fell from 73.29 to 69.07 in
  recompute and from 54.43 to 53.60 in stash, and doubling the budget now gains a median
  0.14 % / 0.28 % over seeds 0-4 (1.75 % / 0.78 % without the descent, seed 0); on
  sim-s32-b256-s0 from 9.358 to 8.636 / 7.174 to 6.766 (results/perf/convergence.md). With two
  or more seeded islands the first starts without the descent's plan, which takes a population
  over: on gpt1-14 stash the median evaluations to within 0.5 % of the best plan were
  413,236 with it in every seeded island, 137,765 so, 137,112 without the descent.

Optionally, when the best has not improved for
``patience`` generations, the next generation is a *local* one: every offspring is the best
individual plus one random move (a flip or a boundary shift; :func:`..search._variation.vary`), a
sampled neighbourhood of the best, and the best neighbour replaces the best if it is better (the
rest of the population is kept, so it keeps its diversity). Local generations repeat while they
improve the best. When the GA is stuck again right after two local searches failed, the next
generation *restarts* the population: fresh random individuals beside the elites. ``patience=0``
(the default) turns both off: with the population, mutation rates and stage-copy mutation below,
they did not help at the default budget (`git show ddbefaf:results/perf/quality.md`).

Randomness comes from one ``numpy.random.Generator(seed)`` (restart rounds and islands: one
stream each, spawned from the seed): same seed, same result (for evaluation and generation
budgets; a seconds budget stops wherever the clock says).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ...problem import Problem
from ..evaluation.encoding import random_bits
from ..evaluation.evaluator import BACKENDS
from ..evaluation.objective import CutBitsObjective, FamilyObjective, Genomes, Objective
from ..search.base import Budget, PlannerError
from ..search.caps import clamp_caps, memory_cap_limits, random_caps
from ..search.ga import GA_DEFAULTS, check_ga_settings, check_schedule_setting, ga_population
from ..search.loop import Evaluate, SearchAlgorithm, SearchPlanner
from ..search.seeding import Seeds, add_family_seeds, initial_population, seed_plans
from ..search.settings import auto_or
from ..search.threads import apply_threads, parse_threads
from .descent import add_descent_seed, descent_allowance, without_descent

__all__ = ["BUDGET_CAP", "BUDGET_PER_BIT", "BUDGET_WORK", "ISLAND_FLOOR", "MAX_RESTARTS",
           "REVIVE_AUTO", "ROUND_FLOOR", "ROUND_PER_BIT", "IslandEngine", "RestartEngine",
           "TiDGAP", "TiDGAPEngine", "auto_restarts", "default_evaluations", "parse_restarts",
           "parse_revive"]

#: TiDGAP's default budget (:func:`default_evaluations`): the larger of ``BUDGET_PER_BIT``
#: evaluations per cut bit (``12*S*(B-1)``: 785,664 at S = 64, B = 1024, where, with the stage
#: descent, doubling it gains a median 0.28 % stash / 0.14 % recompute over seeds 0-4,
#: results/perf/convergence.md) and a fixed amount of simulation work,
#: ``BUDGET_WORK / (S*(B-1))`` evaluations (the work of 8,000,000 evaluations of a 512-bit
#: chromosome, about 80 s on one core here), at most ``BUDGET_CAP``. On gpt1-14 and vgg16 that
#: is eight restart rounds of 1,000,000 (:data:`ROUND_FLOOR`); a single run at 4,000,000 ends
#: where it ends at 1,000,000 (`git show ddbefaf:results/perf/quality.md`).
BUDGET_PER_BIT = 12
BUDGET_WORK = 4_096_000_000
BUDGET_CAP = 8_000_000
#: ``restarts=auto``: as many rounds as the evaluation budget gives each at least
#: ``max(ROUND_FLOOR, ROUND_PER_BIT*S*(B-1))`` evaluations, at most ``MAX_RESTARTS``. A vgg16
#: run converges within about 1,000,000; at S = 64, B = 1024 a run is still improving at
#: 3,000,000 (without the stage descent), so rounds there would
#: only cut it short.
ROUND_FLOOR = 1_000_000
ROUND_PER_BIT = 64
MAX_RESTARTS = 8
#: The smallest island population: a run whose population (:func:`..search.ga.population_size`)
#: would give each of the ``islands`` fewer individuals runs as one population (at S = 64,
#: B = 1024 the default budget buys a population of 128, which needs every individual).
ISLAND_FLOOR = 128


#: ``revive=auto``: after the race, the budget fraction the last island may go without
#: improving before the best stopped island resumes in its place, per memory mode. On
#: gpt1-14 stash the seeds within 2 % of the best plan rose from 28 to 37 of seeds 0-39 and
#: from 26 to 35 of seeds 40-79, vgg16 stash unchanged; in recompute vgg16 got worse (median
#: +3.44 % to +5.32 %), so it is off there (`git show ddbefaf:results/perf/quality.md`).
REVIVE_AUTO = {"stash": 0.15, "recompute": 0.0}


def parse_revive(planner: str, value: Any) -> float | str:
    """``"auto"`` or a number in [0, 1]; anything else is a PlannerError."""
    return auto_or(planner, "revive", value, float, lambda r: 0.0 <= r <= 1.0,
                   "a number in [0, 1]")


def default_evaluations(problem: Problem) -> int:
    """The default evaluation budget for ``problem`` (see :data:`BUDGET_PER_BIT`)."""
    L = max(1, problem.S * (problem.B - 1))
    return max(BUDGET_PER_BIT * L, min(BUDGET_CAP, BUDGET_WORK // L))


def auto_restarts(problem: Problem, budget: Budget) -> int:
    """``restarts=auto`` (see :data:`ROUND_FLOOR`): 1 without an evaluation budget."""
    if budget.evaluations is None:
        return 1
    L = problem.S * (problem.B - 1)
    return max(1, min(MAX_RESTARTS, budget.evaluations // max(ROUND_FLOOR, ROUND_PER_BIT * L)))


def parse_restarts(planner: str, value: Any) -> int | str:
    """``"auto"`` or an integer >= 1; anything else is a PlannerError."""
    return auto_or(planner, "restarts", value, int, lambda n: n >= 1, "an integer >= 1")


class TiDGAPEngine(SearchAlgorithm):
    """One TiDGAP run over array populations (ask/tell; :class:`..search.loop.SearchLoop`
    drives)."""

    def __init__(self, problem: Problem, mode: str, settings: dict[str, Any],
                 population: int, seed: int | np.random.SeedSequence | None,
                 objective: Objective | None = None, evaluations: int | None = None) -> None:
        from ..search import _variation

        self._vary = _variation
        self.problem, self.mode, self.settings = problem, mode, settings
        self.S, self.B = problem.S, problem.B
        self.L = self.S * (self.B - 1)
        self.P = population
        self.elites = int(settings["elites"])
        self.patience = int(settings.get("patience", 0))
        self.rng = np.random.default_rng(seed)
        self.objective = objective or CutBitsObjective(
            problem, mode, settings.get("backend", "auto"), settings.get("device") or None)
        self.recompute = mode == "recompute"
        # the schedule family (docs/SCHEDULES.md): per-stage in-flight cap genes beside the
        # bits; [P, 0] arrays when the objective is the GPipe recurrence
        self.family = isinstance(self.objective, FamilyObjective)
        self.Sk = self.S if self.family else 0
        self._k = [np.full((self.P, self.Sk), self.B, np.int64) for _ in range(2)]
        self.cap_limits = memory_cap_limits(problem, mode) if self.family else None
        shape = (self.P, self.L)
        self._f = [np.zeros(shape, np.uint8), np.zeros(shape, np.uint8)]
        self._b = ([np.zeros(shape, np.uint8), np.zeros(shape, np.uint8)]
                   if self.recompute else self._f)
        self._t = [np.full(self.P, np.inf), np.full(self.P, np.inf)]
        # the tie-break between equal T (lower wins: larger caps, _variation.cap_ties)
        self._tie = [np.zeros(self.P, np.int64), np.zeros(self.P, np.int64)]
        self.cur = 0
        self.elite_idx = np.zeros(0, np.int64)
        self.seed_labels: list[str] = []
        self.generation = 0
        self.stale = 0
        self.fails = 0
        self.neutral = 0
        self.phase = "ga"  # or "local" (around the best) or "restart" (fresh random rest)
        # polish: the last ``polish`` fraction of an evaluation budget is local generations
        polish = float(settings.get("polish", 0.0))
        self.polish_from = (None if evaluations is None or polish <= 0
                            else evaluations * (1.0 - polish))
        self.polishing = False
        self.budget_evaluations = evaluations  # the stage descent's allowance is a share
        self.used = 0  # evaluations this engine asked for (setup and generations)
        self._nc = 0
        s = settings
        # the variation call's settings, parsed once: (tournament, cxpb, mutpb, flip_rate,
        # shift_rate, copy_rate) and (cap_rate, B)
        rates = (int(s["tournament"]), float(s["cxpb"]), float(s["mutpb"]),
                 float(s["flip_rate"]), float(s["shift_rate"]), float(s.get("copy_rate", 0.0)))
        self._rates = (rates, (float(s.get("cap_rate", 0.0)), self.B))
        self._nu = self._vary.uniforms_needed(self.P, rates[0], rates[3], rates[4], self.Sk)
        self._sync = float(s.get("sync_rate", 0.0))
        self._used = np.zeros(1, np.int64)  # uniforms the last vary call read
        self._guess = self._nu  # how many to draw for the next call (_vary_stream)
        self.best_time = float("inf")
        self.start_time = float("inf")
        # the seed plans: given (a later round of :class:`RestartEngine`: evaluated once, in
        # the first round) or made in setup()
        self.preset_seeds: Seeds | None = None
        self.seeds: Seeds | None = None

    # ---------------------------------------------------------------- views
    @property
    def pop_f(self) -> np.ndarray:
        return self._f[self.cur]

    @property
    def pop_b(self) -> np.ndarray:
        return self._b[self.cur]

    @property
    def times(self) -> np.ndarray:
        return self._t[self.cur]

    @property
    def pop_k(self) -> np.ndarray:
        return self._k[self.cur]

    @property
    def tie(self) -> np.ndarray:
        return self._tie[self.cur]

    def _genomes(self, f: np.ndarray, b: np.ndarray, k: np.ndarray | None = None) -> Genomes:
        shape = (f.shape[0], self.S, self.B - 1)
        gf = f.reshape(shape)
        return Genomes(gf, b.reshape(shape) if self.recompute else gf,
                       k if self.family else None)

    def _bits_eval(self, evaluate: Evaluate) -> Any:
        def run(fb: np.ndarray, bb: np.ndarray) -> np.ndarray:
            return evaluate(Genomes(fb, bb if self.recompute else fb))
        return run

    # ---------------------------------------------------------------- ask/tell hooks
    def setup(self, evaluate: Evaluate) -> None:
        seeds = self.preset_seeds if self.preset_seeds is not None else self.make_seeds(evaluate)
        self.seeds = seeds
        self.populate(seeds, evaluate)

    def _counting(self, evaluate: Evaluate) -> Evaluate:
        def counted(g: Genomes) -> np.ndarray:
            self.used += len(g)
            return evaluate(g)
        return counted

    def make_seeds(self, evaluate: Evaluate) -> Seeds:
        """The seed plans (EDP scans, greedy plans, the family's 1F1B-EDP plans and the stage
        descent from the best of them), evaluated, best first."""
        s = self.settings
        evaluate = self._counting(evaluate)
        seeds = seed_plans(self.problem, self.mode, self._bits_eval(evaluate),
                           int(s["edp_seeds"]), bool(s["greedy_seeds"]))
        if self.family:
            seeds = add_family_seeds(self.problem, self.mode, seeds, evaluate)
        allowance = descent_allowance(self.problem, self.mode, s, self.budget_evaluations)
        if allowance != 0 and len(seeds.labels):
            seeds = add_descent_seed(seeds, evaluate, self.mode, allowance, self.cap_limits)
        return seeds

    def populate(self, seeds: Seeds, evaluate: Evaluate) -> None:
        """The initial population: the best seeds, then random individuals (evaluated)."""
        evaluate = self._counting(evaluate)
        fb, bb, n_seed = initial_population(self.problem, self.mode, self.P, self.rng, seeds)
        self.seed_labels = seeds.labels[:n_seed]
        self.pop_f[:] = fb.reshape(self.P, self.L)
        if self.recompute:
            self.pop_b[:] = bb.reshape(self.P, self.L)
        if self.family:
            k = self.pop_k
            k[:n_seed] = seeds.caps[:n_seed]
            k[n_seed:] = random_caps(self.rng, self.P - n_seed, self.S, self.B)
            clamp_caps(k[n_seed:], self.cap_limits)
        self.tie[:] = self._vary.cap_ties(self.pop_k, self.B)
        t = self.times
        t[:n_seed] = seeds.times[:n_seed]
        t[n_seed:] = evaluate(self._genomes(self.pop_f[n_seed:], self.pop_b[n_seed:],
                                            self.pop_k[n_seed:]))
        self.start_time = float(t.min())
        self._update_elites()

    def _update_elites(self) -> None:
        """The best ``elites`` distinct individuals (a hall of fame: with elitism the
        population always holds the best ever found); equal T: larger caps first."""
        self.elite_idx = self._vary.elite_rows(self.pop_f, self.pop_b, self.pop_k, self.times,
                                               self.tie, self.elites, self.recompute)
        best = float(self.times[self.elite_idx[0]])
        if best < self.best_time:
            self.best_time = best
            self.stale = 0
        else:
            self.stale += 1

    def ask_size(self) -> int:
        return self.P - self.elites

    def ask(self) -> Genomes:
        nxt = 1 - self.cur
        n_off = self.P - self.elites
        nf, nb, nt, nk = self._f[nxt], self._b[nxt], self._t[nxt], self._k[nxt]
        rates, caps = self._rates
        args = (self.pop_f, self.pop_b, self.times, nf, nb, nt, n_off, *rates, self.B - 1,
                self.recompute, self.phase == "local", int(self.elite_idx[0]),
                self.pop_k, nk, *caps, self.tie, self._sync)
        nc = self._vary_stream(args)
        self._nc = int(nc)
        if self.phase == "restart":
            nf[:n_off] = random_bits(self.rng, n_off, self.S, self.B).reshape(n_off, self.L)
            if self.recompute:
                nb[:n_off] = random_bits(self.rng, n_off, self.S, self.B).reshape(
                    n_off, self.L)
            if self.family:
                nk[:n_off] = random_caps(self.rng, n_off, self.S, self.B)
            self._nc = n_off
        if self.family:
            clamp_caps(nk[:self._nc], self.cap_limits)
        el = self.elite_idx
        nf[n_off:n_off + el.size] = self.pop_f[el]
        if self.recompute:
            nb[n_off:n_off + el.size] = self.pop_b[el]
        nk[n_off:n_off + el.size] = self.pop_k[el]
        nt[n_off:n_off + el.size] = self.times[el]
        if self.family:  # without cap genes every tie is 0
            self._tie[nxt][:] = self._vary.cap_ties(nk, self.B)
        return self._genomes(nf[:self._nc], nb[:self._nc], nk[:self._nc])

    def _vary_stream(self, args: tuple[Any, ...]) -> int:
        """One :func:`..search._variation.vary` call on ``self._nu`` uniforms of the run's stream.

        A call reads a prefix of its uniforms, typically 40 % of the generous ``self._nu``,
        and drawing them is a tenth of a generation where evaluation is cheap. So only a
        prefix is drawn (a quarter more than the last call read), and the generator is then
        advanced past the rest (``bit_generator.advance``: one 64-bit output per double):
        the stream, and so every result, is the same as drawing all ``self._nu``. A prefix
        too short is completed to ``self._nu`` and the call repeated; when even those run
        out (rare), twice as many fresh ones are drawn, as before.
        """
        vary, rng, used = self._vary.vary, self.rng, self._used
        m = min(self._nu, self._guess)
        u = rng.random(m)
        nc = vary(u, *args, used)
        if nc >= 0:
            if m < self._nu:
                rng.bit_generator.advance(self._nu - m)
        elif m < self._nu:
            nc = vary(np.concatenate([u, rng.random(self._nu - m)]), *args, used)
        while nc < 0:  # ran out of uniforms (rare): draw twice as many and vary again
            self._nu *= 2
            nc = vary(rng.random(self._nu), *args, used)
        self._guess = int(used[0]) + int(used[0]) // 4 + 64
        return int(nc)

    def tell(self, genomes: Genomes, times: np.ndarray) -> None:
        nxt = 1 - self.cur
        self.generation += 1
        self.used += int(times.size)
        if self.polishing:
            self._polish_step(times)
            return
        if self.phase == "local":
            # A local generation only moves the best individual (Lamarckian): to its best
            # neighbour when that is better, or equal (a step along a plateau: T is a max over
            # stages, so most moves leave it unchanged; up to ``patience`` such steps in a
            # row). The rest of the population keeps its diversity.
            moved, improved = self._move_best(times, self.neutral < self.patience)
            self._update_elites()
            if improved:
                self.fails = self.neutral = 0
            elif moved:
                self.neutral += 1
            else:
                self.fails += 1
                self.neutral = self.stale = 0
                self.phase = "ga"
            return
        self._t[nxt][:self._nc] = times
        self.cur = nxt
        self._update_elites()
        if self.stale == 0:
            self.fails = 0
        self.phase = "ga"
        if self.polish_from is not None and self.used >= self.polish_from:
            self.polishing = True
            self.phase = "local"
            return
        if 0 < self.patience <= self.stale:
            # Stuck: search around the best; stuck again right after: restart the rest.
            self.phase = "restart" if self.fails >= 2 else "local"
            if self.phase == "restart":
                self.fails = 0
                self.stale = 0

    def _move_best(self, times: np.ndarray, accept_equal: bool) -> tuple[bool, bool]:
        """Move the best individual to its best sampled neighbour (this generation's offspring)
        when that is better, or equal with larger caps, or equal and ``accept_equal`` (a step
        along a plateau of T, a max over stages); returns ``(moved, improved)``."""
        if not times.size:
            return False, False
        nxt = 1 - self.cur
        tie = self._tie[nxt][:times.size]
        j = int(self._vary.elite_order(times, tie)[0])
        e = int(self.elite_idx[0])
        improved = bool(times[j] < self.times[e])
        equal = bool(times[j] == self.times[e])
        if not (improved or (equal and (accept_equal or tie[j] < self.tie[e]))):
            return False, improved
        self.pop_f[e] = self._f[nxt][j]
        if self.recompute:
            self.pop_b[e] = self._b[nxt][j]
        self.pop_k[e] = self._k[nxt][j]
        self.tie[e] = tie[j]
        self.times[e] = times[j]
        return True, improved

    def _polish_step(self, times: np.ndarray) -> None:
        """A polishing generation: the best moves to its best sampled neighbour when that is
        better or equal."""
        self._move_best(times, accept_equal=True)
        self._update_elites()

    def best(self) -> tuple[Genomes, float]:
        i = int(self.elite_idx[0])
        return (self._genomes(self.pop_f[i:i + 1], self.pop_b[i:i + 1], self.pop_k[i:i + 1]),
                float(self.times[i]))


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

    def ask(self) -> Genomes:
        parts = [self.islands[i].ask() for i in self.active]
        self._sizes = [len(g) for g in parts]
        f = np.concatenate([g.fwd for g in parts])
        b = f if parts[0].bwd is parts[0].fwd else np.concatenate([g.bwd for g in parts])
        k = None if parts[0].caps is None else np.concatenate([g.caps for g in parts])
        return Genomes(f, b, k)

    def tell(self, genomes: Genomes, times: np.ndarray) -> None:
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


class RestartEngine(SearchAlgorithm):
    """``R`` independent runs (rounds) one after another, each with ``1/R`` of the budget.

    A TiDGAP run converges to one basin early and then polishes it (on vgg16 the island race
    at 4,000,000 evaluations ends where it ends at 1,000,000,
    `git show ddbefaf:results/perf/quality.md`); runs from different random streams end in different
    basins. So ``restarts`` rounds, each a fresh run (an :class:`IslandEngine` or one
    :class:`TiDGAPEngine`, built by ``build`` for the round's budget and random stream, spawned from
    the run's seed), and the result is the best round's best. The seed plans are evaluated once, in
    the first round; later rounds are given them. A round ends when its share of the budget is spent
    (evaluations: the next generation would not fit; generations; seconds); the last round gets all
    the rest.
    """

    def __init__(self, build: Callable[[Budget, np.random.SeedSequence],
                                       IslandEngine | TiDGAPEngine],
                 budget: Budget, rounds: int, seed: int | None) -> None:
        self.build, self.budget, self.rounds = build, budget, rounds
        self.streams = np.random.SeedSequence(seed).spawn(rounds)
        self.engines: list[IslandEngine | TiDGAPEngine] = []
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
    def current(self) -> IslandEngine | TiDGAPEngine:
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


class TiDGAP(SearchPlanner):
    """DGAP with whole-population evaluation and compiled array variation.

    Budget: without one, ``evals:max(12*S*(B-1), min(8000000, 4096000000 // (S*(B-1))))``
    (:func:`default_evaluations`: at least 12 evaluations per cut bit, and at least the
    simulation work of 8,000,000 evaluations of a 512-bit chromosome; 8,000,000 on gpt1-14 and
    vgg16, 785,664 at S = 64, B = 1024, where doubling it gains a median 0.28 % stash and
    0.14 % recompute over seeds 0-4, results/perf/convergence.md); any
    ``--budget`` overrides it.

    Settings (``--set``): the GA settings of :data:`..search.ga.GA_DEFAULTS` (``population``: the
    largest population, 1024; fewer when the budget would buy too few generations,
    :func:`..search.ga.population_size`; ``flip_rate`` 1 and ``shift_rate`` 8 here: DGAP's flips and
    four times its boundary shifts, measured on the schedule family in
    `git show ddbefaf:results/perf/quality.md`), ``patience``
    (generations without improvement before a local generation; 0, the default: never),
    ``polish`` (the last fraction of an evaluation budget spent on local generations around
    the best, each best move accepted when better or equal; 0, the default: none; needs
    ``islands=1``),
    ``islands`` (4: populations of ``population / islands`` raced by successive halving; 1: one
    population; used only when each island gets at least :data:`ISLAND_FLOOR`),
    ``mixed_islands`` (true, the default: the first half of the islands start from the
    seed plans and the rest from random individuals, and a halving keeps the better half of
    each kind while each kind has two or more: with 4 islands, one of each survives the first
    halving; it overrides ``seed_islands``; false: ``seed_islands`` decides),
    ``seed_islands`` (with ``mixed_islands=false`` only; true: every island starts from the
    seed plans; false: islands start from random individuals and the seed plans only bound
    the result), ``restarts`` (rounds: the budget split into this many independent runs, the
    best wins; ``auto``, the default: :func:`auto_restarts`, as many as give each round at
    least ``max(1000000, 64*S*(B-1))`` evaluations, at most 8; 1 without an evaluation
    budget), ``race``
    (0.25: the budget fraction by which one island is left), ``revive`` (the budget fraction
    the last island may go without improving before the best stopped island resumes;
    ``auto``, the default: 0.15 in stash, 0 in recompute, :data:`REVIVE_AUTO`),
    ``descent`` (true, the default: add the stage descent from the best seed plan to the
    seed plans, :mod:`.descent`, at most 10 % of an evaluation budget and only when that pays
    for one sweep; false: the seed plans DGAP uses),
    ``sync_rate`` (recompute: probability that a mutated offspring also gives one stage's
    backward partition its forward one or the reverse; 0.5),
    ``copy_rate``
    (probability that a mutation also copies one stage's partition onto a neighbour stage:
    aligned neighbours are common in good plans), ``backend`` (auto, numba, numpy, torch,
    python), ``device`` (torch backend: e.g. ``cuda``) and ``threads`` (numba backend: the
    population split over this many threads; ``auto``, the default: 2 threads for an
    evaluator call whose work ``N*S*B`` is at least :data:`..search.threads.AUTO_WORK`, else 1,
    :mod:`..search.threads`), ``schedule`` (``family``: the plan space from
    GPipe to 1F1B, per-stage in-flight cap genes beside the two chromosomes, seeded with the
    best GPipe-EDP and 1F1B-EDP plans that fit, docs/SCHEDULES.md; ``gpipe``: the GPipe
    schedule only, any backend) and ``cap_rate`` (expected cap genes redrawn per mutation).
    """

    name = "tidgap"
    #: The cap of the work floor; :meth:`plan` without a budget uses :meth:`budget_for`.
    default_budget = f"evals:{BUDGET_CAP}"
    defaults = {**GA_DEFAULTS, "population": 1024, "flip_rate": 1.0, "shift_rate": 8.0,
                "patience": 0, "copy_rate": 1.0, "sync_rate": 0.5, "polish": 0.0,
                "islands": 4, "race": 0.25, "revive": "auto", "seed_islands": True,
                "mixed_islands": True, "restarts": "auto", "descent": True,
                "backend": "auto", "device": "", "threads": "auto", "schedule": "family",
                "cap_rate": 1.0}

    def budget_for(self, problem: Problem) -> str:
        """The default budget on ``problem`` (:func:`default_evaluations`)."""
        return f"evals:{default_evaluations(problem)}"

    def check_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        s = check_ga_settings(self.name, settings)
        if s["backend"] not in BACKENDS:
            raise PlannerError(
                f"planner {self.name!r}: backend {s['backend']!r} unknown; valid: "
                f"{', '.join(BACKENDS)}")
        if s["patience"] < 0:
            raise PlannerError(f"planner {self.name!r}: patience must be >= 0")
        if not 0.0 <= s["polish"] < 1.0:
            raise PlannerError(f"planner {self.name!r}: polish must be in [0, 1), got "
                               f"{s['polish']}")
        if not 0.0 <= s["copy_rate"] <= 1.0:
            raise PlannerError(f"planner {self.name!r}: copy_rate must be in [0, 1]")
        if not 0.0 <= s["sync_rate"] <= 1.0:
            raise PlannerError(f"planner {self.name!r}: sync_rate must be in [0, 1], got "
                               f"{s['sync_rate']}")
        s["revive"] = parse_revive(self.name, s["revive"])
        if s["islands"] < 1:
            raise PlannerError(f"planner {self.name!r}: islands must be >= 1, got "
                               f"{s['islands']}")
        s["restarts"] = parse_restarts(self.name, s["restarts"])
        if not 0.0 < s["race"] <= 1.0:
            raise PlannerError(f"planner {self.name!r}: race must be in (0, 1], got "
                               f"{s['race']}")
        if s["polish"] > 0 and s["islands"] > 1:
            raise PlannerError(f"planner {self.name!r}: polish needs islands=1 (it counts one "
                               "population's evaluations), got islands="
                               f"{s['islands']}")
        s["threads"] = parse_threads(self.name, s["threads"])
        check_schedule_setting(self.name, s)
        return s

    def make_objective(self, problem: Problem, mode: str, settings: dict[str, Any]
                       ) -> Objective:
        objective: CutBitsObjective | FamilyObjective
        if settings["schedule"] == "family":
            objective = FamilyObjective(problem, mode)
        else:
            objective = CutBitsObjective(problem, mode, str(settings["backend"]),
                                         settings["device"] or None)
        if objective.backend == "numba":
            apply_threads(objective.evaluator, settings["threads"], problem.S, problem.B)
        return objective

    def make_algorithm(self, problem: Problem, mode: str, settings: dict[str, Any],
                       budget: Budget, seed: int | None, objective: Objective
                       ) -> SearchAlgorithm:
        R = settings.get("restarts", 1)
        R = auto_restarts(problem, budget) if R == "auto" else int(R)
        settings["restarts"] = R  # the result records the rounds run (as the population)
        if R > 1:
            first = RestartEngine(lambda b, ss: self._engine(problem, mode, settings, b, ss,
                                                              objective),
                                  budget, R, seed)
            # a round's budget must hold its population: fail at build time, not mid-run
            try:
                share = first._share(0)
                ga_population(self.name, problem, mode, settings, share,
                              descent_allowance(problem, mode, settings, share.evaluations)
                              or 0)
            except PlannerError as exc:
                raise PlannerError(f"{exc} (restarts={R} gives each round 1/{R} of the "
                                   "budget)") from None
            return first
        return self._engine(problem, mode, settings, budget, seed, objective)

    def _engine(self, problem: Problem, mode: str, settings: dict[str, Any], budget: Budget,
                seed: int | np.random.SeedSequence | None, objective: Objective
                ) -> IslandEngine | TiDGAPEngine:
        """One run: K islands raced, or one population when an island would be too small."""
        P = ga_population(self.name, problem, mode, settings, budget,
                          descent_allowance(problem, mode, settings, budget.evaluations) or 0)
        K = int(settings["islands"])
        if K > 1 and P // K >= ISLAND_FLOOR:
            return IslandEngine(problem, mode, settings, P, seed, objective, budget, K,
                                float(settings["race"]))
        return TiDGAPEngine(problem, mode, settings, P, seed, objective, budget.evaluations)
