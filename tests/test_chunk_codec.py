"""The chunk-plan codec (umpipe_bench/chunk_codec.py): plans and genome rows round-trip,
canonical forms keep the rule's lists, every row within the bounds decodes to a valid plan,
the W mask is a coarsening by construction, and wrong shapes or values name their field."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_chunk_schedule import chunk_plans
from umpipe_bench.chunk_codec import ChunkGenomes, ChunkSpace
from umpipe_bench.chunk_schedule import chunk_order
from umpipe_bench.chunk_torch import torch_plan
from umpipe_bench.chunkplan import ChunkPlan, ChunkPlanError, is_coarsening


@settings(max_examples=150, deadline=None)
@given(chunk_plans())
def test_plans_round_trip_through_rows_to_their_canonical_form(plan):
    space = ChunkSpace.of(plan)
    canon = space.canonical(plan)
    g = space.encode([plan])
    assert space.decode(g) == canon
    assert chunk_order(canon).lists == chunk_order(plan).lists  # the rule cannot tell them apart
    assert space.canonical(canon) == canon
    back = space.encode([canon])
    for f in ChunkGenomes._FIELDS:
        assert np.array_equal(getattr(back, f), getattr(g, f)), f
    flat = space.to_flat(g)
    assert flat.shape == (1, space.dimension)
    assert np.all(flat >= space.lower) and np.all(flat <= space.upper)
    assert space.decode(space.from_flat(flat)) == canon


@settings(max_examples=60, deadline=None)
@given(chunk_plans(), st.integers(0, 2**32 - 1))
def test_every_random_row_decodes_to_a_valid_plan_and_back(plan, seed):
    space = ChunkSpace.of(plan)
    g = space.random(np.random.default_rng(seed), 4)
    for i in range(len(g)):
        p = space.decode(g, i)
        assert ChunkSpace.of(p) == space
        if space.split:
            assert all(is_coarsening(r, q) for r, q in zip(p.wgt, p.bwd))
        assert space.decode(space.encode([p])) == p
    x = space.to_flat(g)
    h = space.from_flat(x)
    assert [space.decode(h, i) for i in range(4)] == [space.decode(g, i) for i in range(4)]


def test_the_w_mask_cuts_only_where_the_backward_cuts():
    space = ChunkSpace(1, "one", (1,), 6, "recompute", True)
    g = space.encode([ChunkPlan(D=1, layout="one", layers=(1,), fwd=((6,),),
                                bwd=((2, 2, 2),), mode="recompute", split=True)])
    assert g.wgt[0, 0].tolist() == [0, 1, 0, 1, 0]  # R = Q
    g.wgt[0, 0] = 1  # a mask bit where Q does not cut means nothing
    assert space.decode(g).wgt == ((2, 2, 2),)
    g.wgt[0, 0, 1] = 0
    assert space.decode(g).wgt == ((4, 2),)
    g.bwd[0, 0, 3] = 0  # Q changes; the mask keeps its meaning per sample position
    assert space.decode(g).bwd == ((2, 4),) and space.decode(g).wgt == ((6,),)


def test_caps_group_and_lags_canonical_forms():
    plan = torch_plan("zb1p", 2, 4, (1, 1, 1, 1), 4)  # caps (4, 3), w_caps (0, 1), group 2
    space = ChunkSpace.of(plan)
    assert space.no_cap == 8
    wide = plan.replace(caps=(9, 8), w_caps=(8, 20), group=4, fwd_lag=(0,) * 4)
    canon = space.canonical(wide)
    assert (canon.caps, canon.w_caps, canon.group, canon.fwd_lag) == (None, None, None, None)
    assert space.canonical(plan.replace(caps=(9, 3))).caps == (8, 3)
    g = space.encode([plan, wide])
    assert g.caps.tolist() == [[4, 3], [8, 8]] and g.group.tolist() == [2, 4]
    assert space.decode(g, 0) == plan


def test_stash_ties_the_backward_bits_and_flat_genomes_skip_them():
    plan = torch_plan("1f1b", 2, 2, (1, 1), 4)
    space = ChunkSpace.of(plan)
    g = space.encode([plan])
    assert g.bwd is g.fwd
    # forward bits, caps, group, lags: no backward bits, no W mask, no w_caps
    assert space.dimension == 2 * 3 + 2 + 1 + 2 + 2
    assert space.from_flat(space.to_flat(g)).bwd is not None


def test_plans_outside_the_space_and_bad_rows_are_refused():
    plan = torch_plan("1f1b", 2, 2, (1, 1), 4)
    space = ChunkSpace.of(plan)
    with pytest.raises(ChunkPlanError, match="not in the space"):
        space.encode([torch_plan("1f1b", 2, 2, (2, 1), 4)])
    g = space.encode([plan])
    with pytest.raises(ValueError, match="'caps'"):
        space.check(ChunkGenomes(**{**{f: getattr(g, f) for f in ChunkGenomes._FIELDS},
                                    "caps": np.zeros((1, 2), np.int64)}))
    with pytest.raises(ValueError, match="'group'"):
        space.check(ChunkGenomes(**{**{f: getattr(g, f) for f in ChunkGenomes._FIELDS},
                                    "group": np.array([5])}))
    with pytest.raises(ValueError, match="'fwd_lag': expected shape"):
        space.check(ChunkGenomes(**{**{f: getattr(g, f) for f in ChunkGenomes._FIELDS},
                                    "fwd_lag": np.zeros((1, 3), np.int64)}))
    with pytest.raises(ValueError, match="outside its bounds"):
        space.from_flat(np.full(space.dimension, 99))
    with pytest.raises(ChunkPlanError):
        ChunkSpace(2, "loop", (1, 1, 1), 4)
