"""``chunk-exact`` (umpipe_bench/baselines/chunk_exact.py): the optimum of layout one on tiny
problems. Known by construction: with one layer per device and no split it is the capped
family's optimum that the stage planner ``exact`` proves; it equals a brute force over the
Python path (chunk_order + simulate_devices), and over every mask (canonical or not); no
reproduced torch schedule and no chunk-search plan is faster; the counts are the
enumeration's; bad input and cut-short runs say so."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.test_chunk_search import _partitions, every_mask_minimum, python_path_minimum
from umpipe_bench.baselines.chunk_exact import ChunkExact, chunk_options, layer_partitions
from umpipe_bench.baselines.exact import Exact
from umpipe_bench.chunk_torch import random_split_problem, simulate_plan
from umpipe_bench.chunkplan import is_coarsening
from umpipe_bench.cli import main
from umpipe_bench.codec import bits_to_sizes
from umpipe_bench.planners.algorithms.chunk_search import ChunkSearch
from umpipe_bench.planners.search.base import PlannerError
from umpipe_bench.synthetic import synthetic_problem


def test_layer_partitions_and_chunk_options_are_every_canonical_choice():
    assert layer_partitions(4, 2) == [(1, 3), (2, 2), (3, 1)]
    assert layer_partitions(5, 3) == [(1, 1, 3), (1, 2, 2), (1, 3, 1), (2, 1, 2), (2, 2, 1),
                                      (3, 1, 1)]
    assert len(layer_partitions(14, 4)) == 286  # C(13, 3)
    B = 5
    f, b, w = chunk_options(B, "stash", True)
    assert len(f) == 3 ** (B - 1) and (f == b).all()
    seen = set()
    for x, m in zip(f, w):
        assert not np.any(m & ~x)  # a mask only where the backward cuts: canonical
        P, R = bits_to_sizes(x), bits_to_sizes(m)
        assert is_coarsening(R, P)
        seen.add((P, R))
    # every (P, coarsening of P) pair once
    every = {(P, R) for P in _partitions(B) for R in _partitions(B) if is_coarsening(R, P)}
    assert seen == every
    f, b, w = chunk_options(4, "recompute", False)
    assert len(f) == 2 ** 3 * 2 ** 3 and (w == 1).all()
    assert len({(tuple(x), tuple(y)) for x, y in zip(f, b)}) == 64


@pytest.mark.parametrize("S,B,seed,mode", [(2, 6, 0, "stash"), (3, 4, 1, "stash"),
                                           (2, 5, 2, "stash"), (2, 5, 2, "recompute")])
def test_one_layer_per_device_unsplit_is_the_capped_optimum_of_exact(S, B, seed, mode):
    """The chunk rule with one chunk per device and no split is the capped rule, and devsim
    times it as the stage simulator does (tests/test_chunk_schedule.py, test_devsim.py): so
    over D = S devices the two exhaustive searches prove the same optimum."""
    problem = synthetic_problem(S, B, seed)
    ref = Exact(schedule="capped").plan(problem, mode=mode)
    assert ref.settings["schedule"] == "capped"
    res = ChunkExact().plan(problem, S, mode=mode)
    assert res.proven_optimal and not res.plan.split
    assert res.iteration_time == ref.iteration_time
    assert res.evaluations == ChunkExact.count(ChunkExact().spaces(problem, S, mode)[0])


def test_equals_the_python_path_brute_force_stash():
    """3 layers, B = 4, D = 2, stash, unsplit: both layer partitions, every forward partition
    per chunk, every cap pair, timed by the Python path: 2 x 64 x 16 = 2,048 plans."""
    problem = synthetic_problem(3, 4, 0)
    best = python_path_minimum(problem)
    res = ChunkExact().plan(problem, 2)
    assert res.evaluations == 2048 and res.iteration_time == best
    assert simulate_plan(problem, res.plan).iteration_time == best


def test_split_recompute_equals_the_enumeration_of_every_mask():
    """3 layers with split costs, B = 3, D = 2, recompute, split: every W mask, canonical or
    not (the chunk-search test's 1,179,648 rows) gives the same minimum as the canonical
    enumeration (373,248 rows)."""
    problem = random_split_problem(3, 3, 4)
    best = every_mask_minimum(problem)
    res = ChunkExact(split="yes").plan(problem, 2, mode="recompute")
    assert res.evaluations == 373_248 and res.iteration_time == best and res.plan.split
    assert simulate_plan(problem, res.plan).iteration_time == best


@pytest.mark.parametrize("seed,mode", [(1, "stash"), (2, "recompute"), (3, "stash")])
def test_no_torch_schedule_and_no_chunk_search_plan_is_faster(seed, mode):
    problem = random_split_problem(3, 3, seed)
    res = ChunkExact().plan(problem, 2, mode=mode)
    exact = res.best_torch(exact_only=True)
    assert exact is not None and res.iteration_time <= exact.T
    for s in range(3):
        heur = ChunkSearch(layouts="one").plan(problem, 2, mode=mode, budget="evals:3000",
                                               seed=s)
        assert heur.iteration_time >= res.iteration_time


def test_a_memory_cap_binds():
    problem = random_split_problem(3, 3, 5)
    free = ChunkExact().plan(problem, 2)
    cap = 0.97 * max(free.peak_memory)
    res = ChunkExact().plan(problem, 2, memory_cap=cap)
    assert max(res.peak_memory) <= cap and res.memory_cap == cap
    assert res.iteration_time >= free.iteration_time
    tl = simulate_plan(problem, res.plan)
    assert tl.iteration_time == res.iteration_time and max(tl.peak_memory) <= cap


def test_refusals_and_a_time_budget():
    problem = random_split_problem(4, 6, 0)
    need = sum(ChunkExact.count(sp) for sp in ChunkExact().spaces(problem, 2, "stash"))
    with pytest.raises(PlannerError, match=f"need {need:,} evaluations"):
        ChunkExact().plan(problem, 2)
    with pytest.raises(PlannerError, match="over the limit of 100"):
        ChunkExact().plan(random_split_problem(3, 3, 0), 2, budget="evals:100")
    with pytest.raises(PlannerError, match="devices D must be in 1..3"):
        ChunkExact().plan(random_split_problem(3, 3, 0), 4)
    with pytest.raises(PlannerError, match="split=yes needs split-backward costs"):
        ChunkExact(split="yes").plan(synthetic_problem(3, 3, 0), 2)
    small = random_split_problem(3, 3, 1)
    whole = sum(ChunkExact.count(sp) for sp in ChunkExact().spaces(small, 2, "stash"))
    res = ChunkExact().plan(small, 2, budget="secs:0.000001,evals:4194304")
    assert res.proven_optimal is False and "not proven optimal" in res.stopped
    assert res.interrupted is None and 0 < res.evaluations < whole


def test_plan_devices_planner_chunk_exact(tmp_path, capsys):
    path = tmp_path / "p.json"
    random_split_problem(3, 3, 2).save(path)
    out = tmp_path / "plan.json"
    argv = ["plan", "--problem", str(path), "--devices", "2", "--planner", "chunk-exact",
            "--out", str(out), "--no-progress"]
    assert main([*argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["planner"] == "chunk-exact" and r["proven_optimal"] is True
    assert r["iteration_time"] <= r["T_best_reproduced"]
    # the plan file alone says D: simulate needs no --devices
    assert main(["simulate", "--problem", str(path), "--plan", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time"] == r["iteration_time"]
    assert main([*argv[:-3], "--no-progress"]) == 0
    assert "optimal over every plan of layout one" in capsys.readouterr().out
    assert main([*argv[:-3], "--budget", "evals:10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refuses problem" in err[0]
