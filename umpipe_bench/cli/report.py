"""``umpipe-bench report``: a markdown leaderboard and plots from a leaderboard CSV."""

from __future__ import annotations

import argparse

from ._paths import path_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write report.md and PNG plots from results/leaderboard.csv",
        description="Summarize a leaderboard (written by 'umpipe-bench bench'): the best plan "
        "per problem and mode beside the paper's figures, every planner's mean speedup, search "
        "cost, predicted vs measured times; plots of speedups, convergence (by evaluations and "
        "wall time) and the Gantt chart of each problem's best plan above its best GPipe plan.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--in", type=path_arg, dest="csv", default="results/leaderboard.csv",
                   metavar="CSV",
                   help="the leaderboard to report on")
    p.add_argument("--out", type=path_arg, default=None, metavar="DIR",
                   help="folder for report.md and the PNGs (default: the CSV's folder)")
    p.add_argument("--no-plots", action="store_true", help="only report.md")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shlex
    import sys

    from ..bench.report import write_report
    from ._paths import check_output_dir

    check_output_dir(args.out, "--out")
    command = "umpipe-bench " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["report"] else None

    def warn(msg: str) -> None:
        print(f"umpipe-bench report: warning: {msg} (left out)", file=sys.stderr)

    files = write_report(args.csv, args.out, plots=not args.no_plots, command=command,
                         warn=warn)
    for f in files:
        print(f"wrote {f}")
    return 0
