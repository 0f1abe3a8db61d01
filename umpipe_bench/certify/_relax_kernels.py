"""Compiled (numba) dynamic programs of the per-stage relaxation (docs/CERTIFY.md "The
stage relaxation"); :mod:`.relax` calls them and holds the proof's statement.

Tables are float64 ``[B+1]`` over sizes (index 0 unused); per-sample arrays are ``[B]``.
Every minimum over compositions is taken separately for each quantity, which is what makes
each one a lower bound on the same quantity of every schedule.

Importing this module imports numba; :mod:`.relax` does so lazily.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["backward_release", "chain_tails", "forward_release", "forward_tails",
           "gradient_deadlines", "joint_backward_release", "stage_min_time", "tails",
           "tied_backward_release"]

INF = np.inf


@njit(cache=True, nogil=True)
def _arrival_tails(fwd, ftail):  # pragma: no cover - compiled
    """``kappa[t]``: the least ``fwd[b - a] + ftail[a, b]`` over the forwards ``[a, b)`` that
    may carry ``t`` (the least time from the arrival of ``t``'s activation to the end)."""
    B = ftail.shape[0] - 1
    kappa = np.full(B, INF)
    for a in range(B):
        for b in range(a + 1, B + 1):
            v = fwd[b - a] + ftail[a, b]
            for t in range(a, b):
                if v < kappa[t]:
                    kappa[t] = v
    return kappa


@njit(cache=True, nogil=True)
def _forward_chain(fwd, rel):  # pragma: no cover - compiled
    """``phi[b]``: the earliest end of a forward ending exactly at boundary ``b`` (forwards one
    after the other in sample order, ``[a, b)`` released at ``rel[b - 1]``)."""
    B = rel.shape[0]
    phi = np.full(B + 1, INF)
    phi[0] = 0.0
    for b in range(1, B + 1):
        for a in range(b):
            e = max(phi[a], rel[b - 1]) + fwd[b - a]
            if e < phi[b]:
                phi[b] = e
    return phi


@njit(cache=True, nogil=True)
def forward_release(fwd, act, rel):  # pragma: no cover - compiled
    """From ``rel[t]`` (earliest arrival of sample ``t``'s activation at this stage): ``end[t]``,
    the earliest end of the forward carrying ``t``, and ``out[t]``, the earliest arrival of
    ``t``'s activation downstream (``act`` all zero for the last stage)."""
    B = rel.shape[0]
    phi = _forward_chain(fwd, rel)
    end = np.full(B, INF)
    out = np.full(B, INF)
    for b in range(1, B + 1):
        for a in range(b):
            e = max(phi[a], rel[b - 1]) + fwd[b - a]
            o = e + act[b - a]
            for t in range(a, b):
                if e < end[t]:
                    end[t] = e
                if o < out[t]:
                    out[t] = o
    return end, out


@njit(cache=True, nogil=True)
def _release_chain(back, grad, start):  # pragma: no cover - compiled
    """``out[t]``: the earliest arrival upstream of the gradient carrying ``t`` when a stage's
    backwards run one after the other in sample order, ``[c, d)`` starting at ``start[c, d]``
    or later and costing ``back[d - c]``."""
    B = start.shape[0] - 1
    beta = np.full(B + 1, INF)  # earliest end of a backward ending exactly at boundary d
    beta[0] = 0.0
    out = np.full(B, INF)
    for d in range(1, B + 1):
        for c in range(d):
            e = max(beta[c], start[c, d]) + back[d - c]
            if e < beta[d]:
                beta[d] = e
            o = e + grad[d - c]
            for t in range(c, d):
                if o < out[t]:
                    out[t] = o
    return out


@njit(cache=True, nogil=True)
def backward_release(back, grad, fend, rel):  # pragma: no cover - compiled
    """The earliest arrival upstream of sample ``t``'s gradient from this stage, whose
    forward carrying ``t`` ends at ``fend[t]`` or later and whose own gradient input for ``t``
    arrives at ``rel[t]`` or later (all zero on the last stage)."""
    B = rel.shape[0]
    start = np.empty((B + 1, B + 1))
    for d in range(1, B + 1):
        start[:, d] = max(fend[d - 1], rel[d - 1])
    return _release_chain(back, grad, start)


@njit(cache=True, nogil=True)
def joint_backward_release(fwd, back, grad, relf, relb):  # pragma: no cover - compiled
    """:func:`backward_release` with the stage's forwards and backwards on one machine: the
    earliest time ``V[n, k]`` the stage can have forwarded ``[0, n)`` and backwarded ``[0, k)``
    (forwards released at ``relf``, backwards at ``relb``, in any order), and from it the
    earliest arrival upstream of each sample's gradient."""
    B = relf.shape[0]
    V = np.full((B + 1, B + 1), INF)
    V[0, 0] = 0.0
    out = np.full(B, INF)
    for n in range(B + 1):
        for k in range(n + 1):
            v = V[n, k]
            if v == INF:
                continue
            for n2 in range(n + 1, B + 1):
                e = max(v, relf[n2 - 1]) + fwd[n2 - n]
                if e < V[n2, k]:
                    V[n2, k] = e
            for q in range(k + 1, n + 1):
                e = max(v, relb[q - 1]) + back[q - k]
                if e < V[n, q]:
                    V[n, q] = e
                o = e + grad[q - k]
                for t in range(k, q):
                    if o < out[t]:
                        out[t] = o
    return out


@njit(cache=True, nogil=True)
def _suffix_chain(cost, grad, lam, opt):  # pragma: no cover - compiled
    """``mu[c]``: the least time from the start of a microbatch starting at boundary ``c`` to
    the end of the iteration, the microbatches from ``c`` on run one after the other, ``[c, d)``
    costing ``cost[d - c]`` and sending a gradient that arrives below after ``grad[d - c]`` and
    leaves at least ``lam[c]`` there; ``opt`` after the last (``mu[B]``)."""
    B = lam.shape[0]
    mu = np.full(B + 1, INF)
    mu[B] = opt
    for c in range(B - 1, -1, -1):
        for d in range(c + 1, B + 1):
            v = cost[d - c] + max(mu[d], grad[d - c] + lam[c])
            if v < mu[c]:
                mu[c] = v
    return mu


@njit(cache=True, nogil=True)
def tails(back, grad, lam, opt):  # pragma: no cover - compiled
    """``out[t]``: the least time from the arrival of sample ``t``'s gradient at this stage to
    the end of the iteration, when a gradient this stage sends for ``[c, d)`` arrives below
    after ``grad[d - c]`` and leaves at least ``lam[c]`` there (``-inf``: stage 0)."""
    B = lam.shape[0]
    mu = _suffix_chain(back, grad, lam, opt)
    out = np.full(B, INF)
    for c in range(B):
        for d in range(c + 1, B + 1):
            v = back[d - c] + max(mu[d], grad[d - c] + lam[c])
            for t in range(c, d):
                if v < out[t]:
                    out[t] = v
    return out


@njit(cache=True, nogil=True)
def forward_tails(fwd, act, own, down):  # pragma: no cover - compiled
    """``ftail[a, b]``: the least time from the end of this stage's forward ``[a, b)`` to the
    end of the iteration: the backward carrying any of its samples ``t`` still needs
    ``own[t]`` (the stage's :func:`tails`), and the activation of ``b - 1`` reaches the next
    stage after ``act[b - a]``, which still needs ``down[b - 1]`` (``-inf``: last stage).
    ``kappa[t]``: the least time from the arrival of ``t``'s activation to the end."""
    B = own.shape[0]
    ftail = np.full((B + 1, B + 1), -INF)
    for a in range(B):
        top = -INF
        for b in range(a + 1, B + 1):
            top = max(top, own[b - 1])
            ftail[a, b] = max(top, act[b - a] + down[b - 1])
    return ftail, _arrival_tails(fwd, ftail)


@njit(cache=True, nogil=True)
def _feasible(target, fwd, back, relf, relb, grad, lam, opt, ftail, dl, V):  # pragma: no cover
    B = relf.shape[0]
    V[:, :] = INF
    V[0, 0] = 0.0
    for n in range(B + 1):
        for p in range(n):  # the forward [p, n) from any state (p, k)
            r = relf[n - 1]
            f = fwd[n - p]
            late = target - ftail[p, n] - f  # latest start that meets the forward's tail
            for k in range(p + 1):
                v = V[p, k]
                if v < INF:
                    st = max(v, r)
                    if st > late:
                        continue
                    e = st + f
                    if e < V[n, k]:
                        V[n, k] = e
        for k in range(n):  # the backward [k, q) from (n, k), q <= n
            v = V[n, k]
            if v == INF:
                continue
            low = INF  # the earliest deadline of the gradients of [k, q)
            for q in range(k + 1, n + 1):
                low = min(low, dl[q - 1])
                e = max(v, relb[q - 1]) + back[q - k]
                if e + grad[q - k] + lam[k] > target or e + grad[q - k] > low:
                    continue
                if q == B and e + opt > target:
                    continue
                if e < V[n, q]:
                    V[n, q] = e
    return V[B, B] < INF


@njit(cache=True, nogil=True)
def gradient_deadlines(target, backs, grads, sigmas, opts, upto):  # pragma: no cover
    """``dl[t]``: the latest arrival at stage ``upto - 1`` of the gradient carrying sample ``t``
    that lets stages ``0 .. upto - 1`` end by ``target``: each stage's backwards in sample
    order, ``[c, d)`` released at ``sigmas[s][d - 1]`` and costing ``backs[s][d - c]``, its
    gradient reaching the stage above after ``grads[s][d - c]`` by that stage's deadline, the
    last followed by ``opts[s]``; a backward starts after the gradients it carries arrive, so
    ``dl[t]`` is the latest start of a microbatch holding ``t`` (``-inf``: none ends in time;
    ``upto = 0``: ``+inf``)."""
    B = sigmas.shape[1]
    dl = np.full(B, INF)
    LS = np.empty(B + 1)  # the latest start of the chain of backwards from boundary c
    for s in range(upto):
        new = np.full(B, -INF)
        LS[B] = target - opts[s]
        for c in range(B - 1, -1, -1):
            LS[c] = -INF
            low = INF
            for d in range(c + 1, B + 1):
                low = min(low, dl[d - 1])
                lim = min(LS[d], low - grads[s, d - c])  # [c, d) ends by lim
                cost = backs[s, d - c]
                if sigmas[s, d - 1] + cost > lim:
                    continue
                if lim - cost > LS[c]:
                    LS[c] = lim - cost
                for t in range(c, d):
                    if lim - cost > new[t]:
                        new[t] = lim - cost
        dl = new
    return dl


@njit(cache=True, nogil=True)
def _feasible_at(target, chain, fwd, back, relf, relb, grad, lam, opt, ftail, backs, grads,
                 sigmas, opts, s, V2, V1):  # pragma: no cover - compiled
    dl = gradient_deadlines(target, backs, grads, sigmas, opts, s)
    if chain:
        return _chain_feasible(target, fwd, back, relf, grad, lam, opt, dl, V1)
    return _feasible(target, fwd, back, relf, relb, grad, lam, opt, ftail, dl, V2)


@njit(cache=True, nogil=True)
def stage_min_time(fwd, back, relf, relb, grad, lam, opt, ftail, lo, hi, iters, backs, grads,
                   sigmas, opts, s, chain):  # pragma: no cover
    """The largest target ``T`` (within ``iters`` bisection steps of ``[lo, hi]``) at which one
    stage cannot finish: forwards in sample order released at ``relf[b-1]`` for ``[a, b)``,
    backwards in sample order after the forward of their last sample and ``relb[d-1]``, one
    operation at a time, every backward ``[c, d)`` ending ``grad[d-c] + lam[c]`` before ``T``
    and its gradient arriving above by the :func:`gradient_deadlines` of stages ``0 .. s-1``
    (``backs``, ``grads``, ``sigmas``, ``opts`` stacked per stage), the last ``opt`` before
    ``T``, every forward ``[a, b)`` ending ``ftail[a, b]`` before ``T``. With ``chain`` the
    stage is a chain ``F(1) B(1) F(2) B(2) ...`` over one composition instead (stash, the last
    stage: ``relb`` and ``ftail`` unused). Returns ``lo`` if no target above it is found
    infeasible; ``hi`` is raised until feasible."""
    B = relf.shape[0]
    V2 = np.empty((B + 1, B + 1))
    V1 = np.empty(B + 1)
    while not _feasible_at(hi, chain, fwd, back, relf, relb, grad, lam, opt, ftail, backs,
                           grads, sigmas, opts, s, V2, V1):
        hi = 2.0 * hi + 1e-12
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if _feasible_at(mid, chain, fwd, back, relf, relb, grad, lam, opt, ftail, backs, grads,
                        sigmas, opts, s, V2, V1):
            hi = mid
        else:
            lo = mid
    return lo


# -------------------------------------------------------------------------- stash mode
# In stash mode a stage's backward sizes are its forward sizes (the tied releases and tails
# below, every stage), and the last stage may run every backward right after its own forward
# (docs/CERTIFY.md "The last stage in stash mode"): its operations are a chain
# F(1) B(1) F(2) B(2) ... over one composition (``stage_min_time(..., chain=True)``).


@njit(cache=True, nogil=True)
def chain_tails(fwd, back, grad, lam, opt):  # pragma: no cover - compiled
    """For a stage whose backward sizes are its forward sizes: ``ftail[a, b]``, the least time
    from the end of the forward ``[a, b)`` to the end of the iteration (its backward and the
    forward and backward of every later microbatch, one at a time, a gradient sent for
    ``[c, d)`` arriving below after ``grad[d - c]`` and leaving at least ``lam[c]`` there,
    ``opt`` at the end), and ``kappa[t]``, the same from the arrival of sample ``t``'s
    activation (the forward carrying ``t`` first)."""
    B = lam.shape[0]
    mu = _suffix_chain(fwd + back, grad, lam, opt)  # each microbatch's forward and backward
    ftail = np.full((B + 1, B + 1), -INF)
    for c in range(B):
        for d in range(c + 1, B + 1):
            ftail[c, d] = back[d - c] + max(mu[d], grad[d - c] + lam[c])
    return ftail, _arrival_tails(fwd, ftail)


@njit(cache=True, nogil=True)
def tied_backward_release(fwd, back, grad, relf, relb):  # pragma: no cover - compiled
    """:func:`backward_release` for a stage whose backward sizes are its forward sizes: the
    backward ``[c, d)`` starts after the forward ``[c, d)`` itself, which starts after the
    forwards ending at ``c`` and the arrival ``relf[d - 1]``."""
    B = relf.shape[0]
    phi = _forward_chain(fwd, relf)
    start = np.empty((B + 1, B + 1))
    for d in range(1, B + 1):
        for c in range(d):
            start[c, d] = max(max(phi[c], relf[d - 1]) + fwd[d - c], relb[d - 1])
    return _release_chain(back, grad, start)


@njit(cache=True, nogil=True)
def _chain_feasible(target, fwd, back, relf, grad, lam, opt, dl, V):  # pragma: no cover
    B = relf.shape[0]
    V[:] = INF
    V[0] = 0.0
    for c in range(B):
        v = V[c]
        if v == INF:
            continue
        low = INF
        for d in range(c + 1, B + 1):
            low = min(low, dl[d - 1])
            e = max(v, relf[d - 1]) + fwd[d - c] + back[d - c]
            if e + grad[d - c] + lam[c] > target or e + grad[d - c] > low:
                continue
            if d == B and e + opt > target:
                continue
            if e < V[d]:
                V[d] = e
    return V[B] < INF
