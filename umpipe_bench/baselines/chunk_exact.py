"""``chunk-exact``: the true optimum of tiny chunk-plan problems with one chunk per device
(docs/CHUNK-SCHEDULES.md §9, "The exact optimum").

Every canonical chunk plan (:meth:`~umpipe_bench.chunk_codec.ChunkSpace.canonical`) of the
layout ``one`` is enumerated, on ``D`` devices, for a per-layer problem:

* every contiguous partition of the ``L`` layers into ``D`` chunks, ``C(L-1, D-1)``;
* the backward unsplit and, where the problem has split-backward costs, split;
* per chunk every forward partition; in recompute mode every backward partition beside it
  (stash: ``Q = P``); with a split backward every weight-gradient partition, a coarsening of
  the backward one (a mask over its cuts: ``3^(B-1)`` forward-and-mask pairs per chunk in
  stash mode, ``2^(B-1) 3^(B-1)`` triples in recompute);
* per device every cap in ``1..B`` (``B`` holds every sample: no cap) and, split, every
  ``w_cap`` in ``0..B`` (``B``: no cap).

``group`` and the lags order a device's chunks against each other; with one chunk per device
they change no list, so this is every plan of the layout's family, and the minimum is its
optimum under the model (the simulator, devices' memory capacities included: a plan over a
capacity counts as infinitely slow). Layouts with several chunks per device are not
enumerated: their lags are unbounded integers, and even bounded to ``0..B`` they multiply the
count by ``(B+1)^(2C)``. Ties go to the first plan in enumeration order (partitions
lexicographic, unsplit before split, then the genome rows in mixed-radix order, chunk 0's
chromosomes and device 0's caps most significant).

Rows go through the compiled evaluator (:class:`~umpipe_bench.planners.evaluation.
chunk_objective.ChunkObjective`, bit-identical to the Python path) in blocks. The search is
exhaustive or refused: a problem that needs more than ``max_evaluations`` (default ``2^22``)
or the budget's evaluations, whichever is smaller, is refused with a :class:`PlannerError`
naming the count. Torch's baselines are those of :class:`~umpipe_bench.planners.algorithms.
chunk_search.ChunkSearch`, so ``plan --devices D --planner chunk-exact`` reports the same
speedups.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any, ClassVar

import numpy as np

from ..chunk_codec import ChunkGenomes, ChunkSpace
from ..errors import MemoryCapError, Terminated, TimeUp
from ..planners.algorithms._chunk_search_settings import (
    ChunkSearchResult,
    check_chunk_run,
    device_capacity,
    torch_baselines,
)
from ..planners.evaluation.chunk_objective import ChunkObjective
from ..planners.search.base import Budget, PlannerError
from ..planners.search.settings import Setting, SettingsTable
from ..problem import Problem

__all__ = ["ChunkExact", "chunk_options", "layer_partitions"]

#: rows evaluated per call of the compiled evaluator
_BLOCK = 1 << 15


def layer_partitions(L: int, D: int) -> list[tuple[int, ...]]:
    """Every composition of ``L`` layers into ``D`` non-empty contiguous chunks, in
    lexicographic order."""
    out = []
    for cuts in itertools.combinations(range(1, L), D - 1):
        edges = (0, *cuts, L)
        out.append(tuple(b - a for a, b in itertools.pairwise(edges)))
    return out


def chunk_options(B: int, mode: str, split: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every canonical (forward, backward, weight-gradient mask) of one chunk as cut-bit rows
    ``[n, B-1]`` each: stash ties the backward to the forward; the mask is all ones without
    a split, else every subset of the backward's cuts (docs of :mod:`umpipe_bench.
    chunk_codec`)."""
    bits = np.array(list(itertools.product((0, 1), repeat=B - 1)), np.uint8).reshape(-1, B - 1)
    fwd, bwd, wgt = [], [], []
    for f in bits:
        for b in ([f] if mode == "stash" else bits):
            if split:
                on = np.flatnonzero(b)
                for sub in itertools.product((0, 1), repeat=len(on)):
                    m = np.zeros(B - 1, np.uint8)
                    m[on] = sub
                    fwd.append(f)
                    bwd.append(b)
                    wgt.append(m)
            else:
                fwd.append(f)
                bwd.append(b)
                wgt.append(np.ones(B - 1, np.uint8))
    shape = (-1, B - 1)
    return (np.array(fwd, np.uint8).reshape(shape), np.array(bwd, np.uint8).reshape(shape),
            np.array(wgt, np.uint8).reshape(shape))


