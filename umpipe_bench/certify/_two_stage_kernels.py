"""The compiled (numba) layer step of the exact two-stage recompute program
(:func:`.two_stage.two_stage_recompute`; docs/CERTIFY.md "Two stages in recompute mode").

States live in flat arrays: ``vec[i]`` = ``(E, X, E + W, M, end1, G)``, ``nxt[i]`` (the next
state of the same key, -1 at the end), ``alive[i]``, and for the plan, ``parent[i]``,
``kind[i]`` and ``arg[i, :]``. A key is the index of ``(p, c, k, x, fresh)``; ``head[key]`` is
its first state, ``lnext[key]`` the next key of the same layer ``c + k`` (-2: not met yet;
``lhead`` per layer). Every insertion keeps each key's states a Pareto set: a vector no
smaller in all six components than a living one of the key is dropped, and the living ones it
is no larger than die.

Step kinds (``arg``): 0 stage 1 forwards ``[c, d)`` (``d - c``); 1 stage 0 forwards
``[p, a2)`` at its cheapest then ``[a2, p2)`` and stage 1 ``[c, d)`` (``a2 - p``, ``p2 - a2``,
``d - c``); 2 stage 1 backwards ``[k, k2)`` (``k2 - k``, then the closed stage-0 backward's
size or 0); 3 stage 0's backwards ``[x, z)`` at their cheapest (``z - x``).

Importing this module imports numba; :mod:`.two_stage` does so lazily.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["run_layer"]

INF = np.inf


@njit(cache=True, nogil=True, inline="always")
def _encode(p, c, k, x, fresh, B):  # pragma: no cover - compiled
    n = B + 1
    return (((p * n + c) * n + k) * n + x) * 2 + fresh


@njit(cache=True, nogil=True)
def _bound(p, c, k, x, fresh, v, B, tb):  # pragma: no cover - compiled
    """The least T any completion of a state can reach (docs/CERTIFY.md)."""
    rest0f, rest0b, rest1f, rest1b = tb[0], tb[1], tb[2], tb[3]
    amin, f1min, r1min, gmin = tb[4, 0], tb[4, 1], tb[4, 2], tb[4, 3]
    opt0, opt1 = tb[4, 4], tb[4, 5]
    E, X, EW, M, end1, G = v[0], v[1], v[2], v[3], v[4], v[5]
    r = end1 + rest1f[c] + rest1b[k]
    if c < B:
        if p < B:
            rr = E + rest0f[p] + amin + f1min + r1min
        else:
            rr = X + f1min + r1min
        if rr > r:
            r = rr
    t0 = EW + rest0f[p] + rest0b[x]
    if M + rest0b[x] > t0:
        t0 = M + rest0b[x]
    if x < B:
        if fresh == 1 and x < k:
            gn = G
        else:
            gn = max(G, end1 + r1min) + gmin
        if gn + rest0b[x] > t0:
            t0 = gn + rest0b[x]
    return max(t0 + opt0, r + opt1)


@njit(cache=True, nogil=True)
def _insert(p, c, k, x, fresh, v, par, kd, a0, a1, a2, B, tb, upper, st):  # pragma: no cover
    """Insert a candidate state; ``st`` holds the arrays and counters (see run_layer). Returns
    -1 when the arrays are full, else 0."""
    (vec, nxt, alive, parent, kind, arg, head, lnext, lhead, counts) = st
    if _bound(p, c, k, x, fresh, v, B, tb) >= upper:
        return 0
    key = _encode(p, c, k, x, fresh, B)
    # one pass: a living state no larger in all components drops the candidate; the living
    # ones the candidate is no larger than die (a Pareto set has no pair in that relation, so
    # both cannot happen); dead states are unlinked on the way
    prev = -1
    i = head[key]
    while i >= 0:
        if alive[i]:
            le = True
            ge = True
            for j in range(6):
                if vec[i, j] > v[j]:
                    le = False
                if v[j] > vec[i, j]:
                    ge = False
            if le:
                return 0
            if ge:
                alive[i] = False
        j = nxt[i]
        if alive[i]:
            prev = i
        elif prev < 0:  # unlink a dead state
            head[key] = j
        else:
            nxt[prev] = j
        i = j
    n = counts[0]
    if n >= vec.shape[0]:
        return -1
    for j in range(6):
        vec[n, j] = v[j]
    parent[n] = par
    kind[n] = kd
    arg[n, 0] = a0
    arg[n, 1] = a1
    arg[n, 2] = a2
    alive[n] = True
    if lnext[key] == -2:  # a key not met yet: into its layer's list
        L = c + k
        lnext[key] = lhead[L]
        lhead[L] = key
    nxt[n] = head[key]
    head[key] = n
    counts[0] = n + 1
    return 0


@njit(cache=True, nogil=True)
def run_layer(L, B, costs, lf0, lb0, tb, upper, st):  # pragma: no cover - compiled
    """Expand every living state of layer ``L`` (``c + k = L``): first the fresh closes (into
    this layer), then every step to later layers; final states (``k = B``) give candidate T.
    Returns ``(best T, its state, status)``: status 0 done, -1 arrays full."""
    vec, nxt, alive, head, lnext, lhead = st[0], st[1], st[2], st[6], st[7], st[8]
    f0, f1, r0, r1, act, grad = costs[0], costs[1], costs[2], costs[3], costs[4], costs[5]
    opt0, opt1 = tb[4, 4], tb[4, 5]
    n1 = B + 1
    best = INF
    best_i = -1
    v = np.empty(6)
    gs = np.empty(B + 1)
    hs = np.empty(B + 1)
    for phase in range(2):
        key = lhead[L]
        while key >= 0:
            fresh = key % 2
            rest = key // 2
            x = rest % n1
            rest //= n1
            k = rest % n1
            rest //= n1
            c = rest % n1
            p = rest // n1
            if phase == 0 and fresh == 0:
                key = lnext[key]
                continue
            i = head[key]
            while i >= 0:
                if not alive[i]:
                    i = nxt[i]
                    continue
                E, X, EW, M, end1, G = (vec[i, 0], vec[i, 1], vec[i, 2], vec[i, 3],
                                        vec[i, 4], vec[i, 5])
                if phase == 0:  # close stage 0's backwards [x, z) on the gradient G
                    for z in range(x + 1, k + 1):
                        w = lb0[z - x]
                        v[0] = E
                        v[1] = X
                        v[2] = EW + w
                        v[3] = M + w
                        v[4] = end1
                        v[5] = G
                        if _insert(p, c, k, z, 0, v, i, 3, z - x, 0, 0, B, tb, upper, st) < 0:
                            return best, best_i, -1
                    i = nxt[i]
                    continue
                if k == B:
                    if x == B:
                        T = max(max(EW, M) + opt0, end1 + opt1)
                        if T < best:
                            best = T
                            best_i = i
                    i = nxt[i]
                    continue
                for d in range(c + 1, B + 1):  # stage 1 forwards [c, d)
                    if d <= p:
                        v[0] = E
                        v[1] = X
                        v[2] = EW
                        v[3] = M
                        v[4] = max(end1, X) + f1[d - c]
                        v[5] = G
                        if _insert(p, d, k, x, 0, v, i, 0, d - c, 0, 0, B, tb, upper,
                                   st) < 0:
                            return best, best_i, -1
                        continue
                    for p2 in range(d, B + 1):  # stage 0: [p, a2) at its cheapest, [a2, p2)
                        nk = 0
                        for a2 in range(p, d):
                            g = lf0[a2 - p] + f0[p2 - a2]
                            h = g + act[p2 - a2]
                            skip = False
                            for q in range(nk):  # an earlier a2 no later in E and in X
                                if gs[q] <= g and hs[q] <= h:
                                    skip = True
                                    break
                            if skip:
                                continue
                            gs[nk] = g
                            hs[nk] = h
                            nk += 1
                            E2 = E + g
                            X2 = E2 + act[p2 - a2]
                            v[0] = E2
                            v[1] = X2
                            v[2] = EW + g
                            v[3] = M
                            v[4] = max(end1, X2) + f1[d - c]
                            v[5] = G
                            if _insert(p2, d, k, x, 0, v, i, 1, a2 - p, p2 - a2, d - c, B,
                                       tb, upper, st) < 0:
                                return best, best_i, -1
                for k2 in range(k + 1, c + 1):  # stage 1 backwards [k, k2)
                    e = end1 + r1[k2 - k]
                    G2 = max(G, e) + grad[k2 - k]
                    v[0] = E
                    v[1] = X
                    v[2] = EW
                    v[3] = M
                    v[4] = e
                    v[5] = G2
                    if _insert(p, c, k2, x, 0, v, i, 2, k2 - k, 0, 0, B, tb, upper, st) < 0:
                        return best, best_i, -1
                    for y in range(k + 1, k2 + 1):  # and stage 0's [x, y) on G2
                        w = r0[y - x]
                        v[2] = EW + w
                        v[3] = max(M, G2) + w
                        if _insert(p, c, k2, y, 1, v, i, 2, k2 - k, y - x, 0, B, tb, upper,
                                   st) < 0:
                            return best, best_i, -1
                i = nxt[i]
            key = lnext[key]
    return best, best_i, 0
