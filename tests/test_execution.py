"""The execute metadata has one owner (:mod:`umpipe_bench.runtime.execution`): labels,
predictions and which torch.pipelining entry mirrors which plan, computed without launching."""

from __future__ import annotations

import pytest

from umpipe_bench.plan import Plan
from umpipe_bench.runtime.errors import PlanRefused
from umpipe_bench.runtime.execution import prepare
from umpipe_bench.simulator import simulate


def test_prepare_labels_predicts_and_pairs_peers(tmp_path):
    from tests.test_runtime import tiny_problem

    problem = tiny_problem(tmp_path / "tiny.json")
    uneq = Plan(fwd=((3, 5), (1, 3, 4)), bwd=((2, 6), (5, 3)), mode="recompute")
    uneq.save(tmp_path / "uneq.json")
    ex = prepare(problem, ["gpipe:2", "1f1b:4", "gpipe:2", str(tmp_path / "uneq.json")])
    labels = [e.label for e in ex.spec.entries]
    assert labels == ["gpipe:2", "1f1b:4", "gpipe:2#2", "uneq", "torch:gpipe:2",
                      "torch:1f1b:4"]
    assert ex.peers == {"gpipe:2": "torch:gpipe:2", "gpipe:2#2": "torch:gpipe:2",
                        "1f1b:4": "torch:1f1b:4"}
    T = simulate(problem, Plan.edp(2, 8, 2), "gpipe").iteration_time
    assert ex.predicted["gpipe:2"] == ex.predicted["torch:gpipe:2"] == T
    assert ex.kinds == {"gpipe:2": "EDP(2)", "1f1b:4": "EDP(4)", "gpipe:2#2": "EDP(2)",
                        "uneq": "UEDP", "torch:gpipe:2": "EDP(2)", "torch:1f1b:4": "EDP(4)"}
    assert len(ex.busy["uneq"]) == problem.S


def test_prepare_without_peers_has_no_torch_entries(tmp_path):
    from tests.test_runtime import tiny_problem

    problem = tiny_problem(tmp_path / "tiny.json")
    ex = prepare(problem, ["gpipe:2"], peer=False)
    assert [e.engine for e in ex.spec.entries] == ["umpipe"] and ex.peers == {}


@pytest.mark.parametrize("field, value", [("dtype", "float13"), ("optimizer", "lion"),
                                          ("backend", "mpi")])
def test_spec_refuses_unknown_names_when_built(tmp_path, field, value):
    from tests.test_runtime import tiny_problem

    problem = tiny_problem(tmp_path / "tiny.json")
    with pytest.raises(PlanRefused, match=f"{field} '{value}'"):
        prepare(problem, ["gpipe:2"], **{field: value})


def test_prepare_refuses_a_plan_file_made_for_another_problem(tmp_path, capsys):
    """``execute`` checks a plan file's recorded problem as ``simulate`` does; ``force_plan``
    (``--force-plan``) runs it with a warning."""
    from tests.test_runtime import tiny_problem
    from umpipe_bench.plan import PlanError

    problem = tiny_problem(tmp_path / "tiny.json")
    plan = Plan.edp(2, 8, 2)
    plan.meta.update(problem="other", problem_digest="0123456789abcdef")
    plan.save(tmp_path / "other.json")
    with pytest.raises(PlanError, match="made for problem 'other'.*--force-plan"):
        prepare(problem, [str(tmp_path / "other.json")], peer=False)
    ex = prepare(problem, [str(tmp_path / "other.json")], peer=False, force_plan=True)
    assert [r.label for r in ex.runs] == ["other"]
    assert capsys.readouterr().err.startswith("warning: ")
