"""Evaluations (and seconds) TiDGAP takes to come within 0.5 % of a reference T, per seed.

Runs TiDGAP at ``evals:2000000`` (two restart rounds of 1,000,000: the first is exactly the
first round of a default run on gpt1-14 and vgg16, whose default is eight such rounds) and
reads the first history record within ``1.005 * REF``. Evaluations do not depend on the
machine's load; the seconds do. One JSON line per seed.

    PYTHONPATH=$PWD python scripts/evals_to_target.py gpt1-14 stash 2.7603219439121047 \\
        0,1,2,3,4,5,6,7,8,9 [KEY=VALUE ...] > out.jsonl
"""

from __future__ import annotations

import json
import sys

from umpipe_bench.planners.algorithms.tidgap import TiDGAP
from umpipe_bench.registry import get_problem


def main() -> int:
    if len(sys.argv) < 5:
        print(__doc__)
        return 2
    problem, mode, ref = sys.argv[1], sys.argv[2], float(sys.argv[3])
    seeds = [int(x) for x in sys.argv[4].split(",")]
    sets = dict(a.split("=", 1) for a in sys.argv[5:])  # strings: the planner coerces them
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
