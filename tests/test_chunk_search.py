"""The chunk-plan planner (umpipe_bench/planners/algorithms/chunk_search.py) and ``plan
--devices``: never slower than the best torch schedule the chunk rule reproduces, its T is the
Python path's, the same seed and evaluation budget give the same plan, the plan file
re-simulates to the same T through ``simulate --devices``, bad input is one line and exit 2,
and on tiny problems it finds the optimum of a whole enumerated space."""

from __future__ import annotations

import dataclasses
import itertools
import json
import signal
from pathlib import Path

import numpy as np
import pytest

from umpipe_bench.chunk_codec import ChunkGenomes, ChunkSpace
from umpipe_bench.chunk_torch import random_split_problem, simulate_plan, torch_plan
from umpipe_bench.chunkplan import ChunkPlan
from umpipe_bench.cli import main
from umpipe_bench.errors import Terminated
from umpipe_bench.planners.algorithms.chunk_search import (
    ChunkSearch,
    layout_options,
    work_balanced_counts,
)
from umpipe_bench.planners.evaluation.chunk_objective import ChunkObjective
from umpipe_bench.planners.search.base import PlannerError
from umpipe_bench.registry import get_problem
from umpipe_bench.synthetic import synthetic_problem


def _check(problem, res, D):
    """The result's T is the Python path's, and no reproduced torch schedule is faster."""
    tl = simulate_plan(problem, res.plan)
    assert tl.iteration_time == res.iteration_time
    assert res.plan.D == D and sum(res.plan.layers) == problem.S
    exact = res.best_torch(exact_only=True)
    assert exact is not None and exact.T is not None
    assert res.iteration_time <= exact.T, (res.iteration_time, exact)
    if res.memory_cap is not None:
        assert max(tl.peak_memory) <= res.memory_cap


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_never_slower_than_the_best_reproduced_torch_schedule_random_split(seed):
    problem = random_split_problem(8, 8, seed)
    res = ChunkSearch().plan(problem, 2, mode=("stash", "recompute")[seed % 2],
                             budget="evals:3000", seed=seed)
    _check(problem, res, 2)
    assert res.evaluations <= 3000


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt1-14", "vgg16"])
def test_never_slower_than_the_best_reproduced_torch_schedule_profiles(name):
    problem = get_problem(name)
    res = ChunkSearch().plan(problem, 4, budget="evals:4000", seed=0)
    _check(problem, res, 4)


def test_a_memory_cap_binds_the_plan_and_the_baselines():
    problem = random_split_problem(8, 8, 3)
    free = ChunkSearch().plan(problem, 2, budget="evals:2000", seed=0)
    cap = 0.9 * max(free.peak_memory)
    res = ChunkSearch().plan(problem, 2, budget="evals:2000", seed=0, memory_cap=cap)
    _check(problem, res, 2)
    assert res.memory_cap == cap
    for b in res.baselines:
        if b.T is not None:
            plan_T = {x.schedule: x.T for x in free.baselines}[b.schedule]
            assert b.T >= plan_T  # a cap never makes a schedule faster


def test_same_seed_and_evaluation_budget_same_plan():
    problem = random_split_problem(6, 8, 5)
    runs = [ChunkSearch().plan(problem, 2, mode="recompute", budget="evals:2500", seed=7)
            for _ in range(2)]
    assert runs[0].plan == runs[1].plan and runs[0].plan.to_dict() == runs[1].plan.to_dict()
    assert runs[0].iteration_time == runs[1].iteration_time
    assert runs[0].evaluations == runs[1].evaluations
    assert [dict(r) for r in runs[0].history][-1]["evaluations"] == runs[0].evaluations


def test_a_time_budget_stops_the_search():
    problem = random_split_problem(8, 8, 1)
    res = ChunkSearch().plan(problem, 2, budget="secs:1", seed=0)
    _check(problem, res, 2)
    assert res.evaluations > 0


def test_budgets_and_settings_are_checked():
    problem = random_split_problem(8, 8, 1)
    with pytest.raises(PlannerError, match="too small"):
        ChunkSearch().plan(problem, 2, budget="evals:5", seed=0)
    with pytest.raises(PlannerError, match="split=yes needs split-backward costs"):
        ChunkSearch(split="yes").plan(get_problem("sim-s8-b16-s1"), 2, budget="evals:1000")
    with pytest.raises(PlannerError, match="layouts must be"):
        ChunkSearch(layouts="one,ring")
    with pytest.raises(PlannerError, match="devices D must be in 1..8"):
        ChunkSearch().plan(problem, 9, budget="evals:1000")
    with pytest.raises(PlannerError, match="elites"):
        ChunkSearch(population=4, elites=4)


