"""Simulation networks: open names, the families and their heterogeneity knob (docs/SIMNETS.md)."""

from __future__ import annotations

import numpy as np
import pytest

from umpipe_bench.cli import main
from umpipe_bench.planners.evaluation.reference import best_edp
from umpipe_bench.problem import ProblemError
from umpipe_bench.registry import get_planner, get_problem, problem_names
from umpipe_bench.simnames import LIMITS, family_name, parse_sim_name
from umpipe_bench.simnets import FAMILIES, family_problem
from umpipe_bench.synthetic import synthetic_problem

MODES = ("stash", "recompute")


def test_listed_names_keep_their_numbers():
    """The committed leaderboard's names: listed, and the old generator's tables unchanged."""
    names = problem_names()
    assert "sim-s4-b16-s0" in names and "sim-s32-b256-s1" in names
    assert not any(n.startswith("sim-knee") for n in names)  # families are open, not listed
    p = get_problem("sim-s4-b16-s0")
    assert p.tables().fwd.tobytes() == synthetic_problem(4, 16, 0).tables().fwd.tobytes()
    # values the generator gave before the families existed (main at 2903f5f)
    assert (p.fwd(0, 1), p.bwd(3, 16), p.links[2].latency) == (
        0.005843369159129011, 0.02423356768470595, 0.0008854174168006149)


@pytest.mark.parametrize("name,S,B", [("sim-s5-b10-s3", 5, 10), ("SIM-S1-B1-S0", 1, 1),
                                      ("sim-knee-s8-b64-h0.5-s3", 8, 64),
                                      ("sim-mix-dc-s3-b7-h1-s12", 3, 7)])
def test_open_names_resolve(name, S, B):
    p = get_problem(name)
    assert (p.S, p.B) == (S, B)
    assert p.name == name.lower()


def test_open_legacy_name_is_the_old_generator():
    assert get_problem("sim-s5-b10-s3").tables().bwd.tobytes() == \
        synthetic_problem(5, 10, 3).tables().bwd.tobytes()


@pytest.mark.parametrize("name,message", [
    ("sim-s0-b8-s0", "S must be in 1..128, got 0"),
    (f"sim-s4-b{LIMITS['B'][1] + 1}-s0", f"B must be in 1..{LIMITS['B'][1]}"),
    ("sim-foo-s4-b8-h0.5-s0", "unknown family 'foo'; expected one of knee"),
    ("sim-knee-s4-b8-h1.5-s0", "h must be in [0, 1], got 1.5"),
])
def test_names_out_of_limits_say_which_field(name, message):
    with pytest.raises(ProblemError, match=None) as exc:
        get_problem(name)
    assert message in str(exc.value)


def test_unknown_name_gets_patterns_and_closest_names_not_everything():
    with pytest.raises(KeyError) as exc:
        get_problem("sim-s5-b10")
    msg = exc.value.args[0]
    assert "sim-s{S}-b{B}-s{seed}" in msg and "sim-{family}[-dc]-s{S}-b{B}-h{h}-s{seed}" in msg
    assert "closest: sim-" in msg
    assert len(msg) < 500 and msg.count("sim-s") < 10


