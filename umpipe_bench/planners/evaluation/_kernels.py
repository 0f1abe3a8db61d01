"""Compiled (numba) population kernels for the gpipe recurrence (docs/MODEL.md §4).

The loops are docs/MODEL.md §4's recurrence written exactly as
:func:`umpipe_bench.simulator.gpipe_recurrence` writes it (same operations, same order), so the
iteration times are bit-identical to the reference, not merely close. What makes them fast:

* the cut bits are decoded branch-free: ``ends[k] = i + 1; k += bit`` writes every position
  and keeps only the cuts; ``idx[i] = k`` records, for every sample, the microbatch holding it,
  so the dependency ``k = min{k : A[s-1,k] >= A[s,j]}`` is one load (no bisect);
* the max-then-add chain runs over microbatches only, with scalars in registers;
* the backward locality term (docs/MODEL.md §1b) is one table choice per stage: under gpipe a
  stash backward is far exactly when its stage has more than one microbatch.

The forward and backward passes are separate because the backward depends on the forward only
through each stage's last forward end ``F[s, K_s]`` (the exact planner enumerates them apart).

Importing this module imports numba; :mod:`.evaluator` does so lazily.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["backward_pass", "forward_pass"]


@njit(cache=True, nogil=True)
def forward_pass(fb, fwd, act, F_last):  # pragma: no cover - compiled
    """Forward recurrence for every individual: ``fb`` [N, S, B-1] uint8 cut bits,
    ``fwd`` [S, B+1], ``act`` [S-1, B+1]; writes ``F[s, K_s]`` into ``F_last`` [N, S]."""
    N, S, L = fb.shape
    B = L + 1
    ends = np.empty(B, np.int64)
    idx_up = np.zeros(B, np.int64)
    idx_cur = np.zeros(B, np.int64)
    X_up = np.zeros(B, np.float64)
    X_cur = np.zeros(B, np.float64)
    for n in range(N):
        for s in range(S):
            k = 0
            for i in range(L):
                idx_cur[i] = k
                ends[k] = i + 1
                k += fb[n, s, i]
            idx_cur[L] = k
            ends[k] = B
            K = k + 1
            F = 0.0
            X = 0.0
            prev = 0
            for j in range(K):
                a = ends[j]
                p = a - prev
                prev = a
                R = 0.0
                if s > 0:
                    R = X_up[idx_up[a - 1]]
                F = max(F, R) + fwd[s, p]
                if s < S - 1:
                    X = max(X, F) + act[s, p]
                    X_cur[j] = X
            F_last[n, s] = F
            X_up, X_cur = X_cur, X_up
            idx_up, idx_cur = idx_cur, idx_up


@njit(cache=True, nogil=True)
def backward_pass(bb, cb, cbf, grad, opt, F_last, T):  # pragma: no cover - compiled
    """Backward recurrence and ``T = max_s (G[s, L_s] + opt[s])`` for every individual:
    ``bb`` [N, S, B-1] uint8, ``cb`` [S, B+1] (bwd or rbwd), ``cbf`` [S, B+1] the far
    backward costs (``bwd * bwd_far`` in stash mode, else ``cb``: docs/MODEL.md §1b; a stage
    with more than one microbatch reads it), ``grad`` [S-1, B+1], ``opt`` [S], ``F_last``
    [N, S] from :func:`forward_pass`; writes ``T`` [N]."""
    N, S, L = bb.shape
    B = L + 1
    ends = np.empty(B, np.int64)
    idx_dn = np.zeros(B, np.int64)
    idx_cur = np.zeros(B, np.int64)
    Y_dn = np.zeros(B, np.float64)
    Y_cur = np.zeros(B, np.float64)
    for n in range(N):
        Tn = 0.0
        for s in range(S - 1, -1, -1):
            k = 0
            for i in range(L):
                idx_cur[i] = k
                ends[k] = i + 1
                k += bb[n, s, i]
            idx_cur[L] = k
            ends[k] = B
            K = k + 1
            tab = cb if K == 1 else cbf
            Fl = F_last[n, s]
            G = Fl
            Y = 0.0
            prev = 0
            for j in range(K):
                d = ends[j]
                q = d - prev
                prev = d
                R = Fl
                if s < S - 1:
                    R = max(Fl, Y_dn[idx_dn[d - 1]])
                G = max(G, R) + tab[s, q]
                if s > 0:
                    Y = max(Y, G) + grad[s - 1, q]
                    Y_cur[j] = Y
            Tn = max(Tn, G + opt[s])
            Y_dn, Y_cur = Y_cur, Y_dn
            idx_dn, idx_cur = idx_cur, idx_dn
        T[n] = Tn
