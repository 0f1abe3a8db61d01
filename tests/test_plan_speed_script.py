"""``scripts/plan_speed.py table``: the machine's speed column is the median of the rows that
recorded it and ``-`` when none did; rows made on one machine keep their other cells."""

from __future__ import annotations

import argparse
import json

import pytest


@pytest.fixture(scope="module")
def script(script_module):
    return script_module("plan_speed")


def _row(label, seed, T, reference=None):
    row = {"label": label, "problem": "sim-s2-b8-s0", "mode": "stash", "seed": seed,
           "T": T, "evaluations": 100, "wall": 1.0, "timed": True,
           "history": [[10, 0.1, T * 1.1], [100, 1.0, T]]}
    if reference is not None:
        row["reference_us"] = reference
    return row


def test_the_table_gives_the_median_machine_speed_or_a_dash(script, tmp_path, capsys):
    from umpipe_bench.bench.best_known import BestKnown

    best = BestKnown().value("sim-s2-b8-s0", "stash", "capped")
    f = tmp_path / "runs.jsonl"
    rows = [_row("old", 0, best), _row("new", 0, best, 40.0), _row("new", 1, best, 52.0),
            _row("new", 2, best * 1.01, 50.0)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert script.table(argparse.Namespace(files=[str(f)])) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| sim-")]
    cells = {ln.split(" | ")[2]: ln.strip(" |").split(" | ") for ln in lines}
    assert cells["old"][-1] == "-"
    assert cells["new"][-1] == "50.0"  # the median of 40, 52 and 50
    assert cells["new"][-3] == "2/3"  # within 0.5 %: two of three
    assert len(cells["old"]) == len(cells["new"]) == 12
    assert script.table(argparse.Namespace(files=[str(f)], seeds="1-2")) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| sim-")]
    [only] = [ln.strip(" |").split(" | ") for ln in lines]
    assert only[2:4] == ["new", "2"] and only[-3] == "1/2"  # seeds 1 and 2 of "new" only


def test_the_reference_speed_is_a_positive_time_per_plan(script):
    us = script.reference_speed()
    assert 0 < us < 1e6


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return [str(path)]


def _cells(out, first):
    return [ln.strip(" |").split(" | ") for ln in out.splitlines() if ln.startswith(f"| {first}")]


def test_pairs_compares_the_two_labels_seed_by_seed(script, tmp_path, capsys):
    files = _write(tmp_path / "screen.jsonl", [
        _row("a", 0, 2.0), _row("b", 0, 1.9), _row("a", 1, 2.0), _row("b", 1, 2.1),
        _row("a", 2, 4.0), _row("b", 2, 3.0), _row("a", 3, 1.0)])  # seed 3: no pair
    args = argparse.Namespace(files=files, base="a", other="b", seeds=None)
    assert script.pairs(args) == 0
    out = capsys.readouterr().out
    [row] = _cells(out, "sim-")
    assert row[2:] == ["3", "2 of 3", "-25.00 %, -5.00 %, +5.00 %", "-5.00 %"]
    [total] = _cells(out, "all")
    assert total[1:] == ["stash", "3", "2 of 3", "-25.00 % to +5.00 %", "-5.00 %"]
    args.seeds = "0-1"
    assert script.pairs(args) == 0
    assert _cells(capsys.readouterr().out, "sim-")[0][3] == "1 of 2"


def test_pairs_refuses_two_runs_of_one_label_on_one_seed(script, tmp_path, capsys):
    files = _write(tmp_path / "twice.jsonl", [_row("a", 0, 2.0), _row("a", 0, 2.1),
                                              _row("b", 0, 1.9)])
    assert script.pairs(argparse.Namespace(files=files, base="a", other="b", seeds=None)) == 2
    err = capsys.readouterr().err
    assert "two runs of 'a'" in err and "seed 0" in err and len(err.splitlines()) == 1


def test_at_evaluations_reads_each_history_at_the_shortest_run(script, tmp_path, capsys):
    from umpipe_bench.bench.best_known import BestKnown

    best = BestKnown().value("sim-s2-b8-s0", "stash", "capped")
    short = _row("fast machine", 0, best * 1.01)  # 100 evaluations, ends 1 % above
    slow = _row("slow machine", 0, best)
    slow["history"] = [[50, 0.1, best * 1.04], [100, 0.2, best * 1.02], [1000, 2.0, best]]
    slow["evaluations"] = 1000
    late = _row("slow machine", 1, best)
    late["history"] = [[500, 1.0, best]]
    late["evaluations"] = 500
    files = _write(tmp_path / "runs.jsonl", [short, slow, late])
    args = argparse.Namespace(files=files, label=["fast machine", "slow machine"], seeds=None)
    assert script.at_evaluations(args) == 0
    rows = {r[2]: r for r in _cells(capsys.readouterr().out, "sim-")}
    assert rows["fast machine"][4:] == ["100 / 100 / 100", "100", "+1.00 % / +1.00 %"]
    # at 100 evaluations seed 0 was 2 % above; seed 1 had no record yet: not reached
    assert rows["slow machine"][4:] == ["500 / 750 / 1000", "100", "-"]
    args.seeds = "0"
    assert script.at_evaluations(args) == 0
    rows = {r[2]: r for r in _cells(capsys.readouterr().out, "sim-")}
    assert rows["slow machine"][-1] == "+2.00 % / +2.00 %"


@pytest.mark.parametrize("content, says", [
    (None, "No such file"),
    ("{bad\n", "line 2: not JSON"),
    ('{"label": "a"}\n', "line 2: expected a run with"),
])
def test_a_bad_run_file_gets_one_line_and_exit_2(script, tmp_path, capsys, monkeypatch,
                                                 content, says):
    f = tmp_path / "runs.jsonl"
    if content is not None:
        f.write_text(json.dumps(_row("a", 0, 1.0)) + "\n" + content)
    for argv in (["table", str(f)], ["pairs", str(f), "--base", "a", "--other", "b"],
                 ["at-evaluations", str(f), "--label", "a"],
                 ["best-of", str(f), "--label", "a"]):
        monkeypatch.setattr("sys.argv", ["plan_speed.py", *argv])
        assert script.main() == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and str(f) in err and says in err
        assert err.startswith(f"plan_speed.py {argv[0]}: ")


@pytest.mark.parametrize("cmd", [["table", "runs.jsonl"], ["run", "--label", "x", "--out", "o"],
                                 ["pairs", "runs.jsonl", "--base", "a", "--other", "b"]])
def test_bad_seeds_are_refused_before_anything_runs(script, capsys, monkeypatch, cmd):
    monkeypatch.setattr("sys.argv", ["plan_speed.py", *cmd, "--seeds", "0-x"])
    with pytest.raises(SystemExit) as e:
        script.main()
    assert e.value.code == 2
    assert "argument --seeds: seeds '0-x': expected e.g. 0-9 or 0,3,5" in capsys.readouterr().err


def test_labels_with_no_runs_get_one_line_and_exit_2(script, tmp_path, capsys):
    files = _write(tmp_path / "runs.jsonl", [_row("a", 0, 2.0)])
    assert script.pairs(argparse.Namespace(files=files, base="a", other="b", seeds=None)) == 2
    assert capsys.readouterr().err == ("plan_speed.py pairs: no seed has runs of both 'a' and "
                                       "'b'\n")
    args = argparse.Namespace(files=files, label=["x", "y"], seeds=None)
    assert script.at_evaluations(args) == 2
    assert capsys.readouterr().err == "plan_speed.py at-evaluations: no runs labelled 'x' or 'y'\n"


def test_best_of_takes_the_better_run_of_each_pair_side_by_side(script, tmp_path, capsys):
    from umpipe_bench.bench.best_known import BestKnown

    best = BestKnown().value("sim-s2-b8-s0", "stash", "capped")

    def run(seed, history, wall):
        r = _row("side", seed, history[-1][2])
        r.update(history=history, wall=wall, evaluations=history[-1][0])
        return r

    files = _write(tmp_path / "runs.jsonl", [
        # pair 0 + 10: seed 10 reaches 0.5 % first (2 s against 5 s), seed 0 ends lower
        run(0, [[10, 1.0, best * 1.02], [50, 5.0, best * 1.004], [90, 9.0, best]], 9.5),
        run(10, [[10, 2.0, best * 1.003], [40, 8.0, best * 1.002]], 10.0),
        # pair 1 + 11: neither within 0.5 %; the pair ends 1 % above
        run(1, [[10, 1.0, best * 1.03], [40, 4.0, best * 1.01]], 6.0),
        run(11, [[10, 1.0, best * 1.02]], 7.0),
        run(2, [[10, 1.0, best]], 1.0),  # no seed 12 beside it: left out
    ])
    args = argparse.Namespace(files=files, label="side", offset=10, seeds=None)
    assert script.best_of(args) == 0
    [row] = _cells(capsys.readouterr().out, "sim-")
    assert row[2:] == ["side, best of a pair", "2 (0+10, 1+11)", "- / -", "- / -",
                       "+0.50 % / +1.00 %", "1/2", "8.5 / 10.0", "-"]
    args.seeds = "0"
    assert script.best_of(args) == 0
    [row] = _cells(capsys.readouterr().out, "sim-")
    assert row[3:7] == ["1 (0+10)", "2.0 / 2.0", "9.0 / 9.0", "+0.00 % / +0.00 %"]
    args.offset = 5
    assert script.best_of(args) == 2
    assert capsys.readouterr().err == ("plan_speed.py best-of: no run of 'side' has one at "
                                       "seed + 5 beside it\n")


@pytest.mark.parametrize("offset", ["0", "-3", "x"])
def test_best_of_refuses_an_offset_below_one(script, capsys, monkeypatch, offset):
    monkeypatch.setattr("sys.argv", ["plan_speed.py", "best-of", "runs.jsonl", "--label", "a",
                                     "--offset", offset])
    with pytest.raises(SystemExit) as e:
        script.main()
    assert e.value.code == 2
    assert f"argument --offset: expected an integer >= 1, got '{offset}'" in \
        capsys.readouterr().err


def test_searches_counts_the_search_that_gave_each_plan(script, tmp_path, capsys):
    from umpipe_bench.bench.best_known import BestKnown

    best = BestKnown().value("sim-s2-b8-s0", "stash", "capped")

    def sbs(seed, times, coarse_T, evals):
        row = _row("two", seed, min(times))
        row.update(search_T=times, search_coarse_T=[None, coarse_T],
                   search_evaluations=[evals, 50], search_coarse=[False, True])
        return row

    rows = [sbs(0, [best * 1.02, best], best * 1.03, 80),  # search 1 gave the plan
            sbs(1, [best, best], best * 1.05, 50),  # a tie: the first search's
            sbs(2, [best * 1.01, best * 1.04], best * 1.04, 200),
            {**_row("one", 0, best), "evaluations": 100},
            {**_row("one", 2, best), "evaluations": 100}, _row("one", 1, best)]
    files = _write(tmp_path / "runs.jsonl", rows)
    ns = argparse.Namespace(files=files, seeds=None, label=None, against="one")
    assert script.searches(ns) == 0
    [cells] = _cells(capsys.readouterr().out, "sim-s2-b8-s0")
    assert cells[2:5] == ["two", "3", "2 / 1"]
    assert cells[5] == "0: +1.00 % / +2.00 %; 1: +0.00 % / +4.00 %"
    assert cells[6] == "1: +4.00 % / +5.00 %"
    assert cells[7] == "0.50 / 0.80 / 2.00"  # search 0's evaluations over the one run's
    assert script.searches(argparse.Namespace(files=files, seeds=None, label=["one"],
                                              against=None)) == 2
    assert "no runs of searches side by side" in capsys.readouterr().err


def test_searches_takes_runs_of_two_and_three_searches_in_one_group(script, tmp_path, capsys):
    from umpipe_bench.bench.best_known import BestKnown

    best = BestKnown().value("sim-s2-b8-s0", "stash", "capped")
    two = {**_row("mix", 0, best), "search_T": [best, best * 1.02],
           "search_coarse_T": [None, best * 1.03], "search_evaluations": [10, 10]}
    three = {**_row("mix", 1, best * 1.01), "search_T": [best * 1.03, best * 1.02, best * 1.01],
             "search_coarse_T": [None, best * 1.05, best * 1.06],
             "search_evaluations": [10, 10, 10]}
    files = _write(tmp_path / "runs.jsonl", [two, three])
    assert script.searches(argparse.Namespace(files=files, seeds=None, label=None,
                                              against=None)) == 0
    [cells] = _cells(capsys.readouterr().out, "sim-s2-b8-s0")
    assert cells[4] == "1 / 0 / 1"
    assert cells[5] == ("0: +1.50 % / +3.00 %; 1: +2.00 % / +2.00 %; "
                        "2: +1.00 % / +1.00 %")
    assert cells[6] == "1: +4.00 % / +5.00 %; 2: +6.00 % / +6.00 %"
