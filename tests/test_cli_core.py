from __future__ import annotations

import json
import subprocess
import sys

import pytest

from umpipe_bench.cli import main


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "umpipe_bench", *args], capture_output=True,
                          text=True, timeout=120)


def test_simulate_json_and_pictures(tmp_path):
    gantt, trace = tmp_path / "g.png", tmp_path / "t.json"
    r = _cli("simulate", "--problem", "sim-s4-b16-s0", "--plan", "gpipe:4", "--json",
             "--gantt", str(gantt), "--trace", str(trace))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["schedule"] == "gpipe" and out["mode"] == "stash"
    assert out["iteration_time"] > 0 and len(out["stages"]) == 4
    assert gantt.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ev = json.loads(trace.read_text())["traceEvents"]
    assert sum(e.get("ph") == "X" and e["cat"] == "forward" for e in ev) == 16


def test_simulate_text_output_prints_T(capsys):
    assert main(["simulate", "--problem", "sim-s4-b16-s0", "--plan", "1f1b:4"]) == 0
    out = capsys.readouterr().out
    assert "iteration time T = " in out and "schedule 1f1b" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--problem", "nope", "--plan", "gpipe:4"], "unknown problem 'nope'"),
    (["--problem", "sim-s4-b16-s0", "--plan", "gpipe:99"], "M must be in 1..B=16"),
])
def test_simulate_bad_input_exits_2_with_message(capsys, args, message):
    assert main(["simulate", *args]) == 2
    assert message in capsys.readouterr().err


def test_problems_listing():
    r = _cli("problems", "--json")
    assert r.returncode == 0, r.stderr
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    assert rows["sim-s8-b64-s0"]["S"] == 8 and rows["sim-s8-b64-s0"]["B"] == 64
