"""The device simulator, layer grouping and the best (M, partition) search, against answers
known by construction: the one-chunk-per-device simulator, closed forms, brute force."""

from __future__ import annotations

import dataclasses

import pytest

from umpipe_bench.devsim import DevSimError, edp_sizes, parse_action, simulate_devices
from umpipe_bench.layout import (
    Layout,
    LayoutError,
    balanced_counts,
    chunk_devices,
    device_chunks,
    group_layers,
)
from umpipe_bench.plan import Plan
from umpipe_bench.problem import Link, Problem, StageCosts, StageMemory
from umpipe_bench.registry import get_problem
from umpipe_bench.schedules import build_schedule
from umpipe_bench.simulator import simulate
from umpipe_bench.torch_schedules.best import (
    best_choice,
    compositions,
    divisors,
    simulate_chunks,
)


def _lists(name: str, S: int, M: int) -> list[list[str]]:
    return [[str(o) for o in row] for row in build_schedule(name, Plan.edp(S, M, M))]


def _uniform(L: int, B: int, f: float, b: float, i: float = 0.0, w: float = 0.0,
             opt: float = 0.0, lat: float = 0.0, mem: StageMemory | None = None) -> Problem:
    """L identical layers whose per-microbatch costs do not depend on the size."""
    sizes = (1, B) if B > 1 else (1,)
    split = {} if not i else {"ibwd": (i,) * len(sizes), "ribwd": (i + f,) * len(sizes),
                              "wbwd": (w,) * len(sizes)}
    st = StageCosts(fwd=(f,) * len(sizes), bwd=(b,) * len(sizes), rbwd=(b + f,) * len(sizes),
                    opt=opt, memory=mem, **split)
    links = tuple(Link(0.0, 0.0, lat, 1.0) for _ in range(L - 1))
    return Problem(name="uniform", B=B, sizes=sizes, stages=(st,) * L, links=links).validate()


# ----------------------------------------------------------------------------- layout
def test_chunk_devices_of_the_three_layouts():
    assert chunk_devices("one", 3) == (0, 1, 2)
    assert chunk_devices("loop", 3, 2) == (0, 1, 2, 0, 1, 2)
    assert chunk_devices("v", 3) == chunk_devices("v", 3, 2) == (0, 1, 2, 2, 1, 0)
    with pytest.raises(LayoutError, match="layout kind"):
        chunk_devices("zigzag", 2)
    for kind, v in (("one", 2), ("v", 1), ("v", 3), ("loop", 0)):
        with pytest.raises(LayoutError, match="v"):
            chunk_devices(kind, 3, v)
    assert device_chunks("loop", 3, 2) == ((0, 3), (1, 4), (2, 5))
    assert device_chunks("v", 3) == ((0, 5), (1, 4), (2, 3))
    with pytest.raises(LayoutError, match="needs 4 chunks"):
        Layout("v", 2, (1, 1, 1))
    assert Layout("loop", 2, (1, 2, 1, 3)).devices == (0, 1, 0, 1)


def test_grouping_sums_layers_and_keeps_boundary_links():
    p = get_problem("sim-s8-b64-s0")
    cp = group_layers(p, (3, 1, 4))
    assert cp.S == 3 and cp.B == p.B
    for c, (a, b) in enumerate(((0, 3), (3, 4), (4, 8))):
        for kind in ("fwd", "bwd", "rbwd"):
            want = [sum(getattr(p.stages[s], kind)[k] for s in range(a, b))
                    for k in range(len(p.sizes))]
            assert getattr(cp.stages[c], kind) == pytest.approx(want, rel=1e-15)
        assert cp.stages[c].opt == pytest.approx(sum(p.stages[s].opt for s in range(a, b)))
        assert cp.stages[c].memory.input_bytes_per_sample == \
            p.stages[a].memory.input_bytes_per_sample
    assert cp.links == (p.links[2], p.links[3])
    # one layer per chunk is the problem itself
    same = group_layers(p, (1,) * p.S)
    assert [s.fwd for s in same.stages] == [s.fwd for s in p.stages]
    with pytest.raises(LayoutError, match="must cut the 8 layers"):
        group_layers(p, (3, 3))


