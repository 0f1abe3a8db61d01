"""The baselines a torch user would pick: each schedule's best M and layer partition.

For a per-layer problem (one layer per stage), ``D`` devices, a memory mode and an optional
memory cap, :func:`best_choice` finds, for one of torch's schedules, the number of equal
microbatches ``M`` (a divisor of ``B``: torch cuts the batch into equal parts) and the
contiguous partition of the layers into the schedule's chunks that minimise the simulated
iteration time (:func:`umpipe_bench.devsim.simulate_devices` over the lists torch executes)
among those whose every device fits the cap. For schedules with several chunks per device in
loop order, ``v`` is searched too unless given.

The search is exact over all compositions of the ``L`` layers into ``C`` chunks and all valid
``M``: candidates are visited in increasing order of a lower bound, the busiest device's total
work (every one of its operations plus its optimizer steps, which it must run one after another),
and the search stops when the bound reaches the best time found. The bound of a device is the
time the first microbatch needs to reach its earliest chunk (the forwards of every chunk before
it, communication left out) plus all its operations and optimizer steps, which it runs one
after another; the candidate's bound is the largest over its devices. Bounds come from
per-layer prefix sums, so a candidate costs a few additions until it is simulated. Under a
memory cap a candidate's peaks are computed first, from its chunks' memory figures and the
lists alone (:func:`umpipe_bench.devsim.peaks_of`, the simulator's own walk), and one that
does not fit is not simulated.

This module imports no torch (the default lists come from :func:`.orders.torch_orders`, which
imports torch when first called).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from itertools import accumulate, combinations
from typing import Any

import numpy as np

from ..devsim import Action, DeviceTimeline, edp_sizes, parse_action, peaks_of, simulate_devices
from ..errors import UmpipeError
from ..layout import chunk_devices, chunk_memory, group_layers
from ..problem import Problem

__all__ = ["ScheduleChoice", "best_choice", "compositions", "divisors"]

#: (name, D, M, v) -> per-device action lists
OrdersFn = Callable[[str, int, int, int | None], list[list[str]]]
#: (schedule, D, M, v) -> per device, where each action's output leaves (None: at its end)
SendAfterFn = Callable[[str, int, int, int | None], list[list[int]] | None]


@dataclass(frozen=True)
class ScheduleChoice:
    """One schedule's best (M, partition) on a problem, ``D`` devices, mode and cap."""

    schedule: str
    D: int
    v: int
    M: int
    counts: tuple[int, ...]
    T: float
    peak_memory: tuple[float, ...] | None
    mode: str
    evaluated: int

    @property
    def max_peak(self) -> float | None:
        return None if self.peak_memory is None else max(self.peak_memory)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["counts"] = list(self.counts)
        d["peak_memory"] = None if self.peak_memory is None else list(self.peak_memory)
        d["max_peak_memory"] = self.max_peak
        return d


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def compositions(L: int, C: int) -> Iterator[tuple[int, ...]]:
    """Every way to cut ``L`` layers into ``C`` non-empty contiguous chunks (layer counts)."""
    for cuts in combinations(range(1, L), C - 1):
        ends = (*cuts, L)
        starts = (0, *cuts)
        yield tuple(b - a for a, b in zip(starts, ends))


