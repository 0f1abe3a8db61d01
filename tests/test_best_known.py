"""umpipe_bench/problems/best_known.json: only plans that re-simulate to their value are recorded."""

from __future__ import annotations

import json

import pytest

from umpipe_bench.bench import best_known as bk
from umpipe_bench.bench.config import parse_config
from umpipe_bench.bench.runner import run_matrix
from umpipe_bench.cli import main
from umpipe_bench.plan import Plan
from umpipe_bench.registry import get_problem, problem_names
from umpipe_bench.simulator import simulate

PROBLEM = "sim-s3-b6-s0"


def _candidate(tmp_path, M, claimed=None, mode="stash", name="p", digest=None):
    problem = get_problem(PROBLEM)
    plan = Plan.edp(problem.S, problem.B, M, mode=mode)
    path = tmp_path / f"{name}.json"
    plan.save(path)
    T = simulate(problem, plan, "gpipe").iteration_time
    return bk.Candidate(PROBLEM, mode, path, T if claimed is None else claimed, "edp",
                        "2026-11-30", digest), T


def test_a_reproduced_plan_is_recorded_in_both_families_and_checks(tmp_path):
    f = tmp_path / "bk" / "best_known.json"
    f.parent.mkdir()
    c, T = _candidate(tmp_path, 2)
    rep = bk.update([c], f)
    assert not rep.refused and {e.family for e in rep.accepted} == {"gpipe", "capped"}
    book = bk.BestKnown(f)
    assert book.value(PROBLEM, "stash", "gpipe") == T == book.value(PROBLEM, "stash")
    assert (f.parent / book.entries[(PROBLEM, "stash", "gpipe")].plan_file).exists()
    assert bk.check(f) == []


def test_a_value_that_does_not_reproduce_is_refused_and_nothing_written(tmp_path):
    f = tmp_path / "best_known.json"
    c, T = _candidate(tmp_path, 2, claimed=None)
    lie = bk.Candidate(c.problem, c.mode, c.plan_path, T * 0.99, "liar", c.date)
    rep = bk.update([lie], f)
    assert rep.accepted == [] and "re-simulates to" in rep.refused[0]
    assert not f.exists()
    other = bk.Candidate(c.problem, c.mode, c.plan_path, T, "x", c.date, "0" * 16)
    assert "another version of the problem" in bk.update([other], f).refused[0]


def test_only_a_better_plan_replaces_an_entry(tmp_path):
    f = tmp_path / "best_known.json"
    cands = {M: _candidate(tmp_path, M, name=f"m{M}") for M in (1, 2, 3, 6)}
    best_M = min(cands, key=lambda M: cands[M][1])
    worst_M = max(cands, key=lambda M: cands[M][1])
    bk.update([cands[worst_M][0]], f)
    rep = bk.update([cands[M][0] for M in cands], f)
    assert bk.BestKnown(f).value(PROBLEM, "stash", "gpipe") == cands[best_M][1]
    assert rep.kept >= 2  # the worst one, at least, was not better than what was in place


def test_check_names_an_entry_whose_value_was_edited(tmp_path):
    f = tmp_path / "best_known.json"
    c, T = _candidate(tmp_path, 3)
    bk.update([c], f)
    data = json.loads(f.read_text())
    data["entries"][0]["value"] = T / 2
    f.write_text(json.dumps(data))
    bad = bk.check(f)
    assert len(bad) == 1 and "re-simulates to" in bad[0]
    assert main(["best-known", "check", "--file", str(f)]) == 1


def test_check_of_one_problem_counts_its_entries_only(capsys):
    """``--problem`` checks that problem's entries alone (and names one with none)."""
    assert main(["best-known", "check", "--problem", "gpt1-s4"]) == 0
    n = sum(e.problem == "gpt1-s4" for e in bk.BestKnown().entries.values())
    assert n >= 2 and capsys.readouterr().out.strip() == f"{n} entries reproduce, 0 do not"
    assert main(["best-known", "check", "--problem", "nope"]) == 2
    assert "--problem 'nope': no entry of it" in capsys.readouterr().err


def test_a_file_that_is_not_a_best_known_file_is_one_line(tmp_path, capsys):
    f = tmp_path / "best_known.json"
    f.write_text('{"schema": "other"}')
    assert main(["best-known", "show", "--file", str(f)]) == 2
    assert "not a best-known file" in capsys.readouterr().err


def test_update_from_a_bench_leaderboard_then_show(tmp_path, capsys):
    cfg = parse_config({"bench": {"name": "t", "problems": [PROBLEM], "seeds": [0],
                                  "modes": ["stash", "recompute"], "budgets": ["evals:300"]},
                        "planners": [{"name": "gpipe"}, {"name": "random-search"}]}, "t.toml")
    run_matrix(cfg, tmp_path / "r", progress=False)
    f = tmp_path / "best_known.json"
    assert main(["best-known", "update", "--from", str(tmp_path / "r" / "leaderboard.csv"),
                 "--file", str(f)]) == 0
    book = bk.BestKnown(f)
    assert {(p, m) for p, m, _ in book.entries} == {(PROBLEM, "stash"), (PROBLEM, "recompute")}
    assert bk.check(f) == []
    assert main(["best-known", "show", "--file", str(f)]) == 0
    assert "4 entries" in capsys.readouterr().out


