"""The capped-family evaluator against its reference, and the EDP scans' share of a run
(docs/SCHEDULES.md; issue: "a fast evaluator for the family").

Measures, interleaved round by round (A B A B; medians), on one machine at one moment:

* the numba family evaluator (:class:`umpipe_bench.planners.evaluation.family.FamilyEvaluator`) on a
  population of P random plans with random caps, per plan;
* the reference, one plan at a time: :func:`umpipe_bench.simulator.simulate` (the rule in
  Python, then the list simulation), on a sample of the same plans;
* the gpipe population evaluator (the recurrence kernel) on the same bits, for the cost of
  the family's generality.

Then, per registered problem and mode, the wall time of both EDP scans (gpipe and 1f1b, all
M, fresh cache) against one default TiDGAP run of the same problem.

With ``--shortcuts PROBLEM...`` instead: the kernel's two shortcuts (one decode when the
backward bits are the forward ones; no peaks when the call has no memory cap to check)
against its full pass, per problem and mode, on the same random plans (same T asserted).

Usage: ``python scripts/family_perf.py [--rounds 7] [--out results/perf/family.txt]``,
``python scripts/family_perf.py --shortcuts vgg16 sim-s16-b64-s1 --out
results/perf/family-shortcuts.txt``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from umpipe_bench.planners.evaluation.encoding import random_bits
from umpipe_bench.planners.evaluation.evaluator import PopulationEvaluator, bits_to_plan
from umpipe_bench.planners.evaluation.family import FamilyEvaluator
from umpipe_bench.simulator import simulate
from umpipe_bench.synthetic import synthetic_problem


def evaluator_ratio(P: int, S: int, B: int, rounds: int, sample: int) -> list[str]:
    prob = synthetic_problem(S=S, B=B, seed=0)
    rng = np.random.default_rng(0)
    fb = random_bits(rng, P, S, B)
    caps = rng.integers(1, B + 1, size=(P, S))
    fam = FamilyEvaluator(prob, "stash")
    gp = PopulationEvaluator(prob, "stash", "numba")
    plans = [bits_to_plan(fb[i], None, "stash").with_caps(caps[i]) for i in range(sample)]
    fam(fb, None, caps)  # compile / load the cache
    gp(fb)
    t_fam, t_ref, t_gp = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fam(fb, None, caps)
        t_fam.append((time.perf_counter() - t0) / P)
        t0 = time.perf_counter()
        for p in plans:
            simulate(prob, p)
        t_ref.append((time.perf_counter() - t0) / sample)
        t0 = time.perf_counter()
        gp(fb)
        t_gp.append((time.perf_counter() - t0) / P)
    ratios = [r / f for r, f in zip(t_ref, t_fam)]
    gratio = [f / g for f, g in zip(t_fam, t_gp)]
    return [
        f"P={P}, S={S}, B={B}, stash, random caps in 1..B; {rounds} interleaved rounds",
        f"  family evaluator (numba)  {statistics.median(t_fam) * 1e6:9.2f} us/plan",
        f"  reference simulate()      {statistics.median(t_ref) * 1e6:9.2f} us/plan "
        f"(sample of {sample} plans)",
        f"  gpipe recurrence (numba)  {statistics.median(t_gp) * 1e6:9.2f} us/plan "
        "(caps ignored)",
        f"  speedup over the reference: median {statistics.median(ratios):.0f}x "
        f"(min {min(ratios):.0f}x, max {max(ratios):.0f}x; goal >= 100x)",
        f"  family / gpipe kernel: median {statistics.median(gratio):.1f}x",
    ]


def shortcuts(names: list[str], P: int, rounds: int) -> list[str]:
    """The kernel's two shortcuts against the full pass on P random plans with random caps, per
    problem and mode, interleaved round by round: ``tied`` (stash: the backward bits are the
    forward ones, decoded once) and ``memory`` off (no peaks: what a call without a memory cap
    asks for). Times per plan, and the full pass over each (same T asserted)."""
    from umpipe_bench.planners.evaluation._family_kernels import family_pass
    from umpipe_bench.registry import get_problem

    out = [f"the family kernel's shortcuts, P={P} random plans, random caps in 1..B, "
           f"{rounds} interleaved rounds (us/plan; full = both off):",
           f"  {'problem/mode':<26} {'full':>8} {'tied':>8} {'no peaks':>9} {'both':>8} "
           f"{'full/both':>9}"]
    for name in names:
        prob = get_problem(name)
        for mode in ("stash", "recompute"):
            rng = np.random.default_rng(0)
            fb = random_bits(rng, P, prob.S, prob.B)
            bb = fb.copy() if mode == "stash" else random_bits(rng, P, prob.S, prob.B)
            caps = rng.integers(1, prob.B + 1, size=(P, prob.S))
            ev = FamilyEvaluator(prob, mode)
            tables = ev._t + ev._m
            variants = {"full": (bb, False, True), "tied": (fb, True, True),
                        "no peaks": (bb, False, False), "both": (fb, True, False)}
            if mode == "recompute":  # nothing to tie
                variants = {k: v for k, v in variants.items() if not v[1]}
            times: dict[str, list[float]] = {k: [] for k in variants}
            Ts = {}
            for r in range(rounds + 1):
                for k, (b2, tied, memory) in variants.items():
                    T = np.empty(P)
                    peak = np.zeros((P, prob.S))
                    t0 = time.perf_counter()
                    family_pass(fb, b2, caps, False, *tables, T, peak, tied, memory)
                    if r:  # the first round compiles or loads the cache
                        times[k].append((time.perf_counter() - t0) / P)
                    Ts[k] = T
            assert all(np.array_equal(Ts["full"], T) for T in Ts.values())
            med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
            last = "both" if "both" in med else "no peaks"
            out.append(f"  {name + '/' + mode:<26} {med['full']:8.2f} "
                       f"{med.get('tied', float('nan')):8.2f} {med['no peaks']:9.2f} "
                       f"{med.get('both', float('nan')):8.2f} {med['full'] / med[last]:8.2f}x")
    return out


def scan_share(names: list[str], budget: str | None) -> list[str]:
    from umpipe_bench.planners.evaluation import reference
    from umpipe_bench.registry import get_planner, get_problem

    out = [f"EDP scans (gpipe + 1f1b, all M, fresh cache) vs one default TiDGAP run "
           f"(budget {budget or 'default'}, seed 0):",
           f"  {'problem/mode':<28} {'scans (s)':>9} {'tidgap (s)':>10} {'share':>7}"]
    for name in names:
        prob = get_problem(name)
        for mode in ("stash", "recompute"):
            reference.clear_cache()
            t0 = time.perf_counter()
            reference.best_edp(prob, mode, "gpipe")
            reference.best_edp(prob, mode, "1f1b")
            scans = time.perf_counter() - t0
            reference.clear_cache()
            res = get_planner("tidgap").plan(prob, mode=mode, budget=budget, seed=0)
            out.append(f"  {name + '/' + mode:<28} {scans:9.4f} {res.wall_time:10.2f} "
                       f"{scans / res.wall_time:7.2%}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    ap.add_argument("--sample", type=int, default=32, help="plans the reference times")
    ap.add_argument("--problems", nargs="*", default=None,
                    help="problems for the scan share (default: every registered one)")
    ap.add_argument("--budget", default=None, help="TiDGAP budget (default: its own)")
    ap.add_argument("--no-share", action="store_true", help="skip the scan-share part")
    ap.add_argument("--out", type=Path, default=None, help="also write the report here")
    ap.add_argument("--shortcuts", nargs="+", default=None, metavar="PROBLEM",
                    help="instead: the kernel's shortcuts (one decode for tied bits, no peaks) "
                    "against its full pass on these problems")
    args = ap.parse_args(argv)
    lines = [f"command: python scripts/family_perf.py {' '.join(argv or sys.argv[1:])}".rstrip()]
    if args.shortcuts:
        lines += shortcuts(args.shortcuts, 256, args.rounds)
        return _report(lines, args.out)
    lines += evaluator_ratio(256, 14, 64, args.rounds, args.sample)
    lines += evaluator_ratio(256, 32, 256, max(3, args.rounds // 2), max(4, args.sample // 4))
    if not args.no_share:
        from umpipe_bench.registry import problem_names

        names = args.problems or [n for n in problem_names()]
        lines += scan_share(names, args.budget)
    return _report(lines, args.out)


def _report(lines: list[str], out: Path | None) -> int:
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
