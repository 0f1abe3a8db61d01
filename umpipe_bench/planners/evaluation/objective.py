"""What a search planner optimizes: a batch of genomes in, iteration times out (docs/MODEL.md §4).

The search loop (:mod:`..search.loop`) never looks inside a genome: it hands a :class:`Genomes`
batch to ``objective.evaluate`` and counts its rows. A genome is the dual cut-bit chromosome
of docs/MODEL.md §2 (:mod:`.encoding`), plus, for the schedule family (docs/SCHEDULES.md),
per-stage in-flight caps: :class:`FamilyObjective` evaluates those, :class:`CutBitsObjective`
the GPipe recurrence; the loop does not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ...plan import Plan
from ...problem import Problem
from .encoding import bits_to_plan

__all__ = ["CutBitsObjective", "FamilyObjective", "Genomes", "JoinedGenomes", "Objective"]


@dataclass(frozen=True)
class Genomes:
    """A batch of ``N`` genomes: forward and backward cut bits, uint8 ``[N, S, B-1]`` each,
    and optionally per-stage in-flight caps, int64 ``[N, S]`` (docs/SCHEDULES.md; None: no
    cap, the GPipe lists).

    In stash mode ``bwd`` is the same array as ``fwd`` (tied chromosomes, docs/MODEL.md §2).
    ``edp``: when the batch is EDP(M) for ``M`` in this range (uncapped, backward = forward),
    an objective may take their times from the EDP reference scan it shares with the
    baselines (:mod:`.reference`) instead of evaluating them again: the same numbers.
    """

    fwd: np.ndarray
    bwd: np.ndarray
    caps: np.ndarray | None = None
    edp: range | None = None

    def __len__(self) -> int:
        return int(self.fwd.shape[0])

    def rows(self, a: int, b: int) -> Genomes:
        """Genomes ``a..b-1`` as a batch (views, no copy; tied chromosomes stay tied)."""
        f = self.fwd[a:b]
        return Genomes(f, f if self.bwd is self.fwd else self.bwd[a:b],
                       None if self.caps is None else self.caps[a:b],
                       None if self.edp is None else self.edp[a:b])

    def row(self, i: int) -> Genomes:
        """Genome ``i`` as a batch of one (views, no copy)."""
        return self.rows(i, i + 1)

    def copy(self) -> Genomes:
        f = self.fwd.copy()
        return Genomes(f, f if self.bwd is self.fwd else self.bwd.copy(),
                       None if self.caps is None else self.caps.copy(), self.edp)


class JoinedGenomes:
    """Batches one after another as one batch, without copying them together (e.g. the
    offspring of TiDGAP's islands: at S = 128, B = 2048 joining them would copy 262 MB in
    one uninterruptible call). :meth:`rows` within one part is a view of it; across parts,
    the rows are copied (a compiled call's worth, :mod:`.clock`)."""

    def __init__(self, parts: list[Genomes]) -> None:
        self.parts = parts
        self.starts = np.cumsum([0] + [len(g) for g in parts])
        self.edp = None

    def __len__(self) -> int:
        return int(self.starts[-1])

    def rows(self, a: int, b: int) -> Genomes:
        st = self.starts
        i = int(np.searchsorted(st, a, side="right")) - 1
        if b <= st[i + 1]:
            return self.parts[i].rows(a - int(st[i]), b - int(st[i]))
        pieces = []
        while a < b:
            i = int(np.searchsorted(st, a, side="right")) - 1
            end = min(b, int(st[i + 1]))
            pieces.append(self.parts[i].rows(a - int(st[i]), end - int(st[i])))
            a = end
        f = np.concatenate([g.fwd for g in pieces])
        tied = pieces[0].bwd is pieces[0].fwd
        k = None if pieces[0].caps is None else np.concatenate([g.caps for g in pieces])
        return Genomes(f, f if tied else np.concatenate([g.bwd for g in pieces]), k)

    def row(self, i: int) -> Genomes:
        return self.rows(i, i + 1)

    @property
    def fwd(self) -> np.ndarray:
        return self.rows(0, len(self)).fwd

    @property
    def bwd(self) -> np.ndarray:
        return self.rows(0, len(self)).bwd

    @property
    def caps(self) -> np.ndarray | None:
        return self.rows(0, len(self)).caps


class Objective(Protocol):
    """The loop's view of a problem: ``evaluate`` a batch, ``decode`` one genome to a plan."""

    mode: str

    def evaluate(self, genomes: Genomes) -> np.ndarray: ...
    def decode(self, genomes: Genomes, i: int = 0) -> Plan: ...


class CutBitsObjective:
    """The gpipe recurrence over cut-bit genomes, through :class:`.evaluator.PopulationEvaluator`
    (``backend``: auto, numba, numpy, torch, python; docs/MODEL.md §4)."""

    def __init__(self, problem: Problem, mode: str, backend: str = "auto",
                 device: str | None = None, threads: int = 1) -> None:
        from .evaluator import PopulationEvaluator

        self.problem, self.mode = problem, mode
        self.evaluator = PopulationEvaluator(problem, mode, backend, device or None, threads)
        self.backend = self.evaluator.backend

    def evaluate(self, genomes: Genomes) -> np.ndarray:
        return self.evaluator(genomes.fwd, genomes.bwd)

    def decode(self, genomes: Genomes, i: int = 0) -> Plan:
        return bits_to_plan(genomes.fwd[i], genomes.bwd[i], self.mode)


class FamilyObjective:
    """The schedule family (docs/SCHEDULES.md): cut bits plus per-stage in-flight caps,
    through the numba :class:`.family.FamilyEvaluator` (bit-identical to the list simulator;
    ``backend="python"``: the list simulator itself, one plan at a time).

    Genomes without caps are evaluated uncapped (the GPipe lists, the same times as
    :class:`CutBitsObjective`). A genome whose peak memory exceeds a stage's cap (the
    problem's capacities, docs/SCHEDULES.md §4) gets ``T = inf``.
    """

    def __init__(self, problem: Problem, mode: str, backend: str = "numba") -> None:
        from .family import FamilyEvaluator

        if backend not in ("numba", "python"):
            raise ValueError(f"the family objective has backends numba and python, not "
                             f"{backend!r}")
        self.problem, self.mode, self.backend = problem, mode, backend
        self.evaluator = FamilyEvaluator(problem, mode) if backend == "numba" else None
        self._uncapped = np.full(problem.S, problem.B, dtype=np.int64)

    def evaluate(self, genomes: Genomes) -> np.ndarray:
        edp = genomes.edp
        if (edp is not None and genomes.caps is None and self.evaluator is not None
                and len(edp) == len(genomes) and edp.step == 1 and len(edp)):
            # EDP(M) uncapped: the GPipe-EDP reference scan (the same kernel, the same
            # memory caps), evaluated once per problem and shared with the baselines
            from .reference import edp_times

            return edp_times(self.problem, self.mode, "gpipe", upto=edp[-1])[edp[0] - 1:edp[-1]]
        if self.evaluator is None:  # the reference, one plan at a time (DGAP's baseline)
            from ...simulator import simulate

            out = np.empty(len(genomes))
            for i in range(len(genomes)):
                tl = simulate(self.problem, self.decode(genomes, i))
                out[i] = np.inf if tl.fits_memory is False else tl.iteration_time
            return out
        caps = self._uncapped if genomes.caps is None else genomes.caps
        return self.evaluator(genomes.fwd, genomes.bwd, caps)

    def decode(self, genomes: Genomes, i: int = 0) -> Plan:
        return bits_to_plan(genomes.fwd[i], genomes.bwd[i], self.mode,
                            None if genomes.caps is None else genomes.caps[i])
