"""Output files (umpipe_bench/files.py): written whole through a rename, links followed, never
through a device, FIFO or socket, never over a CSV of other columns, nothing left behind."""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from umpipe_bench.cli import main
from umpipe_bench.errors import UmpipeError

ROOT = Path(__file__).resolve().parents[1]
PLAN = ["plan", "--problem", "sim-s2-b8-s0", "--planner", "gpipe", "--no-progress"]
SIMULATE = ["simulate", "--problem", "sim-s2-b8-s0", "--plan", "gpipe:2"]


def _one_line_error(capsys, rc: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@contextlib.contextmanager
def _guarded(path: str) -> Iterator[str]:
    """``path`` (a device or a link in /dev), put back as it was should a command replace it:
    a regression run as root would otherwise break it for everyone on the machine."""
    before = os.lstat(path)
    link = os.readlink(path) if stat.S_ISLNK(before.st_mode) else None
    try:
        yield path
    finally:
        after = os.lstat(path)
        if stat.S_IFMT(after.st_mode) != stat.S_IFMT(before.st_mode) and os.geteuid() == 0:
            os.unlink(path)
            if link is not None:
                os.symlink(link, path)
            else:
                os.mknod(path, stat.S_IFMT(before.st_mode) | 0o600, before.st_rdev)
                os.chmod(path, stat.S_IMODE(before.st_mode))
            pytest.fail(f"the command replaced {path} (restored)")


@pytest.fixture
def dev_full():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    with _guarded("/dev/full") as path:
        yield path


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- the command line ---------------------------------------------------------------------


@pytest.mark.parametrize("option", ["--gantt", "--trace"])
def test_simulate_refuses_a_device_and_leaves_it_a_device(capsys, dev_full, option):
    rc = main([*SIMULATE, option, dev_full])
    _one_line_error(capsys, rc, option, dev_full, "character device")
    assert stat.S_ISCHR(os.stat(dev_full).st_mode)


def test_plan_refuses_a_device_in_a_subprocess_before_planning(dev_full):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "umpipe_bench", *PLAN, "--out", dev_full],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.strip().count("\n") == 0 and f"--out {dev_full!r}" in r.stderr, r.stderr
    assert stat.S_ISCHR(os.stat(dev_full).st_mode)


@pytest.mark.parametrize("path", ["/dev/stdout", "/dev/fd/1"])
def test_a_file_descriptor_link_is_refused(capsys, path):
    """/dev/stdout leads (through /proc) to whatever fd 1 is, perhaps a log file that a rename
    would replace under the process writing it."""
    with _guarded("/dev/stdout"):
        rc = main([*SIMULATE, "--trace", path])
    _one_line_error(capsys, rc, "--trace", path, "/proc")


