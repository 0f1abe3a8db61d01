"""Compiled (numba) variation for TiDGAP: one call builds a whole generation's offspring.

The operators are those of :mod:`.operators` (docs/MODEL.md §2 encoding): tournament
selection, two-point crossover per chromosome with one mating decision per pair, and mutation
per chromosome (bit flips, count ~ Binomial(len, flip_rate/len), then within-stage boundary
shifts, count ~ Binomial(S*(stage_len-1), shift_rate/len), applied one after another as DEAP
applies them). A ``local`` generation instead makes every offspring the best individual plus
exactly one move (a flip or a shift): a sampled neighbourhood, the local search on the best.

What makes a generation cheap (PERF-ANCHORS.md: the loop around the evaluation was the cost):
the population lives in preallocated ``[P, len]`` uint8 buffers (the current and the next
generation, swapped), random numbers come from the run's ``numpy.random.Generator`` inside the
kernel, only ``O(changes)`` bytes are touched besides the one copy of each parent row, and the
offspring that changed are written first, so the evaluator reads one contiguous slice.

Importing this module imports numba; :mod:`.tidgap` imports it lazily (``cache=True``: a
second process compiles nothing).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["elite_rows", "vary"]


@njit(cache=True)
def _mutate(rng, row, L, stage_len, S, pflip, pshift):  # pragma: no cover - compiled
    nflip = rng.binomial(L, pflip)
    for _ in range(nflip):
        c = rng.integers(0, L)
        row[c] ^= 1
    if stage_len < 2:
        return
    npairs = S * (stage_len - 1)
    nshift = rng.binomial(npairs, pshift)
    for _ in range(nshift):
        k = rng.integers(0, npairs)
        i = (k // (stage_len - 1)) * stage_len + k % (stage_len - 1)
        a = row[i]
        row[i] = row[i + 1]
        row[i + 1] = a


@njit(cache=True)
def _one_move(rng, row, L, stage_len, S):  # pragma: no cover - compiled
    if stage_len >= 2 and rng.random() < 0.5:
        npairs = S * (stage_len - 1)
        for _ in range(8):  # a shift that moves a boundary (the pair differs)
            k = rng.integers(0, npairs)
            i = (k // (stage_len - 1)) * stage_len + k % (stage_len - 1)
            if row[i] != row[i + 1]:
                a = row[i]
                row[i] = row[i + 1]
                row[i + 1] = a
                return
    c = rng.integers(0, L)
    row[c] ^= 1


@njit(cache=True)
def _cross(rng, a, b, L):  # pragma: no cover - compiled
    c1 = rng.integers(1, L + 1)
    c2 = rng.integers(1, L)
    if c2 >= c1:
        c2 += 1
    lo = min(c1, c2)
    hi = max(c1, c2)
    for i in range(lo, hi):
        t = a[i]
        a[i] = b[i]
        b[i] = t


@njit(cache=True)
def vary(rng, cur_f, cur_b, times, nxt_f, nxt_b, nxt_times, n_off, tournament, cxpb, mutpb,
         flip_rate, shift_rate, stage_len, recompute, local, best):  # pragma: no cover
    """Write ``n_off`` offspring of ``cur_*`` into rows ``0..n_off-1`` of ``nxt_*``, the
    changed ones first; copy the unchanged ones' times into ``nxt_times``. Returns the number
    of changed offspring (the rows to evaluate). In stash mode pass ``cur_b is cur_f`` and
    ``recompute=False``."""
    P, L = cur_f.shape
    S = L // stage_len if stage_len > 0 else 0
    parent = np.empty(n_off, np.int64)
    changed = np.zeros(n_off, np.bool_)
    mate = np.zeros(n_off // 2, np.bool_)
    mut = np.zeros(n_off, np.bool_)
    if local:
        for k in range(n_off):
            parent[k] = best
            changed[k] = True
    else:
        for k in range(n_off):
            w = rng.integers(0, P)
            for _ in range(tournament - 1):
                a = rng.integers(0, P)
                if times[a] < times[w]:
                    w = a
            parent[k] = w
        if L >= 2:
            for p in range(n_off // 2):
                mate[p] = rng.random() < cxpb
        for k in range(n_off):
            mut[k] = rng.random() < mutpb
            changed[k] = mut[k] or (k // 2 < n_off // 2 and mate[k // 2])
    pos = np.empty(n_off, np.int64)
    nc = 0
    for k in range(n_off):
        if changed[k]:
            pos[k] = nc
            nc += 1
    j = nc
    for k in range(n_off):
        if not changed[k]:
            pos[k] = j
            nxt_times[j] = times[parent[k]]
            j += 1
    for k in range(n_off):
        nxt_f[pos[k]] = cur_f[parent[k]]
        if recompute:
            nxt_b[pos[k]] = cur_b[parent[k]]
    if L == 0:
        return nc
    if local:
        for k in range(n_off):
            if recompute and rng.random() < 0.5:
                _one_move(rng, nxt_b[pos[k]], L, stage_len, S)
            else:
                _one_move(rng, nxt_f[pos[k]], L, stage_len, S)
        return nc
    for p in range(n_off // 2):
        if mate[p]:
            _cross(rng, nxt_f[pos[2 * p]], nxt_f[pos[2 * p + 1]], L)
            if recompute:
                _cross(rng, nxt_b[pos[2 * p]], nxt_b[pos[2 * p + 1]], L)
    pflip = min(1.0, flip_rate / L)
    pshift = min(1.0, shift_rate / L)
    for k in range(n_off):
        if mut[k]:
            _mutate(rng, nxt_f[pos[k]], L, stage_len, S, pflip, pshift)
            if recompute:
                _mutate(rng, nxt_b[pos[k]], L, stage_len, S, pflip, pshift)
    return nc


@njit(cache=True)
def elite_rows(pop_f, pop_b, times, k, recompute):  # pragma: no cover - compiled
    """The ``k`` best distinct individuals (lowest T first; ties: lower row)."""
    order = np.argsort(times, kind="mergesort")
    out = np.empty(k, np.int64)
    n = 0
    L = pop_f.shape[1]
    for i in order:
        dup = False
        for e in range(n):
            j = out[e]
            same = True
            for c in range(L):
                if pop_f[i, c] != pop_f[j, c] or (recompute and pop_b[i, c] != pop_b[j, c]):
                    same = False
                    break
            if same:
                dup = True
                break
        if not dup:
            out[n] = i
            n += 1
            if n == k:
                break
    return out[:n]
