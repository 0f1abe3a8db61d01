"""Schedules: a plan -> per-stage ordered operation lists (docs/SCHEDULES.md).

The same lists drive the simulator and the runtime. Operations are written as torch's
``torch.distributed.pipelining`` actions: ``"2F0"`` is stage 2's forward of microbatch 0,
``"1B3"`` stage 1's backward of microbatch 3 (0-based microbatch numbers within the stage and
direction).

Every schedule here is one rule, :func:`capped_order`, with per-stage in-flight caps:

* ``capped``: the plan's own caps ``K[s]`` in samples (any ``P``, ``Q``, ``K``, mode);
* ``gpipe``: no cap (``K[s] = B``): all forwards, then all backwards;
* ``1f1b``: torch's ``Schedule1F1B`` for EDP plans, caps counted in microbatches,
  ``S - s`` for stage ``s``.

This module imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from .plan import Plan, PlanError

__all__ = [
    "SCHEDULES",
    "Op",
    "build_schedule",
    "capped",
    "capped_order",
    "capped_order_escapes",
    "format_schedule",
    "gpipe",
    "near_backward",
    "one_f_one_b",
    "one_f_one_b_caps",
    "schedule_of",
]


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


def near_backward(row: list[Op], i: int) -> bool:
    """Whether backward ``row[i]`` of a stage's operation list is *near* (docs/MODEL.md §1b):
    the operation just before it is the forward of the same samples. Every other stash
    backward is *far* and costs ``bwd * bwd_far``."""
    if i == 0:
        return False
    prev, op = row[i - 1], row[i]
    return prev.kind == "F" and prev.start == op.start and prev.stop == op.stop


def _ops(kind: str, stage: int, sizes: tuple[int, ...]) -> list[Op]:
    ends = list(accumulate(sizes))
    starts = [0, *ends[:-1]]
    return [Op(kind, stage, j, a, b) for j, (a, b) in enumerate(zip(starts, ends))]


def capped_order(plan: Plan, caps: Sequence[int], unit: str = "samples") -> list[list[Op]]:
    """Per-stage op lists of the family's rule (see :func:`capped_order_escapes`)."""
    return capped_order_escapes(plan, caps, unit)[0]


def capped_order_escapes(plan: Plan, caps: Sequence[int], unit: str = "samples"
                         ) -> tuple[list[list[Op]], list[int]]:
    """The schedule family's rule (docs/SCHEDULES.md §2): per-stage op lists under caps.

    Each stage's next operation is decided by its own state only: it *wants* its next forward
    while forwards remain and either taking it keeps its in-flight load within ``caps[s]``
    (samples forwarded but not yet backwarded, plus the forward's size; with
    ``unit="microbatches"``, microbatches forwarded but not yet backwarded, plus one) or its
    next backward needs samples it has not forwarded yet; otherwise its next backward.
    A wanted operation is *ordered* once its inputs are ordered: a forward after the upstream
    forward carrying its last sample; a backward after this stage's forward of its last sample
    and the downstream backward carrying it. When every stage is blocked, the most downstream
    stage that waits for a forward input takes its next backward if that is ready (no cap is
    exceeded); only when there is none does the most upstream stage whose forward input is
    there take that forward past its cap. One of the two always exists (docs/SCHEDULES.md §3),
    so every plan and every cap gets a deadlock-free order, and caps are exceeded only when no
    backward can run anywhere. The per-stage lists do not depend on the order in which stages
    are visited.
    Returns the lists and the stage of every forward taken past its cap, in order.
    """
    S = plan.S
    if unit not in ("samples", "microbatches"):
        raise ValueError(f"cap unit must be 'samples' or 'microbatches', got {unit!r}")
    if len(caps) != S:
        raise PlanError(f"{len(caps)} caps for a plan of S = {S} stages")
    fw = [_ops("F", s, plan.fwd[s]) for s in range(S)]
    bw = [_ops("B", s, plan.bwd[s]) for s in range(S)]
    nf = [0] * S  # forwards ordered so far
    nb = [0] * S  # backwards ordered so far
    done_f = [0] * S  # samples forwarded (end of the last ordered forward)
    done_b = [0] * S  # samples backwarded
    out: list[list[Op]] = [[] for _ in range(S)]
    remaining = sum(len(fw[s]) + len(bw[s]) for s in range(S))
    escapes: list[int] = []

    def forward_ready(s: int) -> bool:
        return s == 0 or done_f[s - 1] >= fw[s][nf[s]].stop

    def wants_forward(s: int) -> bool:
        if nf[s] == len(fw[s]):
            return False
        if done_f[s] < bw[s][nb[s]].stop:  # its next backward needs this forward anyway
            return True
        if unit == "microbatches":
            return nf[s] - nb[s] + 1 <= caps[s]
        return done_f[s] - done_b[s] + fw[s][nf[s]].size <= caps[s]

    def backward_ready(s: int) -> bool:
        last = bw[s][nb[s]].stop
        return done_f[s] >= last and (s == S - 1 or done_b[s + 1] >= last)

    def take(s: int, forward: bool) -> None:
        if forward:
            op = fw[s][nf[s]]
            nf[s] += 1
            done_f[s] = op.stop
        else:
            op = bw[s][nb[s]]
            nb[s] += 1
            done_b[s] = op.stop
        out[s].append(op)

    def _escape() -> None:
        nonlocal remaining
        for s in range(S):  # the most upstream forward whose input is there, past its cap
            if nf[s] < len(fw[s]) and forward_ready(s):
                take(s, True)
                escapes.append(s)
                remaining -= 1
                return
        raise RuntimeError("capped_order: no stage can move (a bug)")  # pragma: no cover

    while remaining:
        moved = False
        for s in range(S):
            while nf[s] + nb[s] < len(fw[s]) + len(bw[s]):
                if wants_forward(s):
                    if not forward_ready(s):
                        break
                    take(s, True)
                elif backward_ready(s):
                    take(s, False)
                else:
                    break
                remaining -= 1
                moved = True
        if moved:
            continue
        # Every stage is blocked. First, the most downstream stage waiting for a forward input
        # takes its next backward if that is ready (no cap is exceeded); only when there is
        # none does the most upstream stage whose forward input is there run past its cap.
        for s in reversed(range(S)):
            if wants_forward(s) and nb[s] < len(bw[s]) and backward_ready(s):
                take(s, False)
                remaining -= 1
                break
        else:
            _escape()
    return out, escapes


