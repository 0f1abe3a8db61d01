"""The seeded initial population shared by DGAP and TiDGAP (docs/MODEL.md §2 encoding).

For one seed both GAs start from the same individuals: the best ``edp_seeds`` EDP(M) plans
found by scanning every M in 1..B, the ``local-greedy`` and ``greedy-dp`` plans
(:mod:`..algorithms.greedy`), then random individuals (:func:`..evaluation.encoding.random_bits`).
Every evaluation goes through the caller's ``evaluate`` and is counted by it (the search loop's
objective).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...problem import Problem
from ..algorithms.greedy import greedy_dp_plan, local_greedy_plan
from ..evaluation.encoding import edp_bits, plan_to_bits, random_bits

__all__ = ["EDP_BLOCK_BYTES", "GREEDY_SHARE", "Seeds", "add_family_seeds", "add_start_seed",
           "initial_population", "seed_plans", "seeding_evaluations"]


def seeding_evaluations(B: int, greedy: bool) -> int:
    """What :func:`seed_plans` costs: the EDP(M) scan (B) plus the two greedy plans."""
    return B + (2 if greedy else 0)


@dataclass
class Seeds:
    """The seeded part of an initial population and what it cost."""

    fbits: np.ndarray  # [n, S, B-1]
    bbits: np.ndarray  # [n, S, B-1]
    times: np.ndarray  # [n]
    labels: list[str]
    evaluations: int
    caps: np.ndarray | None = None  # [n, S] in-flight caps (schedule family); None: uncapped


def seed_plans(
    problem: Problem,
    mode: str,
    evaluate: Callable[..., np.ndarray],
    edp_seeds: int = 4,
    greedy: bool = True,
    edp_ranges: bool = False,
) -> Seeds:
    """Scan EDP(M) for all M (B evaluations), keep the best ``edp_seeds``; add the greedy plans.

    ``evaluate(fbits, bbits) -> T`` is the planner's own fitness (the reference one
    individual at a time for DGAP, the population evaluator for TiDGAP); every call is
    counted. The scan goes in blocks of EDP plans, so its bits never exist all at once and the
    run's clock (:mod:`..evaluation.clock`) is seen between blocks; the greedy-dp plan checks
    it between stages, and under a time budget is left out when it would take more than
    :data:`GREEDY_SHARE` of it. ``edp_ranges``: the scan's calls are ``evaluate(fbits, bbits,
    edp=range)``, the block's M (which lets an objective take them from the EDP reference
    scan, :class:`..evaluation.objective.Genomes`).
    """
    from ..evaluation.clock import current

    S, B = problem.S, problem.B
    clock = current()
    clock.phase = "the EDP seed scan"
    T_edp = np.empty(B)
    step = max(1, EDP_BLOCK_BYTES // max(1, S * (B - 1)))
    for a in range(1, B + 1, step):
        Ms = range(a, min(B, a + step - 1) + 1)
        f = np.stack([edp_bits(S, B, M) for M in Ms])
        T_edp[a - 1:Ms[-1]] = evaluate(f, f, edp=Ms) if edp_ranges else evaluate(f, f)
    order = np.argsort(T_edp, kind="stable")[: max(0, edp_seeds)]
    fb = [edp_bits(S, B, int(i) + 1) for i in order]
    bb = list(fb)
    times = [float(T_edp[i]) for i in order]
    labels = [f"EDP({i + 1})" for i in order]
    evals = B
    if greedy:
        clock.phase = "the greedy seed plans"
        share = None if clock.seconds is None else GREEDY_SHARE * clock.seconds
        dp = greedy_dp_plan(problem, mode, share)
        plans = [("local-greedy", local_greedy_plan(problem, mode))]
        plans += [("greedy-dp", dp)] if dp is not None else []
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


#: With a time budget, the greedy-dp seed is left out when its construction would take more
#: than this share of the budget (projected from its first stage: 0.11 s a stage at S = 128,
#: B = 2048, 14 s in stash, so a minute's budget leaves it out there).
GREEDY_SHARE = 0.1

#: Bytes of cut bits per block of the seeding's EDP scan (64 plans at S = 128, B = 2048).
EDP_BLOCK_BYTES = 1 << 24


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




def add_family_seeds(problem: Problem, mode: str, seeds: Seeds,
                     evaluate: Callable[[Any], np.ndarray]) -> Seeds:
    """The schedule family's seeds (docs/SCHEDULES.md §1): the uncapped GPipe seeds plus the
    fastest 1F1B-EDP plans whose M divides B, with the sample caps that reproduce torch's
    1F1B lists (:func:`.caps.family_seeds`), all sorted best first.

    ``evaluate(genomes) -> T`` takes :class:`..evaluation.objective.Genomes` with caps; every call
    is counted by the caller's loop.
    """
    from ..evaluation.objective import Genomes
    from .caps import family_seeds

    S, B = problem.S, problem.B
    extra = family_seeds(problem, mode)
    if not extra:
        return _joined(problem, seeds, seeds.fbits[:0], seeds.bbits[:0],
                       np.zeros((0, S), np.int64), np.zeros(0), [])
    ef = np.stack([edp_bits(S, B, M) for _, M, _ in extra])
    ek = np.stack([k for _, _, k in extra]).astype(np.int64)
    et = np.asarray(evaluate(Genomes(ef, ef, ek)), dtype=np.float64)
    return _joined(problem, seeds, ef, ef, ek, et, [label for label, _, _ in extra])


def add_start_seed(problem: Problem, seeds: Seeds, plan: Any, label: str,
                   evaluate: Callable[[Any], np.ndarray]) -> Seeds:
    """``seeds`` (the schedule family's, with caps) and one more plan, e.g. a coarse start
    (:mod:`.coarse`), evaluated (one counted evaluation), all sorted best first. A plan
    without caps runs uncapped (caps of ``B``)."""
    from ..evaluation.objective import Genomes

    S, B = problem.S, problem.B
    fb, bb = plan_to_bits(plan)
    caps = np.full((1, S), B, np.int64) if plan.caps is None else np.array([plan.caps],
                                                                          np.int64)
    t = np.asarray(evaluate(Genomes(fb[None], bb[None], caps)), dtype=np.float64)
    return _joined(problem, seeds, fb[None], bb[None], caps, t, [label])


def _joined(problem: Problem, seeds: Seeds, fbits: np.ndarray, bbits: np.ndarray,
            caps: np.ndarray, times: np.ndarray, labels: list[str]) -> Seeds:
    """``seeds`` and the evaluated plans given (one row each, ``len(labels)`` evaluations
    more), all sorted best first (a stable sort: of equal T, the earlier); seeds without caps
    run uncapped (caps of ``B``)."""
    base = (np.full((len(seeds.labels), problem.S), problem.B, np.int64) if seeds.caps is None
            else seeds.caps)
    t = np.concatenate([np.asarray(seeds.times, dtype=np.float64), times])
    order = np.argsort(t, kind="stable")
    return Seeds(fbits=np.concatenate([seeds.fbits, fbits])[order],
                 bbits=np.concatenate([seeds.bbits, bbits])[order], times=t[order],
                 labels=[[*seeds.labels, *labels][i] for i in order],
                 evaluations=seeds.evaluations + len(labels),
                 caps=np.concatenate([base, caps])[order])
