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
from .settings import Setting, SettingsTable

__all__ = ["AUTO_BITS", "AUTO_FLOOR", "AUTO_GENERATIONS", "GA_DEFAULTS", "SCHEDULE_SETTINGS",
           "check_ga_settings", "min_population", "population_size"]

#: The settings DGAP and TiDGAP share (defaults chosen on the sim problems; see the planners).
GA_DEFAULTS = SettingsTable(
    Setting("population", int, 128, "the largest population; fewer when the budget would buy "
            "too few generations (population_size)", low=2),
    Setting("cxpb", float, 0.7, "probability that a pair of parents mates (two-point "
            "crossover per chromosome)", low=0.0, high=1.0),
    Setting("mutpb", float, 0.6, "probability that an offspring is mutated", low=0.0, high=1.0),
    Setting("flip_rate", float, 1.0, "expected cut bits flipped per mutated chromosome",
            low=0.0),
    Setting("shift_rate", float, 2.0, "expected microbatch boundaries shifted by one layer "
            "position per mutated chromosome", low=0.0),
    Setting("tournament", int, 3, "tournament size of the parent selection", low=1),
    Setting("elites", int, 2, "best distinct individuals kept each generation (below "
            "population)", low=1),
    Setting("edp_seeds", int, 4, "best equal-split (EDP) plans in the initial population",
            low=1),
    Setting("greedy_seeds", bool, True, "add the local-greedy and greedy-dp plans to the "
            "initial population"),
)

#: The schedule a GA searches (docs/SCHEDULES.md) and how often its cap genes mutate.
SCHEDULE_SETTINGS = SettingsTable(
    Setting("schedule", str, "capped", "capped: the capped schedule, per-stage in-flight cap "
            "genes beside the chromosomes, GPipe to 1F1B (backend auto or numba); gpipe: the "
            "GPipe schedule only", choices=("capped", "gpipe"), aliases={"family": "capped"}),
    Setting("cap_rate", float, 1.0, "expected cap genes redrawn per mutated offspring",
            low=0.0),
)


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
    """What the table (:data:`GA_DEFAULTS`) cannot check alone: ``elites < population``."""
    if not 1 <= s["elites"] < s["population"]:
        raise PlannerError(f"planner {planner!r}: elites must be in 1..population-1, got "
                           f"elites={s['elites']}, population={s['population']}")
    return s


def min_population(settings: dict[str, Any]) -> int:
    """The smallest population a run uses: 4, and room for 2 offspring beside the elites."""
    return max(4, int(settings["elites"]) + 2)


def check_schedule_setting(planner: str, settings: dict[str, Any]) -> None:
    """``schedule=capped`` needs the numba evaluator: backend auto or numba
    (docs/SCHEDULES.md); the table (:data:`SCHEDULE_SETTINGS`) checks each value alone."""
    if settings["schedule"] == "capped" and settings.get("backend", "auto") not in (
            "auto", "numba"):
        raise PlannerError(
            f"planner {planner!r}: backend {settings['backend']!r} evaluates the GPipe "
            "schedule only; the capped schedule needs backend auto or numba (or set "
            "schedule=gpipe)")


def ga_population(planner: str, problem: Problem, mode: str, settings: dict[str, Any],
                  budget: Budget, descent: int = 0) -> int:
    """:func:`population_size` with the schedule family's extra seeds and the stage descent's
    allowance (``descent`` evaluations, :mod:`..algorithms.descent`) counted, recorded in
    ``settings["population"]``."""
    from .caps import extra_family_seeds

    extra = extra_family_seeds(problem, mode) if settings["schedule"] == "capped" else 0
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
