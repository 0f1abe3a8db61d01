"""Chunk plans (docs/CHUNK-SCHEDULES.md §1): what is valid, one-line errors naming the field,
JSON round trips, and the equal plans of torch's schedules."""

from __future__ import annotations

import json

import pytest

from umpipe_bench.chunk_torch import REPRODUCED, torch_caps, torch_plan
from umpipe_bench.chunkplan import ChunkPlan, ChunkPlanError, is_coarsening
from umpipe_bench.errors import InputError
from umpipe_bench.registry import get_problem
from umpipe_bench.torch_schedules import TORCH_SCHEDULES

GOOD = dict(D=2, layout="loop", layers=(2, 1, 1, 3), fwd=((2, 2),) * 4, bwd=((2, 2),) * 4)


def test_fields_and_derived_values():
    p = ChunkPlan(**GOOD, split=True, wgt=((4,), (2, 2), (4,), (2, 2)), caps=(6, 4),
                  w_caps=(0, 2), group=2, fwd_lag=(0, 0, 1, 1), bwd_lag=(1, 1, 0, 0))
    assert (p.C, p.B, p.v, p.devices, p.device_chunks) == (4, 4, 2, (0, 1, 0, 1),
                                                           ((0, 2), (1, 3)))
    assert p.parts()[0] == ((2, 2), (2, 2), (4,)) and not p.is_equal()
    q = ChunkPlan(**GOOD)
    assert q.effective_caps() == (8, 8) and q.effective_group() == 4 and q.is_equal()
    assert q.effective_lags() == ((0,) * 4, (0,) * 4)
    assert ChunkPlan(**GOOD, split=True).wgt == GOOD["bwd"]  # R = Q when not given
    assert is_coarsening((4,), (1, 3)) and is_coarsening((1, 3), (1, 3))
    assert not is_coarsening((2, 2), (1, 3))


@pytest.mark.parametrize("change,match", [
    ({"D": 0}, "field 'D'"),
    ({"layout": "zigzag"}, "field 'layout'"),
    ({"layers": (1, 1, 1)}, "field 'layers'.*multiple of D"),
    ({"layers": (1, 0, 1, 1)}, "field 'layers'"),
    ({"fwd": ((2, 2),) * 3}, "field 'fwd' must hold one partition per chunk"),
    ({"fwd": ((2, 2), (2, 2), (2, 1), (2, 2))}, r"field 'fwd\[2\]': \[2, 1\] sums to 3"),
    ({"fwd": ((2, 2), (2, 2), (2, 2), (4, 0))}, r"field 'fwd\[3\]\[1\]'"),
    ({"bwd": ((2, 2), (1, 3), (2, 2), (2, 2))}, r"field 'bwd\[1\]': stash mode"),
    ({"mode": "remat"}, "field 'mode'"),
    ({"wgt": ((4,),) * 4}, "field 'wgt': a weight-gradient partition needs 'split'"),
    ({"split": True, "wgt": ((4,), (1, 3), (4,), (4,))}, r"field 'wgt\[1\]'.*coarsening"),
    ({"caps": (1,)}, "field 'caps' must hold one number per device"),
    ({"caps": (0, 1)}, r"field 'caps\[0\]'"),
    ({"w_caps": (0, 0)}, "field 'w_caps': caps on pending weight gradients need"),
    ({"split": True, "w_caps": (0, -1)}, r"field 'w_caps\[1\]'"),
    ({"group": 5}, "field 'group'"),
    ({"fwd_lag": (0, 1)}, "field 'fwd_lag' must hold one number per chunk"),
    ({"bwd_lag": (0, 0, 0, -1)}, r"field 'bwd_lag\[3\]'"),
    ({"split": 1}, "field 'split'"),
])
def test_invalid_plans_are_one_line_naming_the_field(change, match):
    with pytest.raises(ChunkPlanError, match=match) as exc:
        ChunkPlan(**{**GOOD, **change})
    assert "\n" not in str(exc.value) and isinstance(exc.value, InputError)


