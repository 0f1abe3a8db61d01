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

__all__ = ["prefix_dp"]


@njit(cache=True)
def prefix_dp(R, cost, link, has_link, start):  # pragma: no cover - compiled
    """Microbatch ends of the best composition (see
    :func:`..algorithms.greedy.pareto_prefix_dp`)."""
    B = cost.shape[0] - 1
    cap = 4 * (B + 1)
    pre = np.empty(cap, np.int64)
    V = np.empty(cap, np.float64)
    W = np.empty(cap, np.float64)
    parent = np.empty(cap, np.int64)
    pre[0] = 0
    V[0] = start
    W[0] = 0.0
    parent[0] = -1
    n = 1
    cV = np.empty(cap, np.float64)
    cW = np.empty(cap, np.float64)
    rest = np.empty(cap, np.int64)
    base = 0
    for a in range(1, B + 1):
        m = n
        if cV.shape[0] < m:
            cV = np.empty(2 * m, np.float64)
            cW = np.empty(2 * m, np.float64)
            rest = np.empty(2 * m, np.int64)
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
            if n == pre.shape[0]:
                pre = np.concatenate((pre, np.empty(n, np.int64)))
                V = np.concatenate((V, np.empty(n, np.float64)))
                W = np.concatenate((W, np.empty(n, np.float64)))
                parent = np.concatenate((parent, np.empty(n, np.int64)))
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
    # Among the final states the lowest objective; ties: lowest V, then first kept.
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
    ends = np.empty(k, np.int64)
    j = best
    while j > 0:
        k -= 1
        ends[k] = pre[j]
        j = parent[j]
    return ends
