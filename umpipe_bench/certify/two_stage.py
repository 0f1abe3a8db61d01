"""The exact optimum of a two-stage problem in stash mode, over every plan and order, by a
dynamic program (docs/CERTIFY.md "Two stages in stash mode").

With two stages the dominant orders (docs/CERTIFY.md "Dominant orders") leave no choice of
order: stage 0 runs every forward back to back from time 0, then its backwards; stage 1 runs
each backward right after its forward. A plan is then its two compositions ``P0`` (stage 0,
forward and backward) and ``P1`` (stage 1), and its timeline is:

* stage 0's forward of its ``j``-th microbatch ends at ``E_j`` (the sum of its forwards so
  far); the activation transfer ends at ``X_j = max(X_{j-1}, E_j) + act``;
* stage 1's microbatch ``[c, d)`` starts at ``max(end of the previous, X of the stage-0
  microbatch holding d - 1)`` and runs forward and backward; its gradient transfer ends at
  ``G = max(previous G, end) + grad``;
* stage 0's backwards start at ``E_last``, in order, the ``j``-th after the gradient of its
  last sample: they end at ``max(E_last, D) + W`` with ``W`` the sum of its backwards and
  ``D = max_j (G(b_j - 1) - W_j)``, ``W_j`` the backwards before the ``j``-th;
* ``T = max(that + opt_0, end of stage 1 + opt_1)``.

The program walks both compositions together. A state is ``(c, a, p)``: stage 1 has run the
samples ``[0, c)``, stage 0 has forwarded ``[0, p)``, its last microbatch ``[a, p)``; stage 0
moves on by one microbatch ``[p, p')``, or stage 1 runs ``[c, d)`` with ``a < d <= p`` (so the
microbatch holding ``d - 1`` is the last one, whose ``X`` the state holds; every plan's steps
can be put in that order: stage 0 moves just far enough before each stage-1 microbatch).
Stage-0 microbatches whose last sample stage 1 has not run yet wait for their gradient; only
the first of them matters for ``D`` (``W_j`` grows with ``j``, and all of them that a stage-1
microbatch covers get its ``G``). A state carries ``E``, ``X``, ``E + W``, ``D + W``, ``W -
W_first waiting``, stage 1's end and ``G``: ``T`` of every completion is non-decreasing in
each, so a state no smaller in all seven than another of the same key is dropped (Pareto
sets), and one whose least possible ``T`` (the rest of each stage's work at its cheapest) is
at least ``upper`` too.

Costs are the model's (a backward the cheaper of its near and far cost), so with
``bwd_far = 1`` (every default problem) the value is the simulator's ``T``. Pure Python:
about 15 s at ``B = 32`` with the best known value as ``upper``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from operator import le
from typing import Any

import numpy as np

from ..plan import Plan
from ..problem import Problem

__all__ = ["MAX_B", "TwoStage", "recompute_program_applies", "two_stage_recompute",
           "two_stage_recompute_bound", "two_stage_stash"]

INF = math.inf
#: The largest batch the program is run for (its work grows about as ``B^4``).
MAX_B = 48


@dataclass
class TwoStage:
    """The program's result: ``T`` (inf when no plan is below ``upper``), its plan, and
    whether it finished (False: stopped by ``deadline``)."""

    T: float
    plan: Plan | None
    finished: bool
    stats: dict[str, Any] = field(default_factory=dict)


def _costs(problem: Problem, mode: str) -> dict[str, Any]:
    """The model's costs of a two-stage ``problem`` as float lists by size (a backward the
    cheaper of its near and far cost), and ``least[kind]``: the least cost of ``n``
    consecutive samples in one stage's microbatches of that kind, for every ``n``."""
    from ..bound import min_composition_costs

    if problem.S != 2:
        raise ValueError(f"the two-stage program needs S = 2, got S = {problem.S}")
    tb = problem.tables()
    back = np.minimum(tb.backward(mode), tb.backward_far(mode))
    c = {"f0": tb.fwd[0], "f1": tb.fwd[1], "b0": back[0], "b1": back[1],
         "act": tb.act[0], "grad": tb.grad[0]}
    least = min_composition_costs(np.array([c["f0"], c["b0"], c["f1"], c["b1"],
                                            c["f1"] + c["b1"]]))
    out: dict[str, Any] = {k: [float(x) for x in v] for k, v in c.items()}
    out["least"] = dict(zip(("f0", "b0", "f1", "b1", "fb1"), (row.tolist() for row in least)))
    out["opt0"], out["opt1"] = float(tb.opt[0]), float(tb.opt[1])
    return out


