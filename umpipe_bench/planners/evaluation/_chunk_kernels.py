"""Compiled (numba) evaluator of chunk plans (docs/CHUNK-SCHEDULES.md §8).

For every individual of a population (:class:`umpipe_bench.chunk_codec.ChunkGenomes`) the
kernel orders the operations by the chunk rule (:func:`umpipe_bench.chunk_schedule.chunk_order`:
forced ``W``, first forward within the cap, first possible backward, ``W`` flush; the three
fallbacks) and times each operation the moment the rule orders it, as the device simulator
(:func:`umpipe_bench.devsim.simulate_devices`) would: an operation's inputs are ordered before
it, on its own device or on another, so their end and arrival times are known; a device's
previous operation is the one it ordered last; a link carries its transfers in the order its
source device ordered them, which is the simulator's production order. Every time and every
byte count is the simulator's floating-point operation on the same operands in the same order
(``max`` as Python's: the first operand unless the second is larger), so ``T`` and the
per-device peaks are bit-identical to ``simulate_devices(..., chunk_order(plan).lists, ...)``.

Devices whose inputs changed wake (a work list), so ordering costs ``O(ops * v + C *
fallbacks)`` per individual. The rule's lists do not depend on the order devices are visited
in (docs/CHUNK-SCHEDULES.md §2): a device's wish depends on its own state only and whether it
can be ordered only grows as other devices progress, so any visiting order reaches the same
blocked state, where the fallbacks act.

Importing this module imports numba; :mod:`.chunk_eval` does so lazily.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["chunk_pass"]

_F, _G, _W = 0, 1, 2


@njit(cache=True, nogil=True)
def _decode(bits, mask, use_mask, n, c, L, ends, idx, counts):  # pragma: no cover - compiled
    """Cut bits of chunk ``c`` (with ``use_mask``: ``bits & mask``) -> microbatch end samples
    ``ends[c, :counts[c]]`` and, per sample, the index of its microbatch ``idx[c, :]``."""
    k = 0
    for i in range(L):
        idx[c, i] = k
        if bits[n, c, i] != 0 and (not use_mask or mask[n, c, i] != 0):
            ends[c, k] = i + 1
            k += 1
    idx[c, L] = k
    ends[c, k] = L + 1
    counts[c] = k + 1


@njit(cache=True, nogil=True)
def _latest(times, c, idx, lo, hi):  # pragma: no cover - compiled
    """The latest of ``times[c, k]`` over the microbatches ``k`` of chunk ``c`` carrying
    samples ``lo..hi-1``, in index order, as devsim's ``latest``."""
    a = idx[c, lo]
    t = times[c, a]
    for k in range(a + 1, idx[c, hi - 1] + 1):
        x = times[c, k]
        if x > t:
            t = x
    return t


