"""The one cut-bit encoding of plans (docs/MODEL.md §2), for every search planner.

A chromosome is ``S x (B-1)`` bits, stage-major: bit ``i`` of stage ``s`` is a microbatch
boundary after sample ``i+1``. Every bit string is a valid composition, so crossover and
mutation never need repair. An individual is two chromosomes, forward and backward; in stash
mode the backward one is tied to the forward one (not searched; decoding reuses the forward
bits). Arrays are uint8 ``[S, B-1]`` per individual, ``[N, S, B-1]`` per population.

Everything that turns plans, microbatch counts or integer codes into bits, and back, lives
here: DGAP, TiDGAP, random search, Optuna and exact all use these functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...plan import Plan, balanced_split

__all__ = [
    "bits_to_plan",
    "codes_to_bits",
    "decode",
    "edp_bits",
    "edp_row",
    "plan_to_bits",
    "plans_to_bits",
    "random_bits",
]


def edp_row(B: int, M: int) -> np.ndarray:
    """The cut bits ``[B-1]`` of a balanced split of ``B`` into ``M`` parts (docs/MODEL.md §2)."""
    row = np.zeros(max(B - 1, 0), dtype=np.uint8)
    cuts = np.cumsum(balanced_split(B, M)[:-1], dtype=np.int64) - 1
    row[cuts] = 1
    return row


def edp_bits(S: int, B: int, M: int) -> np.ndarray:
    """EDP(M) as cut bits ``[S, B-1]`` (balanced split, larger first; docs/MODEL.md §2)."""
    return np.repeat(edp_row(B, M)[None], S, axis=0)


def random_bits(rng: np.random.Generator, n: int, S: int, B: int) -> np.ndarray:
    """``n`` random chromosomes ``[n, S, B-1]``, microbatch count log-uniform in [1, B].

    Uniform bits (density 0.5, microbatches of ~2 samples) would waste most draws on plans no
    one would run, so each chromosome first draws a count ``M`` log-uniformly in ``[1, B]``
    and sets each bit with probability ``(M-1)/(B-1)`` (to ``2**-32``). The bits come from a
    compiled generator seeded by ``rng`` (:mod:`._random_kernels`: two bits per 64-bit draw),
    so drawing a plan costs less than evaluating it (results/perf/search.md).
    """
    L = B - 1
    if L == 0 or n == 0:
        return np.zeros((n, S, max(L, 0)), dtype=np.uint8)
    from ._random_kernels import bernoulli_rows

    M = np.exp(rng.uniform(0.0, np.log(B), size=n))
    density = np.clip((M - 1.0) / L, 0.0, 1.0)
    thresholds = np.rint(density * 2.0**32).astype(np.uint64)
    out = np.empty((n, S * L), dtype=np.uint8)
    bernoulli_rows(np.uint64(rng.integers(0, 2**63)), thresholds, out)
    return out.reshape(n, S, L)


def codes_to_bits(codes: np.ndarray, S: int, L: int) -> np.ndarray:
    """Integer codes -> cut bits ``[n, S, L]`` (bit ``j`` of the code = flat bit ``j``)."""
    shifts = np.arange(S * L, dtype=np.int64)
    return ((np.asarray(codes, dtype=np.int64)[:, None] >> shifts) & 1).astype(
        np.uint8).reshape(-1, S, L)


def plan_to_bits(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """A plan -> ``(fbits, bbits)``, each uint8 ``[S, B-1]``."""
    S, B = plan.S, plan.B
    fb = np.zeros((S, B - 1), dtype=np.uint8)
    bb = np.zeros((S, B - 1), dtype=np.uint8)
    for arr, parts in ((fb, plan.fwd), (bb, plan.bwd)):
        for s, sizes in enumerate(parts):
            cuts = np.cumsum(sizes[:-1], dtype=np.int64) - 1
            arr[s, cuts] = 1
    return fb, bb


def plans_to_bits(plans: Sequence[Plan]) -> tuple[np.ndarray, np.ndarray]:
    """Several plans -> ``(fbits, bbits)`` ``[N, S, B-1]``."""
    pairs = [plan_to_bits(p) for p in plans]
    return np.stack([f for f, _ in pairs]), np.stack([b for _, b in pairs])


def bits_to_plan(fb: np.ndarray, bb: np.ndarray | None, mode: str) -> Plan:
    """``[S, B-1]`` cut bits -> :class:`Plan` (``bb`` ignored in stash mode)."""
    fb = np.asarray(fb)
    S, L = fb.shape

    def sizes(row: np.ndarray) -> tuple[int, ...]:
        ends = np.flatnonzero(row) + 1
        return tuple(np.diff(ends, prepend=0, append=L + 1).tolist())

    fwd = tuple(sizes(fb[s]) for s in range(S))
    bwd = fwd if (mode == "stash" or bb is None) else tuple(
        sizes(np.asarray(bb)[s]) for s in range(S))
    return Plan(fwd=fwd, bwd=bwd, mode=mode)


def decode(fb: np.ndarray, bb: np.ndarray, mode: str) -> Plan:
    """One individual's bits ``[S, B-1]`` -> :class:`Plan` (alias of :func:`bits_to_plan`)."""
    return bits_to_plan(fb, bb, mode)
