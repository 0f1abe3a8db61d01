"""Stage descent: coordinate descent over per-stage equal splits and caps (a seed plan).

A GA moves one cut bit at a time, so on a long chromosome (S = 64, B = 1024: 65,472 bits per
chromosome) it cannot change how many microbatches a stage uses except by many lucky flips.
Stage descent works one level up. It starts from a plan (the best seed) and visits the stages
in order; at stage ``s`` it tries, all at once in one batch of the objective:

* the stage's forward partition replaced by a balanced split into ``k`` parts
  (:func:`..evaluation.encoding.edp_row`) for every ``k`` in :func:`descent_counts` (all counts up
  to 64, then a geometric grid up to ``B``), the rest of the plan unchanged; in stash mode the
  backward follows the forward;
* in recompute mode, the same for the stage's backward partition;
* with caps (the schedule family, docs/SCHEDULES.md), the stage's in-flight cap scaled by
  :data:`CAP_FACTORS`, and uncapped (``B``), clamped to what memory allows;

and keeps the best candidate when it is faster than the current plan. A sweep visits every
stage; sweeps repeat until one gains less than :data:`MIN_GAIN` (relative) or the evaluation
allowance is spent. There is no randomness: one problem and starting plan, one result.

On ``sim-s64-b1024-s0`` it takes the best seed (1F1B-EDP(8): 96.12 recompute, 74.92 stash) to
71.47 / 55.59 in 71,435 / 26,389 evaluations (7 / 5 sweeps), 9.1 % / 3.4 % of TiDGAP's default
budget there; results/perf/convergence.md has the default runs that start from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...problem import Problem
from ..evaluation.encoding import edp_row
from ..evaluation.objective import Genomes
from ..search.seeding import Seeds

__all__ = ["CAP_FACTORS", "DESCENT_SHARE", "MAX_SWEEPS", "MIN_GAIN", "Descent",
           "add_descent_seed", "descent_allowance", "descent_counts", "stage_descent",
           "sweep_cost", "without_descent"]

#: A search spends at most this share of its evaluation budget on the descent, and runs it
#: only when that share pays for one whole sweep (:func:`descent_allowance`); under a time
#: budget, at most this share of the time too. At the default
#: budgets the descent converges well within it. A quarter was tried: on the published
#: matrix (evals:3000) it changed 56 TiDGAP cells, better without memory caps (geometric mean
#: -0.9 %) but worse under them (+1.5 % at 50 %, up to +28 % in one vgg16 stash cell): a
#: quarter of a small budget is a GA's worth. With 10 % 34 cells changed, -0.3 % without caps,
#: -0.6 % / +0.1 % at 25 % / 50 %.
DESCENT_SHARE = 0.1

#: A stage's cap candidates: the current cap times these (rounded, clamped to 1..B), and B.
CAP_FACTORS = (0.25, 0.5, 0.67, 0.8, 0.9, 1.1, 1.25, 1.5, 2.0, 4.0)
#: Sweeps stop when one gains less than this fraction of T.
MIN_GAIN = 1e-4
#: At most this many sweeps.
MAX_SWEEPS = 20
#: Every microbatch count up to this is tried; above it a geometric grid (x1.25) up to B.
DENSE_COUNTS = 64


def descent_counts(B: int) -> list[int]:
    """The microbatch counts tried per stage: ``1..min(B, 64)``, then x1.25 steps, and B."""
    counts = list(range(1, min(B, DENSE_COUNTS) + 1))
    k = float(DENSE_COUNTS)
    while True:
        k *= 1.25
        if int(k) >= B:
            break
        counts.append(int(k))
    if B > DENSE_COUNTS:
        counts.append(B)
    return counts


def sweep_cost(S: int, B: int, mode: str, caps: bool) -> int:
    """The evaluations one sweep costs at most."""
    per = len(descent_counts(B)) * (2 if mode == "recompute" else 1)
    return S * (per + (len(CAP_FACTORS) + 1 if caps else 0))


@dataclass
class Descent:
    """The plan stage descent ends at, its T and what it cost."""

    fbits: np.ndarray  # [S, B-1]
    bbits: np.ndarray  # [S, B-1]
    caps: np.ndarray | None  # [S], or None without cap genes
    time: float
    evaluations: int
    sweeps: int


class Walk:
    """A descent's current genome ``(f, b, k)``, its T and its evaluations: candidates are
    copies of the genome with one move each, and a batch moves the walk to its fastest row
    when that beats the current T (the stage descent and :mod:`.pair_descent`).

    ``moves`` counts the moves; ``settled`` maps a group of candidates (a stage's, say) to the
    ``moves`` at which all of it was last tried without a move: while ``moves`` is still that,
    the genome and T are as they were, so the same candidates would move nothing again."""

    def __init__(self, evaluate: Callable[[Genomes], np.ndarray], f: np.ndarray,
                 b: np.ndarray, k: np.ndarray | None, best: float, recompute: bool,
                 room: float, deadline: Callable[[], bool] | None = None) -> None:
        self.evaluate, self.recompute, self.room, self.deadline = evaluate, recompute, room, \
            deadline
        self.f, self.b, self.k, self.best, self.used = f, b, k, best, 0
        self.moves = 0
        self.settled: dict[object, int] = {}

    def copies(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``n`` copies of the current genome (stash: the backward is the forward)."""
        F = np.repeat(self.f[None], n, axis=0)
        Bb = np.repeat(self.b[None], n, axis=0) if self.recompute else F
        return F, Bb, None if self.k is None else np.repeat(self.k[None], n, axis=0)

    def trial(self, F: np.ndarray, Bb: np.ndarray, K: np.ndarray | None) -> bool | None:
        """Evaluate the candidates and move to the fastest if it beats the current T (True);
        None: the batch would pass the allowance or the deadline has passed (not run)."""
        n = len(F)
        if self.used + n > self.room:
            return None
        if self.deadline is not None and self.used and self.deadline():
            return None
        t = np.asarray(self.evaluate(Genomes(F, Bb, K)), dtype=np.float64)
        self.used += n
        i = int(np.argmin(t))
        if t[i] < self.best:
            self.best = float(t[i])
            self.f = F[i].copy()
            self.b = Bb[i].copy() if self.recompute else self.f
            self.k = None if K is None else K[i].copy()
            self.moves += 1
            return True
        return False


def stage_descent(
    evaluate: Callable[[Genomes], np.ndarray],
    fbits: np.ndarray,
    bbits: np.ndarray,
    caps: np.ndarray | None,
    time: float,
    mode: str,
    max_evaluations: int | None = None,
    cap_limits: np.ndarray | None = None,
    max_seconds: float | None = None,
) -> Descent:
    """Coordinate descent from ``(fbits, bbits, caps)`` with T ``time`` (module docstring).

    ``evaluate`` takes a batch of :class:`..evaluation.objective.Genomes` (``[N, S, B-1]`` bits,
    caps ``[N, S]`` or None) and returns T; every call is counted by the caller. At most
    ``max_evaluations`` evaluations are made: a batch that would pass it is not run (the
    descent ends there). ``cap_limits`` ``[S]`` bounds the cap candidates (stash memory).
    ``max_seconds``: no batch starts after the descent has run this long (a time budget's
    share, :func:`add_descent_seed`).
    """
    from time import perf_counter

    t0 = perf_counter()
    f = np.array(fbits, dtype=np.uint8)
    b = np.array(bbits, dtype=np.uint8)
    S, L = f.shape
    B = L + 1
    k = None if caps is None else np.array(caps, dtype=np.int64)
    recompute = mode == "recompute"
    counts = descent_counts(B)
    rows = np.stack([edp_row(B, c) for c in counts]) if L else np.zeros((len(counts), 0),
                                                                          np.uint8)
    best, sweeps = float(time), 0
    room = np.inf if max_evaluations is None else max_evaluations

    deadline = None if max_seconds is None else (
        lambda: perf_counter() - t0 >= max_seconds)  # type: ignore[operator]
    w = Walk(evaluate, f, b, k, best, recompute, room, deadline)

    for _ in range(MAX_SWEEPS):
        start = w.best
        for s in range(S):
            for part in ("f", "b") if recompute else ("f",):
                F, Bb, K = w.copies(len(counts))
                (F if part == "f" else Bb)[:, s] = rows
                if w.trial(F, Bb, K) is None:
                    return Descent(w.f, w.b, w.k, w.best, w.used, sweeps)
            if w.k is not None:
                cand = np.rint(w.k[s] * np.array(CAP_FACTORS)).astype(np.int64)
                cand = np.unique(np.clip(np.append(cand, B), 1, B))
                if cap_limits is not None:
                    cand = np.unique(np.minimum(cand, cap_limits[s]))
                cand = cand[cand != w.k[s]]
                if len(cand):
                    F, Bb, K = w.copies(len(cand))
                    K[:, s] = cand  # type: ignore[index]
                    if w.trial(F, Bb, K) is None:
                        return Descent(w.f, w.b, w.k, w.best, w.used, sweeps)
        sweeps += 1
        if not w.best < start * (1.0 - MIN_GAIN):
            break
    return Descent(w.f, w.b, w.k, w.best, w.used, sweeps)


def descent_allowance(problem: Problem, mode: str, settings: dict[str, Any],
                      evaluations: int | None) -> int | None:
    """The evaluations a search may spend on the descent: 0 (no descent: ``descent`` off,
    or :data:`DESCENT_SHARE` of ``evaluations`` does not pay for one sweep), None (no
    evaluation budget: up to :data:`MAX_SWEEPS` sweeps) or that share."""
    if not settings.get("descent", False):
        return 0
    if evaluations is None:
        return None
    allowance = int(DESCENT_SHARE * evaluations)
    caps = settings.get("schedule", "capped") == "capped"
    return allowance if allowance >= sweep_cost(problem.S, problem.B, mode, caps) else 0


def add_descent_seed(seeds: Seeds, evaluate: Callable[[Genomes], np.ndarray], mode: str,
                     allowance: int | None, cap_limits: np.ndarray | None = None,
                     seconds: float | None = None) -> Seeds:
    """``seeds`` with the stage descent from the best of them first (label ``descent``),
    when it is faster than that seed; its evaluations are added to ``seeds.evaluations``.
    ``seconds``: a time budget, of which the descent takes at most :data:`DESCENT_SHARE`."""
    i = int(np.argmin(seeds.times))
    caps = None if seeds.caps is None else seeds.caps[i]
    d = stage_descent(evaluate, seeds.fbits[i], seeds.bbits[i], caps, float(seeds.times[i]),
                      mode, allowance, cap_limits,
                      None if seconds is None else DESCENT_SHARE * seconds)
    out = replace(seeds, evaluations=seeds.evaluations + d.evaluations)
    if not d.time < seeds.times[i]:
        return out
    bb = d.fbits if mode == "stash" else d.bbits
    return replace(
        out,
        fbits=np.concatenate([d.fbits[None], seeds.fbits]),
        bbits=np.concatenate([bb[None], seeds.bbits]),
        times=np.concatenate([[d.time], seeds.times]),
        labels=["descent", *seeds.labels],
        caps=None if seeds.caps is None else np.concatenate([d.caps[None], seeds.caps]),
    )


def without_descent(seeds: Seeds) -> Seeds:
    """``seeds`` without the stage descent's plan (the first seed, when labelled so)."""
    if not seeds.labels or seeds.labels[0] != "descent":
        return seeds
    return replace(seeds, fbits=seeds.fbits[1:], bbits=seeds.bbits[1:], times=seeds.times[1:],
                   labels=seeds.labels[1:], caps=None if seeds.caps is None else seeds.caps[1:])
