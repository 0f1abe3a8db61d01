"""``umpipe-bench plan``: run one planner on one problem; report T and the speedups.

Speedups are against the best equal-microbatch plans in the same memory mode (docs/MODEL.md §2
EDP, best M in 1..B): GPipe (gpipe schedule) and 1F1B (the paper's PipeDream comparison),
written as ``T_baseline / T - 1`` (0.1389 = +13.89 %, the paper's convention and the
leaderboard's).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import UserInputError


def _parse_sets(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserInputError(f"--set {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="find a plan with a planner (DGAP, TiDGAP or a baseline) and print its speedup",
        description="Run a registered planner on a problem. Prints the predicted iteration "
        "time T and the speedup T_base / T - 1 over the best GPipe-EDP and 1F1B-EDP plans "
        "(best M in 1..B, same memory mode). Planner settings go through --set, e.g. "
        "--set population=256 --set backend=numpy.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--problem", required=True, help="problem name (see 'problems') or file")
    p.add_argument("--planner", default="tidgap",
                   help="planner name (dgap, tidgap, gpipe, 1f1b, local-greedy, greedy-dp, "
                   "random-search, optuna-tpe, exact, or any registered one)")
    p.add_argument("--mode", choices=("stash", "recompute"), default="stash",
                   help="memory mode (recompute frees the backward partitions)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--budget", default=None,
                   help="evals:N, gens:N, secs:X or a comma-separated mix (first reached stops); "
                   "default: the planner's own")
    p.add_argument("--set", dest="settings", action="append", metavar="KEY=VALUE",
                   help="a planner setting (repeatable)")
    p.add_argument("--out", metavar="FILE", help="write the plan JSON (for simulate/execute)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..planners.reference import best_edp
    from ._lookup import planner_class
    from ._lookup import problem as get_problem
    from ._paths import check_output_file, writing

    check_output_file(args.out, "--out")
    problem = get_problem(args.problem)
    settings = _parse_sets(args.settings)
    planner = planner_class(args.planner)(**settings)
    res = planner.plan(problem, mode=args.mode, budget=args.budget, seed=args.seed,
                       progress=not args.no_progress and sys.stderr.isatty())
    M_g, T_g = best_edp(problem, args.mode, "gpipe")
    M_1, T_1 = best_edp(problem, args.mode, "1f1b")
    T = res.iteration_time
    out: dict[str, Any] = {
        "planner": res.planner,
        "problem": problem.name,
        "mode": args.mode,
        "seed": args.seed,
        "budget": str(args.budget or planner.default_budget),
        "schedule": res.schedule,
        "iteration_time": T,
        "start_time": res.start_time,
        "gpipe_time": T_g,
        "gpipe_M": M_g,
        "1f1b_time": T_1,
        "1f1b_M": M_1,
        "speedup_vs_gpipe": T_g / T - 1.0,
        "speedup_vs_1f1b": T_1 / T - 1.0,
        "evaluations": res.evaluations,
        "wall_time": res.wall_time,
        "settings": res.settings,
        "plan_kind": res.plan.describe(),
    }
    if args.out:
        with writing(args.out, "--out"):
            res.plan.save(args.out)
        out["out"] = args.out
    if args.json:
        out["plan"] = res.plan.to_dict()
        print(json.dumps(out, default=str))
        return 0
    print(f"problem {problem.name} (S={problem.S}, B={problem.B}), mode {args.mode}, "
          f"planner {res.planner}, seed {args.seed}, budget {out['budget']}")
    print(f"iteration time T = {T * 1e3:.4f} ms  [{res.plan.describe()}, {res.schedule} "
          f"schedule]  ({res.evaluations} evaluations, {res.wall_time:.2f} s)")
    if res.start_time is not None:
        print(f"starting point   = {res.start_time * 1e3:.4f} ms")
    print(f"vs GPipe-EDP  (M={M_g:>3}, {T_g * 1e3:.4f} ms): {100 * (T_g / T - 1):+.2f} %")
    print(f"vs 1F1B-EDP   (M={M_1:>3}, {T_1 * 1e3:.4f} ms): {100 * (T_1 / T - 1):+.2f} %")
    if problem.S <= 16:
        for s in range(problem.S):
            fwd, bwd = res.plan.fwd[s], res.plan.bwd[s]
            line = f"  stage {s:>2} fwd {list(fwd)}"
            if args.mode == "recompute":
                line += f"  bwd {list(bwd)}"
            print(line)
    if args.out:
        print(f"wrote plan: {args.out}")
    return 0