def test_layouts_and_partitions():
    assert layout_options(14, 4) == [("one", 1), ("loop", 2), ("loop", 3), ("v", 2)]
    assert layout_options(3, 2) == [("one", 1)]
    assert layout_options(16, 2, ("loop",)) == [("loop", 2), ("loop", 3), ("loop", 4)]
    assert work_balanced_counts(np.array([1.0, 1, 1, 5, 1, 1]), 3) in ((3, 1, 2), (2, 1, 3))
    assert sum(work_balanced_counts(np.arange(1.0, 15.0), 4)) == 14


def test_zb1p_with_one_chunk_per_device_is_the_layout_one():
    """The planner seeds ZB-H1 (zb1p at v = 1, layout loop) in the space of layout one."""
    problem = get_problem("gpt1-14")
    plan = torch_plan("zb1p", 4, 8, (2, 6, 5, 1), problem.B)
    assert plan.layout == "loop" and plan.v == 1
    one = plan.replace(layout="one")
    assert simulate_plan(problem, one).iteration_time == \
        simulate_plan(problem, plan).iteration_time


# ---------------------------------------------------------------------- brute force
def _partitions(B):
    for cuts in itertools.product((0, 1), repeat=B - 1):
        out, run = [], 1
        for c in cuts:
            if c:
                out.append(run)
                run = 1
            else:
                run += 1
        out.append(run)
        yield tuple(out)


def python_path_minimum(problem):
    """The least T over every plan of layout one on 2 devices of a 3-layer, stash, unsplit
    problem, each timed by the Python path (chunk_order + simulate_devices)."""
    B, best = problem.B, np.inf
    for counts in ((1, 2), (2, 1)):
        for p0, p1 in itertools.product(_partitions(B), repeat=2):
            for caps in itertools.product(range(1, B + 1), repeat=2):
                plan = ChunkPlan(D=2, layout="one", layers=counts, fwd=(p0, p1),
                                 bwd=(p0, p1), caps=caps)
                best = min(best, simulate_plan(problem, plan).iteration_time)
    return best


def every_mask_minimum(problem):
    """The least T over every genome row of layout one on 2 devices of a 3-layer, B = 3,
    recompute, split problem, W masks canonical or not, through the compiled evaluator."""
    bits = np.array(list(itertools.product((0, 1), repeat=2)), np.uint8)  # [4, 2]
    chunk = np.array(list(itertools.product(range(4), repeat=3)))  # (fwd, bwd, wgt) per chunk
    pairs = np.array(list(itertools.product(range(len(chunk)), repeat=2)))  # [4096, 2]
    caps = np.array(list(itertools.product(range(1, 4), repeat=2)), np.int64)
    w_caps = np.array(list(itertools.product(range(0, 4), repeat=2)), np.int64)
    best = np.inf
    for counts in ((1, 2), (2, 1)):
        space = ChunkSpace(2, "one", counts, 3, "recompute", True)
        obj = ChunkObjective(problem, space)
        for k in caps:
            for w in w_caps:
                n = len(pairs)
                sel = chunk[pairs]  # [n, 2 chunks, 3 chromosomes]
                g = ChunkGenomes(
                    fwd=bits[sel[:, :, 0]], bwd=bits[sel[:, :, 1]], wgt=bits[sel[:, :, 2]],
                    caps=np.tile(k, (n, 1)), w_caps=np.tile(w, (n, 1)),
                    group=np.full(n, 3, np.int64), fwd_lag=np.zeros((n, 2), np.int64),
                    bwd_lag=np.zeros((n, 2), np.int64))
                best = min(best, float(obj.evaluate(g).min()))
    return best


def test_brute_force_over_a_whole_stash_space_agrees():
    """3 layers, B = 4, D = 2 (only layout one fits), stash, unsplit. Enumerated with the
    Python path (chunk_order + simulate_devices): both partitions of the layers into two
    chunks, every forward partition of each chunk (8 x 8) and every pair of caps in 1..4
    (4 is no cap): 2 x 64 x 16 = 2,048 plans. Group and lags do nothing with one chunk per
    device. The optimum is no seed (an equal plan of torch's schedules); the planner at a
    generous budget finds it."""
    problem = synthetic_problem(3, 4, 0)
    best = python_path_minimum(problem)
    res = ChunkSearch().plan(problem, 2, budget="evals:20000", seed=0)
    assert res.start_time > best
    assert res.iteration_time == best
    assert simulate_plan(problem, res.plan).iteration_time == best


