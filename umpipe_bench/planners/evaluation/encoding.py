"""The cut-bit chromosomes of the search planners (docs/MODEL.md §2), on :mod:`umpipe_bench.codec`.

A chromosome is ``S x (B-1)`` bits, stage-major: bit ``i`` of stage ``s`` is a microbatch
boundary after sample ``i+1``. Every bit string is a valid composition, so crossover and
mutation never need repair. An individual is two chromosomes, forward and backward; in stash
mode the backward one is tied to the forward one (not searched; decoding reuses the forward
bits). Arrays are uint8 ``[S, B-1]`` per individual, ``[N, S, B-1]`` per population.

The mappings between plans, counts, integer codes and bits are :mod:`umpipe_bench.codec`'s
(re-exported here for the planners); this module adds the random chromosomes searches start
from and the decoding of one individual to a :class:`~umpipe_bench.plan.Plan`.
"""

from __future__ import annotations

import numpy as np

from ...codec import codes_to_bits, edp_bits, edp_row, plan_to_bits, plans_to_bits
from ...plan import Plan

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
    from .clock import chunk_rows, current

    M = np.exp(rng.uniform(0.0, np.log(B), size=n))
    density = np.clip((M - 1.0) / L, 0.0, 1.0)
    thresholds = np.rint(density * 2.0**32).astype(np.uint64)
    out = np.empty((n, S * L), dtype=np.uint8)
    seed = int(rng.integers(0, 2**63))
    # in calls short enough for signals; a row takes ceil(S*L/2) draws of the generator,
    # so each call starts where the one before it stopped: the same bits as one call
    step, draws = chunk_rows(S, B), -(-(S * L) // 2)
    for a in range(0, n, step):
        state = (seed + a * draws * _SPLITMIX_GAMMA) % 2**64
        bernoulli_rows(np.uint64(state), thresholds[a:a + step], out[a:a + step])
        current().tick()
    return out.reshape(n, S, L)


#: SplitMix64's increment (:mod:`._random_kernels`): its state after ``k`` draws is
#: ``seed + k * gamma`` (mod 2**64).
_SPLITMIX_GAMMA = 0x9E3779B97F4A7C15


def bits_to_plan(fb: np.ndarray, bb: np.ndarray | None, mode: str,
                 caps: np.ndarray | None = None) -> Plan:
    """``[S, B-1]`` cut bits (and cap genes ``[S]``) -> :class:`Plan` (``bb`` ignored in stash
    mode; caps decoded by :func:`umpipe_bench.codec.genes_to_caps`)."""
    return Plan.from_bits(fb, bb, mode, caps)


def decode(fb: np.ndarray, bb: np.ndarray, mode: str) -> Plan:
    """One individual's bits ``[S, B-1]`` -> :class:`Plan` (alias of :func:`bits_to_plan`)."""
    return bits_to_plan(fb, bb, mode)
