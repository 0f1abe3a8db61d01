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

Usage: ``python scripts/family_perf.py [--rounds 7] [--out results/perf/family.txt]``
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
    args = ap.parse_args(argv)
    lines = [f"command: python scripts/family_perf.py {' '.join(argv or sys.argv[1:])}".rstrip()]
    lines += evaluator_ratio(256, 14, 64, args.rounds, args.sample)
    lines += evaluator_ratio(256, 32, 256, max(3, args.rounds // 2), max(4, args.sample // 4))
    if not args.no_share:
        from umpipe_bench.registry import problem_names

        names = args.problems or [n for n in problem_names()]
        lines += scan_share(names, args.budget)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
