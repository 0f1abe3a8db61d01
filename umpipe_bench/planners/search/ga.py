"""What DGAP and TiDGAP share: settings, their checks and the population size for a budget.

Both GAs are ask/tell algorithms run by :class:`.loop.SearchLoop`, which owns the budget, the
evaluation count and the typed history. Evaluation accounting (docs/MODEL.md §4 evaluations):
the seeding phase costs ``B`` EDP evaluations plus 2 greedy plans plus the random part of the
population (:mod:`.seeding`); each generation then evaluates only the offspring that crossover
or mutation changed (as DEAP's ``eaSimple`` does); a generation runs only when its worst case
(``population - elites`` evaluations) still fits an evaluation budget.
"""

from __future__ import annotations

from typing import Any

from ...problem import Problem
from .base import Budget, PlannerError
from .seeding import seeding_evaluations

__all__ = ["AUTO_BITS", "AUTO_FLOOR", "AUTO_GENERATIONS", "GA_DEFAULTS", "check_ga_settings",
           "min_population", "population_size"]

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


#: ``population`` is the largest population: an evaluation budget must also buy
#: ``AUTO_GENERATIONS`` generations per ``AUTO_BITS`` bits of chromosome (at least that many
#: generations), so a run uses fewer individuals when it would not, down to ``AUTO_FLOOR``.
#: Measured (`git show ddbefaf:results/perf/quality.md`): on gpt1-14 and vgg16 (210-496 bits) a
#: population of ~1000 makes the result depend far less on the seed than 128 at the same budget
#: (TiDGAP's default is 1024); at S = 64, B = 1024 (65,472 bits) 128 beats 1000, which gets too few
#: generations.
AUTO_GENERATIONS = 200
AUTO_BITS = 512
AUTO_FLOOR = 128


def check_ga_settings(planner: str, s: dict[str, Any]) -> dict[str, Any]:
    """Range-check resolved GA settings (types were checked by :func:`.settings.coerce`)."""
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


def min_population(settings: dict[str, Any]) -> int:
    """The smallest population a run uses: 4, and room for 2 offspring beside the elites."""
    return max(4, int(settings["elites"]) + 2)


def check_schedule_setting(planner: str, settings: dict[str, Any]) -> None:
    """``schedule`` is ``family`` (needs the numba evaluator: backend auto or numba) or
    ``gpipe`` (docs/SCHEDULES.md); ``cap_rate`` is >= 0."""
    if settings["cap_rate"] < 0:
        raise PlannerError(f"planner {planner!r}: cap_rate must be >= 0")
    if settings["schedule"] not in ("family", "gpipe"):
        raise PlannerError(f"planner {planner!r}: schedule must be 'family' or 'gpipe', got "
                           f"{settings['schedule']!r}")
    if settings["schedule"] == "family" and settings.get("backend", "auto") not in (
            "auto", "numba"):
        raise PlannerError(
            f"planner {planner!r}: backend {settings['backend']!r} evaluates the GPipe "
            "schedule only; the schedule family needs backend auto or numba (or set "
            "schedule=gpipe)")


def ga_population(planner: str, problem: Problem, mode: str, settings: dict[str, Any],
                  budget: Budget, descent: int = 0) -> int:
    """:func:`population_size` with the schedule family's extra seeds and the stage descent's
    allowance (``descent`` evaluations, :mod:`..algorithms.descent`) counted, recorded in
    ``settings["population"]``."""
    from .caps import extra_family_seeds

    extra = extra_family_seeds(problem, mode) if settings["schedule"] == "family" else 0
    P = population_size(planner, problem, settings, budget, extra_seeds=extra,
                        descent=descent)
    settings["population"] = P
    return P


def population_size(planner: str, problem: Problem, settings: dict[str, Any],
                    budget: Budget, extra_seeds: int = 0, descent: int = 0) -> int:
    """The population, capped so the seeding phase fits an evaluation budget.

    The population is ``population`` or fewer (see :data:`AUTO_GENERATIONS`). The smallest
    budget that runs is the seeding scan plus :func:`min_population` (the initial
    population is evaluated in full; a generation then needs ``population - elites`` more).
    """
    P = int(settings["population"])
    if budget.evaluations is None:
        return max(P, min_population(settings))
    gens = AUTO_GENERATIONS * max(1.0, problem.S * (problem.B - 1) / AUTO_BITS)
    P = min(P, max(min(P, AUTO_FLOOR), int(budget.evaluations / gens)))
    seeding = (seeding_evaluations(problem.B, bool(settings["greedy_seeds"])) + extra_seeds
               + descent)
    least = min_population(settings)
    room = budget.evaluations - seeding
    if room < least:
        raise PlannerError(
            f"planner {planner!r}: budget evals:{budget.evaluations} is too small for problem "
            f"{problem.name!r}: seeding scans EDP(M) for all M (B={problem.B})"
            f"{' plus the 2 greedy plans' if settings['greedy_seeds'] else ''}"
            f"{f' plus {extra_seeds} 1F1B-EDP seeds of the schedule family' if extra_seeds else ''}"
            f"{f' plus up to {descent} for the stage descent' if descent else ''}"
            ", then needs a "
            f"population of at least {least}; use at least evals:{seeding + least}")
    return max(min(P, room), least)
