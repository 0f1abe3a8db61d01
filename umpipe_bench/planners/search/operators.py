"""Variation operators on cut-bit chromosomes, per individual (DGAP's DEAP toolbox).

One operator set (docs/MODEL.md §2 encoding; a chromosome is ``S*(B-1)`` bits, stage-major);
TiDGAP draws from the same distributions in one compiled call per generation
(:mod:`._variation`):

* selection: tournament of ``tournament`` aspirants drawn with replacement, lowest T wins
  (DEAP's ``selTournament``);
* crossover, per chromosome: two-point crossover on the flat chromosome, cut points
  ``1 <= c1 < c2 <= len`` (DEAP's ``cxTwoPoint``); a mated pair crosses each of its
  chromosomes independently, so forward and backward genes recombine separately;
* mutation, per chromosome: flip each bit with probability ``flip_rate/len`` (DEAP's
  ``mutFlipBit``: adds or removes a boundary), then swap each within-stage adjacent pair with
  probability ``shift_rate/len`` (moves a boundary by one sample when exactly one is a cut).

These use the ``random`` module, as DEAP's tools do.
"""

from __future__ import annotations

import math
import random

from deap import tools

__all__ = ["list_crossover", "list_mutation", "list_shift"]


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


def list_cap_crossover(k1: list[int], k2: list[int]) -> None:
    """Cap genes (docs/SCHEDULES.md): the pair swaps the caps of a random run of stages."""
    S = len(k1)
    if S == 0:
        return
    a, b = sorted((random.randrange(S), random.randrange(S)))
    k1[a:b + 1], k2[a:b + 1] = k2[a:b + 1], k1[a:b + 1]


def list_cap_mutation(caps: list[int], B: int, rate: float) -> None:
    """Each cap redrawn with probability ``rate / S``: 15 % uncapped (``B``), else near the old
    value (times or divided by up to 2) or log-uniform anywhere in ``1..B``, half each."""
    S = len(caps)
    for s in range(S):
        if random.random() < rate / S:
            u = random.random()
            if u < 0.15:
                caps[s] = B
                continue
            if u < 0.575:
                v = round(caps[s] * math.exp(random.uniform(-math.log(2), math.log(2))))
            else:
                v = int(math.exp(random.uniform(0.0, math.log(B + 1))))
            caps[s] = min(max(v, 1), B)
