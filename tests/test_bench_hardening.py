"""Bench failures a new user can meet: stale resume keys, lost rows under concurrent
writers, exit status with failed cells, leaderboards that cannot be read whole.

Planners are the test doubles of :mod:`tests.test_bench` or the real ``tidgap-tuned`` on the
tiny ``sim-s2-b8`` problem (milliseconds per cell).
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from umpipe_bench.bench import parse_config, read_rows, run_matrix
from umpipe_bench.bench.leaderboard import COLUMNS, Leaderboard
from umpipe_bench.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _tuned_file(path: Path, population: int) -> Path:
    src = json.loads((ROOT / "umpipe_bench/data/tuned-tidgap.json").read_text())
    src["settings"]["population"] = population
    path.write_text(json.dumps(src))
    return path


def test_resume_key_follows_the_installed_tuned_settings(tmp_path, monkeypatch):
    import umpipe_bench.planners.algorithms.tuned as tuned

    target = _tuned_file(tmp_path / "tuned-tidgap.json", 12)
    monkeypatch.setattr(tuned, "tuned_path", lambda base: target)
    cfg = parse_config({
        "bench": {"problems": ["sim-s2-b8-s0"], "seeds": [0], "budgets": ["evals:60"]},
        "planners": [{"name": "tidgap-tuned"}, {"name": "tests.test_bench:EdpPlanner"}],
    })
    first = run_matrix(cfg, tmp_path / "out", progress=False)
    assert (first.ran, first.errors) == (2, 0)
    again = run_matrix(cfg, tmp_path / "out", progress=False)
    assert again.ran == 0  # nothing changed: nothing reruns

    _tuned_file(target, 14)  # what `tune --install` does
    after = run_matrix(cfg, tmp_path / "out", progress=False)
    assert (after.ran, after.skipped) == (1, 1)  # only the tuned planner's cell reruns
    rows = read_rows(tmp_path / "out" / "leaderboard.csv")
    tuned_rows = [r for r in rows if r["planner"] == "tidgap-tuned"]
    assert [r["param_population"] for r in tuned_rows] == ["12", "14"]


def _writer(path: str, tag: str, n: int) -> None:
    board = Leaderboard(path)
    for i in range(n):
        board.add({"problem": "p", "planner": tag, "seed": i, "mode": "stash",
                   "budget": "evals:1", "settings_hash": "h", "T_pred": 1.0, "error": ""})


def test_concurrent_writers_lose_no_rows(tmp_path):
    path = str(tmp_path / "leaderboard.csv")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, tag, 40)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    rows = read_rows(path)
    assert len(rows) == 80
    assert {(r["planner"], r["seed"]) for r in rows} == {
        (t, str(i)) for t in ("a", "b") for i in range(40)}




def _write_toml(path: Path, body: str) -> Path:
    path.write_text(body)
    return path


FAILING = """
[bench]
problems = ["sim-s2-b8-s0"]
seeds = [0]
budgets = ["evals:50"]

[[planners]]
name = "tests.test_bench:EdpPlanner"
settings = { M = 2 }

[[planners]]
name = "tests.test_bench:EdpPlanner"
label = "too-big"
settings = { M = 99 }
"""


def test_bench_exits_nonzero_and_counts_failed_cells(tmp_path, capsys):
    cfg = _write_toml(tmp_path / "m.toml", FAILING)
    argv = ["bench", "--config", str(cfg), "--out", str(tmp_path / "o"), "--no-progress"]
    assert main(argv) == 1
    assert "1 of 2 cells failed" in capsys.readouterr().err
    assert main(argv) == 1  # the kept error row still counts on a resumed run
    assert "1 of 2 cells failed" in capsys.readouterr().err


def _board_with_rows(path: Path) -> str:
    Leaderboard(path).add({"problem": "p", "planner": "x", "seed": 0, "mode": "stash",
                           "budget": "evals:1", "settings_hash": "h", "error": ""})
    return path.read_text()


def test_truncated_row_is_refused_and_the_file_kept(tmp_path, capsys):
    from umpipe_bench.errors import UmpipeError

    path = tmp_path / "o" / "leaderboard.csv"
    text = _board_with_rows(path)
    cut = text + "q,1,2\n"
    path.write_text(cut)
    with pytest.raises(UmpipeError, match="line 3: 3 of"):
        Leaderboard(path)
    cfg = _write_toml(tmp_path / "m.toml", FAILING)
    rc = main(["bench", "--config", str(cfg), "--out", str(tmp_path / "o"), "--no-progress"])
    assert rc == 2
    assert "line 3" in capsys.readouterr().err
    assert path.read_text() == cut  # not overwritten


def test_unparsable_leaderboard_is_not_overwritten(tmp_path, capsys):
    path = tmp_path / "o" / "leaderboard.csv"
    path.parent.mkdir()
    path.write_bytes(b"\xff\xfe garbage\n")
    cfg = _write_toml(tmp_path / "m.toml", FAILING)
    rc = main(["bench", "--config", str(cfg), "--out", str(tmp_path / "o"), "--no-progress"])
    assert rc == 2
    assert "leaderboard.csv" in capsys.readouterr().err
    assert path.read_bytes() == b"\xff\xfe garbage\n"


def test_scan_rows_names_every_malformed_line(tmp_path):
    from umpipe_bench.bench.leaderboard import LeaderboardError, scan_rows
    from umpipe_bench.errors import UmpipeError

    path = tmp_path / "lb.csv"
    text = _board_with_rows(path)
    path.write_text(text + "a,b\n" + text.splitlines()[1] + ",extra\n")
    rows, bad = scan_rows(path)
    assert len(rows) == 1
    assert [b.split(": ")[1] for b in bad] == ["line 3", "line 4"]
    assert issubclass(LeaderboardError, UmpipeError)
    assert len(COLUMNS) > 10


def test_bench_out_that_is_a_file_is_one_line(tmp_path, capsys):
    cfg = _write_toml(tmp_path / "m.toml", FAILING)
    (tmp_path / "f").write_text("x")
    rc = main(["bench", "--config", str(cfg), "--out", str(tmp_path / "f"), "--no-progress"])
    assert rc == 2
    assert "--out" in capsys.readouterr().err


SHARDED = """
[bench]
problems = ["sim-s2-b8-s0", "sim-s2-b8-s1"]
seeds = [0, 1, 2, 3]
budgets = ["evals:50"]

[[planners]]
name = "tests.test_bench:EdpPlanner"
settings = { M = 2, delay = 0.05 }
"""


def _shard(cfg: str, out: str, i: int) -> None:
    from umpipe_bench.bench import load_config

    run_matrix(load_config(cfg), out, shard=(i, 2), progress=False)


def test_two_shards_into_one_folder_give_all_rows(tmp_path):
    cfg = str(_write_toml(tmp_path / "m.toml", SHARDED))
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_shard, args=(cfg, str(tmp_path / "o"), i)) for i in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    rows = read_rows(tmp_path / "o" / "leaderboard.csv")
    assert len(rows) == 8 and all(r["error"] == "" for r in rows)
