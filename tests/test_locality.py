"""The backward locality term (docs/MODEL.md §1b): a stash backward that does not directly
follow the forward of its own samples costs ``bwd[s](m) * bwd_far[s]``.

Checked by hand on a 2-stage case under gpipe and 1f1b, and for bit-identity of every
evaluator (list simulator, gpipe recurrence, GPipe numba kernel, family kernel) with random
factors; the closed form agrees to 1e-12; the bound stays below every plan; problem files
round-trip the field and refuse bad values.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umpipe_bench import registry
from umpipe_bench.bound import lower_bound
from umpipe_bench.plan import Plan
from umpipe_bench.planners.evaluation.encoding import random_bits
from umpipe_bench.planners.evaluation.evaluator import PopulationEvaluator, bits_to_plan
from umpipe_bench.planners.evaluation.family import FamilyEvaluator
from umpipe_bench.problem import Problem, ProblemError
from umpipe_bench.simulator import gpipe_recurrence, simulate
from umpipe_bench.synthetic import synthetic_problem

from .conftest import make_problem

MODES = ("stash", "recompute")


def _hand(far=(2.0, 1.5)):
    """S = 2, B = 2, free links, no optimizer time: every number is an exact binary float."""
    p = make_problem(fwd=[[1.0, 1.5], [2.0, 3.0]], bwd=[[3.0, 5.0], [4.0, 7.0]])
    return p if far is None else p.with_bwd_far(list(far))


# ----------------------------------------------------------------------------- by hand
def test_gpipe_by_hand_every_backward_is_far():
    # stage 1: F0 [1,3] F1 [3,5]; B0 far 4*1.5 [5,11]; B1 far [11,17]
    # stage 0: F0 [0,1] F1 [1,2]; B0 far 3*2 waits for grad at 11: [11,17]; B1 [17,23]
    p, plan = _hand(), Plan.edp(2, 2, 2)
    tl = simulate(p, plan, "gpipe")
    assert tl.iteration_time == 23.0
    spans = {(o.stage, o.kind, o.index): (o.t0, o.t1) for o in tl.ops if o.kind != "O"}
    assert spans[(1, "B", 0)] == (5.0, 11.0) and spans[(0, "B", 1)] == (17.0, 23.0)
    assert gpipe_recurrence(p, plan) == 23.0
    assert PopulationEvaluator(p, "stash", "numba").plan_time(plan) == 23.0
    assert FamilyEvaluator(p, "stash").plan_time(plan)[0] == 23.0
    # without the factors: stage 1 B0 [5,9] B1 [9,13], stage 0 B0 [9,12] B1 [13,16]
    assert simulate(_hand(None), plan, "gpipe").iteration_time == 16.0


def test_one_f_one_b_by_hand_last_stage_is_near():
    # stage 1 (F0 B0 F1 B1, all backwards near): F0 [1,3] B0 [3,7] F1 [7,9] B1 [9,13]
    # stage 0 (F0 F1 B0 B1, far): B0 3*2 waits for grad at 7: [7,13]; B1 at 13: [13,19]
    p, plan = _hand(), Plan.edp(2, 2, 2)
    tl = simulate(p, plan, "1f1b")
    assert tl.to_dict(with_events=True)["stage_ops"] == [["0F0", "0F1", "0B0", "0B1"],
                                                         ["1F0", "1B0", "1F1", "1B1"]]
    assert tl.iteration_time == 19.0
    assert FamilyEvaluator(p, "stash").edp_scan("1f1b", [2])[0][0] == 19.0
    assert simulate(_hand(None), plan, "1f1b").iteration_time == 16.0


def test_one_microbatch_is_near_and_recompute_is_exempt():
    p = _hand()
    one = Plan.edp(2, 2, 1)  # F0 B0 on each stage: near, the factors do not apply
    assert simulate(p, one, "gpipe").iteration_time == simulate(_hand(None), one,
                                                               "gpipe").iteration_time
    rec = Plan.edp(2, 2, 2, "recompute")
    for schedule in ("gpipe", "1f1b"):
        assert (simulate(p, rec, schedule).iteration_time
                == simulate(_hand(None), rec, schedule).iteration_time)


# ----------------------------------------------------------------------------- evaluators agree
def _with_random_far(problem, rng):
    f = rng.uniform(0.25, 4.0, problem.S)
    f[1:][rng.random(problem.S - 1) < 0.2] = 1.0  # some stages without; stage 0 always with
    return problem.with_bwd_far(f.tolist())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("S,B,seed", [(1, 9, 0), (2, 8, 1), (4, 16, 0), (5, 17, 3), (3, 2, 0)])
def test_gpipe_evaluators_bit_identical_with_random_factors(S, B, seed, mode):
    rng = np.random.default_rng(seed + 11)
    p = _with_random_far(synthetic_problem(S, B, seed), rng)
    fb = random_bits(rng, 120, S, B)
    bb = random_bits(rng, 120, S, B)
    plans = [bits_to_plan(f, b, mode) for f, b in zip(fb, bb)]
    ref = np.array([gpipe_recurrence(p, pl) for pl in plans])
    assert np.array_equal(PopulationEvaluator(p, mode, "numba")(fb, bb), ref)
    T_fam, _ = FamilyEvaluator(p, mode).evaluate(fb, bb, np.full(S, B))
    assert np.array_equal(T_fam, ref)
    assert np.array_equal([simulate(p, pl, "gpipe").iteration_time for pl in plans[:40]],
                          ref[:40])
    np.testing.assert_allclose(PopulationEvaluator(p, mode, "numpy")(fb, bb), ref,
                               rtol=1e-12, atol=0)
    if mode == "stash" and S > 1 and B > 1:  # the factors matter here
        base = PopulationEvaluator(synthetic_problem(S, B, seed), mode, "numba")(fb, bb)
        assert not np.array_equal(base, ref)


@pytest.mark.parametrize("name", ["sim-s3-b6-s0", "sim-s4-b16-s0", "gpt1-14"])
@pytest.mark.parametrize("mode", MODES)
def test_family_kernel_bit_identical_to_simulator_with_random_factors(name, mode):
    rng = np.random.default_rng(5)
    p = _with_random_far(registry.get_problem(name), rng)
    N = 40
    fb = random_bits(rng, N, p.S, p.B)
    bb = random_bits(rng, N, p.S, p.B)
    caps = rng.integers(1, p.B + 1, size=(N, p.S))
    T, peak = FamilyEvaluator(p, mode).evaluate(fb, bb, caps)
    for n in range(N):
        tl = simulate(p, bits_to_plan(fb[n], bb[n], mode).with_caps(caps[n]))
        assert T[n] == tl.iteration_time
        assert list(peak[n]) == tl.peak_memory


def test_edp_scans_with_factors_equal_the_simulator():
    p = _with_random_far(registry.get_problem("sim-s4-b16-s0"), np.random.default_rng(2))
    ev = FamilyEvaluator(p, "stash")
    for schedule in ("gpipe", "1f1b"):
        T, _ = ev.edp_scan(schedule)
        for M in range(1, p.B + 1):
            assert T[M - 1] == simulate(p, Plan.edp(4, 16, M), schedule).iteration_time


def test_factor_one_is_exactly_todays_model():
    rng = np.random.default_rng(9)
    base = synthetic_problem(4, 16, 0)
    ones = base.with_bwd_far(1.0)
    assert np.array_equal(ones.tables().bwd_far, base.tables().bwd)
    fb, caps = random_bits(rng, 60, 4, 16), rng.integers(1, 17, size=(60, 4))
    for mode in MODES:
        assert np.array_equal(PopulationEvaluator(ones, mode, "numba")(fb, fb),
                              PopulationEvaluator(base, mode, "numba")(fb, fb))
        assert np.array_equal(FamilyEvaluator(ones, mode).evaluate(fb, fb, caps)[0],
                              FamilyEvaluator(base, mode).evaluate(fb, fb, caps)[0])


# ----------------------------------------------------------------------------- the bound
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), mode=st.sampled_from(MODES),
       low=st.booleans())
def test_bound_below_every_capped_plan_with_factors(seed, mode, low):
    rng = np.random.default_rng(seed)
    S, B = int(rng.integers(1, 5)), int(rng.integers(1, 10))
    f = rng.uniform(0.25, 1.0, S) if low else rng.uniform(1.0, 4.0, S)
    p = synthetic_problem(S, B, seed % 7).with_bwd_far(f.tolist())
    fb = rng.integers(0, 2, (S, B - 1))
    bb = fb if mode == "stash" else rng.integers(0, 2, (S, B - 1))
    caps = tuple(int(k) for k in rng.integers(1, B + 1, S))
    plan = Plan.from_bits(fb, bb, mode).with_caps(caps)
    assert lower_bound(p, mode) <= simulate(p, plan, "capped").iteration_time * (1 + 1e-12)


@pytest.mark.parametrize("far", [(0.3, 0.5), (2.5, 3.9), (0.4, 3.0)])
@pytest.mark.parametrize("planner", ["exact", "tidgap", "dgap", "greedy-dp", "local-greedy",
                                     "gpipe", "1f1b", "random-search"])
def test_bound_below_planners_with_factors(planner, far):
    p = synthetic_problem(2, 6, 0).with_bwd_far(list(far))
    budget = "evals:50000" if planner == "exact" else "evals:400"
    res = registry.get_planner(planner).plan(p, mode="stash", budget=budget, seed=0)
    T_sim = simulate(p, res.plan).iteration_time
    assert res.iteration_time == pytest.approx(T_sim, rel=1e-12)
    assert lower_bound(p, "stash") <= res.iteration_time * (1 + 1e-12)
    # f < 1 everywhere lowers the bound, f > 1 never does
    b0 = lower_bound(synthetic_problem(2, 6, 0), "stash")
    if max(far) < 1:
        assert lower_bound(p, "stash") < b0
    if min(far) > 1:
        assert lower_bound(p, "stash") == b0


# ----------------------------------------------------------------------------- problem files
def test_problem_file_round_trip(tmp_path):
    base = synthetic_problem(3, 8, 0)
    assert "bwd_far" not in base.to_json()  # absent stays absent
    p = base.with_bwd_far([1.25, None, 0.5])
    path = tmp_path / "p.json"
    p.save(path)
    data = json.loads(path.read_text())
    assert [st.get("bwd_far") for st in data["stages"]] == [1.25, None, 0.5]
    q = Problem.load(path)
    assert q == p and [q.far_factor(s) for s in range(3)] == [1.25, 1.0, 0.5]
    assert q.to_json() == p.to_json()


@pytest.mark.parametrize("bad", [0.2, 4.5, -1.0, "x", float("nan"), True])
def test_bad_factor_names_the_stage_and_field(tmp_path, bad):
    data = synthetic_problem(2, 4, 0).to_dict()
    data["stages"][1]["bwd_far"] = bad
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ProblemError,
                       match=r"field 'stages\[1\]\.bwd_far': expected .* ratio in \[0\.25, 4\]"):
        Problem.load(path)


def test_bad_factor_is_exit_code_2(tmp_path, capsys):
    from umpipe_bench.cli import main

    data = synthetic_problem(2, 4, 0).to_dict()
    data["stages"][0]["bwd_far"] = 9
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    assert main(["simulate", "--problem", str(path), "--plan", "gpipe:2"]) == 2
    err = capsys.readouterr().err
    assert "field 'stages[0].bwd_far'" in err and len(err.strip().splitlines()) == 1


def test_local_greedy_charges_far_backwards_below_B():
    from umpipe_bench.planners.algorithms.greedy import local_greedy_plan

    linear = make_problem(fwd=[[1.0, 2.0, 3.0, 4.0]], bwd=[[1.0, 2.0, 3.0, 4.0]])
    assert local_greedy_plan(linear).fwd == ((1, 1, 1, 1),)  # a tie per sample: smallest m
    far = linear.with_bwd_far(2.0)
    plan = local_greedy_plan(far)
    assert plan.fwd == ((4,),)  # one microbatch: its backward is near
    assert simulate(far, plan).iteration_time == 8.0
    assert simulate(far, Plan.edp(1, 4, 4)).iteration_time == 12.0


def test_torch_closed_form_applies_the_factors():
    pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    p = _with_random_far(synthetic_problem(4, 16, 0), rng)
    fb = random_bits(rng, 100, 4, 16)
    ref = np.array([gpipe_recurrence(p, bits_to_plan(f, f, "stash")) for f in fb])
    T = PopulationEvaluator(p, "stash", "torch", device="cpu")(fb, fb)
    np.testing.assert_allclose(T, ref, rtol=1e-12, atol=0)
