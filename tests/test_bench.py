"""The benchmark runner: matrix files, the leaderboard's schema, error rows, resume.

Planners here are test doubles named by import path (``tests.test_bench:EdpPlanner``), so
these tests depend on no registered planner; problems are the tiny synthetic ones.
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path

import pytest

from umpipe_bench.bench import (
    COLUMNS,
    ConfigError,
    Leaderboard,
    builtin_config,
    load_config,
    parse_config,
    read_rows,
    run_matrix,
    select_cells,
)
from umpipe_bench.bench.leaderboard import flatten_settings
from umpipe_bench.plan import Plan
from umpipe_bench.planners.search.base import Planner, PlanResult
from umpipe_bench.registry import get_problem
from umpipe_bench.simulator import simulate

PROBLEM = "sim-s4-b16-s0"


class EdpPlanner(Planner):
    """EDP(M) under gpipe: the answer is known by construction."""

    name = "test-edp"

    def __init__(self, M: int = 4, delay: float = 0.0, **settings):
        super().__init__(M=M, delay=delay, **settings)

    def _plan(self, problem, *, mode, budget, seed, progress):
        log = os.environ.get("UMPIPE_TEST_PLAN_LOG")
        if log:
            with open(log, "a") as fh:
                fh.write(f"{problem.name} {mode} {seed}\n")
        if self.settings["delay"]:
            time.sleep(self.settings["delay"])
        plan = Plan.edp(problem.S, problem.B, self.settings["M"], mode)
        T = simulate(problem, plan, "gpipe").iteration_time
        return PlanResult(self.name, plan, T, evaluations=1, start_time=T,
                          history=[{"evals": 1, "time": 0.0, "best": T}],
                          settings=dict(self.settings))


class FailingPlanner(Planner):
    name = "test-fail"

    def _plan(self, problem, *, mode, budget, seed, progress):
        raise RuntimeError("planner exploded on purpose")


class LyingPlanner(EdpPlanner):
    """Reports half the true iteration time: the runner must catch it."""

    def _plan(self, problem, *, mode, budget, seed, progress):
        res = super()._plan(problem, mode=mode, budget=budget, seed=seed, progress=progress)
        res.iteration_time /= 2
        return res


def _config(**over):
    data = {
        "bench": {"name": "t", "problems": [PROBLEM], "seeds": [0, 1], "modes": ["stash"],
                  "budgets": ["evals:200"]},
        "planners": [{"name": "tests.test_bench:EdpPlanner", "label": "edp4"},
                     {"name": "tests.test_bench:EdpPlanner", "label": "edp2",
                      "settings": {"M": 2}, "seeds": [0]}],
    }
    data.update(over)
    return parse_config(data, "test.toml")


# ----------------------------------------------------------------- matrix files

def test_builtin_matrices_validate_and_expand():
    for name in ("default", "full"):
        cfg = builtin_config(name)
        assert cfg.cells(), name


def test_cells_expand_in_problem_order_with_overrides():
    cells = _config().cells()
    assert [(c.planner, c.seed) for c in cells] == [("edp4", 0), ("edp4", 1), ("edp2", 0)]
    assert len({c.key() for c in cells}) == 3
    assert cells[0].settings_hash != cells[2].settings_hash


def test_patterns_match_registered_problems_in_natural_order():
    cfg = _config(bench={"problems": ["sim-s4-b16-*"]})
    assert {c.problem for c in cfg.cells()} == {"sim-s4-b16-s0", "sim-s4-b16-s1"}
    cfg = _config(bench={"problems": ["sim-s*-b64-s0"]})
    assert list(dict.fromkeys(c.problem for c in cfg.cells())) == [
        "sim-s4-b64-s0", "sim-s8-b64-s0", "sim-s16-b64-s0", "sim-s32-b64-s0"]


def test_optional_problems_are_skipped_when_absent():
    cfg = _config(bench={"problems": [PROBLEM], "optional_problems": ["not-profiled-yet",
                                                                       "sim-s4-b16-s1"]})
    assert [c.problem for c in cfg.cells()][::3] == [PROBLEM, "sim-s4-b16-s1"]
    cfg = _config(bench={"optional_problems": ["not-profiled-yet"]})
    with pytest.raises(ConfigError, match="none is registered"):
        cfg.cells()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"bench": {"problems": [PROBLEM], "seeds": "0"}}, "bench.seeds"),
        ({"bench": {"problems": [PROBLEM], "modes": ["fast"]}}, "bench.modes[0]"),
        ({"bench": {"problems": [PROBLEM], "budgets": ["evals:-3"]}}, "bench.budgets"),
        ({"bench": {"problems": [PROBLEM], "budgets": ["minutes:3"]}}, "bench.budgets"),
        ({"bench": {"problems": [PROBLEM], "sedes": [1]}}, "bench.sedes': unknown field; did you mean 'seeds'"),
        ({"bench": {"problems": []}}, "bench': give 'problems'"),
        ({"bench": {}}, "bench': give 'problems'"),
        ({"bench": {"problems": ["sim-s4-b16-s0"], "optional_problems": "x"}},
         "bench.optional_problems"),
        ({"planners": [{"name": "x", "setings": {}}]}, "planners[0].setings': unknown field; did you mean 'settings'"),
        ({"planners": [{"name": "x"}, {"name": "x"}]}, "planners[1]' has the same label"),
        ({"planners": [{"name": "x", "memory_caps": ["50%", "none"]},
                       {"name": "x", "memory_caps": ["25%", "50%"]}]},
         "planners[1]' has the same label 'x' as planners[0] under memory cap '50%'"),
        ({"planners": [{"name": "x", "settings": 3}]}, "planners[0].settings"),
    ],
)
def test_config_errors_name_the_field(data, field):
    base = {"bench": {"problems": [PROBLEM]}, "planners": [{"name": "x"}]}
    base.update(data)
    with pytest.raises(ConfigError, match=r"test\.toml: .*" + field.replace("[", r"\[")
                       .replace("]", r"\]")):
        parse_config(base, "test.toml")


def test_unknown_problem_and_planner_name_the_field():
    cfg = _config(bench={"problems": [PROBLEM, "no-such-problem"]})
    with pytest.raises(ConfigError, match=r"bench\.problems\[1\]: 'no-such-problem'"):
        cfg.cells()
    cfg = _config(planners=[{"name": "tidgap-that-is-not"}])
    with pytest.raises(ConfigError, match=r"planners\[0\]\.name: .*valid planners"):
        cfg.check_planners()


def test_load_config_reports_bad_toml(tmp_path):
    bad = tmp_path / "m.toml"
    bad.write_text("[bench\nproblems = 3\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")


def test_select_cells_limit_and_shard():
    cells = _config().cells()
    assert select_cells(cells, limit=2) == cells[:2]
    parts = [select_cells(cells, shard=(i, 2)) for i in range(2)]
    assert sorted(c.key() for p in parts for c in p) == sorted(c.key() for c in cells)
    with pytest.raises(ValueError, match="shard"):
        select_cells(cells, shard=(2, 2))


# ----------------------------------------------------------------- leaderboard schema

EXPECTED_COLUMNS = (
    "problem", "S", "B", "source", "device", "model", "problem_digest",
    "planner", "planner_name", "seed", "mode", "budget", "settings_hash",
    "schedule", "plan_kind", "caps", "T_pred", "T_start", "evaluations", "wall_time",
    "memory_cap", "memory_cap_bytes", "peak_memory_max", "peak_memory",
    "T_gpipe_edp", "M_gpipe_edp", "T_1f1b_edp", "M_1f1b_edp", "T_best_edp",
    "T_best_torch", "best_torch_schedule", "M_best_torch",
    "speedup_vs_gpipe", "speedup_vs_1f1b", "speedup_vs_best_edp", "speedup_vs_best_torch",
    "T_measured", "model_error", "measured_in",
    "plan_file", "history_file",
    "error", "infeasible",
    "python", "v_numpy", "v_deap", "v_optuna", "v_torch", "v_umpipe_bench", "git_rev",
    "timestamp",
)


def test_schema_is_pinned(tmp_path):
    assert COLUMNS == EXPECTED_COLUMNS
    run_matrix(_config(), tmp_path, progress=False)
    with open(tmp_path / "leaderboard.csv", newline="") as fh:
        header = next(csv.reader(fh))
    assert tuple(header[: len(COLUMNS)]) == EXPECTED_COLUMNS
    assert header[len(COLUMNS):] == ["param_M", "param_delay"]


def test_flatten_settings():
    assert flatten_settings({"pop": 8, "init": {"edp": 0.5}, "ms": [1, 2]}) == {
        "param_pop": 8, "param_init.edp": 0.5, "param_ms": "1;2"}


# ----------------------------------------------------------------- runner

def test_rows_hold_known_answers(tmp_path):
    summary = run_matrix(_config(), tmp_path, progress=False)
    assert (summary.ran, summary.skipped, summary.errors) == (3, 0, 0)
    rows = read_rows(tmp_path / "leaderboard.csv")
    p = get_problem(PROBLEM)
    gp_T = min(simulate(p, Plan.edp(p.S, p.B, M, "stash"), "gpipe").iteration_time
               for M in range(1, p.B + 1))
    ob_T = min(simulate(p, Plan.edp(p.S, p.B, M, "stash"), "1f1b").iteration_time
               for M in range(1, p.B + 1))
    for r in rows:
        M = int(r["param_M"])
        T = simulate(p, Plan.edp(p.S, p.B, M, "stash"), "gpipe").iteration_time
        assert float(r["T_pred"]) == pytest.approx(T, rel=1e-12)
        assert float(r["T_gpipe_edp"]) == pytest.approx(gp_T, rel=1e-12)
        assert float(r["T_1f1b_edp"]) == pytest.approx(ob_T, rel=1e-12)
        assert float(r["speedup_vs_gpipe"]) == pytest.approx(gp_T / T - 1, rel=1e-9)
        assert float(r["speedup_vs_1f1b"]) == pytest.approx(ob_T / T - 1, rel=1e-9)
        assert float(r["speedup_vs_gpipe"]) <= 1e-12  # nothing beats the best EDP at EDP
        assert r["plan_kind"] == f"EDP({M})"
        assert (r["S"], r["B"], r["source"]) == ("4", "16", "synthetic")
        assert r["error"] == "" and r["git_rev"] and r["v_numpy"] and r["timestamp"]
        assert Plan.load(tmp_path / r["plan_file"]).fwd[0] == Plan.edp(4, 16, M).fwd[0]
        assert (tmp_path / r["history_file"]).exists()


def test_failing_and_lying_planners_are_error_rows(tmp_path):
    cfg = _config(planners=[
        {"name": "tests.test_bench:FailingPlanner", "seeds": [0]},
        {"name": "tests.test_bench:LyingPlanner", "seeds": [0]},
        {"name": "tests.test_bench:EdpPlanner", "seeds": [0], "settings": {"M": 99}},
        {"name": "tests.test_bench:EdpPlanner", "label": "ok", "seeds": [0]},
    ])
    summary = run_matrix(cfg, tmp_path, progress=False, log=lambda _msg: None)
    assert (summary.ran, summary.errors) == (4, 3)
    rows = {r["planner"]: r for r in read_rows(tmp_path / "leaderboard.csv")}
    assert "planner exploded on purpose" in rows["tests.test_bench:FailingPlanner"]["error"]
    assert "simulator gives" in rows["tests.test_bench:LyingPlanner"]["error"]
    assert "M <= B" in rows["tests.test_bench:EdpPlanner"]["error"]
    for r in rows.values():  # error rows are complete rows: baselines still filled in
        assert r["T_gpipe_edp"] and r["problem"] == PROBLEM
    assert rows["ok"]["error"] == ""
    # error rows count as done ...
    assert run_matrix(cfg, tmp_path, progress=False, log=lambda _m: None).ran == 0
    # ... unless asked to retry them
    again = run_matrix(cfg, tmp_path, progress=False, retry_errors=True, log=lambda _m: None)
    assert (again.ran, again.errors) == (3, 3)
    assert len(read_rows(tmp_path / "leaderboard.csv")) == 4


def test_second_run_does_no_work(tmp_path, monkeypatch):
    log = tmp_path / "plans.log"
    monkeypatch.setenv("UMPIPE_TEST_PLAN_LOG", str(log))
    first = run_matrix(_config(), tmp_path / "out", progress=False)
    before = (tmp_path / "out" / "leaderboard.csv").read_bytes()
    second = run_matrix(_config(), tmp_path / "out", progress=False)
    assert (first.ran, second.ran, second.skipped) == (3, 0, 3)
    assert len(log.read_text().splitlines()) == 3
    assert (tmp_path / "out" / "leaderboard.csv").read_bytes() == before


def test_a_changed_setting_is_a_new_cell(tmp_path):
    run_matrix(_config(), tmp_path, progress=False)
    cfg = _config(bench={"problems": [PROBLEM], "seeds": [0], "budgets": ["evals:400"]})
    s = run_matrix(cfg, tmp_path, progress=False)
    assert s.ran == 2  # new budget -> new keys
    assert len(Leaderboard(tmp_path / "leaderboard.csv")) == 5


def test_a_changed_problem_is_run_again(tmp_path, monkeypatch):
    from umpipe_bench.bench import runner
    from umpipe_bench.synthetic import synthetic_problem

    run_matrix(_config(), tmp_path, progress=False)
    before = {(r["planner"], r["seed"]): r for r in read_rows(tmp_path / "leaderboard.csv")}
    other = synthetic_problem(4, 16, 7, name=PROBLEM)  # "re-profiled": same name, new costs
    monkeypatch.setattr(runner, "_load_problem", lambda name: other)
    s = run_matrix(_config(), tmp_path, progress=False)
    assert (s.ran, s.skipped) == (3, 0)
    after = read_rows(tmp_path / "leaderboard.csv")
    assert len(after) == 3
    for r in after:
        old = before[(r["planner"], r["seed"])]
        assert r["problem_digest"] != old["problem_digest"] and r["T_pred"] != old["T_pred"]


def test_jobs_give_the_same_rows(tmp_path):
    run_matrix(_config(), tmp_path / "a", progress=False)
    run_matrix(_config(), tmp_path / "b", progress=False, jobs=2)

    def strip(path: Path):
        return sorted((r["planner"], r["seed"], r["T_pred"], r["speedup_vs_1f1b"])
                      for r in read_rows(path / "leaderboard.csv"))

    assert strip(tmp_path / "a") == strip(tmp_path / "b")


def test_measured_times_are_joined(tmp_path):
    run_matrix(_config(), tmp_path, progress=False)
    row = next(r for r in read_rows(tmp_path / "leaderboard.csv") if r["planner"] == "edp2")
    real = tmp_path / "real"
    real.mkdir()
    T = float(row["T_pred"])
    with open(real / "run1.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, ["problem", "plan", "engine", "schedule", "mode",
                                "predicted_time", "measured_median", "date", "error"])
        w.writeheader()
        w.writerow({"problem": PROBLEM, "plan": Path(row["plan_file"]).stem, "engine": "umpipe",
                    "schedule": "gpipe", "mode": "stash", "predicted_time": T,
                    "measured_median": T * 1.25, "date": "2025-01-01T00:00:00Z", "error": ""})
        w.writerow({"problem": PROBLEM, "plan": Path(row["plan_file"]).stem, "engine": "umpipe",
                    "schedule": "gpipe", "mode": "stash", "predicted_time": T * 1.1,
                    "measured_median": T * 3, "date": "2025-06-01T00:00:00Z", "error": ""})
        w.writerow({"problem": PROBLEM, "plan": "peer", "engine": "torch", "schedule": "gpipe",
                    "mode": "stash", "predicted_time": T, "measured_median": T * 9,
                    "date": "2025-01-01T00:00:00Z", "error": ""})
    # nothing to run; joins the new file (not the later run of the same plan file that
    # predicted another time: the problem had changed since)
    run_matrix(_config(), tmp_path, progress=False)
    rows = {r["planner"] + r["seed"]: r for r in read_rows(tmp_path / "leaderboard.csv")}
    assert float(rows["edp20"]["T_measured"]) == pytest.approx(T * 1.25)
    assert float(rows["edp20"]["model_error"]) == pytest.approx(0.25)
    assert rows["edp20"]["measured_in"] == "real/run1.csv"
    assert rows["edp40"]["T_measured"] == ""


def test_not_a_leaderboard_is_refused(tmp_path):
    (tmp_path / "leaderboard.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a leaderboard"):
        run_matrix(_config(), tmp_path, progress=False)


class OneFOneBPlanner(Planner):
    """EDP(M) under 1f1b as capped sample caps (M divides B): fits where 1F1B-EDP fits."""

    name = "test-1f1b"

    def __init__(self, M: int = 16, **settings):
        super().__init__(M=M, **settings)

    def _plan(self, problem, *, mode, budget, seed, progress):
        S, B, M = problem.S, problem.B, self.settings["M"]
        plan = Plan.edp(S, B, M, mode).with_caps([(S - s) * B // M for s in range(S)])
        T = simulate(problem, plan).iteration_time
        return PlanResult(self.name, plan, T, schedule="capped", evaluations=1, start_time=T,
                          settings=dict(self.settings))


def test_memory_caps_are_a_matrix_dimension_and_unfit_plans_are_error_rows(tmp_path):
    cfg = parse_config({
        "bench": {"problems": [PROBLEM], "modes": ["stash"], "memory_caps": ["none", "50%"]},
        "planners": [{"name": "tests.test_bench:EdpPlanner"},
                     {"name": "tests.test_bench:OneFOneBPlanner"}, {"name": "gpipe"}],
    })
    cells = cfg.cells()
    assert [c.memory_cap for c in cells] == ["none", "50%"] * 3
    assert len({c.key() for c in cells}) == 6
    run_matrix(cfg, tmp_path, progress=False)
    rows = {(r["planner"].rsplit(":", 1)[-1], r["memory_cap"]): r
            for r in read_rows(tmp_path / "leaderboard.csv")}
    free, half = rows["EdpPlanner", "none"], rows["EdpPlanner", "50%"]
    assert free["error"] == "" and free["caps"] == ""
    assert float(free["T_best_edp"]) == min(float(free["T_gpipe_edp"]),
                                            float(free["T_1f1b_edp"]))
    # the best torch schedule on the problem's own stages: re-derived from the schedule table
    from umpipe_bench.torch_schedules.best import best_row, schedule_table

    table = schedule_table(get_problem(PROBLEM), get_problem(PROBLEM).S, "stash", vs=(1,))
    assert float(free["T_best_torch"]) == best_row(table).choice.T
    assert free["best_torch_schedule"] == best_row(table).schedule
    assert float(free["speedup_vs_best_torch"]) == pytest.approx(
        float(free["T_best_torch"]) / float(free["T_pred"]) - 1.0)
    half_torch = rows["EdpPlanner", "50%"]["T_best_torch"]
    assert half_torch == "" or float(half_torch) >= float(free["T_best_torch"])
    # "50%": per stage, static bytes plus half the activations GPipe-EDP keeps there. GPipe
    # keeps all 16 samples' activations whatever M: nothing under gpipe fits. A planner
    # returning a plan that does not fit is an error...
    assert "InternalError" in half["error"] and "does not fit: stage" in half["error"]
    assert half["T_gpipe_edp"] == "" and half["M_gpipe_edp"] == ""
    # ... but a planner that finds nothing that fits says so: a result, not an error
    none_fits = rows["gpipe", "50%"]
    assert none_fits["error"] == "" and none_fits["T_pred"] == ""
    assert none_fits["plan_kind"] == "none fits"
    assert "no EDP(M) plan under gpipe fits memory" in none_fits["infeasible"]
    assert rows["gpipe", "none"]["infeasible"] == ""
    capped = rows["OneFOneBPlanner", "50%"]
    assert capped["error"] == "" and capped["caps"] == "4;3;2;1"
    peaks = [float(x) for x in capped["peak_memory"].split(";")]
    caps = [float(x) for x in capped["memory_cap_bytes"].split(";")]
    assert all(p <= c for p, c in zip(peaks, caps))
    assert float(capped["peak_memory_max"]) == pytest.approx(max(peaks), abs=1)
    assert float(capped["T_best_edp"]) == float(capped["T_1f1b_edp"])
    prob = get_problem(PROBLEM)
    gp_peaks = [float(x) for x in free["peak_memory"].split(";")]
    for st, c, g in zip(prob.stages, caps, gp_peaks):
        static = st.memory.param_bytes
        assert c == pytest.approx(static + 0.5 * (g - static), abs=1)


def test_a_bad_memory_cap_names_the_field():
    with pytest.raises(ConfigError, match=r"bench\.memory_caps.*memory cap 'lots'"):
        parse_config({"bench": {"problems": [PROBLEM], "memory_caps": ["lots"]},
                      "planners": [{"name": "gpipe"}]})


def test_one_label_may_run_under_disjoint_memory_caps():
    cfg = parse_config({
        "bench": {"problems": [PROBLEM]},
        "planners": [{"name": "gpipe"}, {"name": "gpipe", "memory_caps": ["50%", "1GiB"]}],
    })
    assert sorted(c.memory_cap for c in cfg.cells()) == ["1GiB", "50%", "none"]


def test_no_terminal_gives_one_line_per_cell(tmp_path, capsys):
    """Without a terminal (a log, a pipe) the bar is off, so each finished cell says so."""
    summary = run_matrix(_config(), tmp_path)  # progress=None: pytest's stderr is no tty
    err = capsys.readouterr().err.splitlines()
    lines = [ln for ln in err if ln.startswith("bench t: ")]
    assert len(lines) == summary.total == 3
    assert [ln.split()[2] for ln in lines] == ["1/3", "2/3", "3/3"]
    assert all(": T " in ln for ln in lines)
    # --no-progress (progress=False) stays silent
    run_matrix(_config(), tmp_path / "quiet", progress=False)
    assert "bench t: " not in capsys.readouterr().err
