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
from collections.abc import Callable

import numpy as np

from ..problem import Problem
from .relax import MAX_WORK, relax_problem

__all__ = ["END_CANDIDATES", "END_NODES", "MAX_CANDIDATES", "MAX_NODES",
           "end_stage_candidates", "last_stage_candidates"]

#: The walk gives up past this many distinct partition pairs ...
MAX_CANDIDATES = 256
#: ... or this many states visited.
MAX_NODES = 2_000_000
#: :func:`end_stage_candidates` gives up past this many pairs ...
END_CANDIDATES = 4096
#: ... or this many nodes of its walk (gpt1-s4, recompute: 5.7 million, about 60 s).
END_NODES = 50_000_000
#: Its first room for end-stages states; each time it runs out, the walk starts again with
#: four times as much, up to :data:`END_ROOM_MAX`.
END_ROOM = 1 << 16
END_ROOM_MAX = 1 << 24
#: Nodes per call of the compiled walk (a few seconds at most): the clock and signals are
#: checked in between.
END_STEP = 200_000


def _last_stage_program(problem: Problem, r: dict, target: float) -> tuple:
    """The stage relaxation's (``r``, :func:`.relax.relax_problem`) program of ``problem``'s
    last stage at ``target``: its forward and
    backward costs, releases, gradient transfers, the tails ``lam`` of the stage above, the
    gradient deadlines ``dl``, the optimizer step, the forwards' tails ``ftail`` and
    ``late[n][k]``, the latest time it may have forwarded ``[0, n)`` and backwarded ``[0, k)``
    and still end by ``target`` (the program's transitions run backwards)."""
    from ._relax_kernels import gradient_deadlines

    S, B = problem.S, problem.B
    s = S - 1
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
    return fwd, back, relf, relb, grad, lam, dl, opt, ftail, late


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
    fwd, back, relf, relb, grad, lam, dl, opt, ftail, late = _last_stage_program(
        problem, relax_problem(problem, mode, 0.0), target)
    inf = math.inf
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


def end_stage_candidates(problem: Problem, mode: str, target: float,
                         max_candidates: int = END_CANDIDATES, max_nodes: int = END_NODES,
                         expired: Callable[[], bool] | None = None
                         ) -> list[tuple[tuple[int, ...], tuple[int, ...]]] | None:
    """The pairs of :func:`last_stage_candidates` in the last stage's dominant order
    (docs/CERTIFY.md "Dominant orders") along which the end-stages program (:mod:`.ends`), its
    last stage running just those operations, still ends below ``target``: the last stage of
    every schedule with ``T < target`` uses one of them (docs/CERTIFY.md "The last-stage
    split through the end stages"), a subset of the relaxation's pairs, often far smaller.
    Sorted by the program's least ``T`` along each. ``[]``: none; None: more than
    ``max_candidates`` pairs, more than ``max_nodes`` nodes of the walk, more room than
    :data:`END_ROOM_MAX` states, ``expired()`` turned true, ``S < 3``, or ``B`` above
    :data:`.ends.MAX_B`. Compiled (numba); about 60 s on gpt1-s4 (recompute)."""
    from . import _split_kernels as k
    from .ends import MAX_B, end_stage_tables

    S, B = problem.S, problem.B
    if S < 3 or B > MAX_B or S * B**3 > MAX_WORK:
        return None
    rx = relax_problem(problem, mode, 0.0)
    fwd, back, relf, relb, grad, lam, dl, opt, ftail, late = _last_stage_program(
        problem, rx, target)
    if late[0][0] < 0.0:
        return []
    f = np.ascontiguousarray
    prog = (f(fwd, dtype=float), f(back, dtype=float), f(relf, dtype=float),
            f(relb, dtype=float), f(grad, dtype=float), f(lam, dtype=float),
            f(dl, dtype=float), float(opt), f(ftail, dtype=float), np.array(late))
    t = end_stage_tables(problem, mode, rx)
    ends = tuple(t[key] for key in ("fL", "bL", "bM", "b0", "gL", "gM", "optL", "optM", "opt0",
                                    "rho", "fendM", "sigM", "sig0", "lamax", "D", "restLf",
                                    "restLb", "restM", "rest0", "minM", "min0"))
    # a pair survives when some end is below target, up to the programs' float rounding
    upper = float(target) * (1.0 + 1e-9)
    room = END_ROOM
    while True:
        w = k.Walk(B, room, max_candidates, t["F0"])
        arrays = (w.ei, w.ev, w.alive, w.head, w.stamp, w.ni, w.nv, w.out, w.outT, w.st)
        while True:
            step = min(END_STEP, max_nodes + 1 - w.nodes)
            status = k.walk(B, float(target), upper, step, mode == "stash", *prog, *ends,
                            *arrays)
            if status != k.RUNNING:
                break
            if w.nodes > max_nodes or (expired is not None and expired()):
                return None
        if status == k.FULL and room < END_ROOM_MAX:
            room *= 4
            continue
        if status != k.DONE:
            return None
        break
    found = []
    for row, T in zip(w.out[:w.found], w.outT[:w.found]):
        P: list[int] = []
        Q: list[int] = []
        n = c = 0
        for op in row:
            if op > 0:
                P.append(int(op) - n)
                n = int(op)
            elif op < 0:
                Q.append(-int(op) - c)
                c = -int(op)
            else:
                break
        found.append((float(T), tuple(P), tuple(Q)))
    found.sort()
    return [(P, Q) for _, P, Q in found]
