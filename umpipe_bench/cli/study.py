"""``umpipe-bench study``: the heterogeneity map (docs/SIMNETS.md, "The map")."""

from __future__ import annotations

import argparse

from ..bench.heterogeneity import DEFAULTS
from ..errors import UserInputError
from ._numbers import MAX_JOBS, whole
from ._paths import path_arg

#: Where a study writes unless told: a folder of the working directory that no commit holds,
#: so a trial run never overwrites the committed map in results/published.
DEFAULT_OUT = "umpipe-study"


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        msg = f"expected comma-separated numbers, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        msg = f"expected comma-separated integers, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None


def _words(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _csv(xs: tuple[object, ...]) -> str:
    """A default as the text a user would type (argparse parses string defaults with type)."""
    return ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in xs)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "study",
        help="the heterogeneity map: where unequal microbatches pay, family by family",
        description="Run the best planner, the best GPipe-EDP and 1F1B-EDP plans and the lower "
        "bound on the simulation-network families (docs/SIMNETS.md) over a grid of "
        "heterogeneity h, shapes, memory modes and seeds. Rows go to OUT/heterogeneity.csv, "
        "rewritten atomically after each; a rerun resumes. Then writes the summary (median, "
        "10-90 % band), a markdown table, the map (heterogeneity.png) and the Gantt chart of "
        "the largest speedup.",
    )
    p.add_argument("--out", type=path_arg, default=DEFAULT_OUT, metavar="DIR",
                   help="output folder; the default is not committed (the published map was "
                   "made with --out results/published)")
    p.add_argument("--stages", type=_ints, default=_csv(DEFAULTS["stages"]), metavar="S,..",
                   help="stage counts")
    p.add_argument("--batches", type=_ints, default=_csv(DEFAULTS["batches"]), metavar="B,..",
                   help="mini-batch sizes")
    p.add_argument("--modes", type=_words, default=_csv(DEFAULTS["modes"]), metavar="MODE,..",
                   help="memory modes")
    p.add_argument("--families", type=_words, default=_csv(DEFAULTS["families"]),
                   metavar="F,..", help="simulation-network families (docs/SIMNETS.md)")
    p.add_argument("--h", dest="hs", type=_floats, default=_csv(DEFAULTS["hs"]), metavar="H,..",
                   help="heterogeneity grid in [0, 1]")
    p.add_argument("--seeds", type=whole(1), default=DEFAULTS["seeds"], metavar="N",
                   help="seeds 0..N-1 per point")
    p.add_argument("--planner", default=DEFAULTS["planner"],
                   help="the planner")
    p.add_argument("--budget", default=DEFAULTS["budget"],
                   help="the planner's budget")
    p.add_argument("--jobs", type=whole(1, MAX_JOBS), default=1,
                   help="points run in N processes at once")
    p.add_argument("--report-only", action="store_true",
                   help="only write the summary, table and plots from the rows already there")
    p.add_argument("--no-gantt", action="store_true", help="skip the Gantt chart")
    p.add_argument("--list", action="store_true", help="print the number of points and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..bench.heterogeneity import run_study, study_points, write_outputs
    from ..plan import MODES

    for m in args.modes:
        if m not in MODES:
            raise UserInputError(f"--modes: unknown mode {m!r}; expected {', '.join(MODES)}")
    if args.jobs < 1:
        raise UserInputError(f"--jobs must be >= 1, got {args.jobs}")
    points = study_points(args.stages, args.batches, args.modes, args.families, args.hs,
                          args.seeds)
    if args.list:
        print(f"{len(points)} points")
        return 0
    from ._paths import check_output_dir

    check_output_dir(args.out, "--out")
    if not args.report_only:
        n, errors = run_study(args.out, points, planner=args.planner, budget=args.budget,
                              jobs=args.jobs, progress=False if args.no_progress else None)
        print(f"study: {n} points run, {errors} errors")
    try:
        written = write_outputs(args.out, gantt=not args.no_gantt)
    except FileNotFoundError as exc:
        raise UserInputError(str(exc)) from None  # a user's mistake: one line, exit code 2
    for name, path in written.items():
        print(f"wrote {name}: {path}")
    return 0
