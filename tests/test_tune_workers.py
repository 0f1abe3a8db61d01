"""One tune study, two worker processes, one database: PostgreSQL (a server the test starts)
and SQLite. Every trial is kept once, the defaults are enqueued once, and the study can then be
judged and saved (docs/TUNE.md, "Several workers, one database")."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
import pytest

from umpipe_bench.bench.tune import TuneSpec, finish, open_study

ROOT = Path(__file__).resolve().parents[1]
SPEC = TuneSpec(planner="tidgap", train=("sim-s4-b16-s1",), heldout=("sim-s4-b16-s0",),
                modes=("recompute",), seeds=(0,), budget="evals:200")
TRIALS = 2  # per worker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres_url(tmp_path):
    """A throw-away PostgreSQL server (initdb + pg_ctl from PATH) and its URL; stopped after.

    PostgreSQL refuses to run as root, so under root the server runs as ``nobody``."""
    pytest.importorskip("psycopg", reason="the 'postgres' extra (psycopg) is not installed")
    # PATH first, then Debian's versioned server folder (initdb is not on PATH there)
    search = os.pathsep.join([os.environ.get("PATH", ""),
                              *sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)])
    initdb, pg_ctl = shutil.which("initdb", path=search), shutil.which("pg_ctl", path=search)
    if not initdb or not pg_ctl:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in "
                    "/usr/lib/postgresql/*/bin")
    home = Path(tempfile.mkdtemp(prefix="umpipe-pg-"))  # pytest's tmp_path is root-only
    data = home / "pgdata"
    user = None
    if os.geteuid() == 0:
        user = "nobody"
        shutil.chown(home, user)
    port = _free_port()
    run = {"user": user, "capture_output": True, "text": True, "timeout": 120}
    r = subprocess.run([initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E",
                        "UTF8"], **run)
    if r.returncode:
        shutil.rmtree(home, ignore_errors=True)
        pytest.skip(f"initdb could not create a cluster: {r.stderr.strip()[-300:]}")
    r = subprocess.run([pg_ctl, "-D", str(data), "-w", "-l", str(home / "pg.log"), "-o",
                        f"-p {port} -k {home} -h 127.0.0.1", "start"], **run)
    try:
        if r.returncode:
            pytest.skip(f"PostgreSQL did not start: {r.stderr.strip()[-300:]}")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], **run)
        shutil.rmtree(home, ignore_errors=True)


def _worker(storage: str, seed: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "umpipe_bench", "tune", "--storage", storage,
           "--study-name", "shared", "--seed", str(seed), "--trials", str(TRIALS),
           "--no-judge", "--no-progress", "--planner", SPEC.planner,
           "--train", *SPEC.train, "--heldout", *SPEC.heldout, "--modes", *SPEC.modes,
           "--seeds", *map(str, SPEC.seeds), "--budget", SPEC.budget]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _two_workers_one_study(storage: str, tmp_path: Path) -> None:
    procs = [_worker(storage, seed) for seed in (1, 2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    study = optuna.load_study(study_name="shared", storage=storage)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 2 * TRIALS
    assert sorted(t.number for t in trials) == list(range(2 * TRIALS))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert sum(bool(t.user_attrs.get("defaults")) for t in trials) == 1
    res = finish(open_study(SPEC, storage, "shared", seed=0), SPEC, storage,
                 tmp_path / "tuned.json")
    assert res.settings == study.best_trial.params
    assert set(res.heldout["tuned"]["per_problem"]) == set(SPEC.heldout)


@pytest.mark.slow
def test_two_workers_share_one_study_on_postgresql(postgres_url, tmp_path):
    _two_workers_one_study(postgres_url, tmp_path)


@pytest.mark.slow
def test_two_workers_share_one_study_on_sqlite(tmp_path):
    _two_workers_one_study(f"sqlite:///{tmp_path}/tuning.db", tmp_path)
