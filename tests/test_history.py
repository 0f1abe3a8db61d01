"""The typed history from a planner to the bench's history file and the convergence plot."""

from __future__ import annotations

import numpy as np

from umpipe_bench.bench.plots import convergence_curve
from umpipe_bench.bench.runner import history_records
from umpipe_bench.planners.search.loop import HISTORY_FIELDS
from umpipe_bench.registry import get_planner
from umpipe_bench.synthetic import synthetic_problem


def test_typed_history_reaches_the_convergence_curve():
    res = get_planner("random-search").plan(synthetic_problem(3, 8, 0), budget="evals:1000",
                                            seed=0)
    records = history_records(res.history)  # what bench writes to histories/<slug>.json
    assert all(tuple(r) == HISTORY_FIELDS for r in records)
    ev, t, best = convergence_curve(records)
    assert ev.tolist() == [r["evaluations"] for r in records]
    assert ev[-1] == res.evaluations == 1000  # 7 full batches of 128, then one of 104
    assert np.all(np.diff(t) >= 0) and best[-1] == res.iteration_time
    assert np.all(np.diff(best) <= 0)
