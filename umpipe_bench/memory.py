"""Per-stage memory under any schedule, device caps and the ``--memory-cap`` size syntax
(docs/SCHEDULES.md §4).

A stage's peak memory is its static bytes (parameters, gradients, optimizer state:
``param_bytes``) plus what its in-flight samples hold while its op list runs:

* ``stash``: every forwarded, not yet backwarded sample keeps its saved activations
  (``saved_act_bytes_per_sample``);
* ``recompute``: every in-flight sample keeps only its stage input
  (``input_bytes_per_sample``), and while a forward or a backward (which recomputes) runs, its
  microbatch's activations exist too (``saved_act_bytes_per_sample`` times its size).

One walk serves both modes: per in-flight sample ``a`` bytes, per sample of the running op
``w`` bytes (stash: ``a`` = saved, ``w`` = 0; recompute: ``a`` = input, ``w`` = saved). The
numba family evaluator performs the same operations in the same order, so its peaks are
bit-identical to :func:`peak_memory`.

This module imports no torch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import MemoryCapError
from .plan import PlanError
from .problem import Problem

__all__ = [
    "MemoryCapError",
    "MemoryFigures",
    "capacities",
    "format_bytes",
    "memory_figures",
    "parse_size",
    "peak_memory",
]

_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:[eE][+]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | float | int, what: str = "--memory-cap") -> float:
    """``"24GiB"``, ``"512 MiB"``, ``"1.5e9"``, ``"2GB"`` -> bytes (a positive number)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _SIZE_RE.match(str(text))
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS:
            raise PlanError(f"{what} {text!r}: expected bytes or a size such as 512MiB, 24GiB, "
                            "2GB (units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)")
        value = float(m.group(1)) * _UNITS[unit]
    if not value > 0 or value == float("inf"):
        raise PlanError(f"{what} {text!r}: must be a positive finite size")
    return value


def format_bytes(n: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 (``1.50 GiB``)."""
    for unit, k in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= k:
            return f"{n / k:.2f} {unit}"
    return f"{n:.0f} B"


@dataclass(frozen=True)
class MemoryFigures:
    """Per-stage ``static`` bytes, bytes ``per_inflight`` sample and ``per_op`` sample."""

    static: tuple[float, ...]
    per_inflight: tuple[float, ...]
    per_op: tuple[float, ...]


def memory_figures(problem: Problem, mode: str) -> MemoryFigures | None:
    """The problem's memory figures for ``mode``; None when any stage lacks them."""
    mems = [st.memory for st in problem.stages]
    if any(m is None for m in mems):
        return None
    static = tuple(float(m.param_bytes) for m in mems)  # type: ignore[union-attr]
    saved = tuple(float(m.saved_act_bytes_per_sample) for m in mems)  # type: ignore[union-attr]
    if mode == "stash":
        return MemoryFigures(static, saved, (0.0,) * len(mems))
    inp = tuple(float(m.input_bytes_per_sample) for m in mems)  # type: ignore[union-attr]
    return MemoryFigures(static, inp, saved)


def peak_memory(figures: MemoryFigures, ops: Sequence[Sequence[object]]) -> list[float]:
    """Peak bytes per stage, walking each stage's op list (objects with ``kind`` and ``size``)."""
    peaks = []
    for s, row in enumerate(ops):
        a, w = figures.per_inflight[s], figures.per_op[s]
        live = peak = 0.0
        for op in row:
            m = op.size  # type: ignore[attr-defined]
            if op.kind == "F":  # type: ignore[attr-defined]
                live += a * m
                peak = max(peak, live + w * m)
            else:
                peak = max(peak, live + w * m)
                live -= a * m
        peaks.append(figures.static[s] + peak)
    return peaks


def capacities(problem: Problem, override: float | None = None) -> list[float] | None:
    """Per-stage caps: ``override`` (``--memory-cap``) for every stage, else each stage's
    ``memory.capacity_bytes``, else the problem's ``device_capacity``; None: no cap at all."""
    if override is not None:
        return [float(override)] * problem.S
    caps: list[float | None] = [
        st.memory.capacity_bytes if st.memory is not None else None for st in problem.stages
    ]
    if all(c is None for c in caps) and problem.device_capacity is None:
        return None
    inf = float("inf")
    dev = problem.device_capacity
    return [float(c) if c is not None else (float(dev) if dev is not None else inf)
            for c in caps]


def check_fits(peaks: Sequence[float], caps: Sequence[float] | None, what: str) -> None:
    """Raise :class:`MemoryCapError` naming the first stage whose peak exceeds its cap."""
    if caps is None:
        return
    for s, (p, c) in enumerate(zip(peaks, caps)):
        if p > c:
            raise MemoryCapError(
                f"{what} does not fit: stage {s} needs {format_bytes(p)} ({p:.0f} bytes) "
                f"but its memory cap is {format_bytes(c)} ({c:.0f} bytes)")
