"""Whole-population evaluation of chunk plans (docs/CHUNK-SCHEDULES.md §8).

A population is a :class:`~umpipe_bench.chunk_codec.ChunkGenomes` batch of one
:class:`~umpipe_bench.chunk_codec.ChunkSpace` (layout, layer counts, ``B``, mode, split).
:class:`ChunkEvaluator` returns every individual's iteration time and per-device peak memory,
bit-identical to the Python path :func:`umpipe_bench.chunk_torch.simulate_plan` (the chunk
rule :func:`~umpipe_bench.chunk_schedule.chunk_order`, then
:func:`~umpipe_bench.devsim.simulate_devices`), and how often each fallback of the rule fired.
With memory capacities, an individual whose peak exceeds a device's capacity gets
``T = inf``, as :class:`.family.FamilyEvaluator` does.

The chunk problem (:func:`umpipe_bench.layout.group_layers`) is built once; the tables the
kernel reads are its tables, and the per-device sums (optimizer steps, static bytes) are
summed here exactly as the device simulator sums them, so they are the same floats.
"""

from __future__ import annotations

import numpy as np

from ...chunk_codec import ChunkGenomes, ChunkSpace
from ...chunkplan import ChunkPlan, ChunkPlanError
from ...layout import group_layers
from ...memory import capacities
from ...problem import Problem
from .evaluator import run_row_blocks

__all__ = ["ChunkEvaluator", "device_capacities"]


def _kernels():  # imported lazily: importing numba costs about a second
    from . import _chunk_kernels

    return _chunk_kernels


def device_capacities(chunks: Problem, devices: tuple[int, ...],
                      memory_cap: float | None = None) -> list[float] | None:
    """Per-device memory capacities of a chunk problem: ``memory_cap`` for every device,
    else the smallest capacity of the device's chunks (:func:`umpipe_bench.memory.capacities`:
    the problem's ``device_capacity``); None when nothing is capped."""
    caps = capacities(chunks, memory_cap)
    if caps is None:
        return None
    D = max(devices) + 1
    return [min(caps[c] for c in range(len(devices)) if devices[c] == d) for d in range(D)]


