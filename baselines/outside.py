"""Outside optimizers as planners: Optuna CMA-ES and GA, nevergrad, pymoo (``[optimizers]``).

Each runs its library's own ask/tell loop on :class:`umpipe_bench.api.PipelineObjective`, the
public objective any researcher gets (README "Bring your own optimizer"): a flat integer
genome (cut bits, docs/MODEL.md §2; in the ``capped`` family also in-flight caps,
docs/SCHEDULES.md), evaluated in batches by the family evaluator (MODEL.md §4) under a counted
budget. Every planner first scans EDP(M) for ``M = 1..B`` (``B`` counted evaluations) and
starts its search from the best one, so it is never worse than GPipe-EDP; that plan is its
starting point. The objective's history (generation, evaluations, wall time, best) is the
run's history.

Budgets: ``evals:N`` caps evaluations (including the scan); ``gens:N`` means N × the
planner's population (``popsize``); ``secs:X`` stops between batches. A plan that does not fit
memory scores ``inf`` in the objective; the libraries are told a large finite penalty instead.

| planner | library | search |
|---|---|---|
| ``optuna-cmaes`` | optuna ``CmaEsSampler`` (``cmaes``, with margin for integers) | CMA-ES |
| ``optuna-ga`` | optuna ``NSGAIISampler`` (one objective: a GA, uniform crossover) | GA |
| ``nevergrad-ngopt`` | nevergrad ``NGOpt`` (picks an algorithm from dimension and budget) | any |
| ``nevergrad-discrete11`` | nevergrad ``DiscreteOnePlusOne`` | (1+1) bit mutation |
| ``pymoo-ga`` | pymoo ``GA``, two-point crossover, bit-flip mutation (binary genome) | GA |
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from umpipe_bench.api import BudgetExhausted, PipelineObjective
from umpipe_bench.planners.base import Budget, Planner, PlannerError, PlanResult
from umpipe_bench.planners.settings import resolve_settings
from umpipe_bench.problem import Problem

__all__ = ["NevergradDiscreteOnePlusOne", "NevergradNGOpt", "OptunaCMAES", "OptunaGA",
           "OutsidePlanner", "PymooGA"]

#: Told to a library instead of ``inf`` (a plan that does not fit memory): times the start.
PENALTY = 1e3


class _Stop(Exception):
    """The budget (evaluations or seconds) is spent."""


class OutsidePlanner(Planner):
    """Common part: settings, the objective, the EDP start, the budget, the result."""

    default_budget: ClassVar[str] = "evals:2000,secs:120"
    base_defaults: ClassVar[dict[str, Any]] = {"family": "gpipe", "popsize": 32}
    defaults: ClassVar[dict[str, Any]] = {}
    library: ClassVar[str] = ""
    min_popsize: ClassVar[int] = 2

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.config = resolve_settings(self.name, {**self.base_defaults, **self.defaults},
                                       settings)
        if self.config["family"] not in ("gpipe", "capped"):
            raise PlannerError(f"planner {self.name!r}: family must be 'gpipe' or 'capped', "
                               f"got {self.config['family']!r}")
        if self.config["popsize"] < self.min_popsize:
            raise PlannerError(f"planner {self.name!r}: popsize must be >= {self.min_popsize}")

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        from umpipe_bench.simulator import simulate

        s = self.config
        try:
            __import__(self.library)
        except ImportError:
            raise PlannerError(f"planner {self.name!r} refuses to run without {self.library}: "
                               "pip install -e '.[optimizers]'") from None
        cap = budget.evaluations
        if budget.generations is not None:
            g = budget.generations * s["popsize"]
            cap = g if cap is None else min(cap, g)
        if cap is None and budget.seconds is None:
            raise PlannerError(f"planner {self.name!r} needs a finite budget")
        if cap is not None and cap < problem.B:
            raise PlannerError(f"planner {self.name!r}: budget evals:{cap} is below the EDP "
                               f"scan it starts with (B = {problem.B} evaluations)")
        obj = PipelineObjective(problem, mode, s["family"], budget=cap)
        x0 = obj.start_genome()
        start = obj.best_value
        deadline = None if budget.seconds is None else time.perf_counter() + budget.seconds
        penalty = PENALTY * start

        def f(X: np.ndarray) -> np.ndarray:
            """Counted evaluation of a batch; raises _Stop when the budget is spent."""
            if deadline is not None and time.perf_counter() >= deadline:
                raise _Stop
            n = len(X) if obj.remaining is None else min(len(X), obj.remaining)
            if n < len(X):
                raise _Stop
            try:
                T = obj.evaluate(np.asarray(X))
            except BudgetExhausted:
                raise _Stop from None
            return np.where(np.isfinite(T), T, penalty)

        try:
            self._search(obj, x0, f, s, seed, cap)
        except _Stop:
            pass
        plan, schedule = obj.best_plan()
        T = float(simulate(problem, plan, schedule).iteration_time)
        return PlanResult(planner=self.name, plan=plan, iteration_time=T, schedule=schedule,
                          evaluations=obj.evaluations, start_time=start, history=obj.history,
                          settings=dict(s))

    def _search(self, obj: PipelineObjective, x0: np.ndarray,
                f: Callable[[np.ndarray], np.ndarray], s: dict[str, Any], seed: int | None,
                cap: int | None) -> None:
        """Run the library's loop, evaluating only through ``f`` (batches ``[N, D]``)."""
        raise NotImplementedError


