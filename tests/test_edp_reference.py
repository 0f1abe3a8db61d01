"""The one comparison with EDP (planners.evaluation.reference.EdpReference): the references
against brute force over M with the simulator, the speedup convention, and which EDP plan
beats a candidate."""

from __future__ import annotations

import math

import pytest

from umpipe_bench.memory import MemoryCapError
from umpipe_bench.plan import Plan
from umpipe_bench.planners.evaluation.reference import (
    EdpBaseline,
    EdpReference,
    edp_reference,
    speedup,
)
from umpipe_bench.simulator import simulate
from umpipe_bench.synthetic import synthetic_problem


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_the_references_are_the_best_equal_plans_by_brute_force(mode):
    problem = synthetic_problem(3, 12, 1)
    ref = edp_reference(problem, mode)
    for schedule in ("gpipe", "1f1b"):
        times = [simulate(problem, Plan.edp(problem.S, problem.B, M, mode), schedule)
                 .iteration_time for M in range(1, problem.B + 1)]
        best = min(times)
        base = ref.of(schedule)
        assert base.schedule == schedule and base.mode == mode
        assert base.T == pytest.approx(best, rel=1e-12)
        assert base.M == 1 + min(i for i, t in enumerate(times)
                                 if t <= best * (1 + 1e-12))  # ties: the smaller M
    assert ref.best_T == min(ref.gpipe.T, ref.one_f_one_b.T)
    assert ref.errors == {}


def _ref(T_g, T_1):
    return EdpReference(EdpBaseline("gpipe", "stash", T_g, None if T_g is None else 4),
                        EdpBaseline("1f1b", "stash", T_1, None if T_1 is None else 2))


def test_speedups_are_T_edp_over_T_minus_one_and_none_without_a_reference():
    gains = _ref(3.0, 2.0).speedups(1.5)
    assert gains == {"gpipe": 1.0, "1f1b": pytest.approx(1 / 3), "best_edp": pytest.approx(1 / 3)}
    gains = _ref(None, 2.0).speedups(4.0)
    assert gains == {"gpipe": None, "1f1b": -0.5, "best_edp": -0.5}
    assert _ref(None, None).best_T is None
    assert speedup(None, 1.0) is None


def test_faster_than_picks_the_fastest_fitting_reference_strictly_below_the_candidate():
    ref = _ref(3.0, 2.0)
    assert ref.faster_than(1.0) is None
    assert ref.faster_than(2.0) is None  # a tie keeps the candidate
    assert ref.faster_than(2.5).schedule == "1f1b"
    assert ref.faster_than(math.inf).schedule == "1f1b"
    assert _ref(2.0, 2.0).faster_than(math.inf).schedule == "gpipe"  # ties: GPipe
    assert _ref(None, 5.0).faster_than(math.inf).schedule == "1f1b"
    assert _ref(None, None).faster_than(math.inf) is None


def test_a_schedule_with_no_fitting_equal_plan_keeps_its_memory_error():
    problem = synthetic_problem(2, 8, 0)
    tight = problem.with_memory_cap(1.0)
    ref = edp_reference(tight, "stash")
    assert ref.gpipe.T is None and ref.one_f_one_b.M is None
    with pytest.raises(MemoryCapError, match="no EDP"):
        ref.fitting("gpipe")
    assert ref.speedups(1.0)["best_edp"] is None


def test_a_leaderboard_row_gives_back_the_comparison_it_was_written_with():
    import pandas as pd

    from umpipe_bench.bench.tables import row_edp_reference

    row = pd.Series({"mode": "stash", "T_gpipe_edp": 2.0, "M_gpipe_edp": 4.0,
                     "T_1f1b_edp": 2.0, "M_1f1b_edp": 8.0})
    best = row_edp_reference(row).best
    assert (best.schedule, best.M, best.T) == ("gpipe", 4, 2.0)  # ties: GPipe
    row["T_gpipe_edp"] = row["M_gpipe_edp"] = float("nan")
    ref = row_edp_reference(row)
    assert ref.gpipe.T is None and ref.best.schedule == "1f1b" and ref.best.M == 8