class ChunkEvaluator:
    """Iteration times, per-device peaks and fallback counts of chunk-plan populations.

    ``problem``: the per-layer problem (its ``S`` layers are the space's layers); ``space``:
    what the population shares; ``memory_cap`` (bytes, every device) overrides the problem's
    device capacity; ``threads``: rows split over up to this many threads in blocks of at
    least ``MIN_ROWS_PER_THREAD`` (results do not depend on it); ``op_overhead``: seconds
    added to every action, as :func:`~umpipe_bench.devsim.simulate_devices` takes it.
    """

    #: Fewest rows per thread worth a thread (an instance may set its own).
    MIN_ROWS_PER_THREAD = 8

    def __init__(self, problem: Problem, space: ChunkSpace, memory_cap: float | None = None,
                 threads: int = 1, op_overhead: float = 0.0) -> None:
        if threads < 1:
            raise ValueError(f"evaluator threads must be >= 1, got {threads}")
        if not op_overhead >= 0 or op_overhead == float("inf"):
            raise ValueError(f"op_overhead must be a finite number of seconds >= 0, got "
                             f"{op_overhead!r}")
        if sum(space.layers) != problem.S or space.B != problem.B:
            raise ChunkPlanError(f"chunk space of {sum(space.layers)} layers and B = {space.B} "
                                 f"does not fit problem {problem.name!r} ({problem.S} layers, "
                                 f"B = {problem.B})")
        if space.split and not problem.has_split_backward:
            raise ChunkPlanError(f"a split chunk space needs split-backward costs; problem "
                                 f"{problem.name!r} has none")
        self.problem, self.space, self.threads = problem, space, int(threads)
        self.mode, self.op_overhead = space.mode, float(op_overhead)
        chunks = group_layers(problem, space.layers)
        self.chunks = chunks
        C, D, B, dev = space.C, space.D, space.B, space.devices
        tb = chunks.tables()
        zeros = np.zeros((C, B + 1))

        def arr(x: object) -> np.ndarray:  # writeable copies: one compiled signature
            return np.array(x, dtype=np.float64)

        # per-device sums as devsim forms them: a generator summed from 0, chunks ascending
        opt_dev = [sum(float(tb.opt[c]) for c in range(C) if dev[c] == d) for d in range(D)]
        mems = [st.memory for st in chunks.stages]
        self.has_memory = all(m is not None for m in mems)
        if self.has_memory:
            static = [float(sum(m.param_bytes for c, m in enumerate(mems)  # type: ignore
                                if dev[c] == d)) for d in range(D)]
            saved = [m.saved_act_bytes_per_sample for m in mems]  # type: ignore[union-attr]
            inb = [m.input_bytes_per_sample for m in mems]  # type: ignore[union-attr]
            held = [m.w_held_bytes_per_sample if m.w_held_bytes_per_sample is not None  # type: ignore
                    else m.saved_act_bytes_per_sample for m in mems]  # type: ignore[union-attr]
        else:
            static, saved, inb, held = [0.0] * D, [0.0] * C, [0.0] * C, [0.0] * C
        self._space_args = (
            np.array(dev, np.int64), np.array(space.device_chunks, np.int64), space.split,
            space.mode == "recompute", self.op_overhead)
        self._tables = (
            arr(tb.fwd), arr(tb.backward(space.mode)), arr(tb.backward_far(space.mode)),
            arr(tb.input_backward(space.mode)) if space.split else zeros,
            arr([chunks.far_factor(c) for c in range(C)]),
            arr(tb.wbwd) if space.split and tb.wbwd is not None else zeros,
            arr(tb.act).reshape(max(C - 1, 0), B + 1), arr(tb.grad).reshape(max(C - 1, 0), B + 1),
            arr(opt_dev), arr(static), arr(saved), arr(inb), arr(held))
        caps = device_capacities(chunks, dev, memory_cap)
        if caps is not None and not self.has_memory:
            caps = None  # nothing to check a capacity against
        self.capacity = None if caps is None else np.array(caps, dtype=np.float64)
        self.evaluations = 0

    def evaluate(self, genomes: ChunkGenomes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(T [N], peak [N, D], fallbacks [N, 3])`` without the memory check; fallbacks
        count the rule's backward, forward and past-cap fallbacks
        (:data:`umpipe_bench.chunk_schedule.FALLBACKS`)."""
        g = self.space.check(genomes)
        N, D = len(g), self.space.D
        T = np.empty(N, dtype=np.float64)
        peak = np.empty((N, D), dtype=np.float64)
        nfall = np.empty((N, 3), dtype=np.int64)
        kernel = _kernels().chunk_pass
        rest = self._space_args + self._tables

        def run(a: int, b: int) -> None:
            kernel(g.fwd[a:b], g.bwd[a:b], g.wgt[a:b], g.caps[a:b], g.w_caps[a:b],
                   g.group[a:b], g.fwd_lag[a:b], g.bwd_lag[a:b], *rest, T[a:b], peak[a:b],
                   nfall[a:b])

        run_row_blocks(N, run, self.threads, self.MIN_ROWS_PER_THREAD)
        self.evaluations += N
        return T, peak, nfall

    def fits(self, peak: np.ndarray) -> np.ndarray:
        """Whether each row of ``peak`` [N, D] stays within every device's capacity."""
        if self.capacity is None:
            return np.ones(peak.shape[0], dtype=bool)
        return np.all(peak <= self.capacity, axis=1)

    def __call__(self, genomes: ChunkGenomes) -> np.ndarray:
        """Iteration times ``[N]``; ``inf`` where a device's peak exceeds its capacity."""
        T, peak, _ = self.evaluate(genomes)
        if self.capacity is not None:
            T[~self.fits(peak)] = np.inf
        return T

    def plan_time(self, plan: ChunkPlan) -> tuple[float, np.ndarray]:
        """``(T, peak [D])`` of one plan of the space, without the memory check."""
        T, peak, _ = self.evaluate(self.space.encode([plan]))
        return float(T[0]), peak[0]