def test_json_round_trip_and_file_errors(tmp_path):
    p = ChunkPlan(**GOOD, mode="recompute", split=True, wgt=((4,),) * 4, caps=(6, 4),
                  w_caps=(0, 2), group=2, fwd_lag=(0, 0, 2, 2), meta={"note": "x"})
    p.save(tmp_path / "p.json")
    q = ChunkPlan.load(tmp_path / "p.json")
    assert q == p and q.meta == {"note": "x"}
    assert ChunkPlan.from_dict(json.loads(json.dumps(ChunkPlan(**GOOD).to_dict()))) == \
        ChunkPlan(**GOOD)
    data = p.to_dict()
    for bad, match in (({**data, "cpas": [1, 1]}, "field 'cpas': unknown field; did you mean "
                                                   "'caps'"),
                       ({**data, "B": 5}, "field 'B' = 5 but the partitions sum to 4"),
                       ({**data, "schema": "umpipe-plan/1"}, "field 'schema'"),
                       ({k: v for k, v in data.items() if k != "layout"},
                        "field 'layout': missing"),
                       ({**data, "fwd": [[2, 2]] * 3}, "file.*field 'fwd' must hold")):
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(ChunkPlanError, match=match) as exc:
            ChunkPlan.load(tmp_path / "bad.json")
        assert "chunk plan file" in str(exc.value) and "\n" not in str(exc.value)


def test_validate_against_a_problem():
    gpt = get_problem("gpt1-14")
    plan = ChunkPlan.equal(2, gpt.B, 4, "one", (7, 7), split=True)
    assert plan.validate(gpt) is plan
    with pytest.raises(ChunkPlanError, match="covers 13 layers"):
        plan.replace(layers=(6, 7)).validate(gpt)
    with pytest.raises(ChunkPlanError, match="has no split-backward costs"):
        ChunkPlan.equal(2, 16, 4, "one", (4, 4), split=True).validate(
            get_problem("sim-s8-b16-s1"))
    with pytest.raises(ChunkPlanError, match="B = 8"):
        ChunkPlan.equal(2, 8, 4, "one", (7, 7)).validate(gpt)


def test_every_torch_schedule_has_an_equal_plan():
    """Caps in samples are torch's microbatch counts times B / M (docs/CHUNK-SCHEDULES.md
    §5); the split schedules' plans are split; the layout is the schedule's."""
    for name, info in TORCH_SCHEDULES.items():
        D, M, B = 4, 8, 16
        v = info.default_v
        layers = (1,) * (D * v)
        plan = torch_plan(name, D, M, layers, B)
        assert plan.layout == info.layout and plan.split == info.split_backward
        assert plan.is_equal() and plan.fwd[0] == (2,) * 8
        assert plan.meta == {"schedule": name, "exact": name in REPRODUCED}
        caps, w_caps, _ = torch_caps(name, D, M, v)
        assert plan.caps == (None if caps is None else tuple(2 * k for k in caps))
        assert plan.w_caps == (None if w_caps is None else tuple(2 * k for k in w_caps))
    assert torch_caps("1f1b", 4, 8) == ([4, 3, 2, 1], None, None)
    assert torch_caps("zb1p", 4, 8, 1) == ([4, 3, 2, 1], [0, 1, 2, 3], 4)
    # interleaved 1F1B at v = 2, D = 4, M = 8: 4 per round, warm-up 4 + 2 (3 - d)
    assert torch_caps("interleaved-1f1b", 4, 8, 2) == ([11, 9, 7, 5], None, 4)
    with pytest.raises(ChunkPlanError, match="M dividing B"):
        torch_plan("1f1b", 2, 3, (1, 1), 8)
    with pytest.raises(InputError, match="M >= D"):
        torch_plan("1f1b", 4, 2, (1,) * 4, 8)
