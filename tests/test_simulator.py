from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umpipe_bench.plan import Plan
from umpipe_bench.problem import Link
from umpipe_bench.simulator import gpipe_recurrence, simulate
from umpipe_bench.synthetic import synthetic_problem

from .conftest import make_problem


def test_hand_computed_unequal_partitions_with_comm():
    """S=2, B=4, recompute, P0=(1,3) P1=(2,2) Q0=(4) Q1=(3,1); comm(m) = 0.5 + m.

    fwd0(m)=m, fwd1(m)=1+m, rbwd0(m)=3m, rbwd1(m)=2+2m, opt=(0.25, 0.5). By hand (MODEL §4):
      F0: [0,1] [1,4];  X0: 1+1.5=2.5, max(2.5,4)+3.5=7.5
      F1: j=1 needs sample 2 -> X0[2]=7.5: [7.5,10.5];  j=2: [10.5,13.5]
      G1: [13.5,21.5] (3 samples), [21.5,25.5];  Y1: 21.5+3.5=25, max(25,25.5)+1.5=27
      G0: waits for sample 4's gradient (Y1[2]=27): [27,39];  T = max(39.25, 26) = 39.25
    """
    B = 4
    prob = make_problem(
        fwd=[[m for m in range(1, B + 1)], [1 + m for m in range(1, B + 1)]],
        bwd=[[1.0] * B, [1.0] * B],
        rbwd=[[3 * m for m in range(1, B + 1)], [2 + 2 * m for m in range(1, B + 1)]],
        opt=[0.25, 0.5],
        links=[Link(act_bytes=1.0, grad_bytes=1.0, latency=0.5, bandwidth=1.0)],
    )
    plan = Plan(fwd=((1, 3), (2, 2)), bwd=((4,), (3, 1)), mode="recompute")
    tl = simulate(prob, plan)
    got = {o.label: (o.t0, o.t1) for o in tl.ops}
    assert got == {
        "0F0": (0, 1), "0F1": (1, 4), "1F0": (7.5, 10.5), "1F1": (10.5, 13.5),
        "1B0": (13.5, 21.5), "1B1": (21.5, 25.5), "0B0": (27, 39),
        "0O0": (39, 39.25), "1O0": (25.5, 26.0),
    }
    assert [(t.kind, t.index, t.t0, t.t1) for t in tl.transfers] == [
        ("act", 0, 1, 2.5), ("act", 1, 4, 7.5), ("grad", 0, 21.5, 25), ("grad", 1, 25.5, 27),
    ]
    assert tl.iteration_time == 39.25
    assert gpipe_recurrence(prob, plan) == 39.25
    assert tl.busy == [1 + 3 + 12 + 0.25, 3 + 3 + 8 + 4 + 0.5]
    assert tl.bubble[0] == pytest.approx(1 - 16.25 / 39.25)


def test_1f1b_hand_checked_s3_m4():
    """Identical stages f=1, b=2, no comm, EDP(4) under 1F1B: timeline worked out by hand."""
    prob = make_problem(fwd=[[1.0] * 4] * 3, bwd=[[2.0] * 4] * 3)
    tl = simulate(prob, Plan.edp(3, 4, 4), "1f1b")
    got = {o.label: (o.t0, o.t1) for o in tl.ops if o.kind != "O"}
    assert got == {
        "0F0": (0, 1), "0F1": (1, 2), "0F2": (2, 3), "0B0": (7, 9), "0F3": (9, 10),
        "0B1": (10, 12), "0B2": (13, 15), "0B3": (16, 18),
        "1F0": (1, 2), "1F1": (2, 3), "1B0": (5, 7), "1F2": (7, 8), "1B1": (8, 10),
        "1F3": (10, 11), "1B2": (11, 13), "1B3": (14, 16),
        "2F0": (2, 3), "2B0": (3, 5), "2F1": (5, 6), "2B1": (6, 8), "2F2": (8, 9),
        "2B2": (9, 11), "2F3": (11, 12), "2B3": (12, 14),
    }
    assert tl.iteration_time == 18 == (4 + 3 - 1) * (1 + 2)


