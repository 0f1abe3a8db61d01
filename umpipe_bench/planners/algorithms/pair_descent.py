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
:data:`MIN_GAIN` or the allowance of evaluations is spent; a sweep passes over a stage whose
moves were all tried since the walk last moved (``Walk.settled``: they would move nothing
again). No randomness: one plan in, one plan out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..evaluation.objective import Genomes
from .descent import Walk

__all__ = ["CAP_STEPS", "MIN_GAIN", "REACH", "PairMoves", "PairResult", "pair_descent",
           "pair_sweep_cost", "walk_from", "walk_genome"]

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


class PairMoves:
    """The pair descent's moves on ``S`` stages of ``B - 1`` cut bits (module docstring),
    built once: :meth:`sweep` tries them on some stages of a :class:`.descent.Walk`."""

    def __init__(self, S: int, B: int, mode: str, cap_limits: np.ndarray | None = None,
                 reach: int = REACH, columns: bool = False) -> None:
        L = B - 1
        self.S, self.B, self.columns = S, B, columns
        self.parts = ("f", "b") if mode == "recompute" else ("f",)
        self.cap_limits = cap_limits
        pi, pj = _pairs(L, reach)
        self.flips = np.zeros((len(pi), L), np.uint8)
        rows = np.arange(len(pi))
        self.flips[rows, pi] = 1
        self.flips[rows, pj] ^= np.where(pi == pj, 0, 1).astype(np.uint8)
        near = [(i, j) for i in range(L) for j in (i - 1, i, i + 1) if 0 <= j < L]
        self.ni = np.array([a for a, _ in near], dtype=np.int64)
        self.nj = np.array([c for _, c in near], dtype=np.int64)

    def sweep(self, w: Walk, stages: range) -> bool:
        """Every move on ``stages`` (and their next stage), in order; False when a batch
        would pass the walk's allowance or deadline (the sweep stops there). A stage whose
        moves were all tried since the walk last moved (``Walk.settled``) is passed over:
        they would move nothing again, so the walk goes where it went, with fewer
        evaluations."""
        S = self.S
        if (self.columns and S > 1 and len(stages) == S
                and w.settled.get("columns") != w.moves):
            at = w.moves
            for parts in ((("f",), ("b",), ("f", "b")) if len(self.parts) > 1 else (("f",),)):
                F, Bb, K = w.copies(self.column_count())
                for part in parts:
                    column_moves(F if part == "f" else Bb)
                if w.trial(F, Bb, K) is None:
                    return False
            if w.moves == at:
                w.settled["columns"] = at
        for s in stages:
            if w.settled.get(s) == w.moves:
                continue
            at = w.moves
            if not self._stage(w, s):
                return False
            if w.moves == at:
                w.settled[s] = at
        return True

    def _stage(self, w: Walk, s: int) -> bool:
        """Stage ``s``'s moves (module docstring); False as :meth:`sweep`."""
        flips, ni, nj, S, B = self.flips, self.ni, self.nj, self.S, self.B
        for part in self.parts:
            F, Bb, K = w.copies(len(flips))
            X = F if part == "f" else Bb
            X[:, s] ^= flips
            if w.trial(F, Bb, K) is None:
                return False
            if s + 1 < S:
                F, Bb, K = w.copies(len(flips))
                X = F if part == "f" else Bb
                X[:, s] ^= flips
                X[:, s + 1] ^= flips
                if w.trial(F, Bb, K) is None:
                    return False
                n = len(ni)
                F, Bb, K = w.copies(n + 2)
                X = F if part == "f" else Bb
                X[np.arange(n), s, ni] ^= 1
                X[np.arange(n), s + 1, nj] ^= 1
                X[n, s + 1] = X[n, s]
                X[n + 1, s] = X[n + 1, s + 1]
                if w.trial(F, Bb, K) is None:
                    return False
        if w.k is not None:
            cand = w.k[s] + np.array(CAP_STEPS, dtype=np.int64)
            if s + 1 < S:
                cand = np.append(cand, w.k[s + 1])
            cand = np.clip(cand, 1, B)
            if self.cap_limits is not None:
                cand = np.minimum(cand, self.cap_limits[s])
            cand = np.unique(cand[cand != w.k[s]])
            if len(cand):
                F, Bb, K = w.copies(len(cand))
                K[:, s] = cand  # type: ignore[index]
                if w.trial(F, Bb, K) is None:
                    return False
        return True

    def column_count(self) -> int:
        """The column moves of one partition (:func:`column_moves`)."""
        L = self.B - 1
        return 2 * (self.B // 2) + 2 * L + 2 * max(0, L - 1)

    def descend(self, w: Walk, stages: range) -> tuple[int, bool]:
        """Sweeps over ``stages`` until one gains less than :data:`MIN_GAIN`: (sweeps,
        whether the allowance held)."""
        sweeps = 0
        while True:
            start = w.best
            if not self.sweep(w, stages):
                return sweeps, False
            sweeps += 1
            if not w.best < start * (1.0 - MIN_GAIN):
                return sweeps, True


@lru_cache(maxsize=8)
def _column_masks(L: int) -> tuple[np.ndarray, np.ndarray]:
    """The bits :func:`column_moves` sets and clears in its rows that do not depend on the
    plan (first and last sizes, one bit set or cleared): ``(set, clear)``, ``[n, L]`` each."""
    c = np.arange(1, (L + 1) // 2 + 1)
    j = np.arange(L)
    first_set = (j[None] == c[:, None] - 1)
    first_clear = j[None] < c[:, None] - 1
    last_set = j[None] == L - c[:, None]
    last_clear = j[None] > L - c[:, None]
    eye = np.eye(L, dtype=bool)
    none = np.zeros((L, L), bool)
    # rows in pairs: (first c, last c) for each c, then (bit i set, bit i cleared) for each i
    set_ = np.stack([first_set, last_set], 1).reshape(-1, L)
    clear = np.stack([first_clear, last_clear], 1).reshape(-1, L)
    set_ = np.concatenate([set_, np.stack([eye, none], 1).reshape(-1, L)])
    clear = np.concatenate([clear, np.stack([none, eye], 1).reshape(-1, L)])
    return set_.astype(np.uint8), (~clear).astype(np.uint8)


def column_moves(X: np.ndarray) -> None:
    """Rewrite ``X`` ``[N, S, L]`` (copies of one partition of every stage) in place, row by
    row, with the moves that change every stage at once: every stage's first microbatch of
    ``c`` samples (``c = 1..B//2``), every stage's last of ``c``; cut bit ``i`` set in every
    stage, cleared in every stage; every stage's boundary at ``i`` moved to ``i + 1`` (stages
    with none there unchanged), and from ``i + 1`` to ``i``."""
    N, _, L = X.shape
    set_, keep = _column_masks(L)
    n = len(set_)
    X[:n] = (X[:n] | set_[:, None]) & keep[:, None]
    i = np.arange(L - 1)
    rows = n + np.stack([2 * i, 2 * i + 1], 1).reshape(-1)  # (right, left) for each i
    a = np.stack([i, i + 1], 1).reshape(-1)  # the boundary's bit before the move
    b = np.stack([i + 1, i], 1).reshape(-1)  # ... and after
    va, vb = X[rows, :, a], X[rows, :, b]  # [rows, S]
    at = (va == 1) & (vb == 0)
    X[rows, :, a] = np.where(at, 0, va)
    X[rows, :, b] = np.where(at, 1, vb)
    assert n + len(rows) == N


def walk_from(evaluate: Callable[[Genomes], np.ndarray], genome: Genomes, time: float,
              mode: str, allowance: float) -> Walk:
    """A :class:`.descent.Walk` at ``genome`` (a batch of one, T ``time``), copied."""
    f = np.array(genome.fwd[0], dtype=np.uint8)
    recompute = mode == "recompute"
    b = np.array(genome.bwd[0], dtype=np.uint8) if recompute else f
    k = None if genome.caps is None else np.array(genome.caps[0], dtype=np.int64)
    return Walk(evaluate, f, b, k, float(time), recompute, allowance)


def walk_genome(w: Walk) -> Genomes:
    """The walk's current genome as a batch of one (copies)."""
    F = w.f[None].copy()
    return Genomes(F, w.b[None].copy() if w.recompute else F,
                   None if w.k is None else w.k[None].copy())


def pair_descent(evaluate: Callable[[Genomes], np.ndarray], genome: Genomes, time: float,
           mode: str, max_evaluations: int, cap_limits: np.ndarray | None = None,
           reach: int = REACH, columns: bool = False) -> PairResult:
    """Steepest descent from ``genome`` (a batch of one, T ``time``; module docstring).

    ``evaluate`` is the caller's counted objective; at most ``max_evaluations`` evaluations
    are made (a batch that would pass it is not run: the descent ends there).
    ``cap_limits`` ``[S]`` bounds the caps (stash memory)."""
    S, L = genome.fwd.shape[1:]
    if L == 0:
        return PairResult(genome, float(time), 0, 0)
    w = walk_from(evaluate, genome, time, mode, max_evaluations)
    sweeps, _ = PairMoves(S, L + 1, mode, cap_limits, reach, columns).descend(w, range(S))
    return PairResult(walk_genome(w), w.best, w.used, sweeps)
