#!/usr/bin/env python
"""Predicted UEDP gain of candidate workloads (how vgg16-stem-s2 was chosen).

For each problem file (or registered name): the best EDP(M) plan under ``gpipe`` and ``1f1b``
in both memory modes (umpipe_bench/planners/evaluation/reference.py), the best plan a planner finds
in each mode, and the gain = (best of the four EDP times) / (best planner time). Also prints each
stage's cost per sample at every profiled size, the shape that decides the gain: a stage whose
cost per sample grows with the microbatch wants small ones, a stage with a large cost per call
wants few (docs/MODEL.md §1).

    python scripts/workload_gain.py results/real/candidates/*.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from umpipe_bench.planners.evaluation.reference import best_edp  # noqa: E402
from umpipe_bench.problem import Problem  # noqa: E402
from umpipe_bench.registry import get_planner, get_problem  # noqa: E402


def load(name: str) -> Problem:
    return Problem.load(name) if Path(name).exists() else get_problem(name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("problems", nargs="+")
    ap.add_argument("--planner", default="tidgap")
    ap.add_argument("--budget", default="evals:40000")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print("| problem | layers per stage | best EDP (schedule, mode, M, ms) | best "
          f"{args.planner} (mode, ms) | predicted gain | {args.planner} stash plan |")
    print("|---|---|---|---|---|---|")
    for name in args.problems:
        p = load(name)
        edp = min(((sched, mode, *best_edp(p, mode, sched)) for sched in ("gpipe", "1f1b")
                   for mode in ("stash", "recompute")), key=lambda r: r[3])
        res = {mode: get_planner(args.planner).plan(p, mode=mode, budget=args.budget,
                                                     seed=args.seed)
               for mode in ("stash", "recompute")}
        mode, best = min(res.items(), key=lambda kv: kv[1].iteration_time)
        prov = p.provenance
        print(f"| {p.name} | {prov.get('layers_per_stage')} | {edp[0]}, {edp[1]}, M={edp[2]}, "
              f"{edp[3] * 1e3:.0f} | {mode}, {best.iteration_time * 1e3:.0f} | "
              f"{edp[3] / best.iteration_time:.3f} | {list(res['stash'].plan.fwd)} |")
        for s in range(p.S):
            per = " ".join(f"{m}:{p.fwd(s, m) / m * 1e3:.0f}/{p.bwd(s, m) / m * 1e3:.0f}"
                           for m in p.sizes)
            print(f"|  | stage {s} ms per sample fwd/bwd by size | {per} | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