def _keep(front: list, vec: tuple, item: tuple) -> bool:
    """Add ``(vec, *item)`` to a Pareto ``front`` (entries ``(vector, ...)``, smaller is
    better in every component) unless an entry is no larger in all; drop the entries it is
    no larger than. Whether it was added."""
    for e in front:
        if all(map(le, e[0], vec)):
            return False
    front[:] = [e for e in front if not all(map(le, vec, e[0]))]
    front.append((vec, *item))
    return True


def two_stage_stash(problem: Problem, upper: float = INF,
                    deadline: float | None = None) -> TwoStage:
    """The least ``T`` below ``upper`` over every stash plan and order of a two-stage
    ``problem`` (module docstring), and a plan that reaches it; ``deadline``: a
    ``time.perf_counter()`` value after which the program stops unfinished."""
    B = problem.B
    cs = _costs(problem, "stash")
    f0, f1, b0, b1, act, grad = (cs[k] for k in ("f0", "f1", "b0", "b1", "act", "grad"))
    opt0, opt1, least = cs["opt0"], cs["opt1"], cs["least"]
    # the least cost of the samples [n, B) of a kind
    rest0f, rest0b, rest1 = (least[k][::-1] for k in ("f0", "b0", "fb1"))
    # a state: (vector, raw, node); raw = (E, X, W, D, Wfirst or None, end1, G); node: the
    # steps so far as a linked list (stage, size, parent)
    front: dict[tuple[int, int, int], list[tuple[tuple, tuple, Any]]] = {}
    kept = [0, 0]

    def add(key: tuple[int, int, int], raw: tuple, node: Any) -> None:
        E, X, W, D, Wf, end1, G = raw
        c, _, p = key
        least = max(max(E + rest0f[p], D) + W + rest0b[p] + opt0, end1 + rest1[c] + opt1)
        if least >= upper:
            return
        vec = (E, X, E + W, D + W, W - Wf if Wf is not None else -INF, end1, G)
        kept[0] += _keep(front.setdefault(key, []), vec, (raw, node))

    add((0, 0, 0), (0.0, 0.0, 0.0, -INF, None, 0.0, 0.0), None)
    best_T, best_node = INF, None
    for total in range(2 * B + 1):  # every step raises c + p
        if deadline is not None and time.perf_counter() > deadline:
            return TwoStage(INF, None, False, {"states": kept[0], "front": kept[1]})
        for p in range(B + 1):
            c = total - p
            if not 0 <= c <= p:
                continue
            for a in range(p + 1):
                lst = front.pop((c, a, p), None)
                if not lst:
                    continue
                kept[1] = max(kept[1], len(lst))
                for _, raw, node in lst:
                    E, X, W, D, Wf, end1, G = raw
                    if c == B:
                        T = max(max(E, D) + W + opt0, end1 + opt1)
                        if T < best_T:
                            best_T, best_node = T, node
                        continue
                    for q in range(p + 1, B + 1):  # stage 0 forwards [p, q)
                        m = q - p
                        E2 = E + f0[m]
                        add((c, p, q), (E2, max(X, E2) + act[m], W + b0[m], D,
                                        W if c == p else Wf, end1, G), (0, m, node))
                    for d in range(max(c, a) + 1, p + 1):  # stage 1 runs [c, d)
                        m = d - c
                        e1 = max(end1, X) + f1[m] + b1[m]
                        G2 = max(G, e1) + grad[m]
                        D2 = max(D, G2 - Wf) if (d == p or a > c) else D
                        add((d, a, p), (E, X, W, D2, None if d == p else W - b0[p - a],
                                        e1, G2), (1, m, node))
    plan = None
    if best_node is not None:
        sizes: list[list[int]] = [[], []]
        node = best_node
        while node is not None:
            stage, m, node = node
            sizes[stage].append(m)
        P = tuple(tuple(reversed(s)) for s in sizes)
        plan = Plan(P, P, "stash")
    return TwoStage(best_T, plan, True, {"states": kept[0], "front": kept[1]})


