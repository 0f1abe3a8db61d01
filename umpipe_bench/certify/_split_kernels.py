"""The compiled (numba) depth-first walk of :func:`.split.end_stage_candidates`: the last
stage's operations in its dominant order, each step checked by the stage relaxation's program
of the last stage (as :func:`.split.last_stage_candidates` walks it) and carrying the set of
end-stages states (:mod:`.ends`) that its operations so far leave (docs/CERTIFY.md "The
last-stage split through the end stages").

With the last stage's operations fixed, its end ``eL``, the arrival ``G`` of its last
gradient at stage ``M = S-2`` and its optimizer's end are the same for every state of a node;
a state is ``(x2, j0, x0)`` (stage ``M`` has backwarded ``[0, x2)``, its last microbatch
``[j0, x2)``; stage 0 has backwarded ``[0, x0)``) with the values ``(eM, e0, tail)``. A child
node copies its parent's states that can still end below ``upper`` and adds what stage ``M``'s
backward chain (a microbatch whose last sample is in the last stage's newest backward) and
stage 0's (a microbatch whose last sample is in stage ``M``'s last one) can run then; each
key keeps a Pareto set of its values. In stash mode (``stash``) the dominant order is
``F B F B ...``, each backward its forward's samples.

Every array is the caller's (:class:`Walk`), so a call runs at most ``budget`` nodes and the
next call goes on where it stopped: the caller checks its clock and signals in between.

Importing this module imports numba; :mod:`.split` does so lazily.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["Walk", "walk"]

INF = np.inf
# st: the walk's counters
_D, _ID, _NODES, _NOUT, _STATUS = range(5)
#: ``st[_STATUS]``: running, done, out of state room, more survivors than room
RUNNING, DONE, FULL, MANY = 0, 1, 2, 3


class Walk:
    """Every array of one walk (module docstring): ``cap`` states, ``max_out`` pairs."""

    def __init__(self, B: int, cap: int, max_out: int, F0: float):
        dmax, nk = 2 * B + 2, (B + 1) ** 3
        self.ei = np.zeros((4, cap), np.int32)  # x2, j0, x0, next of the same key
        self.ev = np.zeros((3, cap))  # eM, e0, tail
        self.alive = np.zeros(cap, np.bool_)
        self.head = np.full((dmax, nk), -1, np.int32)
        self.stamp = np.full((dmax, nk), -1, np.int64)
        self.ni = np.zeros((8, dmax), np.int64)  # n, k, k0, mq, start, end, child, op
        self.nv = np.zeros((5, dmax))  # walk time, eL, G, last stage's end + opt, low
        self.out = np.zeros((max_out, dmax), np.int64)
        self.outT = np.zeros(max_out)
        self.st = np.zeros(5, np.int64)
        # the root: nothing run, stage 0's forwards all done
        self.ev[:, 0] = (-INF, F0, -INF)
        self.alive[0] = True
        self.ei[3, 0] = -1
        self.nv[2, 0] = -INF
        self.nv[3, 0] = -INF
        self.ni[5, 0] = 1
        self.st[_ID] = 1

    @property
    def nodes(self) -> int:
        """Nodes walked so far."""
        return int(self.st[_NODES])

    @property
    def found(self) -> int:
        """Pairs kept so far (rows of ``out`` and ``outT``)."""
        return int(self.st[_NOUT])


@njit(cache=True, nogil=True, inline="always")
def _least(B, tail, Lt, restL, optL, eM, restMx, optM, e0, rest0x, opt0, x2, minM, D1,
           min0):  # pragma: no cover - compiled
    """The least T of every completion of a state (:mod:`.ends`)."""
    least = max(max(tail, Lt), max(restL + optL, max(eM + restMx + optM, e0 + rest0x + opt0)))
    if x2 < B:
        least = max(least, max(eM + restMx, restL + minM) + D1 + min0 + opt0)
    return least


@njit(cache=True, nogil=True)
def _insert(useful, c1, key, myid, w, vm, v0, vt, x2, j0, x0, ei, ev, alive, head,
            stamp):  # pragma: no cover - compiled
    """Add ``(x2, j0, x0)`` with ``(vm, v0, vt)`` at slot ``w`` unless it is not ``useful``
    (it cannot end below ``upper``) or a living state of its key is no larger in all three;
    kill those it is no larger than. Returns the next free slot, -1 when there is none."""
    if not useful:
        return w
    if w >= alive.shape[0]:
        return -1
    if stamp[c1, key] != myid:
        stamp[c1, key] = myid
        head[c1, key] = -1
    p = head[c1, key]
    while p >= 0:
        if alive[p] and ev[0, p] <= vm and ev[1, p] <= v0 and ev[2, p] <= vt:
            return w
        p = ei[3, p]
    p = head[c1, key]
    while p >= 0:
        if alive[p] and vm <= ev[0, p] and v0 <= ev[1, p] and vt <= ev[2, p]:
            alive[p] = False
        p = ei[3, p]
    ei[0, w] = x2
    ei[1, w] = j0
    ei[2, w] = x0
    ev[0, w] = vm
    ev[1, w] = v0
    ev[2, w] = vt
    alive[w] = True
    ei[3, w] = head[c1, key]
    head[c1, key] = w
    return w + 1


@njit(cache=True, nogil=True)
def walk(B, target, upper, budget, stash,
         wf, wb, relf, relb, wg, wlam, dl, wopt, ftail, late,
         fL, bL, bM, b0, gL, gM, optL, optM, opt0, rho, fendM, sigM, sig0, lamax, D,
         restLf, restLb, restM, rest0, minM, min0,
         ei, ev, alive, head, stamp, ni, nv, out, outT, st):  # pragma: no cover - compiled
    """Run the walk for at most ``budget`` nodes from where ``st`` says (module docstring);
    returns ``st[_STATUS]``."""
    cap = alive.shape[0]
    max_out = outT.shape[0]
    n1 = B + 1
    D1 = D[1]
    d = st[_D]
    done_here = 0
    while d >= 0:
        if done_here >= budget:
            st[_D] = d
            return RUNNING
        n = ni[0, d]
        k = ni[1, d]
        if ni[6, d] >= B - k:  # every child tried: (B - n) forwards, (n - k) backwards
            d -= 1
            continue
        ch = ni[6, d]
        ni[6, d] += 1
        if ch == 0:
            nv[4, d] = INF
        t = nv[0, d]
        # the child's last-stage operation, under the relaxation's conditions
        if ch < B - n:
            n2 = n + 1 + ch
            if stash and k < n:  # stash: F B F B ..., each backward its forward's samples
                continue
            e = max(t, relf[n2 - 1]) + wf[n2 - n]
            if e + ftail[n, n2] > target or e > late[n2, k]:
                continue
            cn, ck, ck0, cmq = n2, k, ni[2, d], n + 1
            eL = max(nv[1, d], rho[n2 - 1]) + fL[n2 - n]
            G = nv[2, d]
            Lt = nv[3, d]
            op = n2
            isb = False
        else:
            q = k + 1 + (ch - (B - n))
            nv[4, d] = min(nv[4, d], dl[q - 1])
            if q < ni[3, d]:  # dominant order: it would have run before the last forward
                continue
            if stash and (q < n or ni[3, d] != k + 1):
                continue
            e = max(t, relb[q - 1]) + wb[q - k]
            if e + wg[q - k] + wlam[k] > target or e + wg[q - k] > nv[4, d]:
                continue
            if q == B and e + wopt > target:
                continue
            if e > late[n, q]:
                continue
            cn, ck, ck0, cmq = n, q, k, 0
            eL = nv[1, d] + bL[q - k]
            G = eL + gL[q - k]
            Lt = nv[3, d]
            if q == B:
                Lt = max(Lt, eL + optL)
            op = -q
            isb = True
        done_here += 1
        st[_NODES] += 1
        st[_ID] += 1
        myid = st[_ID]
        c1 = d + 1
        s0 = ni[5, d]
        w = s0
        restL = eL + restLf[cn] + restLb[ck]
        for i in range(ni[4, d], ni[5, d]):  # the parent's states that can still end in time
            if not alive[i]:
                continue
            x2 = ei[0, i]
            x0 = ei[2, i]
            if _least(B, ev[2, i], Lt, restL, optL, ev[0, i], restM[x2], optM, ev[1, i],
                      rest0[x0], opt0, x2, minM, D1, min0) >= upper:
                continue
            if w >= cap:
                st[_STATUS] = FULL
                return FULL
            key = (x2 * n1 + ei[1, i]) * n1 + x0
            if stamp[c1, key] != myid:
                stamp[c1, key] = myid
                head[c1, key] = -1
            ei[0, w] = x2
            ei[1, w] = ei[1, i]
            ei[2, w] = x0
            ev[0, w] = ev[0, i]
            ev[1, w] = ev[1, i]
            ev[2, w] = ev[2, i]
            alive[w] = True
            ei[3, w] = head[c1, key]
            head[c1, key] = w
            w += 1
        copied = w
        best = INF
        i = s0
        while i < w:
            if not alive[i]:
                i += 1
                continue
            x2 = ei[0, i]
            j0 = ei[1, i]
            x0 = ei[2, i]
            eM = ev[0, i]
            e0 = ev[1, i]
            tl = ev[2, i]
            new = i >= copied
            if isb or new:  # stage M: [x2, y), y - 1 in the last stage's newest backward
                for y in range(max(x2, ck0) + 1, ck + 1):
                    e2 = max(max(eM, G), max(fendM[y - 1], sigM[y - 1])) + bM[y - x2]
                    t2 = max(tl, e2 + gM[y - x2] + lamax[x2, y])
                    w = _insert(_least(B, t2, Lt, restL, optL, e2, restM[y], optM, e0,
                                       rest0[x0], opt0, y, minM, D1, min0) < upper,
                                c1, (y * n1 + x2) * n1 + x0, myid, w, e2, e0, t2, y, x2, x0,
                                ei, ev, alive, head, stamp)
                    if w < 0:
                        st[_STATUS] = FULL
                        return FULL
            if new and alive[i]:  # stage 0: [x0, y), y - 1 in stage M's last microbatch
                for y in range(max(x0, j0) + 1, x2 + 1):
                    e2 = max(max(e0, eM + D[y - j0]), sig0[y - 1]) + b0[y - x0]
                    if y == B:
                        best = min(best, max(max(e2 + opt0, tl), max(eM + optM, Lt)))
                        continue
                    w = _insert(_least(B, tl, Lt, restL, optL, eM, restM[x2], optM, e2,
                                       rest0[y], opt0, x2, minM, D1, min0) < upper,
                                c1, (x2 * n1 + j0) * n1 + y, myid, w, eM, e2, tl, x2, j0, y,
                                ei, ev, alive, head, stamp)
                    if w < 0:
                        st[_STATUS] = FULL
                        return FULL
            i += 1
        ni[7, d] = op
        if cn == B and ck == B:  # a leaf: its pair survives when an end is below upper
            if best < upper:
                if st[_NOUT] >= max_out:
                    st[_STATUS] = MANY
                    return MANY
                for j in range(d + 1):
                    out[st[_NOUT], j] = ni[7, j]
                outT[st[_NOUT]] = best
                st[_NOUT] += 1
            continue
        live = False
        for j in range(s0, w):
            if alive[j]:
                live = True
                break
        if not live:
            continue
        d = c1
        ni[0, d] = cn
        ni[1, d] = ck
        ni[2, d] = ck0
        ni[3, d] = cmq
        ni[4, d] = s0
        ni[5, d] = w
        ni[6, d] = 0
        nv[0, d] = e
        nv[1, d] = eL
        nv[2, d] = G
        nv[3, d] = Lt
    st[_D] = -1
    st[_STATUS] = DONE
    return DONE
