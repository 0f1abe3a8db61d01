"""``umpipe-bench certify``: exact optima and proven bounds from CP-SAT (docs/CERTIFY.md)."""

from __future__ import annotations

import argparse
import json
import sys

from ._numbers import seconds, whole


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "certify",
        help="prove optimal values or lower bounds with the CP-SAT solver (optional extra)",
        description="Solve plan selection (partitions and op order) exactly with OR-Tools CP-SAT "
        "on costs rounded down to integer units, re-simulate the solver's plan, and print the "
        "proven bound, the best value and whether they agree (optimal). --order any: every "
        "order of a stage's operations the dependencies allow (the capped family and 1F1B "
        "included); gpipe: all forwards before the first backward. --record stores the "
        "bounds in the best-known file (and a better plan of the capped family, when the "
        "solver's order is one). Two-stage problems under --order any are solved exactly by a "
        "dynamic program instead of the solver (recompute mode: when no transfer is longer "
        "than a stage-0 forward; otherwise, or when it does not finish, a dynamic-program "
        "bound first) (docs/CERTIFY.md). Needs the extra 'certify' (pip install "
        "'umpipe-bench[certify]').",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("problems", nargs="+", metavar="PROBLEM", help="problem names or files")
    p.add_argument("--mode", choices=("stash", "recompute", "both"), default="both",
                   help="memory mode(s)")
    p.add_argument("--order", choices=("any", "gpipe", "both"), default="both",
                   help="orders of the operations the model allows (docs/CERTIFY.md)")
    p.add_argument("--time-limit", type=seconds(0.0, open_low=True), default=60.0,
                   metavar="SECS", help="time per (problem, mode, order): a program's "
                   "(two-stage, end-stages) and the solver's search together")
    p.add_argument("--workers", type=whole(1, 64), default=1, help="solver threads")
    p.add_argument("--decide", type=seconds(0.0), default=0.0, metavar="SECS",
                   help="after the search, when it ends short of optimal: decision solves "
                   "'is there a schedule with T <= K?' of at most SECS each, K from just "
                   "below the best value down by bisection (docs/CERTIFY.md \"Decisions\"); "
                   "0: none")
    p.add_argument("--split", type=seconds(0.0), default=0.0, metavar="SECS",
                   help="after the search and the decisions, when still short of optimal: "
                   "the last-stage split: the last-stage partitions that the stage relaxation "
                   "(where it leaves too many: the end-stages program) leaves below the best "
                   "value, ruled out by decision solves of at most SECS each, one per "
                   "backward partition; a line per solve on stderr (docs/CERTIFY.md \"The "
                   "last-stage split\"); 0: none")
    p.add_argument("--solver-only", action="store_true",
                   help="no program (two-stage, end-stages): the solver alone on every "
                   "problem")
    p.add_argument("--record", action="store_true",
                   help="store bounds (and better capped plans) in the best-known file")
    p.add_argument("--file", default=None, metavar="JSON",
                   help="the best-known file (default: umpipe_bench/problems/best_known.json)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..certify.solve import certify, require_solver
    from ._lookup import problem as get_problem

    require_solver()
    modes = ("stash", "recompute") if args.mode == "both" else (args.mode,)
    orders = ("any", "gpipe") if args.order == "both" else (args.order,)
    problems = [get_problem(n) for n in args.problems]  # every name checked before solving
    for problem in problems:
        for mode in modes:
            for order in orders:
                hints = _hints(problem.name, mode, args.file)
                c = certify(problem, mode, order=order, time_limit=args.time_limit,
                            workers=args.workers, hints=hints, decide=args.decide,
                            programs=not args.solver_only, split=args.split,
                            progress=_progress(problem.name, mode))
                row = {"problem": c.problem, "mode": mode, "order": order,
                       "status": c.status, "by": c.stats.get("method", "cpsat"),
                       "value": c.value, "bound": c.bound,
                       "gap": c.gap, "optimal": c.optimal, "from_solver": c.from_solver,
                       "wall_s": round(c.wall, 2)}
                if args.record:
                    row["recorded"] = _record(problem, c, args.file)
                if args.json:
                    print(json.dumps(row))
                else:
                    print(f"{c.problem:<18} {mode:<9} {order:<5} {c.status:<8} "
                          f"value {c.value * 1e3:11.6f} ms  bound {c.bound * 1e3:11.6f} ms  "
                          f"gap {100 * c.gap:7.4f} %  {'optimal' if c.optimal else ''}"
                          f"  ({c.wall:.1f} s)")
                sys.stdout.flush()
    return 0


def _progress(name: str, mode: str):
    """A line on stderr per step of a long proof."""
    def say(line: str) -> None:
        print(f"{name} {mode}: {line}", file=sys.stderr, flush=True)
    return say


def _hints(name: str, mode: str, path: str | None) -> list:
    """The best-known plans of a problem and mode (none when the file has no entry)."""
    from ..bench.best_known import BestKnown
    from ..plan import Plan

    book = BestKnown(path)
    out = []
    for family in ("capped", "gpipe"):
        e = book.entries.get((name, mode, family))
        if e is not None:
            out.append(Plan.load(book.path.parent / e.plan_file))
    return out


def _record(problem, c, path: str | None) -> list[str]:
    """Store ``c``'s bound in the entries it bounds, and its plan when it is a better plan of
    the capped family; what was stored, one phrase each."""
    import datetime
    import tempfile
    from pathlib import Path

    from ..bench import best_known as bk
    from ..bench.baselines import problem_digest
    from ..certify.caps import capped_plan

    done = []
    by = f"{c.stats.get('method', 'cpsat')} order={c.order} {c.status.lower()}"
    if any(d["status"] == "INFEASIBLE" for d in c.stats.get("decisions", ())):
        by += " decide"
    if c.stats.get("split_proved"):
        by += " split"
    if c.stats.get("solver_bound", -1.0) < c.bound:  # the solver proved less than this
        by = "relaxation"
    families = ("capped", "gpipe") if c.order == "any" else ("gpipe",)
    if c.from_solver:
        plan = capped_plan(problem, c.plan, c.ops, c.value) if c.order == "any" else c.plan
        if plan is not None:
            with tempfile.TemporaryDirectory() as tmp:
                f = Path(tmp) / "plan.json"
                plan.save(f)
                from ..simulator import simulate

                T = simulate(problem, plan).iteration_time
                rep = bk.update([bk.Candidate(problem.name, c.mode, f, T, "cpsat",
                                              datetime.date.today().isoformat(),
                                              problem_digest(problem))], path)
                done += [f"plan {e.family}" for e in rep.accepted]
    for family in families:
        key = (problem.name, c.mode, family)
        if key in bk.BestKnown(path).entries:
            e = bk.record_bound(key, c.bound, by, path)
            done.append(f"bound {family}{' optimal' if e.optimal else ''}")
    return done
