"""What each op of an executed plan cost, against the profile (docs/MODEL.md §1, §5).

The executor's per-op timers (``executor.OpTime``, kept under ``op-times/`` when
``UMPIPE_OP_TIMES`` is set) are rows of :data:`FIELDS`. :func:`stage_rows` gives per stage the
medians over iterations of the stage's own compute in its forward and backward ops (op time
minus receive waits, re-chunk takes and sends, :func:`own`) over the profile's costs of the same
ops, and the take and send times; :func:`measured_trace` the median iteration as Chrome trace
events. ``scripts/op_overheads.py`` reads a run's files and prints the table.

Imports no torch.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..plan import Plan
from ..problem import Problem
from ..schedules import Op, near_backward

__all__ = ["FIELDS", "measured_trace", "own", "stage_rows"]

FIELDS = ("kind", "index", "a", "b", "start", "end", "wait", "take", "send")


def own(op: dict[str, Any]) -> float:
    """The op's own compute: its time less receive waits, re-chunk takes and sends."""
    return float(op["end"] - op["start"] - op["wait"] - op["take"] - op["send"])


def stage_rows(problem: Problem, plan: Plan, stages: list[list[list[dict[str, Any]]]],
               label: str) -> list[dict[str, Any]]:
    """Per stage of ``label``: medians over iterations (``stages[s]``: per iteration the ops of
    FIELDS) of the forward and backward own compute, their ratios to the profile's costs of the
    same ops (near or far backward, docs/MODEL.md §1b), take and send ms, sending ops, ops."""
    rows = []
    for s, iters in enumerate(stages):
        if not iters:
            continue
        # the stage's ops in run order, to tell near from far backwards (docs/MODEL.md §1b)
        order = [Op(o["kind"], s, int(o["index"]), int(o["a"]), int(o["b"])) for o in iters[0]]

        def pred(i: int, s: int = s, order: list[Op] = order) -> float:
            op = order[i]
            return problem.fwd(s, op.size) if op.kind == "F" else problem.backward_cost(
                s, op.size, plan.mode, far=not near_backward(order, i))
        row: dict[str, Any] = {"plan": label, "stage": s}
        for kind in ("F", "B"):
            meas = [sum(own(o) for o in it if o["kind"] == kind) for it in iters]
            p = sum(pred(i) for i, o in enumerate(iters[0]) if o["kind"] == kind)
            row[f"{kind}_ratio"] = statistics.median(meas) / p if p else float("nan")
            row[f"{kind}_ms"] = statistics.median(meas) * 1e3
        row["take_ms"] = statistics.median(sum(o["take"] for o in it) for it in iters) * 1e3
        row["send_ms"] = statistics.median(sum(o["send"] for o in it) for it in iters) * 1e3
        row["msgs"] = sum(1 for o in iters[0] if o["send"] > 0)
        row["ops"] = len(iters[0])
        rows.append(row)
    return rows


def measured_trace(stages: list[list[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """The median iteration (by its last op's end) of each stage as Chrome events (pid 0)."""
    ev: list[dict[str, Any]] = [{"ph": "M", "pid": 0, "name": "process_name",
                                 "args": {"name": "measured"}}]
    for s, iters in enumerate(stages):
        ends = [it[-1]["end"] if it else 0.0 for it in iters]
        k = sorted(range(len(iters)), key=lambda i: ends[i])[len(iters) // 2]
        for o in iters[k]:
            ev.append({"ph": "X", "pid": 0, "tid": 2 * s, "cat": o["kind"],
                       "name": f"{s}{o['kind']}{o['index']}", "ts": o["start"] * 1e6,
                       "dur": (o["end"] - o["start"]) * 1e6,
                       "args": {"samples": [o["a"], o["b"]], "wait_ms": o["wait"] * 1e3,
                                "take_ms": o["take"] * 1e3, "send_ms": o["send"] * 1e3}})
    return ev

