"""Compiled (numba) Bernoulli bit rows for random plans (docs/MODEL.md §2).

Random search draws ``S * (B-1)`` cut bits per chromosome, each set with the chromosome's own
probability. One float per bit (numpy's ``Generator.random``) costs more than evaluating the
plan it makes; here one 64-bit draw of SplitMix64 (Steele, Lea and Flood, "Fast splittable
pseudorandom number generators", OOPSLA 2014) yields two bits, each the comparison of a 32-bit
half with the row's threshold ``round(p * 2**32)``, so ``p`` is honoured to ``2**-32``. The
generator's state is seeded from the caller's numpy ``Generator``: draws are reproducible from
the planner's seed.

Importing this module imports numba; :mod:`.encoding` does so lazily.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["bernoulli_rows"]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LOW32 = np.uint64(0xFFFFFFFF)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S32 = np.uint64(32)


@njit(cache=True, inline="always")
def _next(state):  # pragma: no cover - compiled
    """SplitMix64: the next state and its 64-bit output."""
    state += _GAMMA
    z = state
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return state, z ^ (z >> _S31)


@njit(cache=True, nogil=True)
def bernoulli_rows(seed, thresholds, out):  # pragma: no cover - compiled
    """Fill ``out`` [n, W] uint8 with bits, row ``i`` set with probability
    ``thresholds[i] / 2**32`` (``thresholds`` uint64 in ``0..2**32``), from SplitMix64
    started at ``seed`` (uint64). Two bits per draw, no branch in the main loop."""
    n, W = out.shape
    state = seed
    for i in range(n):
        t = thresholds[i]
        j = 0
        while j + 2 <= W:
            state, z = _next(state)
            out[i, j] = (z & _LOW32) < t
            out[i, j + 1] = (z >> _S32) < t
            j += 2
        if j < W:
            state, z = _next(state)
            out[i, j] = (z & _LOW32) < t
