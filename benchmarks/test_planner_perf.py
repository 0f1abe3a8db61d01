"""DGAP vs TiDGAP speed at P = 256, S = 14, B = 64 (the goals of scripts/planner_ratios.py).

Run with ``pytest benchmarks --benchmark-enable`` (without the flag every benchmark runs once,
as a smoke test). No timing is asserted: this machine's speed drifts 2x; for the ratios
measured interleaved in one run use ``python scripts/planner_ratios.py``.

Goals: population evaluation >= 100x faster than one individual at a time through the
reference; a whole generation >= 20x faster than DGAP's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from umpipe_bench.planners.algorithms.dgap import DGAPEngine, Individual, make_toolbox
from umpipe_bench.planners.algorithms.tidgap import TiDGAP, TiDGAPEngine
from umpipe_bench.planners.evaluation.evaluator import PopulationEvaluator, bits_to_plan
from umpipe_bench.planners.search.ga import GA_DEFAULTS
from umpipe_bench.problem import Problem
from umpipe_bench.simulator import gpipe_recurrence
from umpipe_bench.synthetic import synthetic_problem

P = 256
DATA = Path(__file__).resolve().parents[1] / "umpipe_bench" / "problems" / "data"


def _problems() -> dict[str, Problem]:
    out = {"sim-s14-b64": synthetic_problem(14, 64, 0, name="sim-s14-b64")}
    if (DATA / "gpt1-14.json").exists():
        out["gpt1-14"] = Problem.load(DATA / "gpt1-14.json")
    return out


PROBLEMS = _problems()
MODES = ("stash", "recompute")


def _population(problem: Problem, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random dual-chromosome plans, cut density 0.3."""
    rng = np.random.default_rng(seed)
    shape = (P, problem.S, problem.B - 1)
    return ((rng.random(shape) < 0.3).astype(np.uint8),
            (rng.random(shape) < 0.3).astype(np.uint8))


@pytest.fixture(params=sorted(PROBLEMS))
def problem(request):
    return PROBLEMS[request.param]


@pytest.mark.parametrize("mode", MODES)
def test_eval_reference_one_at_a_time(benchmark, problem, mode):
    """DGAP's fitness over a population: decode each individual, run the reference."""
    benchmark.group = f"evaluate P={P} {problem.name} {mode}"
    fb, bb = _population(problem)
    tb = make_toolbox(problem, mode, GA_DEFAULTS)
    pop = [Individual([f.reshape(-1).tolist(), b.reshape(-1).tolist()]) for f, b in zip(fb, bb)]
    out = benchmark.pedantic(lambda: [tb.evaluate(i) for i in pop], rounds=3, iterations=1)
    assert len(out) == P


@pytest.mark.parametrize("mode", MODES)
def test_eval_reference_plans_only(benchmark, problem, mode):
    """The reference recurrence alone on pre-decoded plans (the strictest baseline)."""
    benchmark.group = f"evaluate P={P} {problem.name} {mode}"
    fb, bb = _population(problem)
    plans = [bits_to_plan(f, b, mode) for f, b in zip(fb, bb)]
    out = benchmark.pedantic(lambda: [gpipe_recurrence(problem, p) for p in plans], rounds=3,
                             iterations=1)
    assert len(out) == P


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("mode", MODES)
def test_eval_tidgap_population(benchmark, problem, mode, backend):
    """TiDGAP: the whole population in one call."""
    benchmark.group = f"evaluate P={P} {problem.name} {mode}"
    fb, bb = _population(problem)
    ev = PopulationEvaluator(problem, mode, backend)
    ev(fb[:2], bb[:2])  # compile / warm up
    T = benchmark(ev, fb, bb)
    assert T.shape == (P,)


def _settings(backend: str = "auto") -> dict:
    """TiDGAP's default settings (DGAP reads the GA ones among them), P and the backend."""
    return {**TiDGAP().config, "population": P, "backend": backend}


@pytest.mark.parametrize("mode", MODES)
def test_generation_dgap(benchmark, problem, mode):
    benchmark.group = f"generation P={P} {problem.name} {mode}"
    eng = DGAPEngine(problem, mode, _settings(), P, seed=0)
    eng.initialize()
    benchmark.pedantic(eng.step, rounds=3, iterations=1)
    assert eng.generation == (1 if benchmark.disabled else 3)  # pedantic runs once when disabled


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("mode", MODES)
def test_generation_tidgap(benchmark, problem, mode, backend):
    benchmark.group = f"generation P={P} {problem.name} {mode}"
    eng = TiDGAPEngine(problem, mode, _settings(backend), P, seed=0)
    eng.initialize()
    eng.step()
    benchmark(eng.step)
    assert eng.generation >= 2
