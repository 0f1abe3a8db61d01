"""``umpipe-bench tune`` and the ``tidgap-tuned`` planner (tiny problems, tiny budgets)."""

from __future__ import annotations

import json

import optuna
import pytest

from umpipe_bench.bench.tune import (
    TuneSpec,
    finish,
    open_study,
    run_study,
    search_space,
    storage_label,
)
from umpipe_bench.cli import main
from umpipe_bench.planners.algorithms import tuned as tuned_mod
from umpipe_bench.planners.search.base import PlannerError
from umpipe_bench.registry import get_planner, get_problem

SPEC = TuneSpec(planner="tidgap", train=("sim-s4-b16-s1",), heldout=("sim-s4-b16-s0",),
                modes=("recompute",), seeds=(0,), budget="evals:200")


def test_search_space_follows_the_planners_settings():
    space = search_space("tidgap")
    assert {"population", "cxpb", "mutpb", "tournament", "edp_seeds", "greedy_seeds"} <= set(space)
    with pytest.raises(ValueError, match="declares no 'defaults'"):
        search_space("tests.test_bench:FailingPlanner")


@pytest.mark.parametrize("planner", ["tidgap", "dgap"])
def test_the_defaults_lie_inside_the_search_space(planner):
    """The first trial is the defaults: each must be a point Optuna's space can hold (TiDGAP's
    shift_rate 8 was outside [0, 4], and Optuna warned on every study)."""
    from umpipe_bench.registry import get_planner_class

    defaults = get_planner_class(planner).defaults
    for name, (_kind, lo, hi, _log) in search_space(planner).items():
        assert lo <= float(defaults[name]) <= hi, (planner, name, defaults[name], lo, hi)


def test_study_runs_first_the_defaults_and_judges_on_heldout(tmp_path):
    storage = f"sqlite:///{tmp_path}/t.db"
    study = open_study(SPEC, storage, "s", seed=0)
    run_study(study, SPEC, trials=3, timeout=None)
    first = study.trials[0]
    defaults = get_planner("tidgap").defaults
    assert first.user_attrs["defaults"] and all(defaults[k] == v for k, v in first.params.items())
    assert len(study.trials) == 3 and study.best_value >= first.value

    res = finish(study, SPEC, storage, tmp_path / "tuned.json")
    saved = json.loads((tmp_path / "tuned.json").read_text())
    assert saved["schema"] == "umpipe-tuned/1" and saved["planner"] == "tidgap"
    assert saved["settings"] == study.best_trial.params
    assert saved["train"]["default"] == first.value and saved["train"]["tuned"] == study.best_value
    for label in ("default", "tuned"):
        assert set(res.heldout[label]["per_problem"]) == {"sim-s4-b16-s0"}


def test_same_seed_same_study(tmp_path):
    values = []
    for i in range(2):
        study = open_study(SPEC, f"sqlite:///{tmp_path}/d{i}.db", "s", seed=3)
        run_study(study, SPEC, trials=3, timeout=None)
        values.append([(t.params, t.value) for t in study.trials])
    assert values[0] == values[1]


def test_two_workers_share_one_study_and_a_mismatch_is_refused(tmp_path):
    storage = f"sqlite:///{tmp_path}/shared.db"
    for seed in (1, 2):  # two "machines"
        run_study(open_study(SPEC, storage, "shared", seed=seed), SPEC, trials=2, timeout=None)
    assert len(optuna.load_study(study_name="shared", storage=storage).trials) == 4
    other = TuneSpec(**{**SPEC.__dict__, "budget": "evals:300"})
    with pytest.raises(ValueError, match="budget: study has 'evals:200'"):
        open_study(other, storage, "shared", seed=0)


def test_storage_label_hides_passwords():
    assert "secret" not in storage_label("postgresql://me:secret@db.example/optuna")
    assert storage_label("sqlite:///results/tuning.db") == "sqlite:///results/tuning.db"


def test_tuned_planner_reads_the_file_and_says_how_to_make_it(tmp_path, monkeypatch):
    path = tmp_path / "tuned-tidgap.json"
    monkeypatch.setattr(tuned_mod, "tuned_path", lambda base: path)
    with pytest.raises(PlannerError, match="umpipe-bench tune --planner tidgap --install"):
        get_planner("tidgap-tuned")
    path.write_text(json.dumps({"schema": "umpipe-tuned/1", "planner": "dgap",
                                "settings": {}}))
    with pytest.raises(PlannerError, match="for planner 'dgap'"):
        get_planner("tidgap-tuned")
    path.write_text(json.dumps({"schema": "umpipe-tuned/1", "planner": "tidgap",
                                "settings": {"population": 24, "tournament": 5}}))
    p = get_planner("tidgap-tuned", tournament=2)
    assert p.settings["population"] == 24 and p.settings["tournament"] == 2
    problem = get_problem("sim-s4-b16-s0")
    res = p.plan(problem, mode="recompute", budget="evals:200", seed=0)
    ref = get_planner("tidgap", population=24, tournament=2).plan(
        problem, mode="recompute", budget="evals:200", seed=0)
    assert res.planner == "tidgap-tuned" and res.plan.meta["planner"] == "tidgap-tuned"
    assert res.iteration_time == ref.iteration_time and res.plan == ref.plan
    # without a budget it runs TiDGAP's budget for the problem, not the class default
    big = get_problem("sim-s32-b256-s0")
    assert p.budget_for(big) == get_planner("tidgap").budget_for(big) != p.default_budget


def test_committed_tuned_settings_load():
    path = tuned_mod.tuned_path("tidgap")
    if not path.exists():
        pytest.skip("no committed tuned settings yet")
    assert tuned_mod.load_tuned(path, "tidgap")
    assert get_planner("tidgap-tuned").settings


def test_tune_cli(tmp_path, monkeypatch, capsys):
    installed = tmp_path / "installed.json"
    monkeypatch.setattr(tuned_mod, "tuned_path", lambda base: installed)
    args = ["tune", "--train", "sim-s4-b16-s1", "--heldout", "sim-s4-b16-s0", "--modes",
            "stash", "--seeds", "0", "--budget", "evals:200", "--trials", "2",
            "--storage", f"sqlite:///{tmp_path}/t.db", "--save", str(tmp_path / "s.json"),
            "--report", str(tmp_path / "t.md"), "--install", "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "held-out" in out and installed.exists()
    assert "| **held-out** | sim-s4-b16-s0 |" in (tmp_path / "t.md").read_text()
    bad = [*args[:3], "sim-s4-b16-s0", *args[4:]]  # held-out == train
    assert main(bad) == 2
    assert "must not be training problems" in capsys.readouterr().err
