from __future__ import annotations

import pytest

from umpipe_bench.plan import Plan, PlanError
from umpipe_bench.schedules import build_schedule, format_schedule


def _names(ops):
    return [[str(o) for o in row] for row in ops]


def test_gpipe_runs_all_forwards_then_all_backwards_over_sample_ranges():
    plan = Plan(fwd=((1, 3), (4,)), bwd=((4,), (3, 1)), mode="recompute")
    ops = build_schedule("gpipe", plan)
    assert _names(ops) == [["0F0", "0F1", "0B0"], ["1F0", "1B0", "1B1"]]
    assert [(o.start, o.stop) for o in ops[0]] == [(0, 1), (1, 4), (0, 4)]
    assert [(o.start, o.stop) for o in ops[1]] == [(0, 4), (0, 3), (3, 4)]


def test_1f1b_on_edp_s3_m4_is_torch_schedule1f1b_order():
    ops = build_schedule("1f1b", Plan.edp(3, 8, 4))
    assert format_schedule(ops).splitlines() == [
        "stage 0: 0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3",
        "stage 1: 1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3",
        "stage 2: 2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3",
    ]


def test_1f1b_with_fewer_microbatches_than_stages():
    ops = build_schedule("1f1b", Plan.edp(4, 2, 2))
    assert _names(ops)[0] == ["0F0", "0F1", "0B0", "0B1"]
    assert _names(ops)[3] == ["3F0", "3B0", "3F1", "3B1"]


def test_1f1b_refuses_unequal_plans_and_unknown_names_list_valid_ones():
    with pytest.raises(PlanError, match="'1f1b' needs an EDP plan"):
        build_schedule("1f1b", Plan(fwd=((1, 3), (2, 2)), bwd=((1, 3), (2, 2))))
    with pytest.raises(KeyError, match="valid schedules: gpipe, 1f1b"):
        build_schedule("zb", Plan.edp(2, 4, 2))
