"""Outside optimizers as planners: Optuna CMA-ES and GA, nevergrad, pymoo (``[optimizers]``).

Each library's own ask/tell runs inside the project's one search loop
(:class:`umpipe_bench.planners.search.loop.SearchLoop`, which owns the budget, the evaluation
count, the best so far and the typed history) on :class:`umpipe_bench.api.PipelineObjective`,
the public objective any researcher gets (README "Bring your own optimizer"): a flat integer
genome (cut bits, docs/MODEL.md §2; with ``schedule=capped`` also in-flight caps,
docs/SCHEDULES.md) evaluated in batches by the family evaluator (MODEL.md §4). Every planner
first evaluates EDP(M) for ``M = 1..B`` (``B`` counted evaluations) and starts its search from
the best one, so it is never worse than GPipe-EDP; that plan is its starting point.

Budgets: ``evals:N`` caps evaluations (including the scan); ``gens:N`` means N batches of
``popsize`` genomes; ``secs:X`` stops between batches. A plan that does not fit memory scores
``inf``; the libraries are told a large finite penalty instead.

| planner | library | search |
|---|---|---|
| ``optuna-cmaes`` | optuna ``CmaEsSampler`` (``cmaes``, with margin for integers) | CMA-ES |
| ``cmaes`` | the ``cmaes`` package's ``CMAwM`` directly (the same search, ~100x cheaper) | CMA-ES |
| ``optuna-ga`` | optuna ``NSGAIISampler`` (one objective: a GA, uniform crossover) | GA |
| ``nevergrad-ngopt`` | nevergrad ``NGOpt`` (picks an algorithm from dimension and budget) | any |
| ``nevergrad-discrete11`` | nevergrad ``DiscreteOnePlusOne`` | (1+1), discrete mutation |
| ``pymoo-ga`` | pymoo ``GA``, two-point crossover, bit-flip mutation (binary genome) | GA |
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np

from umpipe_bench.api import PipelineObjective
from umpipe_bench.plan import Plan
from umpipe_bench.planners.evaluation.clock import LibraryCalls
from umpipe_bench.planners.search.base import Budget, PlannerError
from umpipe_bench.planners.search.loop import SearchAlgorithm, SearchPlanner, TrackedAlgorithm
from umpipe_bench.planners.search.settings import Setting, SettingsTable
from umpipe_bench.problem import Problem

__all__ = ["CMAES", "NevergradDiscreteOnePlusOne", "NevergradNGOpt", "OptunaCMAES", "OptunaGA",
           "OutsidePlanner", "PymooGA"]

#: Told to a library instead of ``inf`` (a plan that does not fit memory): times the start.
PENALTY = 1e3
#: Optuna's suggestions per look at the run's clock (:meth:`_OptunaAlgorithm._ask`).
SUGGEST_BLOCK = 1024
#: The longest genome the CMA-ES planners take: they keep a D x D covariance, and one ask of
#: a batch or one tell is a library call that cannot be interrupted (at a batch of 16: under
#: 0.1 s at 512 genes here, 1.4 s at 768, 8 s at 1,024, minutes at 8,160), so a longer genome
#: would hold a signal or a time budget off.
CMA_MAX_GENES = 512

#: The settings every outside planner has (a planner may change a default or add its own).
COMMON = SettingsTable(
    Setting("schedule", str, "gpipe", "gpipe: the genome is the cut bits, plans run under "
            "GPipe; capped: cut bits and per-stage in-flight caps, the capped schedule "
            "(docs/SCHEDULES.md)", choices=("gpipe", "capped")),
    Setting("popsize", int, 32, "candidates per ask/tell batch", low=2),
    renamed={"family": "schedule"},
)
#: CMA-ES's step size, in units of the genome's range.
SIGMA0 = Setting("sigma0", float, 0.3, "initial CMA-ES step size (a fraction of each gene's "
                 "range)", low=0.0, open_low=True)


class LibraryAlgorithm(TrackedAlgorithm):
    """The loop's view of a library: setup scans EDP(M); ask/tell go to :meth:`_ask` and
    :meth:`_tell` (flat genomes ``[n, D]``, finite values); the loop keeps the best."""

    def __init__(self, obj: PipelineObjective, settings: dict[str, Any], seed: int | None,
                 budget: int | None) -> None:
        self.obj, self.s, self.seed, self.budget = obj, settings, seed, budget
        self.popsize = int(settings["popsize"])

    def setup(self, evaluate: Any) -> None:
        self.x0, self.start_time = self.obj.edp_scan(evaluate)  # B counted evaluations
        self._start()

    def ask_size(self) -> int:
        return self.popsize

    def ask(self) -> np.ndarray:
        return np.asarray(self._ask(), dtype=np.int64).reshape(-1, self.obj.space.dimension)

    def tell(self, genomes: np.ndarray, times: np.ndarray) -> None:
        self._tell(genomes, np.where(np.isfinite(times), times, PENALTY * self.start_time))

    def _start(self) -> None:
        raise NotImplementedError

    def _ask(self) -> np.ndarray:
        raise NotImplementedError

    def _tell(self, X: np.ndarray, values: np.ndarray) -> None:
        raise NotImplementedError


@contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna's log at ERROR during a run (it warns per parameter otherwise)."""
    try:
        import optuna
    except ImportError:
        yield
        return
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)


