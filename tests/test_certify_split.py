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
from umpipe_bench.certify.split import end_stage_candidates, last_stage_candidates
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


def _walk_holds_every_schedule(case, mode: str, fixed: bool, walk) -> None:
    """Brute force over every plan and order of ``case``: each schedule at or below the target
    runs its last stage on a pair ``walk(problem, mode, target)`` keeps (at the optimum at
    least the optimal pairs), never listed twice, in stash mode of equal sizes; a subset of the
    relaxation's pairs."""
    p = family_problem(*case)
    if fixed:
        p = _fixed_costs(p)
    rows = list(_schedules(p, mode))
    best = min(T for T, _, _ in rows)
    for slack in (0.0, 0.02, 0.1, 0.5):
        target = best * (1 + slack) * (1 + 1e-12)
        got = walk(p, mode, target)
        assert got is not None and len(set(got)) == len(got)
        kept = set(got)
        need = {(P, Q) for T, P, Q in rows if T <= target}
        assert need and need <= kept, (slack, need - kept)
        assert kept <= set(last_stage_candidates(p, mode, target, max_candidates=10**6))
        if mode == "stash":
            assert all(P == Q for P, Q in kept)


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-s{c[1]}-b{c[2]}-{c[4]}")
@pytest.mark.parametrize("mode", MODES)
def test_candidates_hold_every_schedule_below_the_target(case, mode, fixed):
    _walk_holds_every_schedule(case, mode, fixed, last_stage_candidates)


# problems of three or more stages, for the end-stages walk
ENDS = [("slowlink", 3, 2, 1.0, 2), ("launch", 3, 2, 1.0, 4), ("mix", 4, 2, 1.0, 6),
        ("launch", 3, 3, 1.0, 7), ("knee", 3, 3, 0.5, 8)]


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("case", ENDS, ids=lambda c: f"{c[0]}-s{c[1]}-b{c[2]}-{c[4]}")
@pytest.mark.parametrize("mode", MODES)
def test_end_stage_pairs_hold_every_schedule_below_the_target(case, mode, fixed):
    _walk_holds_every_schedule(case, mode, fixed, end_stage_candidates)

@pytest.mark.parametrize("mode", MODES)
def test_the_end_stages_keep_fewer_pairs_and_give_up_where_told(mode, monkeypatch):
    """On sim-s4-b8-s0, 2 % above the bound, the end stages rule out most of the relaxation's
    pairs; nothing is kept below the relaxation; the caps, the clock and ``S < 3`` give
    None."""
    p = get_problem("sim-s4-b8-s0")
    lb = lower_bound(p, mode)
    assert end_stage_candidates(p, mode, lb * (1 - 1e-6)) == []
    ends = end_stage_candidates(p, mode, lb * 1.02)
    relax = last_stage_candidates(p, mode, lb * 1.02)
    assert ends and set(ends) < set(relax) and 2 * len(ends) < len(relax)
    wide = end_stage_candidates(p, mode, lb * 1.1)
    assert wide and len(wide) > len(ends)
    assert end_stage_candidates(p, mode, lb * 1.1, max_candidates=len(wide) - 1) is None
    assert end_stage_candidates(p, mode, lb * 1.1, max_nodes=1) is None
    assert end_stage_candidates(get_problem("sim-s2-b8-s0"), mode, 1.0) is None
    from umpipe_bench.certify import split

    monkeypatch.setattr(split, "END_ROOM", 4)  # out of room: again with four times as much
    assert end_stage_candidates(p, mode, lb * 1.1) == wide
    monkeypatch.setattr(split, "END_ROOM_MAX", 16)  # ... up to the most
    assert end_stage_candidates(p, mode, lb * 1.1) is None
    monkeypatch.setattr(split, "END_STEP", 1)  # the clock is read between steps
    assert end_stage_candidates(p, mode, lb * 1.1, expired=lambda: True) is None
    monkeypatch.setattr(split, "END_ROOM_MAX", 1 << 24)
    assert end_stage_candidates(p, mode, lb * 1.1, expired=lambda: False) == wide

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



