"""Schedules: a plan -> per-stage ordered operation lists (MODEL.md §3).

The same lists drive the simulator and the runtime. Operations are written as torch's
``torch.distributed.pipelining`` actions: ``"2F0"`` is stage 2's forward of microbatch 0,
``"1B3"`` stage 1's backward of microbatch 3 (0-based microbatch numbers within the stage and
direction).

This module imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

from .plan import Plan, PlanError

__all__ = ["SCHEDULES", "Op", "build_schedule", "format_schedule", "gpipe", "one_f_one_b"]


@dataclass(frozen=True, slots=True)
class Op:
    """One compute operation: forward ("F") or backward ("B") of samples ``[start, stop)``."""

    kind: str
    stage: int
    index: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.index}"


def _ops(kind: str, stage: int, sizes: tuple[int, ...]) -> list[Op]:
    ends = list(accumulate(sizes))
    starts = [0, *ends[:-1]]
    return [Op(kind, stage, j, a, b) for j, (a, b) in enumerate(zip(starts, ends))]


def gpipe(plan: Plan) -> list[list[Op]]:
    """GPipe (flush): stage ``s`` runs ``F(0..K_s-1)`` then ``B(0..L_s-1)``; any plan."""
    return [
        _ops("F", s, plan.fwd[s]) + _ops("B", s, plan.bwd[s]) for s in range(plan.S)
    ]


def one_f_one_b(plan: Plan) -> list[list[Op]]:
    """1F1B (PipeDream-flush, as torch's ``Schedule1F1B``) for EDP(M) plans.

    Stage ``s`` runs ``w_s = min(S-1-s, M)`` warm-up forwards, then alternates one forward and
    one backward, then the remaining backwards (MODEL.md §3). Unequal partitions are refused:
    their 1F1B variant is not defined yet.
    """
    if not plan.is_edp():
        raise PlanError(
            "schedule '1f1b' needs an EDP plan (every stage the same balanced split in both "
            "directions); use 'gpipe' for unequal partitions"
        )
    S, M = plan.S, len(plan.fwd[0])
    out = []
    for s in range(S):
        fw = _ops("F", s, plan.fwd[s])
        bw = _ops("B", s, plan.bwd[s])
        w = min(S - 1 - s, M)
        ops = fw[:w]
        for i in range(M - w):
            ops += [fw[w + i], bw[i]]
        ops += bw[M - w:]
        out.append(ops)
    return out


SCHEDULES: dict[str, Callable[[Plan], list[list[Op]]]] = {"gpipe": gpipe, "1f1b": one_f_one_b}


def build_schedule(name: str, plan: Plan) -> list[list[Op]]:
    """Look a schedule up by name (case-insensitive) and build its operation lists."""
    key = name.lower()
    if key not in SCHEDULES:
        raise KeyError(f"unknown schedule {name!r}; valid schedules: {', '.join(SCHEDULES)}")
    return SCHEDULES[key](plan)


def format_schedule(ops: list[list[Op]]) -> str:
    """One line per stage in torch's action style, e.g. ``stage 0: 0F0 0F1 0B0 0B1``."""
    return "\n".join(f"stage {s}: " + " ".join(str(o) for o in row) for s, row in enumerate(ops))
