"""The last-stage split (umpipe_bench.certify.split, docs/CERTIFY.md "The last-stage split"):
the last-stage partitions it keeps hold every schedule below the target (every plan and
order of tiny problems), and the split proves known optima that the search alone does not."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest

from umpipe_bench.bound import lower_bound
from umpipe_bench.certify.split import last_stage_candidates
from umpipe_bench.plan import Plan
from umpipe_bench.registry import get_problem
from umpipe_bench.simnets import family_problem
from umpipe_bench.simulator import SimulationError, simulate

from .test_certify import MODES, _compositions, _fixed_costs, _orders

pytest.importorskip("ortools")


def _schedules(problem, mode: str):
    """``(T, last stage's forward sizes, its backward sizes)`` of every plan in every order."""
    S, B = problem.S, problem.B
    comps = _compositions(B)
    for P in itertools.product(comps, repeat=S):
        for Q in ([P] if mode == "stash" else itertools.product(comps, repeat=S)):
            plan = Plan(tuple(P), tuple(Q), mode)
            for ops in itertools.product(*[_orders(s, P[s], Q[s]) for s in range(S)]):
                try:
                    T = simulate(problem, plan, "orders", ops=list(ops)).iteration_time
                except SimulationError:
                    continue  # a deadlocking combination of orders
                yield T, tuple(P[-1]), tuple(Q[-1])


CASES = [("mix", 2, 3, 1.0, 0), ("launch", 2, 3, 1.0, 1), ("slowlink", 3, 2, 1.0, 2),
         ("knee", 2, 2, 0.5, 3), ("launch", 3, 2, 1.0, 4), ("mix", 2, 3, 1.0, 5)]


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-s{c[1]}-b{c[2]}-{c[4]}")
@pytest.mark.parametrize("mode", MODES)
def test_candidates_hold_every_schedule_below_the_target(case, mode, fixed):
    """Brute force over every plan and order: each schedule at or below the target runs its
    last stage on a kept pair; at the optimum at least the optimal pairs are kept."""
    p = family_problem(*case)
    if fixed:
        p = _fixed_costs(p)
    rows = list(_schedules(p, mode))
    best = min(T for T, _, _ in rows)
    for slack in (0.0, 0.02, 0.1, 0.5):
        target = best * (1 + slack) * (1 + 1e-12)
        got = last_stage_candidates(p, mode, target)
        assert got is not None
        kept = set(got)
        need = {(P, Q) for T, P, Q in rows if T <= target}
        assert need and need <= kept, (slack, need - kept)
        if mode == "stash":
            assert all(P == Q for P, Q in kept)


@pytest.mark.parametrize("mode", MODES)
def test_nothing_is_kept_below_the_relaxation_and_caps_give_up(mode):
    p = get_problem("sim-s3-b6-s0")
    lb = lower_bound(p, mode)
    assert last_stage_candidates(p, mode, lb * (1 - 1e-6)) == []
    above = last_stage_candidates(p, mode, lb * 1.05)
    assert above  # some pairs are kept 5 % above the bound ...
    assert last_stage_candidates(p, mode, lb * 1.05, max_candidates=len(above) - 1) is None
    assert last_stage_candidates(p, mode, lb * 1.05, max_nodes=1) is None  # ... and caps hold


# (problem, mode, its optimum: best_known.json, proven by the solver or a program)
KNOWN = [("sim-s3-b6-s0", "recompute", 89.6908e-3), ("sim-s3-b6-s0", "stash", 70.3301e-3),
         ("sim-s2-b8-s0", "recompute", 174.3999e-3)]


@pytest.mark.parametrize("name,mode,optimum", KNOWN)
def test_the_split_proves_known_optima_the_search_alone_does_not(name, mode, optimum):
    """From a search of 0.01 s (no program), the split finds the optimum and proves it; the
    same search without it proves neither."""
    from umpipe_bench.certify.solve import OPT_TOL, certify

    p = get_problem(name)
    alone = certify(p, mode, time_limit=0.01, programs=False)
    assert not alone.optimal
    c = certify(p, mode, time_limit=0.01, programs=False, split=30)
    assert c.optimal and c.stats["split_proved"]
    assert c.value == pytest.approx(optimum, rel=1e-5)
    assert c.bound <= c.value and c.value - c.bound <= OPT_TOL * c.value
    # every split solve either ruled its pair out or found a faster plan
    steps = [x for x in c.stats["split"] if "status" in x]
    assert steps and all(x["status"] in ("INFEASIBLE", "OPTIMAL", "FEASIBLE") for x in steps)


def test_cli_split_option(tmp_path):
    run = [sys.executable, "-m", "umpipe_bench", "certify", "sim-s3-b6-s0", "--mode", "stash",
           "--order", "any", "--time-limit", "0.01", "--solver-only", "--split", "30", "--json"]
    out = subprocess.run(run, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["optimal"] and row["value"] == pytest.approx(70.3301e-3, rel=1e-5)
    bad = subprocess.run([*run[:-3], "--split", "-1"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "argument --split: expected a finite number of seconds >= 0" in \
        bad.stderr.strip().splitlines()[-1]


def test_split_time_is_checked():
    from umpipe_bench.certify.solve import certify
    from umpipe_bench.errors import UserInputError

    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(UserInputError, match="split time"):
            certify(get_problem("sim-s2-b8-s0"), "stash", split=bad)


def test_record_names_the_split(tmp_path):
    """``--record`` stores a bound the split proved as ``... split``, and ``best-known check
    --prove`` proves it again by the split."""
    from umpipe_bench.bench import best_known as bk

    f = tmp_path / "best_known.json"
    src = json.loads(bk.default_path().read_text(encoding="utf-8"))
    keep = [e for e in src["entries"] if e["problem"] == "sim-s3-b6-s0"
            and e["mode"] == "recompute"]
    for e in keep:
        for key in ("bound", "bound_by", "optimal"):
            e.pop(key, None)
        plan = bk.default_path().parent / e["plan_file"]
        (tmp_path / e["plan_file"]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / e["plan_file"]).write_text(plan.read_text(encoding="utf-8"),
                                               encoding="utf-8")
    f.write_text(json.dumps(dict(src, entries=keep)), encoding="utf-8")
    run = [sys.executable, "-m", "umpipe_bench", "certify", "sim-s3-b6-s0", "--mode",
           "recompute", "--order", "any", "--time-limit", "0.01", "--solver-only", "--split",
           "30", "--record", "--file", str(f), "--json"]
    out = subprocess.run(run, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["optimal"], row
    entries = json.loads(f.read_text(encoding="utf-8"))["entries"]
    capped = next(e for e in entries if e["family"] == "capped")
    assert capped["optimal"] and capped["bound_by"].endswith(" split")
    assert bk.check(f, prove=30.0) == []
    assert np.isfinite(capped["bound"])