def test_brute_force_over_a_whole_split_recompute_space_agrees():
    """3 layers with split costs, B = 3, D = 2, recompute, split. Enumerated as genome rows
    with the compiled evaluator (bit-identical to the Python path, tests/test_chunk_eval.py):
    both layer partitions, per chunk every forward cut pattern (4), backward cut pattern (4)
    and W mask over the backward cuts (4: every coarsening, some twice), every cap pair in
    1..3 (3 is no cap) and w_cap pair in 0..3: 2 x 64^2 x 9 x 16 = 1,179,648 rows. Group and
    lags do nothing with one chunk per device. The planner at a generous budget, split only,
    finds the same T, which no seed reaches."""
    problem = random_split_problem(3, 3, 4)
    best = every_mask_minimum(problem)
    res = ChunkSearch(split="yes").plan(problem, 2, mode="recompute", budget="evals:40000",
                                        seed=0)
    assert res.plan.split and res.iteration_time == best and res.start_time > best


# ---------------------------------------------------------------------- the command line
@pytest.fixture
def split_file(tmp_path):
    path = tmp_path / "rand-split.json"
    random_split_problem(8, 8, 2).save(path)
    return str(path)


def test_plan_devices_json_and_the_plan_file_round_trip(split_file, tmp_path, capsys):
    out_file = tmp_path / "chunk.json"
    argv = ["plan", "--problem", split_file, "--devices", "2", "--budget", "evals:2000",
            "--seed", "3", "--json", "--out", str(out_file)]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("layout", "partition", "best_torch_schedule", "T_best_torch",
                "speedup_vs_best_torch"):
        assert key in out
    assert out["T_best_torch"] / out["iteration_time"] - 1 == out["speedup_vs_best_torch"]
    assert out["T_best_reproduced"] >= out["iteration_time"]
    assert out["faster_torch_schedules"] == [
        r["schedule"] for r in out["torch"] if r["T"] is not None
        and r["T"] < out["iteration_time"]]
    assert not set(out["faster_torch_schedules"]) & {"gpipe", "1f1b", "interleaved-1f1b",
                                                     "zb1p"}
    plan = ChunkPlan.load(out_file)
    assert list(plan.layers) == out["partition"] and plan.layout == out["layout"]
    assert main(["simulate", "--problem", split_file, "--devices", "2", "--plan",
                 str(out_file), "--json", "--events"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["iteration_time"] == out["iteration_time"]
    assert main(argv[:-2]) == 0  # the same seed and budget again: the same plan
    again = json.loads(capsys.readouterr().out)
    assert again["plan"] == out["plan"] and again["iteration_time"] == out["iteration_time"]
    assert main([*argv[:-3], "--no-progress"]) == 0  # the text report
    text = capsys.readouterr().out
    assert "vs the fastest torch schedule" in text and "zb1p" in text


@pytest.mark.parametrize("argv,msg", [
    (["--devices", "0"], "--devices must be in 1..8"),
    (["--devices", "9"], "--devices must be in 1..8"),
    (["--devices", "2", "--set", "split=yes"], "split=yes needs split-backward costs"),
    (["--devices", "2", "--planner", "tidgap"], "--planner tidgap: with --devices"),
    (["--devices", "2", "--budget", "evals:3"], "is too small"),
    (["--devices", "2", "--set", "layouts=ring"], "layouts must be"),
])
def test_plan_devices_bad_input_is_one_line_and_exit_2(argv, msg, capsys):
    assert main(["plan", "--problem", "sim-s8-b16-s1", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0], err


def test_plan_without_devices_is_unchanged(capsys):
    assert main(["plan", "--problem", "sim-s4-b16-s0", "--budget", "evals:2000", "--json",
                 "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["planner"] == "tidgap" and "layout" not in out


def test_problem_without_split_costs_searches_unsplit_plans():
    problem = get_problem("sim-s8-b16-s1")
    res = ChunkSearch().plan(problem, 2, budget="evals:2000", seed=0)
    assert not res.plan.split
    names = {b.schedule: b for b in res.baselines}
    assert names["zb1p"].T is None and "split-backward" in names["zb1p"].reason
    _check(problem, res, 2)
    assert dataclasses.asdict(names["1f1b"])["exact"]


def test_plan_devices_memory_cap(split_file, capsys):
    argv = ["plan", "--problem", split_file, "--devices", "2", "--budget", "evals:2000",
            "--json"]
    assert main(argv) == 0
    free = json.loads(capsys.readouterr().out)
    cap = int(0.9 * max(free["peak_memory"]))
    assert main([*argv, "--memory-cap", str(cap)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["memory_cap"] == cap and max(out["peak_memory"]) <= cap
    assert out["T_best_reproduced"] >= out["iteration_time"]
    assert main([*argv, "--memory-cap", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no chunk plan found fits the memory cap" in err[0], err


def test_plan_devices_memory_cap_torch_is_equal_memory(split_file, tmp_path, capsys):
    """``--memory-cap torch``: the capacity is the most loaded device's peak of the fastest
    torch schedule found without a cap; that schedule still fits it (same choice, same T),
    the plan holds no more, and is no slower than it."""
    argv = ["plan", "--problem", split_file, "--devices", "2", "--budget", "evals:2000",
            "--json", "--no-progress"]
    assert main(argv) == 0
    free = json.loads(capsys.readouterr().out)
    best = min((r for r in free["torch"] if r["T"] is not None), key=lambda r: r["T"])
    assert main([*argv, "--memory-cap", "torch"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["memory_cap"] == best["peak_memory"] and out["memory_cap_rule"] == "torch"
    assert max(out["peak_memory"]) <= out["memory_cap"]
    assert out["best_torch_schedule"] == best["schedule"]
    assert out["T_best_torch"] == best["T"]
    assert out["iteration_time"] <= out["T_best_torch"]
    d = json.loads(Path(split_file).read_text())
    for st in d["stages"]:
        st["memory"] = None
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(d))
    assert main(["plan", "--problem", str(bare), "--devices", "2", "--budget", "evals:2000",
                 "--memory-cap", "torch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--memory-cap torch:" in err[0] and "no memory figures" in err[0]


def _interrupt_after(monkeypatch, n, exc):
    """Make the search's ``n``-th generation raise ``exc`` (a signal's exception)."""
    from umpipe_bench.planners.algorithms import chunk_search as cs

    calls = {"n": 0}
    orig = cs._Run.generation

    def generation(self, sp):
        calls["n"] += 1
        if calls["n"] == n:
            raise exc
        return orig(self, sp)

    monkeypatch.setattr(cs._Run, "generation", generation)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), Terminated(signal.SIGTERM)])
def test_a_signal_in_the_search_returns_the_best_plan_found(monkeypatch, exc):
    problem = random_split_problem(8, 8, 4)
    _interrupt_after(monkeypatch, 5, exc)
    res = ChunkSearch().plan(problem, 2, budget="evals:100000", seed=0)
    assert res.interrupted is exc and "the plan is the best found" in res.stopped
    assert simulate_plan(problem, res.plan).iteration_time == res.iteration_time
    assert res.iteration_time <= res.start_time and res.evaluations < 100000


def test_plan_devices_saves_the_plan_on_a_signal_then_exits_130(monkeypatch, split_file,
                                                                tmp_path, capsys):
    out_file = tmp_path / "chunk.json"
    _interrupt_after(monkeypatch, 3, KeyboardInterrupt())
    assert main(["plan", "--problem", split_file, "--devices", "2", "--budget",
                 "evals:100000", "--json", "--out", str(out_file)]) == 130
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert "the plan is the best found" in out["stopped"] and "interrupted" in cap.err
    assert ChunkPlan.load(out_file).to_dict() == out["plan"]


def test_plan_devices_signal_before_any_plan_writes_nothing(monkeypatch, split_file, tmp_path,
                                                            capsys):
    from umpipe_bench.planners.algorithms import chunk_search as cs

    def baselines(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(cs._Run, "baselines", baselines)
    out_file = tmp_path / "chunk.json"
    assert main(["plan", "--problem", split_file, "--devices", "2", "--out",
                 str(out_file)]) == 130
    assert "before any chunk plan; nothing written" in capsys.readouterr().err
    assert not out_file.exists()