class ChunkExact:
    """Exhaustive optimum of tiny chunk-plan problems, layout ``one`` (module docstring).
    Settings: ``max_evaluations``, ``split``."""

    name: ClassVar[str] = "chunk-exact"
    default_budget: ClassVar[str] = "evals:4194304"
    defaults: ClassVar[SettingsTable] = SettingsTable(
        Setting("max_evaluations", int, 1 << 22, "refuse a problem whose enumeration needs "
                "more evaluations (the evaluation budget caps it too)", low=1),
        Setting("split", str, "auto", "auto: split and unsplit backwards where the problem "
                "has split-backward costs, else unsplit; yes: split only; no: unsplit only",
                choices=("auto", "yes", "no")),
    )
    #: Seconds between progress-bar refreshes.
    PROGRESS_EVERY: ClassVar[float] = 0.25

    def __init__(self, **settings: Any) -> None:
        self.settings = dict(settings)
        self.config = self.defaults.resolve(self.name, settings)

    # ------------------------------------------------------------------ sizes
    def spaces(self, problem: Problem, D: int, mode: str) -> list[ChunkSpace]:
        """The spaces enumerated, in enumeration order."""
        splits = {"auto": [False, True] if problem.has_split_backward else [False],
                  "yes": [True], "no": [False]}[self.config["split"]]
        return [ChunkSpace(D, "one", counts, problem.B, mode, split)
                for counts in layer_partitions(problem.S, D) for split in splits]

    @staticmethod
    def count(space: ChunkSpace) -> int:
        """Rows enumerated in ``space``."""
        B, C, D = space.B, space.C, space.D
        per_chunk = (3 ** (B - 1) if space.split else 2 ** (B - 1)) * (
            1 if space.mode == "stash" else 2 ** (B - 1))
        return per_chunk ** C * B ** D * ((B + 1) ** D if space.split else 1)

    # ------------------------------------------------------------------ the run
    def plan(self, problem: Problem, D: int, *, mode: str = "stash",
             budget: str | Budget | None = None, seed: int | None = 0,
             memory_cap: float | None = None, progress: bool = False,
             started: float | None = None) -> ChunkSearchResult:
        """The optimum of layout ``one`` (ties: the first enumerated); ``seed`` is accepted
        and ignored (the search is deterministic). A SIGINT or SIGTERM ends it with the best
        plan enumerated so far, not proven optimal (``stopped`` says so); so does a time budget
        (``secs:X``), checked before every block."""
        t0 = time.perf_counter() if started is None else float(started)
        check_chunk_run(self.name, problem, D, mode, self.config["split"])
        L = problem.S
        b = Budget.parse(budget if budget is not None else self.default_budget)
        limit = int(self.config["max_evaluations"])
        if b.evaluations is not None:
            limit = min(limit, int(b.evaluations))
        spaces = self.spaces(problem, D, mode)
        need = sum(self.count(sp) for sp in spaces)
        if need > limit:
            raise PlannerError(
                f"planner {self.name!r} refuses problem {problem.name!r} (L={L}, B={problem.B}, "
                f"D={D}, {mode}): its {len(spaces)} spaces need {need:,} evaluations, over the "
                f"limit of {limit:,} (the smaller of max_evaluations and the evaluation "
                "budget); use chunk-search, or raise max_evaluations and the budget")
        cap = device_capacity(problem, memory_cap)
        baselines = torch_baselines(problem, D, mode, cap)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=need, desc=self.name, unit="eval", leave=False)
        best: tuple[float, ChunkObjective, ChunkGenomes] | None = None  # T, its space's, row
        start = math.inf
        evals = 0
        interrupted: BaseException | None = None
        last = 0.0
        try:
            for sp in spaces:
                obj = ChunkObjective(problem, sp, cap)
                for g in self._rows(sp):
                    if (b.seconds is not None and evals
                            and time.perf_counter() - t0 >= b.seconds):
                        raise TimeUp(f"time budget secs:{b.seconds:g} reached")
                    T = obj.evaluate(g)
                    if evals == 0:
                        start = float(T[0])
                    evals += len(g)
                    i = int(np.argmin(T))
                    if best is None or T[i] < best[0]:
                        best = (float(T[i]), obj, g.row(i).copy())
                    if bar is not None and time.perf_counter() - last >= self.PROGRESS_EVERY:
                        bar.n = evals
                        bar.set_postfix(best=f"{best[0]:.6g}", refresh=False)
                        bar.refresh()
                        last = time.perf_counter()
        except (KeyboardInterrupt, Terminated, TimeUp) as exc:
            if best is None:
                raise
            interrupted = exc
        finally:
            if bar is not None:
                bar.close()
        assert best is not None
        T_best, obj, row = best
        if not math.isfinite(T_best):
            raise MemoryCapError(f"planner {self.name!r}: no chunk plan of problem "
                                 f"{problem.name!r} on D = {D} devices ({mode}) fits the "
                                 "memory capacity")
        plan = obj.decode(row)
        _, peak = obj.evaluator.plan_time(plan)
        res = ChunkSearchResult(
            plan=plan, iteration_time=T_best,
            peak_memory=[float(x) for x in peak] if obj.evaluator.has_memory else None,
            baselines=baselines, evaluations=evals, generations=0, spaces=len(spaces),
            seed=seed, start_time=start, memory_cap=cap,
            settings={**self.config, "layouts": "one"}, proven_optimal=interrupted is None)
        if interrupted is not None:
            if not isinstance(interrupted, TimeUp):
                res.interrupted = interrupted  # a signal: the command exits 130 / 143
            res.stopped = (f"{str(interrupted) or 'interrupted'} after {evals:,} of {need:,} "
                           "evaluations; the plan is the best enumerated, not proven optimal")
        res.wall_time = time.perf_counter() - t0
        return res

    def _rows(self, sp: ChunkSpace):
        """The space's rows in blocks of :data:`_BLOCK`, in enumeration order."""
        B, C, D = sp.B, sp.C, sp.D
        fwd, bwd, wgt = chunk_options(B, sp.mode, sp.split)
        n = len(fwd)
        caps = np.array(list(itertools.product(range(1, B + 1), repeat=D)), np.int64)
        w_caps = (np.array(list(itertools.product(range(0, B + 1), repeat=D)), np.int64)
                  if sp.split else np.full((1, D), B, np.int64))
        radix = [n] * C + [len(caps), len(w_caps)]
        total = math.prod(radix)
        for lo in range(0, total, _BLOCK):
            idx = np.arange(lo, min(total, lo + _BLOCK), dtype=np.int64)
            digits = np.empty((len(idx), len(radix)), np.int64)
            rest = idx.copy()
            for k in range(len(radix) - 1, -1, -1):
                digits[:, k] = rest % radix[k]
                rest //= radix[k]
            ch = digits[:, :C]
            m = len(idx)
            f = fwd[ch]
            yield ChunkGenomes(
                fwd=f, bwd=f if sp.mode == "stash" else bwd[ch], wgt=wgt[ch],
                caps=caps[digits[:, C]], w_caps=w_caps[digits[:, C + 1]],
                group=np.full(m, B, np.int64), fwd_lag=np.zeros((m, C), np.int64),
                bwd_lag=np.zeros((m, C), np.int64))
