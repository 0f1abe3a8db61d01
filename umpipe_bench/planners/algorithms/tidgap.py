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

* **the default budget's polish** (``reach``, 1; ``polish_own``, true): without ``--budget``
  each GA round's own best plan is polished by the iterated descent (then the best plan so far,
  when that did not beat it), with the pair descent's pairs at most ``reach`` bits apart. On
  the default problems, seeds 0-9, one core per run, 178 of 220 runs ended within 0.5 % of
  the best known against 157 with reach 8 and the best plan so far polished after every round
  (and the stop rule's patience 5, no agreement test): the rules of ed5dd18 and 0061ba2 in
  results/perf/plan-speed.md.
  With ``columns`` (true) every full sweep of the pair descent also tries the moves that
  change every stage at once (:func:`.pair_descent.column_moves`): on sim-s8-b64-s0 and
  sim-s16-b64-s1, both modes, seeds 100-105, the final plan was faster in 18 of 24 runs.
  With ``hub`` (``auto``: 0.25) that share of the kicks are hub kicks (:mod:`.iterated`):
  in stash the final plan was faster in 10 of 15 runs (sim-s8-b64-s0 and sim-s16-b64-s1
  seeds 100-105, vgg16 seeds 100-102), in recompute in 10 of 12 (sim-s8-b64-s0 and vgg16
  seeds 200-205; sim-s16-b64-s1 2 of 6, seeds 300-305).

Randomness comes from one ``numpy.random.Generator(seed)`` (restart rounds and islands: one
stream each, spawned from the seed): same seed, same result (for evaluation and generation
budgets; a seconds budget stops wherever the clock says).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import MemoryCapError
from ...plan import Plan
from ...problem import Problem
from ..evaluation.cores import usable_cores
from ..evaluation.evaluator import BACKENDS
from ..evaluation.objective import CutBitsObjective, FamilyObjective, Genomes, Objective
from ..search.base import Budget, PlannerError, PlanResult
from ..search.caps import memory_cap_limits
from ..search.coarse import COARSE_MIN_B, coarse_result, run_coarse
from ..search.ga import (
    GA_DEFAULTS,
    SCHEDULE_SETTINGS,
    check_ga_settings,
    check_schedule_setting,
    ga_population,
)
from ..search.history import History
from ..search.loop import SearchAlgorithm, SearchPlanner, family_plan
from ..search.restarts import RestartEngine
from ..search.settings import Setting
from ..search.settle import SettlingRestarts
from ..search.side_by_side import run_side_by_side
from ..search.threads import apply_threads
from ._tidgap_engine import TiDGAPEngine
from ._tidgap_islands import IslandEngine
from ._tidgap_settings import (
    AUTO_SEARCHES,
    BUDGET_CAP,
    BUDGET_PER_BIT,
    BUDGET_WORK,
    HUB_AUTO,
    ISLAND_FLOOR,
    MAX_RESTARTS,
    REVIVE_AUTO,
    ROUND_FLOOR,
    ROUND_PER_BIT,
    SETTLE,
    auto_restarts,
    default_evaluations,
    parse_restarts,
    parse_revive,
    settle_budget,
    settle_round,
)
from .descent import descent_allowance
from .iterated import iterated_descent
from .pair_descent import pair_descent, pair_sweep_cost

__all__ = ["BUDGET_CAP", "BUDGET_PER_BIT", "BUDGET_WORK", "HUB_AUTO", "ISLAND_FLOOR",
           "MAX_RESTARTS", "REVIVE_AUTO", "ROUND_FLOOR", "ROUND_PER_BIT", "SETTINGS",
           "IslandEngine", "RestartEngine", "TiDGAP", "TiDGAPEngine", "auto_restarts",
           "default_evaluations", "parse_restarts", "parse_revive"]


#: TiDGAP's settings: the GA's (population 1024, flip_rate 1 and shift_rate 8: DGAP's flips and
#: four times its boundary shifts, measured on the schedule family in
#: `git show ddbefaf:results/perf/quality.md`), then its own.
SETTINGS = GA_DEFAULTS.with_defaults(population=1024, flip_rate=1.0, shift_rate=8.0).plus(
    Setting("copy_rate", float, 1.0, "probability that a mutation also copies one stage's "
            "partition onto a neighbour stage", low=0.0, high=1.0),
    Setting("sync_rate", float, 0.5, "recompute: probability that a mutated offspring also "
            "gives one stage's backward partition its forward one, or the reverse",
            low=0.0, high=1.0),
    Setting("islands", int, 4, "populations of population/islands raced by successive "
            f"halving; one population when an island would get fewer than {ISLAND_FLOOR}",
            low=1),
    Setting("race", float, 0.25, "budget fraction by which the race has left one island",
            low=0.0, high=1.0, open_low=True),
    Setting("revive", float, "auto", "budget fraction the last island may go without "
            "improving before the best stopped island resumes; auto: 0.15 in stash, 0 (never) "
            "in recompute", low=0.0, high=1.0, auto=True),
    Setting("seed_islands", bool, True, "with mixed_islands=false: every island starts from "
            "the seed plans (false: from random individuals; the seed plans only bound the "
            "result)"),
    Setting("mixed_islands", bool, True, "the first half of the islands start from the seed "
            "plans, the rest from random individuals; a halving keeps the better half of each "
            "kind"),
    Setting("restarts", int, "auto", "rounds: the budget split into this many independent "
            "runs, the best wins; auto: as many as give each round max(1000000, 64*S*(B-1)) "
            "evaluations, at most 8", low=1, auto=True),
    Setting("round_descent", bool, True, "default budget (no --budget): after each restart "
            "round, its best plan (after a round of the descent alone: the best plan so far) "
            "improved by the iterated descent (the pair descent over pairs of cut bits and "
            "caps, then kicks to a few neighbouring stages, each followed by it)"),
    Setting("kicks", bool, True, "with round_descent: the kicks after the pair descent "
            "(false: the pair descent alone, of each round's own best)"),
    Setting("polish_own", bool, True, "with round_descent and kicks: a GA round's best plan "
            "is polished, not the best plan so far (a round of the descent alone polishes "
            "the best plan so far either way)"),
    Setting("reach", int, 1, "with round_descent: the pair descent flips two cut bits of a "
            "stage together when at most this far apart (1: a boundary moved by one sample)",
            low=1),
    Setting("columns", bool, True, "with round_descent: every full sweep of the pair descent "
            "also tries the moves that change every stage at once (the same first or last "
            "microbatch size, a cut bit set or cleared, a boundary moved by one sample)"),
    Setting("hub", float, "auto", "with round_descent and kicks: the share of kicks that "
            "move a cut of the stage with the fewest microbatches by 1-3 samples and stretch "
            "every stage's cuts between its neighbouring cuts with it (0: none); auto: 0.25 "
            "in both modes", low=0.0, high=1.0, auto=True),
    Setting("descent", bool, True, "add the stage descent from the best seed plan to the seed "
            "plans (at most 10 % of an evaluation budget)"),
    Setting("backend", str, "auto", "evaluator of the GPipe schedule (the schedule family "
            "needs auto or numba)", choices=BACKENDS),
    Setting("device", str, "", "torch backend: the device, e.g. cuda"),
    Setting("threads", int, "auto", "numba backend: the population split over this many "
            "threads; auto: 2 for a call whose work N*S*B is at least 100000 (the schedule "
            "family: 16000), else 1 (with searches above 1: 1 in each search)",
            low=1, auto=True),
    Setting("coarse", bool, "auto", "default budget (no --budget): the search first plans "
            "the problem with its samples merged in pairs (for at most a quarter of the "
            "time cap) and starts from that plan doubled; auto: every search but the first "
            f"of those side by side, on problems of at least {COARSE_MIN_B} samples",
            auto=True),
    Setting("searches", int, "auto", "default budget (no --budget): independent searches "
            "run side by side, one thread each, from seeds derived from --seed (the first: "
            "the seed itself); the plan is the fastest one's; auto: as many as the cores this "
            f"process may use, at most {AUTO_SEARCHES}; with --budget: 1", low=1, auto=True),
).plus(*SCHEDULE_SETTINGS.rows.values())


class TiDGAP(SearchPlanner):
    """DGAP with whole-population evaluation and compiled array variation.

    Budget: without one, the stop rule (:func:`settle_budget`, docs/SEARCH.md "Stopping"):
    restart rounds that grow, each followed by the iterated descent from the best plan so far,
    until :data:`SETTLE`'s ``patience`` rounds in a row gain less than its ``tolerance``, at
    most its ``seconds``; any ``--budget`` is a fixed
    budget (rounds by ``restarts``; :func:`default_evaluations` is the long search's,
    8,000,000 on gpt1-14).

    Settings: the table :data:`SETTINGS` (docs/SETTINGS.md); the measurements behind each
    default are in this module's docstring.
    """

    name = "tidgap"
    #: The cap of the work floor; :meth:`plan` without a budget uses :meth:`budget_for`.
    default_budget = f"evals:{BUDGET_CAP}"
    defaults = SETTINGS

    def budget_for(self, problem: Problem) -> Budget:
        """The default budget on ``problem``: the stop rule (:func:`settle_budget`)."""
        return settle_budget(problem, SETTLE)

    def check_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        s = check_ga_settings(self.name, settings)
        check_schedule_setting(self.name, s)
        return s

    def searches(self, budget: Budget) -> int:
        """How many searches run side by side under ``budget`` (setting ``searches``)."""
        k = self.config.get("searches", "auto")
        if k == "auto":
            return min(AUTO_SEARCHES, usable_cores()) if budget.settle else 1
        if int(k) > 1 and not budget.settle:
            raise PlannerError(f"{self.name} setting 'searches': searches side by side run "
                               f"under the default budget only (no --budget); got {k} with "
                               f"the budget {budget}")
        return int(k)

    #: A plan the search starts from besides its seed plans (:meth:`_plan` with a coarse
    #: start sets it).
    _start: Plan | None = None

    def coarse(self, problem: Problem, budget: Budget, search: int = 0) -> bool:
        """Whether search ``search`` (of those side by side) starts coarse (setting
        ``coarse``): under the default budget only; ``auto``: every search but the first,
        on problems of at least :data:`COARSE_MIN_B` samples."""
        c = self.config.get("coarse", "auto")
        if not budget.settle or problem.B < 2:
            return False
        if c == "auto":
            return search >= 1 and problem.B >= COARSE_MIN_B
        return bool(c)

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        k = self.searches(budget)
        if k <= 1:
            if self.coarse(problem, budget):
                return self._coarse_plan(problem, mode, budget, seed, progress)
            res = super()._plan(problem, mode=mode, budget=budget, seed=seed,
                                progress=progress)
            res.settings["searches"], res.settings["coarse"] = 1, False
            return res
        one = {**self.settings, "searches": 1}
        if self.config["threads"] == "auto":
            one["threads"] = 1

        def make(i: int) -> TiDGAP:
            return type(self)(**{**one, "coarse": self.coarse(problem, budget, i)})

        return run_side_by_side(make, k, problem, mode, budget, seed)

    def _coarse_plan(self, problem: Problem, mode: str, budget: Budget, seed: int | None,
                     progress: bool) -> PlanResult:
        """The coarse search (:func:`..search.coarse.run_coarse`), then this problem's search
        with its plan as one more seed plan."""
        plain = {**self.settings, "searches": 1, "coarse": False}
        try:
            first = run_coarse(lambda: type(self)(**plain), problem, mode, budget, seed)
        except MemoryCapError:  # no plan of the halved problem fits: the search alone
            res = super()._plan(problem, mode=mode, budget=budget, seed=seed,
                                progress=progress)
            res.settings.update(searches=1, coarse=True, coarse_time=None)
            return res
        if first.interrupted is not None:  # a signal in the coarse search: its plan
            first.plan, first.schedule, first.iteration_time = family_plan(problem, mode,
                                                                           first.plan)
            first.settings = {**first.settings, "searches": 1, "coarse": True}
            return first
        self._start = first.plan
        try:
            res = super()._plan(problem, mode=mode, budget=budget, seed=seed,
                                progress=progress)
        finally:
            self._start = None
        res.settings["searches"] = 1
        return coarse_result(first, res)

    def finish(self, history: History, algo: SearchAlgorithm) -> None:
        """Note the default budget's whole rounds (the side-by-side note reads them)."""
        if isinstance(algo, SettlingRestarts):
            history.extra["rounds"] = len(algo.round_best)

    def make_objective(self, problem: Problem, mode: str, settings: dict[str, Any]
                       ) -> Objective:
        objective: CutBitsObjective | FamilyObjective
        if settings["schedule"] == "capped":
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
        if budget.settle:
            return self._settling(problem, mode, settings, budget, seed, objective)
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

    def _settling(self, problem: Problem, mode: str, settings: dict[str, Any], budget: Budget,
                  seed: int | None, objective: Objective) -> SettlingRestarts:
        """The default budget's rounds until settled (docs/SEARCH.md, "Stopping")."""
        rule = SETTLE
        per = settle_round(problem, rule)
        settings["restarts"] = "settle"
        family = settings["schedule"] == "capped"
        limits = memory_cap_limits(problem, mode) if family else None
        room = int(rule.polish_share * per)
        fn = None
        reach = int(settings.get("reach", 1))
        sweep = pair_sweep_cost(problem.S, problem.B, mode, family, reach)
        kicks = bool(settings.get("kicks", True))
        columns = bool(settings.get("columns", True))
        hub = settings.get("hub", "auto")
        hub = HUB_AUTO[mode] if hub == "auto" else float(hub)
        if settings.get("round_descent", True) and room >= sweep:
            def fn(evaluate: Any, genome: Genomes, T: float, allowance: int,
                   rng: np.random.Generator) -> tuple[Genomes, float, int]:
                if not kicks:
                    d = pair_descent(evaluate, genome, T, mode, allowance, limits, reach,
                                     columns)
                    return d.genome, d.time, d.evaluations
                p = iterated_descent(evaluate, genome, T, mode, allowance, rng, limits, reach,
                                     columns, hub)
                return p.genome, p.time, p.evaluations
        return SettlingRestarts(
            lambda b, ss: self._engine(problem, mode, settings, b, ss, objective), budget, seed,
            round_evaluations=per, max_rounds=rule.max_rounds, min_rounds=rule.min_rounds,
            patience=rule.patience, tolerance=rule.tolerance, polish=fn,
            polish_best=kicks,
            polish_share=rule.polish_share, double_every=rule.double_every,
            max_doublings=rule.max_doublings, ga_rounds=rule.ga_rounds,
            polish_own=bool(settings.get("polish_own", True)), agree=rule.agree)

    def _engine(self, problem: Problem, mode: str, settings: dict[str, Any], budget: Budget,
                seed: int | np.random.SeedSequence | None, objective: Objective
                ) -> IslandEngine | TiDGAPEngine:
        """One run: K islands raced, or one population when an island would be too small."""
        P = ga_population(self.name, problem, mode, settings, budget,
                          descent_allowance(problem, mode, settings, budget.evaluations) or 0)
        K = int(settings["islands"])
        if K > 1 and P // K >= ISLAND_FLOOR:
            engine = IslandEngine(problem, mode, settings, P, seed, objective, budget, K,
                                  float(settings["race"]))
            engine.islands[0].start = self._start  # the first island makes the seeds
            return engine
        one = TiDGAPEngine(problem, mode, settings, P, seed, objective, budget.evaluations)
        one.start = self._start
        return one
