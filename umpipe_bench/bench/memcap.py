"""Memory caps in benchmark matrices (docs/SCHEDULES.md §4).

A matrix lists ``memory_caps``; each cell runs its problem under one of them:

* ``"none"``: the problem as registered (its own stage/device capacities, if any);
* ``"50%"``: per stage, the static bytes (parameters, gradients, optimizer state) plus that
  share of the activation bytes the problem's best GPipe-EDP plan keeps there in stash mode
  (it keeps every sample's): "what if the devices had room for half the activations GPipe
  needs". A share of the whole peak would be meaningless on problems whose static bytes
  dominate (the CPU profiles: their largest stage's parameters alone exceed half its peak);
* a size (``"24GiB"``, ``"512MiB"``, ``"2e9"``): that many bytes on every stage.

On ``D`` devices (chunk plans and torch's schedules, :func:`device_memory_cap`) a share is one
capacity for every device: the largest, over the devices, of the device's static bytes plus that
share of the activation bytes torch's GPipe schedule keeps there at its best ``M`` and layer
partition (one chunk per device, stash mode, uncapped). That GPipe choice does not fit under a
share below 100 % (its fullest device needs all its activations).
"""

from __future__ import annotations

import re

import numpy as np

from ..memory import parse_size
from ..plan import PlanError
from ..problem import Problem

__all__ = ["NO_CAP", "apply_memory_cap", "check_memory_cap", "device_memory_cap",
           "gpipe_device_peaks", "gpipe_stash_peaks"]

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


def gpipe_device_peaks(problem: Problem, D: int) -> tuple[np.ndarray, np.ndarray]:
    """``(static, peak)`` bytes per device of torch's GPipe schedule at its best ``M`` and
    layer partition on ``D`` devices (stash mode, uncapped; :mod:`..torch_schedules.best`)."""
    from ..torch_schedules.best import schedule_table

    if any(st.memory is None for st in problem.stages):
        problem.with_memory_cap(1.0)  # raises the message naming the stage
    choice = schedule_table(problem, D, "stash", names=["gpipe"])[0].choice
    if choice is None or choice.peak_memory is None:
        raise ValueError(f"memory cap: torch's GPipe schedule has no plan for {problem.name} "
                         f"on {D} devices, so a share of its memory is undefined")
    params = [st.memory.param_bytes for st in problem.stages]  # type: ignore[union-attr]
    edges = np.cumsum((0, *choice.counts))
    static = np.array([sum(params[edges[d]:edges[d + 1]]) for d in range(D)], dtype=float)
    return static, np.array(choice.peak_memory, dtype=float)


def device_memory_cap(problem: Problem, D: int, spec: str | None) -> float | None:
    """One capacity in bytes for every one of ``D`` devices (module docstring): None for no
    cap (``None`` or ``"none"``), a share of torch's GPipe schedule (``"50%"``), or a size.
    ValueError on a bad entry."""
    if spec is None:
        return None
    spec = check_memory_cap(spec)
    if spec == NO_CAP:
        return None
    m = _PCT.match(spec)
    if not m:
        return parse_size(spec, "memory cap")
    static, peak = gpipe_device_peaks(problem, D)
    return float(np.max(static + float(m.group(1)) / 100.0 * (peak - static)))
