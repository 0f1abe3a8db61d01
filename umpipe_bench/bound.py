"""A proven lower bound on the iteration time T of any plan (docs/SIMNETS.md, "The bound").

Valid for every plan ``(P, Q)`` of the memory mode and for every schedule that runs each
stage's operations one at a time, forwards in ascending sample order and backwards in ascending
sample order, with the dependencies of docs/MODEL.md §3-4 (a forward waits for its last needed
sample from upstream, a backward for its last needed gradient from downstream and for its own
forward). gpipe and 1f1b are such schedules. For every stage ``s``::

    T >= E[s] + W[s] + Z[s]

* ``E[s]``: the earliest moment any forward of stage ``s`` can start. ``E[0] = 0`` and
  ``E[s] = E[s-1] + min_m (fwd[s-1](m) + comm_act(s-1, m))``: the upstream transfer a forward
  waits for follows an upstream forward of the same size, which started at ``E[s-1]`` or later.
* ``W[s]``: the least total compute of stage ``s`` over all compositions of B (a min-plus
  knapsack over sizes). stash: ``min sum (fwd + bwd)(p)`` over one composition (``Q = P``);
  recompute: ``min sum fwd(p) + min sum rbwd(q)`` over two free compositions.
* ``Z[s]``: what must follow the stage's last operation, which is its backward of the last
  sample: its own optimizer step, and the gradient's way down to stage 0 (a transfer, one
  backward of each lower stage, that stage's tail). ``Z[0] = opt[0]``,
  ``Z[s] = max(opt[s], min_m comm_grad(s-1, m) + min_m c[s-1](m) + Z[s-1])``.

Every operation of stage ``s`` starts at ``E[s]`` or later and the stage runs one at a time,
so its last operation ends at ``E[s] + W[s]`` or later. The proof and a case where the bound
is reached are in docs/SIMNETS.md. With a backward locality factor (docs/MODEL.md §1b) every
stash backward cost above is ``min(1, bwd_far[s]) * bwd[s](m)``, below both its near and its
far cost, so the bound holds under every order.

This module imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .plan import MODES
from .problem import Problem

__all__ = ["Bound", "gap_to_bound", "lower_bound", "min_composition_cost",
           "min_composition_costs", "named_lower_bound", "stage_bound"]


def min_composition_costs(cost: np.ndarray) -> np.ndarray:
    """``out[s, n] = min over compositions (p_1..p_K) of n of sum_j cost[s, p_j]``, for every
    ``n`` from 0 to B (the least cost of any ``n`` consecutive samples).

    ``cost`` is ``[S, B+1]`` with column ``m`` the cost of size ``m`` (column 0 unused). An
    unbounded min-plus knapsack: ``best[n] = min_m best[n-m] + cost[m]``, one vector step per
    ``n`` over all stages at once (``O(S B^2)``).
    """
    cost = np.asarray(cost, dtype=np.float64)
    S, B1 = cost.shape
    B = B1 - 1
    best = np.zeros((S, B + 1))
    for n in range(1, B + 1):
        # best[:, n-m] + cost[:, m] for m = 1..n
        best[:, n] = np.min(best[:, n - 1::-1][:, :n] + cost[:, 1:n + 1], axis=1)
    return best


def min_composition_cost(cost: np.ndarray) -> np.ndarray:
    """``out[s] = min over compositions (p_1..p_K) of B of sum_j cost[s, p_j]``
    (:func:`min_composition_costs` at ``n = B``)."""
    return min_composition_costs(cost)[:, -1]


@dataclass(frozen=True)
class Bound:
    """The bound and its parts (seconds); ``value = max(per_stage + per_link)``."""

    value: float
    per_stage: tuple[float, ...]
    per_link: tuple[float, ...]  # boundary s -> s+1, both directions
    head: tuple[float, ...]  # E[s]
    work: tuple[float, ...]  # W[s]
    tail: tuple[float, ...]  # Z[s]

    @property
    def critical(self) -> str:
        """Which part gives the bound: ``stage s`` or ``link s->s+1``."""
        parts = [(v, f"stage {s}") for s, v in enumerate(self.per_stage)]
        parts += [(v, f"link {s}->{s + 1}") for s, v in enumerate(self.per_link)]
        return max(parts, key=lambda p: p[0])[1]


def stage_bound(problem: Problem, mode: str = "stash") -> Bound:
    """The bound of every stage and link (module docstring; docs/SIMNETS.md)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    tb = problem.tables()
    S = problem.S
    fwd = tb.fwd
    # a backward costs bwd (near) or bwd * bwd_far (far, docs/MODEL.md §1b): the lesser of the
    # two is below every backward of every schedule
    back = np.minimum(tb.backward(mode), tb.backward_far(mode))
    min_f = fwd[:, 1:].min(axis=1)
    min_b = back[:, 1:].min(axis=1)
    work_b = min_composition_cost(back)
    work = min_composition_cost(fwd + back) if mode == "stash" else (
        min_composition_cost(fwd) + work_b)
    head = np.zeros(S)  # E[s]
    for s in range(1, S):
        head[s] = head[s - 1] + float(np.min(fwd[s - 1, 1:] + tb.act[s - 1, 1:]))
    head_b = np.zeros(S)  # R[s]: earliest start of any backward of stage s
    head_b[S - 1] = head[S - 1] + min_f[S - 1]
    for s in range(S - 2, -1, -1):
        up = head_b[s + 1] + float(np.min(back[s + 1, 1:] + tb.grad[s, 1:]))
        head_b[s] = max(head[s] + min_f[s], up)
    tail = np.zeros(S)  # Z[s]: after the backward of the last sample
    tail[0] = tb.opt[0]
    for s in range(1, S):
        down = float(np.min(tb.grad[s - 1, 1:])) + min_b[s - 1] + tail[s - 1]
        tail[s] = max(float(tb.opt[s]), down)
    tail_f = np.zeros(S)  # ZF[s]: after the forward of the last sample
    tail_f[S - 1] = min_b[S - 1] + tail[S - 1]
    for s in range(S - 2, -1, -1):
        on = float(np.min(tb.act[s, 1:])) + min_f[s + 1] + tail_f[s + 1]
        tail_f[s] = max(min_b[s] + tail[s], on)
    per = np.maximum(head + work, head_b + work_b) + tail
    links = []
    if S > 1:
        w_act = min_composition_cost(tb.act[:, :])
        w_grad = min_composition_cost(tb.grad[:, :])
        for s in range(S - 1):
            fwd_link = head[s] + min_f[s] + w_act[s] + min_f[s + 1] + tail_f[s + 1]
            bwd_link = head_b[s + 1] + min_b[s + 1] + w_grad[s] + min_b[s] + tail[s]
            links.append(max(fwd_link, bwd_link))
    value = float(max(per.max(), max(links, default=0.0)))
    return Bound(value=value, per_stage=tuple(per.tolist()), per_link=tuple(links),
                 head=tuple(head.tolist()), work=tuple(work.tolist()), tail=tuple(tail.tolist()))


