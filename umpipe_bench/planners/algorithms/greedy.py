"""Greedy plan constructions: ``local-greedy`` and ``greedy-dp`` (baselines and GA seeds).

Both are defined on docs/MODEL.md §2 plans and the §4 recurrence; neither has a cost model of its
own. They live in the core (not in ``umpipe_bench/baselines/``) because DGAP and TiDGAP seed their
initial populations with them; ``umpipe_bench/baselines/greedy.py`` wraps them as planners.

local-greedy
    Each stage picks, alone, the size ``m*`` with the lowest cost per sample (forward:
    ``fwd[s](m)/m``; backward: ``c[s](m)/m`` with ``c`` = bwd or rbwd; stash mode ties the two,
    so it minimizes ``(fwd[s](m) + bwd[s](m))/m``, with ``bwd * bwd_far`` below ``m = B``:
    docs/MODEL.md §1b). Ties go to the smaller ``m``. The
    composition is ``m*`` repeated ``B // m*`` times, then the remainder ``B mod m*`` (if any)
    as the last microbatch. Communication and neighbours are ignored: that is the point.

greedy-dp
    Stage by stage, the stage's partition is the *exact* optimum of its own objective given
    everything already fixed: forward in stage order, with the arrival time of every sample
    fixed by the upstream stage's chosen partition (``R``), minimize the time the stage's last
    activation transfer ends, ``X[s, K]`` (the last stage: ``F[S-1, K]``); then backward in
    reverse stage order, given ``F[s, K_s]`` and the downstream gradient arrivals, minimize
    ``Y[s, L]`` (stage 0: ``G[0, L]``). In stash mode only the forward pass chooses (``Q = P``).
    The prefix DP's state after ``a`` samples is the pair (compute end, link end); both chains
    are monotone, so keeping every Pareto-minimal pair per prefix makes the DP exact (one scalar
    would not be: an earlier link end can come with a later compute end).
"""

from __future__ import annotations

import numpy as np

from ...plan import Plan
from ...problem import Problem

__all__ = ["greedy_dp_plan", "local_greedy_plan", "local_greedy_sizes", "pareto_prefix_dp",
           "prefix_dp_sizes"]


def _best_size(cost: np.ndarray) -> int:
    """argmin over m = 1..B of ``cost[m] / m`` (``cost`` indexed 0..B); ties -> smaller m."""
    B = cost.shape[0] - 1
    per = cost[1:] / np.arange(1, B + 1)
    return int(np.argmin(per)) + 1  # argmin returns the first (smallest m) minimum


def local_greedy_sizes(B: int, m: int) -> tuple[int, ...]:
    """``m`` repeated ``B // m`` times, then the remainder ``B mod m`` if non-zero."""
    q, r = divmod(B, m)
    return (m,) * q + ((r,) if r else ())


def local_greedy_plan(problem: Problem, mode: str = "stash") -> Plan:
    """Each stage's own best size per sample, repeated (see the module docstring)."""
    tb = problem.tables()
    B, S = problem.B, problem.S
    cb = tb.backward(mode)
    if mode == "stash":
        # a stage with more than one microbatch runs far backwards under gpipe (MODEL.md §1b)
        far = tb.backward_far(mode).copy()
        far[:, B] = cb[:, B]
        fwd = tuple(local_greedy_sizes(B, _best_size(tb.fwd[s] + far[s])) for s in range(S))
        return Plan(fwd=fwd, bwd=fwd, mode=mode)
    fwd = tuple(local_greedy_sizes(B, _best_size(tb.fwd[s])) for s in range(S))
    bwd = tuple(local_greedy_sizes(B, _best_size(cb[s])) for s in range(S))
    return Plan(fwd=fwd, bwd=bwd, mode=mode)


def pareto_prefix_dp(
    R: np.ndarray, cost: np.ndarray, link: np.ndarray | None, start: float
) -> tuple[int, ...]:
    """Exact best composition of ``B`` for one stage and direction (docs/MODEL.md §4 chains).

    ``R[a]`` (a = 1..B): release time of a microbatch whose last sample is ``a`` (index 0
    unused). ``cost[p]``, ``link[p]``: compute and transfer time of ``p`` samples (``link``
    None: no transfer, minimize the compute end). The chains are ``V_j = max(V_{j-1}, R_j) +
    cost(p_j)``, ``V_0 = start``, and ``W_j = max(W_{j-1}, V_j) + link(p_j)``, ``W_0 = 0``;
    the objective is ``W_K`` (ties: lower ``V_K``), or ``V_K`` without a link.

    Every prefix keeps its Pareto-minimal ``(V, W)`` pairs: both updates are monotone in both
    coordinates, so a dominated pair can never lead to a better end (principle of optimality).
    """
    B = cost.shape[0] - 1
    # Flat store of every kept state: its prefix length, V, W and the state it came from.
    pre = [0]
    Vs = [float(start)]
    Ws = [0.0]
    parent = [-1]
    pre_a = np.zeros(1, dtype=np.int64)
    V_a = np.array([float(start)])
    W_a = np.zeros(1)
    for a in range(1, B + 1):
        p = a - pre_a  # sizes from every kept state (all have prefix < a)
        V = np.maximum(V_a, R[a]) + cost[p]
        W = np.maximum(W_a, V) + link[p] if link is not None else V
        order = np.lexsort((W, V))  # by V, then W: stable, so deterministic
        Wo = W[order]
        keep = np.ones(order.shape[0], dtype=bool)
        if order.shape[0] > 1:
            keep[1:] = Wo[1:] < np.minimum.accumulate(Wo)[:-1]
        chosen = order[keep]
        base = len(pre)
        pre.extend([a] * chosen.shape[0])
        Vs.extend(V[chosen].tolist())
        Ws.extend(W[chosen].tolist())
        parent.extend(chosen.tolist())  # index into the flat store (same order as arrays)
        pre_a = np.concatenate([pre_a, np.full(chosen.shape[0], a, dtype=np.int64)])
        V_a = np.concatenate([V_a, V[chosen]])
        W_a = np.concatenate([W_a, W[chosen]])
        if a == B:
            # Among the final states, the lowest objective; ties -> lowest V, first kept.
            fin = np.arange(base, len(pre))
            obj = np.array([Ws[i] for i in fin]) if link is not None else np.array(
                [Vs[i] for i in fin])
            sec = np.array([Vs[i] for i in fin])
            best = int(fin[np.lexsort((sec, obj))[0]])
            ends = []
            while best > 0:
                ends.append(pre[best])
                best = parent[best]
            ends.reverse()
            return tuple(int(x) for x in np.diff(ends, prepend=0))
    raise AssertionError("unreachable")  # pragma: no cover


