"""Kill ``umpipe-bench bench`` mid-run: the leaderboard stays intact and a rerun completes it.

The bench runs as a real subprocess with a planner that sleeps a little per cell and logs each
call; the test waits until some rows are on disk, then kills it (SIGKILL: no clean-up at all;
SIGINT: the interrupt path).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from umpipe_bench.bench import COLUMNS, read_rows

pytestmark = pytest.mark.slow  # the fast tier (-m "not slow") leaves this module out

ROOT = Path(__file__).resolve().parents[1]

MATRIX = """
[bench]
name = "kill"
problems = ["sim-s4-b16-s0", "sim-s4-b16-s1"]
seeds = [0, 1, 2]
modes = ["stash", "recompute"]
budgets = ["evals:200"]

[[planners]]
name = "tests.test_bench:EdpPlanner"
label = "sleepy"
settings = { delay = 0.15 }
"""
N_CELLS = 12


def _bench(tmp: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "UMPIPE_TEST_PLAN_LOG": str(log)}
    return subprocess.Popen(
        [sys.executable, "-m", "umpipe_bench", "bench", "--config", str(tmp / "m.toml"),
         "--out", str(tmp / "out"), "--no-progress"],
        cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # a runner started in the background (CI, nohup) may hand SIGINT down ignored, and
        # Python then never raises KeyboardInterrupt: restore the default in the child
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _rows(tmp: Path) -> list[dict[str, str]]:
    return read_rows(tmp / "out" / "leaderboard.csv")


def _intact(rows: list[dict[str, str]]) -> None:
    for r in rows:
        assert None not in r, "a row has more fields than the header"
        assert all(r[c] is not None for c in COLUMNS), "a row is cut short"
        assert r["error"] == "" and float(r["T_pred"]) > 0 and r["timestamp"]
    assert len({(r["problem"], r["seed"], r["mode"]) for r in rows}) == len(rows)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_bench_resumes(tmp_path, sig):
    (tmp_path / "m.toml").write_text(MATRIX)
    log = tmp_path / "calls.log"
    proc = _bench(tmp_path, log)
    deadline = time.monotonic() + 60
    try:
        while len(_rows(tmp_path)) < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "bench wrote no rows in 60 s"
            time.sleep(0.02)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "interrupted" in err
    before = _rows(tmp_path)
    _intact(before)
    assert 3 <= len(before) < N_CELLS
    stamps = {(r["problem"], r["seed"], r["mode"]): r["timestamp"] for r in before}

    rerun = _bench(tmp_path, log)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    assert f"{len(before)} already done" in out
    after = _rows(tmp_path)
    _intact(after)
    assert len(after) == N_CELLS
    for r in after:  # finished cells were not redone
        key = (r["problem"], r["seed"], r["mode"])
        if key in stamps:
            assert r["timestamp"] == stamps[key]
    calls = log.read_text().splitlines()
    # every cell planned once, plus at most the one in flight when the kill came
    assert N_CELLS <= len(calls) <= N_CELLS + 1

    third = _bench(tmp_path, log)
    out, _ = third.communicate(timeout=120)
    assert third.returncode == 0 and "0 run" in out
    assert len(log.read_text().splitlines()) == len(calls)
