"""A memory cap on D devices given as a share of torch's GPipe schedule
(``umpipe_bench.bench.memcap.device_memory_cap``; ``plan --devices``, ``schedules``): at 100 %
it is the GPipe choice's fullest device, so that choice fits and keeps its T; below 100 % the
GPipe choice does not fit and every row and plan fits the cap; a share on stage plans is the
bench matrix's; bad entries are one line and exit code 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from umpipe_bench.bench.memcap import (
    apply_memory_cap,
    device_memory_cap,
    gpipe_device_peaks,
)
from umpipe_bench.chunk_torch import random_split_problem, simulate_plan
from umpipe_bench.cli import main
from umpipe_bench.planners.algorithms.chunk_search import ChunkSearch
from umpipe_bench.registry import get_problem
from umpipe_bench.torch_schedules.best import schedule_table


def _gpipe(problem, D, cap=None):
    return schedule_table(problem, D, "stash", memory_cap=cap, names=["gpipe"])[0].choice


@pytest.mark.parametrize("name,D", [("gpt1-14", 2), ("gpt1-14", 4), ("vgg16", 3)])
def test_a_share_is_the_gpipe_choice_static_plus_that_share_of_its_activations(name, D):
    problem = get_problem(name)
    static, peak = gpipe_device_peaks(problem, D)
    choice = _gpipe(problem, D)
    assert np.array_equal(peak, np.array(choice.peak_memory))
    params = [st.memory.param_bytes for st in problem.stages]
    edges = np.cumsum((0, *choice.counts))
    for d in range(D):
        assert static[d] == sum(params[edges[d]:edges[d + 1]]) and peak[d] > static[d]
    full = device_memory_cap(problem, D, "100%")
    assert full == pytest.approx(max(peak), rel=1e-12)
    # at 100 % the GPipe choice fits: the same T under the cap as without
    assert _gpipe(problem, D, full * (1 + 1e-9)).T == choice.T
    half = device_memory_cap(problem, D, "50%")
    assert half == pytest.approx(max(static + 0.5 * (peak - static)), rel=1e-12)
    assert device_memory_cap(problem, D, "25%") < half < full
    assert max(choice.peak_memory) > half  # the uncapped GPipe choice does not fit
    capped = _gpipe(problem, D, half)
    if capped is not None:
        assert max(capped.peak_memory) <= half and capped.T >= choice.T


def test_sizes_and_none_pass_through():
    problem = get_problem("gpt1-14")
    assert device_memory_cap(problem, 2, None) is None
    assert device_memory_cap(problem, 2, "none") is None
    assert device_memory_cap(problem, 2, "2GiB") == 2 * 2 ** 30
    with pytest.raises(ValueError, match="memory cap"):
        device_memory_cap(problem, 2, "half")


def test_a_share_cap_binds_the_chunk_search():
    problem = random_split_problem(8, 8, 3)
    cap = device_memory_cap(problem, 2, "60%")
    res = ChunkSearch().plan(problem, 2, budget="evals:2000", seed=0, memory_cap=cap)
    tl = simulate_plan(problem, res.plan)
    assert tl.iteration_time == res.iteration_time and max(tl.peak_memory) <= cap
    best = res.best_torch()
    assert best is not None and res.iteration_time <= best.T


def test_schedules_and_plan_take_a_share(capsys, tmp_path):
    assert main(["schedules", "--problem", "gpt1-14", "-D", "2", "--memory-cap", "50%",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cap = device_memory_cap(get_problem("gpt1-14"), 2, "50%")
    assert out["memory_cap"] == cap
    fits = [r for r in out["schedules"] if r["best"] is not None]
    assert fits and all(max(r["best"]["peak_memory"]) <= cap for r in fits)
    assert all(r["schedule"] != "gpipe" or r["best"]["M"] > 1 for r in fits)


def test_stage_plans_take_the_bench_matrix_share(capsys):
    problem = get_problem("gpt1-mini-s2")
    _, caps = apply_memory_cap(problem, "50%")
    assert main(["plan", "--problem", "gpt1-mini-s2", "--memory-cap", "50%", "--budget",
                 "evals:3000", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["memory_cap"] == max(caps)
    assert all(p <= c for p, c in zip(out["peak_memory"], caps))


@pytest.mark.parametrize("argv", [
    ["plan", "--problem", "gpt1-14", "-D", "2", "--memory-cap", "50x", "--budget", "evals:100"],
    ["plan", "--problem", "gpt1-14", "-D", "2", "--memory-cap", "0%", "--budget", "evals:100"],
    ["schedules", "--problem", "gpt1-14", "-D", "2", "--memory-cap=-3%"],
    ["plan", "--problem", "gpt1-mini-s2", "--memory-cap", "lots", "--budget", "evals:100"],
])
def test_bad_caps_are_one_line_and_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--memory-cap" in err[0], err
