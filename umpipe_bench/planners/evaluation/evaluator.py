"""Whole-population evaluation of the gpipe recurrence (docs/MODEL.md §4): TiDGAP's first level.

A population is two uint8 arrays of cut bits, ``fbits`` and ``bbits``, shape ``[N, S, B-1]``
(docs/MODEL.md §2's encoding: bit ``i`` of stage ``s`` = a microbatch boundary after sample
``i+1``); in stash mode ``bbits`` is ``fbits``. :class:`PopulationEvaluator` returns the
iteration time ``T`` of every individual. Backends:

``numba``
    compiled loops, the reference recurrence's exact arithmetic: bit-identical to
    :func:`umpipe_bench.simulator.gpipe_recurrence` (fastest on a CPU; about 10x the numpy form).
``numpy``
    docs/MODEL.md §4's closed form (cumsum/cummax) over individuals x sample positions: the paper's
    matrix formulation; equal to the reference to ~1e-14 relative.
``torch``
    the same closed form on a torch device (``device=`` setting; pays on a GPU with large
    populations); torch is imported only when this backend is chosen.
``python``
    the reference itself, one individual at a time (what DGAP does): for comparisons.
``auto``
    numba when it imports, else numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...plan import Plan
from ...problem import Problem
from ...simulator import gpipe_recurrence
from ._closed_form import NUMPY_OPS, closed_form_backward, closed_form_forward
from .clock import CHUNK_WORK, chunk_rows
from .encoding import bits_to_plan, plan_to_bits, plans_to_bits

__all__ = ["BACKENDS", "CHUNK_WORK", "PopulationEvaluator", "bits_to_plan", "chunk_rows",
           "plan_to_bits", "plans_to_bits", "run_row_blocks"]

BACKENDS = ("auto", "numba", "numpy", "torch", "python")


def _numba_kernels() -> Any:
    try:
        from . import _kernels
    except ImportError:  # pragma: no cover - numba is a dependency
        return None
    return _kernels


_POOLS: dict[int, Any] = {}


def _pool(workers: int) -> Any:
    """A process-wide thread pool of ``workers`` threads (created once, on first use)."""
    if workers not in _POOLS:
        from concurrent.futures import ThreadPoolExecutor

        _POOLS[workers] = ThreadPoolExecutor(max_workers=workers,
                                             thread_name_prefix="umpipe-eval")
    return _POOLS[workers]


def run_row_blocks(n: int, run: Any, threads: int, min_rows: int,
                   per_call: int | None = None) -> None:
    """``run(lo, hi)`` over ``n`` rows: in calls of at most ``per_call`` rows per thread
    (None: one call), each split into up to ``threads`` blocks of at least ``min_rows`` rows
    (one block: no thread). The numba kernels release the GIL, so the blocks run in
    parallel; the first block runs on the calling thread. Both evaluators use this one
    runner (:class:`PopulationEvaluator`, :class:`.family.FamilyEvaluator`); rows are
    independent, so the results do not depend on the split."""
    if per_call is None:
        _blocks(0, n, run, threads, min_rows)
        return
    per_call = max(1, per_call)
    # threads a full call splits over (each block at least min_rows), so no block passes
    # per_call rows
    k = max(1, min(threads, per_call * threads // max(min_rows, 1)))
    step = per_call * k
    for lo in range(0, n, step):
        _blocks(lo, min(n, lo + step), run, k, min_rows)


def _blocks(lo: int, hi: int, run: Any, threads: int, min_rows: int) -> None:
    n = hi - lo
    k = min(threads, n // max(min_rows, 1))
    if k <= 1:
        run(lo, hi)
        return
    bounds = lo + np.linspace(0, n, k + 1).astype(int)
    pool = _pool(k - 1)
    futures = [pool.submit(run, int(bounds[i]), int(bounds[i + 1])) for i in range(1, k)]
    try:
        run(lo, int(bounds[1]))
    finally:
        for f in futures:
            f.result()


def kernel_tables(problem: Problem, mode: str) -> dict[str, np.ndarray]:
    """The problem's cost tables as the compiled kernels read them: contiguous float64
    ``fwd``, ``cb`` (bwd or rbwd by ``mode``), ``cbf`` (the far backward, docs/MODEL.md §1b:
    ``bwd * bwd_far`` in stash mode, ``rbwd`` in recompute mode), ``act``, ``grad``
    (``[S-1, B+1]``, empty for a single stage) and ``opt``."""
    tb = problem.tables()
    S, B = problem.S, problem.B
    return {
        "fwd": np.ascontiguousarray(tb.fwd, dtype=np.float64),
        "cb": np.ascontiguousarray(tb.backward(mode), dtype=np.float64),
        "cbf": np.ascontiguousarray(tb.backward_far(mode), dtype=np.float64),
        "act": np.ascontiguousarray(tb.act, dtype=np.float64).reshape(max(S - 1, 0), B + 1),
        "grad": np.ascontiguousarray(tb.grad, dtype=np.float64).reshape(max(S - 1, 0), B + 1),
        "opt": np.ascontiguousarray(tb.opt, dtype=np.float64),
    }


def population_bits(bits: np.ndarray, S: int, B: int, what: str) -> np.ndarray:
    """Cut bits as a contiguous uint8 ``[N, S, B-1]`` (one plan ``[S, B-1]`` becomes N = 1);
    a wrong shape is a ValueError naming ``what``."""
    bits = np.asarray(bits)
    if bits.ndim == 2:
        bits = bits[None]
    if bits.ndim != 3 or bits.shape[1:] != (S, B - 1):
        raise ValueError(f"{what}: expected shape [N, S={S}, B-1={B - 1}], got {bits.shape}")
    return np.ascontiguousarray(bits, dtype=np.uint8)


class PopulationEvaluator:
    """Iteration times of whole populations of cut-bit plans (docs/MODEL.md §4, gpipe schedule).

    ``evaluator(fbits, bbits)`` -> float64 ``[N]``. ``forward(fbits)`` -> ``F[s, K_s]``
    ``[N, S]`` and ``backward(bbits, F_last)`` -> ``T`` split the two passes (the backward
    depends on the forward only through ``F[s, K_s]``). Every call counts its rows in
    :attr:`evaluations` (full evaluations only).
    """

    #: Fewest rows per thread worth a thread (below, one thread runs the whole call).
    MIN_ROWS_PER_THREAD = 32

    def __init__(
        self, problem: Problem, mode: str, backend: str = "auto", device: str | None = None,
        threads: int = 1,
    ) -> None:
        if threads < 1:
            raise ValueError(f"evaluator threads must be >= 1, got {threads}")
        self.threads = int(threads)
        if backend not in BACKENDS:
            raise ValueError(f"unknown evaluator backend {backend!r}; valid: {', '.join(BACKENDS)}")
        self.problem = problem
        self.mode = mode
        self.S, self.B = problem.S, problem.B
        self._tables = kernel_tables(problem, mode)
        self._kernels = None
        self._torch = None
        if backend == "auto":
            backend = "numba" if _numba_kernels() is not None else "numpy"
        if backend == "numba":
            self._kernels = _numba_kernels()
            if self._kernels is None:  # pragma: no cover
                raise ValueError("evaluator backend 'numba' needs numba installed")
        elif backend == "torch":
            from ._torch_backend import TorchEvaluator

            self._torch = TorchEvaluator(self._tables, device)
        self.backend = backend
        self.evaluations = 0

    # ------------------------------------------------------------------ checks
    def _check(self, bits: np.ndarray, what: str) -> np.ndarray:
        return population_bits(bits, self.S, self.B, what)

    def _rows(self, n: int, run: Any) -> None:
        """``run(lo, hi)`` over row blocks: one block per thread when there are enough rows
        (the numba kernels release the GIL, so the blocks run in parallel)."""
        run_row_blocks(n, run, self.threads, self.MIN_ROWS_PER_THREAD,
                       chunk_rows(self.S, self.B))

    # ------------------------------------------------------------------ passes
    def forward(self, fbits: np.ndarray) -> np.ndarray:
        """``F[s, K_s]`` for every individual, ``[N, S]`` (docs/MODEL.md §4 forward loop)."""
        fb = self._check(fbits, "fbits")
        t = self._tables
        if self._kernels is not None:
            out = np.empty((fb.shape[0], self.S), dtype=np.float64)
            fwd, act, kernel = t["fwd"], t["act"], self._kernels.forward_pass
            self._rows(fb.shape[0], lambda a, b: kernel(fb[a:b], fwd, act, out[a:b]))
            return out
        if self._torch is not None:
            return self._torch.forward(fb)
        if self.backend == "python":
            raise ValueError("backend 'python' evaluates whole plans only")
        return closed_form_forward(NUMPY_OPS, fb, t["fwd"], t["act"])

    def backward(self, bbits: np.ndarray, F_last: np.ndarray) -> np.ndarray:
        """``T`` for backward bits given each individual's ``F[s, K_s]`` ``[N, S]``."""
        bb = self._check(bbits, "bbits")
        F_last = np.ascontiguousarray(F_last, dtype=np.float64).reshape(bb.shape[0], self.S)
        t = self._tables
        if self._kernels is not None:
            out = np.empty(bb.shape[0], dtype=np.float64)
            cb, cbf, grad, opt = t["cb"], t["cbf"], t["grad"], t["opt"]
            kernel = self._kernels.backward_pass
            self._rows(bb.shape[0],
                       lambda a, b: kernel(bb[a:b], cb, cbf, grad, opt, F_last[a:b], out[a:b]))
            return out
        if self._torch is not None:
            return self._torch.backward(bb, F_last)
        if self.backend == "python":
            raise ValueError("backend 'python' evaluates whole plans only")
        return closed_form_backward(NUMPY_OPS, bb, t["cb"], t["cbf"], t["grad"], t["opt"],
                                    F_last)

    def __call__(self, fbits: np.ndarray, bbits: np.ndarray | None = None) -> np.ndarray:
        """Iteration time of every individual, float64 ``[N]`` (``bbits`` None: stash tie)."""
        fb = self._check(fbits, "fbits")
        bb = fb if (bbits is None or self.mode == "stash") else self._check(bbits, "bbits")
        if bb.shape[0] != fb.shape[0]:
            raise ValueError(f"fbits has {fb.shape[0]} individuals but bbits {bb.shape[0]}")
        self.evaluations += fb.shape[0]
        if self.backend == "python":
            return np.array(
                [gpipe_recurrence(self.problem, bits_to_plan(f, b, self.mode))
                 for f, b in zip(fb, bb)],
                dtype=np.float64,
            )
        step = chunk_rows(self.S, self.B, self.threads)
        if fb.shape[0] > step:  # in calls short enough for signals (CHUNK_WORK)
            return np.concatenate([self._evaluate(fb[a:a + step], bb[a:a + step])
                                   for a in range(0, fb.shape[0], step)])
        return self._evaluate(fb, bb)

    def _evaluate(self, fb: np.ndarray, bb: np.ndarray) -> np.ndarray:
        if self._torch is not None:
            return self._torch.evaluate(fb, bb)
        return self.backward(bb, self.forward(fb))

    def plan_time(self, plan: Plan) -> float:
        """Iteration time of one :class:`Plan` (counts as one evaluation)."""
        fb, bb = plan_to_bits(plan)
        return float(self(fb[None], bb[None])[0])
