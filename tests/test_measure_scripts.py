"""The measurement helpers behind scripts/measure_real.py, scripts/op_overheads.py and
scripts/prediction_scatter.py (umpipe_bench/runtime/comparison.py, op_costs.py, scatter.py):
answers known by construction."""

from __future__ import annotations

import pytest

from umpipe_bench.plan import Plan
from umpipe_bench.registry import get_problem
from umpipe_bench.runtime import comparison, op_costs, scatter
from umpipe_bench.simulator import simulate


@pytest.fixture(scope="module")
def problem():
    return get_problem("gpt1-mini-s2")


def test_best_capped_is_no_slower_than_gpipe_and_carries_caps(problem) -> None:
    plan = Plan.edp(problem.S, problem.B, 4, "stash")
    capped, t = comparison.best_capped(problem, [plan])
    assert capped.caps is not None and len(capped.caps) == problem.S
    # caps = B everywhere is GPipe (docs/SCHEDULES.md), one of the candidates scanned
    assert t <= simulate(problem, plan.with_caps((problem.B,) * problem.S), "capped").iteration_time
    assert t == pytest.approx(simulate(problem, capped, "capped").iteration_time)


def test_intervals_pair_planned_against_the_baselines() -> None:
    result = {"entries": [
        {"label": "gpipe-edp4-stash", "times": [1.2] * 10},
        {"label": "planned-uedp-stash", "times": [1.0] * 10},
    ]}
    iv = comparison.intervals(result, [("gpipe-edp4-stash", "planned-uedp-stash"), ("x", "y")])
    assert list(iv) == ["planned-uedp-stash vs gpipe-edp4-stash"]
    got = iv["planned-uedp-stash vs gpipe-edp4-stash"]
    assert (got["median"], got["low"], got["high"], got["rounds"]) == pytest.approx(
        (1.2, 1.2, 1.2, 10))


def test_op_overheads_ratio_of_measured_to_profiled(problem) -> None:
    plan = Plan.edp(problem.S, problem.B, 2, "stash")
    f, b = problem.fwd(0, 16), problem.bwd(0, 16)
    # stage 0 computed exactly twice the profile; 1 ms of take and send on each op
    ops = []
    t = 0.0
    for kind, j, cost in (("F", 0, f), ("F", 1, f), ("B", 0, b), ("B", 1, b)):
        a = 16 * j
        ops.append({"kind": kind, "index": j, "a": a, "b": a + 16, "start": t,
                    "end": t + 2 * cost + 0.002, "wait": 0.0, "take": 0.001, "send": 0.001})
        t += 2 * cost + 0.002
    rows = op_costs.stage_rows(problem, plan, [[ops, ops]], "p")
    assert rows[0]["F_ratio"] == pytest.approx(2.0)
    assert rows[0]["B_ratio"] == pytest.approx(2.0)
    assert rows[0]["take_ms"] == pytest.approx(4.0)
    assert rows[0]["msgs"] == 4


def test_scatter_has_at_least_12_plans_over_both_schedules(problem, tmp_path) -> None:
    import argparse

    args = argparse.Namespace(planner="tidgap", budget="evals:300", seed=0, random=3)
    plans = scatter.candidate_plans(problem, args)
    assert len(plans) >= 12
    assert {sched for _, _, sched in plans} >= {"gpipe", "1f1b", "capped"}
    assert len({label for label, _, _ in plans}) == len(plans)
    for _, plan, _ in plans:
        assert all(sum(p) == problem.B for p in plan.fwd)
    pts = [{"plan": label, "schedule": sched, "predicted": 1.0 + i, "measured": 1.1 + i}
           for i, (label, _, sched) in enumerate(plans)]
    data = {"problem": problem.name, "points": pts, "iters": 2,
            "quality": {"n": len(pts), "spearman": 1.0, "median_abs_error": 0.05,
                        "worst_abs_error": 0.1, "median_error": 0.05},
            "quality_committed_profile": {"n": len(pts), "spearman": 1.0,
                                          "median_abs_error": 0.05, "worst_abs_error": 0.1,
                                          "median_error": 0.05},
            "loadavg": {"before": [1.0], "after": [1.0]}, "command": "x", "date": "d"}
    scatter.plot([data], tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 1000
    assert "| gpt1-mini-s2 | 15 | 1.000 |" in scatter.markdown([data])


def test_save_plan_keeps_the_in_flight_caps(tmp_path) -> None:
    plan = Plan.edp(2, 8, 4, "stash").with_caps((3, 8))
    path = comparison.save_plan(plan, tmp_path / "capped-x.json", "capped")
    back = Plan.load(path)
    assert back.caps == (3, 8) and back.meta["schedule"] == "capped"


def test_equal_plans_cover_every_count_under_both_schedules_once(problem) -> None:
    best = {"gpipe": Plan.edp(problem.S, problem.B, 4, "stash"),
            "1f1b": Plan.edp(problem.S, problem.B, 2, "recompute")}
    got = comparison.equal_plans(problem, [1, 2, 4, 4], best, {"gpipe-edp4-stash", "1f1b-edp2-recompute"})
    labels = [lb for lb, _p, _s in got]
    # the best plans keep their own labels; a repeated count adds nothing
    assert labels == ["equal-gpipe-edp1-stash", "equal-1f1b-edp1-recompute",
                      "equal-gpipe-edp2-stash", "equal-1f1b-edp4-recompute"]
    for label, plan, sched in got:
        M = int(label.split("edp")[1].split("-")[0])
        assert plan == Plan.edp(problem.S, problem.B, M, best[sched].mode)
        assert label.startswith(f"equal-{sched}-")


def test_equal_plans_refuse_a_count_above_the_mini_batch(problem) -> None:
    best = {"gpipe": Plan.edp(problem.S, problem.B, 1, "stash")}
    with pytest.raises(SystemExit, match="--equal: M = 99 is not in 1..B"):
        comparison.equal_plans(problem, [99], best, set())


def test_message_charge_replay_adds_it_on_every_end_of_a_serial_chain() -> None:
    """scripts/torch_schedule_ops.py's replay: GPipe with one microbatch on two devices is one
    chain F0 -> F1 -> B1 -> B0 with two messages, each charged on both ends: T grows by 4h."""
    import importlib.util
    from pathlib import Path

    from umpipe_bench.devsim import edp_sizes
    from umpipe_bench.layout import chunk_devices, group_layers
    from umpipe_bench.torch_schedules import torch_orders

    path = Path(__file__).resolve().parents[1] / "scripts" / "torch_schedule_ops.py"
    spec = importlib.util.spec_from_file_location("torch_schedule_ops", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    p = get_problem("gpt1-mini-s2")
    G = group_layers(p, [1, 1])
    cd = chunk_devices("one", 2, 1)
    lists = torch_orders("gpipe", 2, 1)
    sizes = edp_sizes(p.B, 1)
    t0 = mod._replay(G, cd, lists, sizes, 0.0)
    h = 1e-3
    assert mod._replay(G, cd, lists, sizes, h) == pytest.approx(t0 + 4 * h, rel=1e-12)
