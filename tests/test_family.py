"""The capped schedule family (docs/SCHEDULES.md): its rule, torch's orders, deadlock freedom,
memory, and the numba evaluator's bit-identity with the list simulator."""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umpipe_bench import registry
from umpipe_bench.memory import MemoryCapError, parse_size
from umpipe_bench.plan import Plan, PlanError
from umpipe_bench.planners.evaluation import reference
from umpipe_bench.planners.evaluation.encoding import random_bits
from umpipe_bench.planners.evaluation.evaluator import bits_to_plan
from umpipe_bench.planners.evaluation.family import FamilyEvaluator
from umpipe_bench.schedules import build_schedule, capped_order, capped_order_escapes
from umpipe_bench.simulator import simulate
from umpipe_bench.synthetic import synthetic_problem


def _names(ops):
    return [[str(o) for o in row] for row in ops]


@st.composite
def compositions(draw, B):
    cuts = draw(st.lists(st.booleans(), min_size=B - 1, max_size=B - 1))
    return Plan.from_bits([cuts], None).fwd[0]


@st.composite
def capped_plans(draw, max_S=6, max_B=24):
    S = draw(st.integers(1, max_S))
    B = draw(st.integers(1, max_B))
    mode = draw(st.sampled_from(["stash", "recompute"]))
    fwd = tuple(draw(compositions(B)) for _ in range(S))
    bwd = fwd if mode == "stash" else tuple(draw(compositions(B)) for _ in range(S))
    caps = tuple(draw(st.integers(1, B + 2)) for _ in range(S))
    return Plan(fwd=fwd, bwd=bwd, mode=mode, caps=caps)


# ----------------------------------------------------------------------------- the two ends
@settings(max_examples=150, deadline=None)
@given(capped_plans())
def test_caps_of_at_least_B_give_exactly_the_gpipe_lists(plan):
    big = plan.with_caps([plan.B + k for k in range(plan.S)])
    gp = Plan(fwd=plan.fwd, bwd=plan.bwd, mode=plan.mode)
    assert _names(build_schedule("capped", big)) == _names(build_schedule("gpipe", gp))
    # and gpipe's lists are what they always were: all forwards, then all backwards
    for s, row in enumerate(build_schedule("gpipe", gp)):
        kinds = [o.kind for o in row]
        assert kinds == ["F"] * len(plan.fwd[s]) + ["B"] * len(plan.bwd[s])


def _torch_1f1b_order(S: int, M: int) -> list[list[str]]:
    """The operations torch's Schedule1F1B really runs, per stage, recorded by driving its
    ``_step_microbatches`` with a stage object that only logs what it is asked to do."""
    from torch.distributed.pipelining.schedules import Schedule1F1B

    out = []
    for s in range(S):
        log: list[str] = []
        stage = types.SimpleNamespace(
            stage_index=s, num_stages=S, is_first=s == 0, is_last=s == S - 1,
            get_fwd_recv_ops=lambda i: [], get_fwd_send_ops=lambda i: [],
            get_bwd_recv_ops=lambda i: [], get_bwd_send_ops=lambda i: [],
            forward_one_chunk=lambda i, *a, _s=s, _log=log, **k: _log.append(f"{_s}F{i}"),
            backward_one_chunk=lambda i, _s=s, _log=log, **k: _log.append(f"{_s}B{i}"),
            perform_reduce_grad=lambda *a: None,
        )
        sched = Schedule1F1B(stage, M, loss_fn=lambda a, b: a)
        sched._initialize_stage = lambda *a, **k: None
        sched._check_inputs = lambda a, k, t, loss: ([None] * M, [{}] * M)
        sched._maybe_compute_loss = lambda *a, **k: None
        sched._maybe_get_loss = lambda *a, **k: None
        sched._update_losses = lambda *a, **k: None
        sched._step_microbatches([None] * M, [{}] * M, None, None)
        out.append(log)
    return out


