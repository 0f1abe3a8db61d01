"""Random plans' cut bits (umpipe_bench/planners/evaluation/encoding.random_bits and its compiled
generator): shapes, reproducibility, and the per-row probability, known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from umpipe_bench.planners.evaluation._random_kernels import bernoulli_rows
from umpipe_bench.planners.evaluation.encoding import random_bits


@pytest.mark.parametrize("W", [1, 2, 7, 64, 1023])
def test_threshold_zero_and_full_give_constant_rows(W: int) -> None:
    out = np.full((2, W), 7, dtype=np.uint8)
    bernoulli_rows(np.uint64(12345), np.array([0, 2**32], dtype=np.uint64), out)
    assert not out[0].any() and out[1].all()  # every position written, odd widths included


def test_row_frequencies_match_their_probabilities() -> None:
    p = np.array([0.01, 0.1, 0.25, 0.5, 0.9])
    W = 200_000
    out = np.empty((len(p), W), dtype=np.uint8)
    bernoulli_rows(np.uint64(7), np.rint(p * 2.0**32).astype(np.uint64), out)
    freq = out.mean(axis=1)
    sigma = np.sqrt(p * (1 - p) / W)
    assert np.all(np.abs(freq - p) < 5 * sigma)
    # both 32-bit halves of a draw carry bits with the row's probability
    assert np.all(np.abs(out[:, 0::2].mean(axis=1) - p) < 5 * sigma * np.sqrt(2))
    assert np.all(np.abs(out[:, 1::2].mean(axis=1) - p) < 5 * sigma * np.sqrt(2))


def test_neighbouring_bits_are_uncorrelated() -> None:
    out = np.empty((1, 400_000), dtype=np.uint8)
    bernoulli_rows(np.uint64(3), np.array([2**31], dtype=np.uint64), out)
    x = out[0].astype(np.float64) - 0.5
    for lag in (1, 2, 3):
        r = float(np.mean(x[:-lag] * x[lag:]) / 0.25)
        assert abs(r) < 5 / np.sqrt(len(x))


def test_random_bits_shape_reproducible_and_density_follows_the_drawn_count() -> None:
    a = random_bits(np.random.default_rng(5), 3000, 4, 33)
    b = random_bits(np.random.default_rng(5), 3000, 4, 33)
    assert a.shape == (3000, 4, 32) and a.dtype == np.uint8
    assert np.array_equal(a, b)
    assert not np.array_equal(a, random_bits(np.random.default_rng(6), 3000, 4, 33))
    # each chromosome draws M log-uniformly in [1, B] and sets bits with (M-1)/(B-1):
    # the mean density over chromosomes is E[(M-1)/(B-1)] = ((B-1)/ln B - 1)/(B-1)
    B = 33
    expected = ((B - 1) / np.log(B) - 1) / (B - 1)
    per_chromosome = a.reshape(3000, -1).mean(axis=1)
    assert abs(per_chromosome.mean() - expected) < 5 * per_chromosome.std() / np.sqrt(3000)


def test_random_bits_degenerate_sizes() -> None:
    rng = np.random.default_rng(0)
    assert random_bits(rng, 0, 3, 8).shape == (0, 3, 7)
    assert random_bits(rng, 4, 3, 1).shape == (4, 3, 0)
