"""Number options are range-checked by argparse: a bad value is exit code 2 and a message naming
the option and the accepted range, before any work starts (no traceback, no output written)."""

from __future__ import annotations

import pytest

from umpipe_bench import cli
from umpipe_bench.cli._numbers import seconds, whole


@pytest.mark.parametrize("argv,option", [
    (["bench", "--jobs", "99999999999999999999999"], "--jobs"),
    (["bench", "--limit", "-1"], "--limit"),
    (["study", "--jobs", "99999999999999999999999"], "--jobs"),
    (["study", "--seeds", "0x10"], "--seeds"),
    (["simulate", "--problem", "sim-s3-b6-s0", "--plan", "1f1b:4", "--devices", "1e400"],
     "--devices"),
    (["schedules", "--problem", "sim-s3-b6-s0", "--devices", "2", "--op-overhead", "nan"],
     "--op-overhead"),
    (["schedules", "--problem", "sim-s3-b6-s0", "--devices", "2", "--chunks", "0"], "--chunks"),
    (["execute", "--problem", "gpt1-mini-s2", "--plan", "gpipe:2", "--iters", "0"], "--iters"),
    (["execute", "--problem", "gpt1-mini-s2", "--plan", "gpipe:2", "--deadline", "inf"],
     "--deadline"),
    (["profile", "gpt1-mini", "--batch", "-3"], "--batch"),
    (["profile", "tiny-mlp", "-B", "4", "--repeats", "0"], "--repeats"),
])
def test_bad_numbers_are_refused_by_the_parser(argv, option, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err and "expected" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_whole_and_seconds_by_construction():
    w = whole(0, 10)
    assert [w(t) for t in ("0", "10", " 7 ", "+3")] == [0, 10, 7, 3]
    for bad in ("-1", "11", "1.5", "1e3", "0x10", "", "nan", "seven"):
        with pytest.raises(Exception, match="expected an integer in"):
            w(bad)
    s = seconds(0.0, open_low=True)
    assert s("0.25") == 0.25 and seconds()("0") == 0.0
    for bad in ("0", "-1", "nan", "inf", "-inf", "abc", ""):
        with pytest.raises(Exception, match="expected a finite number of seconds"):
            s(bad)
