"""``umpipe-bench bench``: run a benchmark matrix into a resumable leaderboard."""

from __future__ import annotations

import argparse
import sys

from ..errors import UserInputError
from ._numbers import MAX_JOBS, whole
from ._paths import path_arg


def _shard(text: str) -> tuple[int, int]:
    i, _, n = text.partition("/")
    try:
        return int(i), int(n)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N such as 0/4, got {text!r}") from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="run a matrix of problems x planners x seeds x modes into results/leaderboard.csv",
        description="Run a benchmark matrix (TOML) and write one leaderboard row per cell "
        "(problem, planner, seed, mode, budget). The leaderboard is rewritten atomically after "
        "every cell; a rerun skips finished cells, so an interrupted run resumes where it "
        "stopped. Without --config the built-in default matrix runs (a few minutes on 2 "
        "cores); --full runs the paper-scale matrix.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--config", type=path_arg, metavar="FILE",
                     help="matrix file (TOML); see umpipe_bench/"
                     "bench/default.toml for the format. Seeds are integers in "
                     "0..4294967295; a cell listed twice (a seed, mode or budget given twice, "
                     "or two planner entries with the same settings) is refused, naming it")
    src.add_argument("--full", action="store_true",
                     help="the paper-scale matrix (umpipe_bench/bench/full.toml): hours")
    p.add_argument("--out", type=path_arg, default="results", metavar="DIR",
                   help="output folder: leaderboard.csv, plans/, histories/, baselines.json")
    p.add_argument("--limit", type=whole(0), default=None, metavar="N",
                   help="only the first N cells of the matrix (to try a matrix quickly)")
    p.add_argument("--shard", type=_shard, default=None, metavar="I/N",
                   help="only cells I, I+N, I+2N, ... (split one matrix over N machines)")
    p.add_argument("--jobs", type=whole(1, MAX_JOBS), default=1, metavar="N",
                   help="cells run in N processes at once (wall times then share the CPUs)")
    p.add_argument("--executor", choices=("process", "dask"), default="process",
                   help="process: this machine (--jobs processes); dask: the workers of a dask "
                   "cluster (pip install -e '.[dask]'), while this process writes the "
                   "leaderboard")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="dask scheduler address, e.g. tcp://10.0.0.1:8786 (implies --executor "
                   "dask); without it --executor dask starts a local cluster of --jobs workers")
    p.add_argument("--retry-errors", action="store_true",
                   help="run again the cells whose row has an error")
    p.add_argument("--list", action="store_true", help="print the cells and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..bench import builtin_config, load_config, run_matrix, select_cells

    if args.config:
        config = load_config(args.config)
    else:
        config = builtin_config("full" if args.full else "default")
    if args.jobs < 1:
        raise UserInputError(f"--jobs must be >= 1, got {args.jobs}")
    if args.list:
        config.check_planners()
        for c in select_cells(config.cells(), limit=args.limit, shard=args.shard):
            print(f"{c.problem:<18} {c.planner:<16} {c.mode:<9} seed {c.seed:<3} {c.budget}")
        return 0
    from ._paths import check_output_dir

    check_output_dir(args.out, "--out")
    summary = run_matrix(config, args.out, limit=args.limit, shard=args.shard, jobs=args.jobs,
                         retry_errors=args.retry_errors,
                         progress=False if args.no_progress else None,
                         executor="dask" if args.scheduler else args.executor,
                         scheduler=args.scheduler)
    print(summary)
    if summary.failed:
        print(f"umpipe-bench bench: {summary.failed} of {summary.total} cells failed (their "
              f"rows hold the error; rerun them with --retry-errors)", file=sys.stderr)
        return 1
    return 0