def _layer_work(problem: Problem, m: int, M: int, mode: str, split: bool
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per layer: the busy time of ``M`` microbatches of size ``m`` plus its optimizer step,
    and one microbatch's forward time."""
    tb = problem.tables()
    if split:
        inp = tb.input_backward(mode)[:, m]
        back = inp + tb.wbwd[:, m]  # type: ignore[index]
    else:
        inp = tb.backward(mode)[:, m]
        back = inp
    if mode == "stash":  # a far backward (docs/MODEL.md §1b) may be cheaper than a near one
        far = np.array([min(1.0, problem.far_factor(s)) for s in range(problem.S)])
        back = back - (1.0 - far) * inp
    return M * (tb.fwd[:, m] + back) + tb.opt, tb.fwd[:, m]


def best_choice(
    problem: Problem,
    schedule: str,
    D: int,
    *,
    kind: str,
    split: bool,
    mode: str = "stash",
    memory_cap: float | Sequence[float] | None = None,
    v: int | None = None,
    vs: Sequence[int] = (2, 3, 4),
    Ms: Sequence[int] | None = None,
    orders: OrdersFn,
    send_after: SendAfterFn | None = None,
    valid: Callable[[int, int, int | None], bool] = lambda D, M, v: True,
    op_overhead: float = 0.0,
    message_cpu: tuple[float, float] = (0.0, 0.0),
    grouped: dict[tuple[int, ...], Problem] | None = None,
) -> ScheduleChoice | None:
    """The best (``v``, ``M``, partition) of one schedule (module docstring); None when no
    candidate fits the cap (or none is valid).

    ``kind``: the schedule's layout (``one``, ``loop``, ``v``); ``split``: whether its lists
    use I and W; ``vs``: chunks per device to try for ``loop`` layouts when ``v`` is None;
    ``Ms``: microbatch counts to try (default: every divisor of ``B``); ``send_after(schedule,
    D, M, v)``: where each action's output leaves (:func:`umpipe_bench.devsim.
    simulate_devices`; a later send only adds time, so the bound stays a lower bound), None:
    at its own end; ``valid(D, M, v)``:
    whether torch accepts the combination. ``memory_cap``: bytes for every device, or one
    figure per device. ``op_overhead``: seconds added to every action, ``message_cpu``: the
    CPU charge of a cross-device message on both ends (:func:`umpipe_bench.devsim.
    simulate_devices`; a charge only adds time, so the bound stays a lower bound).
    ``grouped``: chunk problems by partition, filled as they are made (one dict shared by
    calls on the same problem groups each partition once).
    """
    L, B = problem.S, problem.B
    if split and not problem.has_split_backward:
        raise UmpipeError(f"schedule {schedule!r} splits the backward; problem "
                          f"{problem.name!r} has no split-backward costs (ibwd, ribwd, wbwd)")
    if kind == "one":
        v_options = [1]
    elif kind == "v":
        v_options = [2]
    else:
        v_options = [v] if v is not None else list(vs)
    heap: list[tuple[float, int, int, tuple[int, ...]]] = []
    for vv in v_options:
        C = vv * D if kind != "one" else D
        if C > L:
            continue
        devs = chunk_devices(kind, D, vv)
        for M in (Ms if Ms is not None else divisors(B)):
            if B % M or not valid(D, M, None if kind == "one" else vv):
                continue
            work, first = _layer_work(problem, B // M, M, mode, split)
            # every chunk runs at least two actions (F and B, or F, I and W) per microbatch
            per_chunk_overhead = 2 * M * op_overhead
            pre = [0.0, *accumulate(work.tolist())]
            head = [0.0, *accumulate(first.tolist())]
            for counts in compositions(L, C):
                per_dev = [0.0] * D
                start = [-1.0] * D
                a = 0
                for c, b in enumerate(accumulate(counts)):
                    d = devs[c]
                    per_dev[d] += pre[b] - pre[a] + per_chunk_overhead
                    if start[d] < 0:  # chunks come in model order: the first is the earliest
                        start[d] = head[a]
                    a = b
                bound = max(w + h for w, h in zip(per_dev, start))
                heapq.heappush(heap, (bound, vv, M, counts))
    best: ScheduleChoice | None = None
    evaluated = 0
    grouped = {} if grouped is None else grouped
    # per (v, M): torch's lists parsed once, checked with the first partition simulated (the
    # check depends on the chunk count, the sizes and the devices, not on the partition)
    lists: dict[tuple[int, int], list[list[Action]]] = {}
    sends: dict[tuple[int, int], list[list[int]] | None] = {}
    # under a cap, each candidate's peaks come first, from its chunks' memory figures alone
    # (the simulator's own walk, so a candidate skipped here is one it would refuse)
    mem_of: dict[tuple[int, ...], list[Any] | None] = {}
    devs_of = {vv: chunk_devices(kind, D, vv) for vv in v_options}
    while heap:
        bound, vv, M, counts = heapq.heappop(heap)
        if best is not None and bound >= best.T:
            break
        acts = lists.get((vv, M))
        if acts is None:
            raw = orders(schedule, D, M, None if kind == "one" else vv)
            acts = [[a if isinstance(a, Action) else parse_action(a) for a in row]
                    for row in raw]
            sends[(vv, M)] = None if send_after is None else send_after(
                schedule, D, M, None if kind == "one" else vv)
        if memory_cap is not None and (vv, M) in lists:
            if counts not in mem_of:
                ends = list(accumulate(counts))
                mems = [chunk_memory(problem.stages[a:b]) for a, b in zip([0, *ends], ends)]
                mem_of[counts] = None if None in mems else mems
            mems = mem_of[counts]
            if mems is not None:
                sz = edp_sizes(B, M)
                pk = peaks_of(mems, devs_of[vv], acts, [(sz, sz, sz)] * len(mems), mode)
                if not _fits(tuple(pk), memory_cap):
                    continue
        tl = simulate_chunks(problem, counts, kind, D, vv, M, mode, acts, op_overhead,
                             message_cpu, grouped=grouped, check=(vv, M) not in lists,
                             send_after=sends[(vv, M)])
        lists[(vv, M)] = acts
        evaluated += 1
        peaks = None if tl.peak_memory is None else tuple(tl.peak_memory)
        if not _fits(peaks, memory_cap):
            continue
        if best is None or tl.iteration_time < best.T:
            best = ScheduleChoice(schedule, D, vv, M, counts, tl.iteration_time, peaks, mode, 0)
    if best is None:
        return None
    return replace(best, evaluated=evaluated)


def _fits(peaks: Sequence[float] | None, cap: float | Sequence[float] | None) -> bool:
    if cap is None or peaks is None:
        return True
    caps = [float(cap)] * len(peaks) if isinstance(cap, (int, float)) else list(cap)
    return all(p <= c for p, c in zip(peaks, caps))


def simulate_chunks(problem: Problem, counts: Sequence[int], kind: str, D: int, v: int, M: int,
                    mode: str, lists: Sequence[Sequence[str | Action]], op_overhead: float = 0.0,
                    message_cpu: tuple[float, float] = (0.0, 0.0), *,
                    grouped: dict[tuple[int, ...], Problem] | None = None,
                    check: bool = True,
                    send_after: Sequence[Sequence[int]] | None = None) -> DeviceTimeline:
    """Simulate per-device ``lists`` on the chunk problem of a partition and layout;
    ``grouped``: a cache of chunk problems by partition; ``check`` and ``send_after``: as in
    :func:`umpipe_bench.devsim.simulate_devices`."""
    key = tuple(int(n) for n in counts)
    cp = None if grouped is None else grouped.get(key)
    if cp is None:
        cp = group_layers(problem, key)
        if grouped is not None:
            grouped[key] = cp
    return simulate_devices(cp, chunk_devices(kind, D, v), lists, edp_sizes(problem.B, M), mode,
                            op_overhead, message_cpu=message_cpu, check=check,
                            send_after=send_after)


@dataclass(frozen=True)
class TableRow:
    """One schedule's row of :func:`schedule_table`: its best choice, or why it has none."""

    schedule: str
    torch_class: str
    choice: ScheduleChoice | None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"schedule": self.schedule, "torch_class": self.torch_class,
                "best": None if self.choice is None else self.choice.to_dict(),
                "reason": self.reason or None}


def schedule_table(
    problem: Problem,
    D: int,
    mode: str = "stash",
    memory_cap: float | Sequence[float] | None = None,
    names: Sequence[str] | None = None,
    v: int | None = None,
    vs: Sequence[int] = (1, 2, 3, 4),
    op_overhead: float = 0.0,
    on_schedule: Callable[[int, int, str], None] | None = None,
    message_cpu: tuple[float, float] = (0.0, 0.0),
) -> list[TableRow]:
    """Every torch schedule's best (v, M, partition) on a per-layer problem and ``D`` devices
    (:func:`best_choice`), in registry order; a schedule that cannot run (too few layers for
    its chunks, no split-backward costs, nothing fits the cap) gets a reason instead.
    ``on_schedule(i, n, name)`` is called before the ``i``-th of the ``n`` schedules (a
    progress display)."""
    from .orders import (
        TORCH_SCHEDULES,
        ScheduleShapeError,
        check,
        schedule_info,
        torch_orders,
        torch_send_after,
    )

    infos = [schedule_info(n) for n in (names or list(TORCH_SCHEDULES))]
    rows = []
    grouped: dict[tuple[int, ...], Problem] = {}  # every schedule's partitions, grouped once
    for i, info in enumerate(infos):
        if on_schedule is not None:
            on_schedule(i, len(infos), info.name)

        def valid(D: int, M: int, vv: int | None, name: str = info.name) -> bool:
            try:
                check(name, D, M, vv)
            except ScheduleShapeError:
                return False
            return True

        if info.split_backward and not problem.has_split_backward:
            rows.append(TableRow(info.name, info.torch_class, None,
                                 "no split-backward costs (ibwd, ribwd, wbwd) in the problem"))
            continue
        if v is not None and info.layout == "loop":
            v_opts: Sequence[int] = (v,)
        else:
            v_opts = vs
        min_chunks = D * (2 if info.layout == "v" else min(v_opts) if info.layout == "loop"
                          else 1)
        if min_chunks > problem.S:
            rows.append(TableRow(info.name, info.torch_class, None,
                                 f"needs at least {min_chunks} chunks; the problem has "
                                 f"{problem.S} layers"))
            continue
        choice = best_choice(problem, info.name, D, kind=info.layout, split=info.split_backward,
                             mode=mode, memory_cap=memory_cap, vs=v_opts, orders=torch_orders,
                             send_after=torch_send_after,
                             valid=valid, op_overhead=op_overhead, message_cpu=message_cpu,
                             grouped=grouped)
        rows.append(TableRow(info.name, info.torch_class, choice,
                             "" if choice is not None else "no (M, partition) fits the "
                             "memory cap" if memory_cap is not None else "no valid M"))
    return rows


def best_row(rows: Sequence[TableRow]) -> TableRow | None:
    """The fastest schedule of a table (None when none can run)."""
    ok = [r for r in rows if r.choice is not None]
    return min(ok, key=lambda r: r.choice.T) if ok else None  # type: ignore[union-attr]