def test_compositions_are_all_cuts():
    got = list(compositions(5, 3))
    assert len(got) == 6 and all(sum(c) == 5 and min(c) >= 1 for c in got)
    assert len(set(got)) == len(got)
    assert balanced_counts(14, 4) == (4, 4, 3, 3)


# ----------------------------------------------------------------------------- simulator
@pytest.mark.parametrize("name", ["sim-s4-b16-s0", "sim-s8-b64-s1", "gpt1-mini-s2"])
@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_one_chunk_per_device_equals_the_stage_simulator(name, mode):
    p = get_problem(name)
    for sched in ("gpipe", "1f1b"):
        for M in divisors(p.B):
            if M > 16:
                continue
            plan = Plan.edp(p.S, p.B, M, mode=mode)
            ref = simulate(p, plan, sched)
            got = simulate_devices(p, tuple(range(p.S)), _lists(sched, p.S, M),
                                   edp_sizes(p.B, M), mode)
            assert got.iteration_time == ref.iteration_time, (sched, M)
            assert got.busy == pytest.approx(ref.busy, rel=1e-12)
            if ref.peak_memory is not None:
                assert got.peak_memory == pytest.approx(ref.peak_memory, rel=1e-12)


@pytest.mark.parametrize("S,M", [(2, 2), (4, 4), (4, 8), (3, 7)])
def test_equal_stages_no_comm_gpipe_and_1f1b_closed_form(S, M):
    f, b = 0.3, 0.7
    p = _uniform(S, M, f, b)
    for sched in ("gpipe", "1f1b"):
        tl = simulate_devices(p, tuple(range(S)), _lists(sched, S, M), (1,) * M)
        assert tl.iteration_time == pytest.approx((M + S - 1) * (f + b))


def test_chunks_on_one_device_exchange_nothing():
    p = _uniform(4, 4, 0.1, 0.2, opt=0.05, lat=1.0)  # any transfer would cost 1 s
    lists = [[f"{c}F{j}" for c in range(4) for j in range(4)]
             + [f"{c}B{j}" for c in reversed(range(4)) for j in range(4)]]
    tl = simulate_devices(p, (0, 0, 0, 0), lists, (1, 1, 1, 1))
    assert tl.iteration_time == pytest.approx(16 * 0.3 + 4 * 0.05)
    assert tl.transfers == []
    # the same lists with chunks on two devices pay the link
    two = [[a for a in lists[0] if int(a[0]) < 2], [a for a in lists[0] if int(a[0]) >= 2]]
    tl2 = simulate_devices(p, (0, 0, 1, 1), two, (1, 1, 1, 1))
    assert len(tl2.transfers) == 8 and tl2.iteration_time > 1.0


def test_split_backward_costs_and_dependencies():
    p = _uniform(2, 1, f=1.0, b=5.0, i=2.0, w=3.0)
    lists = [["0F0", "0I0", "0W0"], ["1F0", "1I0", "1W0"]]
    tl = simulate_devices(p, (0, 1), lists, (1,))
    # 0F0 [0,1] 1F0 [1,2] 1I0 [2,4] 0I0 [4,6] 0W0 [6,9]; 1W0 [4,7]
    assert tl.iteration_time == pytest.approx(9.0)
    assert tl.ops[1][2] == ("1W0", 4.0, 7.0)
    # a W before its I cannot run
    with pytest.raises(DevSimError, match="deadlock"):
        simulate_devices(p, (0, 1), [["0F0", "0W0", "0I0"], lists[1]], (1,))
    # a problem without split costs is refused in one line
    with pytest.raises(DevSimError, match="no split-backward costs"):
        simulate_devices(_uniform(2, 1, 1.0, 5.0), (0, 1), lists, (1,))


