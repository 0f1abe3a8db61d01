"""What DGAP and TiDGAP share: settings, the budget-driven generation loop, the history.

Both GAs are an *engine* (initialize once, then one :meth:`step` per generation) driven by
:func:`run_engine`, which enforces the budget (MODEL-agnostic: evaluations, generations,
seconds; the first reached stops) and draws the progress bar. The engine records one DEAP
``Logbook`` row per generation: ``gen``, ``evals`` (this generation), ``nevals`` (total so
far), ``min`` and ``avg`` (of the population), ``best`` (so far) and ``time`` (wall seconds).

Evaluation accounting: the seeding phase costs ``B`` EDP evaluations plus 2 greedy plans plus
the random part of the population; each generation then evaluates only the offspring that
crossover or mutation changed (as DEAP's ``eaSimple`` does). A generation runs only when its
worst case (``population - elites`` evaluations) still fits an evaluation budget, so
``evaluations <= budget`` always.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np
from deap import tools
from tqdm.auto import tqdm

from ..plan import Plan
from ..problem import Problem
from .base import Budget, PlannerError
from .settings import resolve_settings

__all__ = ["GA_DEFAULTS", "Engine", "check_ga_settings", "new_logbook", "run_engine"]

#: Defaults shared by DGAP and TiDGAP (chosen on the sim problems; see docs in the planners).
GA_DEFAULTS: dict[str, Any] = {
    "population": 128,
    "cxpb": 0.7,
    "mutpb": 0.6,
    "flip_rate": 1.0,
    "shift_rate": 2.0,
    "tournament": 3,
    "elites": 2,
    "edp_seeds": 4,
    "greedy_seeds": True,
}


def check_ga_settings(planner: str, defaults: dict[str, Any], given: dict[str, Any]
                      ) -> dict[str, Any]:
    """Resolve and range-check GA settings."""
    s = resolve_settings(planner, defaults, given)
    if s["population"] < 2:
        raise PlannerError(f"planner {planner!r}: population must be >= 2")
    for k in ("cxpb", "mutpb"):
        if not 0.0 <= s[k] <= 1.0:
            raise PlannerError(f"planner {planner!r}: {k} must be in [0, 1], got {s[k]}")
    for k in ("flip_rate", "shift_rate"):
        if s[k] < 0:
            raise PlannerError(f"planner {planner!r}: {k} must be >= 0, got {s[k]}")
    if s["tournament"] < 1:
        raise PlannerError(f"planner {planner!r}: tournament must be >= 1")
    if not 1 <= s["elites"] < s["population"]:
        raise PlannerError(f"planner {planner!r}: elites must be in 1..population-1")
    if s["edp_seeds"] < 1:
        raise PlannerError(f"planner {planner!r}: edp_seeds must be >= 1 (the starting point)")
    return s


def new_logbook() -> tools.Logbook:
    lb = tools.Logbook()
    lb.header = ["gen", "evals", "nevals", "min", "avg", "best", "time"]
    return lb


def population_size(planner: str, problem: Problem, settings: dict[str, Any],
                    budget: Budget) -> int:
    """The population, capped so the seeding phase fits an evaluation budget."""
    P = int(settings["population"])
    if budget.evaluations is not None:
        seeding = problem.B + (2 if settings["greedy_seeds"] else 0)
        room = budget.evaluations - seeding
        if room < 4:
            raise PlannerError(
                f"planner {planner!r}: budget evals:{budget.evaluations} is too small for "
                f"problem {problem.name!r}: seeding scans EDP(M) for all M (B={problem.B}) plus "
                f"the greedy plans, then needs a population of at least 4; use at least "
                f"evals:{seeding + 4 + P}"
            )
        P = min(P, room)
    return max(P, int(settings["elites"]) + 2)


class Engine(Protocol):
    """One GA run: :meth:`initialize`, then :meth:`step` once per generation."""

    generation: int
    evaluations: int
    logbook: tools.Logbook
    start_time: float

    def initialize(self) -> None: ...
    def step(self) -> None: ...
    def max_step_evaluations(self) -> int: ...
    def best(self) -> tuple[Plan, float]: ...


def run_engine(engine: Engine, budget: Budget, progress: bool, desc: str) -> None:
    """Initialize, then step until the budget is reached (MODEL-free driver)."""
    if budget.evaluations is None and budget.generations is None and budget.seconds is None:
        raise PlannerError("a GA needs a finite budget: evals:N, gens:N or secs:X")
    t0 = time.perf_counter()
    engine.initialize()
    total = budget.generations
    with tqdm(total=total, disable=not progress, desc=desc, unit="gen", leave=False) as bar:
        while True:
            if budget.generations is not None and engine.generation >= budget.generations:
                break
            if (budget.evaluations is not None
                    and engine.evaluations + engine.max_step_evaluations() > budget.evaluations):
                break
            if budget.seconds is not None and time.perf_counter() - t0 >= budget.seconds:
                break
            engine.step()
            bar.update(1)
            bar.set_postfix(best=f"{engine.best()[1]:.6g}", evals=engine.evaluations,
                            refresh=False)


def record(engine: Any, times: np.ndarray, nevals: int, best: float, t0: float) -> None:
    """Append one Logbook row (population ``times`` of this generation)."""
    finite = times[np.isfinite(times)]
    engine.logbook.record(
        gen=engine.generation,
        evals=int(nevals),
        nevals=int(engine.evaluations),
        min=float(finite.min()) if finite.size else float("inf"),
        avg=float(finite.mean()) if finite.size else float("inf"),
        best=float(best),
        time=time.perf_counter() - t0,
    )
