"""docs/MODEL.md §4's closed form as whole-population array operations (numpy or torch).

One stage's recurrence ``F_j = max(F_{j-1}, R_j) + t_j`` is ``F_j = C_j + max(F_0,
max_{i<=j}(R_i - C_{i-1}))`` with ``C`` the cumulative sum of ``t`` (docs/MODEL.md §4). This module
evaluates it for all individuals (rows) and all microbatches (columns) at once, the two levels of
TiDGAP, on a padded *sample-position* layout: an ``[N, B]`` array per stage whose column ``i``
is sample ``i``; the microbatch ends (cut bits, plus the last sample) carry the microbatch's
cost and every other column carries 0, so a row-wise cumsum is ``C`` at every end and a
row-wise cummax over ``-inf``-padded ``R - C_prev`` is the max term. The arrival time of
upstream sample ``i`` (``X`` of the microbatch holding it) is a reversed cummin of ``X`` at the
ends, ready for the next stage to read at its own ends.

The sums run in a different order from the reference loop, so results agree with
:func:`umpipe_bench.simulator.gpipe_recurrence` to a few ulps times ``B`` (tested at 1e-12
relative), not bit for bit; the numba kernels in :mod:`._kernels` are bit-exact.

The functions take an array namespace ``xp`` (:class:`_NumpyOps` or the torch one in
:mod:`._torch_backend`) so that the same algebra runs on CPU numpy and on a torch device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["NUMPY_OPS", "closed_form_backward", "closed_form_forward"]


class _NumpyOps:
    """The handful of array operations the closed form needs, for numpy."""

    inf = np.inf

    @staticmethod
    def cumsum(x: Any) -> Any:
        return np.cumsum(x, axis=1)

    @staticmethod
    def cummax(x: Any) -> Any:
        return np.maximum.accumulate(x, axis=1)

    @staticmethod
    def rev_cummin(x: Any) -> Any:
        return np.minimum.accumulate(x[:, ::-1], axis=1)[:, ::-1]

    @staticmethod
    def where(c: Any, a: Any, b: Any) -> Any:
        return np.where(c, a, b)

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        return np.maximum(a, b)

    @staticmethod
    def shift_right(x: Any, fill: float) -> Any:
        """Column ``i`` gets column ``i-1`` (column 0 gets ``fill``): an exclusive scan."""
        out = np.empty_like(x)
        out[:, 0] = fill
        out[:, 1:] = x[:, :-1]
        return out

    @staticmethod
    def ends(bits: Any) -> Any:
        """Cut bits [N, B-1] -> end mask [N, B] (the last sample always ends a microbatch)."""
        N, L = bits.shape
        E = np.ones((N, L + 1), dtype=bool)
        E[:, :L] = bits
        return E

    @staticmethod
    def positions(N: int, B: int, like: Any) -> Any:
        return np.broadcast_to(np.arange(B), (N, B))

    @staticmethod
    def empty(N: int, S: int, like: Any) -> Any:
        return np.empty((N, S), dtype=np.float64)

    @staticmethod
    def column(x: Any, j: int) -> Any:
        return x[:, j]

    @staticmethod
    def any_cut(bits: Any) -> Any:
        """Cut bits [N, B-1] -> [N, 1] bool: whether the row has more than one microbatch."""
        return np.asarray(bits, dtype=bool).any(axis=1, keepdims=True)


NUMPY_OPS = _NumpyOps()


def _sizes(xp: Any, E: Any, pos: Any) -> Any:
    """Microbatch size at every end column (elsewhere some size in 1..B, never read)."""
    last_end = xp.cummax(xp.where(E, pos, -1))
    return pos - xp.shift_right(last_end, -1)


def _chain(xp: Any, E: Any, cost: Any, R: Any, start: Any) -> Any:
    """``V_j = max(V_{j-1}, R_j) + cost_j``, ``V_0 = start``, at every end column (closed form).

    ``R`` is an [N, B] array (or a scalar) read at the ends; ``start`` a scalar or [N, 1].
    """
    t = xp.where(E, cost, 0.0)
    C = xp.cumsum(t)
    C_prev = xp.shift_right(C, 0.0)
    m = xp.cummax(xp.where(E, R - C_prev, -xp.inf))
    return C + xp.maximum(m, start)


def closed_form_forward(xp: Any, fb: Any, fwd: Any, act: Any) -> Any:
    """``F[s, K_s]`` [N, S] for cut bits ``fb`` [N, S, B-1] (docs/MODEL.md §4 forward)."""
    N, S, L = fb.shape
    B = L + 1
    pos = xp.positions(N, B, fb)
    F_last = xp.empty(N, S, fwd)
    X_fill = None
    for s in range(S):
        E = xp.ends(fb[:, s, :])
        size = _sizes(xp, E, pos)
        R = 0.0 if s == 0 else X_fill
        F = _chain(xp, E, fwd[s][size], R, 0.0)
        F_last[:, s] = xp.column(F, B - 1)
        if s < S - 1:
            X = _chain(xp, E, act[s][size], F, 0.0)
            X_fill = xp.rev_cummin(xp.where(E, X, xp.inf))
    return F_last


def closed_form_backward(
    xp: Any, bb: Any, cb: Any, cbf: Any, grad: Any, opt: Any, F_last: Any
) -> Any:
    """``T = max_s (G[s, L_s] + opt[s])`` [N] for cut bits ``bb`` (docs/MODEL.md §4 backward).

    ``cbf`` is the far backward table (docs/MODEL.md §1b): a stage with more than one
    microbatch reads it, one with a single microbatch reads ``cb``."""
    N, S, L = bb.shape
    B = L + 1
    pos = xp.positions(N, B, bb)
    T = None
    Y_fill = None
    for s in range(S - 1, -1, -1):
        E = xp.ends(bb[:, s, :])
        size = _sizes(xp, E, pos)
        Fl = F_last[:, s : s + 1]
        R = Fl if s == S - 1 else xp.maximum(Fl, Y_fill)
        cost = xp.where(xp.any_cut(bb[:, s, :]), cbf[s][size], cb[s][size])
        G = _chain(xp, E, cost, R, Fl)
        end = xp.column(G, B - 1) + opt[s]
        T = end if T is None else xp.maximum(T, end)
        if s > 0:
            Y = _chain(xp, E, grad[s - 1][size], G, 0.0)
            Y_fill = xp.rev_cummin(xp.where(E, Y, xp.inf))
    return T
