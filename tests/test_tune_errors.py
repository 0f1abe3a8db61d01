"""``umpipe-bench tune`` refuses bad counts and unusable storages in one line, before it creates
or changes anything, and a database server that does not answer fails within seconds."""

from __future__ import annotations

import hashlib
import socket
import sqlite3
import time
from pathlib import Path

import pytest

from umpipe_bench.cli import main

pytest.importorskip("optuna")

TUNE_FAST = ["--train", "sim-s2-b8-s0", "--heldout", "sim-s2-b8-s1", "--seeds", "0",
             "--modes", "stash", "--budget", "evals:40", "--no-progress"]


def _tune(tmp_path: Path, *extra: str) -> int:
    return main(["tune", *TUNE_FAST, "--save", str(tmp_path / "tuned.json"),
                 "--report", str(tmp_path / "tuning.md"), *extra])


def _one_line_error(capsys, rc: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _listing(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


@pytest.mark.parametrize("extra, needle", [
    (["--trials", "-1"], "--trials must be >= 0, got -1"),
    (["--trials", "0", "--no-judge"], "--trials 0 with --no-judge does nothing"),
    (["--trials", "2", "--timeout", "-1"], "--timeout must be a number of seconds > 0"),
    (["--trials", "2", "--timeout", "0"], "--timeout must be a number of seconds > 0"),
    (["--trials", "2", "--timeout", "nan"], "--timeout must be a number of seconds > 0"),
])
def test_bad_counts_are_refused_before_a_study_exists(tmp_path, capsys, extra, needle):
    rc = _tune(tmp_path, "--storage", f"sqlite:///{tmp_path / 't.db'}", *extra)
    _one_line_error(capsys, rc, needle)
    assert _listing(tmp_path) == {}


def test_trials_0_on_a_new_storage_creates_nothing(tmp_path, capsys):
    """--trials 0 judges an existing study; on a new file it made an empty study (and left the
    file and its lock behind), then failed with a traceback reading its best value."""
    rc = _tune(tmp_path, "--trials", "0", "--storage", f"sqlite:///{tmp_path / 't.db'}")
    _one_line_error(capsys, rc, "does not exist in sqlite:///", "--trials 0 only judges")
    assert _listing(tmp_path) == {}


def test_trials_0_judges_an_existing_study(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 't.db'}"
    assert _tune(tmp_path, "--trials", "1", "--no-judge", "--storage", url) == 0
    before = {k for k in _listing(tmp_path)}
    assert _tune(tmp_path, "--trials", "0", "--storage", url) == 0
    assert before | {"tuned.json", "tuning.md"} == set(_listing(tmp_path))
    assert "1 trials; best train score" in capsys.readouterr().out


def test_an_sqlite_url_to_a_file_that_is_not_a_database(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    before = _listing(tmp_path)
    rc = _tune(tmp_path, "--trials", "1", "--no-judge", "--storage", f"sqlite:///{notes}")
    _one_line_error(capsys, rc, "--storage", "notes.txt", "is not an SQLite database")
    assert _listing(tmp_path) == before  # no lock file, no change


def test_an_sqlite_database_of_something_else_is_left_alone(tmp_path, capsys):
    db = tmp_path / "data.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE measurements (x)")
    con.commit()
    con.close()
    before = _listing(tmp_path)
    rc = _tune(tmp_path, "--trials", "1", "--no-judge", "--storage", f"sqlite:///{db}")
    _one_line_error(capsys, rc, "--storage", "not an Optuna storage", "measurements")
    assert _listing(tmp_path) == before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_driver() -> str:
    for module, name in (("psycopg", "psycopg"), ("psycopg2", "psycopg2")):
        try:
            __import__(module)
            return name
        except ImportError:
            pass
    pytest.skip("no PostgreSQL driver installed")


def test_an_unreachable_postgresql_server_is_one_line_without_the_password(tmp_path, capsys):
    url = f"postgresql+{_pg_driver()}://u:secret@127.0.0.1:{_free_port()}/db"
    rc = _tune(tmp_path, "--trials", "1", "--storage", url)
    line = _one_line_error(capsys, rc, "--storage", "127.0.0.1", "cannot open the study's "
                           "database", "refused")
    assert "secret" not in line
    assert _listing(tmp_path) == {}


def test_a_server_that_never_answers_fails_within_the_connect_timeout(tmp_path, capsys,
                                                                      monkeypatch):
    import umpipe_bench.bench.storage as storage

    monkeypatch.setattr(storage, "CONNECT_TIMEOUT_S", 2)  # libpq's least
    with socket.socket() as silent:  # accepts connections (the kernel does), never speaks
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"postgresql+{_pg_driver()}://u:p@127.0.0.1:{silent.getsockname()[1]}/db"
        t0 = time.monotonic()
        rc = _tune(tmp_path, "--trials", "1", "--no-judge", "--storage", url)
        elapsed = time.monotonic() - t0
    _one_line_error(capsys, rc, "--storage", "timeout")
    assert elapsed < 30


def test_a_missing_driver_is_one_line(tmp_path, capsys):
    try:
        import psycopg2  # noqa: F401

        pytest.skip("psycopg2 is installed")
    except ImportError:
        pass
    rc = _tune(tmp_path, "--trials", "1", "--storage",
               "postgresql+psycopg2://u:p@127.0.0.1:1/db")
    _one_line_error(capsys, rc, "--storage", "driver 'psycopg2' is not installed")


def test_connect_args_bound_the_connection_time():
    from umpipe_bench.bench.storage import CONNECT_TIMEOUT_S, connect_args

    t = CONNECT_TIMEOUT_S
    assert connect_args("postgresql+psycopg2://u@h/db") == {"connect_timeout": t}
    assert connect_args("mysql+pymysql://u@h/db") == {"connect_timeout": t}
    assert connect_args("postgresql+pg8000://u@h/db") == {"timeout": t}
    assert connect_args("sqlite:///x.db") == {}
