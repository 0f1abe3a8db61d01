"""Nothing outlives its command: SIGTERM or SIGKILL the parent of
``bench --jobs 2`` or ``execute``, then read /proc: none of its descendants may remain.

Every wait is bounded; a failing test kills what it found, so it leaves nothing behind either.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

ROOT = Path(__file__).resolve().parents[1]

SLOW_MATRIX = """
[bench]
problems = ["sim-s2-b8-s0"]
seeds = [0, 1, 2, 3]
budgets = ["evals:50"]

[[planners]]
name = "tests.test_bench:EdpPlanner"
settings = { M = 2, delay = 120.0 }
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


def _children() -> dict[int, int]:
    """pid -> parent pid of every live process."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != b"Z":
                out[int(entry.name)] = int(fields[1])
    return out


def _descendants(root: int) -> set[int]:
    parents = _children()
    found, frontier = set(), {root}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def _wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _kill_and_check(proc: subprocess.Popen, sig: int, want: int, settle: float = 0.0) -> None:
    kids: set[int] = set()
    try:
        kids = _wait_for(lambda: d if len(d := _descendants(proc.pid)) >= want else None,
                         120, f"{want} child processes")
        time.sleep(settle)
        kids = _descendants(proc.pid) | kids
        proc.send_signal(sig)
        proc.wait(timeout=60)
        left = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            left = {k for k in kids if _alive(k)}
            if not left:
                break
            time.sleep(0.1)
        assert not left, f"processes left running after {signal.Signals(sig).name}: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        for k in kids:
            if _alive(k):
                try:
                    os.kill(k, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_bench_workers_die_with_the_bench(tmp_path, sig):
    (tmp_path / "m.toml").write_text(SLOW_MATRIX)
    proc = subprocess.Popen(
        [sys.executable, "-m", "umpipe_bench", "bench", "--config", str(tmp_path / "m.toml"),
         "--out", str(tmp_path / "out"), "--jobs", "2", "--no-progress"],
        cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _kill_and_check(proc, sig, want=2)
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM
        assert "SIGTERM" in proc.stderr.read().decode()


@pytest.mark.runtime
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_execute_processes_die_with_the_command(tmp_path, sig):
    pytest.importorskip("torch")
    from tests.test_runtime import tiny_problem

    ppath = tmp_path / "tiny.json"
    tiny_problem(ppath)
    proc = subprocess.Popen(
        [sys.executable, "-m", "umpipe_bench", "execute", "--problem", str(ppath), "--plan",
         "gpipe:2", "--no-peer", "--iters", "1", "--warmup", "0", "--timeout", "600",
         "--run-dir", str(tmp_path / "run")],
        cwd=tmp_path, env=_env(UMPIPE_FAULT="hang:1"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # torchrun and its two stage processes (its helper processes may add more)
    _kill_and_check(proc, sig, want=3, settle=2.0)
