"""Pair descent: steepest descent over moves of one or two cut bits and caps.

docs/SEARCH.md, "Stopping". A GA's result is a local optimum for its own moves (a flip, a
boundary shift, a cap step); it is often not one for moves that change two things at once.
From a plan, the pair descent visits the stages in order and tries, in one batch of the
objective per stage and chromosome:

* every pair of cut bits ``i < j`` of the stage flipped together, ``j - i <= reach``
  (:data:`REACH`), and every single flip: a microbatch split in two, two merged, a boundary
  moved by more than one sample, one microbatch traded for another;
* the same pairs flipped in this stage and the next together (neighbours that share a
  partition keep sharing it); one cut bit flipped in this stage and one in the next stage,
  ``|i - j| <= 1``; and both stages given the same partition (either's);
* with caps (docs/SCHEDULES.md), this stage's in-flight cap moved by ``±1, ±2, ±4`` samples,
  and set to the next stage's;

and moves to the best candidate when it is faster. Sweeps repeat until one gains less than
:data:`MIN_GAIN` or the allowance of evaluations is spent. No randomness: one plan in, one
plan out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..evaluation.objective import Genomes
from .descent import Walk

__all__ = ["CAP_STEPS", "MIN_GAIN", "REACH", "PairResult", "pair_descent", "pair_sweep_cost"]

#: Pairs of cut bits of one stage at most this far apart are flipped together.
REACH = 8
#: Cap moves (samples).
CAP_STEPS = (-4, -2, -1, 1, 2, 4)
#: Sweeps stop when one gains less than this fraction of T.
MIN_GAIN = 1e-5


@dataclass
class PairResult:
    """The plan the pair descent ends at (a batch of one), its T, its cost and its sweeps."""

    genome: Genomes
    time: float
    evaluations: int
    sweeps: int


def _pairs(L: int, reach: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs ``(i, j)``, ``i <= j < L``, ``j - i <= reach`` (``i == j``: one flip)."""
    i, j = np.triu_indices(L)
    keep = j - i <= reach
    return i[keep], j[keep]


def pair_sweep_cost(S: int, B: int, mode: str, caps: bool, reach: int = REACH) -> int:
    """The evaluations one sweep costs at most."""
    L = B - 1
    within = len(_pairs(L, reach)[0]) if L else 0
    across = within + 3 * L if L else 0
    per = (within + across) * (2 if mode == "recompute" else 1)
    return S * (per + (len(CAP_STEPS) + 1 if caps else 0))


def pair_descent(evaluate: Callable[[Genomes], np.ndarray], genome: Genomes, time: float,
           mode: str, max_evaluations: int, cap_limits: np.ndarray | None = None,
           reach: int = REACH) -> PairResult:
    """Steepest descent from ``genome`` (a batch of one, T ``time``; module docstring).

    ``evaluate`` is the caller's counted objective; at most ``max_evaluations`` evaluations
    are made (a batch that would pass it is not run: the descent ends there).
    ``cap_limits`` ``[S]`` bounds the caps (stash memory)."""
    f = np.array(genome.fwd[0], dtype=np.uint8)
    recompute = mode == "recompute"
    b = np.array(genome.bwd[0], dtype=np.uint8) if recompute else f
    k = None if genome.caps is None else np.array(genome.caps[0], dtype=np.int64)
    S, L = f.shape
    B = L + 1
    best, sweeps = float(time), 0
    if L == 0:
        return PairResult(genome, best, 0, 0)
    pi, pj = _pairs(L, reach)
    flips = np.zeros((len(pi), L), np.uint8)
    rows = np.arange(len(pi))
    flips[rows, pi] = 1
    flips[rows, pj] ^= np.where(pi == pj, 0, 1).astype(np.uint8)
    near = [(i, j) for i in range(L) for j in (i - 1, i, i + 1) if 0 <= j < L]
    ni = np.array([a for a, _ in near])
    nj = np.array([c for _, c in near])

    w = Walk(evaluate, f, b, k, best, recompute, max_evaluations)

    while True:
        start = w.best
        for s in range(S):
            for part in ("f", "b") if recompute else ("f",):
                F, Bb, K = w.copies(len(flips))
                X = F if part == "f" else Bb
                X[:, s] ^= flips
                if w.trial(F, Bb, K) is None:
                    return _done(w, sweeps)
                if s + 1 < S:
                    F, Bb, K = w.copies(len(flips))
                    X = F if part == "f" else Bb
                    X[:, s] ^= flips
                    X[:, s + 1] ^= flips
                    if w.trial(F, Bb, K) is None:
                        return _done(w, sweeps)
                    n = len(ni)
                    F, Bb, K = w.copies(n + 2)
                    X = F if part == "f" else Bb
                    X[np.arange(n), s, ni] ^= 1
                    X[np.arange(n), s + 1, nj] ^= 1
                    X[n, s + 1] = X[n, s]
                    X[n + 1, s] = X[n + 1, s + 1]
                    if w.trial(F, Bb, K) is None:
                        return _done(w, sweeps)
            if w.k is not None:
                cand = w.k[s] + np.array(CAP_STEPS, dtype=np.int64)
                if s + 1 < S:
                    cand = np.append(cand, w.k[s + 1])
                cand = np.clip(cand, 1, B)
                if cap_limits is not None:
                    cand = np.minimum(cand, cap_limits[s])
                cand = np.unique(cand[cand != w.k[s]])
                if len(cand):
                    F, Bb, K = w.copies(len(cand))
                    K[:, s] = cand  # type: ignore[index]
                    if w.trial(F, Bb, K) is None:
                        return _done(w, sweeps)
        sweeps += 1
        if not w.best < start * (1.0 - MIN_GAIN):
            return _done(w, sweeps)


def _done(w: Walk, sweeps: int) -> PairResult:
    F = w.f[None].copy()
    g = Genomes(F, w.b[None].copy() if w.recompute else F,
                None if w.k is None else w.k[None].copy())
    return PairResult(g, w.best, w.used, sweeps)
