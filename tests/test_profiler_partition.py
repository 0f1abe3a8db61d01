"""Pure parts of the profiler: size grid, groupings, balanced partition DP, link fit (no torch)."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys

import pytest

from umpipe_bench.profiler.linkfit import fit_link, message_grid
from umpipe_bench.profiler.partition import (
    balanced_partition,
    bottleneck,
    check_layers_per_stage,
    one_per_stage,
    parse_layers_per_stage,
    size_grid,
)


def test_pure_modules_import_no_torch():
    code = (
        "import sys; import umpipe_bench.profiler.partition, umpipe_bench.profiler.linkfit, "
        "umpipe_bench.profiler; assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("B", "grid"),
    [(1, (1,)), (2, (1, 2)), (16, (1, 2, 4, 8, 16)), (24, (1, 2, 4, 8, 16, 24)), (5, (1, 2, 4, 5))],
)
def test_size_grid(B, grid):
    assert size_grid(B) == grid


@pytest.mark.parametrize("B", [0, -3, 2.0, True])
def test_size_grid_rejects(B):
    with pytest.raises(ValueError, match="B"):
        size_grid(B)


def test_groupings():
    assert one_per_stage(3) == (1, 1, 1)
    assert parse_layers_per_stage("4, 3,3,4", 14) == (4, 3, 3, 4)
    assert parse_layers_per_stage("2,1") == (2, 1)
    with pytest.raises(ValueError, match="stage 1 count 'x'"):
        parse_layers_per_stage("2,x,1")
    with pytest.raises(ValueError, match="stage 2 has 0 layers"):
        check_layers_per_stage([2, 1, 0], 3)
    with pytest.raises(ValueError, match="covers 5 layers; the model has 14"):
        parse_layers_per_stage("2,3", 14)


def _brute_force(costs, S):
    """Every composition of len(costs) into S parts, best by (bottleneck, sum of squared stage
    times, layers_per_stage)."""
    n = len(costs)
    best = None
    for cuts in itertools.combinations(range(1, n), S - 1):
        bounds = (0, *cuts, n)
        lps = tuple(b - a for a, b in itertools.pairwise(bounds))
        times, i = [], 0
        for k in lps:
            times.append(sum(costs[i : i + k]))
            i += k
        key = (bottleneck(costs, lps), sum(t * t for t in times), lps)
        if best is None or key < best:
            best = key
    return best[0], best[2]


def test_balanced_partition_matches_brute_force_exactly_on_integers():
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 9)
        S = rng.randint(1, n)
        costs = [float(rng.randint(0, 9)) for _ in range(n)]  # exact sums; many ties
        value, lps = _brute_force(costs, S)
        got = balanced_partition(costs, S)
        assert got == lps, (costs, S)
        assert bottleneck(costs, got) == value


def test_balanced_partition_optimal_on_floats():
    rng = random.Random(11)
    for _ in range(200):
        n = rng.randint(2, 9)
        S = rng.randint(1, n)
        costs = [rng.lognormvariate(0, 1) for _ in range(n)]
        value, _ = _brute_force(costs, S)
        got = balanced_partition(costs, S)
        assert sum(got) == n and len(got) == S and min(got) >= 1
        assert bottleneck(costs, got) == pytest.approx(value, rel=1e-12)


def test_balanced_partition_deterministic_and_sensible():
    costs = [1.0, 4.0, 1.0, 16.0]
    assert balanced_partition(costs, 2) == (3, 1)
    assert balanced_partition(costs, 2) == balanced_partition(list(costs), 2)
    assert balanced_partition([1.0] * 14, 4) == (3, 3, 4, 4)  # most even, then fewest first
    assert balanced_partition([0.0, 0.0, 0.0], 2) == (1, 2)
    assert balanced_partition([5.0], 1) == (1,)
    assert balanced_partition([1.0, 2.0, 3.0], 3) == (1, 1, 1)


@pytest.mark.parametrize(
    ("costs", "S", "match"),
    [
        ([1.0, 2.0], 3, "cannot split 2 layers into 3"),
        ([1.0, -1.0], 1, "layer 1 cost"),
        ([1.0, float("nan")], 1, "layer 1 cost"),
        ([1.0], 0, "positive int"),
    ],
)
def test_balanced_partition_rejects(costs, S, match):
    with pytest.raises(ValueError, match=match):
        balanced_partition(costs, S)


def test_fit_link_recovers_a_line():
    lat, bw = 50e-6, 2e9
    x = [4096, 65536, 1 << 20, 16 << 20]
    lat_f, bw_f = fit_link(x, [lat + b / bw for b in x])
    assert lat_f == pytest.approx(lat, rel=1e-9)
    assert bw_f == pytest.approx(bw, rel=1e-9)


def test_fit_link_negative_intercept_goes_through_origin():
    x = [1000.0, 2000.0, 4000.0]
    lat, bw = fit_link(x, [0.5e-6, 1.9e-6, 4.1e-6])  # extrapolates below zero at 0 bytes
    assert lat == 0.0 and bw > 0


def test_fit_link_rejects():
    with pytest.raises(ValueError, match="two different sizes"):
        fit_link([10, 10], [1e-3, 2e-3])
    with pytest.raises(ValueError, match="does not grow"):
        fit_link([10, 1000], [2e-3, 1e-3])
    with pytest.raises(ValueError, match="positive"):
        fit_link([10, 1000], [0.0, 1e-3])


def test_message_grid():
    g = message_grid(98304, 98304 * 128)
    assert g[0] == 98304 and g[-1] == 98304 * 128 and len(g) == 6
    assert all(v % 4 == 0 for v in g) and list(g) == sorted(set(g))
    assert message_grid(16, 1 << 40)[-1] == 64 << 20  # capped
    assert message_grid(100, 100)[-1] == 4 << 20  # enough range to see the bandwidth
    assert message_grid(98304, 98304 * 16)[-1] == 4 << 20
