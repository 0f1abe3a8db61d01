"""The reference simulator: operation lists + problem -> timeline (docs/MODEL.md §4).

Two implementations that must agree on every gpipe plan:

* :func:`simulate` is a list-schedule simulator over the operation lists of any schedule: each
  operation starts at ``max(its stage's previous operation end, its dependency's arrival)``;
  each link direction carries one transfer at a time in production order; compute and
  communication overlap. It returns a full :class:`Timeline` (every op and transfer, busy and
  bubble fractions, a peak-memory estimate).
* :func:`gpipe_recurrence` is docs/MODEL.md §4's nested loop for the gpipe schedule, written
  plainly: the reference every fast evaluator (TiDGAP) is tested against.

Both charge a stash backward ``bwd[s](m)`` when the stage's previous operation is the forward
of the same samples and ``bwd[s](m) * bwd_far[s]`` otherwise (docs/MODEL.md §1b).

This module imports no torch.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import asdict, dataclass, field
from itertools import accumulate
from typing import Any

from .errors import InputError
from .memory import capacities, memory_figures, peak_memory
from .plan import Plan
from .problem import Problem
from .schedules import Op, build_schedule, near_backward, schedule_of

__all__ = ["OpTiming", "SimulationError", "Timeline", "Transfer", "gpipe_recurrence", "simulate"]


#: operation lists that cannot run (a dependency is never produced: a deadlock)
SimulationError = InputError


@dataclass(frozen=True, slots=True)
class OpTiming:
    """A compute operation placed in time (``kind`` is "F", "B" or "O" for optimizer)."""

    stage: int
    kind: str
    index: int
    start: int
    stop: int
    t0: float
    t1: float

    @property
    def label(self) -> str:
        return f"{self.stage}{self.kind}{self.index}"


@dataclass(frozen=True, slots=True)
class Transfer:
    """A point-to-point transfer: ``act`` goes stage s -> s+1, ``grad`` goes s+1 -> s."""

    kind: str
    src: int
    dst: int
    index: int
    start: int
    stop: int
    t0: float
    t1: float


@dataclass
class Timeline:
    """The simulated iteration: every op and transfer, and per-stage summaries."""

    problem: str
    schedule: str
    mode: str
    iteration_time: float
    ops: list[OpTiming]
    transfers: list[Transfer]
    busy: list[float]
    bubble: list[float]
    peak_memory: list[float] | None = None
    stage_end: list[float] = field(default_factory=list)
    #: per-stage memory caps in bytes (``--memory-cap``, stage or device capacity); None: none
    capacity: list[float] | None = None
    #: per-stage in-flight caps the schedule used (samples; None for gpipe/1f1b)
    caps: list[int] | None = None

    @property
    def fits_memory(self) -> bool | None:
        """Whether every stage's peak stays within its cap (None: no figures or no cap)."""
        if self.peak_memory is None or self.capacity is None:
            return None
        return all(p <= c for p, c in zip(self.peak_memory, self.capacity))

    def to_dict(self, with_events: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "problem": self.problem,
            "schedule": self.schedule,
            "mode": self.mode,
            "iteration_time": self.iteration_time,
            "fits_memory": self.fits_memory,
            "caps": self.caps,
            "stages": [
                {
                    "stage": s,
                    "busy_time": self.busy[s],
                    "busy_fraction": self.busy[s] / self.iteration_time,
                    "bubble_fraction": self.bubble[s],
                    "end_time": self.stage_end[s],
                    "peak_memory_bytes": None if self.peak_memory is None else self.peak_memory[s],
                    "memory_cap_bytes": None if self.capacity is None else self.capacity[s],
                }
                for s in range(len(self.busy))
            ],
        }
        if with_events:
            out["ops"] = [asdict(o) for o in self.ops]
            # each stage's ops in execution order (ops are placed stage by stage in list order)
            out["stage_ops"] = [[o.label for o in self.ops if o.stage == s and o.kind != "O"]
                                for s in range(len(self.busy))]
            out["transfers"] = [asdict(t) for t in self.transfers]
        return out


def _prefix(sizes: tuple[int, ...]) -> list[int]:
    return list(accumulate(sizes))


