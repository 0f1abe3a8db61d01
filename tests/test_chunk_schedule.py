"""The chunk rule (docs/CHUNK-SCHEDULES.md §2-§4) on random chunk plans: complete lists in a
global order that puts every operation after its inputs, caps kept unless a past-cap fallback
fired, the device simulator completes, the visiting order does not matter; with one chunk per
device and no split it is the capped rule; and small cases derived by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umpipe_bench.chunk_schedule import FALLBACKS, chunk_order, format_lists
from umpipe_bench.chunk_torch import random_split_problem, simulate_plan
from umpipe_bench.chunkplan import ChunkPlan
from umpipe_bench.devsim import simulate_devices
from umpipe_bench.layout import group_layers
from umpipe_bench.plan import Plan
from umpipe_bench.schedules import capped_order


# ------------------------------------------------------------------------------ strategies
@st.composite
def compositions(draw, B: int) -> tuple[int, ...]:
    cuts = draw(st.lists(st.booleans(), min_size=B - 1, max_size=B - 1))
    sizes, run = [], 1
    for cut in cuts:
        if cut:
            sizes.append(run)
            run = 0
        run += 1
    return (*sizes, run)


@st.composite
def coarsenings(draw, q: tuple[int, ...]) -> tuple[int, ...]:
    keep = draw(st.lists(st.booleans(), min_size=len(q) - 1, max_size=len(q) - 1))
    out, run = [], 0
    for m, k in zip(q, [*keep, True]):
        run += m
        if k:
            out.append(run)
            run = 0
    return tuple(out)


@st.composite
def chunk_plans(draw, max_D: int = 4, max_B: int = 16, one_unsplit: bool = False
                ) -> ChunkPlan:
    D = draw(st.integers(1, max_D))
    kind = "one" if one_unsplit else draw(st.sampled_from(["one", "loop", "v"]))
    v = {"one": 1, "v": 2}.get(kind) or draw(st.integers(1, 3))
    C = v * D
    layers = [1] * C
    for _ in range(draw(st.integers(0, 2))):
        layers[draw(st.integers(0, C - 1))] += 1
    B = draw(st.integers(1, max_B))
    mode = draw(st.sampled_from(["stash", "recompute"]))
    split = False if one_unsplit else draw(st.booleans())
    fwd = [draw(compositions(B)) for _ in range(C)]
    bwd = fwd if mode == "stash" else [draw(compositions(B)) for _ in range(C)]
    wgt = [draw(coarsenings(q)) for q in bwd] if split and draw(st.booleans()) else None
    caps = draw(st.none() | st.lists(st.integers(1, v * B + 1), min_size=D, max_size=D))
    if one_unsplit and caps is None:
        caps = [B] * D
    w_caps = draw(st.none() | st.lists(st.integers(0, v * B), min_size=D, max_size=D)) \
        if split else None
    group = None if one_unsplit else draw(st.none() | st.integers(1, B))
    lags = (None, None) if one_unsplit else tuple(
        draw(st.none() | st.lists(st.integers(0, B), min_size=C, max_size=C)) for _ in "fb")
    return ChunkPlan(D=D, layout=kind, layers=tuple(layers), fwd=tuple(fwd), bwd=tuple(bwd),
                     mode=mode, split=split, wgt=None if wgt is None else tuple(wgt),
                     caps=None if caps is None else tuple(caps),
                     w_caps=None if w_caps is None else tuple(w_caps), group=group,
                     fwd_lag=lags[0], bwd_lag=lags[1])


# ------------------------------------------------------------------------------ the checks
def _ranges(sizes):
    out, a = [], 0
    for m in sizes:
        out.append((a, a + m))
        a += m
    return out


def _overlap(ranges, a, b):
    return [k for k, (lo, hi) in enumerate(ranges) if lo < b and hi > a]


def check_schedule(plan: ChunkPlan, sched) -> None:
    """Everything docs/CHUNK-SCHEDULES.md §3 claims of the rule's result, checked from the
    plan alone (independently of the rule's code)."""
    C, dev = plan.C, plan.devices
    g = "I" if plan.split else "B"
    parts = {"F": plan.fwd, g: plan.bwd, **({"W": plan.wgt} if plan.split else {})}
    rng = {k: [_ranges(p) for p in v] for k, v in parts.items()}
    # complete, each chunk's operations of a kind in index order, on the chunk's device
    for d, row in enumerate(sched.lists):
        assert all(dev[a.chunk] == d for a in row)
    for c in range(C):
        for kind, ps in parts.items():
            got = [a.mb for a in sched.lists[dev[c]] if a.chunk == c and a.kind == kind]
            assert got == list(range(len(ps[c]))), (c, kind)
    assert sum(map(len, sched.lists)) == sum(len(p) for ps in parts.values() for p in ps)
    # the global order: a merge of the device lists, every operation after its inputs
    assert sorted(map(str, sched.order)) == sorted(str(a) for row in sched.lists for a in row)
    for d in range(plan.D):
        assert [a for a in sched.order if dev[a.chunk] == d] == sched.lists[d]
    pos = {(a.chunk, a.kind, a.mb): i for i, a in enumerate(sched.order)}
    for (c, kind, j), i in pos.items():
        lo, hi = rng[kind][c][j]
        need = []
        if kind == "F" and c > 0:
            need = [(c - 1, "F", k) for k in _overlap(rng["F"][c - 1], lo, hi)]
        elif kind == g:
            need = [(c, "F", k) for k in _overlap(rng["F"][c], lo, hi)]
            if c < C - 1:
                need += [(c + 1, g, k) for k in _overlap(rng[g][c + 1], lo, hi)]
        elif kind == "W":
            need = [(c, g, k) for k in _overlap(rng[g][c], lo, hi)]
        assert all(pos[n] < i for n in need), ((c, kind, j), need)
    # caps: a device's in-flight samples pass its cap only through a past-cap fallback or a
    # forward taken when none of its backwards was possible; complete pending W's stay within
    # w_caps wherever the device's next operation is not a W
    K, KW = plan.effective_caps(), plan.effective_w_caps()
    past = {i for i, _, k in sched.fallbacks if k == "past-cap"}
    assert all(k in FALLBACKS for _, _, k in sched.fallbacks)
    for d, row in enumerate(sched.lists):
        chunks = plan.device_chunks[d]
        done = {(c, k): 0 for c in chunks for k in parts}
        n = {(c, k): 0 for c in chunks for k in parts}
        load = pend = 0
        for i, a in enumerate(row):
            c, kind = a.chunk, a.kind
            lo, hi = rng[kind][c][a.mb]
            if kind == "F" and load + hi - lo > K[d] and pos[(c, kind, a.mb)] not in past:
                for e in chunks:  # no backward of the device was possible
                    if n[(e, g)] < len(rng[g][e]):
                        b = rng[g][e][n[(e, g)]][1]
                        assert not (done[(e, "F")] >= b and (
                            e == C - 1 or dev[e + 1] != d or done[(e + 1, g)] >= b)), (d, i)
            n[(c, kind)] += 1
            done[(c, kind)] = hi
            load += {"F": hi - lo, g: lo - hi}.get(kind, 0)
            if plan.split:
                pend += {g: hi - lo, "W": lo - hi}.get(kind, 0)
                nxt = row[i + 1].kind if i + 1 < len(row) else None
                complete = any(n[(e, "W")] < len(rng["W"][e]) and
                               rng["W"][e][n[(e, "W")]][1] <= done[(e, g)] for e in chunks)
                assert nxt == "W" or pend <= KW[d] or not complete, (d, i)


@pytest.fixture(scope="module")
def problems():
    cache = {}

    def get(L, B):
        if (L, B) not in cache:
            cache[(L, B)] = random_split_problem(L, B, seed=L * 100 + B)
        return cache[(L, B)]
    return get


# ------------------------------------------------------------------------------ properties
@settings(max_examples=150, deadline=None)
@given(chunk_plans())
def test_every_chunk_plan_gets_complete_deadlock_free_lists(problems, plan):
    sched = chunk_order(plan)
    check_schedule(plan, sched)
    assert chunk_order(plan, visit=list(reversed(range(plan.D)))).lists == sched.lists
    p = problems(sum(plan.layers), plan.B)
    tl = simulate_devices(group_layers(p, plan.layers), plan.devices, sched.lists, None,
                          plan.mode, parts=plan.parts())
    assert tl.iteration_time >= max(tl.busy) > 0


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(chunk_plans())
def test_every_chunk_plan_gets_complete_deadlock_free_lists_many(problems, plan):
    test_every_chunk_plan_gets_complete_deadlock_free_lists.hypothesis.inner_test(
        problems, plan)


@settings(max_examples=60, deadline=None)
@given(chunk_plans(max_D=6, max_B=16, one_unsplit=True))
def test_one_chunk_per_device_unsplit_is_the_capped_rule(plan):
    ref = capped_order(Plan(fwd=plan.fwd, bwd=plan.bwd, mode=plan.mode, caps=plan.caps),
                       plan.caps)
    assert chunk_order(plan).names() == [[str(o) for o in row] for row in ref]


@settings(max_examples=40, deadline=None)
@given(chunk_plans())
def test_without_caps_no_forward_runs_past_a_cap(plan):
    """No cap, no past-cap fallback: one always has an orderable forward within the cap or an
    orderable backward (docs/CHUNK-SCHEDULES.md §3). With one chunk per device it is GPipe
    (all forwards, then all backwards, then all W's) and no fallback fires at all."""
    plan = plan.replace(caps=None, w_caps=None)
    sched = chunk_order(plan)
    assert sched.past_cap == 0
    if plan.layout == "one":
        assert not sched.fallbacks
        for row in sched.lists:
            kinds = "".join(a.kind for a in row)
            assert kinds == "".join(sorted(kinds, key="FBIW".index))


# ------------------------------------------------------------------------------ by hand
def test_a_forward_waiting_device_takes_a_backward_before_any_cap_is_exceeded():
    """Two devices, P = (1, 1), caps (1, 2): device 0 holds 1 and waits for 1B0; device 1
    could take a second forward (load 2 <= 2) but waits for 0F1; its 1B0 can run, so
    fallback 1 takes it and nobody exceeds a cap."""
    plan = ChunkPlan(D=2, layout="loop", layers=(1, 1), fwd=((1, 1),) * 2, bwd=((1, 1),) * 2,
                     caps=(1, 2))
    sched = chunk_order(plan)
    assert sched.names() == [["0F0", "0B0", "0F1", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
    assert sched.fallbacks == [(2, 1, "backward")] and sched.past_cap == 0


def test_a_cap_below_what_the_downstream_needs_runs_past_it():
    """Device 1's one forward needs both of device 0's samples, and device 0's cap is 1:
    no backward can run anywhere, so device 0 takes its second forward past its cap."""
    plan = ChunkPlan(D=2, layout="one", layers=(1, 1), fwd=((1, 1), (2,)),
                     bwd=((1, 1), (2,)), caps=(1, 2))
    sched = chunk_order(plan)
    assert sched.names() == [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0"]]
    assert sched.fallbacks == [(1, 0, "past-cap")]


def test_zb_h1_on_two_devices_by_hand():
    """ZB-H1 on two devices and four microbatches (torch's zb1p at v = 1): device 0 holds two
    microbatches in flight and runs each W right after its I (w_cap 0); device 1 holds one
    and keeps one W pending (w_cap 1): each W one I late, the last one at its end."""
    plan = ChunkPlan.equal(2, 4, 4, "one", (1, 1), split=True, caps=(2, 1), w_caps=(0, 1))
    assert format_lists(chunk_order(plan).lists).splitlines() == [
        "device 0: 0F0 0F1 0I0 0W0 0F2 0I1 0W1 0F3 0I2 0W2 0I3 0W3",
        "device 1: 1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1F3 1I3 1W2 1W3",
    ]


def test_a_coarse_w_waits_for_the_last_i_it_covers():
    plan = ChunkPlan(D=1, layout="one", layers=(1,), fwd=((1, 1, 2),), bwd=((1, 1, 2),),
                     split=True, wgt=((2, 2),), caps=(1,), w_caps=(0,))
    # one in flight: F0 I0, then W0 needs I1 too; the pending I0 stays until then
    assert chunk_order(plan).names() == [["0F0", "0I0", "0F1", "0I1", "0W0", "0F2", "0I2",
                                          "0W1"]]


def test_simulate_plan_checks_the_plan_against_the_problem():
    p = random_split_problem(4, 8, 0)
    plan = ChunkPlan.equal(2, 8, 4, "loop", (1, 1, 1, 1), split=True, caps=(8, 4))
    assert simulate_plan(p, plan).iteration_time > 0
    with pytest.raises(ValueError, match="covers 3 layers"):
        simulate_plan(p, plan.replace(layers=(2, 1), layout="one", fwd=plan.fwd[:2],
                                      bwd=plan.bwd[:2], wgt=None))
