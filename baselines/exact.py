"""``exact``: the true optimum of tiny problems (MODEL.md §2 plans, §4 recurrence).

Exhaustive search over every plan, made cheaper by the recurrence's structure: the backward
pass depends on the forward partitions only through each stage's last forward end
``F[s, K_s]``, and ``T`` is monotone in those ends (MODEL.md §4). So

* stash mode: every forward bit string (``Q = P``), ``2^(S(B-1))`` evaluations;
* recompute mode: every forward bit string once (forward pass only), keep the distinct
  Pareto-minimal vectors ``F[., K]`` (a dominated vector can never give a lower ``T``), then
  every backward bit string against each kept vector: ``2^(S(B-1)) * (1 + U)`` evaluations
  with ``U`` the number of kept vectors, instead of ``4^(S(B-1))``.

Evaluations go through the numba population evaluator, bit-identical to the reference; ties go
to the first plan in enumeration order (forward bits as a binary number, stage 0 first).

The search is not budgeted: it refuses, with a :class:`PlannerError` naming the limit, any
problem that needs more than ``max_evaluations`` (default 2^22, a few seconds) evaluations,
i.e. ``S*(B-1) > 22`` bits in stash mode (e.g. S=2 with B<=12, S=4 with B<=6); in recompute
mode about ``S*(B-1) <= 16``, depending on U.
"""

from __future__ import annotations

import math

import numpy as np

from umpipe_bench.planners.base import Budget, Planner, PlannerError, PlanResult
from umpipe_bench.planners.encoding import bits_to_plan, codes_to_bits
from umpipe_bench.planners.evaluator import PopulationEvaluator
from umpipe_bench.planners.settings import resolve_settings
from umpipe_bench.problem import Problem
from umpipe_bench.simulator import gpipe_recurrence

__all__ = ["Exact", "pareto_minimal"]

_CHUNK = 1 << 16


_bits = codes_to_bits  # integer codes -> cut bits [n, S, L] (the one encoding)


def pareto_minimal(X: np.ndarray) -> np.ndarray:
    """Indices of the distinct rows of ``X`` that no other row dominates (<= in every column)."""
    _, first = np.unique(X, axis=0, return_index=True)
    first = np.sort(first)
    order = first[np.lexsort(X[first].T[::-1])]  # lexicographic: dominators come first
    kept: list[int] = []
    for i in order:
        if kept and np.any(np.all(X[kept] <= X[i], axis=1)):
            continue
        kept.append(int(i))
    return np.array(kept, dtype=np.int64)


class Exact(Planner):
    """Exhaustive optimum for tiny problems; settings ``max_evaluations``, ``backend``."""

    name = "exact"
    default_budget = "evals:4194304"
    defaults = {"max_evaluations": 1 << 22, "backend": "auto"}

    def _refuse(self, problem: Problem, mode: str, need: int, limit: int, why: str) -> None:
        raise PlannerError(
            f"planner 'exact' refuses problem {problem.name!r} (S={problem.S}, B={problem.B}, "
            f"{mode}): {why} needs {need:,} evaluations, over the limit max_evaluations="
            f"{limit:,} (about S*(B-1) <= {int(math.log2(limit))} bits in stash mode); use a "
            "heuristic planner, or raise max_evaluations")

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        s = resolve_settings(self.name, self.defaults, self.settings)
        limit = int(s["max_evaluations"])
        S, B = problem.S, problem.B
        L = B - 1
        nbits = S * L
        if nbits > 62 or (1 << nbits) > limit:
            self._refuse(problem, mode, 2**nbits, limit, f"2^(S*(B-1)) = 2^{nbits} forward plans")
        Nf = 1 << nbits
        ev = PopulationEvaluator(problem, mode, s["backend"])
        best_T, best_f, best_b = np.inf, 0, 0
        # The starting point: the first plan enumerated (no cut: one microbatch everywhere).
        zero = np.zeros((1, S, L), dtype=np.uint8)
        start = float(ev(zero, zero)[0])
        evals = 1
        if mode == "stash":
            for lo in range(0, Nf, _CHUNK):
                codes = np.arange(lo, min(Nf, lo + _CHUNK), dtype=np.int64)
                T = ev(_bits(codes, S, L))
                evals += codes.size
                i = int(np.argmin(T))
                if T[i] < best_T:
                    best_T, best_f = float(T[i]), int(codes[i])
            best_b = best_f
        else:
            fronts_F, fronts_c = [], []
            for lo in range(0, Nf, _CHUNK):
                codes = np.arange(lo, min(Nf, lo + _CHUNK), dtype=np.int64)
                F = ev.forward(_bits(codes, S, L))
                evals += codes.size
                keep = pareto_minimal(F)
                fronts_F.append(F[keep])
                fronts_c.append(codes[keep])
            F_all, c_all = np.concatenate(fronts_F), np.concatenate(fronts_c)
            keep = pareto_minimal(F_all)
            keep = keep[np.argsort(c_all[keep], kind="stable")]  # enumeration order
            F_front, c_front = F_all[keep], c_all[keep]
            U = F_front.shape[0]
            if Nf + U * Nf > limit:
                self._refuse(problem, mode, Nf + U * Nf, limit,
                             f"{U} Pareto-minimal forward end vectors x 2^{nbits} backward plans")
            for u in range(U):
                for lo in range(0, Nf, _CHUNK):
                    codes = np.arange(lo, min(Nf, lo + _CHUNK), dtype=np.int64)
                    T = ev.backward(_bits(codes, S, L),
                                    np.broadcast_to(F_front[u], (codes.size, S)))
                    evals += codes.size
                    i = int(np.argmin(T))
                    if T[i] < best_T:
                        best_T, best_f, best_b = float(T[i]), int(c_front[u]), int(codes[i])
        fb = _bits(np.array([best_f]), S, L)[0]
        bb = _bits(np.array([best_b]), S, L)[0]
        plan = bits_to_plan(fb, bb, mode)
        T_ref = gpipe_recurrence(problem, plan)
        return PlanResult(planner=self.name, plan=plan, iteration_time=T_ref, evaluations=evals,
                          start_time=start, history=[], settings=s)
