"""The codec (umpipe_bench.codec) against brute force: every composition of a small ``B``
enumerated directly, every gene of a small space decoded, and the counts of distinct plans each
gene space reaches compared with the numbers known in closed form (``2^(B-1)`` compositions of
``B``, docs/MODEL.md §2)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from umpipe_bench.api import GenomeSpace
from umpipe_bench.codec import (
    GenomeLayout,
    balanced_sizes,
    bits_to_partitions,
    bits_to_sizes,
    codes_to_bits,
    edp_bits,
    edp_row,
    genes_to_caps,
    partitions_to_bits,
    plan_to_bits,
    sizes_to_bits,
)
from umpipe_bench.plan import Plan, balanced_split
from umpipe_bench.planners.algorithms.dgap import decode as dgap_decode
from umpipe_bench.planners.evaluation.encoding import bits_to_plan
from umpipe_bench.planners.evaluation.objective import FamilyObjective, Genomes
from umpipe_bench.synthetic import synthetic_problem


def compositions(B: int) -> list[tuple[int, ...]]:
    """Every ordered tuple of positive integers summing to ``B``, by recursion on the first."""
    if B == 0:
        return [()]
    return [(k, *rest) for k in range(1, B + 1) for rest in compositions(B - k)]


@pytest.mark.parametrize("B", range(1, 10))
def test_cut_bits_are_a_bijection_onto_the_compositions(B):
    every = compositions(B)
    assert len(every) == 2 ** (B - 1)
    decoded = [bits_to_sizes(b) for b in itertools.product((0, 1), repeat=B - 1)]
    assert sorted(decoded) == sorted(every)  # each composition exactly once
    for c in every:
        assert bits_to_sizes(sizes_to_bits(c, B)) == c
    for b in itertools.product((0, 1), repeat=B - 1):
        assert sizes_to_bits(bits_to_sizes(b), B) == list(b)


@pytest.mark.parametrize("S,B", [(1, 4), (2, 3), (2, 4)])
@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_every_plan_round_trips_and_the_bit_space_reaches_each_once(S, B, mode):
    comps = compositions(B)
    fwd_choices = list(itertools.product(comps, repeat=S))
    bwd_choices = fwd_choices if mode == "recompute" else [None]
    plans = [Plan(fwd=f, bwd=f if b is None else b, mode=mode)
             for f in fwd_choices for b in bwd_choices]
    for plan in plans:
        fb, bb = plan_to_bits(plan)
        assert Plan.from_bits(fb, bb, mode) == plan
        assert bits_to_plan(fb, bb, mode) == plan
        assert Plan.from_bits(*plan.to_bits(), mode=mode) == plan
        assert bits_to_partitions(partitions_to_bits(plan.fwd, B)) == plan.fwd
    L = S * (B - 1)
    n_dirs = 2 if mode == "recompute" else 1
    codes = np.arange(2 ** L)
    bits = codes_to_bits(codes, S, B - 1)
    reached = {Plan.from_bits(f, b, mode)
               for f in bits for b in (bits if mode == "recompute" else [None])}
    assert len(reached) == len(plans) == 2 ** (n_dirs * L)


@pytest.mark.parametrize("mode", ["stash", "recompute"])
@pytest.mark.parametrize("family", ["gpipe", "capped"])
def test_every_flat_genome_decodes_to_a_distinct_plan_and_back(mode, family):
    S, B = 2, 3
    space = GenomeSpace(S, B, mode, family)
    assert isinstance(space, GenomeLayout)
    ranges = [range(int(lo), int(hi) + 1) for lo, hi in zip(space.lower, space.upper)]
    genomes = np.array(list(itertools.product(*ranges)), dtype=np.int64)
    plans = set()
    for x in genomes:
        plan, schedule = space.to_plan(x)
        assert schedule == ("gpipe" if plan.caps is None else "capped")
        assert np.array_equal(space.from_plan(plan), x)
        plans.add(plan)
    n_dirs = 2 if mode == "recompute" else 1
    # caps: B^S vectors, all B being the uncapped plan; every vector a different plan
    n_caps = B ** S if family == "capped" else 1
    assert len(plans) == len(genomes) == 2 ** (n_dirs * S * (B - 1)) * n_caps


def test_counts_decode_to_the_balanced_split_and_reach_B_plans():
    for B in range(1, 12):
        rows = [edp_row(B, M) for M in range(1, B + 1)]
        assert [bits_to_sizes(r) for r in rows] == [balanced_split(B, M)
                                                     for M in range(1, B + 1)]
        assert len({r.tobytes() for r in rows}) == B
    assert balanced_sizes(10, 4) == (3, 3, 2, 2)
    assert Plan.from_bits(edp_bits(3, 10, 4), None) == Plan.edp(3, 10, 4)
    with pytest.raises(ValueError, match="1 <= M <= B"):
        edp_row(4, 5)


def test_cap_genes_of_B_or_more_are_no_cap():
    assert genes_to_caps(None, 8) is None
    assert genes_to_caps([8, 8, 8], 8) is None
    assert genes_to_caps([8, 12, 9], 8) is None
    assert genes_to_caps([3, 12, 8], 8) == (3, 8, 8)
    assert Plan.from_bits([[0, 1, 0]], None, caps=[9]).caps is None
    assert Plan.from_bits([[0, 1, 0]], None, caps=[2]).caps == (2,)


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_dgap_individuals_and_family_genomes_decode_alike(mode):
    S, B = 3, 6
    problem = synthetic_problem(S, B, 0)
    rng = np.random.default_rng(0)
    objective = FamilyObjective(problem, mode)
    for _ in range(50):
        f = rng.integers(0, 2, (1, S, B - 1)).astype(np.uint8)
        b = rng.integers(0, 2, (1, S, B - 1)).astype(np.uint8) if mode == "recompute" else f
        k = rng.integers(1, 2 * B, (1, S))
        ind = [f[0].ravel().tolist()] + ([b[0].ravel().tolist()] if mode == "recompute" else [])
        plan = dgap_decode([*ind, k[0].tolist()], S, B, mode, family=True)
        assert plan == objective.decode(Genomes(f, b, k))
        assert plan.caps == genes_to_caps(k[0], B)
        assert dgap_decode(ind, S, B, mode) == bits_to_plan(f[0], b[0], mode)
