"""Compiled (numba) form of :func:`..algorithms.greedy.pareto_prefix_dp`: the same states, the same
order, the same ties, so ``greedy-dp`` builds the same plan (docs/MODEL.md §4 chains).

The numpy form sorts every prefix's candidates (``lexsort`` by ``V``, then ``W``) and keeps
those whose ``W`` is below every earlier one: ``O(m log m)`` per prefix plus Python overhead,
quadratic in ``B`` overall (4.9-8.2 s at S = 64, B = 1024). Here the kept
states are found in the same order by repeated minimum scans: the first kept is the minimum by
``(V, W, index)``; each next one the minimum among candidates with ``W`` below the last kept
one's, scanning only the few candidates whose ``W`` is below the first kept one's: about two
passes over the candidates per prefix, no sort, no temporaries.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["prefix_dp", "prefix_dp_ends", "prefix_dp_run"]


@njit(cache=True)
def prefix_dp_run(R, cost, link, has_link, pre, V, W, parent, cV, cW, rest, n, a0,
                  a1):  # pragma: no cover - compiled
    """Prefixes ``a0 .. a1 - 1`` of the DP, in place: ``pre``, ``V``, ``W``, ``parent`` hold
    the ``n`` kept states so far (last sample, ``V``, ``W``, the state it extends; state 0 the
    empty prefix), ``cV``, ``cW``, ``rest`` are scratch. Stops early, before a prefix, when the
    arrays could not hold its states (twice the states so far). Returns ``(a, n, base)``: the
    next prefix, the states kept, and where the last prefix's states begin. Consecutive calls
    keep the states one call over all prefixes keeps. Only numbers come back: boxing new
    arrays on the way out would let a pending signal's handler run inside the call."""
    base = n
    for a in range(a0, a1):
        m = n
        if 2 * m > pre.shape[0] or m > cV.shape[0]:
            return a, n, base
        for i in range(m):
            p = a - pre[i]
            v = max(V[i], R[a]) + cost[p]
            cV[i] = v
            cW[i] = max(W[i], v) + link[p] if has_link else v
        base = n
        # The first kept state: the minimum by (V, W, index) over all candidates; only
        # candidates with W below its W can follow, so later scans read those alone.
        best = 0
        for i in range(1, m):
            if cV[i] < cV[best] or (cV[i] == cV[best] and cW[i] < cW[best]):
                best = i
        nrest = 0
        for i in range(m):
            if cW[i] < cW[best]:
                rest[nrest] = i
                nrest += 1
        while best >= 0:
            pre[n] = a
            V[n] = cV[best]
            W[n] = cW[best]
            parent[n] = best
            n += 1
            bound = cW[best]
            best = -1
            for r in range(nrest):
                i = rest[r]
                if cW[i] < bound and (best < 0 or cV[i] < cV[best]
                                      or (cV[i] == cV[best] and cW[i] < cW[best])):
                    best = i
    return a1, n, base


@njit(cache=True)
def prefix_dp_ends(pre, V, W, parent, n, base, has_link, ends):  # pragma: no cover - compiled
    """The best final state's microbatch ends written to ``ends`` (states ``base .. n-1`` end
    at sample B; the lowest objective, ties: lowest V, then first kept); returns how many."""
    best = base
    for i in range(base + 1, n):
        oi = W[i] if has_link else V[i]
        ob = W[best] if has_link else V[best]
        if oi < ob or (oi == ob and V[i] < V[best]):
            best = i
    k = 0
    j = best
    while j > 0:
        k += 1
        j = parent[j]
    count = k
    j = best
    while j > 0:
        k -= 1
        ends[k] = pre[j]
        j = parent[j]
    return count


def prefix_dp(R, cost, link, has_link, start, between=None, block_seconds=0.05):
    """Microbatch ends of the best composition (see
    :func:`..algorithms.greedy.pareto_prefix_dp`), in compiled calls over blocks of prefixes
    sized to take about ``block_seconds`` each; ``between()``, when given, runs between two
    calls (the run clock's check: a deadline or a signal acts there, not after the whole DP,
    which takes seconds at B = 2048)."""
    import time

    B = cost.shape[0] - 1
    cap = 4 * (B + 1)
    pre, parent = np.empty(cap, np.int64), np.empty(cap, np.int64)
    V, W = np.empty(cap, np.float64), np.empty(cap, np.float64)
    cV, cW, rest = np.empty(cap, np.float64), np.empty(cap, np.float64), np.empty(cap, np.int64)
    pre[0], V[0], W[0], parent[0] = 0, float(start), 0.0, -1
    a, n, base, step = 1, 1, 1, 16
    while a <= B:
        t0 = time.perf_counter()
        reached, n, base = prefix_dp_run(R, cost, link, has_link, pre, V, W, parent, cV, cW,
                                         rest, n, a, min(B + 1, a + step))
        took = time.perf_counter() - t0
        if reached == a:  # no room for the next prefix's states: grow the arrays
            grow = pre.shape[0]
            pre, parent = (np.concatenate((x, np.empty(grow, np.int64))) for x in (pre, parent))
            V, W, cV, cW = (np.concatenate((x, np.empty(grow, np.float64)))
                            for x in (V, W, cV, cW))
            rest = np.concatenate((rest, np.empty(grow, np.int64)))
            continue
        # the work per prefix grows with the states kept so far: aim each call at the block
        done = reached - a
        a = reached
        step = max(1, int(done * min(4.0, block_seconds / took))) if took > 0 else 4 * done
        if between is not None and a <= B:
            between()
    ends = np.empty(B, np.int64)
    k = prefix_dp_ends(pre, V, W, parent, n, base, has_link, ends)
    return ends[:k]
