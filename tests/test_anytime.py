"""Anytime statistics (bench/anytime.py) on curves whose answers are known by construction."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from umpipe_bench.bench import anytime as A


def run(planner, best, evals=None, seed=0, problem="p", mode="stash", times=None):
    evals = np.arange(1, len(best) + 1, dtype=float) * 10 if evals is None else np.asarray(
        evals, dtype=float)
    times = evals / 100 if times is None else np.asarray(times, dtype=float)
    return A.Run(problem, mode, "none", planner, seed, evals, times,
                 np.minimum.accumulate(np.asarray(best, dtype=float)))


def test_targets_are_the_reference_times_one_plus_epsilon():
    assert A.targets(2.0, (0.1, 0.01)).tolist() == pytest.approx([2.2, 2.02])
    assert A.EPSILONS == (0.10, 0.05, 0.02, 0.01, 0.005, 0.001)


def test_hit_times_are_the_first_record_at_or_below_each_target():
    r = run("a", [1.2, 1.05, 1.0], evals=[10, 20, 30], times=[0.5, 1.0, 2.0])
    tg = A.targets(1.0, (0.1, 0.05, 0.01, -0.5))
    assert A.hit_times(r, tg).tolist() == [20, 20, 30, np.inf]
    assert A.hit_times(r, tg, "wall_time").tolist() == [1.0, 1.0, 2.0, np.inf]


def test_ecdf_counts_reached_pairs_and_never_decreases():
    runs = [run("a", [1.2, 1.05, 1.0]), run("a", [1.5, 1.5, 1.5], seed=1)]
    refs = {("p", "stash", "none"): (1.0, "best known")}
    grid = np.array([0, 10, 20, 30, 1e9])
    frac = A.ecdf(runs, refs, grid, epsilons=(0.1, 0.01))["a"]
    # pairs: run 0 reaches 1.1 at 20 and 1.01 at 30; run 1 reaches neither: 4 pairs
    assert frac.tolist() == [0, 0, 0.25, 0.5, 0.5]


def test_bootstrap_interval_holds_the_mean_and_is_seeded():
    v = np.array([0.0, 1.0, 2.0, 3.0, 10.0])
    m, lo, hi = A.bootstrap_ci(v, seed=1)
    assert m == pytest.approx(3.2) and lo < m < hi
    assert A.bootstrap_ci(v, seed=1) == (m, lo, hi)
    assert A.bootstrap_ci(np.full(7, 0.25)) == pytest.approx((0.25, 0.25, 0.25))
    assert all(np.isnan(A.bootstrap_ci(np.array([]))))


def test_fixed_budget_gap_is_best_so_far_over_reference():
    runs = [run("a", [1.2, 1.1, 1.0], evals=[10, 20, 30]),
            run("a", [1.4, 1.2, 1.2], evals=[10, 20, 30], seed=1),
            run("b", [1.3], evals=[25])]
    refs = {("p", "stash", "none"): (1.0, "best in leaderboard")}
    t = A.fixed_budget_table(runs, refs, budgets=[10, 20, 100]).set_index("planner")
    assert t.loc["a", "mean@10"] == pytest.approx(0.3)   # (0.2 + 0.4) / 2
    assert t.loc["a", "mean@100"] == pytest.approx(0.1)  # (0.0 + 0.2) / 2
    assert t.loc["b", "n@10"] == 0 and t.loc["b", "evals 10"] == ""  # nothing evaluated yet
    assert t.loc["b", "mean@100"] == pytest.approx(0.3)
    assert t.loc["a", "lo@20"] <= t.loc["a", "mean@20"] <= t.loc["a", "hi@20"]


def test_average_ranks_with_a_single_seed_planner_standing_in_for_every_seed():
    runs = [run("ga", [1.0], seed=s) for s in range(3)]
    runs += [run("rs", [2.0], seed=s) for s in range(3)]
    runs += [run("edp", [1.5], seed=0)]
    r = A.average_ranks(runs).set_index("planner")["average rank"]
    assert r.to_dict() == {"ga": 1.0, "edp": 2.0, "rs": 3.0}
    tie = A.average_ranks([run("x", [1.0]), run("y", [1.0])]).set_index("planner")
    assert tie["average rank"].tolist() == [1.5, 1.5]


def test_reference_is_best_known_unless_a_run_beat_it():
    runs = [run("a", [1.2, 1.1])]
    assert A.reference_values(runs, {("p", "stash"): 1.0})[("p", "stash", "none")] == (
        1.0, "best known")
    assert A.reference_values(runs, {("p", "stash"): 1.5})[("p", "stash", "none")] == (
        1.1, "best in leaderboard")


def test_runs_load_both_history_shapes_and_end_at_the_leaderboard_row(tmp_path):
    (tmp_path / "h").mkdir()
    typed = [{"generation": g, "evaluations": 100 * (g + 1), "wall_time": 0.1 * g,
              "best": 2.0 - 0.1 * g} for g in range(3)]
    legacy = [{"gen": 0, "evals": 50, "nevals": 50, "best": 3.0, "time": 0.2},
              {"gen": 1, "evals": 40, "nevals": 90, "best": 2.5, "time": 0.3}]
    (tmp_path / "h" / "t.json").write_text(json.dumps({"records": typed}))
    (tmp_path / "h" / "l.json").write_text(json.dumps({"records": legacy}))
    df = pd.DataFrame([
        {"problem": "p", "mode": "stash", "memory_cap": "none", "planner": "t", "seed": 0,
         "T_pred": 1.8, "evaluations": 300, "wall_time": 0.25, "history_file": "h/t.json",
         "error": ""},
        {"problem": "p", "mode": "stash", "memory_cap": "none", "planner": "l", "seed": 0,
         "T_pred": 2.5, "evaluations": 90, "wall_time": 0.31, "history_file": "h/l.json",
         "error": ""},
        {"problem": "p", "mode": "stash", "memory_cap": "none", "planner": "g", "seed": 0,
         "T_pred": 2.2, "evaluations": 16, "wall_time": 0.01, "history_file": "",
         "error": ""},
        {"problem": "p", "mode": "stash", "memory_cap": "none", "planner": "x", "seed": 0,
         "T_pred": None, "evaluations": 1, "wall_time": 0.01, "history_file": "",
         "error": "boom"},
    ])
    runs = {r.planner: r for r in A.load_runs(df, tmp_path)}
    assert set(runs) == {"t", "l", "g"}
    assert runs["t"].evaluations.tolist() == [100, 200, 300]
    assert runs["t"].best.tolist() == pytest.approx([2.0, 1.9, 1.8])
    assert runs["l"].evaluations.tolist() == [50, 90] and runs["l"].best.tolist() == [3.0, 2.5]
    assert runs["g"].evaluations.tolist() == [16] and runs["g"].final == 2.2


def test_ecdf_plot_is_written(tmp_path):
    runs = [run("a", [1.2, 1.05, 1.0]), run("b", [1.5, 1.1])]
    refs = A.reference_values(runs)
    assert A.draw_ecdf(runs, refs, tmp_path / "ecdf.png").stat().st_size > 1000


def test_report_has_the_anytime_section_and_the_ecdf_plot(tmp_path):
    from umpipe_bench.bench.config import parse_config
    from umpipe_bench.bench.report import write_report
    from umpipe_bench.bench.runner import run_matrix

    cfg = parse_config({"bench": {"name": "t", "problems": ["sim-s3-b6-s0"], "seeds": [0, 1],
                                  "modes": ["stash"], "budgets": ["evals:300"]},
                        "planners": [{"name": "gpipe", "seeds": [0]},
                                     {"name": "random-search"}, {"name": "tidgap"}]}, "t.toml")
    run_matrix(cfg, tmp_path, progress=False)
    files = write_report(tmp_path / "leaderboard.csv", tmp_path / "rep")
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "## Anytime statistics (COCO style)" in text and "### Fixed budget" in text
    assert "the best known value (umpipe_bench/problems/best_known.json)" in text
    assert "| gpipe " not in text.split("## Anytime statistics")[1]  # references left out
    assert tmp_path / "rep" / "ecdf.png" in files
