"""Statistics of measured runs: paired speedups with bootstrap intervals, rank agreement.

``execute`` times plans alternately, one round after another (docs/MODEL.md §5), so the
machine's drift hits every plan of a round alike: the per-round ratio ``base[i] / other[i]`` is
the unit of evidence, and the speedup is their median. Its 95 % interval comes from a
percentile bootstrap over rounds (resample the rounds with replacement, take the median of each
resample). A planner is only as good as the ordering its model gives, so predicted and measured
times of many plans are compared by their rank correlation (Spearman's rho) and their relative
errors. Pure: numpy and pandas, no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "Interval",
    "bootstrap_median",
    "paired_ratios",
    "prediction_quality",
    "spearman",
]


@dataclass(frozen=True)
class Interval:
    """A median with its bootstrap interval (``level``, e.g. 0.95) over ``n`` values."""

    median: float
    low: float
    high: float
    level: float
    n: int
    resamples: int

    def above(self, x: float = 1.0) -> bool:
        """True when the whole interval lies above ``x`` (e.g. a speedup above 1.0)."""
        return self.low > x

    def __str__(self) -> str:
        return (f"{self.median:.3f} [{self.low:.3f}, {self.high:.3f}] "
                f"({self.level:.0%} bootstrap, {self.n} rounds)")


def paired_ratios(base: Sequence[float], other: Sequence[float]) -> np.ndarray:
    """``base[i] / other[i]`` per round: the speedup of ``other`` over ``base`` in round i."""
    a = np.asarray(base, dtype=float)
    b = np.asarray(other, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"paired_ratios needs two equal-length non-empty series, got "
                         f"{a.shape} and {b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and np.all(b > 0)):
        raise ValueError("paired_ratios needs finite times and positive divisors")
    return a / b


def bootstrap_median(values: Sequence[float], *, level: float = 0.95, resamples: int = 20000,
                     seed: int = 0) -> Interval:
    """Percentile bootstrap interval of the median of ``values`` (seeded: same input, same
    interval)."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
        raise ValueError("bootstrap_median needs a non-empty 1-D series of finite values")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, v.size, size=(resamples, v.size))
    meds = np.median(v[idx], axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(meds, [tail, 1.0 - tail])
    return Interval(float(np.median(v)), float(low), float(high), level, int(v.size), resamples)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("spearman needs two equal-length series of at least 2 values")
    return float(pd.Series(list(x), dtype=float).corr(pd.Series(list(y), dtype=float),
                                                      method="spearman"))


def prediction_quality(predicted: Sequence[float], measured: Sequence[float]) -> dict[str, float]:
    """Rank correlation and relative errors ``measured / predicted - 1`` over many plans:
    ``spearman``, ``median_abs_error``, ``worst_abs_error``, ``median_error`` (signed), ``n``."""
    p = np.asarray(predicted, dtype=float)
    m = np.asarray(measured, dtype=float)
    if p.shape != m.shape or p.ndim != 1 or p.size < 2 or np.any(p <= 0):
        raise ValueError("prediction_quality needs two equal-length series (>= 2 plans) with "
                         "positive predictions")
    err = m / p - 1.0
    return {
        "n": int(p.size),
        "spearman": spearman(p, m),
        "median_abs_error": float(np.median(np.abs(err))),
        "worst_abs_error": float(np.max(np.abs(err))),
        "median_error": float(np.median(err)),
    }
