"""``umpipe-bench best-known``: show, check and update umpipe_bench/problems/best_known.json."""

from __future__ import annotations

import argparse
import sys

from ._numbers import seconds, whole
from ._paths import path_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "best-known",
        help="show, check or update the best known value of every problem, mode and schedule",
        description="The best known iteration time per (problem, mode, schedule: gpipe, or capped, "
        "which includes GPipe and 1F1B plans), in "
        "umpipe_bench/problems/best_known.json with the plan that achieves it. 'update' "
        "re-simulates every plan of a leaderboard and records those that reproduce their value and "
        "beat the entry in place; it refuses (and lists) any it cannot reproduce. 'check' "
        "re-simulates every entry and checks its proven bound (exit 1 if one fails; "
        "docs/CERTIFY.md). 'bound' records the lower bound (umpipe_bench.bound: closed form and "
        "stage relaxation) with every entry whose bound is lower or missing.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("action", choices=("show", "check", "update", "bound"))
    p.add_argument("--from", type=path_arg, dest="source", default="results/leaderboard.csv",
                   metavar="CSV",
                   help="update: the leaderboard whose plans are candidates")
    p.add_argument("--prove", type=seconds(0.0, open_low=True), default=None, metavar="SECS",
                   help="check: also prove every solver-proven bound again with CP-SAT, at most "
                   "SECS each (the extra 'certify'; docs/CERTIFY.md)")
    p.add_argument("--workers", type=whole(1, 64), default=1,
                   help="check --prove: the solver's threads")
    p.add_argument("--problem", action="append", default=None, metavar="NAME",
                   help="check: only the entries of this problem (may be given again; "
                   "default: every entry)")
    p.add_argument("--file", type=path_arg, default=None, metavar="JSON",
                   help="the best-known file (default: umpipe_bench/problems/best_known.json)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..bench import best_known as bk
    from ..errors import UserInputError

    if args.action == "show":
        book = bk.BestKnown(args.file)
        for e in sorted(book.entries.values(), key=lambda e: e.key):
            gap = "" if e.gap is None else f"gap {100 * e.gap:6.2f} %"
            print(f"{e.problem:<18} {e.mode:<9} {e.family:<7} {e.value * 1e3:12.4f} ms  "
                  f"{e.planner:<14} {e.date}  {gap}{'  optimal' if e.optimal else ''}")
        gaps = bk.missing(args.file)
        print(f"{len(book.entries)} entries; {len(gaps)} (problem, mode, schedule) without one")
        return 0
    if args.action == "check":
        if args.prove is not None:
            from ..certify.solve import require_solver

            require_solver()
        entries = bk.BestKnown(args.file).entries.values()
        if args.problem is not None:
            for name in args.problem:
                if not any(e.problem == name for e in entries):
                    raise UserInputError(f"--problem {name!r}: no entry of it in the "
                                         "best-known file")
            entries = [e for e in entries if e.problem in args.problem]

        def say(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

        bad = bk.check(args.file, prove=args.prove, problems=args.problem,
                       workers=args.workers, progress=say)
        for line in bad:
            print(f"does not reproduce: {line}", file=sys.stderr)
        print(f"{len(entries) - len(bad)} entries reproduce, {len(bad)} do not")
        return 1 if bad else 0
    if args.action == "bound":
        return _bounds(args.file)
    if not Path(args.source).is_file():
        raise UserInputError(f"--from {args.source!r}: no such leaderboard file")
    from ._paths import check_output_file, writing

    path = bk.default_path() if args.file is None else args.file
    check_output_file(path, "--file")  # before re-simulating every candidate
    with writing(path, "--file"):
        rep = bk.update(bk.candidates_from_leaderboard(args.source), args.file)
    for e in rep.accepted:
        print(f"recorded {e.problem} {e.mode} {e.family}: {e.value * 1e3:.4f} ms "
              f"({e.planner}, {e.schedule})")
    for line in rep.refused:
        print(f"refused {line}", file=sys.stderr)
    print(f"{len(rep.accepted)} recorded, {rep.kept} not better than the entry in place, "
          f"{len(rep.refused)} refused")
    return 1 if rep.refused else 0


def _bounds(path: str | None) -> int:
    """``best-known bound``: the closed-form and relaxation bound into every entry, named by
    the one that gives it ("closed form" where the relaxation is lower or not computed)."""
    from ..bench import best_known as bk
    from ..bound import lower_bound, stage_bound
    from ..registry import get_problem

    book = bk.BestKnown(path)
    raised = 0
    for key, e in sorted(book.entries.items()):
        problem = get_problem(e.problem)
        lb = lower_bound(problem, e.mode)
        if e.bound is None or lb > e.bound:
            by = "relaxation" if lb > stage_bound(problem, e.mode).value else "closed form"
            bk.record_bound(key, lb, by, path)
            raised += 1
    print(f"{raised} bounds recorded, {len(book.entries) - raised} entries keep a higher one")
    return 0