def gpipe(plan: Plan) -> list[list[Op]]:
    """GPipe (flush): stage ``s`` runs ``F(0..K_s-1)`` then ``B(0..L_s-1)``; any plan.

    The family's rule with no cap (``K[s] = B``). A plan that carries caps below ``B`` is
    refused: its schedule is ``capped``.
    """
    if plan.caps is not None and min(plan.caps) < plan.B:
        raise PlanError(f"plan has in-flight caps {list(plan.caps)} below B = {plan.B}; its "
                        "schedule is 'capped', not 'gpipe'")
    return capped_order(plan, (plan.B,) * plan.S)


def one_f_one_b_caps(S: int) -> tuple[int, ...]:
    """torch's ``Schedule1F1B`` as microbatch-count caps: stage ``s`` holds ``S - s``."""
    return tuple(S - s for s in range(S))


def one_f_one_b(plan: Plan) -> list[list[Op]]:
    """1F1B (PipeDream-flush, as torch's ``Schedule1F1B``) for EDP(M) plans.

    Stage ``s`` runs ``min(S-s, M)`` warm-up forwards, then alternates one backward and one
    forward, then the remaining backwards (docs/SCHEDULES.md §1): the family's rule with caps
    of ``S - s`` microbatches. For ``M`` dividing ``B`` it equals ``capped`` with
    ``K[s] = (S - s) * B / M`` samples. Unequal partitions are refused (use ``capped``).
    """
    if not plan.is_edp():
        raise PlanError(
            "schedule '1f1b' needs an EDP plan (every stage the same balanced split in both "
            "directions); use 'capped' (in-flight caps) or 'gpipe' for unequal partitions"
        )
    return capped_order(plan, one_f_one_b_caps(plan.S), unit="microbatches")


def capped(plan: Plan) -> list[list[Op]]:
    """The schedule family: the plan's own in-flight caps (none: ``gpipe``'s lists)."""
    return capped_order(plan, plan.effective_caps())


SCHEDULES: dict[str, Callable[[Plan], list[list[Op]]]] = {
    "gpipe": gpipe, "1f1b": one_f_one_b, "capped": capped,
}


def schedule_of(plan: Plan) -> str:
    """The schedule a plan file means: its ``meta['schedule']``, else ``capped`` when it has
    caps, else ``gpipe``."""
    name = plan.meta.get("schedule")
    if name:
        return str(name)
    return "gpipe" if plan.caps is None else "capped"


def build_schedule(name: str, plan: Plan) -> list[list[Op]]:
    """Look a schedule up by name (case-insensitive) and build its operation lists."""
    key = name.lower()
    if key not in SCHEDULES:
        raise KeyError(f"unknown schedule {name!r}; valid schedules: {', '.join(SCHEDULES)}")
    return SCHEDULES[key](plan)


def format_schedule(ops: list[list[Op]]) -> str:
    """One line per stage in torch's action style, e.g. ``stage 0: 0F0 0F1 0B0 0B1``."""
    return "\n".join(f"stage {s}: " + " ".join(str(o) for o in row) for s, row in enumerate(ops))
