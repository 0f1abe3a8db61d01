"""The constructed extreme of docs/SIMNETS.md ("Where +100 % appears"): host-bound stages next
to memory-cliff stages. Prints the best planner against the best GPipe-EDP / 1F1B-EDP plans and
the bound, and draws the Gantt chart.

    PYTHONPATH=$PWD python scripts/contrast_case.py [--out results/published]
"""

from __future__ import annotations

import argparse

from umpipe_bench.bound import lower_bound
from umpipe_bench.plan import Plan
from umpipe_bench.planners.evaluation.reference import best_edp
from umpipe_bench.registry import get_planner
from umpipe_bench.simnets import contrast_problem
from umpipe_bench.simulator import simulate
from umpipe_bench.trace import save_gantt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", default="results/published")
    ap.add_argument("--budget", default="evals:30000")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    gantt = None
    for S, B in ((4, 64), (8, 64)):
        p = contrast_problem(S, B)
        for mode in ("stash", "recompute"):
            M_g, T_g = best_edp(p, mode, "gpipe")
            M_1, T_1 = best_edp(p, mode, "1f1b")
            best = min((get_planner("tidgap").plan(p, mode=mode, budget=args.budget, seed=s)
                        for s in range(args.seeds)), key=lambda r: r.iteration_time)
            T = min(best.iteration_time, T_g)
            print(f"{p.name} {mode:9s} T {T * 1e3:8.2f} ms  vs GPipe-EDP(M={M_g}) "
                  f"{T_g / T - 1:+.1%}  vs 1F1B-EDP(M={M_1}) {T_1 / T - 1:+.1%}  gap to bound "
                  f"{T / lower_bound(p, mode) - 1:.1%}")
            if (S, mode) == (4, "stash"):
                gantt = [simulate(p, best.plan, "gpipe"),
                         simulate(p, Plan.edp(S, B, M_g, mode), "gpipe"),
                         simulate(p, Plan.edp(S, B, M_1, mode), "1f1b")]
                titles = [f"{p.name} stash: tidgap UEDP (gpipe)",
                          f"best GPipe-EDP, M = {M_g}", f"best 1F1B-EDP, M = {M_1}"]
    if gantt:
        path = f"{args.out}/heterogeneity-contrast-gantt.png"
        save_gantt(gantt, path, titles=titles)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
