"""TiDGAP's quality over seeds: T per seed, default budget, and the time to near the best plan.

Runs a planner (default ``tidgap``) on each problem and memory mode for seeds 0..9 and writes
one JSON line per run: T, wall time, evaluations and the history's ``(wall_time, best)`` pairs
(typed :class:`umpipe_bench.planners.search.loop.History`, or the DEAP Logbook rows of older
builds), so runs of two builds can be compared afterwards with ``--table``:

    python scripts/quality_seeds.py --build A --out a.jsonl     # on build A
    python scripts/quality_seeds.py --build B --out b.jsonl     # on build B
    python scripts/quality_seeds.py --table a.jsonl b.jsonl

The table's reference is the best T any run in the given files found (per problem and mode);
"time to 0.5 %" is the wall time at which a run's best first came within 0.5 % of it (the
median over seeds; runs that never do count as their whole wall time, marked ``>``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

PROBLEMS = ("gpt1-14", "vgg16")
MODES = ("stash", "recompute")


def _curve(history: Any) -> list[tuple[float, float]]:
    """``(wall time, best)`` where the best improves (plus the first and last records)."""
    rows = [dict(r) for r in history]
    out: list[tuple[float, float]] = []
    for i, r in enumerate(rows):
        t, b = float(r.get("wall_time", r.get("time"))), float(r["best"])
        if not out or b < out[-1][1] or i == len(rows) - 1:
            out.append((round(t, 4), b))
    return out


def run(args: argparse.Namespace) -> int:
    from umpipe_bench.cli.plan import _parse_sets
    from umpipe_bench.registry import get_planner, get_problem

    settings = _parse_sets(args.settings)

    out = open(args.out, "a", encoding="utf-8") if args.out else sys.stdout
    for name in args.problems:
        problem = get_problem(name)
        for mode in args.modes:
            for seed in args.seeds:
                res = get_planner(args.planner, **settings).plan(problem, mode=mode, seed=seed,
                                                     budget=args.budget)
                row = {"build": args.build, "problem": name, "mode": mode, "seed": seed,
                       "T": res.iteration_time, "wall_time": res.wall_time,
                       "evaluations": res.evaluations, "curve": _curve(res.history)}
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(f"{args.build} {name} {mode} seed {seed}: T={res.iteration_time:.6g} "
                      f"{res.wall_time:.1f}s", file=sys.stderr)
    return 0


def table(paths: list[str]) -> str:
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines()
            if line.strip()]
    best: dict[tuple[str, str], float] = {}
    for r in rows:
        k = (r["problem"], r["mode"])
        best[k] = min(best.get(k, float("inf")), r["T"])
    lines = ["| problem | mode | build | median gap | worst gap | seeds within 2 % | "
             "within 0.5 % | median time to 0.5 % (s) | median wall (s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["problem"], r["mode"], r["build"]), []).append(r)
    for (prob, mode, build), rs in sorted(groups.items()):
        ref = best[(prob, mode)]
        gaps = [r["T"] / ref - 1 for r in rs]
        reach = []
        never = 0
        for r in rs:
            hit = next((t for t, b in r["curve"] if b <= ref * 1.005), None)
            if hit is None:
                never += 1
                reach.append(r["wall_time"])
            else:
                reach.append(hit)
        med_reach = statistics.median(reach)
        mark = ">" if never * 2 >= len(rs) else ""
        lines.append(
            f"| {prob} | {mode} | {build} | {statistics.median(gaps):+.2%} | {max(gaps):+.2%} | "
            f"{sum(g <= 0.02 for g in gaps)}/{len(rs)} | {sum(g <= 0.005 for g in gaps)}/"
            f"{len(rs)} | {mark}{med_reach:.2f} | "
            f"{statistics.median(r['wall_time'] for r in rs):.2f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--planner", default="tidgap")
    ap.add_argument("--problems", nargs="+", default=list(PROBLEMS))
    ap.add_argument("--modes", nargs="+", default=list(MODES))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    ap.add_argument("--budget", default=None, help="default: the planner's own")
    ap.add_argument("--set", dest="settings", action="append", metavar="KEY=VALUE",
                    help="a planner setting (repeatable; default: the planner's defaults)")
    ap.add_argument("--build", default="after", help="label of this build in the table")
    ap.add_argument("--out", default=None, help="append JSON lines here (default: stdout)")
    ap.add_argument("--table", nargs="+", default=None, metavar="JSONL",
                    help="print the comparison table of these files instead of running")
    args = ap.parse_args()
    if args.table:
        print(table(args.table))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
