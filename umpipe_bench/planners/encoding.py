"""The dual-chromosome encoding and the seeded initial population (MODEL.md §2).

An individual is two chromosomes of cut bits, forward and backward, each ``S x (B-1)`` bits
(stage-major: stage ``s`` owns bits ``s*(B-1) .. (s+1)*(B-1)-1``, bit ``i`` = a microbatch
boundary after sample ``i+1``). Every bit string is a valid composition, so crossover and
mutation never need repair. In stash mode the backward chromosome is tied to the forward one
(it is not searched; decoding uses the forward bits for both).

The initial population (shared by DGAP and TiDGAP, so that for one seed both start from the
same individuals): the best ``edp_seeds`` EDP(M) plans found by scanning every M in 1..B, the
``local-greedy`` and ``greedy-dp`` plans, then random individuals. A random individual draws a
microbatch count ``M`` log-uniformly in ``[1, B]`` (per chromosome) and sets each bit with
probability ``(M-1)/(B-1)``: uniform bits (density 0.5, microbatches of ~2 samples) would waste
most of the population on plans no one would run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..plan import Plan, balanced_split
from ..problem import Problem
from .evaluator import bits_to_plan, plan_to_bits
from .greedy import greedy_dp_plan, local_greedy_plan

__all__ = ["Seeds", "edp_bits", "initial_population", "random_bits", "seed_plans"]


def edp_bits(S: int, B: int, M: int) -> np.ndarray:
    """EDP(M) as cut bits ``[S, B-1]`` (balanced split, larger first; MODEL.md §2)."""
    row = np.zeros(B - 1, dtype=np.uint8)
    cuts = np.cumsum(balanced_split(B, M)[:-1], dtype=np.int64) - 1
    row[cuts] = 1
    return np.repeat(row[None], S, axis=0)


def random_bits(rng: np.random.Generator, n: int, S: int, B: int) -> np.ndarray:
    """``n`` random chromosomes ``[n, S, B-1]``, microbatch count log-uniform in [1, B]."""
    L = B - 1
    if L == 0:
        return np.zeros((n, S, 0), dtype=np.uint8)
    M = np.exp(rng.uniform(0.0, np.log(B), size=n))
    density = np.clip((M - 1.0) / L, 0.0, 1.0)
    return (rng.random((n, S, L)) < density[:, None, None]).astype(np.uint8)


@dataclass
class Seeds:
    """The seeded part of an initial population and what it cost."""

    fbits: np.ndarray  # [n, S, B-1]
    bbits: np.ndarray  # [n, S, B-1]
    times: np.ndarray  # [n]
    labels: list[str]
    evaluations: int


def seed_plans(
    problem: Problem,
    mode: str,
    evaluate: Callable[[np.ndarray, np.ndarray], np.ndarray],
    edp_seeds: int = 4,
    greedy: bool = True,
) -> Seeds:
    """Scan EDP(M) for all M (B evaluations), keep the best ``edp_seeds``; add the greedy plans.

    ``evaluate(fbits, bbits) -> T`` is the planner's own fitness (the reference one individual
    at a time for DGAP, the population evaluator for TiDGAP); every call is counted.
    """
    S, B = problem.S, problem.B
    edp_f = np.stack([edp_bits(S, B, M) for M in range(1, B + 1)])
    T_edp = evaluate(edp_f, edp_f)
    order = np.argsort(T_edp, kind="stable")[: max(0, edp_seeds)]
    fb = [edp_f[i] for i in order]
    bb = [edp_f[i] for i in order]
    times = [float(T_edp[i]) for i in order]
    labels = [f"EDP({i + 1})" for i in order]
    evals = B
    if greedy:
        plans = [("local-greedy", local_greedy_plan(problem, mode)),
                 ("greedy-dp", greedy_dp_plan(problem, mode))]
        gf, gb = zip(*(plan_to_bits(p) for _, p in plans))
        T_g = evaluate(np.stack(gf), np.stack(gb))
        evals += len(plans)
        for (label, _), f, b, t in zip(plans, gf, gb, T_g):
            fb.append(f)
            bb.append(b)
            times.append(float(t))
            labels.append(label)
    shape = (0, S, B - 1)
    return Seeds(
        fbits=np.stack(fb) if fb else np.zeros(shape, np.uint8),
        bbits=np.stack(bb) if bb else np.zeros(shape, np.uint8),
        times=np.array(times, dtype=np.float64),
        labels=labels,
        evaluations=evals,
    )


def initial_population(
    problem: Problem,
    mode: str,
    size: int,
    rng: np.random.Generator,
    seeds: Seeds,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Seeds first (at most half the population), then random individuals.

    Returns ``(fbits, bbits, n_seeded)``; in stash mode ``bbits`` is ``fbits``. Random draws
    come from ``rng`` in a fixed order, so one seed gives one population.
    """
    S, B = problem.S, problem.B
    n_seed = min(len(seeds.labels), max(1, size // 2), size)
    n_rand = size - n_seed
    rf = random_bits(rng, n_rand, S, B)
    rb = random_bits(rng, n_rand, S, B) if mode == "recompute" else rf
    fb = np.concatenate([seeds.fbits[:n_seed], rf])
    bb = fb if mode == "stash" else np.concatenate([seeds.bbits[:n_seed], rb])
    return np.ascontiguousarray(fb), np.ascontiguousarray(bb), n_seed


def decode(fb: np.ndarray, bb: np.ndarray, mode: str) -> Plan:
    """One individual's bits ``[S, B-1]`` -> :class:`Plan`."""
    return bits_to_plan(fb, bb, mode)
