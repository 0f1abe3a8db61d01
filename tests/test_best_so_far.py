"""The search loop's best so far (planners.search.loop.BestSoFar): the first strictly better
genome of every evaluated batch, which a TrackedAlgorithm reports as its own."""

from __future__ import annotations

import numpy as np
import pytest

from umpipe_bench.planners.evaluation.objective import Genomes
from umpipe_bench.planners.search.base import PlannerError
from umpipe_bench.planners.search.loop import BestSoFar, SearchLoop, TrackedAlgorithm
from umpipe_bench.registry import get_planner
from umpipe_bench.synthetic import synthetic_problem


def test_the_first_strict_minimum_is_kept_and_copied():
    best = BestSoFar()
    X = np.arange(12).reshape(4, 3)
    best.note(X, np.array([3.0, 1.0, 1.0, 2.0]))
    assert best.value == 1.0 and best.genomes.tolist() == [[3, 4, 5]]
    X[1] = -1  # the kept genome is a copy
    assert best.genomes.tolist() == [[3, 4, 5]]
    best.note(X[:1], np.array([1.0]))  # a tie does not replace it
    assert best.genomes.tolist() == [[3, 4, 5]]
    f = np.zeros((2, 2, 3), np.uint8)
    f[1, 0, 0] = 1
    best.note(Genomes(f, f), np.array([np.inf, 0.5]))
    assert best.value == 0.5 and best.genomes.fwd.tolist() == [f[1].tolist()]
    best.note(X, np.zeros(0))
    assert best.value == 0.5


class _Nothing(TrackedAlgorithm):
    def setup(self, evaluate):
        pass


def test_a_tracked_algorithm_without_evaluations_has_no_best():
    algo = _Nothing()
    assert algo.best_time == np.inf
    algo.bind(BestSoFar())
    with pytest.raises(PlannerError, match="allowed no evaluation"):
        algo.best()


@pytest.mark.parametrize("planner,budget", [("random-search", "evals:300"),
                                            ("optuna-tpe", "evals:40")])
def test_a_tracked_planner_reports_the_least_time_it_evaluated(monkeypatch, planner, budget):
    seen: list[float] = []
    real = SearchLoop.evaluate

    def spy(self, genomes):
        times = real(self, genomes)
        seen.extend(times.tolist())
        return times

    monkeypatch.setattr(SearchLoop, "evaluate", spy)
    res = get_planner(planner).plan(synthetic_problem(3, 8, 2), mode="recompute",
                                    budget=budget, seed=1)
    assert len(seen) == res.evaluations
    assert res.history[-1]["best"] == min(seen) == res.iteration_time
    assert [r["best"] for r in res.history] == sorted((r["best"] for r in res.history),
                                                      reverse=True)