class OutsidePlanner(SearchPlanner):
    """Common part: settings, the library check, the public objective and the plan of the best
    genome; the loop and its steps are :class:`SearchPlanner`'s."""

    default_budget: ClassVar[str] = "evals:2000,secs:120"
    defaults: ClassVar[SettingsTable] = COMMON
    library: ClassVar[str] = ""
    algorithm: ClassVar[type[LibraryAlgorithm]] = LibraryAlgorithm

    def check_run(self, problem: Problem, mode: str, settings: dict[str, Any],
                  budget: Budget) -> None:
        try:
            __import__(self.library)
        except ImportError:
            raise PlannerError(f"planner {self.name!r} refuses to run without {self.library}: "
                               "pip install -e '.[optimizers]'") from None
        if budget.evaluations is not None and budget.evaluations < problem.B + settings["popsize"]:
            raise PlannerError(
                f"planner {self.name!r}: budget evals:{budget.evaluations} leaves no batch "
                f"after the EDP scan it starts with (B = {problem.B} evaluations, then "
                f"{settings['popsize']} per batch)")

    def make_objective(self, problem: Problem, mode: str, settings: dict[str, Any]
                       ) -> PipelineObjective:
        return PipelineObjective(problem, mode, settings["schedule"])

    def make_algorithm(self, problem: Problem, mode: str, settings: dict[str, Any],
                       budget: Budget, seed: int | None, objective: Any) -> SearchAlgorithm:
        return self.algorithm(objective, settings, seed, budget.evaluations)

    @contextmanager
    def running(self) -> Iterator[None]:
        with warnings.catch_warnings(), _quiet_optuna():  # e.g. experimental with_margin
            warnings.simplefilter("ignore")
            yield

    def final_plan(self, problem: Problem, mode: str, objective: Any, genomes: Any
                   ) -> tuple[Plan, str, float]:
        from umpipe_bench.simulator import simulate

        plan, schedule = objective.space.to_plan(genomes[0])
        return plan, schedule, float(simulate(problem, plan, schedule).iteration_time)


# ----------------------------------------------------------------------------- optuna

class _OptunaAlgorithm(LibraryAlgorithm):
    def sampler(self) -> Any:
        raise NotImplementedError

    def _start(self) -> None:
        import optuna
        from optuna.distributions import IntDistribution

        lo, hi = self.obj.space.lower, self.obj.space.upper
        self.names = [f"x{i}" for i in range(self.obj.space.dimension)]
        self.study = optuna.create_study(direction="minimize", sampler=self.sampler())
        # the best EDP plan, already evaluated, as a finished trial: it tells the sampler the
        # search space before its first batch (else the first batch is sampled at random)
        self.study.add_trial(optuna.trial.create_trial(
            params={n: int(v) for n, v in zip(self.names, self.x0)},
            distributions={n: IntDistribution(int(a), int(b))
                           for n, a, b in zip(self.names, lo, hi)},
            value=self.start_time))
        self.trials: list[Any] = []
        self._trials = LibraryCalls()  # each trial's ask and suggestions

    def _ask(self) -> np.ndarray:
        """One ``suggest_int`` per gene of every trial, the run's clock read between blocks of
        :data:`SUGGEST_BLOCK` (at 8,160 genes a batch of 32 trials takes seconds). A trial's
        ``study.ask()`` is one library call (the sampler infers the search space from every
        finished trial: seconds at 262,016 genes), so no trial starts that could not end
        before the deadline if it takes twice the last one's time."""
        from umpipe_bench.planners.evaluation.clock import current

        clock = current()
        genes = list(zip(self.names, self.obj.space.lower.tolist(),
                         self.obj.space.upper.tolist()))
        self.trials = []
        out = np.empty((self.popsize, len(genes)), np.int64)
        for k in range(self.popsize):
            with self._trials.call():
                t = self.study.ask()
                self.trials.append(t)
                for a in range(0, len(genes), SUGGEST_BLOCK):
                    clock.check()
                    out[k, a:a + SUGGEST_BLOCK] = [t.suggest_int(n, lo, hi)
                                                   for n, lo, hi in genes[a:a + SUGGEST_BLOCK]]
        return out

    def _tell(self, X: np.ndarray, values: np.ndarray) -> None:
        for t, v in zip(self.trials, values):
            self.study.tell(t, float(v))


