"""Budgets and signals on the command line: a time budget too small for the seeding says so
and still writes a plan; SIGINT and SIGTERM end a command with its best result saved, exit
130 / 143, and leave no process behind.

Nothing here measures how fast: every wait is bounded only so that a command that waits for
its work to finish (a point of a minute, a search of five) fails instead of hanging.
scripts/budgets_signals.py measures the latencies (results/perf/budgets-signals.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from umpipe_bench.cli import main
from umpipe_bench.plan import Plan
from umpipe_bench.registry import get_problem
from umpipe_bench.simulator import simulate

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

ROOT = Path(__file__).resolve().parents[1]
#: Seeding alone takes seconds here (EDP scans of 1024 plans, greedy-dp, the descent).
BIG = "sim-s64-b1024-s0"


def test_plan_says_in_one_line_that_seeding_did_not_finish(tmp_path, capsys):
    out = tmp_path / "p.json"
    rc = main(["plan", "--problem", BIG, "--budget", "secs:0.001", "--out", str(out),
               "--json", "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 0
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "ended during seeding" in err[0]
    row = json.loads(captured.out)
    problem = get_problem(BIG)
    plan = Plan.load(out).check_problem(problem)
    assert row["iteration_time"] == simulate(problem, plan, row["schedule"]).iteration_time
    assert row["stopped"] == err[0].split(": ", 1)[1]
    assert set(row["edp_scanned"]) <= {"gpipe", "1f1b"} and row["edp_scanned"]


def _session(sid: int) -> list[int]:
    """Live processes of session ``sid`` (the command and everything it started)."""
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != b"Z" and int(fields[4]) == sid:
            out.append(int(e))
    return out


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "umpipe_bench", *args], cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        # a runner started in the background may hand SIGINT down ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _signal_and_wait(proc: subprocess.Popen, sig: int, wait: float) -> str:
    try:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=wait)
        deadline = time.monotonic() + 10  # a child the kernel is still reaping
        while _session(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _session(proc.pid) == [], "processes left behind"
        return err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_ends_plan_with_the_best_plan_so_far_written(tmp_path, sig):
    out = tmp_path / "p.json"
    proc = _start(["plan", "--problem", BIG, "--budget", "secs:300", "--out", str(out),
                   "--no-progress"], tmp_path)
    time.sleep(6)  # well into the run (its seeding takes longer), far from its end
    err = _signal_and_wait(proc, sig, wait=60)
    assert proc.returncode == 128 + sig
    assert "Traceback" not in err
    name = signal.Signals(sig).name
    plan = Plan.load(out).check_problem(get_problem(BIG))
    assert plan.meta["interrupted"] == name
    T = simulate(get_problem(BIG), plan, plan.meta["schedule"]).iteration_time
    assert T == plan.meta["predicted_time"]

@pytest.mark.slow
def test_a_signal_stops_the_study_workers_at_once(tmp_path):
    """``study --jobs 2``: a point of ten million evaluations takes minutes; SIGTERM must
    kill the workers, not wait for their points."""
    proc = _start(["study", "--stages", "32", "--batches", "256", "--modes", "stash",
                   "--h", "0,1", "--seeds", "1", "--budget", "evals:10000000", "--jobs", "2",
                   "--out", str(tmp_path / "st"), "--no-progress", "--no-gantt"], tmp_path)
    time.sleep(6)  # both workers are in their points
    err = _signal_and_wait(proc, signal.SIGTERM, wait=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "Traceback" not in err and "SIGTERM" in err