@pytest.mark.parametrize("name,mode,optimum", KNOWN[:2])
def test_the_split_through_the_end_stages_proves_known_optima(name, mode, optimum,
                                                              monkeypatch):
    """Where the relaxation's walk gives up, the split takes the end stages' pairs, one
    decision per backward partition, and proves the same optima."""
    from umpipe_bench.certify import split
    from umpipe_bench.certify.solve import certify

    monkeypatch.setattr(split, "last_stage_candidates", lambda *a, **k: None)
    c = certify(get_problem(name), mode, time_limit=0.01, programs=False, split=30)
    assert c.optimal and c.stats["split_proved"]
    assert c.value == pytest.approx(optimum, rel=1e-5)
    lists = [x for x in c.stats["split"] if "candidates" in x]
    assert lists and all(x["from"] == "end stages" for x in lists)
    steps = [x for x in c.stats["split"] if "status" in x]
    # the last list's pairs, one solve per backward partition, each infeasible
    last = len(c.stats["split"]) - 1 - c.stats["split"][::-1].index(lists[-1])
    tail = c.stats["split"][last + 1:]
    assert tail and all(x["status"] == "INFEASIBLE" for x in tail)
    assert sum(len(x["forwards"]) for x in tail) == lists[-1]["candidates"]
    assert len({tuple(x["backward"]) for x in tail}) == len(tail)
    assert steps

def test_cli_split_option(tmp_path):
    run = [sys.executable, "-m", "umpipe_bench", "certify", "sim-s3-b6-s0", "--mode", "stash",
           "--order", "any", "--time-limit", "0.01", "--solver-only", "--split", "30", "--json"]
    out = subprocess.run(run, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["optimal"] and row["value"] == pytest.approx(70.3301e-3, rel=1e-5)
    # a line per step on stderr: the list, then each solve
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("sim-s3-b6-s0 stash: split below ")
    assert "last-stage pairs from the relaxation" in lines[0]
    n = int(lines[0].split(", ")[1].split()[0])
    assert [ln.split(": ")[1] for ln in lines[1:]] == \
        [f"split solve {i} of {n}" for i in range(1, n + 1)]
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
    """``--record`` stores a bound the split proved as ``... split`` (the split's steps on
    stderr), and ``best-known check --prove`` proves it again, asking for the split, once for
    both families."""
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
    # the split's steps on stderr, each named by problem and mode
    steps = [ln for ln in out.stderr.splitlines() if "split" in ln]
    assert steps and all(ln.startswith("sim-s3-b6-s0 recompute: split ") for ln in steps)
    entries = json.loads(f.read_text(encoding="utf-8"))["entries"]
    capped = next(e for e in entries if e["family"] == "capped")
    assert capped["optimal"] and capped["bound_by"].endswith(" split")
    from umpipe_bench.certify import solve

    calls = []

    def spy(problem, mode, **kw):
        calls.append(kw)
        return certify(problem, mode, **kw)

    certify = solve.certify
    lines: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(solve, "certify", spy)
        assert bk.check(f, prove=30.0, workers=2, progress=lines.append) == []
    # here the solver proves the bound within the limit, so no split step runs; a step of a
    # longer proof is named by its entry
    assert lines == []
    calls[0]["progress"]("split below 1 ms")
    assert lines == ["sim-s3-b6-s0 recompute capped: split below 1 ms"]
    # one order-any proof for both families, from the best plan of either, as recorded
    gpipe = next(e for e in entries if e["family"] == "gpipe")
    assert gpipe["bound_by"] == capped["bound_by"]
    assert len(calls) == 1 and calls[0]["split"] == 30.0 and calls[0]["workers"] == 2
    assert len(calls[0]["hints"]) == 2
    assert np.isfinite(capped["bound"])
