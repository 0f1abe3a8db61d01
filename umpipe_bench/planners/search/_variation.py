"""Compiled (numba) variation for TiDGAP: one call builds a whole generation's offspring.

The operators are those of :mod:`.operators` (docs/MODEL.md §2 encoding): tournament
selection, two-point crossover per chromosome with one mating decision per pair, and mutation
per chromosome (bit flips, count ~ Binomial(len, flip_rate/len), then within-stage boundary
shifts, count ~ Binomial(S*(stage_len-1), shift_rate/len), applied one after another as DEAP
applies them).

What makes a generation cheap (the loop around the evaluation, not the evaluation, was the cost):
the population lives in preallocated ``[P, len]`` uint8 buffers (the current and the next
generation, swapped); the random numbers are one bulk draw of uniforms from the run's
``numpy.random.Generator`` (integers by scaling, binomial counts by inversion: passing the
generator itself into numba costs ~40 µs a call and ~90 ns a draw); a call reports how many it
read (``used``), so the engine draws only about that many and advances the generator past the
rest of its nominal draw, the same stream for ~15 µs less a generation at P = 256
(:meth:`..algorithms._tidgap_engine.TiDGAPEngine._vary_stream`); only ``O(changes)`` bytes
are touched besides the one copy of each parent row; the offspring that changed are written
first, so the evaluator reads one contiguous slice.

Importing this module imports numba; :mod:`..algorithms._tidgap_engine` imports it lazily
(``cache=True``: a second process compiles nothing).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["cap_ties", "elite_order", "elite_rows", "uniforms_needed", "vary"]


@njit(cache=True)
def _int(u, c, n):  # pragma: no cover - compiled
    """An integer in ``0..n-1`` from uniform ``u[c]``."""
    k = int(u[c] * n)
    return k if k < n else n - 1


@njit(cache=True)
def _p0(n, p):  # pragma: no cover - compiled
    """``P(X = 0)`` of Binomial(n, p): computed once per :func:`vary` call, not per draw."""
    return (1.0 - p) ** n if 0.0 < p < 1.0 and n > 0 else 0.0


@njit(cache=True)
def _binomial(x, n, p, p0):  # pragma: no cover - compiled
    """Binomial(n, p) by inversion of the uniform ``x`` (the means here are a few units);
    ``p0`` is :func:`_p0` ``(n, p)``."""
    if p <= 0.0 or n == 0:
        return 0
    if p >= 1.0:
        return n
    prob = p0
    cdf = prob
    k = 0
    r = p / (1.0 - p)
    while x > cdf and k < n:
        k += 1
        prob *= (n - k + 1) / k * r
        cdf += prob
    return k


@njit(cache=True)
def _mutate(u, c, row, L, stage_len, S, pflip, pshift, pcopy, f0, s0):  # pragma: no cover
    """(Probability ``pcopy``) one stage copies a neighbour stage's partition, then flips and
    shifts (``f0``, ``s0``: the probabilities of no flip and no shift, :func:`_p0`); returns
    the next unused uniform (-1: ran out)."""
    npairs = S * (stage_len - 1) if stage_len >= 2 else 0
    if c + 5 > u.shape[0]:
        return -1
    if S >= 2 and u[c] < pcopy:
        dst = _int(u, c + 1, S)
        src = dst - 1 if (dst == S - 1 or (dst > 0 and u[c + 2] < 0.5)) else dst + 1
        for i in range(stage_len):
            row[dst * stage_len + i] = row[src * stage_len + i]
    c += 3
    nflip = _binomial(u[c], L, pflip, f0)
    nshift = _binomial(u[c + 1], npairs, pshift, s0) if npairs > 0 else 0
    c += 2
    if c + nflip + nshift > u.shape[0]:
        return -1
    for _ in range(nflip):
        row[_int(u, c, L)] ^= 1
        c += 1
    for _ in range(nshift):
        k = _int(u, c, npairs)
        c += 1
        i = k + k // (stage_len - 1)  # pair k of stage k // (len-1): bits i, i+1
        a = row[i]
        row[i] = row[i + 1]
        row[i + 1] = a
    return c


@njit(cache=True)
def _cross(u, c, a, b, L):  # pragma: no cover - compiled
    """Two-point crossover, cut points ``1 <= c1 < c2 <= L`` (DEAP's ``cxTwoPoint``)."""
    c1 = 1 + _int(u, c, L)
    c2 = 1 + _int(u, c + 1, L - 1)
    if c2 >= c1:
        c2 += 1
    lo = min(c1, c2)
    hi = max(c1, c2)
    for i in range(lo, hi):
        t = a[i]
        a[i] = b[i]
        b[i] = t
    return c + 2


@njit(cache=True)
def _new_cap(u, c, old, B):  # pragma: no cover - compiled
    """A redrawn cap from uniforms ``u[c..c+1]``: 15 % uncapped (``B``), 42.5 % near the old
    value (times or divided by up to 2), 42.5 % log-uniform anywhere in ``1..B``."""
    if u[c] < 0.15:
        return B
    if u[c] < 0.575:
        v = int(np.rint(old * np.exp((2.0 * u[c + 1] - 1.0) * np.log(2.0))))
    else:
        v = int(np.exp(u[c + 1] * np.log(B + 1.0)))
    return min(max(v, 1), B)


@njit(cache=True)
def _mutate_caps(u, c, row, B, p):  # pragma: no cover - compiled
    """Each cap of ``row`` redrawn with probability ``p``; the next unused uniform or -1."""
    Sk = row.shape[0]
    if c + 3 * Sk > u.shape[0]:
        return -1
    for s in range(Sk):
        if u[c] < p:
            row[s] = _new_cap(u, c + 1, row[s], B)
        c += 3
    return c


@njit(cache=True)
def _cross_caps(u, c, a, b):  # pragma: no cover - compiled
    """A pair swaps the caps of a random run of stages; the next unused uniform or -1."""
    Sk = a.shape[0]
    if c + 2 > u.shape[0]:
        return -1
    s1 = _int(u, c, Sk)
    s2 = _int(u, c + 1, Sk)
    for s in range(min(s1, s2), max(s1, s2) + 1):
        t = a[s]
        a[s] = b[s]
        b[s] = t
    return c + 2


def uniforms_needed(n_off: int, tournament: int, flip_rate: float, shift_rate: float,
                    n_caps: int = 0) -> int:
    """A generous first guess of the uniforms one :func:`vary` call reads."""
    return int(n_off * (tournament + 16 + 4 * (flip_rate + shift_rate) + 3 * n_caps + 4)) + 64


@njit(cache=True)
def vary(u, cur_f, cur_b, times, nxt_f, nxt_b, nxt_times, n_off, tournament, cxpb, mutpb,
         flip_rate, shift_rate, copy_rate, stage_len, recompute, cur_k, nxt_k, cap_rate, B,
         tie, sync_rate, used):  # pragma: no cover
    """Write ``n_off`` offspring of ``cur_*`` into rows ``0..n_off-1`` of ``nxt_*``, the
    changed ones first; copy the unchanged ones' times into ``nxt_times``. Returns the number
    of changed offspring (the rows to evaluate), or -1 when the uniforms ``u`` (drawn in bulk
    by the caller from the run's generator) ran out: the caller draws more and calls again
    (``cur_*`` is never written). In stash mode pass ``cur_b is cur_f``, ``recompute=False``.

    ``cur_k``/``nxt_k`` are the in-flight cap genes ``[P, S]`` of the schedule family
    (docs/SCHEDULES.md; ``[P, 0]`` without them): they follow their parent, a mating pair
    swaps the caps of a random run of stages, a mutated offspring redraws each cap with
    probability ``cap_rate / S``.

    ``tie`` (``[P]``, lower wins) breaks a tournament between equal times (:func:`cap_ties`).
    In recompute, a mutated offspring then, with probability ``sync_rate``, copies one random
    stage's forward bits onto its backward ones or the reverse (even odds).

    ``used`` (``int64[1]``) receives the number of uniforms read (a successful call reads a
    prefix of ``u``; the caller sizes its next draw by it,
    :meth:`..algorithms._tidgap_engine.TiDGAPEngine._vary_stream`).
    """
    P, L = cur_f.shape
    S = L // stage_len if stage_len > 0 else 0
    parent = np.empty(n_off, np.int64)
    changed = np.zeros(n_off, np.bool_)
    mate = np.zeros(n_off // 2, np.bool_)
    mut = np.zeros(n_off, np.bool_)
    c = 0
    if n_off * (tournament + 2) > u.shape[0]:
        return -1
    for k in range(n_off):
        w = _int(u, c, P)
        c += 1
        for _ in range(tournament - 1):
            a = _int(u, c, P)
            c += 1
            if times[a] < times[w] or (times[a] == times[w] and tie[a] < tie[w]):
                w = a
        parent[k] = w
    if L >= 2:
        for p in range(n_off // 2):
            mate[p] = u[c] < cxpb
            c += 1
    for k in range(n_off):
        mut[k] = u[c] < mutpb
        c += 1
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
    Sk = cur_k.shape[1]
    for k in range(n_off):  # explicit loops: numba's row assignment is ~10x slower
        d, a = pos[k], parent[k]
        for i in range(L):
            nxt_f[d, i] = cur_f[a, i]
        if recompute:
            for i in range(L):
                nxt_b[d, i] = cur_b[a, i]
        for i in range(Sk):
            nxt_k[d, i] = cur_k[a, i]
    if L == 0:
        used[0] = c
        return nc
    nchrom = 2 if recompute else 1
    if n_off * 2 * nchrom > u.shape[0] - c:
        return -1
    for p in range(n_off // 2):
        if mate[p]:
            c = _cross(u, c, nxt_f[pos[2 * p]], nxt_f[pos[2 * p + 1]], L)
            if recompute:
                c = _cross(u, c, nxt_b[pos[2 * p]], nxt_b[pos[2 * p + 1]], L)
            if Sk > 0:
                c = _cross_caps(u, c, nxt_k[pos[2 * p]], nxt_k[pos[2 * p + 1]])
                if c < 0:
                    return -1
    pflip = min(1.0, flip_rate / L)
    pshift = min(1.0, shift_rate / L)
    f0 = _p0(L, pflip)
    s0 = _p0(S * (stage_len - 1) if stage_len >= 2 else 0, pshift)
    for k in range(n_off):
        if mut[k]:
            c = _mutate(u, c, nxt_f[pos[k]], L, stage_len, S, pflip, pshift, copy_rate, f0,
                        s0)
            if c >= 0 and recompute:
                c = _mutate(u, c, nxt_b[pos[k]], L, stage_len, S, pflip, pshift, copy_rate,
                            f0, s0)
            if c >= 0 and recompute and sync_rate > 0.0:
                if c + 3 > u.shape[0]:
                    return -1
                if u[c] < sync_rate:
                    st = _int(u, c + 1, S)
                    fr = nxt_f[pos[k]]
                    br = nxt_b[pos[k]]
                    for i in range(st * stage_len, (st + 1) * stage_len):
                        if u[c + 2] < 0.5:
                            br[i] = fr[i]
                        else:
                            fr[i] = br[i]
                c += 3
            if c >= 0 and Sk > 0:
                c = _mutate_caps(u, c, nxt_k[pos[k]], B, min(1.0, cap_rate / Sk))
            if c < 0:
                return -1
    used[0] = c
    return nc


def cap_ties(caps: np.ndarray, B: int) -> np.ndarray:
    """The tie-break between plans of equal T (lower wins): minus the sum of the stages' caps
    (each at most ``B``; ``[N, 0]`` caps: all 0).

    T is a maximum over paths through the stages, so most cap genes do not change it: without a
    preference they drift to arbitrary low caps, which then block the moves a better plan needs
    (on gpt1-14 stash the best plans have GPipe caps on every stage but the last;
    `git show ddbefaf:results/perf/quality.md`). Preferring the larger cap among equals keeps a
    cap that binds nothing at ``B``. Memory is no reason to prefer a lower cap: a plan that does not
    fit has T = inf already.
    """
    if caps.shape[1] == 0:
        return np.zeros(caps.shape[0], np.int64)
    return -np.minimum(caps, B).sum(axis=1)


@njit(cache=True)
def elite_order(times, tie):  # pragma: no cover - compiled
    """Rows by T, equal T by ``tie`` (:func:`cap_ties`), then by row (numpy's
    ``lexsort((tie, times))``, compiled: it runs every generation). The order is total, so
    the first sort need not be stable: equal T are ordered by the pass below."""
    order = np.argsort(times)
    n = order.size
    i = 0
    while i < n:
        j = i + 1
        while j < n and times[order[j]] == times[order[i]]:
            j += 1
        for a in range(i + 1, j):  # insertion sort of the run of equal T (runs are short)
            r = order[a]
            b = a - 1
            while b >= i and (tie[order[b]] > tie[r]
                              or (tie[order[b]] == tie[r] and order[b] > r)):
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = r
        i = j
    return order


@njit(cache=True)
def elite_rows(pop_f, pop_b, pop_k, times, tie, k, recompute):  # pragma: no cover - compiled
    """The ``k`` best distinct individuals (bits and caps): lowest T first, equal T by
    ``tie`` (:func:`cap_ties`), then lower row (:func:`elite_order`)."""
    order = elite_order(times, tie)
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
            for c in range(pop_k.shape[1]):
                if pop_k[i, c] != pop_k[j, c]:
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
