"""Fitting a link model ``time = latency + bytes / bandwidth`` (MODEL.md §1); numpy only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["fit_link"]


def fit_link(nbytes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares fit of one-way transfer times to ``latency + bytes / bandwidth``.

    Returns ``(latency_s, bandwidth_bytes_per_s)``. Ordinary least squares on the two
    coefficients; if the intercept comes out negative (it can, when the small messages are
    noisier than the large ones), the fit is redone through the origin with latency 0, since a
    negative latency would make small transfers cost less than nothing.
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
    A = np.stack([np.ones_like(x), x], axis=1)
    (lat, per_byte), *_ = np.linalg.lstsq(A, y, rcond=None)
    if lat < 0:
        lat, per_byte = 0.0, float(x @ y / (x @ x))
    if per_byte <= 0:
        raise ValueError(
            "fit_link: transfer time does not grow with size (slope "
            f"{per_byte:.3g} s/byte); measure larger messages"
        )
    return float(lat), float(1.0 / per_byte)
