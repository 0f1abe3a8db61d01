"""bench on dask workers gives the leaderboard --jobs 1 gives (same rows, same plans)."""

from __future__ import annotations

import json

import pytest

from umpipe_bench.bench.config import parse_config
from umpipe_bench.bench.leaderboard import read_rows
from umpipe_bench.bench.runner import run_matrix
from umpipe_bench.cli import main

distributed = pytest.importorskip("distributed", reason="the 'dask' extra is not installed")

MATRIX = {"bench": {"name": "t", "problems": ["sim-s3-b6-s0", "sim-s4-b16-s0"],
                    "seeds": [0, 1], "modes": ["stash", "recompute"],
                    "budgets": ["evals:300"]},
          "planners": [{"name": "gpipe", "seeds": [0]}, {"name": "random-search"},
                       {"name": "tidgap"}]}
SAME = ("problem", "planner", "seed", "mode", "budget", "settings_hash", "schedule",
        "plan_kind", "caps", "T_pred", "T_start", "evaluations", "T_best_edp",
        "speedup_vs_best_edp", "plan_file", "history_file", "error")


def _rows(folder):
    return {tuple(r[c] for c in ("problem", "planner", "seed", "mode")): r
            for r in read_rows(folder / "leaderboard.csv")}


def _same(a, b):
    ra, rb = _rows(a), _rows(b)
    assert set(ra) == set(rb) and len(ra) == 20  # gpipe 2x2, random and tidgap 2x2x2 each
    for k in ra:
        assert {c: ra[k][c] for c in SAME} == {c: rb[k][c] for c in SAME}, k
        assert ra[k]["error"] == ""
        assert (a / ra[k]["plan_file"]).read_text() == (b / rb[k]["plan_file"]).read_text()
        ha, hb = (json.loads((f / ra[k]["history_file"]).read_text()) for f in (a, b))
        assert [r.get("best") for r in ha["records"]] == [r.get("best") for r in hb["records"]]


@pytest.mark.slow
def test_dask_local_cluster_and_scheduler_address_match_one_job(tmp_path):
    cfg = parse_config(MATRIX, "t.toml")
    run_matrix(cfg, tmp_path / "one", jobs=1, progress=False)
    run_matrix(cfg, tmp_path / "dask", jobs=2, executor="dask", progress=False)
    _same(tmp_path / "one", tmp_path / "dask")

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    try:
        (tmp_path / "m.toml").write_text(_toml(MATRIX))
        assert main(["bench", "--config", str(tmp_path / "m.toml"), "--out",
                     str(tmp_path / "sched"), "--scheduler", cluster.scheduler_address,
                     "--no-progress"]) == 0
    finally:
        cluster.close()
    _same(tmp_path / "one", tmp_path / "sched")
    # a rerun finds every cell done: nothing is run twice, no row is added
    assert main(["bench", "--config", str(tmp_path / "m.toml"), "--out", str(tmp_path / "one"),
                 "--executor", "dask", "--jobs", "2", "--no-progress"]) == 0
    assert len(read_rows(tmp_path / "one" / "leaderboard.csv")) == 20


def test_scheduler_without_dask_executor_and_unreachable_scheduler_are_one_line(
        tmp_path, capsys, monkeypatch):
    from umpipe_bench.bench import executors

    monkeypatch.setattr(executors, "CONNECT_TIMEOUT", "1s")
    cfg = parse_config(MATRIX, "t.toml")
    from umpipe_bench.errors import UserInputError

    with pytest.raises(UserInputError, match="--scheduler needs --executor dask"):
        run_matrix(cfg, tmp_path, scheduler="tcp://127.0.0.1:1", progress=False)
    (tmp_path / "m.toml").write_text(_toml(MATRIX))
    assert main(["bench", "--config", str(tmp_path / "m.toml"), "--out", str(tmp_path / "o"),
                 "--scheduler", "tcp://127.0.0.1:9", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach a dask scheduler" in err[0]


def _toml(m):
    b = m["bench"]
    lines = ["[bench]", f'name = "{b["name"]}"',
             "problems = [" + ", ".join(f'"{p}"' for p in b["problems"]) + "]",
             f"seeds = {b['seeds']}",
             "modes = [" + ", ".join(f'"{x}"' for x in b["modes"]) + "]",
             "budgets = [" + ", ".join(f'"{x}"' for x in b["budgets"]) + "]"]
    for p in m["planners"]:
        lines += ["", "[[planners]]", f'name = "{p["name"]}"']
        if "seeds" in p:
            lines.append(f"seeds = {p['seeds']}")
    return "\n".join(lines) + "\n"


def test_a_dask_run_left_early_kills_its_local_workers_at_once(monkeypatch, tmp_path):
    """The consumer of the results closing the generator (a signal while it writes a row)
    kills the local cluster's workers instead of letting its close give each 4 s."""
    pytest.importorskip("distributed")
    import distributed

    from umpipe_bench.bench import executors

    class Future:
        def result(self):
            return {"row": 1}, {}

    class Client:
        def submit(self, *a, **k):
            return Future()

        def cancel(self, fs):
            pass

        def close(self):
            pass

    killed, closed = [], []
    cluster = type("Cluster", (), {"close": lambda self: closed.append(1)})()
    monkeypatch.setattr(executors, "_client", lambda scheduler, jobs: (Client(), cluster))
    monkeypatch.setattr(executors, "_kill_workers", lambda c: killed.append(c))
    monkeypatch.setattr(distributed, "as_completed", lambda fs: iter(fs))
    cells = [type("Cell", (), {"slug": f"c{i}"})() for i in range(3)]
    gen = executors.dask_results(cells, tmp_path, 2, None, lambda c, p: None)
    next(gen)
    gen.close()  # what a KeyboardInterrupt in the caller's loop does to the generator
    assert killed == [cluster] and closed == [1]
    killed.clear()
    assert len(list(executors.dask_results(cells, tmp_path, 2, None, lambda c, p: None))) == 3
    assert killed == []  # a run that finished closes its cluster gently
