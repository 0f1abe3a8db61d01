"""Memory caps in benchmark matrices (docs/SCHEDULES.md §4).

A matrix lists ``memory_caps``; each cell runs its problem under one of them:

* ``"none"``: the problem as registered (its own stage/device capacities, if any);
* ``"50%"``: per stage, the static bytes (parameters, gradients, optimizer state) plus that
  share of the activation bytes the problem's best GPipe-EDP plan keeps there in stash mode
  (it keeps every sample's): "what if the devices had room for half the activations GPipe
  needs". A share of the whole peak would be meaningless on problems whose static bytes
  dominate (the CPU profiles: their largest stage's parameters alone exceed half its peak);
* a size (``"24GiB"``, ``"512MiB"``, ``"2e9"``): that many bytes on every stage.
"""

from __future__ import annotations

import re

import numpy as np

from ..memory import parse_size
from ..plan import PlanError
from ..problem import Problem

__all__ = ["NO_CAP", "apply_memory_cap", "check_memory_cap", "gpipe_stash_peaks"]

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


def gpipe_stash_peaks(problem: Problem) -> np.ndarray:
    """Per-stage peak bytes of the best GPipe-EDP plan in stash mode, uncapped."""
    from ..planners.evaluation.reference import best_edp, edp_scan

    M, _ = best_edp(problem, "stash", "gpipe", float("inf"))
    return np.array(edp_scan(problem, "stash", "gpipe", float("inf")).peaks[M - 1])


def apply_memory_cap(problem: Problem, spec: str) -> tuple[Problem, list[float] | None]:
    """``(problem under the cap, per-stage caps in bytes)``; ``(problem, None)`` for
    ``"none"``."""
    spec = check_memory_cap(spec)
    if spec == NO_CAP:
        return problem, None
    m = _PCT.match(spec)
    if m:
        if any(st.memory is None for st in problem.stages):
            problem.with_memory_cap(1.0)  # raises the message naming the stage
        static = np.array([st.memory.param_bytes for st in problem.stages])  # type: ignore
        caps = list(static + float(m.group(1)) / 100.0 * (gpipe_stash_peaks(problem) - static))
    else:
        caps = [parse_size(spec, "memory cap")] * problem.S
    return problem.with_memory_cap(caps), caps
