"""``umpipe-bench execute``: run plans on this machine with torch.distributed and time them.

Without ``RANK``/``WORLD_SIZE`` in the environment it launches one process per stage through
``torchrun --standalone`` and waits for them; under an existing ``torchrun`` launch (one
process per stage, any number of nodes) every rank runs its own stage in-process and rank 0
prints the report (docs/MODEL.md §5).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Any

from ..errors import UserInputError
from ._numbers import MAX_JOBS, seconds, whole
from ._paths import path_arg

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "execute",
        help="execute plans with torch.distributed and measure them against the simulator",
        description="Execute one or more plans on a profiled problem with one process per "
        "stage (torchrun, gloo or NCCL), timing them alternately (A B A B ...) after warm-up, "
        "and compare each median iteration time with the simulator's prediction. EDP plans "
        "in stash mode are also run by torch.distributed.pipelining (ScheduleGPipe / "
        "Schedule1F1B) on the same stages for a peer check. SPEC is 'gpipe:M', '1f1b:M' or a "
        "plan JSON file. Speedups are relative to the first plan.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--problem", required=True, help="profiled problem name or file")
    p.add_argument("--plan", required=True, metavar="SPEC", help="the first plan (reference)")
    p.add_argument(
        "--vs", action="append", default=[], metavar="SPEC", help="another plan (repeatable)"
    )
    p.add_argument(
        "--mode",
        choices=("stash", "recompute"),
        default=None,
        help="memory mode for every plan (default: stash for gpipe:M/1f1b:M, a file's own)",
    )
    p.add_argument("--iters", type=whole(1), default=10, help="measured iterations per plan")
    p.add_argument("--warmup", type=whole(0), default=2, help="warm-up iterations per plan")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                   help="torch.distributed backend: gloo on CPU, nccl on CUDA devices")
    p.add_argument("--no-peer", action="store_true", help="skip torch.distributed.pipelining")
    p.add_argument("--dtype", default=None, help="parameter dtype (default: the problem's)")
    p.add_argument(
        "--optimizer",
        default=None,
        help="none|sgd|adam|adamw, stepped every iteration (default: the problem's, else sgd)",
    )
    p.add_argument(
        "--threads", type=whole(1, MAX_JOBS), default=None,
        help="torch threads per stage (default: problem's, 1)"
    )
    p.add_argument("--seed", default=None, metavar="SEED",
                   help="model/batch seed, an integer in 0..4294967295 (default: problem's)")
    p.add_argument(
        "--timeout",
        type=seconds(open_low=True),
        default=300.0,
        help="seconds a stage waits on a peer before failing",
    )
    p.add_argument(
        "--deadline", type=seconds(open_low=True), default=3600.0,
        help="seconds before the whole run is killed"
    )
    p.add_argument("--run-dir", type=path_arg, default=None,
                   help="working folder (default: a temporary one)")
    p.add_argument("--echo", action="store_true", help="show the workers' output live")
    p.add_argument("--force-plan", action="store_true",
                   help="use a plan file made for another problem (or another version of "
                   "it), with a warning; without it such a plan is refused")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--csv", type=path_arg, metavar="FILE",
                   help="write one row per plan; appended to an "
                   "existing file with the same header, refused if its header differs")
    p.set_defaults(func=run)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """RunSpec settings from the options (unset ones come from the problem's provenance)."""
    if args.iters < 1 or args.warmup < 0:
        raise UserInputError("--iters must be >= 1 and --warmup >= 0")
    if args.seed is not None:
        from ..schema import parse_seed

        args.seed = parse_seed(args.seed, "--seed")
    settings: dict[str, Any] = {"iters": args.iters, "warmup": args.warmup,
                                "backend": args.backend, "timeout_s": args.timeout}
    for key in ("dtype", "optimizer", "seed", "threads"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    return settings


def _check_backend(backend: str) -> None:
    """NCCL needs CUDA devices: refuse before launching rather than fail in every stage."""
    if backend != "nccl":
        return
    import torch

    if not torch.cuda.is_available():
        raise UserInputError("--backend nccl needs CUDA devices, and torch finds none on this "
                             f"machine (torch {torch.__version__}); use --backend gloo")


def run(args: argparse.Namespace) -> int:
    """Prepare (refusing what cannot run), launch or join torchrun, print the report."""
    from ..files import check_append_csv
    from ..runtime.errors import StageFailure
    from ..runtime.execution import prepare, run_execution
    from ..runtime.report import COLUMNS, format_table, write_csv
    from ._lookup import problem as get_problem
    from ._paths import check_output_dir, writing

    if args.csv:  # a file of other rows is refused now, not after the run
        check_append_csv(args.csv, COLUMNS, "--csv")
    check_output_dir(args.run_dir, "--run-dir")
    problem = get_problem(args.problem)
    ex = prepare(problem, [args.plan, *args.vs], mode=args.mode, peer=not args.no_peer,
                 force_plan=args.force_plan, **_settings(args))
    _check_backend(ex.spec.backend)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        result = _run_in_process(ex.spec, args)
        if result is None:
            return 0  # not rank 0: rank 0 reports
    else:
        try:
            result = run_execution(ex, args.run_dir, deadline_s=args.deadline, echo=args.echo)
        except StageFailure as exc:
            print(f"umpipe-bench execute: error: {exc}", file=sys.stderr)
            return 1
    rows = ex.rows(result)
    if args.csv:
        with writing(args.csv, "--csv"):
            write_csv(rows, args.csv)
    if args.json:
        print(json.dumps({"rows": rows, "result": result}))
        return 0
    print(
        f"problem {problem.name} (S={problem.S}, B={problem.B}), {ex.spec.iters} iterations "
        f"per plan after {ex.spec.warmup} warm-up, alternating; backend {ex.spec.backend}, "
        f"torch {result.get('torch')}"
    )
    print(format_table(rows))
    if args.csv:
        print(f"wrote {args.csv}")
    return 0


def _run_in_process(spec: Any, args: argparse.Namespace) -> dict[str, Any] | None:
    """Under an existing torchrun: this process is stage RANK."""
    from ..runtime.worker import run_worker, write_failure

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    spec.run_id = os.environ.get("TORCHELASTIC_RUN_ID", "inproc")
    spec.out_dir = args.run_dir or tempfile.mkdtemp(prefix=f"umpipe-execute-r{rank}-")
    os.makedirs(spec.out_dir, exist_ok=True)
    try:
        result = run_worker(spec, rank, world)
        if not args.run_dir:
            shutil.rmtree(spec.out_dir, ignore_errors=True)  # a failure keeps its folder
        return result
    except BaseException as exc:
        write_failure(spec.out_dir, rank, exc)
        print(f"[umpipe] stage {rank} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)


if __name__ == "__main__":
    # `torchrun --nproc-per-node S -m umpipe_bench.cli.execute --problem ... --plan ...`
    from . import main

    sys.exit(main(["execute", *sys.argv[1:]]))
