from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from umpipe_bench.plan import (
    Plan,
    PlanError,
    balanced_split,
    bits_to_sizes,
    parse_plan_spec,
    sizes_to_bits,
)
from umpipe_bench.synthetic import synthetic_problem


def test_edp_matches_tensor_split_sizes():
    assert balanced_split(10, 4) == (3, 3, 2, 2)
    assert balanced_split(8, 8) == (1,) * 8
    assert balanced_split(7, 1) == (7,)
    p = Plan.edp(3, 10, 4)
    assert p.fwd == p.bwd == ((3, 3, 2, 2),) * 3 and p.is_edp() and p.describe() == "EDP(4)"
    with pytest.raises(PlanError, match="1 <= M <= B"):
        balanced_split(4, 5)


compositions = st.integers(1, 40).flatmap(
    lambda B: st.lists(st.booleans(), min_size=B - 1, max_size=B - 1)
)


@given(compositions)
def test_cut_bits_round_trip_exactly(bits):
    sizes = bits_to_sizes(bits)
    assert sum(sizes) == len(bits) + 1 and all(x > 0 for x in sizes)
    assert sizes_to_bits(sizes, len(bits) + 1) == [int(b) for b in bits]


@given(st.data())
def test_plan_bits_round_trip(data):
    S = data.draw(st.integers(1, 5))
    B = data.draw(st.integers(1, 20))
    bits = st.lists(st.lists(st.integers(0, 1), min_size=B - 1, max_size=B - 1),
                    min_size=S, max_size=S)
    fb, bb = data.draw(bits), data.draw(bits)
    p = Plan.from_bits(fb, bb, "recompute")
    assert p.to_bits() == (fb, bb)
    assert Plan.from_bits(*p.to_bits(), mode="recompute") == p
    stash = Plan.from_bits(fb, bb, "stash")
    assert stash.bwd == stash.fwd


def test_plan_file_round_trip(tmp_path):
    p = Plan(fwd=((1, 3), (4,)), bwd=((2, 2), (1, 1, 2)), mode="recompute",
             meta={"planner": "hand"})
    p.save(tmp_path / "plan.json")
    q = Plan.load(tmp_path / "plan.json")
    assert q == p and q.meta["planner"] == "hand"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fwd": ((2, 2), (3,)), "bwd": ((2, 2), (3,))}, r"stage 1 fwd partition \[3\] sums to 3; expected B = 4"),
        ({"fwd": ((2, 2), (4, 0)), "bwd": ((2, 2), (4,))}, r"stage 1 fwd microbatch 1 has size 0"),
        ({"fwd": ((2, 2), (4,)), "bwd": ((2, 2), (1, 3))}, r"stage 1: stash mode needs the backward partition to equal"),
        ({"fwd": ((2, 2),), "bwd": ((2, 2), (4,))}, r"1 forward partitions but 2 backward"),
        ({"fwd": ((4,),), "bwd": ((4,),), "mode": "keep"}, r"'mode' must be one of"),
        ({"fwd": (), "bwd": ()}, r"no stages"),
    ],
)
def test_bad_plans_give_clear_errors(kwargs, message):
    with pytest.raises(PlanError, match=message):
        Plan(**{"mode": "stash", **kwargs})


def test_plan_must_fit_problem():
    prob = synthetic_problem(4, 16, 0)
    with pytest.raises(PlanError, match="plan has 3 stages but problem 'sim-s4-b16-s0' has S = 4"):
        Plan.edp(3, 16, 4).validate(prob)
    with pytest.raises(PlanError, match="sum to 12 but problem 'sim-s4-b16-s0' has B = 16"):
        Plan.edp(4, 12, 4).validate(prob)


def test_parse_plan_spec(tmp_path):
    prob = synthetic_problem(4, 16, 0)
    plan, sched = parse_plan_spec("gpipe:4", prob)
    assert sched == "gpipe" and plan == Plan.edp(4, 16, 4)
    plan, sched = parse_plan_spec("1F1B:2", prob, "recompute")
    assert sched == "1f1b" and plan.mode == "recompute"
    f = tmp_path / "p.json"
    Plan(fwd=((8, 8),) * 4, bwd=((16,),) * 4, mode="recompute").save(f)
    plan, sched = parse_plan_spec(str(f), prob)
    assert plan.mode == "recompute" and sched == "gpipe"
    with pytest.raises(PlanError, match="stash mode needs"):
        parse_plan_spec(str(f), prob, "stash")
    with pytest.raises(PlanError, match="M must be in 1..B=16"):
        parse_plan_spec("gpipe:17", prob)
    with pytest.raises(PlanError, match="neither 'gpipe:M'"):
        parse_plan_spec("nonsense", prob)