def lower_bound(problem: Problem, mode: str = "stash") -> float:
    """A lower bound on T of every plan and schedule of the family: the larger of the closed
    form (docs/SIMNETS.md "The bound") and the stage relaxation (docs/CERTIFY.md "The stage
    relaxation"; problems with ``S * B^3`` up to :data:`.certify.relax.MAX_WORK`)."""
    from .certify.relax import relaxed_bound

    # kept with the problem, as its tables are (a frozen dataclass's cached attribute)
    known: dict[str, float] = problem.__dict__.setdefault("_lower_bounds", {})
    if mode not in known:
        closed = stage_bound(problem, mode).value
        relaxed = relaxed_bound(problem, mode, closed)
        known[mode] = closed if relaxed is None else max(closed, relaxed)
    return known[mode]


def gap_to_bound(problem: Problem, mode: str, T: float) -> float:
    """``T / lower_bound - 1``: at most how far ``T`` is above the optimum (0.25 = 25 %)."""
    return T / lower_bound(problem, mode) - 1.0


def named_lower_bound(name: str, mode: str) -> float | None:
    """The bound of a registered problem or problem file by name (for reports over stored
    rows); None when the name no longer loads."""
    from .registry import get_problem

    try:
        problem = get_problem(name)
    except (KeyError, ValueError, OSError):
        return None
    return lower_bound(problem, mode)
