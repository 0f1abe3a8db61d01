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


def test_the_reference_speed_is_a_positive_time_per_plan(script):
    us = script.reference_speed()
    assert 0 < us < 1e6
