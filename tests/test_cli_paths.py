"""Paths the system refuses (too long, a file where a folder is wanted, missing folders) are one
line and exit code 2, naming the path; other OS errors keep their traceback."""

from __future__ import annotations

import errno

import pytest

from umpipe_bench import cli


def test_a_name_too_long_for_the_file_system(tmp_path, capsys):
    out = tmp_path / ("n" * 300)
    assert cli.main(["study", "--out", str(out), "--stages", "2", "--batches", "4", "--modes",
                     "stash", "--h", "0", "--seeds", "1", "--budget", "evals:30",
                     "--no-gantt", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "File name too long" in err and "nnnn" in err


def test_a_file_where_a_folder_is_wanted(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("keep\n")
    assert cli.main(["study", "--out", str(f), "--stages", "2", "--batches", "4", "--modes",
                     "stash", "--h", "0", "--seeds", "1", "--budget", "evals:30",
                     "--no-gantt", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(f) in err
    assert f.read_text() == "keep\n"


def test_other_os_errors_keep_their_traceback(monkeypatch):
    def boom(args):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr("umpipe_bench.cli.problems.run", boom)
    with pytest.raises(OSError):
        cli.main(["problems"])


@pytest.mark.parametrize("argv,option", [
    (["bench", "--config", ""], "--config"),  # was read as "no file": the default matrix ran
    (["plan", "--problem", "sim-s2-b8-s0", "--out", " "], "--out"),
    (["simulate", "--problem", "sim-s2-b8-s0", "--plan", "gpipe:2", "--gantt", ""], "--gantt"),
    (["report", "--in", ""], "--in"),
    (["best-known", "check", "--file", ""], "--file"),
    (["execute", "--problem", "gpt1-mini-s2", "--plan", "gpipe:2", "--csv", ""], "--csv"),
])
def test_an_empty_path_is_refused_by_the_parser(argv, option, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert f"argument {option}: expected a path, got an empty string" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
