"""The schedule family's evaluator against its reference (docs/SCHEDULES.md; issue: "a fast
evaluator for the family").

P = 256 random plans with random in-flight caps at S = 14, B = 64: the numba
:class:`~umpipe_bench.planners.evaluation.family.FamilyEvaluator` on the whole population against
:func:`~umpipe_bench.simulator.simulate` (the rule in Python, then the list simulation) one plan
at a time, in one pytest-benchmark group (``pytest benchmarks/test_family_perf.py
--benchmark-enable``). The same-run ratio, interleaved, is what ``scripts/family_perf.py``
writes to ``results/perf/family.txt`` (goal >= 100x). Without ``--benchmark-enable`` each
function runs once as a smoke test; the asserts check results, never times.
"""

from __future__ import annotations

import numpy as np
import pytest

from umpipe_bench.planners.evaluation.encoding import bits_to_plan, random_bits
from umpipe_bench.planners.evaluation.family import FamilyEvaluator
from umpipe_bench.simulator import simulate
from umpipe_bench.synthetic import synthetic_problem

P, S, B = 256, 14, 64
PROBLEM = synthetic_problem(S, B, 0)


def _population(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return random_bits(rng, P, S, B), rng.integers(1, B + 1, size=(P, S))


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_family_evaluator_population(benchmark, mode):
    benchmark.group = f"family evaluate P={P} S={S} B={B} {mode}"
    fb, caps = _population()
    ev = FamilyEvaluator(PROBLEM, mode)
    ev(fb[:2], fb[:2], caps[:2])  # compile / load the cache
    T = benchmark(ev, fb, fb, caps)
    assert T.shape == (P,) and np.isfinite(T).all()


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_family_reference_one_at_a_time(benchmark, mode):
    benchmark.group = f"family evaluate P={P} S={S} B={B} {mode}"
    fb, caps = _population()
    plans = [bits_to_plan(f, f, mode).with_caps(k.tolist()) for f, k in zip(fb[:32], caps[:32])]
    out = benchmark.pedantic(lambda: [simulate(PROBLEM, p).iteration_time for p in plans],
                             rounds=3, iterations=1)
    T = FamilyEvaluator(PROBLEM, mode)(fb[:32], fb[:32], caps[:32])
    assert out == T.tolist()  # bit-identical, not merely close
