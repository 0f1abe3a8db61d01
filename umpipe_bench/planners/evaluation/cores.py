"""How many cores this process may use: the bound of every ``auto`` thread and search count."""

from __future__ import annotations

import os

__all__ = ["usable_cores"]


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. under ``taskset``; else the
    machine's count): what every ``auto`` thread count is bounded by."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
