"""Measurement statistics (umpipe_bench/runtime/stats.py): answers known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from umpipe_bench.runtime.stats import (
    bootstrap_median,
    paired_ratios,
    prediction_quality,
    spearman,
)


def test_paired_ratios_are_per_round() -> None:
    assert paired_ratios([2.0, 3.0], [1.0, 2.0]).tolist() == [2.0, 1.5]
    with pytest.raises(ValueError, match="equal-length"):
        paired_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        paired_ratios([1.0], [0.0])


def test_bootstrap_of_a_constant_is_that_constant() -> None:
    iv = bootstrap_median([1.2] * 30)
    assert (iv.median, iv.low, iv.high) == (1.2, 1.2, 1.2)
    assert iv.above(1.0) and not iv.above(1.2)


def test_bootstrap_interval_brackets_the_median_and_is_seeded() -> None:
    rng = np.random.default_rng(5)
    v = 1.1 + 0.05 * rng.standard_normal(40)
    a, b = bootstrap_median(v, seed=3), bootstrap_median(v, seed=3)
    assert a == b
    assert a.low <= a.median <= a.high
    assert a.low >= v.min() and a.high <= v.max()
    # a wider level gives a wider (or equal) interval
    w = bootstrap_median(v, level=0.99, seed=3)
    assert w.low <= a.low and w.high >= a.high


def test_bootstrap_straddles_one_when_half_the_rounds_lose() -> None:
    iv = bootstrap_median([0.9, 1.1] * 20)
    assert iv.low < 1.0 < iv.high
    assert not iv.above(1.0)


def test_bootstrap_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        bootstrap_median([])
    with pytest.raises(ValueError):
        bootstrap_median([1.0, float("nan")])
    with pytest.raises(ValueError, match="level"):
        bootstrap_median([1.0], level=1.5)


def test_spearman_is_rank_based() -> None:
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert spearman(x, [v**3 for v in x]) == pytest.approx(1.0)
    assert spearman(x, [-v for v in x]) == pytest.approx(-1.0)
    assert spearman(x, [1.0, 3.0, 2.0, 4.0, 5.0]) == pytest.approx(0.9)


def test_prediction_quality_errors() -> None:
    q = prediction_quality([1.0, 2.0, 4.0], [1.1, 1.8, 4.0])
    assert q["n"] == 3
    assert q["spearman"] == pytest.approx(1.0)
    assert q["worst_abs_error"] == pytest.approx(0.1)
    assert q["median_abs_error"] == pytest.approx(0.1)
    assert q["median_error"] == pytest.approx(0.0)
