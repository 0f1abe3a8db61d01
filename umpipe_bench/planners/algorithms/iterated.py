"""Iterated descent: kicks to a few neighbouring stages, each followed by the pair descent.

docs/SEARCH.md, "Stopping". The pair descent (:mod:`.pair_descent`) ends at a plan no single
or paired move improves; the plans faster still differ from it in several stages at once.
An iterated local search reaches them: from the current plan, a **kick** rewrites a window of
one to :data:`WINDOW` neighbouring stages, each stage of the window in one way drawn for the
whole kick:

* a balanced split into ``k`` microbatches, ``k`` uniform in ``1..B``;
* two to five of its cut bits flipped;
* its neighbour's partition (the previous or the next stage);
* a run of two to eight cut bits redrawn at random;
* in recompute mode, its backward partition given its forward one, or the reverse;

in recompute mode a partition move rewrites the forward, the backward or both; with caps,
each stage of the window has its cap moved by up to :data:`CAP_KICK` samples with probability
:data:`CAP_KICK_RATE` (clamped to what memory allows). With probability ``1 / (2 S)`` the kick
is instead a **column kick**: every stage's first (or last) microbatch is given one size, a
random stage's own first (last) size plus -2..2 samples, at most ``B // 2`` (the pipeline's
fill and drain are shared by all stages; a window move cannot align them at once); its window
is every stage. With probability ``hub`` (the caller's) the kick is instead a **hub kick**:
the stage with the fewest microbatches is the hub (the pipeline's bottleneck on launch-bound
costs, whose cuts the other stages' partitions refine in the fastest plans found); one of its
cuts moves by 1 to :data:`HUB_SHIFT` samples, and every stage's cuts between the hub's two
neighbouring cuts stretch with it (each of the two intervals mapped linearly onto its new
length, rounded), so a stage holding that cut moves it too and keeps its refinement of the
hub; in recompute mode the kick moves the forward or the backward partition (one half each),
around its own hub. Its window is every stage. The pair descent then runs on the window and
its two neighbours only; a kicked plan that beats the current one is polished by a full pair
descent. The walk moves to the kicked plan when it is faster than the current one, or within
:data:`ACCEPT` of the best found (so it can cross plateaus and shallow ridges without drifting
far); the result is the best plan found. The walk ends when its allowance is spent or, sooner,
once it has gone :data:`STALL` kicks, or as many kicks as it took to its last improvement if
that is more, without improving the best plan (a small problem's optimum is found in a few
kicks; a large one keeps improving).

The kicks come from the caller's ``numpy.random.Generator``: one generator, one result. The
default budget's figures with it are in ``results/perf/plan-speed.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..evaluation.encoding import edp_row
from ..evaluation.objective import Genomes
from .pair_descent import REACH, PairMoves, walk_from, walk_genome

__all__ = ["ACCEPT", "CAP_KICK", "CAP_KICK_RATE", "HUB_SHIFT", "STALL", "WINDOW",
           "IteratedResult", "hub_stretch", "iterated_descent"]

#: A kicked plan within this fraction of the best found may become the current plan.
ACCEPT = 0.005
#: A kick rewrites 1..WINDOW neighbouring stages.
WINDOW = 3
#: The walk ends after this many kicks without a better plan (or more, see the docstring).
STALL = 64
#: A kicked stage's cap moves by at most this many samples ...
CAP_KICK = 8
#: ... with this probability.
CAP_KICK_RATE = 0.3
#: A hub kick moves the hub's cut by at most this many samples.
HUB_SHIFT = 3


@dataclass
class IteratedResult:
    """The best plan found (a batch of one), its T, the evaluations spent and the kicks."""

    genome: Genomes
    time: float
    evaluations: int
    kicks: int


def _parts(rng: np.random.Generator, f: np.ndarray, b: np.ndarray,
           recompute: bool) -> list[np.ndarray]:
    """The partitions a move rewrites: the forward (stash); in recompute mode the forward
    and the backward (probability one half), else one of them."""
    if not recompute:
        return [f]
    if rng.random() < 0.5:
        return [f, b]
    return [f if rng.random() < 0.5 else b]


def hub_stretch(X: np.ndarray, lo: int, c: int, new: int, hi: int) -> None:
    """Move cut ``c`` to ``new`` (``lo < new < hi``) in the cut bits ``X`` ``[S, B-1]`` in
    place: every stage's cuts in ``(lo, c]`` mapped linearly onto ``(lo, new]`` and those in
    ``(c, hi)`` onto ``(new, hi)``, rounded (cuts that meet merge); the rest stay."""
    S, L = X.shape
    for t in range(S):
        p = np.flatnonzero(X[t]) + 1
        inner = p[(p > lo) & (p < hi)]
        if not len(inner):
            continue
        q = inner.astype(np.float64)
        left = q <= c
        q[left] = lo + (q[left] - lo) * (new - lo) / (c - lo)
        q[~left] = new + (q[~left] - c) * (hi - new) / (hi - c)
        X[t, inner - 1] = 0
        X[t, np.clip(np.rint(q).astype(np.int64), 1, L) - 1] = 1


def _hub_kick(rng: np.random.Generator, f: np.ndarray, b: np.ndarray, recompute: bool) -> bool:
    """A hub kick (module docstring) on the forward cut bits ``f`` ``[S, B-1]`` (in recompute
    mode on ``f`` or ``b``, one half each: each partition has its own hub), in place; False
    when it moves nothing."""
    X = (f, b)[int(rng.integers(2))] if recompute else f
    n = X.sum(axis=1)
    h = int(rng.choice(np.flatnonzero(n == n.min())))
    hub = np.flatnonzero(X[h]) + 1
    if len(hub) == 0:
        return False
    i = int(rng.integers(len(hub)))
    c = int(hub[i])
    lo = int(hub[i - 1]) if i > 0 else 0
    hi = int(hub[i + 1]) if i + 1 < len(hub) else X.shape[1] + 1
    d = int(rng.integers(1, HUB_SHIFT + 1)) * (1 if rng.random() < 0.5 else -1)
    new = int(np.clip(c + d, lo + 1, hi - 1))
    if new == c:
        return False
    hub_stretch(X, lo, c, new, hi)
    return True


def _kick(rng: np.random.Generator, f: np.ndarray, b: np.ndarray, k: np.ndarray | None,
          recompute: bool, cap_limits: np.ndarray | None, hub: float = 0.0) -> range:
    """Rewrite a window of stages of ``(f, b, k)`` in place (module docstring); the window.
    ``hub``: the probability of a hub kick (its window: every stage)."""
    S, L = f.shape
    B = L + 1
    s = int(rng.integers(S))
    window = range(s, min(S, s + int(rng.integers(1, WINDOW + 1))))
    if hub and rng.random() < hub and _hub_kick(rng, f, b, recompute):
        return range(S)
    if rng.random() < 1.0 / (2 * S):  # every stage's first (or last) microbatch: one size
        first = rng.random() < 0.5
        parts = _parts(rng, f, b, recompute)
        cuts = np.flatnonzero(parts[0][s])  # the size near one stage's: theirs +-2
        now = (int(cuts[0]) + 1 if first else L - int(cuts[-1])) if len(cuts) else B
        size = int(np.clip(now + rng.integers(-2, 3), 1, max(1, B // 2)))
        for X in parts:
            if first:
                X[:, :size - 1] = 0
                X[:, size - 1] = 1
            else:
                X[:, L - size + 1:] = 0
                X[:, L - size] = 1
        return range(S)
    kind = int(rng.integers(5 if recompute else 4))
    for t in window:
        if kind == 4:  # recompute: one partition of the stage takes the other
            if rng.random() < 0.5:
                b[t] = f[t]
            else:
                f[t] = b[t]
        else:
            for X in _parts(rng, f, b, recompute):
                if kind == 0:
                    X[t] = edp_row(B, int(rng.integers(1, B + 1)))
                elif kind == 1:
                    X[t, rng.choice(L, size=min(L, int(rng.integers(2, 6))), replace=False)] ^= 1
                elif kind == 2:
                    up = t > 0 and (t == S - 1 or rng.random() < 0.5)
                    X[t] = X[t - 1] if up else X[t + 1] if t + 1 < S else X[t]
                else:
                    a = int(rng.integers(L))
                    n = len(X[t, a:a + int(rng.integers(2, 9))])
                    X[t, a:a + n] = rng.integers(0, 2, size=n)
        if k is not None and rng.random() < CAP_KICK_RATE:
            top = B if cap_limits is None else int(cap_limits[t])
            k[t] = int(np.clip(k[t] + rng.integers(-CAP_KICK, CAP_KICK + 1), 1, max(1, top)))
    return window


def iterated_descent(evaluate: Callable[[Genomes], np.ndarray], genome: Genomes, time: float,
                     mode: str, max_evaluations: int, rng: np.random.Generator,
                     cap_limits: np.ndarray | None = None, reach: int = REACH,
                     columns: bool = False, hub: float = 0.0) -> IteratedResult:
    """Iterated descent from ``genome`` (a batch of one, T ``time``; module docstring).

    ``evaluate`` is the caller's counted objective; at most ``max_evaluations`` evaluations
    are made (a batch that would pass it is not run: the walk ends there). ``cap_limits``
    ``[S]`` bounds the caps (stash memory); ``reach``: the pair descent's (its
    :class:`.pair_descent.PairMoves`); ``hub``: the share of hub kicks."""
    S, L = genome.fwd.shape[1:]
    if L == 0 or max_evaluations <= 0:
        return IteratedResult(genome, float(time), 0, 0)
    recompute = mode == "recompute"
    moves = PairMoves(S, L + 1, mode, cap_limits, reach, columns)
    w = walk_from(evaluate, genome, time, mode, max_evaluations)
    used, kicks, last = 0, 0, 0
    _, ok = moves.descend(w, range(S))
    used += w.used
    best = current = (walk_genome(w), w.best)
    while ok and used < max_evaluations and kicks - last < max(STALL, last):
        g = current[0].copy()  # stash: the copy's backward is its forward
        window = _kick(rng, g.fwd[0], g.bwd[0], None if g.caps is None else g.caps[0],
                       recompute, cap_limits, hub)
        t = float(evaluate(g)[0])
        used += 1
        kicks += 1
        w = walk_from(evaluate, g, t, mode, max_evaluations - used)
        _, ok = moves.descend(w, range(max(0, window.start - 1), min(S, window.stop + 1)))
        if ok and w.best < current[1] * (1.0 - 1e-6):
            _, ok = moves.descend(w, range(S))
        used += w.used
        if w.best < current[1] or w.best < best[1] * (1.0 + ACCEPT):
            current = (walk_genome(w), w.best)
            if current[1] < best[1]:
                best, last = current, kicks
    return IteratedResult(best[0], best[1], used, kicks)
