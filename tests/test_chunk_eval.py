"""The compiled chunk-plan evaluator (umpipe_bench/planners/evaluation/chunk_eval.py) gives
bit-identical iteration times and per-device peaks, and the same fallback counts, as the
Python path: the chunk rule (chunk_order) and the device simulator (simulate_devices, through
chunk_torch.simulate_plan). Floats compare with ``==``.

Random populations share a space (D <= 4, B <= 16, layouts one, loop with v = 1..3 and V;
stash and recompute; split, with coarse W partitions, and not) and differ in everything else
(partitions, caps, w_caps, group, lags); torch's schedules as plans run on the committed
profiles gpt1-14 and vgg16."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_chunk_schedule import coarsenings, compositions
from umpipe_bench.chunk_codec import ChunkSpace
from umpipe_bench.chunk_schedule import FALLBACKS, chunk_order
from umpipe_bench.chunk_torch import random_split_problem, simulate_plan, torch_plan
from umpipe_bench.chunkplan import ChunkPlan, ChunkPlanError
from umpipe_bench.layout import balanced_counts
from umpipe_bench.planners.evaluation.chunk_eval import ChunkEvaluator
from umpipe_bench.planners.evaluation.chunk_objective import ChunkObjective
from umpipe_bench.registry import get_problem
from umpipe_bench.torch_schedules import schedule_info


@st.composite
def populations(draw, max_D: int = 4, max_B: int = 16) -> list[ChunkPlan]:
    """1..4 random plans of one random space (the strategy of tests/test_chunk_schedule.py,
    one space drawn, then every per-individual field per plan)."""
    D = draw(st.integers(1, max_D))
    kind = draw(st.sampled_from(["one", "loop", "v"]))
    v = {"one": 1, "v": 2}.get(kind) or draw(st.integers(1, 3))
    C = v * D
    layers = [1] * C
    for _ in range(draw(st.integers(0, 2))):
        layers[draw(st.integers(0, C - 1))] += 1
    B = draw(st.integers(1, max_B))
    mode = draw(st.sampled_from(["stash", "recompute"]))
    split = draw(st.booleans())
    plans = []
    for _ in range(draw(st.integers(1, 4))):
        fwd = [draw(compositions(B)) for _ in range(C)]
        bwd = fwd if mode == "stash" else [draw(compositions(B)) for _ in range(C)]
        wgt = [draw(coarsenings(q)) for q in bwd] if split and draw(st.booleans()) else None
        caps = draw(st.none() | st.lists(st.integers(1, v * B + 1), min_size=D, max_size=D))
        w_caps = draw(st.none() | st.lists(st.integers(0, v * B), min_size=D, max_size=D)) \
            if split else None
        lags = [draw(st.none() | st.lists(st.integers(0, B), min_size=C, max_size=C))
                for _ in "fb"]
        plans.append(ChunkPlan(
            D=D, layout=kind, layers=tuple(layers), fwd=tuple(fwd), bwd=tuple(bwd), mode=mode,
            split=split, wgt=None if wgt is None else tuple(wgt),
            caps=None if caps is None else tuple(caps),
            w_caps=None if w_caps is None else tuple(w_caps),
            group=draw(st.none() | st.integers(1, B)),
            fwd_lag=None if lags[0] is None else tuple(lags[0]),
            bwd_lag=None if lags[1] is None else tuple(lags[1])))
    return plans


@pytest.fixture(scope="module")
def problems():
    cache = {}

    def get(L, B):
        if (L, B) not in cache:
            cache[(L, B)] = random_split_problem(L, B, seed=L * 100 + B)
        return cache[(L, B)]
    return get


def check_population(problem, plans, op_overhead=0.0, threads=1) -> None:
    """Every row of the kernel's result == the Python path's, bit for bit."""
    space = ChunkSpace.of(plans[0])
    ev = ChunkEvaluator(problem, space, threads=threads, op_overhead=op_overhead)
    ev.MIN_ROWS_PER_THREAD = 1
    T, peak, nfall = ev.evaluate(space.encode(plans))
    for i, plan in enumerate(plans):
        tl = simulate_plan(problem, plan, op_overhead)
        assert T[i] == tl.iteration_time, (i, plan)
        assert peak[i].tolist() == tl.peak_memory, (i, plan)
        fired = Counter(k for _, _, k in chunk_order(plan).fallbacks)
        assert nfall[i].tolist() == [fired[k] for k in FALLBACKS], (i, plan)


@settings(max_examples=100, deadline=None)
@given(populations(), st.sampled_from([0.0, 1e-3]))
def test_random_populations_are_bit_identical_to_the_python_path(problems, plans, ovh):
    check_population(problems(sum(plans[0].layers), plans[0].B), plans, ovh)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(populations(), st.sampled_from([0.0, 1e-3]))
def test_random_populations_are_bit_identical_to_the_python_path_many(problems, plans, ovh):
    check_population(problems(sum(plans[0].layers), plans[0].B), plans, ovh)


def _torch_plans(problem, D, Ms, names, mode):
    """torch's schedules as plans on ``problem`` (balanced layer counts), grouped by space."""
    out: dict[ChunkSpace, list[ChunkPlan]] = {}
    for name in names:
        info = schedule_info(name)
        for M in Ms:
            for v in ((1, 2) if info.layout == "loop" else (None,)):
                C = {"one": D, "v": 2 * D}.get(info.layout) or D * v
                try:
                    plan = torch_plan(name, D, M, balanced_counts(problem.S, C), problem.B,
                                      mode)
                except (ChunkPlanError, ValueError):
                    continue  # a combination torch does not accept
                out.setdefault(ChunkSpace.of(plan), []).append(plan)
    return out


SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb1p", "looped-bfs", "zbv", "dualpipev")


@pytest.mark.parametrize("name", ["gpt1-14", "vgg16"])
def test_torch_schedules_as_plans_on_committed_profiles(name):
    problem = get_problem(name)
    for plans in _torch_plans(problem, 4, (4, 8), SCHEDULES, "stash").values():
        check_population(problem, plans)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt1-14", "vgg16"])
@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_torch_schedules_as_plans_on_committed_profiles_grid(name, mode):
    problem = get_problem(name)
    Ms = [M for M in range(1, 17) if problem.B % M == 0]
    for D in (1, 2, 3, 4):
        for plans in _torch_plans(problem, D, Ms, SCHEDULES, mode).values():
            check_population(problem, plans, threads=2)


def test_threads_and_blocks_do_not_change_results(problems):
    problem = problems(8, 12)
    space = ChunkSpace(2, "loop", (2, 2, 2, 2), 12, "recompute", True)
    g = space.random(np.random.default_rng(1), 40)
    one = ChunkEvaluator(problem, space).evaluate(g)
    ev = ChunkEvaluator(problem, space, threads=2)
    ev.MIN_ROWS_PER_THREAD = 3
    two = ev.evaluate(g)
    assert all(np.array_equal(a, b) for a, b in zip(one, two))
    for i in (0, 17, 39):  # and rows of a random population match the Python path
        tl = simulate_plan(problem, space.decode(g, i))
        assert one[0][i] == tl.iteration_time and one[1][i].tolist() == tl.peak_memory


def test_a_device_over_its_capacity_gets_inf(problems):
    problem = problems(6, 8)
    space = ChunkSpace(3, "v", (1,) * 6, 8, "recompute", True)
    g = space.random(np.random.default_rng(2), 32)
    T, peak, _ = ChunkEvaluator(problem, space).evaluate(g)
    cap = float(np.median(peak.max(axis=1)))
    ev = ChunkEvaluator(problem, space, memory_cap=cap)
    got = ev(g)
    over = (peak > cap).any(axis=1)
    assert over.any() and not over.all()
    assert np.all(np.isinf(got[over])) and np.array_equal(got[~over], T[~over])
    obj = ChunkObjective(problem, space, memory_cap=cap)
    ref = ChunkObjective(problem, space, memory_cap=cap, backend="python")
    assert np.array_equal(obj.evaluate(g), got) and np.array_equal(ref.evaluate(g), got)
    assert obj.decode(g, 3) == space.decode(g, 3)


def test_the_evaluator_refuses_a_space_that_does_not_fit(problems):
    problem = problems(4, 8)
    with pytest.raises(ChunkPlanError, match="does not fit"):
        ChunkEvaluator(problem, ChunkSpace(2, "one", (2, 3), 8))
    with pytest.raises(ChunkPlanError, match="split-backward"):
        ChunkEvaluator(get_problem("sim-s4-b8-s0"), ChunkSpace(2, "one", (2, 2), 8,
                                                               split=True))
