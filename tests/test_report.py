"""``umpipe-bench report``: the markdown leaderboard, the paper's figures beside ours, plots."""

from __future__ import annotations

import time

import numpy as np
import pytest

from umpipe_bench.bench import parse_config, run_matrix
from umpipe_bench.bench.plots import convergence_curve
from umpipe_bench.bench.report import PAPER, best_rows, load_leaderboard, paper_figure, write_report
from umpipe_bench.cli import main
from umpipe_bench.errors import UmpipeError
from umpipe_bench.plan import Plan
from umpipe_bench.planners.search.base import Planner, PlanResult
from umpipe_bench.simulator import gpipe_recurrence


class RandomCutsPlanner(Planner):
    """Random search over cut bits, starting from EDP(4): a test double with a real history."""

    name = "test-random"

    def __init__(self, n: int = 30):
        super().__init__(n=n)

    def _plan(self, problem, *, mode, budget, seed, progress):
        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        best = Plan.edp(problem.S, problem.B, 4, mode)
        start = T = gpipe_recurrence(problem, best)
        history = [{"evals": 1, "time": 0.0, "best": T}]  # evals: total so far
        for _ in range(self.settings["n"]):
            bits = (rng.random((problem.S, problem.B - 1)) < 0.25).astype(int).tolist()
            plan = Plan.from_bits(bits, bits, mode)
            t = gpipe_recurrence(problem, plan)
            if t < T:
                best, T = plan, t
            history.append({"evals": len(history) + 1, "time": time.perf_counter() - t0,
                            "best": T})
        return PlanResult(self.name, best, T, evaluations=len(history), start_time=start,
                          history=history, settings=dict(self.settings))


MATRIX = {
    "bench": {"name": "r", "problems": ["sim-s4-b16-s0", "sim-s4-b16-s1"], "seeds": [0, 1],
              "modes": ["stash", "recompute"], "budgets": ["evals:100"]},
    "planners": [{"name": "tests.test_report:RandomCutsPlanner", "label": "rand"},
                 {"name": "tests.test_bench:EdpPlanner", "label": "edp4", "seeds": [0]},
                 {"name": "tests.test_bench:FailingPlanner", "label": "boom", "seeds": [0],
                  "modes": ["stash"], "problems": ["sim-s4-b16-s0"]}],
}


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    run_matrix(parse_config(MATRIX, "r.toml"), out, progress=False, log=lambda _m: None)
    return out


def test_paper_figures_are_the_abstracts():
    assert (PAPER["gpt1"].vs_gpipe, PAPER["gpt1"].vs_pipedream) == (0.1389, 0.1109)
    assert (PAPER["vgg16"].vs_gpipe, PAPER["vgg16"].vs_pipedream) == (0.1711, 0.0796)
    assert PAPER["synthetic"].at_least and PAPER["synthetic"].text("gpipe") == "≥ +170.00%"
    assert paper_figure({"model": "gpt1", "problem": "gpt1-14"}) is PAPER["gpt1"]
    assert paper_figure({"model": "", "problem": "vgg16-s4"}) is PAPER["vgg16"]
    assert paper_figure({"problem": "sim-s4-b16-s0", "source": "synthetic"}) is PAPER["synthetic"]
    assert paper_figure({"problem": "tiny", "source": "test"}) is None


def test_best_rows_take_the_smallest_time(board):
    df = load_leaderboard(board / "leaderboard.csv")
    best = best_rows(df)
    assert len(best) == 4  # 2 problems x 2 modes
    for _, r in best.iterrows():
        same = df[(df.problem == r.problem) & (df["mode"] == r["mode"]) & (df.error == "")]
        assert r.T_pred == same.T_pred.min()


def test_report_markdown_and_plots(board, tmp_path):
    files = write_report(board / "leaderboard.csv", tmp_path)
    names = {f.name for f in files}
    assert {"report.md", "speedup.png", "convergence.png", "gantt-sim-s4-b16-s0.png",
            "gantt-sim-s4-b16-s1.png"} <= names
    for f in files:
        assert f.stat().st_size > 1000
    md = (tmp_path / "report.md").read_text()
    assert "## Best plan per problem" in md and "≥ +170.00%" in md and "≥ +100.00%" in md
    assert "| boom" in md and "planner exploded on purpose" in md  # the errors section
    df = load_leaderboard(board / "leaderboard.csv")
    best = best_rows(df).iloc[0]
    assert f"{best.speedup_vs_gpipe:+.2%}" in md
    assert "![Convergence" in md
    assert "gap to best known" in md and "certified (gap <= 1 %)" in md


