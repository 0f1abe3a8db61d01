"""``umpipe-bench execute``: run plans on this machine with torch.distributed and time them.

Without ``RANK``/``WORLD_SIZE`` in the environment it launches one process per stage through
``torchrun --standalone`` and waits for them; under an existing ``torchrun`` launch (one
process per stage, any number of nodes) every rank runs its own stage in-process and rank 0
prints the report (MODEL.md §5).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

from ..errors import UserInputError

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
    p.add_argument("--iters", type=int, default=10, help="measured iterations per plan")
    p.add_argument("--warmup", type=int, default=2, help="warm-up iterations per plan")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--no-peer", action="store_true", help="skip torch.distributed.pipelining")
    p.add_argument("--dtype", default=None, help="parameter dtype (default: the problem's)")
    p.add_argument(
        "--optimizer",
        default=None,
        help="none|sgd|adam|adamw, stepped every iteration (default: the problem's, else sgd)",
    )
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads per stage (default: problem's, 1)"
    )
    p.add_argument("--seed", type=int, default=None, help="model/batch seed (default: problem's)")
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds a stage waits on a peer before failing",
    )
    p.add_argument(
        "--deadline", type=float, default=3600.0, help="seconds before the whole run is killed"
    )
    p.add_argument("--run-dir", default=None, help="working folder (default: a temporary one)")
    p.add_argument("--echo", action="store_true", help="show the workers' output live")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--csv", metavar="FILE", help="write one row per plan (appends if compatible)")
    p.set_defaults(func=run)


def _label(spec: str) -> str:
    """``gpipe:4`` as written; a plan file by its stem (the leaderboard joins on it)."""
    if os.path.exists(spec):
        return os.path.splitext(os.path.basename(spec))[0]
    return spec


def run(args: argparse.Namespace) -> int:
    from ..plan import parse_plan_spec
    from ..registry import get_problem
    from ..runtime.errors import StageFailure
    from ..runtime.job import PlannedRun, spec_for_problem
    from ..runtime.report import format_table, summarize, write_csv
    from ..simulator import simulate

    problem = get_problem(args.problem)
    runs: list[PlannedRun] = []
    labels: set[str] = set()
    for spec in [args.plan, *args.vs]:
        plan, schedule = parse_plan_spec(spec, problem, args.mode)
        label = _label(spec)
        if plan.mode != "stash" and ":" in label and not os.path.exists(spec):
            label = f"{label}:{plan.mode}"
        base, n = label, 2
        while label in labels:
            label, n = f"{base}#{n}", n + 1
        labels.add(label)
        runs.append(PlannedRun(label, plan, schedule))
    settings: dict[str, Any] = {
        "iters": args.iters,
        "warmup": args.warmup,
        "backend": args.backend,
        "timeout_s": args.timeout,
    }
    for key, val in (
        ("dtype", args.dtype),
        ("optimizer", args.optimizer),
        ("seed", args.seed),
        ("threads", args.threads),
    ):
        if val is not None:
            settings[key] = val
    if args.iters < 1 or args.warmup < 0:
        raise UserInputError("--iters must be >= 1 and --warmup >= 0")
    spec = spec_for_problem(problem, runs, peer=not args.no_peer, **settings)

    predicted: dict[str, float | None] = {}
    kinds: dict[str, str] = {}
    peers: dict[str, str] = {}
    busy: dict[str, list[float]] = {}
    for r in runs:
        tl = simulate(problem, r.plan, r.schedule)
        predicted[r.label] = tl.iteration_time
        busy[r.label] = list(tl.busy)
        kinds[r.label] = r.plan.describe()
    for e in spec.entries:
        if e.engine == "torch":
            twin = next(
                r
                for r in runs
                if r.schedule == e.schedule
                and r.plan.is_edp()
                and r.plan.mode == "stash"
                and len(r.plan.fwd[0]) == e.M
            )
            predicted[e.label] = predicted[twin.label]
            kinds[e.label] = f"EDP({e.M})"
            for r in runs:
                if (r.schedule, r.plan.mode, r.plan.fwd) == (e.schedule, "stash", twin.plan.fwd):
                    peers[r.label] = e.label

    in_torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if in_torchrun:
        result = _run_in_process(spec, args)
        if result is None:
            return 0  # not rank 0: rank 0 reports
    else:
        run_dir = args.run_dir or tempfile.mkdtemp(prefix="umpipe-execute-")
        try:
            from ..runtime.launcher import launch

            result = launch(spec, run_dir, deadline_s=args.deadline, echo=args.echo)
        except StageFailure as exc:
            print(f"umpipe-bench execute: error: {exc}", file=sys.stderr)
            return 1

    rows = summarize(result, predicted, kinds=kinds, peers=peers, busy=busy)
    if args.csv:
        write_csv(rows, args.csv)
    if args.json:
        print(json.dumps({"rows": rows, "result": result}))
        return 0
    print(
        f"problem {problem.name} (S={problem.S}, B={problem.B}), {spec.iters} iterations per "
        f"plan after {spec.warmup} warm-up, alternating; backend {spec.backend}, "
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
        return run_worker(spec, rank, world)
    except BaseException as exc:
        write_failure(spec.out_dir, rank, exc)
        print(f"[umpipe] stage {rank} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)


if __name__ == "__main__":
    # `torchrun --nproc-per-node S -m umpipe_bench.cli.execute --problem ... --plan ...`
    from . import main

    sys.exit(main(["execute", *sys.argv[1:]]))
