"""The chunk rule against the lists torch 2.13 executes (docs/CHUNK-SCHEDULES.md §5): the equal
plans of gpipe, 1f1b, interleaved-1f1b and zb1p (ZB-H1 at v = 1) give exactly torch's lists;
looped-bfs, zbv and dualpipev are not reproduced (and the reason is checked)."""

from __future__ import annotations

import pytest

from umpipe_bench.chunk_schedule import chunk_order
from umpipe_bench.chunk_torch import REPRODUCED, simulate_plan, torch_plan
from umpipe_bench.errors import InputError
from umpipe_bench.layout import balanced_counts
from umpipe_bench.registry import get_problem
from umpipe_bench.torch_schedules import check, schedule_info, torch_orders
from umpipe_bench.torch_schedules.best import simulate_chunks

pytest.importorskip("torch.distributed.pipelining")


def _cases(names, Ds, Ms, vs):
    for name in names:
        info = schedule_info(name)
        for D in Ds:
            for M in Ms:
                for v in (vs if info.layout == "loop" else [info.default_v]):
                    try:
                        check(name, D, M, v)
                    except InputError:
                        continue
                    yield name, D, M, v


def _ours(name, D, M, v, B):
    layers = (1,) * (D * v)
    return chunk_order(torch_plan(name, D, M, layers, B)).names()


def test_equal_plans_give_torch_lists_on_a_small_grid():
    cases = list(_cases(REPRODUCED, (1, 2, 3, 4), (2, 4, 8), (1, 2)))
    assert len(cases) > 50
    for name, D, M, v in cases:
        assert _ours(name, D, M, v, 2 * M) == torch_orders(name, D, M, v), (name, D, M, v)


@pytest.mark.slow
def test_equal_plans_give_torch_lists_on_the_whole_grid():
    """Every D <= 8, M <= 16, v <= 4 torch accepts, microbatches of one and of three samples."""
    n = 0
    for name, D, M, v in _cases(REPRODUCED, range(1, 9), range(1, 17), range(1, 5)):
        want = torch_orders(name, D, M, v)
        for m in (1, 3):
            assert _ours(name, D, M, v, m * M) == want, (name, D, M, v, m)
        n += 1
    assert n == 1076


@pytest.mark.slow
def test_the_other_three_are_not_torch_lists():
    """looped-bfs runs each chunk's backwards in reverse microbatch order, which no chunk
    plan does (samples move in index order); the V schedules are hand-placed phases."""
    for name, D, M, v in _cases(("looped-bfs", "zbv", "dualpipev"), (2, 3, 4), (4, 8), (2,)):
        want = torch_orders(name, D, M, v)
        assert _ours(name, D, M, v, M) != want, (name, D, M)
    rows = torch_orders("looped-bfs", 2, 3, 2)
    assert [a for a in rows[0] if a[1] == "B"] == ["2B2", "2B1", "2B0", "0B2", "0B1", "0B0"]


def test_reproduced_lists_simulate_to_torch_times():
    """Same lists, same simulator: the same iteration time and peaks on a profile."""
    p = get_problem("gpt1-14")
    for name in REPRODUCED:
        info = schedule_info(name)
        D, M = 2, 4
        v = info.default_v
        counts = balanced_counts(p.S, D * v)
        ref = simulate_chunks(p, counts, info.layout, D, v, M, "stash",
                              torch_orders(name, D, M, v))
        got = simulate_plan(p, torch_plan(name, D, M, counts, p.B))
        assert got.iteration_time == ref.iteration_time and got.peak_memory == ref.peak_memory


@pytest.mark.slow
def test_comparison_script_never_reports_worse_than_its_start(tmp_path):
    """scripts/chunk_vs_torch.py --quick: the plan it reports stays within torch's peak memory
    and, where the closest plan it starts from does too, is at least as fast (the start is
    among the plans it simulates)."""
    import csv
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "chunk_vs_torch.py"
    spec = importlib.util.spec_from_file_location("chunk_vs_torch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--quick", "--out", str(tmp_path / "cvt")]) == 0
    rows = list(csv.DictReader((tmp_path / "cvt.csv").open()))
    assert {r["schedule"] for r in rows} == {"zbv", "looped-bfs"}
    for r in rows:
        assert float(r["best_peak_vs_torch"]) <= 1 + 1e-12
        if float(r["closest_peak_vs_torch"]) <= 1 + 1e-12:
            assert float(r["best_T"]) <= float(r["closest_T"])
    assert "| `zbv` | 1 |" in (tmp_path / "cvt.md").read_text()