def prefix_dp_sizes(
    R: np.ndarray, cost: np.ndarray, link: np.ndarray | None, start: float
) -> tuple[int, ...]:
    """:func:`pareto_prefix_dp`, compiled (:mod:`..evaluation._prefix_dp`: same result, ties
    included), in blocks of prefixes with the run clock checked between them; the numpy form
    stays as the readable reference the tests compare against."""
    from ..evaluation._prefix_dp import prefix_dp
    from ..evaluation.clock import current

    has_link = link is not None
    clock = current()

    def between() -> None:  # a deadline or a signal acts between two compiled blocks
        clock.check()
        clock.tick()

    ends = prefix_dp(np.ascontiguousarray(R, dtype=np.float64),
                     np.ascontiguousarray(cost, dtype=np.float64),
                     np.ascontiguousarray(link if has_link else cost, dtype=np.float64),
                     has_link, float(start), between)
    return tuple(int(x) for x in np.diff(ends, prepend=0))


def _fill(ends: np.ndarray, values: list[float], B: int) -> np.ndarray:
    """Per last-sample ``a`` = 1..B: the value of the microbatch holding sample ``a - 1``."""
    out = np.zeros(B + 1)
    k = 0
    for a in range(1, B + 1):
        while ends[k] < a:
            k += 1
        out[a] = values[k]
    return out


def greedy_dp_plan(problem: Problem, mode: str = "stash",
                   max_seconds: float | None = None) -> Plan | None:
    """Stage-by-stage exact prefix DP (see the module docstring); docs/MODEL.md §4 chains.

    One compiled DP per stage and direction; between two, the running plan's clock
    (:mod:`..evaluation.clock`) may end the run (:class:`~umpipe_bench.errors.TimeUp`).
    ``max_seconds``: when the second DP projects the whole construction (S DPs, 2S in
    recompute mode) past it, give up and return None (a seed a time budget cannot pay for).
    """
    import time

    from ..evaluation.clock import current

    clock = current()
    tb = problem.tables()
    S, B = problem.S, problem.B
    cb = tb.backward(mode)
    fwd_parts: list[tuple[int, ...]] = []
    F_last = [0.0] * S
    R = np.zeros(B + 1)
    for s in range(S):
        if s:
            clock.check()
        link = tb.act[s] if s < S - 1 else None
        t0 = time.perf_counter()
        P = prefix_dp_sizes(R, tb.fwd[s], link, 0.0)
        calls = S * (2 if mode == "recompute" else 1)  # the first may include the compile
        if s == 1 and max_seconds is not None and (time.perf_counter() - t0) * calls > max_seconds:
            return None
        fwd_parts.append(P)
        F = X = 0.0
        Xs = []
        for j, p in enumerate(P):
            F = max(F, R[sum(P[: j + 1])]) + tb.fwd[s, p]
            if link is not None:
                X = max(X, F) + link[p]
                Xs.append(X)
        F_last[s] = F
        if link is not None:
            R = _fill(np.cumsum(P), Xs, B)
    if mode == "stash":
        fwd = tuple(fwd_parts)
        return Plan(fwd=fwd, bwd=fwd, mode=mode)
    bwd_parts: list[tuple[int, ...]] = [()] * S
    Y_fill: np.ndarray | None = None
    for s in range(S - 1, -1, -1):
        clock.check()
        Rb = np.full(B + 1, F_last[s]) if Y_fill is None else np.maximum(F_last[s], Y_fill)
        link = tb.grad[s - 1] if s > 0 else None
        Q = prefix_dp_sizes(Rb, cb[s], link, F_last[s])
        bwd_parts[s] = Q
        G, Y = F_last[s], 0.0
        Ys = []
        D = np.cumsum(Q)
        for j, q in enumerate(Q):
            G = max(G, Rb[D[j]]) + cb[s, q]
            if link is not None:
                Y = max(Y, G) + link[q]
                Ys.append(Y)
        if link is not None:
            Y_fill = _fill(D, Ys, B)
    return Plan(fwd=tuple(fwd_parts), bwd=tuple(bwd_parts), mode=mode)
