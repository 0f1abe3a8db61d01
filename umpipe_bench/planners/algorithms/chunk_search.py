"""A planner over chunk plans: layout, layer partition, split, and per chunk the microbatch
partitions, per device the caps (docs/CHUNK-SCHEDULES.md §9, "Searching chunk plans").

:class:`ChunkSearch` plans a per-layer problem on ``D`` devices. A *space*
(:class:`~umpipe_bench.chunk_codec.ChunkSpace`) fixes the layout (``one``; ``loop`` with
``v = 2..4`` where ``v D`` chunks fit the layers; ``v``), the layers of every chunk, the mode
and whether the backward is split (only where the problem has split-backward costs); within a
space a genetic algorithm searches every chunk's forward, backward and weight-gradient
partitions, the per-device caps and ``w_caps``, the group and the lags, its whole population
evaluated at once by :class:`..evaluation.chunk_objective.ChunkObjective` (numba).

1. **Torch's baselines**: every torch schedule's best ``v``, ``M`` and layer partition within
   the memory cap (the exact search of ``umpipe-bench schedules``).
2. **Initial spaces**: per layout and split, the partitions those schedules chose, the
   balanced one and the work-balanced one; each population starts with the equal plans of
   the torch schedules of its layout at every ``M`` torch accepts (exact for gpipe, 1f1b,
   interleaved-1f1b and zb1p), then mutated copies and random rows. So the best reproduced
   torch schedule that fits is evaluated, bit for bit, and the result is never slower.
3. **Generations.** Tournament selection, crossover per chunk row of each chromosome (the
   dual chromosome, row by row), per device gene and per chunk lag, mutation, the best
   distinct individuals kept (:mod:`..search.chunk_variation`); only offspring that differ
   from their parent are evaluated.
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
from typing import Any, ClassVar

import numpy as np

from ...chunk_codec import ChunkGenomes, ChunkSpace
from ...chunkplan import ChunkPlan
from ...errors import InternalError, MemoryCapError, Terminated
from ...layout import balanced_counts
from ...problem import Problem
from ...schema import check_seed
from ..evaluation.chunk_objective import ChunkObjective
from ..search.base import Budget, PlannerError
from ..search.chunk_variation import (
    crossover,
    differs,
    elite_rows,
    mutate,
    select,
    stash_tied,
    take,
    unique,
)
from ..search.history import History
from ..search.loop import Termination
from ..search.settings import SettingsTable
from ._chunk_search_settings import (
    CHUNK_SEARCH_SETTINGS,
    LAYOUTS,
    ChunkSearchResult,
    TorchBaseline,
    _Space,
    check_chunk_run,
    device_capacity,
    layout_options,
    torch_baselines,
    torch_seed_plans,
    work_balanced_counts,
)

__all__ = ["CHUNK_SEARCH_SETTINGS", "ChunkSearch", "ChunkSearchResult", "TorchBaseline",
           "layout_options", "work_balanced_counts"]

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
             memory_cap: float | None = None, progress: bool = False,
             started: float | None = None) -> ChunkSearchResult:
        """The best chunk plan found for ``problem`` (its stages are the layers) on ``D``
        devices; ``memory_cap``: bytes per device (default: the problem's capacities);
        ``started``: the ``time.perf_counter()`` a time budget counts from (the command's
        process start, docs/ARCHITECTURE.md "Budgets and signals"; default: now). A SIGINT or
        SIGTERM during the search ends it with the best plan found as the result, the signal
        in ``interrupted`` (during the torch baselines, before any plan, it propagates)."""
        t0 = time.perf_counter() if started is None else float(started)
        s = self.config
        check_chunk_run(self.name, problem, D, mode, s["split"])
        seed = check_seed(seed, f"planner {self.name!r}", PlannerError, allow_none=True)
        L = problem.S
        b = Budget.parse(budget if budget is not None else self.default_budget)
        termination = Termination(b, self.name)
        layouts = layout_options(L, D, tuple(s["layouts"].split(",")))
        if not layouts:
            raise PlannerError(f"planner {self.name!r}: no layout of {s['layouts']} fits "
                               f"{L} layers on D = {D} devices")
        splits = {"auto": [False, True] if problem.has_split_backward else [False],
                  "yes": [True], "no": [False]}[s["split"]]
        cap = device_capacity(problem, memory_cap)
        rng = np.random.default_rng(seed)
        run = _Run(self, problem, D, mode, cap, termination, rng, progress, t0)
        baselines = run.baselines()
        interrupted: BaseException | None = None
        try:
            run.search(layouts, splits, baselines)
        except (KeyboardInterrupt, Terminated) as exc:
            if run.best is None:
                raise
            interrupted = exc
        finally:
            run.close()
        res = run.result(baselines)
        if interrupted is not None:
            res.interrupted = interrupted
            res.stopped = (f"{str(interrupted) or 'interrupted'} after {run.evaluations} "
                           "evaluations; the plan is the best found")
        res.seed = seed
        res.wall_time = time.perf_counter() - t0
        return res



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
        #: (T, space, genome) of the best plan evaluated: one attribute, so a signal between
        #: two stores cannot pair one plan's T with another plan
        self.best: tuple[float, _Space, ChunkGenomes] | None = None
        self.start_time = math.inf
        self.visited: dict[ChunkSpace, _Space] = {}
        self.bar: Any = None
        self._shown = 0
        self._last = 0.0
        if progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=termination.budget.evaluations, desc=owner.name,
                            unit="eval", leave=False)

    @property
    def best_T(self) -> float:
        """T of the best plan evaluated (inf before the first)."""
        return math.inf if self.best is None else self.best[0]

    def close(self) -> None:
        """Close the progress bar."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

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
            self.best = (float(T[i]), sp, genomes.row(i).copy())
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
        """torch's schedules at their best (seconds on 14-16 layers; the bar names each)."""
        def shown(i: int, n: int, name: str) -> None:
            if self.bar is not None:
                self.bar.set_description(f"{self.owner.name}: torch baselines {i + 1}/{n} "
                                         f"({name})")

        out = torch_baselines(self.problem, self.D, self.mode, self.cap, shown)
        if self.bar is not None:
            self.bar.set_description(self.owner.name)
        return out

    # ------------------------------------------------------------------ spaces and seeds
    def make_space(self, layout: str, counts: tuple[int, ...], split: bool) -> _Space:
        space = ChunkSpace(self.D, layout, counts, self.problem.B, self.mode, split)
        obj = ChunkObjective(self.problem, space, self.cap, threads=int(self.s["threads"]))
        sp = _Space(space, obj, len(self.visited))
        self.visited[space] = sp
        return sp

    def seed_plans(self, space: ChunkSpace) -> list[ChunkPlan]:
        return torch_seed_plans(space)

    def fill(self, sp: _Space, want: int) -> ChunkGenomes:
        """``want`` new rows for a space: half mutated copies of its population (when it has
        one), the rest random."""
        parts: list[ChunkGenomes] = []
        k_mut = want // 2 if sp.pop is not None and len(sp.T) else 0
        if k_mut:
            pick = self.rng.integers(0, len(sp.T), size=k_mut)
            parts.append(mutate(self.rng, self.s, sp.space, take(sp.pop, pick),
                                np.ones(k_mut, bool), strength=2.0))
        if want - k_mut:
            parts.append(sp.space.random(self.rng, want - k_mut))
        pop = ChunkGenomes.concat(parts) if len(parts) > 1 else parts[0]
        return stash_tied(sp.space, pop)

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
        nseed = sum(len(unique(g)) for _, g in spaces)
        capn = self.termination.budget.evaluations
        if capn is not None and capn < nseed:
            raise PlannerError(f"planner {self.owner.name!r}: budget evals:{capn} is too small "
                               f"for problem {self.problem.name!r} on D = {D}: the seeded "
                               f"equal plans of torch's schedules alone are {nseed} "
                               f"evaluations; use at least evals:{nseed}")
        P = int(self.s["population"])
        for sp, seeds in spaces:
            u = unique(seeds)
            if len(u):
                sp.set_population(u, self.evaluate(sp, u))
        self.start_time = self.best_T
        for sp, _ in spaces:
            if sp.pop is not None and len(sp.T) >= P:
                keep = np.argsort(sp.T, kind="stable")[:P]
                sp.set_population(take(sp.pop, keep), sp.T[keep])
                continue
            want = min(P - len(sp.T), self._room())
            if want <= 0 or self.reached(want):
                continue
            extra = self.fill(sp, want)
            T = self.evaluate(sp, extra)
            if sp.pop is None:
                sp.set_population(extra, T)
            else:
                sp.set_population(stash_tied(sp.space, ChunkGenomes.concat([sp.pop, extra])),
                                  np.concatenate([sp.T, T]))
        self.record()
        live = sorted((sp for sp, _ in spaces if sp.pop is not None and len(sp.T) >= 2),
                      key=lambda sp: (sp.best_T, sp.order))[: int(self.s["live"])]
        self.loop(live)
        if self.bar is not None:
            self.bar.update(self.evaluations - self._shown)
        self.close()

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
        elite = elite_rows(pop, T, E)
        parents = select(self.rng, T, n, int(self.s["tournament"]))
        kids = take(pop, parents)
        kids = crossover(self.rng, sp.space, kids, float(self.s["cxpb"]))
        mut = self.rng.random(n) < float(self.s["mutpb"])
        kids = mutate(self.rng, self.s, sp.space, kids, mut)
        kids = stash_tied(sp.space, kids)
        changed = differs(kids, take(pop, parents))
        Tk = T[parents].copy()
        idx = np.flatnonzero(changed)
        if len(idx):
            Tk[idx] = self.evaluate(sp, take(kids, idx))
        newpop = ChunkGenomes.concat([take(pop, elite), kids])
        newpop = stash_tied(sp.space, newpop)
        sp.set_population(newpop, np.concatenate([T[elite], Tk]))
        sp.generations += 1
        self.generations += 1
        self.record()

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
        _, sp, row = self.best
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
