"""TiDGAP against a leaderboard's TiDGAP rows: the same cells rerun, means over seeds compared.

For every ``tidgap`` row of the leaderboard (default ``results/published/leaderboard.csv``)
without an error, TiDGAP runs again with the row's problem, mode, seed, budget and memory cap,
and the table gives, per problem, mode and memory cap, the mean T over the row's seeds in the
leaderboard and rerun, and the change (rerun / leaderboard - 1). Fixed budgets are
reproducible, so a change is a change of the planner.

    PYTHONPATH=$PWD python scripts/leaderboard_check.py > results/perf/leaderboard-check.md
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys

from umpipe_bench.planners.algorithms.tidgap import TiDGAP
from umpipe_bench.registry import get_problem


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leaderboard", default="results/published/leaderboard.csv")
    ap.add_argument("--planner", default="tidgap")
    args = ap.parse_args()
    rows = [r for r in csv.DictReader(open(args.leaderboard, newline=""))
            if r["planner"] == args.planner and not r.get("error") and r.get("T_pred")]
    groups: dict[tuple[str, str, str, str], list[tuple[float, float]]] = {}
    for r in rows:
        problem = get_problem(r["problem"])
        cap = r.get("memory_cap") or "none"
        if cap != "none":
            caps = [int(float(x)) for x in r["memory_cap_bytes"].split(";")]
            problem = problem.with_memory_cap(caps[0] if len(caps) == 1 else caps)
        res = TiDGAP().plan(problem, mode=r["mode"], seed=int(r["seed"]), budget=r["budget"])
        groups.setdefault((r["problem"], r["mode"], cap, r["budget"]), []).append(
            (float(r["T_pred"]), res.iteration_time))
    print(f"Leaderboard `{args.leaderboard}`, planner `{args.planner}`, rerun: "
          "`PYTHONPATH=$PWD python scripts/leaderboard_check.py`.\n")
    print("| problem | mode | memory cap | budget | seeds | mean T, leaderboard | mean T, rerun | "
          "change |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for (p, mode, cap, budget), pairs in groups.items():
        then = statistics.fmean(a for a, _ in pairs)
        now = statistics.fmean(b for _, b in pairs)
        change = now / then - 1.0
        worst = max(worst, change)
        print(f"| {p} | {mode} | {cap} | {budget} | {len(pairs)} | {then:.6g} | {now:.6g} | "
              f"{100 * change:+.3f} % |")
    print(f"\nLargest change: {100 * worst:+.3f} % over {len(groups)} cells.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
