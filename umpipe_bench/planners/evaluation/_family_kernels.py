"""Compiled (numba) evaluator of the capped schedule family (docs/SCHEDULES.md).

For every individual (forward cut bits, backward cut bits, per-stage caps) the kernel orders
the operations by the family's rule (:func:`umpipe_bench.schedules.capped_order`) and times
each operation the moment it is ordered: its inputs are ordered before it, so their end
times are known. A backward costs ``cb`` when the stage's previous operation is the forward of
the same samples and ``cbf`` otherwise (docs/MODEL.md §1b). Times and peak memory use the
same operations in the same order as the list simulator
(:func:`umpipe_bench.simulator.simulate`) and :func:`umpipe_bench.memory.peak_memory`, so
results are bit-identical to them, not merely close.

Stages whose state changed wake their neighbours (a work list), so ordering costs
``O(ops + S * escapes)`` per individual, not a sweep over all stages per step.

Importing this module imports numba; :mod:`.family` does so lazily.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["family_pass"]


@njit(cache=True, nogil=True)
def _decode(bits, n, s, L, ends, idx, counts):  # pragma: no cover - compiled
    k = 0
    for i in range(L):
        idx[s, i] = k
        ends[s, k] = i + 1
        k += bits[n, s, i]
    idx[s, L] = k
    ends[s, k] = L + 1
    counts[s] = k + 1


@njit(cache=True, nogil=True)
def family_pass(fb, bb, caps, unit_mb, fwd, cb, cbf, act, grad, opt, static, per_in, per_op,
                T, peak, tied, memory):  # pragma: no cover - compiled
    """``fb``/``bb`` [N, S, B-1] uint8 cut bits, ``caps`` [N, S] int64 (samples, or
    microbatches when ``unit_mb``), tables as :func:`.evaluator.kernel_tables`'s (``cbf``: a
    backward not directly after the forward of its own samples, docs/MODEL.md §1b),
    ``static``/``per_in``/``per_op`` [S] memory figures; writes ``T`` [N], ``peak`` [N, S].
    ``tied``: ``bb`` is ``fb`` (stash mode), decoded once; ``memory`` False: ``peak`` is left
    as it is and only ``T`` is written (the peaks cost up to a seventh of the kernel's time,
    results/perf/family-shortcuts.txt)."""
    N, S, L = fb.shape
    B = L + 1
    fend = np.zeros((S, B), np.int64)
    bend = fend if tied else np.zeros((S, B), np.int64)
    fidx = np.zeros((S, B), np.int64)
    bidx = fidx if tied else np.zeros((S, B), np.int64)
    nK = np.zeros(S, np.int64)
    nL = np.zeros(S, np.int64)
    nf = np.zeros(S, np.int64)
    nb = np.zeros(S, np.int64)
    donef = np.zeros(S, np.int64)
    doneb = np.zeros(S, np.int64)
    sfree = np.zeros(S, np.float64)
    lafree = np.zeros(S, np.float64)
    lgfree = np.zeros(S, np.float64)
    f_end = np.zeros((S, B), np.float64)
    x_end = np.zeros((S, B), np.float64)
    y_end = np.zeros((S, B), np.float64)
    live = np.zeros(S, np.float64)
    pk = np.zeros(S, np.float64)
    queue = np.zeros(S, np.int64)
    inq = np.zeros(S, np.uint8)
    # end sample of the stage's previous operation if it was a forward, else -1: in stash
    # mode the forward ending where a backward ends covers the same samples (recompute mode
    # never reads the difference: its cbf is cb)
    lf_end = np.zeros(S, np.int64)
    for n in range(N):
        remaining = 0
        for s in range(S):
            _decode(fb, n, s, L, fend, fidx, nK)
            if tied:
                nL[s] = nK[s]
            else:
                _decode(bb, n, s, L, bend, bidx, nL)
            remaining += nK[s] + nL[s]
            nf[s] = 0
            nb[s] = 0
            donef[s] = 0
            doneb[s] = 0
            sfree[s] = 0.0
            lafree[s] = 0.0
            lgfree[s] = 0.0
            live[s] = 0.0
            pk[s] = 0.0
            lf_end[s] = -1
            queue[s] = s
            inq[s] = 1
        head = 0
        qlen = S
        while remaining > 0:
            forced = -1
            force_bwd = False
            if qlen == 0:
                # every stage is blocked: the most downstream stage waiting for a forward input
                # takes a ready backward; else the most upstream forward past its cap
                for s in range(S - 1, -1, -1):
                    j = nf[s]
                    if j < nK[s] and nb[s] < nL[s]:
                        d = bend[s, nb[s]]
                        p = fend[s, j] - (fend[s, j - 1] if j > 0 else 0)
                        if donef[s] < d:
                            wf = True
                        elif unit_mb:
                            wf = nf[s] - nb[s] + 1 <= caps[n, s]
                        else:
                            wf = donef[s] - doneb[s] + p <= caps[n, s]
                        if wf and donef[s] >= d and (s == S - 1 or doneb[s + 1] >= d):
                            forced = s
                            force_bwd = True
                            break
                if forced < 0:
                    for s in range(S):
                        if nf[s] < nK[s] and (s == 0 or donef[s - 1] >= fend[s, nf[s]]):
                            forced = s
                            break
                queue[head] = forced
                inq[forced] = 1
                qlen = 1
            s = queue[head]
            head += 1
            if head == S:
                head = 0
            qlen -= 1
            inq[s] = 0
            # the stage's state in locals for the visit: only this stage moves during it, so
            # its neighbours' counts are constant here
            nfs = nf[s]
            nbs = nb[s]
            nks = nK[s]
            nls = nL[s]
            dfs = donef[s]
            dbs = doneb[s]
            sf = sfree[s]
            lfe = lf_end[s]
            la = lafree[s]
            lg = lgfree[s]
            capv = caps[n, s]
            up = donef[s - 1] if s > 0 else B
            down = doneb[s + 1] if s < S - 1 else B
            start_ops = nfs + nbs
            while nfs + nbs < nks + nls:
                j = nfs
                go_fwd = False
                if j < nks:
                    if s == forced:
                        go_fwd = not force_bwd
                    elif dfs < bend[s, nbs]:
                        go_fwd = True  # its next backward needs this forward anyway
                    else:
                        a = fend[s, j]
                        p = a - (fend[s, j - 1] if j > 0 else 0)
                        if unit_mb:
                            go_fwd = nfs - nbs + 1 <= capv
                        else:
                            go_fwd = dfs - dbs + p <= capv
                if go_fwd:
                    a = fend[s, j]
                    if up < a:
                        break
                    forced = -1
                    p = a - (fend[s, j - 1] if j > 0 else 0)
                    r = 0.0
                    if s > 0:
                        r = x_end[s - 1, fidx[s - 1, a - 1]]
                    t1 = max(sf, r) + fwd[s, p]
                    sf = t1
                    f_end[s, j] = t1
                    if s < S - 1:
                        c1 = max(la, t1) + act[s, p]
                        la = c1
                        x_end[s, j] = c1
                    if memory:
                        live[s] += per_in[s] * p
                        pk[s] = max(pk[s], live[s] + per_op[s] * p)
                    nfs = j + 1
                    dfs = a
                    lfe = a
                else:
                    i = nbs
                    d = bend[s, i]
                    if dfs < d:
                        break
                    if down < d:
                        break
                    forced = -1
                    q = d - (bend[s, i - 1] if i > 0 else 0)
                    own = f_end[s, fidx[s, d - 1]]
                    r = own
                    if s < S - 1:
                        r = max(own, y_end[s + 1, bidx[s + 1, d - 1]])
                    if lfe == d:
                        t1 = max(sf, r) + cb[s, q]
                    else:
                        t1 = max(sf, r) + cbf[s, q]
                    lfe = -1
                    sf = t1
                    if s > 0:
                        c1 = max(lg, t1) + grad[s - 1, q]
                        lg = c1
                        y_end[s, i] = c1
                    if memory:
                        pk[s] = max(pk[s], live[s] + per_op[s] * q)
                        live[s] -= per_in[s] * q
                    nbs = i + 1
                    dbs = d
            moved = nfs + nbs - start_ops
            if moved > 0:
                remaining -= moved
                nf[s] = nfs
                nb[s] = nbs
                donef[s] = dfs
                doneb[s] = dbs
                sfree[s] = sf
                lf_end[s] = lfe
                lafree[s] = la
                lgfree[s] = lg
                if s > 0 and inq[s - 1] == 0:
                    t = head + qlen
                    if t >= S:
                        t -= S
                    queue[t] = s - 1
                    inq[s - 1] = 1
                    qlen += 1
                if s < S - 1 and inq[s + 1] == 0:
                    t = head + qlen
                    if t >= S:
                        t -= S
                    queue[t] = s + 1
                    inq[s + 1] = 1
                    qlen += 1
        Tn = 0.0
        for s in range(S):
            Tn = max(Tn, sfree[s] + opt[s])
            if memory:
                peak[n, s] = static[s] + pk[s]
        T[n] = Tn