@njit(cache=True, nogil=True)
def chunk_pass(fb, bb, wm, caps, wcaps, group, flag, blag, dev, dchunks, split, recompute,
               ovh, fwd, bnear, bfar, inp, farf, wgt, act, grad, opt_dev, static_dev, saved,
               inb, held, T, peak, nfall):  # pragma: no cover - compiled
    """``fb``/``bb``/``wm`` [N, C, B-1] uint8 (forward, backward cut bits; W mask over the
    backward cuts), ``caps``/``wcaps`` [N, D], ``group`` [N], ``flag``/``blag`` [N, C] int64;
    ``dev`` [C] the device of each chunk, ``dchunks`` [D, v] each device's chunks ascending;
    ``split``/``recompute`` flags, ``ovh`` seconds added to every operation; chunk tables
    [C, B+1] (``bnear``/``bfar``: a ``B`` directly after / not after its own forward, ``inp``
    the ``I`` pass, ``farf`` [C] the stash ``I``'s far factor), ``act``/``grad`` [C-1, B+1],
    ``opt_dev``/``static_dev`` [D] as devsim sums them, per-sample bytes ``saved``, ``inb``,
    ``held`` [C]. Writes ``T`` [N], ``peak`` [N, D] and ``nfall`` [N, 3] (backward, forward,
    past-cap fallbacks)."""
    N, C, L = fb.shape
    D, V = dchunks.shape
    B = L + 1
    fend = np.zeros((C, B), np.int64)
    gend = np.zeros((C, B), np.int64)
    wend = np.zeros((C, B), np.int64)
    fkey = np.zeros((C, B), np.int64)
    gkey = np.zeros((C, B), np.int64)
    fidx = np.zeros((C, B), np.int64)
    gidx = np.zeros((C, B), np.int64)
    widx = np.zeros((C, B), np.int64)
    nF = np.zeros(C, np.int64)
    nG = np.zeros(C, np.int64)
    nW = np.zeros(C, np.int64)
    nf = np.zeros(C, np.int64)
    ng = np.zeros(C, np.int64)
    nw = np.zeros(C, np.int64)
    donef = np.zeros(C, np.int64)
    doneg = np.zeros(C, np.int64)
    comp = np.zeros(C, np.int64)
    f_end = np.zeros((C, B), np.float64)
    g_end = np.zeros((C, B), np.float64)
    x_arr = np.zeros((C, B), np.float64)
    y_arr = np.zeros((C, B), np.float64)
    load = np.zeros(D, np.int64)
    pend = np.zeros(D, np.int64)
    wq = np.zeros((D, V * B), np.int64)
    wqh = np.zeros(D, np.int64)
    wqt = np.zeros(D, np.int64)
    lastk = np.zeros(D, np.int64)
    lastc = np.zeros(D, np.int64)
    lastlo = np.zeros(D, np.int64)
    lasthi = np.zeros(D, np.int64)
    free = np.zeros(D, np.float64)
    live = np.zeros(D, np.float64)
    pk = np.zeros(D, np.float64)
    link = np.zeros((D, D), np.float64)
    queue = np.zeros(D, np.int64)
    inq = np.zeros(D, np.uint8)
    for n in range(N):
        total = 0
        xm = 0
        for c in range(C):
            _decode(fb, fb, False, n, c, L, fend, fidx, nF)
            _decode(bb, bb, False, n, c, L, gend, gidx, nG)
            if split:
                _decode(bb, wm, True, n, c, L, wend, widx, nW)
            else:
                nW[c] = 0
            total += nF[c] + nG[c] + nW[c]
            nf[c] = 0
            ng[c] = 0
            nw[c] = 0
            donef[c] = 0
            doneg[c] = 0
            comp[c] = 0
            xm = max(xm, flag[n, c], blag[n, c])
        xm += B + 1  # keys (round, k, x) as one integer: x < xm, k < V
        G = group[n]
        if V > 1:  # the rule's keys of every microbatch: (x // G, k, x), (y // G, -k, y)
            for d in range(D):
                for k in range(V):
                    e = dchunks[d, k]
                    for j in range(nF[e]):
                        xs = (fend[e, j - 1] if j > 0 else 0) + flag[n, e]
                        fkey[e, j] = ((xs // G) * V + k) * xm + xs
                    for i in range(nG[e]):
                        ys = (gend[e, i - 1] if i > 0 else 0) + blag[n, e]
                        gkey[e, i] = ((ys // G) * V + (V - 1 - k)) * xm + ys
        for d in range(D):
            load[d] = 0
            pend[d] = 0
            wqh[d] = 0
            wqt[d] = 0
            lastk[d] = -1
            free[d] = 0.0
            live[d] = 0.0
            pk[d] = 0.0
            for e in range(D):
                link[d, e] = 0.0
            queue[d] = d
            inq[d] = 1
        for k in range(3):
            nfall[n, k] = 0
        head = 0
        qlen = D
        cur = -1
        ordered = 0
        failed = False
        while ordered < total:
            kind = -1
            c = -1
            if cur < 0:
                if qlen > 0:
                    cur = queue[head]
                    head = (head + 1) % D
                    qlen -= 1
                    inq[cur] = 0
                    continue
                # every device is blocked: the fallbacks, in the rule's order
                for e in range(C - 1, -1, -1):
                    i = ng[e]
                    if i < nG[e]:
                        b = gend[e, i]
                        if donef[e] >= b and (e == C - 1 or doneg[e + 1] >= b):
                            kind, c = _G, e
                            nfall[n, 0] += 1
                            break
                if kind < 0:
                    for e in range(C):
                        j = nf[e]
                        if j < nF[e] and (e == 0 or donef[e - 1] >= fend[e, j]):
                            m = fend[e, j] - (fend[e, j - 1] if j > 0 else 0)
                            if load[dev[e]] + m <= caps[n, dev[e]]:
                                kind, c = _F, e
                                nfall[n, 1] += 1
                                break
                if kind < 0:
                    for e in range(C):
                        j = nf[e]
                        if j < nF[e] and (e == 0 or donef[e - 1] >= fend[e, j]):
                            kind, c = _F, e
                            nfall[n, 2] += 1
                            break
                if kind < 0:  # cannot happen (docs/CHUNK-SCHEDULES.md §3); never loop
                    failed = True
                    break
                d = dev[c]
                if inq[d] == 0:  # its state changes: visit it again
                    queue[(head + qlen) % D] = d
                    inq[d] = 1
                    qlen += 1
            else:
                d = cur
                # the device's wish (chunk_order's ``wish``)
                if wqt[d] > wqh[d] and pend[d] > wcaps[n, d]:
                    kind, c = _W, wq[d, wqh[d]]
                else:
                    bf = -1
                    bfk = 0
                    bg = -1
                    bgk = 0
                    for k in range(V):
                        e = dchunks[d, k]
                        j = nf[e]
                        if j < nF[e] and (e == 0 or dev[e - 1] != d
                                          or donef[e - 1] >= fend[e, j]):
                            if bf < 0 or fkey[e, j] < bfk:
                                bf, bfk = e, fkey[e, j]
                        i = ng[e]
                        if i < nG[e]:
                            b = gend[e, i]
                            if donef[e] >= b and (e == C - 1 or dev[e + 1] != d
                                                  or doneg[e + 1] >= b):
                                if bg < 0 or gkey[e, i] < bgk:
                                    bg, bgk = e, gkey[e, i]
                    if bf >= 0:
                        j = nf[bf]
                        m = fend[bf, j] - (fend[bf, j - 1] if j > 0 else 0)
                        if bg < 0 or load[d] + m <= caps[n, d]:
                            kind, c = _F, bf
                    if kind < 0 and bg >= 0:
                        kind, c = _G, bg
                    if kind < 0 and wqt[d] > wqh[d]:
                        kind, c = _W, wq[d, wqh[d]]
                # ordered once its inputs are
                if kind == _F:
                    if c > 0 and donef[c - 1] < fend[c, nf[c]]:
                        kind = -1
                elif kind == _G:
                    b = gend[c, ng[c]]
                    if donef[c] < b or (c < C - 1 and doneg[c + 1] < b):
                        kind = -1
                if kind < 0:
                    cur = -1
                    continue
            # take it: order it on device d and time it (devsim's arithmetic)
            if kind == _F:
                j = nf[c]
                hi = fend[c, j]
                lo = fend[c, j - 1] if j > 0 else 0
                m = hi - lo
                r = 0.0
                if c > 0:
                    r = _latest(x_arr, c - 1, fidx, lo, hi)
                cost = fwd[c, m] + ovh
                t0 = r if r > free[d] else free[d]
                t1 = t0 + cost
                f_end[c, j] = t1
                if c < C - 1:
                    e = dev[c + 1]
                    if e == d:
                        x_arr[c, j] = t1
                    else:
                        c0 = t1 if t1 > link[d, e] else link[d, e]
                        c1 = c0 + act[c, m]
                        link[d, e] = c1
                        x_arr[c, j] = c1
                if recompute:
                    live[d] += inb[c] * m
                    z = live[d] + saved[c] * m
                    if z > pk[d]:
                        pk[d] = z
                else:
                    live[d] += saved[c] * m
                    if live[d] > pk[d]:
                        pk[d] = live[d]
                nf[c] = j + 1
                donef[c] = hi
                load[d] += m
            elif kind == _G:
                i = ng[c]
                hi = gend[c, i]
                lo = gend[c, i - 1] if i > 0 else 0
                m = hi - lo
                r = _latest(f_end, c, fidx, lo, hi)
                if c < C - 1:
                    y = _latest(y_arr, c + 1, gidx, lo, hi)
                    if y > r:
                        r = y
                near = lastk[d] == _F and lastc[d] == c and lastlo[d] == lo \
                    and lasthi[d] == hi
                if split:
                    cost = inp[c, m]
                    if not recompute and not near:
                        cost *= farf[c]
                else:
                    cost = bnear[c, m] if near else bfar[c, m]
                cost += ovh
                t0 = r if r > free[d] else free[d]
                t1 = t0 + cost
                g_end[c, i] = t1
                if c > 0:
                    e = dev[c - 1]
                    if e == d:
                        y_arr[c, i] = t1
                    else:
                        c0 = t1 if t1 > link[d, e] else link[d, e]
                        c1 = c0 + grad[c - 1, m]
                        link[d, e] = c1
                        y_arr[c, i] = c1
                if recompute:
                    z = live[d] + saved[c] * m
                    if z > pk[d]:
                        pk[d] = z
                    if split:
                        live[d] += (held[c] - inb[c]) * m
                        if live[d] > pk[d]:
                            pk[d] = live[d]
                    else:
                        live[d] -= inb[c] * m
                else:
                    if split:
                        live[d] -= (saved[c] - min(held[c], saved[c])) * m
                    else:
                        live[d] -= saved[c] * m
                    if live[d] > pk[d]:
                        pk[d] = live[d]
                ng[c] = i + 1
                doneg[c] = hi
                load[d] -= m
                if split:
                    pend[d] += m
                    while comp[c] < nW[c] and wend[c, comp[c]] <= hi:
                        comp[c] += 1
                        wq[d, wqt[d]] = c
                        wqt[d] += 1
            else:
                wqh[d] += 1
                i = nw[c]
                hi = wend[c, i]
                lo = wend[c, i - 1] if i > 0 else 0
                m = hi - lo
                r = _latest(g_end, c, gidx, lo, hi)
                if c == 0:  # the first chunk's W: each covered I microbatch's backward
                    cost = 0.0
                    for k in range(gidx[0, lo], gidx[0, hi - 1] + 1):
                        cost += wgt[0, gend[0, k] - (gend[0, k - 1] if k > 0 else 0)]
                    cost += ovh
                else:
                    cost = wgt[c, m] + ovh
                t0 = r if r > free[d] else free[d]
                t1 = t0 + cost
                if recompute:
                    live[d] -= held[c] * m
                else:
                    live[d] -= min(held[c], saved[c]) * m
                    if live[d] > pk[d]:
                        pk[d] = live[d]
                nw[c] = i + 1
                pend[d] -= m
            free[d] = t1
            lastk[d] = kind
            lastc[d] = c
            lastlo[d] = lo
            lasthi[d] = hi
            ordered += 1
            # wake the device whose next operation may wait for this one
            e = -1
            if kind == _F and c < C - 1:
                e = dev[c + 1]
            elif kind == _G and c > 0:
                e = dev[c - 1]
            if e >= 0 and e != cur and inq[e] == 0:
                queue[(head + qlen) % D] = e
                inq[e] = 1
                qlen += 1
        Tn = 0.0
        for d in range(D):
            t = free[d] + opt_dev[d]
            if d == 0 or t > Tn:
                Tn = t
            peak[n, d] = static_dev[d] + pk[d]
        T[n] = np.nan if failed else Tn
