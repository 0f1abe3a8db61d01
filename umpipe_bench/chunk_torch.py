"""torch's seven schedules as chunk plans, and the problems and simulation that compare them
(docs/CHUNK-SCHEDULES.md §5, §6).

:func:`torch_plan` gives, for schedule ``name`` on ``D`` devices with ``M`` equal
microbatches (``M`` dividing ``B``), the equal chunk plan whose lists under the chunk rule
(:func:`umpipe_bench.chunk_schedule.chunk_order`) are exactly the lists torch 2.13 executes,
for the schedules in :data:`REPRODUCED`; caps count microbatches of ``m = B / M`` samples:

* ``gpipe``: one chunk per device, no cap;
* ``1f1b``: caps ``D - d``;
* ``interleaved-1f1b`` (``v`` chunks per device, loop order, ``R = M / max(1, M // D)``
  microbatches per round): caps ``min((v-1) R + 2 (D-1-d) + 1, v M)``, group ``R``;
* ``zb1p`` (``ScheduleInterleavedZeroBubble``; ZB-H1 at ``v = 1``): the same with
  ``(D-1-d)`` in place of ``2 (D-1-d)``, split, ``w_caps`` ``d``.

For the other three it gives the plan of the family closest to them (the same layout,
split and partitions; caps that hold what torch's lists hold): ``looped-bfs`` no cap and one
round (torch runs each chunk's backwards in reverse microbatch order, which no chunk plan
does), ``zbv`` and ``dualpipev`` caps ``2D``, ``w_caps`` ``0``, one microbatch per round and
the lags of :func:`v_lags` (torch's V schedules are hand-placed phases; DualPipeV also mixes
full backwards with split ones).

This module imports no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .chunk_schedule import chunk_order
from .chunkplan import ChunkPlan, ChunkPlanError
from .devsim import DeviceTimeline, simulate_devices
from .layout import group_layers
from .problem import Problem, StageMemory
from .synthetic import synthetic_problem
from .torch_schedules import check, schedule_info

__all__ = [
    "REPRODUCED",
    "random_split_problem",
    "simulate_plan",
    "torch_caps",
    "torch_plan",
    "v_lags",
]

#: the schedules whose torch lists :func:`torch_plan`'s plans give exactly (a test: every
#: D <= 8, M <= 16, v <= 4 torch accepts)
REPRODUCED = ("gpipe", "1f1b", "interleaved-1f1b", "zb1p")


def torch_caps(name: str, D: int, M: int, v: int | None = None
               ) -> tuple[list[int] | None, list[int] | None, int | None]:
    """``(caps, w_caps, group)`` of :func:`torch_plan` in microbatches (None: no cap / one
    round); ``v`` as :func:`umpipe_bench.torch_schedules.check` takes it."""
    info = schedule_info(name)
    v = check(info.name, D, M, v)
    R = M // max(1, M // D)  # torch's microbatches per round
    if info.name == "gpipe":
        return None, None, None
    if info.name == "1f1b":
        return [D - d for d in range(D)], None, None
    if info.name == "interleaved-1f1b":
        return [min((v - 1) * R + 2 * (D - 1 - d) + 1, v * M) for d in range(D)], None, R
    if info.name == "zb1p":
        return ([min((v - 1) * R + (D - 1 - d) + 1, v * M) for d in range(D)],
                list(range(D)), R)
    if info.name == "looped-bfs":
        return None, None, None
    return [min(2 * D, 2 * M)] * D, [0] * D, 1  # zbv, dualpipev


def v_lags(D: int, m: int, fwd: int = 1, bwd: int = 1) -> tuple[list[int], list[int]]:
    """Lags of the V shape (docs/CHUNK-SCHEDULES.md §5), for microbatches of ``m`` samples: on
    device ``d`` the second leg's forwards rank ``fwd * (D-1-d)`` microbatches late (their
    inputs come back through the ``2 (D-1-d)`` chunks below), the first leg's backwards
    ``bwd * (D-1-d)`` late (their gradients come through the second legs first)."""
    f = [0] * (2 * D)
    b = [0] * (2 * D)
    for d in range(D):
        f[2 * D - 1 - d] = fwd * (D - 1 - d) * m
        b[d] = bwd * (D - 1 - d) * m
    return f, b


def torch_plan(name: str, D: int, M: int, layers: Sequence[int], B: int,
               mode: str = "stash") -> ChunkPlan:
    """The equal chunk plan of torch schedule ``name`` (module docstring): ``M`` microbatches
    of ``B / M`` samples (``M`` must divide ``B``), the chunks' layer counts ``layers``
    (``D``, ``v D`` or ``2 D`` of them, as the schedule's layout needs)."""
    info = schedule_info(name)
    C = len(layers)
    v = C // D if info.layout == "loop" else None
    if info.layout == "loop" and C % D:
        raise ChunkPlanError(f"layers: {info.torch_class} needs a multiple of D = {D} chunks, "
                             f"got {C}")
    if B % M:
        raise ChunkPlanError(f"M: the equal plan of {info.torch_class} needs M dividing B = "
                             f"{B}, got M = {M}")
    caps, w_caps, group = torch_caps(info.name, D, M, v)
    m = B // M
    lags = None
    if info.layout == "v":
        lags = v_lags(D, m)
    plan = ChunkPlan.equal(
        D, B, M, info.layout, layers, mode=mode, split=info.split_backward,
        caps=None if caps is None else [k * m for k in caps],
        w_caps=None if w_caps is None else [k * m for k in w_caps],
        group=None if group is None else group * m,
        fwd_lag=None if lags is None else lags[0], bwd_lag=None if lags is None else lags[1])
    return dataclasses.replace(plan, meta={"schedule": info.name,
                                           "exact": info.name in REPRODUCED})


def simulate_plan(problem: Problem, plan: ChunkPlan, op_overhead: float = 0.0
                  ) -> DeviceTimeline:
    """One iteration of ``plan`` on a per-layer ``problem``: its chunks' costs
    (:func:`umpipe_bench.layout.group_layers`), the chunk rule's lists, the device
    simulator with the plan's partitions."""
    plan.validate(problem)
    chunks = group_layers(problem, plan.layers)
    lists = chunk_order(plan).lists
    return simulate_devices(chunks, plan.devices, lists, None, plan.mode, op_overhead,
                            parts=plan.parts())


def random_split_problem(L: int, B: int, seed: int) -> Problem:
    """A random per-layer problem with split-backward tables: the synthetic problem
    ``sim-s{L}-b{B}-s{seed}`` (:func:`umpipe_bench.synthetic.synthetic_problem`) with, per
    layer, ``I`` a random share (0.3..0.7) of its backward and ``W`` the rest times a random
    overhead (1.0..1.1), ``ribwd = fwd + ibwd``, and ``w_held`` a random 0.5..1.5 of its
    saved bytes (as measured layers hold, docs/MODEL.md §1c)."""
    base = synthetic_problem(L, B, seed)
    rng = np.random.default_rng([seed, L, B, 1])
    stages = []
    for st in base.stages:
        share, extra = float(rng.uniform(0.3, 0.7)), float(rng.uniform(1.0, 1.1))
        ibwd = tuple(b * share for b in st.bwd)
        mem = st.memory
        if mem is not None:
            mem = StageMemory(param_bytes=mem.param_bytes,
                              saved_act_bytes_per_sample=mem.saved_act_bytes_per_sample,
                              input_bytes_per_sample=mem.input_bytes_per_sample,
                              w_held_bytes_per_sample=mem.saved_act_bytes_per_sample
                              * float(rng.uniform(0.5, 1.5)))
        stages.append(dataclasses.replace(
            st, ibwd=ibwd, ribwd=tuple(f + i for f, i in zip(st.fwd, ibwd)),
            wbwd=tuple(b * (1 - share) * extra for b in st.bwd), memory=mem))
    return dataclasses.replace(base, name=f"{base.name}-split", stages=tuple(stages)).validate()
