"""In-flight caps that make the capped family run a solver's plan as fast as its own order
(docs/CERTIFY.md "Certificates"; docs/SCHEDULES.md §2).

The solver orders each stage's operations freely; a best-known entry needs a plan file, i.e.
partitions and caps whose family order (:func:`umpipe_bench.schedules.capped_order`) the
simulator reproduces. :func:`capped_plan` tries the caps the solver's order itself keeps (each
stage's largest in-flight load), then, where ``B^S`` is at most :data:`MAX_CAP_VECTORS`, every
cap vector through the family's compiled evaluator.

This module imports no torch.
"""

from __future__ import annotations

import itertools
import re

import numpy as np

from ..plan import Plan
from ..problem import Problem
from ..simulator import simulate

__all__ = ["MAX_CAP_VECTORS", "capped_plan", "order_loads"]

#: Most cap vectors :func:`capped_plan` enumerates (32^4).
MAX_CAP_VECTORS = 1 << 20
_LABEL = re.compile(r"^(\d+)([FB])(\d+)$")


def order_loads(plan: Plan, ops: list[list[str]]) -> tuple[int, ...]:
    """Each stage's largest in-flight load (samples) along its op labels (``0F1``, ``0B0``)."""
    caps = []
    for s, row in enumerate(ops):
        load = top = 0
        for label in row:
            m = _LABEL.match(label)
            if m is None:
                raise ValueError(f"not an op label: {label!r}")
            j = int(m.group(3))
            if m.group(2) == "F":
                load += plan.fwd[s][j]
            else:
                load -= plan.bwd[s][j]
            top = max(top, load)
        caps.append(max(1, top))
    return tuple(caps)


def capped_plan(problem: Problem, plan: Plan, ops: list[list[str]], target: float
                ) -> Plan | None:
    """A plan with ``plan``'s partitions and caps whose simulated T is at most ``target``
    (within ``rel 1e-12``), or None when none is found."""
    from ..codec import plan_to_bits
    from ..planners.evaluation.family import FamilyEvaluator

    tol = target * (1 + 1e-12)
    first = plan.with_caps(order_loads(plan, ops))
    if simulate(problem, first).iteration_time <= tol:
        return first
    S, B = problem.S, problem.B
    if B**S > MAX_CAP_VECTORS:
        return None
    ev = FamilyEvaluator(problem, plan.mode)
    fb, bb = plan_to_bits(plan)
    best: tuple[float, tuple[int, ...] | None] = (np.inf, None)
    vectors = itertools.product(range(B, 0, -1), repeat=S)
    while True:
        block = np.array(list(itertools.islice(vectors, 1 << 15)), dtype=np.int64)
        if block.size == 0:
            break
        n = block.shape[0]
        T = ev(np.broadcast_to(fb, (n, *fb.shape)), np.broadcast_to(bb, (n, *bb.shape)), block)
        i = int(np.argmin(T))
        if T[i] < best[0]:
            best = (float(T[i]), tuple(int(k) for k in block[i]))
    if best[1] is None or best[0] > tol:
        return None
    out = plan.with_caps(best[1])
    return out if simulate(problem, out).iteration_time <= tol else None
