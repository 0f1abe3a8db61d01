"""Whole-population evaluation of the capped schedule family (docs/SCHEDULES.md).

A population is forward and backward cut bits ``[N, S, B-1]`` (docs/MODEL.md §2's encoding)
and per-stage in-flight caps ``[N, S]``. :class:`FamilyEvaluator` returns every individual's
iteration time and per-stage peak memory, bit-identical to the list simulator
(:func:`umpipe_bench.simulator.simulate` with schedule ``capped``) and to
:func:`umpipe_bench.memory.peak_memory`. With memory caps, an individual whose peak exceeds a
stage's cap gets ``T = inf``: a plan that does not fit is never better than one that does.

``gpipe`` is the family with caps ``>= B``; torch's ``1f1b`` is the family's rule with caps of
``S - s`` microbatches (``unit="microbatches"``), so both EDP reference scans run here too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...memory import capacities, memory_figures
from ...plan import Plan
from ...problem import Problem
from .clock import chunk_rows
from .evaluator import kernel_tables, plan_to_bits, population_bits, run_row_blocks

__all__ = ["FamilyEvaluator"]


def _kernels():  # imported lazily: importing numba costs about a second
    from . import _family_kernels

    return _family_kernels


class FamilyEvaluator:
    """Iteration times and peaks of populations under the capped family.

    ``memory_cap`` (bytes, every stage) overrides the problem's stage/device capacities
    (:func:`umpipe_bench.memory.capacities`); without either nothing is capped. ``threads``:
    a call's rows are split over up to this many threads in blocks of at least
    ``MIN_ROWS_PER_THREAD`` rows (:func:`.evaluator.run_row_blocks`; results do not depend
    on it).
    """

    #: Fewest rows per thread worth a thread (an instance may set its own).
    MIN_ROWS_PER_THREAD = 8

    def __init__(self, problem: Problem, mode: str, memory_cap: float | None = None,
                 threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"evaluator threads must be >= 1, got {threads}")
        self.threads = int(threads)
        self.mode = mode  # no reference to the problem: a cached scan must not keep it alive
        self.S, self.B = problem.S, problem.B
        t = kernel_tables(problem, mode)
        self._t = (t["fwd"], t["cb"], t["cbf"], t["act"], t["grad"], t["opt"])
        figs = memory_figures(problem, mode)
        self.has_memory = figs is not None
        zeros = (0.0,) * self.S
        self._m = tuple(np.array(x, dtype=np.float64) for x in (
            (figs.static, figs.per_inflight, figs.per_op) if figs else (zeros, zeros, zeros)))
        caps = capacities(problem, memory_cap)
        if caps is not None and figs is None:
            caps = None  # nothing to check a cap against
        self.capacity = None if caps is None else np.array(caps, dtype=np.float64)
        self.evaluations = 0

    def _bits(self, bits: np.ndarray, what: str) -> np.ndarray:
        return population_bits(bits, self.S, self.B, what)

    def evaluate(self, fbits: np.ndarray, bbits: np.ndarray | None, caps: np.ndarray,
                 unit: str = "samples") -> tuple[np.ndarray, np.ndarray]:
        """``(T [N], peak [N, S])`` without the memory check (``bbits`` None: stash tie)."""
        return self._run(fbits, bbits, caps, unit, True)

    def _run(self, fbits: np.ndarray, bbits: np.ndarray | None, caps: np.ndarray, unit: str,
             memory: bool) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`evaluate`; ``memory`` False: ``peak`` is not computed (left unset)."""
        fb = self._bits(fbits, "fbits")
        bb = fb if (bbits is None or self.mode == "stash") else self._bits(bbits, "bbits")
        N = fb.shape[0]
        if bb.shape[0] != N:
            raise ValueError(f"fbits has {N} individuals but bbits {bb.shape[0]}")
        k = np.ascontiguousarray(np.broadcast_to(np.asarray(caps, dtype=np.int64), (N, self.S)))
        if k.size and k.min() < 1:
            raise ValueError("caps must be >= 1")
        if unit not in ("samples", "microbatches"):
            raise ValueError(f"cap unit must be 'samples' or 'microbatches', got {unit!r}")
        T = np.empty(N, dtype=np.float64)
        peak = np.empty((N, self.S), dtype=np.float64)
        kernel, mb, tables = _kernels().family_pass, unit == "microbatches", self._t + self._m
        tied = bb is fb  # stash: one decode serves both
        run_row_blocks(N, lambda a, b: kernel(fb[a:b], bb[a:b], k[a:b], mb, *tables, T[a:b],
                                              peak[a:b], tied, memory), self.threads,
                       self.MIN_ROWS_PER_THREAD, chunk_rows(self.S, self.B))
        self.evaluations += N
        return T, peak

    def fits(self, peak: np.ndarray) -> np.ndarray:
        """Whether each row of ``peak`` [N, S] stays within every stage's cap."""
        if self.capacity is None:
            return np.ones(peak.shape[0], dtype=bool)
        return np.all(peak <= self.capacity, axis=1)

    def __call__(self, fbits: np.ndarray, bbits: np.ndarray | None, caps: np.ndarray,
                 unit: str = "samples") -> np.ndarray:
        """Iteration times ``[N]``; ``inf`` where a stage's peak exceeds its memory cap
        (without a cap the peaks are not computed)."""
        T, peak = self._run(fbits, bbits, caps, unit, self.capacity is not None)
        if self.capacity is not None:
            T[~self.fits(peak)] = np.inf
        return T

    def plan_time(self, plan: Plan) -> tuple[float, np.ndarray]:
        """``(T, peak [S])`` of one plan under its own caps (none: gpipe), without the check."""
        fb, bb = plan_to_bits(plan)
        T, peak = self.evaluate(fb[None], bb[None], np.array(plan.effective_caps()))
        return float(T[0]), peak[0]

    def edp_scan(self, schedule: str, Ms: Sequence[int] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``(T [len(Ms)], peak [len(Ms), S])`` of EDP(M) for ``M`` in ``Ms`` (default 1..B)
        under ``gpipe`` or torch's ``1f1b``, without the memory check."""
        from .encoding import edp_bits

        Ms = list(range(1, self.B + 1)) if Ms is None else list(Ms)
        fb = np.stack([edp_bits(self.S, self.B, M) for M in Ms])
        if schedule == "gpipe":
            return self.evaluate(fb, fb, np.full(self.S, self.B))
        if schedule == "1f1b":
            return self.evaluate(fb, fb, np.arange(self.S, 0, -1), unit="microbatches")
        raise ValueError(f"EDP scans exist for 'gpipe' and '1f1b', not {schedule!r}")
