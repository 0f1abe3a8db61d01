"""Evaluations (and seconds) TiDGAP takes to come within 0.5 % of a reference T, per seed.

Runs TiDGAP at ``evals:2000000`` (two restart rounds of 1,000,000: the first is exactly the
first round of a default run on gpt1-14 and vgg16, whose default is eight such rounds) and
reads the first history record within ``1.005 * REF``. Evaluations do not depend on the
machine's load; the seconds do. One JSON line per seed.

    PYTHONPATH=$PWD python scripts/evals_to_target.py gpt1-14 stash 2.7603219439121047 \\
        0,1,2,3,4,5,6,7,8,9 [KEY=VALUE ...] > out.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys

from umpipe_bench.planners.algorithms.tidgap import TiDGAP
from umpipe_bench.registry import get_problem


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("problem", help="registered problem name")
    ap.add_argument("mode", choices=("stash", "recompute"))
    ap.add_argument("ref", type=float, help="the reference T in seconds (e.g. the best known)")
    ap.add_argument("seeds", help="comma-separated seeds, e.g. 0,1,2")
    ap.add_argument("settings", nargs="*", metavar="KEY=VALUE", help="TiDGAP settings")
    args = ap.parse_args()
    problem, mode, ref = args.problem, args.mode, args.ref
    seeds = [int(x) for x in args.seeds.split(",")]
    sets = dict(a.split("=", 1) for a in args.settings)  # strings: the planner coerces them
    for seed in seeds:
        r = TiDGAP(threads=1, **sets).plan(get_problem(problem), mode=mode, seed=seed,
                                           budget="evals:2000000")
        hit = next((x for x in r.history if x.best <= ref * 1.005), None)
        print(json.dumps({"problem": problem, "mode": mode, "seed": seed, "settings": sets,
                          "T": r.iteration_time,
                          "evals_to_0.5": hit.evaluations if hit else None,
                          "s_to_0.5": round(hit.wall_time, 3) if hit else None}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
