"""The schedule family through the CLI: plan files of every planner simulate with their ops,
and --memory-cap plans fit (docs/SCHEDULES.md)."""

from __future__ import annotations

import json

import pytest

from umpipe_bench.cli import main
from umpipe_bench.plan import Plan
from umpipe_bench.planners.evaluation.reference import edp_scan
from umpipe_bench.registry import get_problem, planner_names
from umpipe_bench.schedules import build_schedule, schedule_of

PROBLEM = "sim-s2-b8-s0"


@pytest.mark.parametrize("planner", planner_names())
def test_simulate_events_runs_every_planner_plan_file(planner, tmp_path, capsys):
    out = tmp_path / "plan.json"
    budget = {"optuna-tpe": ["--budget", "evals:30"], "exact": []}.get(
        planner, ["--budget", "evals:600"])  # exact: its own budget (it enumerates)
    assert main(["plan", "--problem", PROBLEM, "--planner", planner, *budget,
                 "--out", str(out), "--json", "--no-progress"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert main(["simulate", "--problem", PROBLEM, "--plan", str(out), "--json",
                 "--events"]) == 0
    sim = json.loads(capsys.readouterr().out)
    plan = Plan.load(out)
    assert sim["iteration_time"] == planned["iteration_time"]
    assert sim["schedule"] == schedule_of(plan) == planned["schedule"]
    want = [[str(o) for o in row] for row in build_schedule(sim["schedule"], plan)]
    assert sim["stage_ops"] == want  # every stage's ops, in execution order
    assert len(sim["ops"]) == sum(map(len, want)) + plan.S  # + one optimizer step per stage


def test_plan_memory_cap_returns_a_plan_that_fits_and_compares_with_edp_that_fits(capsys):
    prob = get_problem("sim-s8-b64-s0")
    scan = edp_scan(prob, "stash", "gpipe")
    M = int(scan.times.argmin()) + 1
    N = int(scan.peaks[M - 1].max() / 2)
    assert main(["plan", "--problem", "sim-s8-b64-s0", "--planner", "1f1b", "--memory-cap",
                 str(N), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert max(out["peak_memory"]) <= N and out["fits_memory"] is True
    assert out["gpipe_time"] is None  # GPipe keeps all 64 samples: nothing fits half
    assert out["best_edp_time"] == out["1f1b_time"]
    assert out["speedup_vs_best_edp"] == pytest.approx(0.0, abs=1e-12)


def test_plan_memory_cap_with_nothing_that_fits_names_stage_bytes_and_cap(capsys):
    assert main(["plan", "--problem", "sim-s8-b64-s0", "--planner", "gpipe", "--memory-cap",
                 "1MiB"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "needs" in err and "on stage" in err and "whose cap is 1.00 MiB" in err
