"""Cap genes: the in-flight caps ``K[s]`` as a third part of a genome (docs/SCHEDULES.md).

A genome of the schedule family is (forward cut bits ``[S, B-1]``, backward cut bits
``[S, B-1]``, caps ``[S]``), caps in ``1..B`` (``B``: no cap, the GPipe lists). This module
holds what the GAs do with caps, as whole-population array operations:

* :func:`family_seeds`: the 1F1B-EDP plans every search in the family starts from besides
  the GPipe-EDP ones: for the fastest 1F1B-EDP ``M`` that divide ``B``, EDP(M) with
  ``K[s] = (S - s) * B / M`` (exactly torch's 1F1B lists);
* :func:`random_caps`: initial caps, half of them uncapped, the rest log-uniform in ``1..B``;
* :func:`crossover_caps`: a pair swaps the caps of a random run of stages;
* :func:`mutate_caps`: each stage of a mutated individual redraws its cap with a probability,
  half the time near the old value (x or / up to 2), half the time anywhere;
* :func:`memory_cap_limits`: in stash mode the largest cap a stage's memory allows
  (``(capacity - static) / saved bytes per sample``); genes are clamped to it, so a plan is
  infeasible only when a microbatch or a fallback (docs/SCHEDULES.md §2) needs more.
"""

from __future__ import annotations

import numpy as np

from ...memory import capacities, memory_figures
from ...problem import Problem

__all__ = [
    "clamp_caps",
    "crossover_caps",
    "extra_family_seeds",
    "family_seeds",
    "memory_cap_limits",
    "mutate_caps",
    "one_f_one_b_sample_caps",
    "random_caps",
]


def one_f_one_b_sample_caps(S: int, B: int, M: int) -> np.ndarray:
    """``K[s] = (S - s) * ceil(B / M)``: torch's 1F1B lists when ``M`` divides ``B``."""
    return np.minimum((S - np.arange(S)) * -(-B // M), B).astype(np.int64)


def memory_cap_limits(problem: Problem, mode: str) -> np.ndarray | None:
    """Per-stage largest cap that stash-mode memory allows; None when nothing limits it."""
    caps = capacities(problem)
    figs = memory_figures(problem, mode)
    if caps is None or figs is None or mode != "stash":
        return None
    out = np.full(problem.S, problem.B, dtype=np.int64)
    for s in range(problem.S):
        per = figs.per_inflight[s]
        if per > 0 and np.isfinite(caps[s]):
            room = (caps[s] - figs.static[s]) / per
            out[s] = int(np.clip(np.floor(room), 1, problem.B))
    return out


def clamp_caps(caps: np.ndarray, limits: np.ndarray | None) -> np.ndarray:
    """Clamp caps ``[N, S]`` in place to ``limits`` ``[S]`` (None: unchanged)."""
    if limits is not None:
        np.minimum(caps, limits, out=caps)
    return caps


def random_caps(rng: np.random.Generator, n: int, S: int, B: int) -> np.ndarray:
    """``n`` cap vectors ``[n, S]``: each stage uncapped (``B``) with probability 1/2, else
    log-uniform in ``1..B``."""
    draw = np.exp(rng.uniform(0.0, np.log(B + 1), size=(n, S))).astype(np.int64)
    caps = np.clip(draw, 1, B)
    caps[rng.random((n, S)) < 0.5] = B
    return caps


def family_seeds(problem: Problem, mode: str, n_1f1b: int = 3) -> list[tuple[str, int, np.ndarray]]:
    """``[(label, M, caps [S])]``: the 1F1B-EDP seeds in the family (fastest first).

    The ``n_1f1b`` fastest M that divide ``B`` under torch's 1F1B (those the family
    reproduces exactly) with their 1F1B caps; under memory caps only M that fit count, and
    none fitting gives no seed. Only the divisors of B are evaluated
    (:func:`..evaluation.reference.edp_points`). The GPipe-EDP seeds (caps ``B``) are the
    seeding's own EDP scan (:func:`.seeding.seed_plans`).
    """
    from ..evaluation.reference import edp_points

    S, B = problem.S, problem.B
    Ms = [M for M in range(1, B + 1) if B % M == 0]
    to = dict(zip(Ms, edp_points(problem, mode, "1f1b", Ms)))
    fitting = [M for M in Ms if np.isfinite(to[M])]
    return [(f"1f1b EDP({M})", M, one_f_one_b_sample_caps(S, B, M))
            for M in sorted(fitting, key=lambda m: (to[m], m))[:n_1f1b]]


def crossover_caps(rng: np.random.Generator, caps: np.ndarray, pairs: np.ndarray) -> None:
    """For each pair ``(2i, 2i+1)`` in ``pairs``, swap the caps of a random run of stages."""
    if pairs.size == 0:
        return
    S = caps.shape[1]
    a = rng.integers(0, S, size=pairs.size)
    b = rng.integers(0, S, size=pairs.size)
    lo, hi = np.minimum(a, b), np.maximum(a, b) + 1
    stages = np.arange(S)
    mask = (stages >= lo[:, None]) & (stages < hi[:, None])
    x, y = caps[2 * pairs], caps[2 * pairs + 1]
    caps[2 * pairs] = np.where(mask, y, x)
    caps[2 * pairs + 1] = np.where(mask, x, y)


def mutate_caps(rng: np.random.Generator, caps: np.ndarray, rows: np.ndarray, B: int,
                rate: float) -> None:
    """Each stage of each row in ``rows`` redraws its cap with probability ``rate / S``."""
    if rows.size == 0:
        return
    S = caps.shape[1]
    sub = caps[rows]
    hit = rng.random(sub.shape) < rate / S
    if not hit.any():
        return
    near = np.rint(sub * np.exp(rng.uniform(-np.log(2), np.log(2), size=sub.shape)))
    anywhere = np.exp(rng.uniform(0.0, np.log(B + 1), size=sub.shape))
    new = np.where(rng.random(sub.shape) < 0.5, near, anywhere)
    new = np.clip(new, 1, B).astype(np.int64)
    new[rng.random(sub.shape) < 0.15] = B
    caps[rows] = np.where(hit, new, sub)


def extra_family_seeds(problem: Problem, mode: str) -> int:
    """How many seeds the family adds to the GPipe EDP scan (the 1F1B-EDP ones)."""
    return len(family_seeds(problem, mode))