def test_held_output_leaves_with_the_later_action():
    p = _uniform(2, 2, f=1.0, b=2.0)
    lists = [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
    # 0F0 [0,1] 0F1 [1,2]; 1F0 [1,2] 1B0 [2,4] 1F1 [4,5] 1B1 [5,7]; 0B0 [4,6] 0B1 [7,9]
    assert simulate_devices(p, (0, 1), lists, (1, 1)).iteration_time == pytest.approx(9.0)
    same = [list(range(4)), list(range(4))]
    assert simulate_devices(p, (0, 1), lists, (1, 1), send_after=same).iteration_time \
        == pytest.approx(9.0)
    # 0F0's output leaves when 0F1 ends: 1F0 [2,3] 1B0 [3,5] 1F1 [5,6] 1B1 [6,8]; 0B1 [8,10]
    tl = simulate_devices(p, (0, 1), lists, (1, 1), send_after=[[1, 1, 2, 3], list(range(4))])
    assert tl.iteration_time == pytest.approx(10.0)
    assert tl.ops[1][0] == ("1F0", 2.0, 3.0)
    assert [t for t in tl.transfers if t[2] == "0F0"] == [(0, 1, "0F0", 2.0, 2.0)]
    for bad, msg in (([[1, 0, 2, 3], same[1]], "device 0, action 1 .0F1.: expected a "
                      "position in 1..3, got 0"),
                     ([[1, 1, 2, 4], same[1]], "in 3..3, got 4"),
                     ([[0, 1, 2], same[1]], "device 0 has 3 positions for 4 actions"),
                     ([same[0]], "1 rows for 2 devices")):
        with pytest.raises(DevSimError, match=msg):
            simulate_devices(p, (0, 1), lists, (1, 1), send_after=bad)


def test_split_memory_frees_after_i_and_w():
    mem = StageMemory(param_bytes=10.0, saved_act_bytes_per_sample=100.0,
                      input_bytes_per_sample=7.0, w_held_bytes_per_sample=40.0)
    p = _uniform(1, 2, f=1.0, b=2.0, i=1.0, w=1.0, mem=mem)
    lists = [["0F0", "0F1", "0I0", "0I1", "0W0", "0W1"]]
    tl = simulate_devices(p, (0,), lists, (1, 1), "stash")
    assert tl.peak_memory == [10.0 + 200.0]
    tl = simulate_devices(p, (0,), lists, (1, 1), "recompute")
    # recompute: two inputs held (14); I of mb0 runs with its activations (114) and leaves
    # 40 for its W in place of its input (47); I of mb1 runs beside that: 47 + 100 = 147
    assert tl.peak_memory == [10.0 + 147.0]


def test_bad_lists_are_refused_in_one_line():
    p = _uniform(2, 2, 1.0, 1.0)
    ok = _lists("1f1b", 2, 2)
    with pytest.raises(DevSimError, match="layout puts on device 1"):
        simulate_devices(p, (0, 1), [ok[1], ok[0]], (1, 1))
    with pytest.raises(DevSimError, match="no action 1F1"):
        simulate_devices(p, (0, 1), [ok[0], [a for a in ok[1] if a != "1F1"]], (1, 1))
    with pytest.raises(DevSimError, match="expected"):
        parse_action("0X1")


# ----------------------------------------------------------------------------- best choice
def _our_orders(name, D, M, v):
    return _lists(name, D, M)


@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_best_choice_is_the_brute_force_optimum(D, mode):
    p = get_problem("sim-s8-b16-s1")
    for sched in ("gpipe", "1f1b"):
        got = best_choice(p, sched, D, kind="one", split=False, mode=mode, orders=_our_orders)
        brute = min(
            (simulate_chunks(p, c, "one", D, 1, M, mode, _our_orders(sched, D, M, None)
                             ).iteration_time, M, c)
            for M in divisors(p.B) for c in compositions(p.S, D))
        assert got.T == brute[0]
        assert got.evaluated <= len(list(compositions(p.S, D))) * len(divisors(p.B))


def test_best_choice_respects_the_memory_cap():
    p = get_problem("sim-s8-b16-s1")
    free = best_choice(p, "1f1b", 2, kind="one", split=False, orders=_our_orders)
    cap = free.max_peak * 0.8  # 1F1B fits below its best plan's peak with more microbatches
    capped = best_choice(p, "1f1b", 2, kind="one", split=False, orders=_our_orders,
                         memory_cap=cap)
    assert capped is not None and capped.max_peak <= cap and capped.T > free.T
    assert best_choice(p, "1f1b", 2, kind="one", split=False, orders=_our_orders,
                       memory_cap=1.0) is None


def test_grouping_keeps_split_tables_and_far_factor():
    p = _uniform(4, 2, 1.0, 2.0, i=0.5, w=1.5)
    p = dataclasses.replace(p, stages=tuple(dataclasses.replace(s, bwd_far=1.5)
                                            for s in p.stages))
    cp = group_layers(p, (1, 3))
    assert cp.has_split_backward and cp.stages[1].ibwd == (1.5, 1.5)
    # the first chunk's input needs no gradient: its I is layer 0's (bookkeeping), its W the
    # whole backward of its layers (torch's first stage)
    first = group_layers(p, (3, 1)).stages[0]
    assert first.ibwd == (0.5, 0.5) and first.wbwd == (1.5 + 2 * 2.0,) * 2
    assert first.ribwd == (1.5 + 2 * 1.0,) * 2  # layer 0's I, the others' recompute forwards
    assert cp.stages[1].bwd_far == pytest.approx(1.5)


def test_op_overhead_adds_to_every_action():
    """On one device every action is on the critical path: T grows by actions x overhead."""
    p = _uniform(3, 4, 0.1, 0.2, opt=0.05)
    lists = [[f"{c}F{j}" for c in range(3) for j in range(4)]
             + [f"{c}B{j}" for c in reversed(range(3)) for j in range(4)]]
    base = simulate_devices(p, (0, 0, 0), lists, (1, 1, 1, 1)).iteration_time
    more = simulate_devices(p, (0, 0, 0), lists, (1, 1, 1, 1), op_overhead=0.01).iteration_time
    assert more - base == pytest.approx(24 * 0.01)
    with pytest.raises(DevSimError, match="op_overhead"):
        simulate_devices(p, (0, 0, 0), lists, (1, 1, 1, 1), op_overhead=-1.0)
    # the exact search stays exact with an overhead (its bound counts two actions per chunk
    # and microbatch)
    q = get_problem("sim-s8-b16-s1")
    got = best_choice(q, "1f1b", 2, kind="one", split=False, orders=_our_orders,
                      op_overhead=0.003)
    brute = min(simulate_chunks(q, c, "one", 2, 1, M, "stash", _our_orders("1f1b", 2, M, None),
                                0.003).iteration_time
                for M in divisors(q.B) for c in compositions(q.S, 2))
    assert got.T == brute


def test_best_choice_stays_exact_when_far_backwards_are_cheaper():
    """The search's bound must hold for a backward locality factor below 1 (a far backward
    cheaper than a near one): brute force agrees."""
    q = get_problem("sim-s8-b16-s1").with_bwd_far(0.5)
    for sched in ("gpipe", "1f1b"):
        got = best_choice(q, sched, 3, kind="one", split=False, orders=_our_orders)
        brute = min(simulate_chunks(q, c, "one", 3, 1, M, "stash", _our_orders(sched, 3, M, None)
                                    ).iteration_time
                    for M in divisors(q.B) for c in compositions(q.S, 3))
        assert got.T == brute


# ----------------------------------------------------------------------------- per-chunk sizes
def test_equal_parts_are_the_sizes():
    """Per-chunk partitions that are all the same give the equal-size simulation bit for bit."""
    p = group_layers(get_problem("gpt1-14"), (4, 3, 4, 3))
    lists = [["0F0", "0F1", "2F0", "2F1", "2I0", "2W0", "2I1", "2W1", "0I0", "0W0", "0I1",
              "0W1"], ["1F0", "1F1", "3F0", "3I0", "3W0", "3F1", "3I1", "3W1", "1I0", "1W0",
                       "1I1", "1W1"]]
    sizes = edp_sizes(p.B, 2)
    for mode in ("stash", "recompute"):
        a = simulate_devices(p, (0, 1, 0, 1), lists, sizes, mode)
        b = simulate_devices(p, (0, 1, 0, 1), lists, None, mode, parts=[(sizes,) * 3] * 4)
        assert (a.iteration_time, a.ops, a.peak_memory) == (b.iteration_time, b.ops,
                                                             b.peak_memory)


def test_unequal_parts_wait_for_the_samples_they_need():
    # costs do not depend on the size: F 1, B 2, I 1, W 1 per action; free links
    p = _uniform(2, 4, f=1.0, b=2.0, i=1.0, w=1.0)
    parts = [((3, 1), (3, 1), (3, 1)), ((1, 3), (1, 3), (4,))]
    lists = [["0F0", "0F1", "0I0", "0W0", "0I1", "0W1"], ["1F0", "1F1", "1I0", "1I1", "1W0"]]
    tl = simulate_devices(p, (0, 1), lists, None, parts=parts)
    got = {a: (t0, t1) for row in tl.ops for a, t0, t1 in row}
    # 1F0 (samples 0) needs 0F0 (0..2); 1F1 (1..3) needs 0F1 too
    assert got["1F0"] == (1.0, 2.0) and got["1F1"] == (2.0, 3.0)
    # 0I0 (0..2) waits for the gradients of 1I0 and 1I1 (0 and 1..3): 1I1 ends at 5
    assert got["1I0"] == (3.0, 4.0) and got["1I1"] == (4.0, 5.0) and got["0I0"] == (5.0, 6.0)
    # the one W of chunk 1 covers both its I's
    assert got["1W0"] == (5.0, 6.0)
    with pytest.raises(DevSimError, match="expected either one 1B0 or one 1I0 and one 1W0"):
        simulate_devices(p, (0, 1), [lists[0], lists[1][:-1]], None, parts=parts)
    with pytest.raises(DevSimError, match="chunk 1 wgt sizes"):
        simulate_devices(p, (0, 1), lists, None, parts=[parts[0], ((1, 3), (1, 3), (3,))])
    with pytest.raises(DevSimError, match="not both"):
        simulate_devices(p, (0, 1), lists, (4,), parts=parts)


def test_unequal_parts_memory_counts_each_action_at_its_size():
    mem = StageMemory(param_bytes=0.0, saved_act_bytes_per_sample=10.0,
                      input_bytes_per_sample=1.0, w_held_bytes_per_sample=4.0)
    p = _uniform(1, 4, f=1.0, b=2.0, i=1.0, w=1.0, mem=mem)
    parts = [((1, 3), (1, 3), (4,))]
    lists = [["0F0", "0F1", "0I0", "0I1", "0W0"]]
    # stash: 40 after both forwards; I frees 6 per sample, W the held 4 per sample
    assert simulate_devices(p, (0,), lists, None, "stash", parts=parts).peak_memory == [40.0]
    # recompute: inputs 1 + 3; 0I1 runs with its 30 bytes beside 0I0's held 4 and 0I1's input
    assert simulate_devices(p, (0,), lists, None, "recompute",
                            parts=parts).peak_memory == [4.0 + 3.0 + 30.0]


def test_schedule_table_names_each_schedule_before_it_runs():
    """The progress hook: called once per schedule, in registry order, before its search."""
    from umpipe_bench.registry import get_problem
    from umpipe_bench.torch_schedules.best import schedule_table
    from umpipe_bench.torch_schedules.orders import TORCH_SCHEDULES

    seen = []
    rows = schedule_table(get_problem("gpt1-s4"), 2,
                          on_schedule=lambda i, n, name: seen.append((i, n, name)))
    n = len(TORCH_SCHEDULES)
    assert seen == [(i, n, name) for i, name in enumerate(TORCH_SCHEDULES)]
    assert [r.schedule for r in rows] == list(TORCH_SCHEDULES)


def test_schedule_table_groups_each_partition_once(monkeypatch):
    """The schedules share one cache of chunk problems: a partition is grouped once however
    many schedules and microbatch counts simulate it."""
    import umpipe_bench.torch_schedules.best as best

    calls: list[tuple[int, ...]] = []
    real = best.group_layers

    def counting(problem, counts, *args, **kwargs):
        calls.append(tuple(counts))
        return real(problem, counts, *args, **kwargs)

    monkeypatch.setattr(best, "group_layers", counting)
    rows = best.schedule_table(get_problem("gpt1-s4"), 2)
    assert sum(r.choice.evaluated for r in rows if r.choice) > len(set(calls)) > 0
    assert len(calls) == len(set(calls))


def test_best_choice_checks_the_lists_it_is_given():
    """torch's lists are checked once per (v, M), not skipped: a list that drops an action is
    refused on the first partition simulated."""
    p = get_problem("sim-s8-b16-s1")

    def short(name, D, M, v):
        lists = _our_orders(name, D, M, v)
        return [lists[0][:-1], *lists[1:]]

    with pytest.raises(DevSimError, match="expected either one"):
        best_choice(p, "1f1b", 2, kind="one", split=False, orders=short)
    lists = _our_orders("1f1b", 2, 4, None)
    cp = group_layers(p, (4, 4))
    a = simulate_devices(cp, (0, 1), lists, edp_sizes(p.B, 4))
    b = simulate_devices(cp, (0, 1), lists, edp_sizes(p.B, 4), check=False)
    assert (a.iteration_time, a.ops, a.peak_memory) == (b.iteration_time, b.ops, b.peak_memory)


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_best_choice_under_a_cap_is_the_brute_force_optimum_that_fits(mode):
    p = get_problem("sim-s8-b16-s1")
    free = best_choice(p, "1f1b", 2, kind="one", split=False, mode=mode, orders=_our_orders)
    for share in (0.95, 0.8, 0.6):
        cap = free.max_peak * share
        got = best_choice(p, "1f1b", 2, kind="one", split=False, mode=mode,
                          orders=_our_orders, memory_cap=cap)
        fits = [tl.iteration_time for M in divisors(p.B) for c in compositions(p.S, 2)
                for tl in [simulate_chunks(p, c, "one", 2, 1, M, mode,
                                           _our_orders("1f1b", 2, M, None))]
                if max(tl.peak_memory) <= cap]
        assert (got is None) == (not fits)
        if fits:
            assert got.T == min(fits) and got.max_peak <= cap


def test_best_choice_checks_memory_before_simulating():
    """A candidate whose peaks exceed the cap is not simulated: with a cap nothing fits, only
    the first candidate of each M is (it checks torch's lists)."""
    import umpipe_bench.torch_schedules.best as best

    p = get_problem("sim-s8-b16-s1")
    free = best_choice(p, "gpipe", 2, kind="one", split=False, orders=_our_orders)
    calls = []
    real = best.simulate_devices

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(best, "simulate_devices", counting)
        assert best_choice(p, "gpipe", 2, kind="one", split=False, orders=_our_orders,
                           memory_cap=free.max_peak * 0.01) is None
    assert 0 < len(calls) <= len(divisors(p.B))