def two_stage_recompute_bound(problem: Problem, upper: float = INF,
                              deadline: float | None = None) -> TwoStage:
    """A lower bound on ``T`` of every recompute plan and order of a two-stage ``problem``
    (docs/CERTIFY.md "Two stages in recompute mode"): the least ``T`` below ``upper`` of a
    program exact in stage 1 (forward and backward compositions, its dominant order) and in
    stage 0's forwards, with stage 0's backward composition relaxed sample by sample. ``T``
    is inf when nothing is below ``upper`` (then ``upper`` is the bound); no plan."""
    B = problem.B
    cs = _costs(problem, "recompute")
    f0, f1, r0, r1, act, grad = (cs[k] for k in ("f0", "f1", "b0", "b1", "act", "grad"))
    opt0, opt1, least = cs["opt0"], cs["opt1"], cs["least"]
    # the least cost of the samples [n, B) of a kind
    rest0f, rest0b, rest1f, rest1b = (least[k][::-1] for k in ("f0", "b0", "f1", "b1"))
    # tail0[t]: the least stage-0 backward work from the start of the microbatch holding t
    tail0 = [min(r0[y - x] + rest0b[y] for x in range(t + 1) for y in range(t + 1, B + 1))
             for t in range(B)]
    W0, gmin, amin = rest0b[0], min(grad[1:]), min(act[1:])
    f1min, r1min = min(f1[1:]), min(r1[1:])
    layers: list[dict | None] = [{} for _ in range(2 * B + 1)]  # by c + k
    kept = [0, 0]

    def add(key: tuple[int, int, int, int], raw: tuple) -> None:
        E, X, D, end1, G = raw
        _, p, c, k = key
        r = end1 + rest1f[c] + rest1b[k]
        if c < B:  # the last sample: stage 0's forwards, a transfer, stage 1's F and B of it
            r = max(r, (E + rest0f[p] + amin if p < B else X) + f1min + r1min)
        last = r + gmin + tail0[B - 1] if k < B else -INF
        if max(max(E + rest0f[p] + W0, D, last) + opt0, r + opt1) >= upper:
            return
        kept[0] += _keep(layers[c + k].setdefault(key, []),  # type: ignore[union-attr]
                         (E, X, D, end1, G), (raw,))

    add((0, 0, 0, 0), (0.0, 0.0, -INF, 0.0, 0.0))
    best = INF
    for L in range(2 * B + 1):
        if deadline is not None and time.perf_counter() > deadline:
            return TwoStage(INF, None, False, {"states": kept[0], "front": kept[1]})
        front = layers[L]
        assert front is not None
        for (a, p, c, k), lst in front.items():
            kept[1] = max(kept[1], len(lst))
            for _, raw in lst:
                E, X, D, end1, G = raw
                if k == B:
                    best = min(best, max(max(E + W0, D) + opt0, end1 + opt1))
                    continue
                for d in range(c + 1, B + 1):  # stage 1 forwards [c, d)
                    if d <= p:
                        add((a, p, d, k), (E, X, D, max(end1, X) + f1[d - c], G))
                        continue
                    for a2 in range(p, d):  # stage 0 first: [p, a2) at its cheapest, [a2, p2)
                        Ea = E + least["f0"][a2 - p]
                        for p2 in range(d, B + 1):
                            E2 = Ea + f0[p2 - a2]
                            X2 = max(X, E2) + act[p2 - a2]
                            add((a2, p2, d, k), (E2, X2, D, max(end1, X2) + f1[d - c], G))
                for k2 in range(k + 1, c + 1):  # stage 1 backwards [k, k2)
                    e = end1 + r1[k2 - k]
                    G2 = max(G, e) + grad[k2 - k]
                    add((a, p, c, k2), (E, X, max(D, G2 + max(tail0[k:k2])), e, G2))
        layers[L] = None
    return TwoStage(best, None, True, {"states": kept[0], "front": kept[1]})


#: states the exact recompute program holds at most (about 64 bytes each)
RECOMPUTE_CAPACITY = 40_000_000


def _cheapest_parts(cost: list[float], least: list[float], m: int) -> list[int]:
    """A composition of ``m`` samples whose microbatch costs ``cost[size]`` sum to ``least[m]``
    (the least cost, :func:`umpipe_bench.bound.min_composition_costs`), first microbatch
    first."""
    parts: list[int] = []
    while m:
        q = min(range(1, m + 1), key=lambda q: least[m - q] + cost[q])
        parts.append(q)
        m -= q
    return parts[::-1]


def recompute_program_applies(problem: Problem) -> bool:
    """Whether :func:`two_stage_recompute` is exact for ``problem``: two stages, every
    activation transfer no longer than every stage-0 forward (then a transfer always ends
    before the next forward does, so a microbatch's activation arrives its transfer after its
    forward ends, whatever came before)."""
    if problem.S != 2:
        return False
    tb = problem.tables()
    return bool(tb.act[0][1:].max() <= tb.fwd[0][1:].min())