def test_plan_out_through_a_link_writes_the_target_and_keeps_the_link(tmp_path, capsys):
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to("real.json")
    assert main([*PLAN, "--out", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == "real.json"
    assert '"fwd"' in real.read_text()
    assert _files(tmp_path) == ["link.json", "real.json"]


def test_a_dangling_link_creates_its_target(tmp_path):
    from umpipe_bench.files import write_text

    link = tmp_path / "link.json"
    link.symlink_to("new.json")
    write_text(link, "x")
    assert link.is_symlink() and (tmp_path / "new.json").read_text() == "x"


def test_plan_refuses_a_fifo_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    rc = main([*PLAN, "--out", str(fifo)])
    _one_line_error(capsys, rc, "--out", str(fifo), "FIFO")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_socket_and_a_link_to_a_folder_are_refused(tmp_path, capsys):
    short = Path(tempfile.mkdtemp(prefix="ump"))  # a socket path must be short
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(short / "s"))
        try:
            rc = main([*SIMULATE, "--gantt", str(short / "s")])
            _one_line_error(capsys, rc, "--gantt", "socket")
        finally:
            sock.close()
    finally:
        shutil.rmtree(short)
    (tmp_path / "folder").mkdir()
    (tmp_path / "to-folder").symlink_to("folder")
    rc = main([*PLAN, "--out", str(tmp_path / "to-folder")])
    _one_line_error(capsys, rc, "--out", "is a folder", "link leads to")


def test_a_missing_folder_is_refused_and_not_made(tmp_path, capsys):
    rc = main([*PLAN, "--out", str(tmp_path / "no" / "plan.json")])
    _one_line_error(capsys, rc, "--out", "does not exist")
    assert _files(tmp_path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any folder")
def test_a_folder_that_cannot_be_written_is_refused(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        rc = main([*PLAN, "--out", str(ro / "plan.json")])
        _one_line_error(capsys, rc, "--out", "not writable")
    finally:
        ro.chmod(0o755)


def test_a_folder_that_cannot_be_written_is_refused_as_root_too(tmp_path, capsys,
                                                                monkeypatch):
    import umpipe_bench.files as files

    real = os.access
    monkeypatch.setattr(files.os, "access",
                        lambda p, m: False if Path(p) == tmp_path else real(p, m))
    rc = main([*PLAN, "--out", str(tmp_path / "plan.json")])
    _one_line_error(capsys, rc, "--out", "is not writable")
    assert _files(tmp_path) == []


# --- the helper ---------------------------------------------------------------------------


@pytest.mark.parametrize("exc", [KeyboardInterrupt, OSError(28, "No space left on device")])
def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path, exc):
    from umpipe_bench.files import atomic_output

    path = tmp_path / "out.png"
    path.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt if exc is KeyboardInterrupt else UmpipeError) as info:
        with atomic_output(path, "--gantt") as tmp:
            tmp.write_bytes(b"half")
            raise exc
    if exc is not KeyboardInterrupt:
        assert str(info.value) == f"--gantt {str(path)!r}: cannot write: No space left on device"
    assert path.read_bytes() == b"old" and _files(tmp_path) == ["out.png"]


def test_save_gantt_interrupted_leaves_nothing(tmp_path, monkeypatch):
    import matplotlib.figure

    from umpipe_bench.simulator import simulate
    from umpipe_bench.synthetic import synthetic_problem
    from umpipe_bench.trace import save_gantt

    p = synthetic_problem(2, 4, 0)
    from umpipe_bench.plan import Plan

    tl = simulate(p, Plan.edp(p.S, p.B, 2), "gpipe")

    def interrupted(self, fname, **kw):
        Path(fname).write_bytes(b"\x89PNG half")
        raise KeyboardInterrupt

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_gantt(tl, tmp_path / "g.png")
    assert _files(tmp_path) == []


def test_the_old_files_mode_is_kept(tmp_path):
    from umpipe_bench.files import write_text

    path = tmp_path / "p.json"
    path.write_text("old")
    path.chmod(0o640)
    write_text(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640


def test_output_target_names_the_option_registered_for_a_path(tmp_path):
    from umpipe_bench.files import named_output, output_target

    with named_output(tmp_path, "--out"), pytest.raises(UmpipeError, match=r"^--out '.*': is"):
        output_target(tmp_path)
    with pytest.raises(UmpipeError, match=r"^'.*': is a folder"):
        output_target(tmp_path)


# --- CSV files that rows are appended to --------------------------------------------------


def _lb(path: Path, n: int = 36) -> str:
    text = "problem,planner,T_pred\n" + "".join(f"p{i},tidgap,0.{i}\n" for i in range(n))
    path.write_text(text)
    return text


def test_write_csv_refuses_a_file_of_other_columns_and_leaves_it_whole(tmp_path):
    from umpipe_bench.runtime.report import write_csv

    lb = tmp_path / "leaderboard.csv"
    text = _lb(lb)
    with pytest.raises(UmpipeError, match=r"leaderboard.csv': .*column 2 \(the file has "
                                          r"'planner', expected 'plan'\)"):
        write_csv([{"problem": "x", "plan": "gpipe:2"}], lb)
    assert lb.read_text() == text and _files(tmp_path) == ["leaderboard.csv"]


def test_execute_csv_of_other_columns_is_refused_before_running(tmp_path, capsys):
    lb = tmp_path / "leaderboard.csv"
    text = _lb(lb)
    rc = main(["execute", "--problem", "sim-s2-b8-s0", "--plan", "gpipe:2", "--csv", str(lb)])
    _one_line_error(capsys, rc, "--csv", str(lb), "column 2", "'planner'", "'plan'")
    assert lb.read_text() == text


def test_write_csv_appends_under_the_same_header(tmp_path):
    from umpipe_bench.runtime.report import COLUMNS, write_csv

    path = tmp_path / "real.csv"
    write_csv([{"problem": "a", "plan": "gpipe:2"}], path)
    write_csv([{"problem": "b", "plan": "1f1b:2"}, {"problem": "c"}], path)
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == list(COLUMNS) and [r[0] for r in rows[1:]] == ["a", "b", "c"]


def test_append_csv_names_a_missing_column(tmp_path):
    from umpipe_bench.files import append_csv

    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2")
    with pytest.raises(UmpipeError, match=r"column 3 \(the file has nothing, expected 'c'\)"):
        append_csv(path, ["a", "b", "c"], "1,2,3\n")
    append_csv(path, ["a", "b"], "3,4\n")
    assert path.read_text() == "a,b\n1,2\n3,4\n"


# --- files that are read, merged and written back -----------------------------------------


def test_bench_leaderboard_that_is_a_fifo_is_refused_without_blocking(tmp_path, capsys):
    os.mkfifo(tmp_path / "leaderboard.csv")
    rc = main(["bench", "--out", str(tmp_path), "--limit", "1", "--no-progress"])
    _one_line_error(capsys, rc, "leaderboard.csv", "not a regular file")


def test_bench_follows_a_linked_leaderboard(tmp_path):
    from umpipe_bench.bench.leaderboard import Leaderboard

    (tmp_path / "kept").mkdir()
    (tmp_path / "leaderboard.csv").symlink_to("kept/board.csv")
    board = Leaderboard(tmp_path / "leaderboard.csv")
    board.add({"problem": "p", "planner": "x", "seed": 0, "mode": "stash", "budget": "evals:1",
               "settings_hash": "h"})
    assert (tmp_path / "leaderboard.csv").is_symlink()
    assert "evals:1" in (tmp_path / "kept" / "board.csv").read_text()


@pytest.mark.parametrize("content, needle", [("a,b\n1,2\n", "are not the study's"),
                                             (None, "not a regular file")])
def test_study_rows_of_other_columns_or_a_fifo_are_one_line(tmp_path, capsys, content, needle):
    rows = tmp_path / "heterogeneity.csv"
    if content is None:
        os.mkfifo(rows)
    else:
        rows.write_text(content)
    rc = main(["study", "--out", str(tmp_path), "--stages", "2", "--batches", "4", "--h", "0",
               "--seeds", "1", "--families", "knee", "--modes", "stash", "--no-progress",
               "--no-gantt"])
    _one_line_error(capsys, rc, "heterogeneity.csv", needle)
    if content is not None:
        assert rows.read_text() == content


def test_best_known_update_refuses_a_device_file_before_simulating(tmp_path, capsys, dev_full):
    lb = tmp_path / "leaderboard.csv"
    lb.write_text("problem\n")
    rc = main(["best-known", "update", "--from", str(lb), "--file", dev_full])
    _one_line_error(capsys, rc, "--file", dev_full)
    assert stat.S_ISCHR(os.stat(dev_full).st_mode)


@pytest.mark.parametrize("extra, needle", [
    (["--families", "nope"], "--families: unknown family 'nope'"),
    (["--h", "2"], "--h: every h must be in [0, 1]"),
    (["--stages", "0"], "--stages: every value must be >= 1, got 0"),
])
def test_study_grid_errors_are_one_line(capsys, extra, needle):
    _one_line_error(capsys, main(["study", *extra, "--list"]), needle)
