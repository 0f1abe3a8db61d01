"""TiDGAP's population evaluator equals the reference recurrence (docs/MODEL.md §4).

numba backend: bit-identical to :func:`gpipe_recurrence` (the same arithmetic in the same
order); numpy/torch closed form: equal to 1e-12 relative (sums in another order).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umpipe_bench.plan import Plan
from umpipe_bench.planners.evaluation.evaluator import (
    PopulationEvaluator,
    bits_to_plan,
    plan_to_bits,
    plans_to_bits,
)
from umpipe_bench.problem import Link
from umpipe_bench.simulator import gpipe_recurrence, simulate
from umpipe_bench.synthetic import synthetic_problem

from .conftest import make_problem

MODES = ("stash", "recompute")
RTOL = 1e-12


def _comm_problem():
    """Hand-made: 3 unequal stages, slow links with latency, optimizer time."""
    B = 7
    m = np.arange(1, B + 1)
    return make_problem(
        fwd=[0.2 + 0.5 * m, 1.0 + 0.1 * m**1.5, 0.3 * m],
        bwd=[0.4 + 1.0 * m, 2.0 + 0.1 * m, 0.5 * m + 0.05 * m**2],
        opt=[0.3, 0.1, 0.7],
        links=[Link(1e6, 2e6, 0.05, 1e7), Link(3e6, 3e6, 0.2, 2e7)],
        name="hand-comm",
    )


PROBLEMS = {
    "sim-s4-b16": lambda: synthetic_problem(4, 16, 0),
    "sim-s14-b64": lambda: synthetic_problem(14, 64, 0),
    "s5-b17": lambda: synthetic_problem(5, 17, 3),
    "s9-b6": lambda: synthetic_problem(9, 6, 1),
    "single-stage": lambda: synthetic_problem(1, 12, 2),
    "b2": lambda: synthetic_problem(3, 2, 0),
    "b1": lambda: synthetic_problem(2, 1, 0),
    "hand-comm": _comm_problem,
}
N_PLANS = {"sim-s14-b64": 300}


def random_population(rng, n, S, B):
    """Random cut bits with densities from 0 to 1 (all-zero and all-one rows included)."""
    dens = np.concatenate([[0.0, 1.0], rng.random(n - 2)])
    return (rng.random((n, S, max(B - 1, 0))) < dens[:, None, None]).astype(np.uint8)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_numba_and_numpy_equal_reference(name, mode):
    problem = PROBLEMS[name]()
    S, B = problem.S, problem.B
    rng = np.random.default_rng(7)
    n = N_PLANS.get(name, 400)
    fb = random_population(rng, n, S, B)
    bb = random_population(rng, n, S, B)
    ref = np.array([gpipe_recurrence(problem, bits_to_plan(f, b, mode)) for f, b in zip(fb, bb)])
    T_numba = PopulationEvaluator(problem, mode, "numba")(fb, bb)
    assert np.array_equal(T_numba, ref)  # bit-identical
    T_numpy = PopulationEvaluator(problem, mode, "numpy")(fb, bb)
    np.testing.assert_allclose(T_numpy, ref, rtol=RTOL, atol=0)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
@pytest.mark.parametrize("mode", MODES)
def test_torch_backend_equals_reference(mode):
    problem = synthetic_problem(4, 16, 0)
    rng = np.random.default_rng(3)
    fb = random_population(rng, 200, 4, 16)
    bb = random_population(rng, 200, 4, 16)
    ref = np.array([gpipe_recurrence(problem, bits_to_plan(f, b, mode)) for f, b in zip(fb, bb)])
    ev = PopulationEvaluator(problem, mode, "torch", device="cpu")
    np.testing.assert_allclose(ev(fb, bb), ref, rtol=RTOL, atol=0)


@settings(max_examples=60, deadline=None)
@given(
    S=st.integers(1, 5),
    B=st.integers(1, 12),
    seed=st.integers(0, 1000),
    mode=st.sampled_from(MODES),
    data=st.data(),
)
def test_evaluator_equals_reference_property(S, B, seed, mode, data):
    problem = synthetic_problem(S, B, seed)
    bits = st.lists(st.integers(0, 1), min_size=S * (B - 1), max_size=S * (B - 1))
    f = np.array(data.draw(bits), dtype=np.uint8).reshape(S, B - 1)
    b = np.array(data.draw(bits), dtype=np.uint8).reshape(S, B - 1)
    plan = bits_to_plan(f, b, mode)
    ref = gpipe_recurrence(problem, plan)
    assert PopulationEvaluator(problem, mode, "numba")(f[None], b[None])[0] == ref
    assert PopulationEvaluator(problem, mode, "numpy")(f[None], b[None])[0] == pytest.approx(
        ref, rel=RTOL)
    # ... and the list-schedule simulator agrees with both on gpipe.
    assert simulate(problem, plan, "gpipe").iteration_time == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_forward_backward_split(backend):
    problem = synthetic_problem(6, 20, 4)
    rng = np.random.default_rng(0)
    fb = random_population(rng, 50, 6, 20)
    bb = random_population(rng, 50, 6, 20)
    ev = PopulationEvaluator(problem, "recompute", backend)
    np.testing.assert_array_equal(ev.backward(bb, ev.forward(fb)), ev(fb, bb))
    assert ev.evaluations == 50


def test_stash_ties_backward_to_forward():
    problem = synthetic_problem(4, 16, 0)
    rng = np.random.default_rng(1)
    fb = random_population(rng, 20, 4, 16)
    other = random_population(rng, 20, 4, 16)
    ev = PopulationEvaluator(problem, "stash")
    np.testing.assert_array_equal(ev(fb), ev(fb, other))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("S,M", [(1, 1), (3, 4), (4, 8)])
def test_edp_identity(backend, S, M):
    """docs/MODEL.md §4: identical stages, zero comm, opt = 0: T = (M + S - 1) (f + b)."""
    B = 8
    f, b = 0.25, 0.75  # per microbatch of B/M samples: constant costs
    prob = make_problem(fwd=[[f] * B] * S, bwd=[[b] * B] * S, rbwd=[[f + b] * B] * S)
    fb, bb = plan_to_bits(Plan.edp(S, B, M))
    T = PopulationEvaluator(prob, "stash", backend)(fb[None], bb[None])[0]
    assert T == pytest.approx((M + S - 1) * (f + b), rel=1e-12)


def test_bits_round_trip():
    problem = synthetic_problem(3, 9, 0)
    plan = Plan(fwd=((2, 7), (9,), (1,) * 9), bwd=((9,), (4, 5), (3, 3, 3)), mode="recompute")
    fb, bb = plan_to_bits(plan)
    assert [list(r) for r in fb] == plan.to_bits()[0]
    assert bits_to_plan(fb, bb, "recompute") == plan
    F, Bb = plans_to_bits([plan, plan])
    assert F.shape == (2, 3, 8) and Bb.shape == (2, 3, 8)
    ev = PopulationEvaluator(problem, "recompute")
    assert ev.plan_time(plan) == gpipe_recurrence(problem, plan)


def test_bad_input_is_a_clear_error():
    ev = PopulationEvaluator(synthetic_problem(3, 9, 0), "stash")
    with pytest.raises(ValueError, match=r"expected shape \[N, S=3, B-1=8\]"):
        ev(np.zeros((4, 3, 7), np.uint8))
    with pytest.raises(ValueError, match="unknown evaluator backend"):
        PopulationEvaluator(synthetic_problem(3, 9, 0), "stash", "cuda")


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_threads_split_rows_bit_identically(mode):
    """The population split over threads gives the single-thread results bit for bit."""
    problem = synthetic_problem(5, 24, 1)
    rng = np.random.default_rng(0)
    fb = (rng.random((203, 5, 23)) < 0.3).astype(np.uint8)
    bb = (rng.random((203, 5, 23)) < 0.3).astype(np.uint8)
    one = PopulationEvaluator(problem, mode, "numba")(fb, bb)
    for threads in (2, 3):
        many = PopulationEvaluator(problem, mode, "numba", threads=threads)
        assert np.array_equal(many(fb, bb), one)
        assert np.array_equal(many(fb[:40], bb[:40]), one[:40])  # too few rows: one block
