"""Extra restart rounds of a TiDGAP run, alone: rounds FIRST..LAST of ``restarts=R`` on vgg16.

Round ``r`` of a run with seed ``s`` has its own random stream (``SeedSequence(s).spawn(R)[r]``,
the same for any R > r), a 1,000,000-evaluation share, and the first round's seed plans. So
the best of eight rounds is about min(the four-round default's result, rounds 4-7 run here);
about, because a run's last round gets the rest of the budget, not exactly its share.

    PYTHONPATH=. python scripts/extra_rounds.py --mode stash --seeds 0 2 3 --out F
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from umpipe_bench.planners.algorithms.tidgap import TiDGAP
from umpipe_bench.planners.search.base import Budget
from umpipe_bench.planners.search.loop import SearchLoop, Termination
from umpipe_bench.registry import get_problem


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="vgg16", help="default: vgg16")
    ap.add_argument("--mode", default="stash", help="default: stash")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="default: 0")
    ap.add_argument("--rounds", type=int, nargs=2, default=[4, 7], metavar=("FIRST", "LAST"),
                    help="default: 4 7")
    ap.add_argument("--of", type=int, default=8, help="R, the run's rounds (default: 8)")
    ap.add_argument("--share", type=int, default=1_000_000,
                    help="evaluations per round (default: 1000000)")
    ap.add_argument("--out", default=None, help="append JSON lines here (default: stdout only)")
    args = ap.parse_args()
    problem = get_problem(args.problem)
    budget = Budget(evaluations=args.share)
    for seed in args.seeds:
        planner = TiDGAP(threads=1)
        settings = dict(planner.config)
        settings["restarts"] = args.of
        objective = planner.make_objective(problem, args.mode, settings)
        streams = np.random.SeedSequence(seed).spawn(args.of)
        first = planner._engine(problem, args.mode, settings, budget, streams[0], objective)
        seeds = first.islands[0].make_seeds(objective.evaluate)
        times = []
        for r in range(args.rounds[0], args.rounds[1] + 1):
            engine = planner._engine(problem, args.mode, settings, budget, streams[r],
                                     objective)
            engine.preset_seeds = seeds
            SearchLoop(objective, Termination(budget)).run(engine)
            times.append(engine.best_time)
        row = {"problem": args.problem, "mode": args.mode, "seed": seed,
               "rounds": list(range(args.rounds[0], args.rounds[1] + 1)), "T": times}
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
