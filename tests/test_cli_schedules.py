"""``umpipe-bench schedules`` and ``simulate --devices``: every row re-simulates to its T, the
named best is the fastest, bad input is one line and exit code 2."""

from __future__ import annotations

import dataclasses
import json

import pytest

from umpipe_bench.cli import main
from umpipe_bench.registry import get_problem


@pytest.fixture
def split_problem(tmp_path):
    """sim-s8-b16-s1 with split-backward costs: I = 60 %, W = 45 % of the full backward."""
    p = get_problem("sim-s8-b16-s1")
    stages = tuple(dataclasses.replace(
        st, ibwd=tuple(0.6 * x for x in st.bwd), ribwd=tuple(0.6 * x for x in st.rbwd),
        wbwd=tuple(0.45 * x for x in st.bwd)) for st in p.stages)
    path = tmp_path / "split.json"
    dataclasses.replace(p, stages=stages, name="split").save(path)
    return str(path)


def test_schedules_rows_resimulate_and_best_is_fastest(split_problem, capsys):
    assert main(["schedules", "--problem", split_problem, "-D", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["schedule"]: r for r in out["schedules"]}
    assert set(rows) == {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb1p", "zbv",
                         "dualpipev"}
    times = {}
    for name, r in rows.items():
        b = r["best"]
        assert b is not None, r
        assert sum(b["counts"]) == 8 and out["B"] % b["M"] == 0
        args = ["simulate", "--problem", split_problem, "-D", "2", "--plan",
                f"{name}:{b['M']}", "--partition", ",".join(map(str, b["counts"])), "--json"]
        if b["v"] not in (1, 2) or name in ("interleaved-1f1b", "looped-bfs", "zb1p"):
            args += ["--chunks", str(b["v"])]
        assert main(args) == 0
        sim = json.loads(capsys.readouterr().out)
        assert sim["iteration_time"] == b["T"]
        assert max(d["peak_memory_bytes"] for d in sim["devices"]) == b["max_peak_memory"]
        times[name] = b["T"]
    assert out["best"] == min(times, key=times.get)
    # the zero-bubble schedules beat 1F1B on the same costs when W is a large part of B
    assert times["zb1p"] <= times["1f1b"]


def test_schedules_without_split_costs_says_why(capsys):
    assert main(["schedules", "--problem", "sim-s8-b16-s1", "-D", "4", "--json",
                 "--schedules", "1f1b,zbv"]) == 0
    rows = json.loads(capsys.readouterr().out)["schedules"]
    assert rows[0]["best"] is not None
    assert rows[1]["best"] is None and "split-backward" in rows[1]["reason"]


def test_memory_cap_binds(capsys):
    args = ["schedules", "--problem", "sim-s8-b16-s1", "-D", "2", "--json", "--schedules", "1f1b"]
    assert main(args) == 0
    free = json.loads(capsys.readouterr().out)["schedules"][0]["best"]
    cap = int(free["max_peak_memory"] * 0.9)
    assert main([*args, "--memory-cap", str(cap)]) == 0
    capped = json.loads(capsys.readouterr().out)["schedules"][0]["best"]
    assert capped is not None and capped["max_peak_memory"] <= cap and capped["T"] > free["T"]


@pytest.mark.parametrize("argv,msg", [
    (["schedules", "--problem", "sim-s8-b16-s1", "-D", "9"], "--devices must be in 1..8"),
    (["schedules", "--problem", "sim-s8-b16-s1", "-D", "2", "--schedules", "zb3"],
     "unknown torch schedule 'zb3'"),
    (["simulate", "--problem", "sim-s8-b16-s1", "-D", "2", "--plan", "1f1b:3"],
     "M must divide B = 16"),
    (["simulate", "--problem", "sim-s8-b16-s1", "-D", "4", "--plan", "1f1b:2"],
     "needs M >= D = 4"),
    (["simulate", "--problem", "sim-s8-b16-s1", "-D", "2", "--plan", "zbv:4"],
     "no split-backward costs"),
    (["simulate", "--problem", "sim-s8-b16-s1", "-D", "2", "--plan", "1f1b:4",
      "--partition", "4,3"], "must cut the 8 layers"),
    (["simulate", "--problem", "sim-s8-b16-s1", "--plan", "1f1b:4", "--partition", "4,4"],
     "--partition needs --devices"),
])
def test_bad_input_is_one_line_and_exit_2(argv, msg, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0], err


def test_simulate_devices_events_are_torch_action_strings(capsys):
    assert main(["simulate", "--problem", "sim-s8-b16-s1", "-D", "2", "--plan",
                 "interleaved-1f1b:4", "--json", "--events"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["chunk_device"] == [0, 1, 0, 1] and out["partition"] == [2, 2, 2, 2]
    from umpipe_bench.torch_schedules import torch_orders

    assert out["device_ops"] == torch_orders("interleaved-1f1b", 2, 4, 2)


def test_simulate_devices_runs_a_chunk_plan_file(tmp_path, capsys):
    from umpipe_bench.chunk_schedule import chunk_order
    from umpipe_bench.chunkplan import ChunkPlan

    plan = ChunkPlan(D=2, layout="loop", layers=(4, 3, 4, 3), mode="recompute", split=True,
                     fwd=((4, 4, 8),) * 2 + ((8, 8),) * 2, bwd=((8, 8),) * 4,
                     wgt=((16,), (8, 8), (16,), (8, 8)), caps=(24, 16), w_caps=(0, 8),
                     group=8)
    path = tmp_path / "chunk.json"
    plan.save(path)
    argv = ["simulate", "--problem", "gpt1-14", "-D", "2", "--plan", str(path)]
    assert main([*argv, "--json", "--events"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["device_ops"] == chunk_order(plan).names() and out["plan"] == plan.to_dict()
    assert out["chunk_device"] == [0, 1, 0, 1] and out["iteration_time"] > 0
    base = ["simulate", "--problem", "gpt1-14", "--plan", str(path)]
    for extra, msg in ((["-D", "4"], "is for D = 2 devices"),
                       (["-D", "2", "--partition", "7,7"], "--partition does not apply")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], err
    path.write_text(json.dumps({**plan.to_dict(), "caps": [0, 1]}))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "field 'caps[0]'" in err[0], err
