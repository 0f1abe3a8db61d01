"""The chunk-plan planner's settings, its results, the layouts and partitions it starts from,
torch's baselines and the seed plans made of them (:mod:`.chunk_search`,
docs/CHUNK-SCHEDULES.md §9)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...chunk_codec import ChunkGenomes, ChunkSpace
from ...chunkplan import ChunkPlan
from ...errors import UmpipeError
from ...problem import Problem
from ..evaluation.chunk_objective import ChunkObjective
from ..search.history import History
from ..search.settings import Setting, SettingsTable

__all__ = ["CHUNK_SEARCH_SETTINGS", "LAYOUTS", "ChunkSearchResult", "TorchBaseline",
           "check_chunk_run", "device_capacity", "layout_options", "torch_baselines",
           "torch_memory", "torch_seed_plans", "work_balanced_counts"]

LAYOUTS = ("one", "loop", "v")

#: torch's baselines per (problem digest, name, D, mode, capacity): the exact search takes
#: seconds on 14-16 layers and its result depends on nothing else
_BASELINES: dict[tuple[Any, ...], tuple[TorchBaseline, ...]] = {}

CHUNK_SEARCH_SETTINGS = SettingsTable(
    Setting("population", int, 64, "individuals per space", low=4),
    Setting("elites", int, 2, "best distinct individuals a space keeps each generation "
            "(below population)", low=1),
    Setting("tournament", int, 3, "tournament size of the parent selection", low=1),
    Setting("cxpb", float, 0.7, "probability that a pair of parents mates", low=0.0, high=1.0),
    Setting("mutpb", float, 0.9, "probability that an offspring is mutated", low=0.0, high=1.0),
    Setting("flip_rate", float, 2.0, "expected cut bits flipped per mutated chromosome "
            "(forward, backward, weight-gradient each)", low=0.0),
    Setting("shift_rate", float, 1.0, "expected microbatch boundaries moved by one sample per "
            "mutated chromosome", low=0.0),
    Setting("cap_rate", float, 1.0, "expected cap and w_cap genes redrawn per mutated "
            "offspring", low=0.0),
    Setting("live", int, 6, "spaces (layout, partition, split) searched at a time", low=1),
    Setting("epoch", int, 10, "generations of each live space between outer moves", low=1),
    Setting("split", str, "auto", "auto: split and unsplit backwards where the problem has "
            "split-backward costs, else unsplit; yes: split only; no: unsplit only",
            choices=("auto", "yes", "no")),
    Setting("layouts", str, "one,loop,v", "the layouts searched (comma-separated subset of "
            "one, loop, v)"),
    Setting("threads", int, 1, "evaluator threads (results do not depend on it)", low=1),
)


@dataclass(frozen=True)
class TorchBaseline:
    """One torch schedule's best choice (:class:`~umpipe_bench.torch_schedules.best.
    ScheduleChoice`), or why it has none; ``exact``: the chunk rule reproduces its lists."""

    schedule: str
    exact: bool
    T: float | None
    v: int | None = None
    M: int | None = None
    counts: tuple[int, ...] | None = None
    reason: str = ""
    #: the most any device holds at that choice (bytes; None without memory figures)
    peak: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"schedule": self.schedule, "exact": self.exact, "T": self.T, "v": self.v,
                "M": self.M, "partition": None if self.counts is None else list(self.counts),
                "peak_memory": self.peak, "reason": self.reason or None}


@dataclass
class ChunkSearchResult:
    """What :meth:`ChunkSearch.plan` returns."""

    plan: ChunkPlan
    iteration_time: float
    peak_memory: list[float] | None
    baselines: list[TorchBaseline]
    evaluations: int = 0
    generations: int = 0
    spaces: int = 0
    wall_time: float = 0.0
    seed: int | None = None
    start_time: float = math.inf  # best T of the seeded populations
    memory_cap: float | None = None
    history: History = field(default_factory=History)
    #: the SIGINT/SIGTERM that ended the search early (the plan is the best found), else None
    interrupted: BaseException | None = None
    #: why the search ended before its budget, one line, else None
    stopped: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    #: True when the plan is proven optimal over its enumerated family (``chunk-exact``),
    #: False when such a search was cut short, None for a heuristic search
    proven_optimal: bool | None = None

    def best_torch(self, exact_only: bool = False) -> TorchBaseline | None:
        """The fastest torch schedule that fits (``exact_only``: among those the rule
        reproduces)."""
        ok = [b for b in self.baselines if b.T is not None and (b.exact or not exact_only)]
        return min(ok, key=lambda b: b.T) if ok else None  # type: ignore[arg-type,return-value]

    def speedup_vs(self, base: TorchBaseline | None) -> float | None:
        """``T_base / T - 1`` (negative: the torch schedule is faster)."""
        if base is None or base.T is None:
            return None
        return base.T / self.iteration_time - 1.0


def layout_options(L: int, D: int, layouts: tuple[str, ...] = LAYOUTS
                   ) -> list[tuple[str, int]]:
    """``(layout, v)`` of every layout searched on ``L`` layers and ``D`` devices: ``one``,
    ``loop`` with ``v = 2..4`` where ``v D <= L``, ``v`` where ``2 D <= L``."""
    out: list[tuple[str, int]] = []
    if "one" in layouts and D <= L:
        out.append(("one", 1))
    if "loop" in layouts:
        out += [("loop", v) for v in (2, 3, 4) if v * D <= L]
    if "v" in layouts and 2 * D <= L:
        out.append(("v", 2))
    return out


def work_balanced_counts(work: np.ndarray, C: int) -> tuple[int, ...]:
    """The contiguous partition of layers with per-layer ``work`` into ``C`` chunks whose
    largest chunk sum is least (ties: the first found by the dynamic programme)."""
    L = len(work)
    pre = np.concatenate([[0.0], np.cumsum(work)])
    best = np.full((C + 1, L + 1), np.inf)
    arg = np.zeros((C + 1, L + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for c in range(1, C + 1):
        for j in range(c, L - (C - c) + 1):
            for i in range(c - 1, j):
                x = max(best[c - 1, i], pre[j] - pre[i])
                if x < best[c, j]:
                    best[c, j], arg[c, j] = x, i
    counts, j = [], L
    for c in range(C, 0, -1):
        i = int(arg[c, j])
        counts.append(j - i)
        j = i
    return tuple(reversed(counts))


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


class _Space:
    """One space under search: its objective, population, times and best."""

    def __init__(self, space: ChunkSpace, objective: ChunkObjective, order: int) -> None:
        self.space, self.objective, self.order = space, objective, order
        self.pop: ChunkGenomes | None = None
        self.T = np.zeros(0)
        self.best_T = math.inf
        self.best_row: ChunkGenomes | None = None
        self.generations = 0

    def set_population(self, pop: ChunkGenomes, T: np.ndarray) -> None:
        self.pop, self.T = pop, T
        if len(T):
            i = int(np.argmin(T))
            if T[i] < self.best_T:
                self.best_T, self.best_row = float(T[i]), pop.row(i).copy()


def torch_baselines(problem: Problem, D: int, mode: str, cap: float | None,
                    on_schedule: Callable[[int, int, str], None] | None = None
                    ) -> list[TorchBaseline]:
    """Every torch schedule's best v, M and layer partition on ``D`` devices within ``cap``
    (the exact search of ``umpipe-bench schedules``), cached per problem; ``on_schedule`` as
    :func:`umpipe_bench.torch_schedules.best.schedule_table`'s."""
    from ...chunk_torch import REPRODUCED
    from ...torch_schedules.best import schedule_table

    key = (problem.digest(split=True), problem.name, D, mode, cap)
    if key in _BASELINES:
        return list(_BASELINES[key])
    rows = schedule_table(problem, D, mode, cap, on_schedule=on_schedule)
    out = []
    for r in rows:
        c = r.choice
        if c is None:
            out.append(TorchBaseline(r.schedule, r.schedule in REPRODUCED, None,
                                     reason=r.reason))
        else:
            out.append(TorchBaseline(r.schedule, r.schedule in REPRODUCED, float(c.T), c.v,
                                     c.M, tuple(c.counts), peak=c.max_peak))
    if len(_BASELINES) >= 64:
        _BASELINES.pop(next(iter(_BASELINES)))
    _BASELINES[key] = tuple(out)
    return out


def device_capacity(problem: Problem, memory_cap: float | None) -> float | None:
    """One capacity for every device: ``memory_cap``, else the smallest capacity of the
    problem's layers (:func:`umpipe_bench.memory.capacities`), else None."""
    if memory_cap is not None:
        return float(memory_cap)
    from ...memory import capacities

    caps = capacities(problem, None)
    if caps is None:
        return None
    finite = [c for c in caps if c is not None and math.isfinite(c)]
    return min(finite) if finite else None


def check_chunk_run(name: str, problem: Problem, D: int, mode: str, split: str) -> None:
    """What every planner of chunk plans checks before it runs: the mode, ``D`` in ``1..L``,
    and ``split=yes`` only with split-backward costs; a :class:`PlannerError` naming it."""
    from ...plan import MODES
    from ..search.base import PlannerError

    if mode not in MODES:
        raise PlannerError(f"mode must be one of {MODES}, got {mode!r}")
    L = problem.S
    if isinstance(D, bool) or not isinstance(D, int) or not 1 <= D <= L:
        raise PlannerError(f"planner {name!r}: devices D must be in 1..{L} (the problem's "
                           f"layers), got {D!r}")
    if split == "yes" and not problem.has_split_backward:
        raise PlannerError(f"planner {name!r}: split=yes needs split-backward costs; problem "
                           f"{problem.name!r} has none (ibwd, ribwd, wbwd)")


def torch_memory(problem: Problem, D: int, mode: str, cap: float | None
                 ) -> tuple[float, TorchBaseline]:
    """The memory of the fastest torch schedule within ``cap`` (its most loaded device's peak,
    bytes) and that schedule: the capacity of ``--memory-cap torch``, under which a plan holds
    no more than torch's best does. ValueError when no schedule runs or the problem has no
    memory figures."""
    ok = [b for b in torch_baselines(problem, D, mode, cap) if b.T is not None]
    if not ok:
        raise ValueError(f"no torch schedule runs problem {problem.name!r} on D = {D} devices")
    best = min(ok, key=lambda b: b.T)  # type: ignore[arg-type,return-value]
    if best.peak is None:
        raise ValueError(f"problem {problem.name!r} has no memory figures, so the memory of "
                         f"torch's fastest schedule ({best.schedule}) is unknown")
    return float(best.peak), best


def torch_seed_plans(space: ChunkSpace) -> list[ChunkPlan]:
    """The equal plans of torch's schedules of the space's layout at every ``M`` torch
    accepts, made split or unsplit as the space is (docs/CHUNK-SCHEDULES.md §9)."""
    from ...chunk_torch import torch_plan
    from ...torch_schedules import ScheduleShapeError, check, schedule_info
    from ...torch_schedules.orders import TORCH_SCHEDULES

    D, B, v = space.D, space.B, space.v
    out: list[ChunkPlan] = []
    for name in TORCH_SCHEDULES:
        info = schedule_info(name)
        fits = (info.layout == space.layout or
                (info.layout == "loop" and space.layout == "one"))  # loop v=1 is one
        if not fits:
            continue
        vv = None if info.layout == "one" else (v if info.layout == "loop" else 2)
        for M in _divisors(B):
            try:
                check(info.name, D, M, vv)
                plan = torch_plan(info.name, D, M, space.layers, B, space.mode)
            except (ScheduleShapeError, UmpipeError):
                continue
            if plan.layout != space.layout:
                plan = plan.replace(layout=space.layout)
            m = B // M
            if plan.split and not space.split:
                plan = plan.replace(split=False)
            elif space.split and not plan.split:
                plan = plan.replace(split=True, w_caps=tuple(d * m for d in range(D)))
            out.append(space.canonical(plan))
    return out
