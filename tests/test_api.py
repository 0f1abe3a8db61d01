"""The public objective (umpipe_bench/api.py) and the README's example, run as written."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

from umpipe_bench.api import BudgetExhausted, GenomeSpace, PipelineObjective
from umpipe_bench.errors import UmpipeError
from umpipe_bench.plan import Plan
from umpipe_bench.simulator import simulate
from umpipe_bench.synthetic import synthetic_problem

README = Path(__file__).resolve().parents[1] / "README.md"


def test_genome_layout_and_bounds():
    sp = GenomeSpace(S=3, B=5, mode="recompute", schedule="capped")
    assert (sp.n_bits, sp.n_caps, sp.dimension) == (24, 3, 27)
    assert sp.lower.tolist() == [0] * 24 + [1] * 3 and sp.upper.tolist() == [1] * 24 + [5] * 3
    assert GenomeSpace(3, 5, "stash", "gpipe").dimension == 12
    with pytest.raises(ValueError, match=r"expected shape \[N, 27\]"):
        sp.split(np.zeros((2, 26)))
    with pytest.raises(ValueError, match="outside its bounds"):
        sp.split(np.zeros(27))  # caps of 0


@pytest.mark.parametrize("mode", ["stash", "recompute"])
@pytest.mark.parametrize("family", ["gpipe", "capped"])
def test_evaluate_is_the_simulator_on_random_genomes(mode, family):
    p = synthetic_problem(4, 8, 0)
    obj = PipelineObjective(p, mode, family)
    rng = np.random.default_rng(0)
    X = rng.integers(obj.space.lower, obj.space.upper + 1, size=(20, obj.space.dimension))
    T = obj.evaluate(X)
    for x, t in zip(X, T):
        plan, schedule = obj.space.to_plan(x)
        assert simulate(p, plan, schedule).iteration_time == pytest.approx(t, rel=1e-12)
        assert np.array_equal(obj.space.from_plan(plan), x)
    assert obj.evaluations == 20 and obj.best_value == T.min()


def test_the_counter_refuses_a_batch_past_the_budget_and_evaluates_nothing_of_it():
    obj = PipelineObjective(synthetic_problem(2, 8, 0), budget=10)
    obj.evaluate(np.stack([obj.edp_genome(M) for M in range(1, 9)]))
    with pytest.raises(BudgetExhausted, match="exceed the budget of 10"):
        obj.evaluate(np.stack([obj.edp_genome(1)] * 3))
    assert obj.evaluations == 8 and obj.remaining == 2
    obj.evaluate(obj.edp_genome(2))
    assert obj.evaluations == 9


def test_start_genome_is_the_best_edp_and_history_is_the_best_so_far_curve():
    p = synthetic_problem(3, 6, 0)
    obj = PipelineObjective(p, "recompute")
    x0 = obj.start_genome()
    Ts = [simulate(p, Plan.edp(3, 6, M, mode="recompute")).iteration_time for M in range(1, 7)]
    assert obj.evaluate(x0)[0] == pytest.approx(min(Ts)) and obj.evaluations == 7
    for _ in range(3):
        obj.evaluate(x0)  # no improvement: one tail record, updated
    h = obj.history
    assert h[-1]["evaluations"] == 10 and h[-1]["best"] == pytest.approx(min(Ts))
    assert len(h) == 2 and h[0]["best"] >= h[1]["best"]


def test_best_known_and_gap_come_from_the_committed_file():
    obj = PipelineObjective("sim-s4-b16-s0", "stash")
    assert obj.best_known is not None and obj.best_known > 0
    obj.evaluate(obj.start_genome())
    assert obj.gap() == pytest.approx(obj.best_value / obj.best_known - 1)
    assert obj.gap() >= 0


def test_bad_arguments_are_user_errors():
    for kw, msg in (({"mode": "x"}, "mode must be"), ({"schedule": "1f1b"}, "schedule must be"),
                    ({"budget": 0}, "budget must be")):
        with pytest.raises(UmpipeError, match=msg):
            PipelineObjective(synthetic_problem(2, 4, 0), **kw)


def test_readme_example_runs_as_written():
    pytest.importorskip("nevergrad")
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Bring your own optimizer"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 11
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    m = re.match(r"T (\d+\.\d+) s, (\d+) evaluations, ([+-]\d+\.\d+)% from best known",
                 out.getvalue())
    assert m, out.getvalue()
    assert int(m.group(2)) <= 500 and float(m.group(3)) >= 0


def test_lower_bound_is_below_every_value_and_the_best_known():
    obj = PipelineObjective("sim-s4-b16-s0", "recompute")
    rng = np.random.default_rng(1)
    X = rng.integers(0, 2, size=(50, obj.space.dimension))
    assert obj.lower_bound <= obj.evaluate(X).min()
    assert obj.lower_bound <= obj.best_known


def test_family_is_the_older_name_of_schedule():
    with pytest.warns(DeprecationWarning, match="schedule"):
        old = PipelineObjective("sim-s3-b6-s0", "stash", family="capped")
    new = PipelineObjective("sim-s3-b6-s0", "stash", schedule="capped")
    assert old.schedule == new.schedule == old.family == "capped"
    assert old.space == new.space and old.space.family == "capped"
    with pytest.raises(UmpipeError, match="schedule must be one of gpipe, capped"):
        PipelineObjective("sim-s3-b6-s0", "stash", schedule="family")


@pytest.mark.parametrize("family", ["gpipe", "capped"])
def test_best_plan_is_the_plan_of_the_best_value_with_fractional_genes(family):
    """evaluate rounds non-integer genes; best_plan truncated them (0.6 -> 0), so the plan it
    returned was not the one whose time was the best value."""
    p = synthetic_problem(3, 8, 0)
    obj = PipelineObjective(p, "stash", family)
    rng = np.random.default_rng(1)
    lo, hi = obj.space.lower, obj.space.upper
    X = rng.uniform(lo - 0.49, hi + 0.49, size=(40, obj.space.dimension))
    X[:, : obj.space.n_bits] = np.where(X[:, : obj.space.n_bits] > 0.5, 0.6, 0.4)
    T = obj.evaluate(X)
    plan, schedule = obj.best_plan()
    assert simulate(p, plan, schedule).iteration_time == pytest.approx(obj.best_value,
                                                                       rel=1e-12)
    assert obj.best_value == T.min()
    assert obj.best_genome.dtype == np.int64 and set(obj.best_genome[: obj.space.n_bits]) \
        <= {0, 1}


@pytest.mark.parametrize("kwargs, needle", [
    ({"budget": 10.5}, "budget must be an integer, got 10.5"),
    ({"budget": "100"}, "budget must be an integer, got '100'"),
    ({"budget": True}, "budget must be an integer, got True"),
    ({"budget": 0}, "budget must be >= 1, got 0"),
    ({"memory_cap": -1.0}, "memory_cap must be a number of bytes > 0"),
    ({"memory_cap": 0}, "memory_cap must be a number of bytes > 0"),
    ({"memory_cap": float("nan")}, "memory_cap must be a number of bytes > 0"),
    ({"memory_cap": "24GiB"}, "memory_cap must be a number of bytes > 0"),
    ({"memory_cap": True}, "memory_cap must be a number of bytes > 0"),
    ({"mode": ["stash"]}, "mode must be one of"),
    ({"schedule": None}, "schedule must be one of"),
])
def test_bad_arguments_are_refused_naming_them(kwargs, needle):
    with pytest.raises(UmpipeError) as info:
        PipelineObjective(synthetic_problem(2, 4, 0), **kwargs)
    assert needle in str(info.value)


def test_integer_budgets_of_any_integer_type_are_taken():
    obj = PipelineObjective(synthetic_problem(2, 4, 0), budget=np.int64(5), memory_cap=2**40)
    assert obj.budget == 5 and type(obj.budget) is int


def test_a_problem_of_the_wrong_type_and_bad_genomes_are_user_errors():
    with pytest.raises(UmpipeError, match="problem: expected a Problem, a registered name"):
        PipelineObjective(3)  # type: ignore[arg-type]
    obj = PipelineObjective(synthetic_problem(2, 4, 0))
    with pytest.raises(UmpipeError, match="NaN or infinite"):
        obj.evaluate(np.full(obj.space.dimension, np.nan))
    with pytest.raises(UmpipeError, match="expected numbers"):
        obj.evaluate(np.array(["1"] * obj.space.dimension))
    with pytest.raises(UmpipeError, match=r"M \(microbatches\) must be in 1..4, got 5"):
        obj.edp_genome(5)
    with pytest.raises(UmpipeError, match="must be an integer, got 2.5"):
        obj.edp_genome(2.5)  # type: ignore[arg-type]
    assert obj.evaluate(np.empty((0, obj.space.dimension))).shape == (0,)
    assert obj.evaluations == 0 and obj.history == []