def test_cli_unknown_problem_one_line_exit_2(capsys):
    assert main(["simulate", "--problem", "sim-s5-b10-x", "--plan", "gpipe:2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "closest:" in err


def test_cli_out_of_limits_exit_2(capsys):
    assert main(["simulate", "--problem", "sim-s999-b10-s0", "--plan", "gpipe:2"]) == 2
    assert "S must be in 1..128, got 999" in capsys.readouterr().err


def test_family_name_round_trips():
    for fam in FAMILIES:
        for dc in (False, True):
            name = family_name(fam, 4, 9, 0.25, 7, dc)
            loader = parse_sim_name(name)
            assert loader is not None and loader().name == name


def test_parse_ignores_other_names():
    assert parse_sim_name("gpt1-s4") is None


@pytest.mark.parametrize("family", FAMILIES)
def test_h0_gives_identical_stages_for_every_family(family):
    p = family_problem(family, 6, 16, 0.0, 3, decorrelated=family == "mix")
    tb = p.tables()
    for arr in (tb.fwd, tb.bwd, tb.rbwd, tb.act, tb.grad):
        assert np.all(arr == arr[0])
    assert np.all(tb.opt == tb.opt[0])


@pytest.mark.parametrize("family", FAMILIES)
def test_h_only_scales_the_same_draws(family):
    """Higher h never makes a stage cheaper; same seed, same problem."""
    lo, hi = family_problem(family, 5, 40, 0.3, 1), family_problem(family, 5, 40, 0.9, 1)
    assert family_problem(family, 5, 40, 0.3, 1).tables().fwd.tobytes() == \
        lo.tables().fwd.tobytes()
    for kind in ("fwd", "bwd", "act"):
        assert np.all(getattr(hi.tables(), kind) >= getattr(lo.tables(), kind) - 1e-15)
    if family != "slowlink":
        assert not np.allclose(hi.tables().fwd, hi.tables().fwd[0])  # stages differ at h > 0


def test_backward_about_twice_forward_and_correlated():
    p = family_problem("mix", 8, 32, 1.0, 0)
    tb = p.tables()
    ratio = tb.bwd[:, 1:] / tb.fwd[:, 1:]
    assert np.all((ratio > 1.9) & (ratio < 3.1))
    np.testing.assert_allclose(tb.rbwd, tb.fwd + tb.bwd)
    # decorrelated: the backward/forward ratio varies across stages and sizes
    dc = family_problem("mix", 8, 32, 1.0, 0, decorrelated=True).tables()
    r_dc = dc.bwd[:, 1:] / dc.fwd[:, 1:]
    assert r_dc.std() > 5 * ratio.std()


@pytest.mark.parametrize("S,B", [(2, 7), (3, 5)])
@pytest.mark.parametrize("mode", MODES)
def test_h0_unequal_microbatches_gain_nothing(S, B, mode):
    """Identical stages: the exact optimum over all GPipe plans is the best EDP plan. (Not in
    the capped family: there a per-stage cap plus one stage's larger microbatches can gain a
    few per cent even on identical stages; docs/SIMNETS.md.)"""
    p = family_problem("mix", S, B, 0.0, 0)
    opt = get_planner("exact", schedule="gpipe").plan(p, mode=mode).iteration_time
    assert opt == pytest.approx(best_edp(p, mode, "gpipe")[1], rel=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_h0_tidgap_finds_nothing_better_than_edp(mode):
    p = family_problem("mix", 8, 32, 0.0, 0)
    T = get_planner("tidgap", schedule="gpipe").plan(p, mode=mode, budget="evals:3000",
                                                     seed=0).iteration_time
    assert T >= best_edp(p, mode, "gpipe")[1] * (1 - 1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_h0_the_family_gains_only_through_its_schedule_and_never_loses(mode):
    """In the capped family identical stages can still gain (a capped last stage with larger
    microbatches, found on mix-s8-b32-h0), but never lose against either equal baseline."""
    p = family_problem("mix", 8, 32, 0.0, 0)
    T = get_planner("tidgap").plan(p, mode=mode, budget="evals:3000", seed=0).iteration_time
    assert T <= min(best_edp(p, mode, "gpipe")[1], best_edp(p, mode, "1f1b")[1]) * (1 + 1e-12)


def test_slowlink_slows_links_only():
    p0, p1 = family_problem("slowlink", 4, 8, 0.0, 0), family_problem("slowlink", 4, 8, 1.0, 0)
    assert p0.tables().fwd.tobytes() == p1.tables().fwd.tobytes()
    assert all(b.bandwidth < a.bandwidth for a, b in zip(p0.links, p1.links))


def test_contrast_case_pays_by_construction():
    """Host-bound stages in one call, memory-cliff stages at the cliff's size: one plan, known
    in advance, that no equal split comes near (docs/SIMNETS.md, "Where +100 % appears")."""
    from umpipe_bench.plan import Plan
    from umpipe_bench.simnets import contrast_problem
    from umpipe_bench.simulator import gpipe_recurrence

    p = contrast_problem(4, 64)
    parts = tuple((64,) if s % 2 == 0 else (8,) * 8 for s in range(4))
    T = gpipe_recurrence(p, Plan(fwd=parts, bwd=parts, mode="stash"))
    assert best_edp(p, "stash", "gpipe")[1] / T - 1 > 1.0
    assert best_edp(p, "stash", "1f1b")[1] / T - 1 > 1.0