def _optuna_loop(obj: PipelineObjective, x0: np.ndarray, f: Callable[[np.ndarray], np.ndarray],
                 sampler: Any, enqueue: bool) -> None:
    """Optuna's ask/tell, one trial per genome (an integer parameter per gene)."""
    import warnings

    import optuna

    lo, hi = obj.space.lower, obj.space.upper
    names = [f"x{i}" for i in range(obj.space.dimension)]
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():  # CMA-ES with_margin is marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study = optuna.create_study(direction="minimize", sampler=sampler)
            if enqueue:
                study.enqueue_trial({n: int(v) for n, v in zip(names, x0)})
            while True:
                trial = study.ask()
                x = np.array([trial.suggest_int(n, int(a), int(b))
                              for n, a, b in zip(names, lo, hi)])
                try:
                    T = float(f(x[None])[0])
                except _Stop:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    raise
                study.tell(trial, T)
    finally:
        optuna.logging.set_verbosity(verbosity)


class OptunaCMAES(OutsidePlanner):
    """Optuna's CMA-ES sampler (the ``cmaes`` package) over the integer genome, with margin."""

    name = "optuna-cmaes"
    library = "cmaes"
    defaults = {"sigma0": 0.3}

    def _search(self, obj, x0, f, s, seed, cap):
        import optuna

        sampler = optuna.samplers.CmaEsSampler(
            x0={f"x{i}": int(v) for i, v in enumerate(x0)}, sigma0=s["sigma0"], seed=seed,
            n_startup_trials=0, popsize=s["popsize"], with_margin=True)
        _optuna_loop(obj, x0, f, sampler, enqueue=True)


class OptunaGA(OutsidePlanner):
    """Optuna's NSGA-II sampler on one objective: a GA with uniform crossover."""

    name = "optuna-ga"
    library = "optuna"
    defaults = {"crossover_prob": 0.9}

    def _search(self, obj, x0, f, s, seed, cap):
        import optuna

        sampler = optuna.samplers.NSGAIISampler(population_size=s["popsize"], seed=seed,
                                                crossover_prob=s["crossover_prob"])
        _optuna_loop(obj, x0, f, sampler, enqueue=True)


class _Nevergrad(OutsidePlanner):
    library = "nevergrad"
    optimizer: ClassVar[str] = ""
    base_defaults = {"family": "gpipe", "popsize": 1}  # gens:N = N evaluations
    min_popsize = 1

    def _search(self, obj, x0, f, s, seed, cap):
        import nevergrad as ng

        sp = obj.space
        # bits as deterministic choices (nevergrad's discrete optimizers mutate those; an
        # integer-cast array barely moves), caps as ordered choices in 1..B
        bits = ng.p.Choice([0, 1], repetitions=sp.n_bits, deterministic=True)
        param = (ng.p.Tuple(bits, ng.p.TransitionChoice(list(range(1, sp.B + 1)),
                                                        repetitions=sp.n_caps))
                 if sp.n_caps else ng.p.Tuple(bits))
        param.value = (tuple(int(v) for v in x0[:sp.n_bits]),
                       *([tuple(int(v) for v in x0[sp.n_bits:])] if sp.n_caps else []))
        param.random_state = np.random.RandomState(seed)
        budget = cap - obj.evaluations if cap is not None else 10 ** 6
        opt = ng.optimizers.registry[self.optimizer](parametrization=param, budget=budget,
                                                     num_workers=1)
        while True:
            cand = opt.ask()
            x = np.concatenate([np.asarray(v, dtype=np.int64) for v in cand.value])
            opt.tell(cand, float(f(x[None])[0]))


class NevergradNGOpt(_Nevergrad):
    """nevergrad's NGOpt: its own choice of algorithm for this dimension and budget."""

    name = "nevergrad-ngopt"
    optimizer = "NGOpt"


class NevergradDiscreteOnePlusOne(_Nevergrad):
    """nevergrad's DiscreteOnePlusOne: a (1+1) evolution strategy with discrete mutations."""

    name = "nevergrad-discrete11"
    optimizer = "DiscreteOnePlusOne"


class PymooGA(OutsidePlanner):
    """pymoo's GA with binary operators: two-point crossover, bit-flip mutation; the initial
    population is the best EDP plus random plans (per chromosome a microbatch count
    log-uniform in 1..B, as the project's GAs draw them). Binary genome: gpipe family only."""

    name = "pymoo-ga"
    library = "pymoo"

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        if self.config["family"] != "gpipe":
            raise PlannerError(f"planner {self.name!r}: its binary operators need family "
                               "'gpipe' (cut bits only)")

    def _search(self, obj, x0, f, s, seed, cap):
        from pymoo.algorithms.soo.nonconvex.ga import GA
        from pymoo.core.evaluator import Evaluator
        from pymoo.core.problem import Problem as PymooProblem
        from pymoo.operators.crossover.pntx import TwoPointCrossover
        from pymoo.operators.mutation.bitflip import BitflipMutation
        from pymoo.problems.static import StaticProblem

        from umpipe_bench.planners.encoding import random_bits

        S, B, P = obj.problem.S, obj.problem.B, s["popsize"]
        rng = np.random.default_rng(seed)
        first = [random_bits(rng, P - 1, S, B)]
        if obj.mode == "recompute":
            first.append(random_bits(rng, P - 1, S, B))
        X0 = np.vstack([x0[None], np.hstack([a.reshape(P - 1, -1) for a in first])]).astype(bool)
        problem = PymooProblem(n_var=obj.space.dimension, n_obj=1, xl=0, xu=1, vtype=bool)
        algo = GA(pop_size=P, sampling=X0, crossover=TwoPointCrossover(),
                  mutation=BitflipMutation(), eliminate_duplicates=True)
        algo.setup(problem, seed=seed, termination=("n_gen", 10 ** 9))
        while True:
            pop = algo.ask()
            T = f(pop.get("X").astype(np.int64))
            Evaluator().eval(StaticProblem(problem, F=T[:, None]), pop)
            algo.tell(infills=pop)
