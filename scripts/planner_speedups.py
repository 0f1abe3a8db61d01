"""Best speedups of the planners over GPipe-EDP and 1F1B-EDP, next to the paper's table.

Runs each planner on each problem (both memory modes unless ``--modes``) and prints a
markdown table of ``T_base / T - 1`` per (problem, mode, planner), then the best per problem
beside UMPIPE's headline figures (docs/PAPER.md). Speedup columns use the best EDP(M) in the same
memory mode, M in 1..B.

    python scripts/planner_speedups.py --problems sim-s4-b16-s0 sim-s8-b64-s0 \\
        --planners tidgap:evals:200000 dgap:evals:20000 greedy-dp local-greedy
"""

from __future__ import annotations

import argparse
import json
import sys

from umpipe_bench.planners.evaluation.reference import best_edp
from umpipe_bench.registry import get_planner, get_problem

PAPER = {  # (vs GPipe, vs PipeDream) in %, UMPIPE TPDS 2025 abstract
    "gpt1-14": (13.89, 11.09),
    "vgg16": (17.11, 7.96),
    "sim": (170.0, 100.0),
}


def _paper(problem: str) -> str:
    key = "sim" if problem.startswith("sim-") else problem
    if key not in PAPER:
        return "-"
    g, p = PAPER[key]
    return f"{'>= ' if key == 'sim' else ''}+{g:.2f} % / +{p:.2f} %"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--problems", nargs="+", required=True)
    ap.add_argument("--planners", nargs="+", default=["tidgap:evals:200000"],
                    help="NAME or NAME:BUDGET (budget as in 'plan --budget')")
    ap.add_argument("--modes", nargs="+", default=["stash", "recompute"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--jsonl", help="also append one JSON row per run to this file")
    args = ap.parse_args()
    rows = []
    for pname in args.problems:
        problem = get_problem(pname)
        for mode in args.modes:
            _, Tg = best_edp(problem, mode, "gpipe")
            _, T1 = best_edp(problem, mode, "1f1b")
            for spec in args.planners:
                name, _, budget = spec.partition(":")
                for seed in args.seeds:
                    res = get_planner(name).plan(problem, mode=mode, budget=budget or None,
                                                 seed=seed)
                    row = {"problem": problem.name, "mode": mode, "planner": name,
                           "budget": budget, "seed": seed, "T": res.iteration_time,
                           "gpipe_T": Tg, "1f1b_T": T1,
                           "speedup_vs_gpipe": Tg / res.iteration_time - 1,
                           "speedup_vs_1f1b": T1 / res.iteration_time - 1,
                           "evaluations": res.evaluations, "wall_time": res.wall_time}
                    rows.append(row)
                    print(f"{problem.name} {mode} {name} seed {seed}: "
                          f"{100 * row['speedup_vs_gpipe']:+.2f} % vs GPipe, "
                          f"{100 * row['speedup_vs_1f1b']:+.2f} % vs 1F1B "
                          f"({res.evaluations} evals, {res.wall_time:.1f} s)",
                          file=sys.stderr, flush=True)
                    if args.jsonl:
                        with open(args.jsonl, "a", encoding="utf-8") as fh:
                            fh.write(json.dumps(row) + "\n")
    print("| problem | mode | planner | vs GPipe-EDP | vs 1F1B-EDP | evals | wall s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['problem']} | {r['mode']} | {r['planner']} | "
              f"{100 * r['speedup_vs_gpipe']:+.2f} % | {100 * r['speedup_vs_1f1b']:+.2f} % | "
              f"{r['evaluations']} | {r['wall_time']:.1f} |")
    print()
    print("| problem | best vs GPipe-EDP | best vs 1F1B-EDP | (planner, mode) | paper |")
    print("|---|---|---|---|---|")
    for pname in dict.fromkeys(r["problem"] for r in rows):
        mine = [r for r in rows if r["problem"] == pname]
        best = max(mine, key=lambda r: r["speedup_vs_gpipe"])
        best1 = max(mine, key=lambda r: r["speedup_vs_1f1b"])
        print(f"| {pname} | {100 * best['speedup_vs_gpipe']:+.2f} % | "
              f"{100 * best1['speedup_vs_1f1b']:+.2f} % | ({best['planner']}, {best['mode']}) | "
              f"{_paper(pname)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