def test_headline_gaps_to_the_proven_bound_and_best_known(board):
    """The gap to the proven bound is never negative, and certified means at most 1 %."""
    from umpipe_bench.bench import best_known as bk
    from umpipe_bench.bench.report import headline_table

    t = headline_table(load_leaderboard(board / "leaderboard.csv"))
    for _, r in t.iterrows():
        gap = float(r["gap to bound"].rstrip("%")) / 100
        assert gap >= -1e-9
        assert r["certified (gap <= 1 %)"] == ("yes" if gap <= bk.CERTIFIED_GAP else "no")
        lb = bk.proven_bound(r["problem"], r["mode"])
        assert lb <= float(r["T (ms)"]) / 1e3 * (1 + 1e-3)


def test_report_cli(board, tmp_path, capsys):
    assert main(["report", "--in", str(board / "leaderboard.csv"), "--out", str(tmp_path),
                 "--no-plots"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.png"))
    assert main(["report", "--in", str(tmp_path / "nope.csv")]) == 2
    assert "run 'umpipe-bench bench' first" in capsys.readouterr().err


def test_convergence_curve_reads_logbooks_and_lists():
    ga = [{"gen": 0, "evals": 20, "nevals": 20, "best": 3.0, "time": 0.1},
          {"gen": 1, "evals": 10, "nevals": 30, "best": 2.0, "time": 0.2}]
    ev, t, best = convergence_curve(ga)
    assert ev.tolist() == [20, 30] and best.tolist() == [3.0, 2.0] and t.tolist() == [0.1, 0.2]
    trials = [{"evals": 1, "value": 5.0}, {"evals": 2, "value": 6.0}, {"evals": 3, "value": 4.0}]
    ev, t, best = convergence_curve(trials)
    assert ev.tolist() == [1, 2, 3] and best.tolist() == [5.0, 5.0, 4.0] and np.isnan(t).all()
    assert convergence_curve(trials[:1]) is None


def test_a_start_plan_over_the_memory_cap_loads(board, tmp_path):
    """A planner whose starting plan does not fit a memory cap records T_start = inf
    (infinitely slow, docs/SCHEDULES.md §4): the default matrix's 50 % cells do; it loads."""
    import csv as _csv
    import math

    with open(board / "leaderboard.csv", newline="", encoding="utf-8") as fh:
        rows = list(_csv.reader(fh))
    rows[3][rows[0].index("T_start")] = "inf"
    path = tmp_path / "capped.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        _csv.writer(fh).writerows(rows)
    df = load_leaderboard(path)
    assert math.isinf(df["T_start"].iloc[2])


def test_load_leaderboard_missing_file(tmp_path):
    with pytest.raises(UmpipeError, match="umpipe-bench bench"):
        load_leaderboard(tmp_path / "x.csv")


@pytest.mark.parametrize("column,value,expected", [
    ("M_1f1b_edp", "1e400", "a whole number"),
    ("M_gpipe_edp", "2.5", "a whole number"),
    ("T_pred", "abc", "a finite number"),
    ("T_pred", "inf", "a finite number"),
    ("T_start", "-inf", "a finite number or inf"),
    ("mode", "abc", "one of stash, recompute"),
])
def test_load_leaderboard_refuses_odd_cells(board, tmp_path, column, value, expected):
    import csv as _csv

    with open(board / "leaderboard.csv", newline="", encoding="utf-8") as fh:
        rows = list(_csv.reader(fh))
    col = rows[0].index(column)
    rows[3][col] = value
    bad = tmp_path / "odd.csv"
    with open(bad, "w", newline="", encoding="utf-8") as fh:
        _csv.writer(fh).writerows(rows)
    with pytest.raises(UmpipeError, match=f"line 4, column '{column}': expected {expected}"):
        load_leaderboard(bad)
    load_leaderboard(board / "leaderboard.csv")  # the file as written loads


def test_numpy_floats_are_written_as_plain_numbers():
    import numpy as np

    from umpipe_bench.bench.leaderboard import _cell_text

    assert _cell_text(np.float64(0.25)) == "0.25" and _cell_text(np.float64("nan")) == ""
