"""Is a TiDGAP run's outcome decided early? Best T at 1/8, 1/4, 1/2 and all of the budget.

Single populations (``islands=1``) of ``--population`` on one problem and mode, seeds
``0..N-1``, two processes at a time, one thread each. The evidence behind TiDGAP's islands
(results/perf/quality.md): runs that end far from the best plan are already far
behind after an eighth of the budget, so racing islands can drop them early.

    python scripts/early_outcome.py vgg16 stash --population 256 --seeds 12 \\
        > results/perf/early-outcome.txt
"""

from __future__ import annotations

import argparse
from multiprocessing import Pool

FRACTIONS = (0.125, 0.25, 0.5, 1.0)


def _one(args: tuple[str, str, int, int, str]) -> tuple[int, dict[float, float]]:
    problem, mode, seed, population, budget = args
    from umpipe_bench.registry import get_planner, get_problem

    res = get_planner("tidgap", threads=1, population=population, islands=1).plan(
        get_problem(problem), mode=mode, seed=seed, budget=budget)
    rows = list(res.history)
    out = {}
    for f in FRACTIONS:
        lim = f * res.evaluations
        out[f] = min(float(r.best) for r in rows if r.evaluations <= lim)
    return seed, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem")
    ap.add_argument("mode", choices=["stash", "recompute"])
    ap.add_argument("--population", type=int, default=256, help="default: 256")
    ap.add_argument("--budget", default="evals:200000", help="default: evals:200000")
    ap.add_argument("--seeds", type=int, default=12, help="seeds 0..N-1 (default: 12)")
    args = ap.parse_args()
    jobs = [(args.problem, args.mode, s, args.population, args.budget)
            for s in range(args.seeds)]
    with Pool(2) as pool:
        res = pool.map(_one, jobs)
    print(f"# python scripts/early_outcome.py {args.problem} {args.mode} --population "
          f"{args.population} --budget {args.budget} --seeds {args.seeds}")
    print("seed  " + "  ".join(f"best at {f:g}" for f in FRACTIONS))
    for seed, out in res:
        print(f"{seed:4d}  " + "  ".join(f"{out[f]:11.4f}" for f in FRACTIONS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
