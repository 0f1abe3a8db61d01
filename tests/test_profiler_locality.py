"""The profiler's backward locality cell (docs/MODEL.md §1b) on ``tiny-known``.

No assertion depends on a measured time: only that the factor is written, within the range a
problem file accepts, that ``--no-locality`` leaves it out, and that the far and near orders do
the same work (the same gradients).
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from umpipe_bench.problem import BWD_FAR_RANGE, Problem  # noqa: E402
from umpipe_bench.profiler.engine import make_clock, prepare_rigs  # noqa: E402
from umpipe_bench.profiler.locality import (  # noqa: E402
    LocalityRound,
    far_factor,
    order_pass,
    reference_sizes,
)
from umpipe_bench.profiler.profile import LinkFigures, profile_model  # noqa: E402

CONFIG = {"hidden": 32, "rows": 4, "work": [1, 2, 1]}
LINK = LinkFigures(latency=1e-4, bandwidth=1e9)


def _profile(**kw):
    args = {"B": 6, "config": CONFIG, "repeats": 2, "link": LINK, "progress": False}
    args.update(kw)
    return profile_model("tiny-known", **args)


def test_profile_writes_the_factor_within_bounds(tmp_path):
    p = _profile()
    lo, hi = BWD_FAR_RANGE
    for st in p.stages:
        assert st.bwd_far is not None and lo <= st.bwd_far <= hi
        loc = st.extra["locality"]
        assert loc["sizes"] == [2, 2, 1, 1]  # EDP(4) of B = 6, larger first
        assert loc["ratio_min"] <= loc["ratio_median"] <= loc["ratio_max"]
    assert "EDP(4)" in p.provenance["how"]["bwd_far"]
    path = tmp_path / "p.json"
    p.save(path)
    data = json.loads(path.read_text())
    assert all("bwd_far" in st for st in data["stages"])
    assert Problem.load(path).far_factor(0) == p.stages[0].bwd_far


def test_no_locality_leaves_the_factor_out():
    p = _profile(locality=False)
    assert all(st.bwd_far is None and "locality" not in st.extra for st in p.stages)
    assert "bwd_far" not in p.provenance["how"] and "bwd_far" not in p.to_json()


def test_one_sample_has_no_far_order():
    p = _profile(B=1, repeats=1)
    assert all(st.bwd_far is None for st in p.stages)


def test_reference_sizes():
    assert reference_sizes(9) == (3, 2, 2, 2)
    assert reference_sizes(3) == (1, 1, 1)


def test_far_factor_is_the_clamped_median_ratio():
    rounds = [LocalityRound(1.0, 1.0, 1.0, r) for r in (1.1, 1.3, 0.9)]
    assert far_factor(rounds) == (1.1, 1.1)
    assert far_factor([LocalityRound(1.0, 1.0, 1.0, 9.0)]) == (BWD_FAR_RANGE[1], 9.0)


@pytest.mark.parametrize("stage", [0, 1])
def test_far_and_near_orders_do_the_same_work(stage):
    from umpipe_bench.problems.models import get_model

    spec = get_model("tiny-known")
    layers = spec.build(dict(CONFIG), torch.float64, 0)
    x, y = spec.sample_batch(6, dict(CONFIG), 0, torch.float64)
    rig = prepare_rigs(layers, [2, 1], x, y, optimizer="sgd", seed=0)[stage]
    clock = make_clock(torch.device("cpu"))
    grads = {}
    for order in ("near", "far"):
        rig.module.zero_grad(set_to_none=True)
        f, b = order_pass(rig, reference_sizes(6), spec.loss, clock, order)
        assert f > 0 and b > 0
        grads[order] = [prm.grad.clone() for prm in rig.module.parameters()]
    for a, b in zip(grads["near"], grads["far"], strict=True):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="order must be"):
        order_pass(rig, (6,), spec.loss, clock, "sideways")


def test_cli_no_locality(tmp_path):
    from umpipe_bench.cli import main

    for flag, present in (([], True), (["--no-locality"], False)):
        out = tmp_path / f"cli{len(flag)}.json"
        rc = main(["profile", "tiny-known", "--batch", "4", "--layers-per-stage", "3,1",
                   "--repeats", "1", "--set", "hidden=16", "--link-latency", "1e-4",
                   "--link-bandwidth", "1e9", "--no-progress", "--out", str(out), *flag])
        assert rc == 0
        data = json.loads(out.read_text())
        assert all(("bwd_far" in st) == present for st in data["stages"])