class _CMAES(_OptunaAlgorithm):
    def sampler(self) -> Any:
        import optuna

        return optuna.samplers.CmaEsSampler(
            x0={f"x{i}": int(v) for i, v in enumerate(self.x0)}, sigma0=self.s["sigma0"],
            seed=self.seed, n_startup_trials=0, popsize=self.popsize, with_margin=True)


class _NSGA2(_OptunaAlgorithm):
    def sampler(self) -> Any:
        import optuna

        return optuna.samplers.NSGAIISampler(population_size=self.popsize, seed=self.seed,
                                             crossover_prob=self.s["crossover_prob"])


class _CMAPlanner(OutsidePlanner):
    """A CMA-ES planner: genomes of at most :data:`CMA_MAX_GENES` genes."""

    def check_run(self, problem: Problem, mode: str, settings: dict[str, Any],
                  budget: Budget) -> None:
        super().check_run(problem, mode, settings, budget)
        from umpipe_bench.codec import GenomeLayout

        D = GenomeLayout(problem.S, problem.B, mode, settings["schedule"]).dimension
        if D > CMA_MAX_GENES:
            raise PlannerError(
                f"planner {self.name!r} refuses problem {problem.name!r} ({mode}, schedule "
                f"{settings['schedule']}): its genome has {D:,} genes, over the {CMA_MAX_GENES:,} "
                "CMA-ES takes (a D x D covariance, decomposed in one call that cannot be "
                "interrupted); use tidgap or another outside planner")


class OptunaCMAES(_CMAPlanner):
    """Optuna's CMA-ES sampler (the ``cmaes`` package) over the integer genome, with margin."""

    name = "optuna-cmaes"
    library = "cmaes"
    defaults = COMMON.with_defaults(popsize=16).plus(SIGMA0)
    algorithm = _CMAES


class OptunaGA(OutsidePlanner):
    """Optuna's NSGA-II sampler on one objective: a GA with uniform crossover."""

    name = "optuna-ga"
    library = "optuna"
    defaults = COMMON.plus(Setting("crossover_prob", float, 0.9, "NSGA-II's probability "
                                   "that a pair of parents mates", low=0.0, high=1.0))
    algorithm = _NSGA2


class _CMAwM(LibraryAlgorithm):
    """The ``cmaes`` package's CMA-ES with margin (integer genes), driven directly."""

    def _start(self) -> None:
        from cmaes import CMAwM

        sp = self.obj.space
        bounds = np.stack([sp.lower, sp.upper], axis=1).astype(float)
        # a bit at 0 or 1 sits on its bound; the mean starts a quarter step inside
        mean = np.clip(self.x0.astype(float), bounds[:, 0] + 0.25, bounds[:, 1] - 0.25)
        self.opt = CMAwM(mean=mean, sigma=self.s["sigma0"], bounds=bounds,
                         steps=np.ones(sp.dimension), seed=self.seed,
                         population_size=self.popsize, n_max_resampling=1)  # then clipped

    def _ask(self) -> np.ndarray:
        pairs = [self.opt.ask() for _ in range(self.opt.population_size)]
        self.tells = [t for _, t in pairs]
        return np.rint([e for e, _ in pairs])

    def _tell(self, X: np.ndarray, values: np.ndarray) -> None:
        self.opt.tell(list(zip(self.tells, values.tolist())))


class CMAES(_CMAPlanner):
    """CMA-ES with margin from the ``cmaes`` package (what Optuna's sampler runs), driven
    directly: the same search without Optuna's per-trial bookkeeping."""

    name = "cmaes"
    library = "cmaes"
    defaults = COMMON.with_defaults(popsize=16).plus(SIGMA0)
    algorithm = _CMAwM


# -------------------------------------------------------------------------- nevergrad

