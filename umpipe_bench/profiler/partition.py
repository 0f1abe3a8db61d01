"""Layers to stages, and the size grid: pure algorithms (no torch), docs/MODEL.md §1.

A stage is a contiguous group of model layers (docs/MODEL.md §1). A grouping is written as
``layers_per_stage``: a tuple of positive layer counts summing to the number of layers, e.g.
``(4, 3, 3, 4)`` for 14 layers on 4 stages. Three ways to get one:

* :func:`one_per_stage` -- every layer its own stage;
* :func:`parse_layers_per_stage` -- an explicit grouping such as ``"4,3,3,4"``;
* :func:`balanced_partition` -- the grouping that minimizes the slowest stage's time, given a
  measured time per layer (the linear-partition problem; exact dynamic programme below).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..errors import ProfileError

__all__ = [
    "balanced_partition",
    "bottleneck",
    "check_layers_per_stage",
    "one_per_stage",
    "parse_layers_per_stage",
    "size_grid",
]


def size_grid(B: int) -> tuple[int, ...]:
    """The sizes a profile measures: 1, 2, 4, ... below ``B``, plus ``B`` (docs/MODEL.md §1)."""
    if isinstance(B, bool) or not isinstance(B, int) or B < 1:
        raise ProfileError(f"batch size B must be a positive int, got {B!r}")
    sizes = []
    m = 1
    while m < B:
        sizes.append(m)
        m *= 2
    sizes.append(B)
    return tuple(sizes)


def one_per_stage(n_layers: int) -> tuple[int, ...]:
    """Every layer on its own stage."""
    if n_layers < 1:
        raise ProfileError(f"a model needs at least one layer, got {n_layers}")
    return (1,) * n_layers


def check_layers_per_stage(layers_per_stage: Sequence[int], n_layers: int) -> tuple[int, ...]:
    """Validate a grouping against a model of ``n_layers`` layers; errors name the stage."""
    lps = tuple(layers_per_stage)
    if not lps:
        raise ProfileError("layers_per_stage is empty; expected one positive count per stage")
    for s, k in enumerate(lps):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ProfileError(
                f"layers_per_stage: stage {s} has {k!r} layers; expected an int >= 1")
    if sum(lps) != n_layers:
        raise ProfileError(
            f"layers_per_stage {','.join(map(str, lps))} covers {sum(lps)} layers; "
            f"the model has {n_layers}"
        )
    return lps


def parse_layers_per_stage(text: str, n_layers: int | None = None) -> tuple[int, ...]:
    """Parse ``"4,3,3,4"``; with ``n_layers``, also check that the counts cover the model."""
    parts = [p.strip() for p in text.split(",")]
    counts = []
    for s, p in enumerate(parts):
        try:
            counts.append(int(p))
        except ValueError:
            raise ProfileError(
                f"layers_per_stage {text!r}: stage {s} count {p!r} is not an integer"
            ) from None
    if n_layers is None:
        n_layers = sum(counts)
    return check_layers_per_stage(counts, n_layers)


def bottleneck(costs: Sequence[float], layers_per_stage: Sequence[int]) -> float:
    """The largest stage time of a grouping: ``max_s sum(costs of stage s's layers)``."""
    out, i = 0.0, 0
    for k in layers_per_stage:
        out = max(out, math.fsum(costs[i : i + k]))
        i += k
    return out


def balanced_partition(costs: Sequence[float], S: int) -> tuple[int, ...]:
    """Split layers with times ``costs`` into ``S`` contiguous non-empty stages, minimizing the
    slowest stage's time; among the optimal groupings, the one with the least sum of squared
    stage times (the most even), then the lexicographically smallest ``layers_per_stage``.

    Algorithm (exact, O(S * n^2) for n layers; the classic linear-partition DP):

    1. Prefix sums ``P``; a segment ``[i, j)`` costs ``seg(i, j) = P[j] - P[i]`` (always
       computed the same way, so equal segments compare equal and the ties below are exact).
    2. ``f[j][i]`` = the least possible bottleneck of layers ``i..n-1`` on ``j`` stages:
       ``f[1][i] = seg(i, n)``, ``f[j][i] = min_{k>i} max(seg(i, k), f[j-1][k])`` keeping at
       least one layer per remaining stage. ``V = f[S][0]`` is the optimum.
    3. Tie-break: ``g[j][i]`` = the least sum of squared stage times of layers ``i..n-1`` on
       ``j`` stages with every stage ``<= V``:
       ``g[j][i] = min_{k>i, seg(i,k) <= V} seg(i, k)**2 + g[j-1][k]``.
    4. Rebuild from stage 0: take the smallest ``k`` reaching ``g[j][i]``. The answer is a
       deterministic function of ``costs`` (no dict or set order, no randomness).
    """
    n = len(costs)
    if isinstance(S, bool) or not isinstance(S, int) or S < 1:
        raise ProfileError(f"number of stages must be a positive int, got {S!r}")
    if S > n:
        raise ProfileError(f"cannot split {n} layers into {S} non-empty stages")
    for i, c in enumerate(costs):
        if not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0:
            raise ProfileError(f"layer {i} cost must be a finite number >= 0, got {c!r}")
    P = [0.0]
    for c in costs:
        P.append(P[-1] + float(c))

    def seg(i: int, k: int) -> float:
        return P[k] - P[i]

    inf = math.inf
    # step 2: f[j][i] for j stages covering layers i..n-1 (needs n - i >= j)
    f = [[inf] * (n + 1) for _ in range(S + 1)]
    for i in range(n):
        f[1][i] = seg(i, n)
    for j in range(2, S + 1):
        for i in range(n - j + 1):
            f[j][i] = min(max(seg(i, k), f[j - 1][k]) for k in range(i + 1, n - j + 2))
    V = f[S][0]
    # step 3: g[j][i], least sum of squares with every stage <= V (inf where infeasible)
    g = [[inf] * (n + 1) for _ in range(S + 1)]
    for i in range(n):
        if seg(i, n) <= V:
            g[1][i] = seg(i, n) ** 2
    for j in range(2, S + 1):
        for i in range(n - j + 1):
            g[j][i] = min(
                (seg(i, k) ** 2 + g[j - 1][k] for k in range(i + 1, n - j + 2) if seg(i, k) <= V),
                default=inf,
            )
    # step 4: rebuild, smallest k first
    out: list[int] = []
    i = 0
    for j in range(S, 1, -1):
        for k in range(i + 1, n - j + 2):
            if seg(i, k) <= V and seg(i, k) ** 2 + g[j - 1][k] == g[j][i]:
                out.append(k - i)
                i = k
                break
        else:  # pragma: no cover - impossible: g[j][i] is attained by some k
            raise AssertionError("balanced_partition: reconstruction failed")
    out.append(n - i)
    return tuple(out)