@pytest.mark.parametrize("S", range(1, 9))
def test_edp_with_caps_S_minus_s_times_B_over_M_is_torch_schedule1f1b(S):
    pytest.importorskip("torch.distributed.pipelining")
    for M in range(max(S, 1), 17):
        for m in (1, 3):
            B = M * m
            plan = Plan.edp(S, B, M).with_caps([(S - s) * B // M for s in range(S)])
            want = _torch_1f1b_order(S, M)
            assert _names(build_schedule("capped", plan)) == want, (S, M, m)
            assert _names(build_schedule("1f1b", Plan.edp(S, B, M))) == want, (S, M, m)


def test_torch_pipeline_order_ir_for_the_last_rank_is_not_what_it_runs():
    """A surprise worth pinning: Schedule1F1B.pipeline_order (torch's schedule IR) lists the
    last rank's forwards from 1 to M, while _step_microbatches runs 0..M-1; we compare against
    what torch runs, not its IR."""
    pytest.importorskip("torch.distributed.pipelining")
    from torch.distributed.pipelining.schedules import Schedule1F1B

    sched = Schedule1F1B(types.SimpleNamespace(num_stages=4), 6, loss_fn=lambda a, b: a)
    ir = [str(a) for a in sched.pipeline_order[3] if a is not None]
    ran = _torch_1f1b_order(4, 6)[3]
    assert ir[0] == "3F1" and ran[0] == "3F0"


# ----------------------------------------------------------------------------- deadlock freedom
@settings(max_examples=300, deadline=None)
@given(capped_plans())
def test_every_plan_and_cap_gets_a_complete_deadlock_free_order(plan):
    ops, escapes = capped_order_escapes(plan, plan.caps)
    assert _names(ops) == _names(build_schedule("capped", plan))
    for s in range(plan.S):
        fw = [o.index for o in ops[s] if o.kind == "F"]
        bw = [o.index for o in ops[s] if o.kind == "B"]
        assert fw == list(range(len(plan.fwd[s])))  # each op once, in sample order
        assert bw == list(range(len(plan.bwd[s])))
        # a stage that never ran past its cap (fallback 2) took each forward either within
        # its cap or because its own next backward needed that forward
        if s not in escapes:
            done_f = done_b = nb = 0
            for o in ops[s]:
                if o.kind == "F":
                    needed = done_f < plan.bwd[s][nb] + done_b
                    assert needed or done_f - done_b + o.size <= plan.caps[s], (s, o)
                    done_f = o.stop
                else:
                    done_b, nb = o.stop, nb + 1
    # The runtime sends each stage's outputs in its op order and receives each link's stream
    # in sample order, so both ends of every link agree when forwards (backwards) run in index
    # order, checked above. A global order where every receive follows its send exists iff the
    # list simulator completes (it raises SimulationError on a deadlock).
    prob = synthetic_problem(S=plan.S, B=plan.B, seed=1)
    tl = simulate(prob, plan)
    assert len([o for o in tl.ops if o.kind != "O"]) == sum(map(len, ops))
    # the numba evaluator orders and times the same plan bit-identically
    T, peak = FamilyEvaluator(prob, plan.mode).plan_time(plan)
    assert T == tl.iteration_time and list(peak) == tl.peak_memory


def test_no_cap_below_B_ever_needs_an_escape():
    plan = Plan(fwd=((1, 3), (2, 2)), bwd=((4,), (1, 1, 2)), mode="recompute", caps=(4, 4))
    assert capped_order_escapes(plan, plan.caps)[1] == []


def test_unequal_stages_under_caps_by_hand():
    # Stage 0 (microbatches of 2, cap 4) forwards 2 microbatches, then must backward; its B0
    # needs stage 1's B0 (samples 0..3), which needs only 1F0. After each backward it is back
    # to 2 in flight and forwards again: F F B F B F B B. Stage 1 (one microbatch of 4 = its
    # cap) alternates.
    plan = Plan(fwd=((2, 2, 2, 2), (4, 4)), bwd=((2, 2, 2, 2), (4, 4)), caps=(4, 4))
    ops = build_schedule("capped", plan)
    assert _names(ops) == [["0F0", "0F1", "0B0", "0F2", "0B1", "0F3", "0B2", "0B3"],
                           ["1F0", "1B0", "1F1", "1B1"]]


def test_a_cap_below_the_microbatch_runs_past_it_instead_of_deadlocking():
    plan = Plan(fwd=((4,), (4,)), bwd=((4,), (4,)), caps=(1, 1))
    assert _names(build_schedule("capped", plan)) == [["0F0", "0B0"], ["1F0", "1B0"]]


def test_gpipe_refuses_a_plan_with_caps_below_B():
    with pytest.raises(PlanError, match="schedule is 'capped'"):
        build_schedule("gpipe", Plan.edp(2, 4, 2).with_caps([2, 2]))


def test_capped_order_checks_its_arguments():
    with pytest.raises(ValueError, match="cap unit"):
        capped_order(Plan.edp(2, 4, 2), (4, 4), unit="bytes")
    with pytest.raises(PlanError, match="caps"):
        Plan.edp(2, 4, 2).with_caps([1])
    with pytest.raises(PlanError, match="stage 1 cap"):
        Plan.edp(2, 4, 2).with_caps([1, 0])
    with pytest.raises(PlanError, match="stage 0 cap"):
        Plan.edp(2, 4, 2).with_caps([2.5, 1])


def test_plan_files_round_trip_their_caps(tmp_path):
    plan = Plan(fwd=((1, 3), (4,)), bwd=((2, 2), (1, 3)), mode="recompute", caps=(3, 4))
    plan.save(tmp_path / "p.json")
    back = Plan.load(tmp_path / "p.json")
    assert back == plan and back.caps == (3, 4)


# ----------------------------------------------------------------------------- memory
def test_peak_memory_by_hand_under_caps():
    prob = synthetic_problem(S=2, B=4, seed=0)
    m0, m1 = (st_.memory for st_ in prob.stages)
    plan = Plan.edp(2, 4, 4).with_caps([2, 1])
    tl = simulate(prob, plan)
    assert tl.peak_memory == [m0.param_bytes + 2 * m0.saved_act_bytes_per_sample,
                              m1.param_bytes + 1 * m1.saved_act_bytes_per_sample]
    # recompute, caps (2, 4): stage 1 wants its third forward, which waits for stage 0, which
    # waits for stage 1's first backward: the rule lets stage 1 take that ready backward
    # (no cap exceeded) instead of pushing stage 0 past its cap.
    rec = Plan(fwd=plan.fwd, bwd=((2, 2), (2, 2)), mode="recompute", caps=(2, 4))
    ops, escapes = capped_order_escapes(rec, rec.caps)
    assert escapes == []
    assert _names(ops) == [["0F0", "0F1", "0B0", "0F2", "0F3", "0B1"],
                           ["1F0", "1F1", "1B0", "1F2", "1F3", "1B1"]]
    tl = simulate(prob, rec)
    # each stage: inputs of 2 in-flight samples plus a 2-sample backward's activations
    for s_, m in enumerate((m0, m1)):
        assert tl.peak_memory[s_] == (m.param_bytes + 2 * m.input_bytes_per_sample
                                      + 2 * m.saved_act_bytes_per_sample)


def test_a_stage_waiting_for_a_forward_takes_a_ready_backward_before_any_cap_is_exceeded():
    # Stage 1 could keep 4 samples, stage 0 only 2. Stage 0's first backward needs stage 1's
    # backward of samples 0..3, so stage 0 must hold 4: the one forward past its cap is needed.
    plan = Plan(fwd=((1, 1, 1, 1),) * 2, bwd=((2, 2), (4,)), mode="recompute", caps=(2, 4))
    ops, escapes = capped_order_escapes(plan, plan.caps)
    assert escapes == [0, 0]
    assert _names(ops)[0] == ["0F0", "0F1", "0F2", "0F3", "0B0", "0B1"]


def test_parse_size():
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("1.5 GiB") == 1.5 * 2**30
    assert parse_size("2GB") == 2e9
    assert parse_size("1000") == 1000.0
    for bad in ("", "12 parsecs", "-3GiB", "0", "GiB"):
        with pytest.raises(PlanError, match="--memory-cap"):
            parse_size(bad)


def test_best_edp_is_the_best_m_that_fits_and_names_the_stage_when_none_does():
    prob = registry.get_problem("sim-s8-b64-s0")
    M, _ = reference.best_edp(prob, "stash", "gpipe")
    cap = reference.edp_scan(prob, "stash", "gpipe").peaks[M - 1].max() / 2
    # GPipe keeps every sample's activations whatever M: nothing fits half its peak
    with pytest.raises(MemoryCapError, match=r"needs .* on stage \d+, whose cap is"):
        reference.best_edp(prob, "stash", "gpipe", cap)
    # 1F1B keeps fewer: its best M that fits is the fastest of those that fit
    Mc, Tc = reference.best_edp(prob, "stash", "1f1b", cap)
    scan = reference.edp_scan(prob, "stash", "1f1b", cap)
    assert scan.peaks[Mc - 1].max() <= cap
    assert all(scan.times[i] >= Tc for i in range(prob.B) if scan.fits[i])
    assert not scan.fits.all()


# ----------------------------------------------------------------------------- the evaluator
def _population(prob, seed: int, N: int):
    """Random forward and backward cut bits and caps of ``N`` plans."""
    rng = np.random.default_rng(seed)
    fb = random_bits(rng, N, prob.S, prob.B)
    bb = random_bits(rng, N, prob.S, prob.B)
    return fb, bb, rng.integers(1, prob.B + 1, size=(N, prob.S))


@pytest.mark.parametrize("name", ["sim-s3-b6-s0", "sim-s4-b16-s0", "gpt1-14", "vgg16"])
@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_family_evaluator_is_bit_identical_to_the_list_simulator(name, mode):
    prob = registry.get_problem(name)
    N = 40
    fb, bb, caps = _population(prob, 7, N)
    caps[:5] = prob.B
    T, peak = FamilyEvaluator(prob, mode).evaluate(fb, bb, caps)
    for n in range(N):
        plan = bits_to_plan(fb[n], bb[n], mode).with_caps(caps[n])
        tl = simulate(prob, plan)
        assert T[n] == tl.iteration_time
        assert list(peak[n]) == tl.peak_memory


@pytest.mark.parametrize("name", ["sim-s4-b16-s0", "vgg16"])
@pytest.mark.parametrize("mode", ["stash", "recompute"])
@pytest.mark.parametrize("unit", ["samples", "microbatches"])
def test_times_without_peaks_and_one_decode_for_tied_bits_are_bit_identical(name, mode, unit):
    # the kernel's two shortcuts: without a memory cap the call skips the peaks, and the same
    # array as forward and backward bits is decoded once; neither may change a time
    prob = registry.get_problem(name)
    fb, bb, caps = _population(prob, 11, 60)
    ev = FamilyEvaluator(prob, mode)
    T, _ = ev.evaluate(fb, bb, caps, unit)
    assert np.array_equal(ev(fb, bb, caps, unit), T)
    T_tied, peak_tied = ev.evaluate(fb, fb, caps, unit)  # one array: one decode
    T_copy, peak_copy = ev.evaluate(fb, fb.copy(), caps, unit)  # two arrays: two decodes
    assert np.array_equal(T_tied, T_copy) and np.array_equal(peak_tied, peak_copy)
    assert np.array_equal(ev(fb, fb, caps, unit), T_copy)
    if mode == "stash":  # stash ties the backward to the forward whatever bbits says
        assert np.array_equal(T_copy, T)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_edp_scans_equal_the_list_simulator_for_every_m(schedule):
    prob = registry.get_problem("sim-s4-b16-s0")
    for mode in ("stash", "recompute"):
        times = reference.edp_times(prob, mode, schedule)
        for M in range(1, prob.B + 1):
            assert times[M - 1] == simulate(prob, Plan.edp(4, 16, M, mode), schedule
                                            ).iteration_time


def test_memory_cap_makes_unfit_individuals_infinite():
    prob = registry.get_problem("sim-s4-b16-s0")
    ev = FamilyEvaluator(prob, "stash")
    fb = random_bits(np.random.default_rng(0), 20, 4, 16)
    caps = np.full((20, 4), 16)
    T, peak = ev.evaluate(fb, None, caps)
    cap = float(np.median(peak.max(axis=1)))
    Tc = FamilyEvaluator(prob, "stash", cap)(fb, None, caps)
    fits = peak.max(axis=1) <= cap
    assert np.array_equal(Tc[fits], T[fits]) and np.all(np.isinf(Tc[~fits]))
