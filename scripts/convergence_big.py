"""Does TiDGAP's default budget converge at S = 64, B = 1024? And greedy-dp's share of it.

Runs TiDGAP with its default budget and with twice that on ``synthetic_problem(64, 1024, 0)``
(TiDGAP's ``--seed``, 0 by default) and times greedy-dp (the seeding construction) in the same
process. Goal: at most 1 % further gain from doubling the budget; greedy-dp at most
10 % of a default run.

    python scripts/convergence_big.py [--modes stash recompute] >> results/perf/convergence.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from umpipe_bench.planners.algorithms.greedy import greedy_dp_plan
from umpipe_bench.planners.algorithms.tidgap import TiDGAP
from umpipe_bench.planners.search.base import Budget
from umpipe_bench.synthetic import synthetic_problem


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=["stash"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", default=None,
                    help="evals:N to double instead of TiDGAP's default on this problem")
    ap.add_argument("--threads", default="auto", help="TiDGAP's threads setting")
    args = ap.parse_args()
    problem = synthetic_problem(64, 1024, 0)
    default = Budget.parse(args.budget or TiDGAP().budget_for(problem))
    assert default.evaluations is not None
    double = Budget(evaluations=2 * default.evaluations)
    greedy_dp_plan(synthetic_problem(3, 8, 0), "stash")  # compile
    print(f"Command: `python scripts/convergence_big.py --modes {' '.join(args.modes)}"
          f"{f' --budget {args.budget}' if args.budget else ''} --threads {args.threads}"
          f"{f' --seed {args.seed}' if args.seed else ''}`\n")
    print("| mode | budget | T default | T doubled | gain from doubling | run s (default) | "
          "greedy-dp s | greedy share | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in args.modes:
        t0 = time.perf_counter()
        greedy_dp_plan(problem, mode)
        g = time.perf_counter() - t0
        a = TiDGAP(threads=args.threads).plan(problem, mode=mode, seed=args.seed,
                                              budget=default)
        b = TiDGAP(threads=args.threads).plan(problem, mode=mode, seed=args.seed, budget=double)
        print(f"| {mode} | evals:{default.evaluations} | {a.iteration_time:.4f} | "
              f"{b.iteration_time:.4f} | "
              f"{1 - b.iteration_time / a.iteration_time:.2%} | {a.wall_time:.1f} | {g:.2f} | "
              f"{g / a.wall_time:.1%} | {os.getloadavg()[0]:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
