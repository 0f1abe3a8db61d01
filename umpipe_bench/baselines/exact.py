"""``exact``: the true optimum of tiny problems (docs/MODEL.md §2 plans, §4 recurrence).

Exhaustive search over every plan, made cheaper by the recurrence's structure: the backward
pass depends on the forward partitions only through each stage's last forward end
``F[s, K_s]``, and ``T`` is monotone in those ends (docs/MODEL.md §4). So

* stash mode: every forward bit string (``Q = P``), ``2^(S(B-1))`` evaluations;
* recompute mode: every forward bit string once (forward pass only), keep the distinct
  Pareto-minimal vectors ``F[., K]`` (a dominated vector can never give a lower ``T``), then
  every backward bit string against each kept vector: ``2^(S(B-1)) * (1 + U)`` evaluations
  with ``U`` the number of kept vectors, instead of ``4^(S(B-1))``.

Evaluations go through the numba population evaluator, bit-identical to the reference; ties go
to the first plan in enumeration order (forward bits as a binary number, stage 0 first).

The capped schedule (docs/SCHEDULES.md): with ``schedule="auto"`` (default) the search also
enumerates every per-stage in-flight cap ``K[s]`` in ``B, B-1, ..., 1`` (``B^S`` cap vectors
per partition, uncapped first, so ties keep the GPipe plan) wherever that fits the limit:
``2^(S(B-1)) * B^S`` evaluations in stash mode through the family's numba evaluator (e.g.
S=2, B=8: about 10^6). Recompute mode has no Pareto shortcut under caps (its backward no longer
depends on the forward through ``F[s, K_s]`` alone), so there the family is enumerated only
when ``4^(S(B-1)) * B^S`` fits, and otherwise the GPipe space is, and the result says which
(``settings["schedule"]``): ``schedule="capped"`` refuses instead, ``schedule="gpipe"`` never
enumerates caps (the setting's former name ``space`` and value ``family`` are still accepted).
Plans that exceed a memory cap (docs/SCHEDULES.md §4) count as infinitely slow.

The search is exhaustive or refused: it refuses, with a :class:`PlannerError` naming the
limit, any problem that needs more than ``max_evaluations`` (default 2^22, a few seconds) or
the budget's evaluations, whichever is smaller,
i.e. ``S*(B-1) > 22`` bits in stash mode (e.g. S=2 with B<=12, S=4 with B<=6); in recompute
mode about ``S*(B-1) <= 16``, depending on U.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from umpipe_bench.memory import MemoryCapError, capacities, memory_figures
from umpipe_bench.planners.evaluation.encoding import bits_to_plan, codes_to_bits
from umpipe_bench.planners.evaluation.evaluator import BACKENDS, PopulationEvaluator
from umpipe_bench.planners.evaluation.family import FamilyEvaluator
from umpipe_bench.planners.search.base import Budget, Planner, PlannerError, PlanResult
from umpipe_bench.planners.search.settings import Setting, SettingsTable, resolve_settings
from umpipe_bench.problem import Problem
from umpipe_bench.simulator import gpipe_recurrence, simulate

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
    defaults = SettingsTable(
        Setting("max_evaluations", int, 1 << 22, "refuse a problem whose enumeration needs "
                "more evaluations (the evaluation budget caps it too)", low=1),
        Setting("backend", str, "auto", "evaluator of the GPipe schedule", choices=BACKENDS),
        Setting("schedule", str, "auto", "capped: every partition and cap vector of the "
                "capped schedule; gpipe: GPipe plans only; auto: capped when it fits "
                "max_evaluations, else gpipe", choices=("auto", "capped", "gpipe"),
                aliases={"family": "capped"}),
        renamed={"space": "schedule"},
    )

    def _refuse(self, problem: Problem, mode: str, need: int, limit: int, why: str) -> None:
        raise PlannerError(
            f"planner 'exact' refuses problem {problem.name!r} (S={problem.S}, B={problem.B}, "
            f"{mode}): {why} needs {need:,} evaluations, over the limit of {limit:,} (the "
            f"smaller of max_evaluations and the evaluation budget; about S*(B-1) <= "
            f"{int(math.log2(max(limit, 2)))} bits in stash mode); use a heuristic planner, or "
            "raise max_evaluations and the budget")

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        s = resolve_settings(self.name, self.defaults, self.settings)
        limit = int(s["max_evaluations"])
        if budget.evaluations is not None:  # an evaluation budget caps the enumeration too
            limit = min(limit, int(budget.evaluations))
        S, B = problem.S, problem.B
        L = B - 1
        nbits = S * L
        if s["schedule"] != "gpipe":
            n_family = (2 ** nbits if mode == "stash" else 4 ** nbits) * B ** S
            if n_family <= limit:
                return self._family(problem, mode, s, n_family)
            if s["schedule"] == "capped":
                self._refuse(problem, mode, n_family, limit,
                             f"the capped schedule (partitions x {B}^{S} cap vectors)")
        if capacities(problem) is not None and memory_figures(problem, mode) is not None:
            raise PlannerError(
                f"planner 'exact' refuses problem {problem.name!r} ({mode}) under a memory cap: "
                "its GPipe-space search does not check memory, and the capped schedule needs "
                f"{(2 ** nbits if mode == 'stash' else 4 ** nbits) * B ** S:,} evaluations, "
                f"over max_evaluations={limit:,}")
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
                          start_time=start, history=[], settings={**s, "schedule": "gpipe"})

    def _family(self, problem: Problem, mode: str, s: dict, n: int) -> PlanResult:
        """Every partition (both directions in recompute) times every cap vector."""
        S, B = problem.S, problem.B
        L = B - 1
        nbits = S * L
        ev = FamilyEvaluator(problem, mode)
        caps_all = np.array(list(itertools.product(range(B, 0, -1), repeat=S)), dtype=np.int64)
        zero = np.zeros((1, S, L), dtype=np.uint8)
        start = float(ev(zero, zero, caps_all[0])[0])
        best = (np.inf, 0, 0, 0)
        evals = 1
        Nf = 1 << nbits
        b_codes = [None] if mode == "stash" else range(Nf)
        for bc in b_codes:
            bb = None if bc is None else _bits(np.array([bc]), S, L)
            for k, caps in enumerate(caps_all):
                for lo in range(0, Nf, _CHUNK):
                    codes = np.arange(lo, min(Nf, lo + _CHUNK), dtype=np.int64)
                    fb = _bits(codes, S, L)
                    T = ev(fb, None if bb is None else np.broadcast_to(bb, fb.shape), caps)
                    evals += codes.size
                    i = int(np.argmin(T))
                    if T[i] < best[0]:
                        best = (float(T[i]), int(codes[i]), 0 if bc is None else bc, k)
        if not np.isfinite(best[0]):
            raise MemoryCapError(f"planner 'exact': no plan of problem {problem.name!r} "
                                 f"({mode}) under the capped schedule fits its memory caps")
        fb = _bits(np.array([best[1]]), S, L)[0]
        bb = fb if mode == "stash" else _bits(np.array([best[2]]), S, L)[0]
        plan = bits_to_plan(fb, bb, mode, caps_all[best[3]])
        capped = plan.caps is not None
        T = simulate(problem, plan).iteration_time
        return PlanResult(planner=self.name, plan=plan, iteration_time=T, evaluations=evals,
                          schedule="capped" if capped else "gpipe", start_time=start,
                          history=[], settings={**s, "schedule": "capped"})
