"""What a search over chunk plans would optimize: a batch of chunk genomes in, iteration times
out (docs/CHUNK-SCHEDULES.md §8).

:class:`ChunkObjective` is :class:`.objective.FamilyObjective`'s counterpart for chunk plans:
``evaluate`` a :class:`~umpipe_bench.chunk_codec.ChunkGenomes` batch of one
:class:`~umpipe_bench.chunk_codec.ChunkSpace`, ``decode`` a row to its
:class:`~umpipe_bench.chunkplan.ChunkPlan`. The numba backend is
:class:`.chunk_eval.ChunkEvaluator`; ``backend="python"`` runs the Python path itself
(:func:`umpipe_bench.chunk_torch.simulate_plan`) one plan at a time, which gives the same
floats and is the reference the compiled one is measured against.
"""

from __future__ import annotations

import numpy as np

from ...chunk_codec import ChunkGenomes, ChunkSpace
from ...chunkplan import ChunkPlan
from ...problem import Problem

__all__ = ["ChunkObjective"]


class ChunkObjective:
    """Chunk genomes -> iteration times; ``T = inf`` where a device's peak exceeds its
    capacity (``memory_cap`` bytes, else the problem's device capacity;
    :func:`.chunk_eval.device_capacities`)."""

    def __init__(self, problem: Problem, space: ChunkSpace, memory_cap: float | None = None,
                 backend: str = "numba", threads: int = 1) -> None:
        from .chunk_eval import ChunkEvaluator

        if backend not in ("numba", "python"):
            raise ValueError(f"the chunk objective has backends numba and python, not "
                             f"{backend!r}")
        self.problem, self.space, self.backend = problem, space, backend
        self.mode = space.mode
        # the python backend still reads the capacities and checks the problem through it
        self.evaluator = ChunkEvaluator(problem, space, memory_cap, threads)

    def evaluate(self, genomes: ChunkGenomes) -> np.ndarray:
        if self.backend == "numba":
            return self.evaluator(genomes)
        from ...chunk_torch import simulate_plan

        cap = self.evaluator.capacity
        out = np.empty(len(genomes))
        for i in range(len(genomes)):
            tl = simulate_plan(self.problem, self.decode(genomes, i))
            fits = cap is None or tl.peak_memory is None or all(
                p <= c for p, c in zip(tl.peak_memory, cap))
            out[i] = tl.iteration_time if fits else np.inf
        return out

    def decode(self, genomes: ChunkGenomes, i: int = 0) -> ChunkPlan:
        return self.space.decode(genomes, i)
