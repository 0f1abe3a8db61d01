"""The last-stage split: a proof of optimality one last-stage partition at a time
(docs/CERTIFY.md "The last-stage split").

The stage relaxation (:mod:`.relax`) bounds every schedule by a dynamic program over the last
stage's own operations, its neighbours relaxed to release and tail times. A schedule that ends
by a target ``T*`` runs its last stage along a path of that program that ends by ``T*`` too, so
its last stage's forward and backward partitions are among those of the program's paths that
end by ``T*``: :func:`last_stage_candidates` lists them (a walk over the program's states,
pruned by the latest time each state can still end by ``T*``). Where the relaxation is close
to the best value, few partitions are left, and a solve with the last stage's partitions fixed
is far smaller than the whole model: when the solver finds no schedule below ``T*`` for any of
them, no schedule is below ``T*`` (:func:`.solve.certify`'s ``split``).

This module imports no solver; the walk is plain Python over ``O(B^2)`` states.
"""

from __future__ import annotations

import math

import numpy as np

from ..problem import Problem
from .relax import MAX_WORK, relax_problem

__all__ = ["MAX_CANDIDATES", "MAX_NODES", "last_stage_candidates"]

#: The walk gives up past this many distinct partition pairs ...
MAX_CANDIDATES = 256
#: ... or this many states visited.
MAX_NODES = 2_000_000


def last_stage_candidates(problem: Problem, mode: str, target: float,
                          max_candidates: int = MAX_CANDIDATES, max_nodes: int = MAX_NODES
                          ) -> list[tuple[tuple[int, ...], tuple[int, ...]]] | None:
    """Every pair (forward sizes, backward sizes) of the last stage along which the stage
    relaxation's program ends by ``target`` (seconds): the last stage of every schedule with
    ``T <= target`` uses one of them (in stash mode only pairs with equal sizes, the mode's
    own). ``[]``: none, so every schedule is above ``target``; None: more than
    ``max_candidates`` pairs or ``max_nodes`` states (or a problem past the relaxation's
    :data:`.relax.MAX_WORK`)."""
    S, B = problem.S, problem.B
    if S * B**3 > MAX_WORK:
        return None
    from ._relax_kernels import gradient_deadlines

    # the last stage's program as the relaxation states it
    r, s = relax_problem(problem, mode, 0.0), S - 1
    fwd, back, relf, relb = r["fwd"][s], r["back"][s], r["rho"][s], r["sigma"][s]
    grad, opt, ftail = r["grad"][s], r["opt"][s], r["ftail"][s]
    lam = r["lam"][s - 1] if s > 0 else np.full(B, -math.inf)
    dl = gradient_deadlines(float(target), *r["above"], s)
    inf = math.inf
    # late[n][k]: the latest time the stage may have forwarded [0, n) and backwarded [0, k)
    # and still end by the target (the program's transitions run backwards)
    late = [[-inf] * (B + 1) for _ in range(B + 1)]
    late[B][B] = inf
    for n in range(B, -1, -1):
        for k in range(n, -1, -1):
            if n == B and k == B:
                continue
            best = -inf
            for n2 in range(n + 1, B + 1):  # the forward [n, n2)
                lim = min(late[n2][k], target - ftail[n, n2])
                f = fwd[n2 - n]
                if relf[n2 - 1] + f <= lim:
                    best = max(best, lim - f)
            low = inf
            for q in range(k + 1, n + 1):  # the backward [k, q)
                low = min(low, dl[q - 1])
                c = back[q - k]
                lim = min(late[n][q], target - grad[q - k] - lam[k], low - grad[q - k])
                if q == B:
                    lim = min(lim, target - opt)
                if relb[q - 1] + c <= lim:
                    best = max(best, lim - c)
            late[n][k] = best
    if late[0][0] < 0.0:
        return []
    found: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    nodes = 0
    # depth first over (n, k, time, forward sizes, backward sizes), an explicit stack; every
    # transition checks the conditions of the relaxation's own program
    # (``_relax_kernels._feasible``): the proof needs the walk to keep exactly its paths
    stack: list[tuple[int, int, float, tuple[int, ...], tuple[int, ...]]] = [(0, 0, 0.0, (), ())]
    while stack:
        n, k, t, P, Q = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            return None
        if n == B and k == B:
            if mode != "stash" or P == Q:
                found.add((P, Q))
                if len(found) > max_candidates:
                    return None
            continue
        for n2 in range(n + 1, B + 1):
            e = max(t, relf[n2 - 1]) + fwd[n2 - n]
            if e + ftail[n, n2] <= target and e <= late[n2][k]:
                stack.append((n2, k, e, (*P, n2 - n), Q))
        low = inf
        for q in range(k + 1, n + 1):
            low = min(low, dl[q - 1])
            e = max(t, relb[q - 1]) + back[q - k]
            if e + grad[q - k] + lam[k] > target or e + grad[q - k] > low:
                continue
            if q == B and e + opt > target:
                continue
            if e <= late[n][q]:
                stack.append((n, q, e, P, (*Q, q - k)))
    return sorted(found)