def simulate(
    problem: Problem,
    plan: Plan,
    schedule: str | None = None,
    ops: list[list[Op]] | None = None,
    memory_cap: float | None = None,
) -> Timeline:
    """Simulate one iteration of ``plan`` on ``problem`` under ``schedule`` (docs/MODEL.md §4).

    ``schedule`` None: the plan's own (``capped`` when it carries in-flight caps, else
    ``gpipe``; docs/SCHEDULES.md). ``memory_cap`` (bytes, every stage) overrides the problem's
    stage/device capacities for :attr:`Timeline.fits_memory`.

    Dependencies: a forward of samples ``[a, b)`` on stage ``s > 0`` waits for the upstream
    transfer that carries sample ``b-1``; a backward waits for the downstream gradient transfer
    carrying sample ``b-1`` (stage ``S-1``: nothing from downstream) and for its own stage's
    forward of that sample. ``T = max_s (end of last op + opt[s])``.
    """
    plan.validate(problem)
    S, mode = problem.S, plan.mode
    tb = problem.tables()
    fwd_t, bwd_t, act_t, grad_t = tb.fwd, tb.backward(mode), tb.act, tb.grad
    far_t = tb.backward_far(mode)
    if schedule is None:
        schedule = schedule_of(plan)
    if ops is None:
        ops = build_schedule(schedule, plan)
    A = [_prefix(p) for p in plan.fwd]
    D = [_prefix(q) for q in plan.bwd]

    f_end: list[list[float | None]] = [[None] * len(plan.fwd[s]) for s in range(S)]
    x_end: list[list[float | None]] = [[None] * len(plan.fwd[s]) for s in range(S)]  # act s->s+1
    y_end: list[list[float | None]] = [[None] * len(plan.bwd[s]) for s in range(S)]  # grad s->s-1
    link_act_free = [0.0] * S
    link_grad_free = [0.0] * S
    stage_free = [0.0] * S
    pos = [0] * S
    placed: list[OpTiming] = []
    transfers: list[Transfer] = []
    busy = [0.0] * S
    remaining = sum(len(r) for r in ops)

    def ready_time(op: Op) -> float | None:
        s, last = op.stage, op.stop
        if op.kind == "F":
            if s == 0:
                return 0.0
            k = bisect_left(A[s - 1], last)
            return x_end[s - 1][k]
        own = f_end[s][bisect_left(A[s], last)]
        if own is None:
            return None
        if s == S - 1:
            return own
        y = y_end[s + 1][bisect_left(D[s + 1], last)]
        return None if y is None else max(own, y)

    while remaining:
        progressed = False
        for s in range(S):
            row = ops[s]
            while pos[s] < len(row):
                op = row[pos[s]]
                r = ready_time(op)
                if r is None:
                    break
                m = op.size
                t0 = max(stage_free[s], r)
                if op.kind == "F":
                    cost = fwd_t[s, m]
                else:
                    cost = bwd_t[s, m] if near_backward(row, pos[s]) else far_t[s, m]
                t1 = t0 + cost
                stage_free[s] = t1
                busy[s] += cost
                placed.append(OpTiming(s, op.kind, op.index, op.start, op.stop, t0, t1))
                if op.kind == "F":
                    f_end[s][op.index] = t1
                    if s < S - 1:
                        c0 = max(link_act_free[s], t1)
                        c1 = c0 + act_t[s, m]
                        link_act_free[s] = c1
                        x_end[s][op.index] = c1
                        transfers.append(
                            Transfer("act", s, s + 1, op.index, op.start, op.stop, c0, c1)
                        )
                elif s > 0:
                    c0 = max(link_grad_free[s], t1)
                    c1 = c0 + grad_t[s - 1, m]
                    link_grad_free[s] = c1
                    y_end[s][op.index] = c1
                    transfers.append(
                        Transfer("grad", s, s - 1, op.index, op.start, op.stop, c0, c1)
                    )
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = [str(ops[s][pos[s]]) for s in range(S) if pos[s] < len(ops[s])]
            raise SimulationError(
                f"schedule {schedule!r} deadlocks: no operation can start; waiting: {stuck}"
            )

    stage_end = []
    for s in range(S):
        t0 = stage_free[s]
        t1 = t0 + float(tb.opt[s])
        busy[s] += float(tb.opt[s])
        placed.append(OpTiming(s, "O", 0, 0, problem.B, t0, t1))
        stage_end.append(t1)
    T = max(stage_end)
    figs = memory_figures(problem, mode)
    bubble = [1.0 - b / T if T > 0 else 0.0 for b in busy]
    return Timeline(
        problem=problem.name,
        schedule=schedule,
        mode=mode,
        iteration_time=T,
        ops=placed,
        transfers=transfers,
        busy=busy,
        bubble=bubble,
        peak_memory=None if figs is None else peak_memory(figs, ops),
        stage_end=stage_end,
        capacity=capacities(problem, memory_cap),
        caps=list(plan.caps) if schedule.lower() == "capped" and plan.caps is not None else None,
    )


def gpipe_recurrence(problem: Problem, plan: Plan) -> float:
    """Iteration time of ``plan`` under gpipe by docs/MODEL.md §4's recurrence, literally.

    One individual at a time, plain Python lists and ``bisect``: the reference evaluator.
    """
    S, mode = problem.S, plan.mode
    tb = problem.tables()
    fwd_t, act_t, grad_t = tb.fwd, tb.act, tb.grad
    X_prev: list[float] = []
    A_prev: list[int] = []
    F_last = [0.0] * S
    for s in range(S):
        P = plan.fwd[s]
        A = list(accumulate(P))
        F = 0.0
        X = 0.0
        Xs = []
        for j, p in enumerate(P):
            R = 0.0 if s == 0 else X_prev[bisect_left(A_prev, A[j])]
            F = max(F, R) + fwd_t[s, p]
            if s < S - 1:
                X = max(X, F) + act_t[s, p]
                Xs.append(X)
        F_last[s] = F
        X_prev, A_prev = Xs, A
    T = 0.0
    Y_next: list[float] = []
    D_next: list[int] = []
    for s in range(S - 1, -1, -1):
        Q = plan.bwd[s]
        D = list(accumulate(Q))
        # under gpipe a stage's backwards are all far unless it has one microbatch (§1b)
        bwd_t = tb.backward(mode) if len(Q) == 1 else tb.backward_far(mode)
        G = F_last[s]
        Y = 0.0
        Ys = []
        for j, q in enumerate(Q):
            R = F_last[s] if s == S - 1 else max(F_last[s], Y_next[bisect_left(D_next, D[j])])
            G = max(G, R) + bwd_t[s, q]
            if s > 0:
                Y = max(Y, G) + grad_t[s - 1, q]
                Ys.append(Y)
        T = max(T, G + tb.opt[s])
        Y_next, D_next = Ys, D
    return float(T)
