"""Performance regressions of the hot paths, against a baseline stored in the repository.

What is guarded: the vectorized population evaluator (numba and numpy backends), one TiDGAP
generation, one DGAP generation, the list-schedule simulator and the reference recurrence.
``tox -e perf`` runs these with ``--benchmark-enable`` and compares each median with the
latest run saved under ``benchmarks/baseline`` (``--benchmark-compare-fail=median:150%``: this
machine's speed drifts up to 2x minute to minute, so only a >2.5x slowdown fails there).

The finer check is drift-free: every benchmark also times itself *interleaved* with a fixed
reference kernel (numpy plus a plain Python loop, like the code under test), one after the
other in equal-length blocks, for a second, and takes the median ratio. Both see the same
machine at the same moment, so the ratio moves far less than the times do (measured under a
load of 4 on 2 cores: absolute medians spread up to 2x between runs, ratios up to 1.7x, most
within 25 %). The ratio is saved in the benchmark's ``extra_info``; a test fails when it
exceeds the baseline's ratio by more than :data:`RATIO_LIMIT`.

Without ``--benchmark-enable`` (the project's default addopts) each function runs once as a
smoke test and no ratio is checked. Refresh the baseline after an intended change with
``tox -e perf-baseline`` and commit ``benchmarks/baseline``.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from umpipe_bench.plan import Plan
from umpipe_bench.planners.algorithms.dgap import DGAPEngine
from umpipe_bench.planners.algorithms.tidgap import TiDGAPEngine
from umpipe_bench.planners.evaluation.evaluator import PopulationEvaluator, bits_to_plan
from umpipe_bench.planners.search.ga import GA_DEFAULTS
from umpipe_bench.simulator import gpipe_recurrence, simulate
from umpipe_bench.synthetic import synthetic_problem

BASELINE = Path(__file__).resolve().parent / "baseline"
RATIO_LIMIT = 2.0  # fail when (code / reference kernel) doubles; measured spread: up to 1.7x
PAIR_SECONDS = 1.0  # interleaved measuring time per ratio
BLOCK = 0.005  # seconds: the shortest timed block

PROBLEM = synthetic_problem(14, 64, 0, name="perf-s14-b64")  # scripts/planner_ratios.py's shape
P = 256

_rng = np.random.default_rng(0)
_REF_A = _rng.random(50_000)
_REF_L = _rng.random(5_000).tolist()


def reference_kernel() -> float:
    """A fixed mix of whole-array numpy and an interpreted max-then-add loop (~ms)."""
    acc = float(np.maximum.accumulate(np.cumsum(_REF_A))[-1])
    f = 0.0
    for x in _REF_L:
        f = max(f, x) + x
    return acc + f


def _clock(fn: Callable[[], Any], reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def interleaved_ratio(fn: Callable[[], Any], seconds: float = PAIR_SECONDS) -> float:
    """Median over back-to-back pairs of time(fn) / time(reference_kernel).

    Both sides of a pair are blocks of equal length (each function repeated as needed, at
    least :data:`BLOCK` seconds), so they see the same share of a shared CPU; pairs are taken
    for ``seconds`` (at least 7), and the median discards the pairs a burst of load hit.
    """
    t_ref, t_fn = _clock(reference_kernel, 1), _clock(fn, 1)
    block = max(BLOCK, t_ref, t_fn)
    r_ref, r_fn = max(1, round(block / t_ref)), max(1, round(block / t_fn))
    ratios: list[float] = []
    t_end = time.perf_counter() + seconds
    while len(ratios) < 7 or time.perf_counter() < t_end:
        a = _clock(reference_kernel, r_ref)
        ratios.append(_clock(fn, r_fn) / a)
    return statistics.median(ratios)


def baseline_ratios() -> dict[str, float]:
    """``{test name: ratio}`` from the latest saved baseline run (any machine)."""
    files = sorted(BASELINE.glob("*/*.json"), key=lambda p: p.name)
    if not files:
        return {}
    data = json.loads(files[-1].read_text(encoding="utf-8"))
    return {b["name"]: b["extra_info"]["ratio"] for b in data.get("benchmarks", [])
            if "ratio" in b.get("extra_info", {})}


def check(benchmark: Any, request: pytest.FixtureRequest, fn: Callable[[], Any]) -> None:
    """Record the interleaved ratio; fail on a regression beyond RATIO_LIMIT."""
    if benchmark.disabled:
        return
    ratio = interleaved_ratio(fn)
    benchmark.extra_info["ratio"] = ratio
    base = baseline_ratios().get(request.node.name)
    if base is not None:
        benchmark.extra_info["baseline_ratio"] = base
        assert ratio <= RATIO_LIMIT * base, (
            f"{request.node.name}: {ratio:.3g}x the reference kernel, baseline {base:.3g}x "
            f"(limit {RATIO_LIMIT}x): a performance regression"
        )


def population(mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Random dual-chromosome plans, cut density 0.3."""
    rng = np.random.default_rng(1)
    shape = (P, PROBLEM.S, PROBLEM.B - 1)
    fb = (rng.random(shape) < 0.3).astype(np.uint8)
    bb = (rng.random(shape) < 0.3).astype(np.uint8) if mode == "recompute" else fb
    return fb, bb


