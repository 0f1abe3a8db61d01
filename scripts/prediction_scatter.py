#!/usr/bin/env python
"""Prediction quality over many plans: measured against predicted iteration time.

A planner is only as good as the ordering its model gives. For each problem this executes, in
one run and alternately (docs/MODEL.md §5), at least 12 plans spread over the predicted range:

* EDP(M) under ``gpipe`` and ``1f1b`` at several M (stash);
* the plans of a planner (``--planner``, both memory modes) and the best in-flight-capped
  variant of its stash plan (docs/SCHEDULES.md);
* a few seeded random plans (cut bits, docs/MODEL.md §2).

Predictions come from a fresh profile (``--reprofile``, as ``scripts/measure_real.py``) or the
committed one. Writes ``<out>/scatter/<problem>.json``, ``<out>/prediction_scatter.png`` (one
panel per problem, with the y = x line) and ``<out>/prediction-quality.md`` (Spearman's rho,
median and worst |error|, umpipe_bench/runtime/stats.py).

    OMP_NUM_THREADS=1 python scripts/prediction_scatter.py gpt1-mini-s2 vgg16-mini-s2 vgg16-hr-s2
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from umpipe_bench.plan import Plan  # noqa: E402
from umpipe_bench.problem import Problem  # noqa: E402
from umpipe_bench.registry import get_problem  # noqa: E402
from umpipe_bench.runtime.comparison import predict, reprofile, save_plan  # noqa: E402
from umpipe_bench.runtime.errors import StageFailure  # noqa: E402
from umpipe_bench.runtime.execution import prepare, run_execution  # noqa: E402
from umpipe_bench.runtime.scatter import candidate_plans, markdown, plot  # noqa: E402
from umpipe_bench.runtime.stats import prediction_quality  # noqa: E402


def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    problem = get_problem(name)
    pdir = Path(args.out) / "scatter" / problem.name
    pdir.mkdir(parents=True, exist_ok=True)
    committed = problem
    fresh = dict(u.split("=", 1) for u in args.use_profile)
    if problem.name in fresh:
        problem = Problem.load(fresh[problem.name])
    elif args.reprofile:
        problem = Problem.load(reprofile(problem, pdir / "profile.json"))
    plans = candidate_plans(problem, args)
    files = [save_plan(p, pdir / f"{label}.json", sched)
             for label, p, sched in plans]
    ex = prepare(problem, [str(f) for f in files], iters=args.iters, warmup=args.warmup,
                 threads=1, peer=False)
    load_before = os.getloadavg()
    try:
        result = run_execution(ex)
    except StageFailure as exc:
        raise SystemExit(f"[{problem.name}] execute failed: {exc}") from None
    load_after = os.getloadavg()
    rows = ex.rows(result)
    pts = [{"plan": r["plan"], "schedule": r["schedule"], "mode": r["mode"],
            "kind": r["plan_kind"], "predicted": r["predicted_time"],
            "committed_predicted": predict(
                committed, Plan.load(pdir / f"{r['plan']}.json"), r["schedule"]),
            "measured": r["measured_median"]} for r in rows]
    quality = prediction_quality([p["predicted"] for p in pts], [p["measured"] for p in pts])
    data = {
        "problem": problem.name,
        "profile": ("fresh file " + fresh[problem.name] if problem.name in fresh
                    else "re-profiled (this run)" if args.reprofile else "committed file"),
        "iters": args.iters, "warmup": args.warmup,
        "loadavg": {"before": load_before, "after": load_after, "cpus": os.cpu_count()},
        "points": pts, "quality": quality,
        "quality_committed_profile": prediction_quality(
            [p["committed_predicted"] for p in pts], [p["measured"] for p in pts]),
        "command": " ".join(["python scripts/prediction_scatter.py", *sys.argv[1:]]),
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    (Path(args.out) / "scatter" / f"{problem.name}.json").write_text(
        json.dumps(data, indent=1) + "\n")
    return data



def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("problems", nargs="*",
                    default=["gpt1-mini-s2", "vgg16-mini-s2", "vgg16-hr-s2"])
    ap.add_argument("--planner", default="tidgap")
    ap.add_argument("--budget", default="evals:20000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--random", type=int, default=3, choices=(0, 1, 2, 3))
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--reprofile", action="store_true")
    ap.add_argument("--use-profile", action="append", default=[], metavar="NAME=FILE",
                    help="predict NAME with this (fresh) problem file instead of re-profiling")
    ap.add_argument("--out", default=str(ROOT / "results" / "real"))
    args = ap.parse_args()
    if args.iters < 1 or args.warmup < 0:
        raise SystemExit("prediction_scatter: --iters must be >= 1 and --warmup >= 0")
    for u in args.use_profile:
        name, _, path = u.partition("=")
        if not name or not Path(path).is_file():
            raise SystemExit(f"prediction_scatter: --use-profile {u!r}: expected NAME=FILE "
                             "with an existing file")
    for name in args.problems:
        measure(name, args)
    scatter = Path(args.out) / "scatter"
    all_data = [json.loads((scatter / f"{get_problem(n).name}.json").read_text())
                for n in args.problems]
    plot(all_data, Path(args.out) / "prediction_scatter.png")
    md = markdown(all_data)
    (Path(args.out) / "prediction-quality.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