def test_the_committed_file_covers_every_registered_problem_and_reproduces():
    path = bk.default_path()
    if not path.exists():
        pytest.fail(f"{path} is missing; build it with 'umpipe-bench best-known update'")
    book = bk.BestKnown(path)
    assert bk.missing(path, problem_names()) == []
    assert bk.check(path) == []
    for (p, m, f), e in book.entries.items():
        gpipe = book.value(p, m, "gpipe")  # every registered problem has one (missing, above)
        if f == "capped" and gpipe is not None:
            assert e.value <= gpipe


def test_split_backward_tables_leave_the_plan_digest_alone():
    """Profiling the split backward into a problem file must not orphan its best-known plans
    and leaderboard rows: the digest of our plans' costs ignores those tables; the full one
    does not."""
    import dataclasses

    from umpipe_bench.bench.baselines import problem_digest
    from umpipe_bench.registry import get_problem

    p = get_problem("sim-s4-b16-s0")
    stages = tuple(dataclasses.replace(
        st, ibwd=st.bwd, ribwd=st.rbwd, wbwd=st.bwd,
        memory=dataclasses.replace(st.memory, w_held_bytes_per_sample=1.0)) for st in p.stages)
    q = dataclasses.replace(p, stages=stages,
                            provenance={**p.provenance, "split_backward": {"date": "x"}})
    assert problem_digest(q) == problem_digest(p)
    assert problem_digest(q, split=True) != problem_digest(p, split=True)
    r = dataclasses.replace(p, stages=(dataclasses.replace(p.stages[0], opt=1.0), *stages[1:]))
    assert problem_digest(r) != problem_digest(p)


def test_a_recorded_bound_is_checked_and_kept_by_a_better_plan(tmp_path):
    """The bound: at most the value, optimal exactly when they agree (docs/CERTIFY.md)."""
    from dataclasses import replace

    from umpipe_bench.bound import lower_bound

    f = tmp_path / "best_known.json"
    c, T = _candidate(tmp_path, 3, name="m3")
    bk.update([c], f)
    key = (PROBLEM, "stash", "capped")
    lb = lower_bound(get_problem(PROBLEM), "stash")
    e = bk.record_bound(key, lb, "relaxation", f)
    assert e.bound == lb and not e.optimal and bk.check(f) == []
    with pytest.raises(bk.BestKnownError, match="exceeds the value"):
        bk.record_bound(key, T * 1.01, "x", f)
    book = bk.BestKnown(f)
    book.entries[key] = replace(book.entries[key], optimal=True)
    book.save()
    assert "optimal is True" in bk.check(f)[0]
    book.entries[key] = replace(book.entries[key], optimal=False, bound=T * 1.5)
    book.save()
    assert "exceeds the value" in bk.check(f)[0]
    book.entries[key] = replace(book.entries[key], bound=lb)
    book.save()
    better = min((_candidate(tmp_path, M, name=f"n{M}") for M in (1, 2, 6)), key=lambda x: x[1])
    if better[1] < T:
        bk.update([better[0]], f)
        assert bk.BestKnown(f).entries[key].bound == lb  # a bound outlives the plan
    assert bk.check(f) == []
    assert bk.proven_bound(PROBLEM, "stash", f) >= lb


def test_bound_names_the_bound_that_gives_it(tmp_path, capsys):
    """`best-known bound` records the larger of the closed form and the stage relaxation under
    the name of the one that gives it: the relaxation is not computed past its MAX_WORK."""
    from umpipe_bench.bound import stage_bound
    from umpipe_bench.certify.relax import MAX_WORK

    f = tmp_path / "best_known.json"
    small, _ = _candidate(tmp_path, 3, name="m3")
    big = get_problem("sim-s4-b256-s0")
    assert big.S * big.B**3 > MAX_WORK
    plan = Plan.edp(big.S, big.B, 8)
    plan.save(tmp_path / "big.json")
    T = simulate(big, plan, "gpipe").iteration_time
    bk.update([small, bk.Candidate(big.name, "stash", tmp_path / "big.json", T, "edp",
                                   "2026-12-06")], f)
    assert main(["best-known", "bound", "--file", str(f)]) == 0
    assert "4 bounds recorded" in capsys.readouterr().out
    book = bk.BestKnown(f)
    for (p, m, _fam), e in book.entries.items():
        closed = stage_bound(get_problem(p), m).value
        if p == PROBLEM:  # the relaxation is the larger there
            assert e.bound_by == "relaxation" and e.bound > closed
        else:
            assert e.bound_by == "closed form" and e.bound == closed
    assert bk.check(f) == []