def test_reference_kernel(benchmark):
    """The yardstick itself (its median tracks the machine's speed, not the code's)."""
    benchmark.group = "reference"
    assert benchmark(reference_kernel) > 0


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_evaluator(benchmark, request, backend, mode):
    """TiDGAP's population evaluator: P=256 plans of S=14, B=64 in one call."""
    benchmark.group = "evaluator P=256 S=14 B=64"
    ev = PopulationEvaluator(PROBLEM, mode, backend)
    fb, bb = population(mode)
    ev(fb[:2], bb[:2])  # numba: compile before timing
    T = benchmark(ev, fb, bb)
    assert T.shape == (P,) and np.isfinite(T).all()
    check(benchmark, request, lambda: ev(fb, bb))


def _engine(cls: type, mode: str, population: int) -> Any:
    settings = {**GA_DEFAULTS, "population": population, "backend": "auto", "device": ""}
    eng = cls(PROBLEM, mode, settings, population, seed=0)
    eng.initialize()
    eng.step()  # warm (numba compile, first-generation allocations)
    return eng


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_tidgap_generation(benchmark, request, mode):
    """One TiDGAP generation (selection, crossover, mutation, evaluation) at P=256."""
    benchmark.group = "generation"
    eng = _engine(TiDGAPEngine, mode, P)
    benchmark(eng.step)
    assert eng.generation >= 2
    check(benchmark, request, eng.step)


def test_dgap_generation(benchmark, request):
    """One DGAP generation (DEAP, reference fitness one individual at a time) at P=32."""
    benchmark.group = "generation"
    eng = _engine(DGAPEngine, "recompute", 32)
    benchmark.pedantic(eng.step, rounds=5, iterations=1)
    assert eng.generation >= 2
    check(benchmark, request, eng.step)


def _uedp_plan(mode: str) -> Plan:
    fb, bb = population(mode)
    return bits_to_plan(fb[0], bb[0], mode)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_simulator(benchmark, request, schedule):
    """The list-schedule simulator on one plan (1f1b needs an EDP plan)."""
    benchmark.group = "simulator S=14 B=64"
    plan = (_uedp_plan("recompute") if schedule == "gpipe"
            else Plan.edp(PROBLEM.S, PROBLEM.B, 16, "recompute"))
    tl = benchmark(simulate, PROBLEM, plan, schedule)
    assert tl.iteration_time > 0
    check(benchmark, request, lambda: simulate(PROBLEM, plan, schedule))


def test_gpipe_recurrence(benchmark, request):
    """docs/MODEL.md §4's plain loop: the reference every evaluator is tested against."""
    benchmark.group = "simulator S=14 B=64"
    plan = _uedp_plan("recompute")
    T = benchmark(gpipe_recurrence, PROBLEM, plan)
    assert T == pytest.approx(simulate(PROBLEM, plan, "gpipe").iteration_time, rel=1e-12)
    check(benchmark, request, lambda: gpipe_recurrence(PROBLEM, plan))
