"""Memory caps in benchmark matrices (docs/SCHEDULES.md §4).

A matrix lists ``memory_caps``; each cell runs its problem under one of them:

* ``"none"``: the problem as registered (its own stage/device capacities, if any);
* ``"50%"``: that share of the problem's best GPipe-EDP stash peak (the largest stage's peak
  of the fastest EDP(M) under gpipe in stash mode, which keeps every sample's activations):
  the "what if the device had half the memory GPipe needs" question;
* a size (``"24GiB"``, ``"512MiB"``, ``"2e9"``): that many bytes on every stage.
"""

from __future__ import annotations

import re

from ..memory import parse_size
from ..plan import PlanError
from ..problem import Problem

__all__ = ["NO_CAP", "apply_memory_cap", "check_memory_cap", "gpipe_stash_peak"]

NO_CAP = "none"
_PCT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$")


def check_memory_cap(spec: str) -> str:
    """Validate a matrix's memory-cap entry; returns it normalized (ValueError when bad)."""
    text = str(spec).strip()
    if text.lower() == NO_CAP:
        return NO_CAP
    m = _PCT.match(text)
    if m:
        if not 0 < float(m.group(1)):
            raise ValueError(f"memory cap {spec!r}: a share must be above 0 %")
        return f"{float(m.group(1)):g}%"
    try:
        parse_size(text, "memory cap")
    except PlanError as exc:
        raise ValueError(f"{exc}; or 'none', or a share of the GPipe-EDP stash peak such as "
                         "'50%'") from None
    return text


def gpipe_stash_peak(problem: Problem) -> float:
    """The largest stage peak of the best GPipe-EDP plan in stash mode, uncapped (bytes)."""
    from ..planners.reference import best_edp, edp_scan

    M, _ = best_edp(problem, "stash", "gpipe", float("inf"))
    return float(edp_scan(problem, "stash", "gpipe", float("inf")).peaks[M - 1].max())


def apply_memory_cap(problem: Problem, spec: str) -> tuple[Problem, float | None]:
    """``(problem under the cap, cap in bytes)``; ``(problem, None)`` for ``"none"``."""
    spec = check_memory_cap(spec)
    if spec == NO_CAP:
        return problem, None
    m = _PCT.match(spec)
    cap = (float(m.group(1)) / 100.0 * gpipe_stash_peak(problem) if m
           else parse_size(spec, "memory cap"))
    return problem.with_memory_cap(cap), cap
