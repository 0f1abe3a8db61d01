"""Variation operators on cut-bit chromosomes, per individual (DGAP) and per population (TiDGAP).

One operator set, two implementations with the same distributions (MODEL.md §2 encoding; a
chromosome is ``S*(B-1)`` bits, stage-major):

* selection: tournament of ``tournament`` aspirants drawn with replacement, lowest T wins
  (DEAP's ``selTournament``);
* crossover, per chromosome: two-point crossover on the flat chromosome, cut points
  ``1 <= c1 < c2 <= len`` (DEAP's ``cxTwoPoint``); a mated pair crosses each of its
  chromosomes independently, so forward and backward genes recombine separately;
* mutation, per chromosome: flip each bit with probability ``flip_rate/len`` (DEAP's
  ``mutFlipBit``: adds or removes a boundary), then swap each within-stage adjacent pair with
  probability ``shift_rate/len`` (moves a boundary by one sample when exactly one is a cut).

The list versions use the ``random`` module (as DEAP's tools do); the array versions use a
``numpy.random.Generator`` and touch only ``O(#changes)`` entries per generation instead of
drawing one random number per bit: drawing ``len`` uniforms per chromosome would cost more
than evaluating the population (PERF-ANCHORS.md: DEAP's per-individual overhead is the
bottleneck to remove). Within one array call, a shift that touches a bit another shift of
the same chromosome touches is dropped (simultaneous swaps would not compose), and two flips
of one bit cancel; the distributions differ from the sequential ones only in those rare
overlaps.
"""

from __future__ import annotations

import random

import numpy as np
from deap import tools

__all__ = [
    "array_crossover",
    "array_mutation",
    "array_tournament",
    "list_crossover",
    "list_mutation",
    "list_shift",
]


# ---------------------------------------------------------------------- per individual (DGAP)
def list_shift(chrom: list[int], stage_len: int, rate: float) -> None:
    """Swap each within-stage adjacent pair with probability ``rate/len(chrom)``, in place."""
    n = len(chrom)
    if stage_len < 2 or n == 0:
        return
    pb = rate / n
    for s0 in range(0, n, stage_len):
        for i in range(s0, s0 + stage_len - 1):
            if random.random() < pb:
                chrom[i], chrom[i + 1] = chrom[i + 1], chrom[i]


def list_crossover(c1: list[int], c2: list[int]) -> None:
    """DEAP two-point crossover of one chromosome pair (in place; needs length >= 2)."""
    if len(c1) >= 2:
        tools.cxTwoPoint(c1, c2)


def list_mutation(chrom: list[int], stage_len: int, flip_rate: float, shift_rate: float) -> None:
    """Bit flips (DEAP ``mutFlipBit``) then boundary shifts, in place."""
    if not chrom:
        return
    tools.mutFlipBit(chrom, flip_rate / len(chrom))
    list_shift(chrom, stage_len, shift_rate)


# ---------------------------------------------------------------------- per population (TiDGAP)
def array_tournament(
    rng: np.random.Generator, times: np.ndarray, k: int, tournament: int
) -> np.ndarray:
    """Indices of ``k`` tournament winners (lowest time; ties -> first aspirant drawn)."""
    asp = rng.integers(0, times.shape[0], size=(k, tournament))
    return asp[np.arange(k), np.argmin(times[asp], axis=1)]


def array_crossover(rng: np.random.Generator, chroms: np.ndarray, pairs: np.ndarray) -> None:
    """Two-point crossover of row pairs ``(2k, 2k+1)`` for ``k`` in ``pairs``, in place.

    ``chroms`` is [n, len]; the mating decision (probability ``cxpb``) is the caller's, so
    that one decision covers both chromosomes of an individual, as in DEAP's ``varAnd``.
    """
    length = chroms.shape[1]
    if pairs.size == 0 or length < 2:
        return
    c1 = rng.integers(1, length + 1, size=pairs.size)
    c2 = rng.integers(1, length, size=pairs.size)
    c2 = np.where(c2 >= c1, c2 + 1, c2)
    lo, hi = np.minimum(c1, c2), np.maximum(c1, c2)
    cols = np.arange(length)
    seg = (cols >= lo[:, None]) & (cols < hi[:, None])
    a, b = chroms[2 * pairs], chroms[2 * pairs + 1]
    chroms[2 * pairs] = np.where(seg, b, a)
    chroms[2 * pairs + 1] = np.where(seg, a, b)


def array_mutation(
    rng: np.random.Generator,
    chroms: np.ndarray,
    rows: np.ndarray,
    stage_len: int,
    flip_rate: float,
    shift_rate: float,
) -> None:
    """Mutate the listed ``rows`` of ``chroms`` [n, len] in place: flips, then shifts.

    Flip count per row ~ Binomial(len, flip_rate/len), positions uniform; shift count ~
    Binomial(S*(stage_len-1), shift_rate/len), pairs uniform within stages.
    """
    length = chroms.shape[1]
    if rows.size == 0 or length == 0:
        return
    nflip = rng.binomial(length, min(1.0, flip_rate / length), size=rows.size)
    r = np.repeat(rows, nflip)
    c = rng.integers(0, length, size=r.size)
    np.bitwise_xor.at(chroms, (r, c), 1)
    if stage_len < 2:
        return
    S = length // stage_len
    npairs = S * (stage_len - 1)
    nshift = rng.binomial(npairs, min(1.0, shift_rate / length), size=rows.size)
    r = np.repeat(rows, nshift)
    k = rng.integers(0, npairs, size=r.size)
    i = (k // (stage_len - 1)) * stage_len + k % (stage_len - 1)
    if r.size > 1:
        # Swaps touching the same bit would not compose as sequential swaps: keep the first.
        order = np.lexsort((i, r))
        r, i = r[order], i[order]
        clash = np.zeros(r.size, dtype=bool)
        clash[1:] = (r[1:] == r[:-1]) & (i[1:] <= i[:-1] + 1)
        r, i = r[~clash], i[~clash]
    left, right = chroms[r, i], chroms[r, i + 1]
    chroms[r, i] = right
    chroms[r, i + 1] = left
