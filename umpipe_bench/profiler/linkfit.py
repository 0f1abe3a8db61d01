"""Fitting a link model ``time = latency + bytes / bandwidth`` (docs/MODEL.md §1); numpy only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["fit_link", "message_grid"]


def fit_link(nbytes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares fit of one-way transfer times to ``latency + bytes / bandwidth``.

    Returns ``(latency_s, bandwidth_bytes_per_s)``. Least squares on the two coefficients of
    the *relative* errors ``(predicted - measured) / measured`` (weights ``1 / measured``), so
    that a 4 KiB message counts as much as a 16 MiB one; plain least squares would let the
    largest message alone decide the fit and leave the latency to chance. If the intercept
    comes out negative, the fit is redone through the origin with latency 0, since a negative
    latency would make small transfers cost less than nothing.
    """
    x = np.asarray(nbytes, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(
            f"fit_link: nbytes and seconds must be equal-length lists, got {x.shape}, {y.shape}"
        )
    if len(x) < 2 or len(np.unique(x)) < 2:
        raise ValueError("fit_link: need transfers of at least two different sizes")
    if not (np.all(np.isfinite(y)) and np.all(y > 0)):
        raise ValueError(f"fit_link: transfer times must be positive and finite, got {y.tolist()}")
    A = np.stack([np.ones_like(x), x], axis=1) / y[:, None]
    (lat, per_byte), *_ = np.linalg.lstsq(A, np.ones_like(y), rcond=None)
    if lat < 0:
        r = x / y
        lat, per_byte = 0.0, float(r.sum() / (r @ r))
    if per_byte <= 0:
        raise ValueError(
            "fit_link: transfer time does not grow with size (slope "
            f"{per_byte:.3g} s/byte); measure larger messages"
        )
    return float(lat), float(1.0 / per_byte)


def message_grid(
    lo: float,
    hi: float,
    n: int = 6,
    floor: int = 4 << 10,
    cap: int = 64 << 20,
    min_top: int = 4 << 20,
) -> tuple[int, ...]:
    """``n`` message sizes, geometric from ``lo`` to ``hi`` bytes (clamped to ``floor..cap``,
    rounded to multiples of 4 bytes): the calibration covers the transfers the problem will
    actually make, from one sample of the smallest boundary to B samples of the largest,
    because a straight line is only trusted over the range it was fitted on. The largest
    message is at least ``min_top`` bytes: below that, times are all latency and noise, and
    the bandwidth cannot be told apart from zero."""
    if n < 2:
        raise ValueError(f"message_grid: need n >= 2 sizes, got {n}")
    a = min(max(float(lo), floor), cap)
    b = min(max(float(hi), a * 4, min_top), cap)
    if b <= a:
        a = b / 4
    sizes = np.geomspace(a, b, n)
    return tuple(sorted({max(4, 4 * round(float(v) / 4)) for v in sizes}))
