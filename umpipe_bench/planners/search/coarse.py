"""A coarse start: plan the problem with its samples merged in pairs, then start from that plan
doubled (docs/SEARCH.md, "Coarse start").

The problem at half the mini-batch (:func:`halve_problem`: ``B // 2`` samples, each two of the
original, every cost read at twice the size, bytes per sample doubled) has half the cut bits
per stage, and its search settles far sooner. A plan of it, every microbatch and cap doubled
(:func:`double_plan`), is a plan of the original problem with exactly the same T (with an odd
``B`` the last microbatch of every stage takes the extra sample, and T may differ). Started
from it, the search of the original problem refines the coarse plan's basin instead of
finding a basin first.

Known by construction (``tests/test_coarse.py``): for even ``B``, any plan of the halved
problem and its doubled plan have the same T and the same peak memory.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ...plan import Plan
from ...problem import Link, Problem, StageCosts, StageMemory

if TYPE_CHECKING:
    from .base import Budget, PlanResult

__all__ = ["COARSE_MIN_B", "COARSE_SHARE", "coarse_result", "double_plan", "halve_problem",
           "run_coarse"]

#: ``coarse=auto`` starts coarse only on problems with at least this many samples (the halved
#: problem then has 16 or more).
COARSE_MIN_B = 32
#: The coarse search may take at most this share of the default budget's seconds.
COARSE_SHARE = 0.25


def halve_problem(problem: Problem) -> Problem:
    """The problem at ``B // 2`` samples of two: size ``m`` costs what ``2m`` costs in
    ``problem`` (its dense tables, interpolation included); bytes per sample doubled."""
    if problem.B < 2:
        raise ValueError(f"problem {problem.name!r}: B={problem.B} cannot be halved")
    t = problem.tables()
    half = problem.B // 2
    at = np.arange(1, half + 1) * 2

    def row(table: np.ndarray | None, s: int) -> tuple[float, ...] | None:
        return None if table is None else tuple(float(x) for x in table[s, at])

    stages = []
    for s, st in enumerate(problem.stages):
        mem = st.memory
        if mem is not None:
            held = mem.w_held_bytes_per_sample
            mem = StageMemory(mem.param_bytes, 2 * mem.saved_act_bytes_per_sample,
                              2 * mem.input_bytes_per_sample, mem.capacity_bytes,
                              None if held is None else 2 * held)
        stages.append(StageCosts(
            fwd=row(t.fwd, s), bwd=row(t.bwd, s), rbwd=row(t.rbwd, s),  # type: ignore[arg-type]
            opt=st.opt, memory=mem, name=st.name, extra=st.extra, bwd_far=st.bwd_far,
            ibwd=row(t.ibwd, s), ribwd=row(t.ribwd, s), wbwd=row(t.wbwd, s)))
    links = tuple(Link(2 * ln.act_bytes, 2 * ln.grad_bytes, ln.latency, ln.bandwidth)
                  for ln in problem.links)
    return Problem(name=f"{problem.name} (samples in pairs)", B=half,
                   sizes=tuple(range(1, half + 1)), stages=tuple(stages), links=links,
                   provenance=problem.provenance, device_capacity=problem.device_capacity,
                   description=problem.description).validate()


def double_plan(plan: Plan, B: int) -> Plan:
    """A plan of the halved problem as a plan of ``B`` samples: every microbatch and cap
    doubled; with an odd ``B`` every stage's last microbatch (and every cap) one more."""
    extra = B - 2 * plan.B

    def sizes(row: tuple[int, ...]) -> tuple[int, ...]:
        out = [2 * m for m in row]
        out[-1] += extra
        return tuple(out)

    caps = None if plan.caps is None else tuple(min(B, 2 * k + extra) for k in plan.caps)
    return Plan(fwd=tuple(sizes(r) for r in plan.fwd), bwd=tuple(sizes(r) for r in plan.bwd),
                mode=plan.mode, caps=caps)


def run_coarse(make: Any, problem: Problem, mode: str, budget: Budget, seed: int | None
               ) -> PlanResult:
    """The default-budget search of :func:`halve_problem` (``make()``: its planner), on the
    run's clock with its deadline moved to at most :data:`COARSE_SHARE` of the budget's
    seconds from now; its plan doubled (:func:`double_plan`)."""
    from ..evaluation.clock import current

    clock = current()
    small = halve_problem(problem)
    share = None if budget.seconds is None else COARSE_SHARE * budget.seconds
    with clock.until(share):
        res = make()._plan(small, mode=mode, budget=replace(budget, seconds=share), seed=seed,
                           progress=False)
    res.plan = double_plan(res.plan, problem.B)
    return res


def coarse_result(coarse: PlanResult, fine: PlanResult) -> PlanResult:
    """``fine`` (the search started from ``coarse``'s plan) with the coarse search's
    evaluations and history before its own, and what the coarse search did in its
    settings (``coarse_time``, ``coarse_evaluations``, ``coarse_seconds``)."""
    from .history import History, thinned

    done = coarse.evaluations
    one, two = coarse.history or History(), fine.history or History()
    g0 = one[-1].generation if len(one) else 0

    def col(name: str, shift: float = 0) -> np.ndarray:
        return np.concatenate([one.column(name), two.column(name) + shift])

    hist = thinned(col("generation", g0), col("evaluations", done), col("wall_time"),
                   np.minimum.accumulate(col("best").astype(np.float64)))
    if fine.history is not None:
        hist.extra.update(fine.history.extra)
    fine.history = hist
    fine.evaluations += done
    last = coarse.history[-1].wall_time if coarse.history else 0.0
    fine.settings = {**fine.settings, "coarse": True, "coarse_time": coarse.iteration_time,
                     "coarse_evaluations": done, "coarse_seconds": round(last, 3)}
    return fine
