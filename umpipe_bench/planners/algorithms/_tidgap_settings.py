"""TiDGAP's budget, restart and revival defaults and the parsers of its ``auto`` settings.

The figures that chose each default are in the comments below; the planner and its settings are
:mod:`.tidgap`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...problem import Problem
from ..search.base import Budget
from ..search.settings import auto_or

__all__ = ["AUTO_SEARCHES", "BUDGET_CAP", "BUDGET_PER_BIT", "BUDGET_WORK", "HUB_AUTO",
           "ISLAND_FLOOR", "MAX_RESTARTS", "REVIVE_AUTO", "ROUND_FLOOR", "ROUND_PER_BIT",
           "SETTLE", "Settle", "auto_restarts", "default_evaluations", "parse_restarts",
           "parse_revive", "settle_budget", "settle_round", "settle_text"]

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


#: ``hub=auto``: the share of the iterated descent's kicks that are hub kicks
#: (:mod:`.iterated`), per memory mode. Against none, in default runs (60 s, one core per
#: run, the two back to back per seed; results/perf/plan-speed.md, "Hub kicks"): in stash
#: the final plan was faster in 10 of 15 runs (sim-s8-b64-s0 and sim-s16-b64-s1 seeds
#: 100-105, vgg16 seeds 100-102); in recompute (a kick moves the forward or the backward
#: partition around its own hub) in 10 of 12 (sim-s8-b64-s0 and vgg16, seeds 200-205), not
#: on sim-s16-b64-s1 (2 of 6, seeds 300-305). On the problems the rule ends every run still
#: ended within 0.5 % of the best known in both modes (80 of 80 each, seeds 0-9), with the
#: same or fewer evaluations to get there at the median (seeds 0-4, against none).
HUB_AUTO = {"stash": 0.25, "recompute": 0.25}

#: The most searches the default budget runs side by side (setting ``searches``, ``auto``: as
#: many as the process's cores, at most this; :mod:`..search.side_by_side`). On the problems
#: whose runs the 60 s cap ends a search on one core made 0.75-1.18 times the evaluations of
#: one on both (median per problem and mode, seeds 0-4), the same plans at equal evaluations;
#: the second core buys a second basin instead (results/perf/plan-speed.md, "Searches side by
#: side").
AUTO_SEARCHES = 2


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



@dataclass(frozen=True)
class Settle:
    """The stop rule of the default budget (:class:`..search.settle.SettlingRestarts`,
    docs/SEARCH.md "Stopping"): rounds of ``max(round_floor, round_per_bit*S*(B-1))``
    evaluations; the run ends once ``patience`` rounds in a row gain less than ``tolerance``,
    after at least ``min_rounds``, at most ``max_rounds``; ``seconds`` caps the whole command
    (the run's clock); after each round a plan is polished (the iterated descent) with at
    most ``polish_share`` times a round's evaluations: a search round's own best (TiDGAP's
    setting ``polish_own``; false: the best plan so far, as after a round of the polish
    alone), and a search round pays when its polished plan beats the best before it. With
    ``polish_own`` the run also goes on while the last search round, polished, ended more
    than ``agree`` above the best plan (the rounds disagree: another basin may be better).

    Where the figures come from: shares 2 and 6, and 4 with rounds of 100,000, compared on
    vgg16 and sim-s16-b64-s1 seeds 0-3 (`git show ffb78c9`); patience 5 against 3 on the
    S = 4 problems, seeds 0-9 (`git show f40ab5c`); patience 8 (9 rounds at least) against
    5 (6), with fresh rounds polished on their own, in a one-off comparison not kept in
    results/ (sim-s4-b16-s0 recompute and vgg16-s4 stash, seeds 100-101: the first's seed
    100 left a plan 0.56 % above the optimum only with 8; runs took up to 42 s); the
    default's figures: results/perf/plan-speed.md."""

    round_floor: int = 250_000
    round_per_bit: int = 16
    min_rounds: int = 9
    max_rounds: int = 16
    patience: int = 8
    tolerance: float = 5e-4
    seconds: float = 60.0
    polish_share: float = 6.0
    double_every: int = 2
    max_doublings: int = 3
    ga_rounds: int = 2
    agree: float = 0.005


#: The default budget's stop rule.
SETTLE = Settle()


def settle_text(rule: Settle = SETTLE) -> str:
    """The rule in words, as ``plan --help`` gives it."""
    return (f"restart rounds until {rule.patience} in a row gain less than "
            f"{100 * rule.tolerance:g} % and the last fresh round ends within "
            f"{100 * rule.agree:g} % of the best (at least {rule.min_rounds} rounds, at most "
            f"{rule.max_rounds}), at most {rule.seconds:g} s")


def settle_round(problem: Problem, rule: Settle = SETTLE) -> int:
    """The evaluations of one round under the stop rule."""
    L = max(1, problem.S * (problem.B - 1))
    return max(rule.round_floor, rule.round_per_bit * L)


def settle_budget(problem: Problem, rule: Settle = SETTLE) -> Budget:
    """TiDGAP's default budget: the stop rule, capped at ``max_rounds`` whole rounds (with
    their polish) and ``seconds``."""
    per = settle_round(problem, rule)
    sizes = [per << (min(rule.max_doublings, r // rule.double_every) if rule.double_every
                     else 0) for r in range(rule.max_rounds)]
    cap = sum(n + int(rule.polish_share * n) for n in sizes)
    return Budget(evaluations=cap, seconds=rule.seconds, settle=True)