def two_stage_recompute(problem: Problem, upper: float = INF, deadline: float | None = None,
                        capacity: int = RECOMPUTE_CAPACITY) -> TwoStage:
    """The least ``T`` below ``upper`` over every recompute plan and order of a two-stage
    ``problem`` whose transfers are never longer than a forward (docs/CERTIFY.md "Two stages in
    recompute mode"), and a plan that reaches it; ``finished`` False when ``deadline`` (a
    ``time.perf_counter()`` value) or ``capacity`` states stopped it first.

    The states of :func:`two_stage_recompute_bound` with stage 0's backward composition exact:
    ``(p, c, k, x, fresh)``, ``x`` the first sample of stage 0's open backward microbatch, and
    ``(E, X, E + W, M, end1, G)`` with ``W`` the cost of stage 0's closed backward microbatches
    and ``M = max over them of (gradient arrival + the backwards from it on)`` so far, so that
    stage 0 ends at ``max(E + W, M)`` once every sample is closed. A stage-1 backward ``[k, k2)``
    delivers the gradients of ``[k, k2)`` at ``G2``; stage 0's microbatch ``[x, y)`` with
    ``k < y <= k2`` may close on it (``M = max(M, G2) + cost``: it starts after ``G2`` and after
    the backwards before it), and the microbatches after it ending by ``k2`` (``fresh``) only add
    their cost, the cheapest composition. Compiled (numba)."""
    from ._two_stage_kernels import run_layer

    if not recompute_program_applies(problem):
        raise ValueError("the exact recompute program needs two stages and every activation "
                         "transfer no longer than every stage-0 forward")
    B = problem.B
    cs = _costs(problem, "recompute")
    f0, f1, r0, r1, act, grad = (cs[k] for k in ("f0", "f1", "b0", "b1", "act", "grad"))
    least = cs["least"]
    rest = [least[k][::-1] for k in ("f0", "b0", "f1", "b1")]
    W = max(B + 1, 6)
    tb = np.zeros((5, W))
    for j, r in enumerate(rest):
        tb[j, :B + 1] = r
    tb[4, :6] = (min(act[1:]), min(f1[1:]), min(r1[1:]), min(grad[1:]), cs["opt0"],
                 cs["opt1"])
    lf0, lb0 = np.array(least["f0"]), np.array(least["b0"])
    costs = np.array([f0, f1, r0, r1, act, grad], dtype=np.float64)
    n_keys = (B + 1) ** 4 * 2
    # vec, nxt, alive, parent, kind, arg, head, lnext, lhead, counts (_two_stage_kernels)
    st = (np.empty((capacity, 6)), np.empty(capacity, np.int32), np.zeros(capacity, np.bool_),
          np.empty(capacity, np.int32), np.empty(capacity, np.int8),
          np.empty((capacity, 3), np.int16), np.full(n_keys, -1, np.int32),
          np.full(n_keys, -2, np.int64), np.full(2 * B + 1, -1, np.int64),
          np.zeros(1, np.int64))
    vec, nxt, alive, parent, kind, arg, head, lnext, lhead, counts = st
    # the start: nothing run, stage 0's open backward at 0 (key 0, layer 0)
    vec[0] = (0.0, 0.0, 0.0, -INF, 0.0, 0.0)
    nxt[0], alive[0], parent[0], kind[0] = -1, True, -1, -1
    head[0], lnext[0], lhead[0], counts[0] = 0, -1, 0, 1
    best, best_i = INF, -1
    for L in range(2 * B + 1):
        if deadline is not None and time.perf_counter() > deadline:
            return TwoStage(INF, None, False, {"states": int(counts[0])})
        T, i, status = run_layer(L, B, costs, lf0, lb0, tb, upper, st)
        if status < 0:
            return TwoStage(INF, None, False, {"states": int(counts[0]), "full": True})
        if T < best:
            best, best_i = T, i
    plan = None
    if best_i >= 0:
        sizes: dict[str, list[int]] = {"P0": [], "Q0": [], "P1": [], "Q1": []}
        i = best_i
        while i >= 0 and kind[i] >= 0:
            a = [int(x) for x in arg[i]]
            if kind[i] == 0:
                sizes["P1"].append(a[0])
            elif kind[i] == 1:
                sizes["P1"].append(a[2])
                sizes["P0"].append(a[1])
                sizes["P0"].extend(reversed(_cheapest_parts(f0, least["f0"], a[0])))
            elif kind[i] == 2:
                if a[1]:
                    sizes["Q0"].append(a[1])
                sizes["Q1"].append(a[0])
            else:
                sizes["Q0"].extend(reversed(_cheapest_parts(r0, least["b0"], a[0])))
            i = int(parent[i])
        P = (tuple(reversed(sizes["P0"])), tuple(reversed(sizes["P1"])))
        Q = (tuple(reversed(sizes["Q0"])), tuple(reversed(sizes["Q1"])))
        plan = Plan(P, Q, "recompute")
    return TwoStage(best, plan, True, {"states": int(counts[0])})
