"""A planner over chunk plans: layout, layer partition, split, and per chunk the microbatch
partitions, per device the caps (docs/CHUNK-SCHEDULES.md §9, "Searching chunk plans").

:class:`ChunkSearch` plans a per-layer problem on ``D`` devices. A *space*
(:class:`~umpipe_bench.chunk_codec.ChunkSpace`) fixes the layout (``one``; ``loop`` with
``v = 2..4`` where ``v D`` chunks fit the layers; ``v``), the layers of every chunk, the mode
and whether the backward is split (only where the problem has split-backward costs); within a
space a genetic algorithm searches every chunk's forward, backward and weight-gradient
partitions, the per-device caps and ``w_caps``, the group and the lags, its whole population
evaluated at once by :class:`..evaluation.chunk_objective.ChunkObjective` (numba).

1. **Torch's baselines.** :func:`umpipe_bench.torch_schedules.best.schedule_table` (the exact
   search of ``umpipe-bench schedules``) gives every torch schedule's best ``v``, ``M`` and
   contiguous layer partition within the memory cap.
2. **Initial spaces.** For each layout and split, the partitions those schedules chose for
   that many chunks, the balanced one (layer counts) and the one that balances the layers'
   work. Each space's population starts with the equal plans of the torch schedules of its
   layout at every ``M`` torch accepts (:func:`umpipe_bench.chunk_torch.torch_plan`: exact
   for gpipe, 1f1b, interleaved-1f1b and zb1p; the closest plans for looped-bfs, zbv and
   dualpipev), turned split or unsplit as the space is, then mutated copies of them and
   random rows. So the best reproduced torch schedule that fits is evaluated, bit for bit, and
   the result is never slower than it.
3. **Generations.** Tournament selection; crossover per chunk row (each chunk's forward,
   backward and weight-gradient cut bits come from one parent or the other, independently:
   the dual chromosome, row by row) and per device gene (caps, ``w_caps``), lags per chunk,
   the group from either parent; mutation flips cut bits, shifts a microbatch boundary by a
   sample, copies one chunk's partition to another, and redraws caps, ``w_caps``, the group
   and lags (near the old value, anywhere, or no cap); the best distinct individuals survive.
   Only offspring that differ from their parent are evaluated.
4. **Outer moves.** ``live`` spaces are searched at a time, ``epoch`` generations each in
   turn; then the spaces are ranked by their best ``T``, the worst make room, and the best
   two spawn a neighbouring partition (one layer moved across a chunk boundary, a space not
   searched before), whose population is the parent's, evaluated in the new space.

The budget (evaluations, generations, seconds: the first reached stops) is the planners'
:class:`..search.base.Budget`, checked before every generation against its worst case, as
:class:`..search.loop.SearchLoop` does. Same seed and evaluation budget, same plan.

This module imports no torch (the baselines' lists import it when first called).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ...chunk_codec import ChunkGenomes, ChunkSpace
from ...chunkplan import ChunkPlan
from ...errors import InternalError, MemoryCapError, UmpipeError
from ...layout import balanced_counts
from ...plan import MODES
from ...problem import Problem
from ...schema import check_seed
from ..evaluation.chunk_objective import ChunkObjective
from ..search.base import Budget, PlannerError
from ..search.history import History
from ..search.loop import Termination
from ..search.settings import Setting, SettingsTable

__all__ = ["CHUNK_SEARCH_SETTINGS", "ChunkSearch", "ChunkSearchResult", "TorchBaseline",
           "layout_options", "work_balanced_counts"]

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

    def to_dict(self) -> dict[str, Any]:
        return {"schedule": self.schedule, "exact": self.exact, "T": self.T, "v": self.v,
                "M": self.M, "partition": None if self.counts is None else list(self.counts),
                "reason": self.reason or None}


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
    settings: dict[str, Any] = field(default_factory=dict)

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


class ChunkSearch:
    """The chunk-plan planner (module docstring). Settings: :data:`CHUNK_SEARCH_SETTINGS`."""

    name: ClassVar[str] = "chunk-search"
    default_budget: ClassVar[str] = "evals:200000"
    defaults: ClassVar[SettingsTable] = CHUNK_SEARCH_SETTINGS
    #: Seconds between progress-bar refreshes.
    PROGRESS_EVERY: ClassVar[float] = 0.25

    def __init__(self, **settings: Any) -> None:
        self.settings = dict(settings)
        s = CHUNK_SEARCH_SETTINGS.resolve(self.name, settings)
        if not 1 <= s["elites"] < s["population"]:
            raise PlannerError(f"planner {self.name!r}: elites must be in 1..population-1, got "
                               f"elites={s['elites']}, population={s['population']}")
        words = tuple(w.strip() for w in str(s["layouts"]).split(",") if w.strip())
        bad = [w for w in words if w not in LAYOUTS]
        if bad or not words:
            raise PlannerError(f"planner {self.name!r}: layouts must be a comma-separated "
                               f"subset of one, loop, v, got {s['layouts']!r}")
        s["layouts"] = ",".join(w for w in LAYOUTS if w in words)
        self.config = s

    # ------------------------------------------------------------------ the run
    def plan(self, problem: Problem, D: int, *, mode: str = "stash",
             budget: str | Budget | None = None, seed: int | None = 0,
             memory_cap: float | None = None, progress: bool = False) -> ChunkSearchResult:
        """The best chunk plan found for ``problem`` (its stages are the layers) on ``D``
        devices; ``memory_cap``: bytes per device (default: the problem's capacities)."""
        t0 = time.perf_counter()
        s = self.config
        if mode not in MODES:
            raise PlannerError(f"mode must be one of {MODES}, got {mode!r}")
        seed = check_seed(seed, f"planner {self.name!r}", PlannerError, allow_none=True)
        L = problem.S
        if isinstance(D, bool) or not isinstance(D, int) or not 1 <= D <= L:
            raise PlannerError(f"planner {self.name!r}: devices D must be in 1..{L} (the "
                               f"problem's layers), got {D!r}")
        if s["split"] == "yes" and not problem.has_split_backward:
            raise PlannerError(f"planner {self.name!r}: split=yes needs split-backward costs; "
                               f"problem {problem.name!r} has none (ibwd, ribwd, wbwd)")
        b = Budget.parse(budget if budget is not None else self.default_budget)
        termination = Termination(b, self.name)
        layouts = layout_options(L, D, tuple(s["layouts"].split(",")))
        if not layouts:
            raise PlannerError(f"planner {self.name!r}: no layout of {s['layouts']} fits "
                               f"{L} layers on D = {D} devices")
        splits = {"auto": [False, True] if problem.has_split_backward else [False],
                  "yes": [True], "no": [False]}[s["split"]]
        cap = self._capacity(problem, memory_cap)
        rng = np.random.default_rng(seed)
        run = _Run(self, problem, D, mode, cap, termination, rng, progress, t0)
        baselines = run.baselines()
        run.search(layouts, splits, baselines)
        res = run.result(baselines)
        res.seed = seed
        res.wall_time = time.perf_counter() - t0
        return res

    @staticmethod
    def _capacity(problem: Problem, memory_cap: float | None) -> float | None:
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


class _Run:
    """The state of one :meth:`ChunkSearch.plan` call."""

    def __init__(self, owner: ChunkSearch, problem: Problem, D: int, mode: str,
                 cap: float | None, termination: Termination, rng: np.random.Generator,
                 progress: bool, t0: float) -> None:
        self.owner, self.s = owner, owner.config
        self.problem, self.D, self.mode, self.cap = problem, D, mode, cap
        self.termination, self.rng, self.t0 = termination, rng, t0
        self.evaluations = 0
        self.generations = 0
        self.history = History()
        self.best_T = math.inf
        self.best: tuple[_Space, ChunkGenomes] | None = None
        self.start_time = math.inf
        self.visited: dict[ChunkSpace, _Space] = {}
        self.bar: Any = None
        self._shown = 0
        self._last = 0.0
        if progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=termination.budget.evaluations, desc=owner.name,
                            unit="eval", leave=False)

    # ------------------------------------------------------------------ budget
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def reached(self, next_cost: int) -> bool:
        return self.termination.reached(self.evaluations, self.generations, self.elapsed(),
                                        next_cost)

    def evaluate(self, sp: _Space, genomes: ChunkGenomes) -> np.ndarray:
        n = len(genomes)
        capn = self.termination.budget.evaluations
        if capn is not None and self.evaluations + n > capn:
            raise InternalError(f"chunk search: {n} more evaluations would exceed the budget "
                                f"evals:{capn} ({self.evaluations} done)")
        if n == 0:
            return np.zeros(0)
        self.evaluations += n
        T = np.asarray(sp.objective.evaluate(genomes), dtype=np.float64)
        i = int(np.argmin(T))
        if T[i] < self.best_T:
            self.best_T = float(T[i])
            self.best = (sp, genomes.row(i).copy())
        if self.bar is not None and time.perf_counter() - self._last >= self.owner.PROGRESS_EVERY:
            self.bar.update(self.evaluations - self._shown)
            self.bar.set_postfix(best=f"{self.best_T:.6g}", spaces=len(self.visited),
                                 refresh=False)
            self._shown, self._last = self.evaluations, time.perf_counter()
        return T

    def record(self) -> None:
        self.history.append(self.generations, self.evaluations, self.elapsed(), self.best_T)

    # ------------------------------------------------------------------ baselines
    def baselines(self) -> list[TorchBaseline]:
        from ...chunk_torch import REPRODUCED
        from ...torch_schedules.best import schedule_table

        key = (self.problem.digest(split=True), self.problem.name, self.D, self.mode, self.cap)
        if key in _BASELINES:
            return list(_BASELINES[key])
        rows = schedule_table(self.problem, self.D, self.mode, self.cap)
        out = []
        for r in rows:
            c = r.choice
            if c is None:
                out.append(TorchBaseline(r.schedule, r.schedule in REPRODUCED, None,
                                         reason=r.reason))
            else:
                out.append(TorchBaseline(r.schedule, r.schedule in REPRODUCED, float(c.T), c.v,
                                         c.M, tuple(c.counts)))
        if len(_BASELINES) >= 64:
            _BASELINES.pop(next(iter(_BASELINES)))
        _BASELINES[key] = tuple(out)
        return out

    # ------------------------------------------------------------------ spaces and seeds
    def make_space(self, layout: str, counts: tuple[int, ...], split: bool) -> _Space:
        space = ChunkSpace(self.D, layout, counts, self.problem.B, self.mode, split)
        obj = ChunkObjective(self.problem, space, self.cap, threads=int(self.s["threads"]))
        sp = _Space(space, obj, len(self.visited))
        self.visited[space] = sp
        return sp

    def seed_plans(self, space: ChunkSpace) -> list[ChunkPlan]:
        """The equal plans of torch's schedules of the space's layout at every ``M`` torch
        accepts, made split or unsplit as the space is (module docstring, step 2)."""
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

    def fill(self, sp: _Space, want: int) -> ChunkGenomes:
        """``want`` new rows for a space: half mutated copies of its population (when it has
        one), the rest random."""
        parts: list[ChunkGenomes] = []
        k_mut = want // 2 if sp.pop is not None and len(sp.T) else 0
        if k_mut:
            pick = self.rng.integers(0, len(sp.T), size=k_mut)
            parts.append(self.mutate(sp.space, _take(sp.pop, pick), np.ones(k_mut, bool),
                                     strength=2.0))
        if want - k_mut:
            parts.append(sp.space.random(self.rng, want - k_mut))
        pop = ChunkGenomes.concat(parts) if len(parts) > 1 else parts[0]
        return _stash_tied(sp.space, pop)

    def search(self, layouts: list[tuple[str, int]], splits: list[bool],
               baselines: list[TorchBaseline]) -> None:
        L, D = self.problem.S, self.D
        tb = self.problem.tables()
        B = self.problem.B
        work = np.asarray(tb.fwd)[:, B] + np.asarray(tb.backward(self.mode))[:, B]
        chosen: dict[int, list[tuple[int, ...]]] = {}
        for base in baselines:
            if base.counts is not None:
                chosen.setdefault(len(base.counts), [])
                if base.counts not in chosen[len(base.counts)]:
                    chosen[len(base.counts)].append(base.counts)
        spaces: list[tuple[_Space, ChunkGenomes]] = []
        for layout, v in layouts:
            C = v * D if layout != "one" else D
            cands = list(chosen.get(C, []))
            for counts in (balanced_counts(L, C), work_balanced_counts(work, C)):
                if counts not in cands:
                    cands.append(counts)
            for split in splits:
                for counts in cands:
                    sp = self.make_space(layout, counts, split)
                    seeds = sp.space.encode(self.seed_plans(sp.space))
                    spaces.append((sp, seeds))
        # every seed first (the guarantee), then the rest of each population
        nseed = sum(len(_unique(g)) for _, g in spaces)
        capn = self.termination.budget.evaluations
        if capn is not None and capn < nseed:
            raise PlannerError(f"planner {self.owner.name!r}: budget evals:{capn} is too small "
                               f"for problem {self.problem.name!r} on D = {D}: the seeded "
                               f"equal plans of torch's schedules alone are {nseed} "
                               f"evaluations; use at least evals:{nseed}")
        P = int(self.s["population"])
        for sp, seeds in spaces:
            u = _unique(seeds)
            if len(u):
                sp.set_population(u, self.evaluate(sp, u))
        self.start_time = self.best_T
        for sp, _ in spaces:
            if sp.pop is not None and len(sp.T) >= P:
                keep = np.argsort(sp.T, kind="stable")[:P]
                sp.set_population(_take(sp.pop, keep), sp.T[keep])
                continue
            want = min(P - len(sp.T), self._room())
            if want <= 0 or self.reached(want):
                continue
            extra = self.fill(sp, want)
            T = self.evaluate(sp, extra)
            if sp.pop is None:
                sp.set_population(extra, T)
            else:
                sp.set_population(_stash_tied(sp.space, ChunkGenomes.concat([sp.pop, extra])),
                                  np.concatenate([sp.T, T]))
        self.record()
        live = sorted((sp for sp, _ in spaces if sp.pop is not None and len(sp.T) >= 2),
                      key=lambda sp: (sp.best_T, sp.order))[: int(self.s["live"])]
        self.loop(live)
        if self.bar is not None:
            self.bar.update(self.evaluations - self._shown)
            self.bar.close()

    def _room(self) -> int:
        capn = self.termination.budget.evaluations
        return int(self.s["population"]) if capn is None else max(0, capn - self.evaluations)

    # ------------------------------------------------------------------ generations
    def loop(self, live: list[_Space]) -> None:
        P, E, G = int(self.s["population"]), int(self.s["elites"]), int(self.s["epoch"])
        while live:
            for sp in list(live):
                for _ in range(G):
                    n = len(sp.T) - min(E, len(sp.T) - 1)
                    if self.reached(n):
                        return
                    self.generation(sp)
            live.sort(key=lambda sp: (sp.best_T, sp.order))
            keep = max(1, int(self.s["live"]) - 2)
            live = live[:keep]
            for parent in list(live[:2]):
                if self.reached(P):
                    return
                child = self.neighbour(parent)
                if child is None:
                    continue
                assert parent.pop is not None
                pop = parent.pop.copy()
                child.set_population(pop, self.evaluate(child, pop))
                live.append(child)
                self.record()

    def generation(self, sp: _Space) -> None:
        assert sp.pop is not None
        pop, T = sp.pop, sp.T
        N = len(T)
        E = min(int(self.s["elites"]), N - 1)
        n = N - E
        elite = _elite_rows(pop, T, E)
        parents = self.select(T, n)
        kids = _take(pop, parents)
        kids = self.crossover(sp.space, kids)
        mut = self.rng.random(n) < float(self.s["mutpb"])
        kids = self.mutate(sp.space, kids, mut)
        kids = _stash_tied(sp.space, kids)
        changed = _differs(kids, _take(pop, parents))
        Tk = T[parents].copy()
        idx = np.flatnonzero(changed)
        if len(idx):
            Tk[idx] = self.evaluate(sp, _take(kids, idx))
        newpop = ChunkGenomes.concat([_take(pop, elite), kids])
        newpop = _stash_tied(sp.space, newpop)
        sp.set_population(newpop, np.concatenate([T[elite], Tk]))
        sp.generations += 1
        self.generations += 1
        self.record()

    def select(self, T: np.ndarray, n: int) -> np.ndarray:
        k = int(self.s["tournament"])
        idx = self.rng.integers(0, len(T), size=(n, k))
        return idx[np.arange(n), np.argmin(T[idx], axis=1)]

    def crossover(self, space: ChunkSpace, kids: ChunkGenomes) -> ChunkGenomes:
        """Pairs ``(0, 1), (2, 3), ...`` mate with probability ``cxpb``: each chunk row of each
        chromosome, each device's cap and ``w_cap``, each chunk's lags and the group come from
        either parent (uniform, per row)."""
        n = len(kids)
        npair = n // 2
        if npair == 0:
            return kids
        g = kids.copy()
        mate = self.rng.random(npair) < float(self.s["cxpb"])
        a = np.flatnonzero(mate) * 2
        if len(a) == 0:
            return g
        b = a + 1
        C, D = space.C, space.D
        fields = ["fwd", *(["bwd"] if space.mode == "recompute" else []),
                  *(["wgt", "w_caps"] if space.split else []), "caps", "fwd_lag", "bwd_lag",
                  "group"]
        for name in fields:
            x = getattr(g, name)
            width = {"caps": D, "w_caps": D, "group": 0}.get(name, C)
            if width:
                swap = self.rng.random((len(a), width)) < 0.5
                xa, xb = x[a].copy(), x[b].copy()
                if x.ndim == 3:
                    m = swap[:, :, None]
                else:
                    m = swap
                x[a] = np.where(m, xb, xa)
                x[b] = np.where(m, xa, xb)
            else:
                swap = self.rng.random(len(a)) < 0.5
                xa, xb = x[a].copy(), x[b].copy()
                x[a] = np.where(swap, xb, xa)
                x[b] = np.where(swap, xa, xb)
        return g

    def mutate(self, space: ChunkSpace, kids: ChunkGenomes, which: np.ndarray,
               strength: float = 1.0) -> ChunkGenomes:
        """Mutate the rows where ``which`` holds (module docstring, step 3)."""
        g = kids.copy()
        rows = np.flatnonzero(which)
        if len(rows) == 0:
            return g
        rng, s = self.rng, self.s
        n, C, D, B = len(rows), space.C, space.D, space.B
        L = B - 1
        K = space.no_cap
        chroms = ["fwd"] + (["bwd"] if space.mode == "recompute" else []) \
            + (["wgt"] if space.split else [])
        if L > 0:
            for name in chroms:
                x = getattr(g, name)
                sub = x[rows]
                flip = rng.random(sub.shape) < min(1.0, strength * float(s["flip_rate"])
                                                   / (C * L))
                sub ^= flip.astype(np.uint8)
                # shifts: swap the bits at i and i+1 of one row
                nshift = rng.poisson(strength * float(s["shift_rate"]), size=n)
                for r in np.flatnonzero(nshift):
                    for _ in range(int(nshift[r])):
                        c = int(rng.integers(0, C))
                        if L >= 2:
                            i = int(rng.integers(0, L - 1))
                            sub[r, c, i], sub[r, c, i + 1] = sub[r, c, i + 1], sub[r, c, i]
                # copy one chunk's row to another
                cp = rng.random(n) < 0.1 * strength
                for r in np.flatnonzero(cp):
                    c1, c2 = rng.integers(0, C, size=2)
                    sub[r, c2] = sub[r, c1]
                x[rows] = sub
        # caps and w_caps: near the old value, anywhere, or no cap
        for name, lo in (("caps", 1), ("w_caps", 0)) if space.split else (("caps", 1),):
            x = getattr(g, name)
            sub = x[rows].copy()
            hit = rng.random((n, D)) < min(1.0, strength * float(s["cap_rate"]) / D)
            u = rng.random((n, D))
            near = np.rint(np.maximum(sub, 1) * np.exp(rng.uniform(-0.7, 0.7, (n, D)))
                           + rng.integers(-1, 2, (n, D)))
            anywhere = rng.integers(lo, K + 1, (n, D))
            new = np.where(u < 0.1, K, np.where(u < 0.6, near, anywhere))
            new = np.clip(new, lo, K).astype(np.int64)
            x[rows] = np.where(hit, new, sub)
        # the group: near, anywhere, one round
        gr = g.group[rows].copy()
        hit = rng.random(n) < 0.15 * strength
        u = rng.random(n)
        near = np.rint(gr * np.exp(rng.uniform(-0.7, 0.7, n)))
        new = np.where(u < 0.2, B, np.where(u < 0.6, near, rng.integers(1, B + 1, n)))
        g.group[rows] = np.where(hit, np.clip(new, 1, B), gr).astype(np.int64)
        # lags: per chunk, near, anywhere in 0..B, or none
        for name in ("fwd_lag", "bwd_lag"):
            x = getattr(g, name)
            sub = x[rows].copy()
            hit = rng.random((n, C)) < min(1.0, 0.5 * strength / C)
            u = rng.random((n, C))
            step = rng.integers(1, max(2, B // 4 + 1), (n, C)) * rng.choice([-1, 1], (n, C))
            new = np.where(u < 0.3, 0, np.where(u < 0.7, sub + step,
                                                 rng.integers(0, B + 1, (n, C))))
            x[rows] = np.where(hit, np.clip(new, 0, space.max_lag), sub).astype(np.int64)
        return g

    # ------------------------------------------------------------------ outer moves
    def neighbour(self, parent: _Space) -> _Space | None:
        """A space one layer away from ``parent``'s partition (same layout and split) not
        searched before, or None."""
        sp = parent.space
        counts = list(sp.layers)
        moves = [(c, d) for c in range(len(counts)) for d in (c - 1, c + 1)
                 if 0 <= d < len(counts) and counts[c] > 1]
        order = self.rng.permutation(len(moves)) if moves else []
        for k in order:
            c, d = moves[int(k)]
            new = list(counts)
            new[c] -= 1
            new[d] += 1
            space = ChunkSpace(sp.D, sp.layout, tuple(new), sp.B, sp.mode, sp.split)
            if space not in self.visited:
                return self.make_space(sp.layout, tuple(new), sp.split)
        return None

    # ------------------------------------------------------------------ result
    def result(self, baselines: list[TorchBaseline]) -> ChunkSearchResult:
        from ...chunk_torch import simulate_plan

        self.record()
        if self.best is None or not math.isfinite(self.best_T):
            raise MemoryCapError(
                f"problem {self.problem.name!r} ({self.mode}) on D = {self.D}: no chunk plan "
                "found fits the memory cap"
                + (f" of {self.cap:.0f} bytes" if self.cap is not None else ""))
        sp, row = self.best
        plan = sp.objective.decode(row, 0)
        tl = simulate_plan(self.problem, plan)
        if tl.iteration_time != self.best_T:
            raise InternalError(f"chunk search: the kernel's T {self.best_T!r} is not the "
                                f"simulator's {tl.iteration_time!r} for {plan.describe()}")
        plan = dataclasses.replace(plan, meta={
            "planner": self.owner.name, "problem": self.problem.name,
            "problem_digest": self.problem.digest(split=True, capacities=False),
            "predicted_time": self.best_T})
        return ChunkSearchResult(
            plan=plan, iteration_time=self.best_T,
            peak_memory=None if tl.peak_memory is None else list(tl.peak_memory),
            baselines=baselines, evaluations=self.evaluations, generations=self.generations,
            spaces=len(self.visited), start_time=self.start_time, memory_cap=self.cap,
            history=self.history, settings=dict(self.s))


# ---------------------------------------------------------------------- genome helpers
def _take(g: ChunkGenomes, idx: np.ndarray) -> ChunkGenomes:
    """Rows ``idx`` as a new batch (copies; ``bwd`` stays ``fwd`` when it was)."""
    idx = np.asarray(idx, dtype=np.int64)
    out = {f: getattr(g, f)[idx] for f in ChunkGenomes._FIELDS}
    if g.bwd is g.fwd:
        out["bwd"] = out["fwd"]
    return ChunkGenomes(**out)


def _stash_tied(space: ChunkSpace, g: ChunkGenomes) -> ChunkGenomes:
    """In stash mode the backward chromosome is the forward one (the same array)."""
    if space.mode == "stash" and g.bwd is not g.fwd:
        return dataclasses.replace(g, bwd=g.fwd)
    return g


def _keys(g: ChunkGenomes) -> list[bytes]:
    N = len(g)
    parts = [np.ascontiguousarray(getattr(g, f)).reshape(N, -1).view(np.uint8)
             for f in ChunkGenomes._FIELDS]
    flat = np.concatenate(parts, axis=1)
    return [flat[i].tobytes() for i in range(N)]


def _unique(g: ChunkGenomes) -> ChunkGenomes:
    """The batch without repeated rows (first kept)."""
    seen: set[bytes] = set()
    keep = []
    for i, k in enumerate(_keys(g)):
        if k not in seen:
            seen.add(k)
            keep.append(i)
    return _take(g, np.array(keep, dtype=np.int64))


def _elite_rows(g: ChunkGenomes, T: np.ndarray, E: int) -> np.ndarray:
    """The ``E`` best distinct rows (stable order by T); repeats fill in when too few."""
    order = np.argsort(T, kind="stable")
    keys = _keys(g)
    seen: set[bytes] = set()
    out: list[int] = []
    for i in order:
        if keys[i] not in seen:
            seen.add(keys[i])
            out.append(int(i))
            if len(out) == E:
                break
    for i in order:
        if len(out) == E:
            break
        if int(i) not in out:
            out.append(int(i))
    return np.array(out, dtype=np.int64)


def _differs(a: ChunkGenomes, b: ChunkGenomes) -> np.ndarray:
    N = len(a)
    out = np.zeros(N, dtype=bool)
    for f in ChunkGenomes._FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        out |= np.any((x != y).reshape(N, -1), axis=1)
    return out