class _NevergradAlgorithm(LibraryAlgorithm):
    optimizer = ""

    def _start(self) -> None:
        import nevergrad as ng

        sp = self.obj.space
        # bits as deterministic choices (nevergrad's discrete optimizers mutate those; an
        # integer-cast array barely moves), caps as ordered choices in 1..B
        bits = ng.p.Choice([0, 1], repetitions=sp.n_bits, deterministic=True)
        param = (ng.p.Tuple(bits, ng.p.TransitionChoice(list(range(1, sp.B + 1)),
                                                        repetitions=sp.n_caps))
                 if sp.n_caps else ng.p.Tuple(bits))
        param.value = (tuple(int(v) for v in self.x0[:sp.n_bits]),
                       *([tuple(int(v) for v in self.x0[sp.n_bits:])] if sp.n_caps else []))
        param.random_state = np.random.RandomState(self.seed)
        budget = self.budget - sp.B if self.budget is not None else 10 ** 6
        self.opt = ng.optimizers.registry[self.optimizer](
            parametrization=param, budget=max(budget, 1), num_workers=1)

    def _ask(self) -> np.ndarray:
        self.cands = [self.opt.ask() for _ in range(self.popsize)]
        return np.array([np.concatenate([np.asarray(v, np.int64) for v in c.value])
                         for c in self.cands])

    def _tell(self, X: np.ndarray, values: np.ndarray) -> None:
        for c, v in zip(self.cands, values):
            self.opt.tell(c, float(v))


class _NGOpt(_NevergradAlgorithm):
    optimizer = "NGOpt"


class _Discrete11(_NevergradAlgorithm):
    optimizer = "DiscreteOnePlusOne"


class NevergradNGOpt(OutsidePlanner):
    """nevergrad's NGOpt: its own choice of algorithm for this dimension and budget."""

    name = "nevergrad-ngopt"
    library = "nevergrad"
    #: one candidate per batch: gens:N = N evaluations
    defaults = COMMON.plus(Setting("popsize", int, 1, "candidates per ask/tell batch", low=1))
    algorithm = _NGOpt


class NevergradDiscreteOnePlusOne(OutsidePlanner):
    """nevergrad's DiscreteOnePlusOne: a (1+1) evolution strategy with discrete mutations."""

    name = "nevergrad-discrete11"
    library = "nevergrad"
    defaults = COMMON.plus(Setting("popsize", int, 1, "candidates per ask/tell batch", low=1))
    algorithm = _Discrete11


# ------------------------------------------------------------------------------ pymoo

class _PymooGA(LibraryAlgorithm):
    def _start(self) -> None:
        from pymoo.algorithms.soo.nonconvex.ga import GA
        from pymoo.core.problem import Problem as PymooProblem
        from pymoo.operators.crossover.pntx import TwoPointCrossover
        from pymoo.operators.mutation.bitflip import BitflipMutation

        from umpipe_bench.planners.evaluation.encoding import random_bits

        S, B, P = self.obj.problem.S, self.obj.problem.B, self.popsize
        rng = np.random.default_rng(self.seed)
        rest = [random_bits(rng, P - 1, S, B).reshape(P - 1, -1)]
        if self.obj.mode == "recompute":
            rest.append(random_bits(rng, P - 1, S, B).reshape(P - 1, -1))
        X0 = np.vstack([self.x0[None], np.hstack(rest)]).astype(bool)
        self.problem = PymooProblem(n_var=self.obj.space.dimension, n_obj=1, xl=0, xu=1,
                                    vtype=bool)
        self.algo = GA(pop_size=P, sampling=X0, crossover=TwoPointCrossover(),
                       mutation=BitflipMutation(), eliminate_duplicates=True)
        self.algo.setup(self.problem, seed=self.seed, termination=("n_gen", 10 ** 9))

    def _ask(self) -> np.ndarray:
        self.pop = self.algo.ask()
        return self.pop.get("X").astype(np.int64)

    def _tell(self, X: np.ndarray, values: np.ndarray) -> None:
        from pymoo.core.evaluator import Evaluator
        from pymoo.problems.static import StaticProblem

        Evaluator().eval(StaticProblem(self.problem, F=values[:, None]), self.pop)
        self.algo.tell(infills=self.pop)


class PymooGA(OutsidePlanner):
    """pymoo's GA with binary operators: two-point crossover, bit-flip mutation; the initial
    population is the best EDP plus random plans (per chromosome a microbatch count
    log-uniform in 1..B, as the project's GAs draw them). Binary genome: schedule gpipe only."""

    name = "pymoo-ga"
    library = "pymoo"
    algorithm = _PymooGA

    def check_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        settings = super().check_settings(settings)
        if settings["schedule"] != "gpipe":
            raise PlannerError(f"planner {self.name!r}: its binary operators need schedule "
                               "'gpipe' (cut bits only)")
        return settings