@settings(max_examples=60, deadline=None)
@given(
    S=st.integers(1, 6), M=st.integers(1, 6), m=st.integers(1, 4),
    f=st.floats(0.01, 10), b=st.floats(0.01, 10), schedule=st.sampled_from(["gpipe", "1f1b"]),
)
def test_edp_closed_form_identical_stages(S, M, m, f, b, schedule):
    """EDP(M), identical stages, zero comm, opt = 0: T = (M + S - 1)(f + b) (MODEL §4)."""
    B = M * m
    fwd = [[f * k / m for k in range(1, B + 1)]] * S  # f at size m
    bwd = [[b * k / m for k in range(1, B + 1)]] * S
    prob = make_problem(fwd=fwd, bwd=bwd)
    T = simulate(prob, Plan.edp(S, B, M), schedule).iteration_time
    assert T == pytest.approx((M + S - 1) * (f + b), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_single_stage_is_sum_of_costs(data):
    B = data.draw(st.integers(1, 12))
    fwd = [data.draw(st.lists(st.floats(0.01, 5), min_size=B, max_size=B))]
    bwd = [data.draw(st.lists(st.floats(0.01, 5), min_size=B, max_size=B))]
    rbwd = [data.draw(st.lists(st.floats(0.01, 5), min_size=B, max_size=B))]
    opt = data.draw(st.floats(0, 3))
    prob = make_problem(fwd=fwd, bwd=bwd, rbwd=rbwd, opt=[opt])
    bits = st.lists(st.integers(0, 1), min_size=B - 1, max_size=B - 1)
    plan = Plan.from_bits([data.draw(bits)], [data.draw(bits)], "recompute")
    want = sum(fwd[0][p - 1] for p in plan.fwd[0]) + sum(rbwd[0][q - 1] for q in plan.bwd[0]) + opt
    assert simulate(prob, plan).iteration_time == pytest.approx(want, rel=1e-12)
    assert gpipe_recurrence(prob, plan) == pytest.approx(want, rel=1e-12)


def _random_plan(rng, S, B, mode, density=0.3):
    fb = [[int(rng.random() < density) for _ in range(B - 1)] for _ in range(S)]
    bb = [[int(rng.random() < density) for _ in range(B - 1)] for _ in range(S)]
    return Plan.from_bits(fb, bb, mode)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6), which=st.sampled_from(
    ["fwd", "bwd", "rbwd", "opt", "latency", "act", "grad"]), grow=st.floats(1e-6, 2.0))
def test_iteration_time_never_decreases_when_a_cost_grows(seed, which, grow):
    from dataclasses import replace

    rng = random.Random(seed)
    S, B = rng.randint(1, 5), rng.randint(1, 12)
    prob = synthetic_problem(S, B, seed % 7)
    mode = rng.choice(["stash", "recompute"])
    plan = _random_plan(rng, S, B, mode)
    s = rng.randrange(S)
    stages, links = list(prob.stages), list(prob.links)
    if which in ("fwd", "bwd", "rbwd"):
        vals = list(getattr(stages[s], which))
        i = rng.randrange(len(vals))
        vals[i] += grow * vals[i]
        stages[s] = replace(stages[s], **{which: tuple(vals)})
    elif which == "opt":
        stages[s] = replace(stages[s], opt=stages[s].opt + grow)
    elif links:
        k = rng.randrange(len(links))
        field = {"latency": "latency", "act": "act_bytes", "grad": "grad_bytes"}[which]
        links[k] = replace(links[k], **{field: getattr(links[k], field) * (1 + grow) + grow})
    bigger = replace(prob, stages=tuple(stages), links=tuple(links))
    for schedule in ("gpipe", "1f1b") if plan.is_edp() else ("gpipe",):
        assert simulate(bigger, plan, schedule).iteration_time >= simulate(
            prob, plan, schedule).iteration_time
    assert gpipe_recurrence(bigger, plan) >= gpipe_recurrence(prob, plan)


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_list_schedule_simulator_equals_recurrence_on_random_plans(mode):
    rng = random.Random(7)
    for _ in range(300):
        S, B = rng.randint(1, 8), rng.randint(1, 24)
        prob = synthetic_problem(S, B, rng.randrange(5))
        plan = _random_plan(rng, S, B, mode, density=rng.random())
        a, b = simulate(prob, plan).iteration_time, gpipe_recurrence(prob, plan)
        assert a == pytest.approx(b, rel=1e-13, abs=0)


def test_peak_memory_estimate_by_hand():
    from dataclasses import replace

    from umpipe_bench.problem import StageMemory

    prob = make_problem(fwd=[[1.0] * 4] * 2, bwd=[[1.0] * 4] * 2)
    mem = StageMemory(param_bytes=100.0, saved_act_bytes_per_sample=10.0, input_bytes_per_sample=1.0)
    prob = replace(prob, stages=tuple(replace(s, memory=mem) for s in prob.stages))
    # stash, gpipe EDP(2): both microbatches' activations live at once: 100 + 4 * 10
    assert simulate(prob, Plan.edp(2, 4, 2)).peak_memory == [140.0, 140.0]
    # 1F1B on the last stage keeps one microbatch at a time: 100 + 2 * 10
    assert simulate(prob, Plan.edp(2, 4, 2), "1f1b").peak_memory == [140.0, 120.0]
    # recompute: stashed inputs + one backward microbatch's recomputed activations. Stage 0's
    # backward of 3 samples runs after the first one freed 1 input: 100 + 3 + 30.
    plan = Plan(fwd=((2, 2), (2, 2)), bwd=((1, 3), (4,)), mode="recompute")
    assert simulate(prob, plan).peak_memory == [100 + 3 + 30, 100 + 4 + 40]
    assert simulate(make_problem(fwd=[[1.0]], bwd=[[1.0]]), Plan.edp(1, 1, 1)).peak_memory is None
    assert simulate(replace(prob, device_capacity=139.0), Plan.edp(2, 4, 2), "1f1b").fits_memory is False
    assert simulate(replace(prob, device_capacity=140.0), Plan.edp(2, 4, 2)).fits_memory is True
