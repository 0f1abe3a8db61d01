"""Number options of the command line: parsed and range-checked by argparse itself, so a bad
value is argparse's usage line and exit code 2, before any work starts.

``whole(lo, hi)`` accepts decimal integers in ``[lo, hi]`` (no ``1.5``, ``1e3``, ``0x10``);
``seconds(...)`` accepts finite numbers of seconds above (or at) a bound (no ``nan``, ``inf``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["MAX_COUNT", "MAX_JOBS", "seconds", "whole"]

#: Upper bounds that keep a count representable by every library it reaches (process pools
#: take a C int; a bound a user can reach by a typo must not be a traceback).
MAX_COUNT = 10**9
MAX_JOBS = 4096


def whole(lo: int, hi: int = MAX_COUNT) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``[lo, hi]``."""

    def parse(text: str) -> int:
        t = text.strip()
        if not t.lstrip("+-").isdigit():
            raise argparse.ArgumentTypeError(f"expected an integer in [{lo}, {hi}], got {text!r}")
        v = int(t)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer in [{lo}, {hi}], got {v}")
        return v

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


def seconds(lo: float = 0.0, *, open_low: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite number of seconds ``>= lo`` (``> lo`` if ``open_low``)."""
    rel = ">" if open_low else ">="

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or v < lo or (open_low and v == lo):
            raise argparse.ArgumentTypeError(f"expected a finite number of seconds {rel} {lo:g}, "
                                             f"got {text!r}")
        return v

    parse.__name__ = "seconds"
    return parse
