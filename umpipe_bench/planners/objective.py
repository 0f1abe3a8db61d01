"""What a search planner optimizes: a batch of genomes in, iteration times out (MODEL.md §4).

The search loop (:mod:`.loop`) never looks inside a genome: it hands a :class:`Genomes` batch
to ``objective.evaluate`` and counts its rows. A genome today is the dual cut-bit chromosome
of docs/MODEL.md §2 (:mod:`.encoding`); a schedule family with more genes (e.g. per-stage
in-flight caps, MODEL.md §3) adds a field to :class:`Genomes` and an objective with the same
two methods, and the loop does not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..plan import Plan
from ..problem import Problem
from .encoding import bits_to_plan

__all__ = ["CutBitsObjective", "Genomes", "Objective"]


@dataclass(frozen=True)
class Genomes:
    """A batch of ``N`` genomes: forward and backward cut bits, uint8 ``[N, S, B-1]`` each.

    In stash mode ``bwd`` is the same array as ``fwd`` (tied chromosomes, MODEL.md §2).
    """

    fwd: np.ndarray
    bwd: np.ndarray

    def __len__(self) -> int:
        return int(self.fwd.shape[0])

    def row(self, i: int) -> Genomes:
        """Genome ``i`` as a batch of one (views, no copy)."""
        return Genomes(self.fwd[i:i + 1], self.bwd[i:i + 1])

    def copy(self) -> Genomes:
        f = self.fwd.copy()
        return Genomes(f, f if self.bwd is self.fwd else self.bwd.copy())


class Objective(Protocol):
    """The loop's view of a problem: ``evaluate`` a batch, ``decode`` one genome to a plan."""

    mode: str

    def evaluate(self, genomes: Genomes) -> np.ndarray: ...
    def decode(self, genomes: Genomes, i: int = 0) -> Plan: ...


class CutBitsObjective:
    """The gpipe recurrence over cut-bit genomes, through :class:`.evaluator.PopulationEvaluator`
    (``backend``: auto, numba, numpy, torch, python; MODEL.md §4)."""

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