def _raise_bounds(args):
    """Worker: raise one entry's bound ``n`` times; count the times a read found its own last
    bound gone (another process's write, made from an older read, over it)."""
    f, key, lo, hi, n = args
    lost = 0
    for i in range(n):
        e = bk.BestKnown(f).entries[key]
        if i and e.bound < lo + (hi - lo) * (i - 1) / n:
            lost += 1
        bk.record_bound(key, lo + (hi - lo) * i / n, "test", f)
    return lost


def test_bounds_recorded_by_two_processes_at_once_are_all_kept(tmp_path):
    """Two processes raising the bounds of two entries of one file at the same time: every
    write is a read-change-write under the file's lock, so neither ever finds its own bound
    undone and both final bounds are the last ones written."""
    import multiprocessing as mp

    from umpipe_bench.bound import lower_bound

    f = tmp_path / "best_known.json"
    for mode in ("stash", "recompute"):
        bk.update([_candidate(tmp_path, 3, mode=mode, name=f"m3{mode}")[0]], f)
    jobs = []
    for mode in ("stash", "recompute"):
        key = (PROBLEM, mode, "capped")
        lo = lower_bound(get_problem(PROBLEM), mode)
        jobs.append((str(f), key, lo * 0.5, lo, 150))
    with mp.get_context("spawn").Pool(2) as pool:
        lost = pool.map(_raise_bounds, jobs)
    assert lost == [0, 0]
    book = bk.BestKnown(f)
    for _f, key, lo, hi, n in jobs:
        assert book.entries[key].bound == lo + (hi - lo) * (n - 1) / n


def test_prove_reproves_a_bound_over_the_orders_it_was_proven_for(tmp_path, monkeypatch):
    """``check --prove``: a bound proven over every order (``order=any``) is proven again over
    every order, also on a gpipe-family entry (it bounds that family too); an ``order=gpipe``
    bound over GPipe orders."""
    from umpipe_bench.bound import lower_bound
    from umpipe_bench.certify import solve

    f = tmp_path / "best_known.json"
    c, _ = _candidate(tmp_path, 3, name="m3")
    bk.update([c], f)
    lb = lower_bound(get_problem(PROBLEM), "stash")
    seen, hinted = [], []

    class Done:
        bound = float("inf")

    def fake_certify(problem, mode, *, order, hints=None, **kwargs):
        seen.append(order)
        hinted.append(0 if hints is None else len(hints))
        return Done()

    monkeypatch.setattr(solve, "certify", fake_certify)
    for i, (family, by, want) in enumerate((("gpipe", "cpsat order=any optimal", "any"),
                                            ("gpipe", "two-stage dp order=any optimal", "any"),
                                            ("gpipe", "cpsat order=gpipe feasible", "gpipe"),
                                            ("capped", "cpsat order=any feasible", "any"),
                                            ("capped", "end-stages dp order=any feasible",
                                             "any"),
                                            ("gpipe", "end-stages dp order=any feasible",
                                             "any"))):
        e = bk.record_bound((PROBLEM, "stash", family), lb * (1 + 1e-4 * (i + 1)), by, f)
        assert e.bound_by == by
        seen.clear()
        hinted.clear()
        assert bk.check(f, prove=1.0) == []
        assert want in seen, (family, by, seen)
        # a program prunes at the best plan it is given: the entry's own and, for a bound over
        # every order, the other family's (the bound holds for it too)
        program = by.startswith(("two-stage", "end-stages"))
        assert any(hinted) == program, (by, hinted)
        if program:
            assert max(hinted) == len(bk.BestKnown(f).entries), (by, hinted)


def test_prove_reproves_a_split_bound_by_the_split(tmp_path, monkeypatch):
    """``check --prove``: a bound the last-stage split proved (``... split``) is proven again
    by the split, from the plans of the problem and mode's entries (an order-any bound: the
    entry's own and its sibling's, as the recording run started from the best of them), with
    the seconds given per split solve."""
    from umpipe_bench.bound import lower_bound
    from umpipe_bench.certify import solve

    f = tmp_path / "best_known.json"
    c, _ = _candidate(tmp_path, 3, name="m3")
    bk.update([c], f)
    lb = lower_bound(get_problem(PROBLEM), "stash")
    calls = []

    class Done:
        bound = float("inf")

    def fake_certify(problem, mode, *, order, hints=None, split=0.0, decide=0.0, **kwargs):
        calls.append((order, 0 if hints is None else len(hints), split, decide))
        return Done()

    monkeypatch.setattr(solve, "certify", fake_certify)
    assert len(bk.BestKnown(f).entries) == 2  # the plan runs under GPipe: both families
    for i, (by, want) in enumerate((("cpsat order=any optimal split", (2, 2.5, 0.0)),
                                    ("cpsat order=any optimal decide split", (2, 2.5, 2.5)),
                                    ("cpsat order=any feasible", (0, 0.0, 0.0)))):
        e = bk.record_bound((PROBLEM, "stash", "capped"), lb * (1 + 1e-4 * (i + 1)), by, f)
        assert e.bound_by == by
        calls.clear()
        assert bk.check(f, prove=2.5) == []
        assert calls and calls[0][1:] == want, (by, calls)
