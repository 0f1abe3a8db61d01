"""``umpipe-bench execute``: run plans on this machine with torch.distributed and time them.

Without ``RANK``/``WORLD_SIZE`` in the environment it launches one process per stage through
``torchrun --standalone`` and waits for them; under an existing ``torchrun`` launch (one
process per stage, any number of nodes) every rank runs its own stage in-process and rank 0
prints the report (docs/MODEL.md §5). With ``--devices D`` the plans are chunk plan files
(docs/CHUNK-SCHEDULES.md) on a per-layer problem, one process per device
(docs/EXECUTE.md, "Chunk plans"). ``--check-grads`` runs one float64 iteration of every plan
instead and compares each gradient with the single-process full-batch one.
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
from ..runtime.allocator import ENV as MALLOC_ENV
from ..runtime.allocator import add_malloc_option
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
        "plan JSON file. Speedups are relative to the first plan. With --devices D, every SPEC "
        "is a chunk plan file (umpipe-chunk-plan/1: chunks of the problem's layers on D "
        "devices, per-chunk F/B/I/W partitions) run with one process per device and compared "
        "with the device simulator (docs/EXECUTE.md).",
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
    p.add_argument("--devices", "-D", type=whole(1), metavar="D", default=None,
                   help="run chunk plan files on D devices, one process per device (the "
                   "problem's stages being layers); default: one process per stage, stage "
                   "plans")
    p.add_argument("--check-grads", action="store_true",
                   help="run one float64 iteration of every plan (no optimizer step) and "
                   "check every parameter gradient against the single-process full-batch "
                   "gradient; exit 1 if any differs")
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
    add_malloc_option(p, "the C allocator settings of the processes this command starts")
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


def _check_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings of a gradient check: one float64 iteration, gradients dumped, no step."""
    settings = dict(settings)
    settings.update(dtype="float64", iters=1, warmup=0, optimizer="none", dump_grads=True)
    return settings


def _report_check(checks: list[tuple[str, list[str]]], as_json: bool) -> int:
    """Print a gradient check's verdicts; exit code 1 if any plan's gradients differ."""
    bad = sum(1 for _, why in checks if why)
    if as_json:
        print(json.dumps({"check_grads": [{"plan": label, "ok": not why, "problems": why}
                                          for label, why in checks]}))
    else:
        for label, why in checks:
            print(f"{label}: " + ("ok" if not why else "DIFFERS: " + "; ".join(why[:4])))
        print(f"{len(checks) - bad} of {len(checks)} plans give the full-batch gradient "
              "(float64)")
    return 1 if bad else 0


def _stage_check(spec: Any, run_dir: str) -> list[tuple[str, list[str]]]:
    """Gradients of a stage-plan run made with ``dump_grads``, against the reference."""
    from ..runtime.reference import compare_gradients, load_stage_gradients, reference_gradients

    ref_loss, ref = reference_gradients(spec.model, spec.config, spec.layers_per_stage, spec.B,
                                        dtype=spec.dtype, seed=spec.seed)
    out = []
    for k, entry in enumerate(spec.entries):
        loss, got = load_stage_gradients(run_dir, k, spec.S)
        why = compare_gradients(ref, got)
        if loss is None or abs(loss - ref_loss) > 1e-10 * abs(ref_loss) + 1e-12:
            why.append(f"loss {loss} differs from the reference loss {ref_loss}")
        out.append((entry.label, why))
    return out


def run(args: argparse.Namespace) -> int:
    """Prepare (refusing what cannot run), launch or join torchrun, print the report."""
    if args.malloc is not None:  # the launcher reads it (runtime/allocator.py)
        os.environ[MALLOC_ENV] = args.malloc
    if args.devices is not None:
        return run_chunks(args)
    from ..files import check_append_csv
    from ..runtime.execution import prepare, run_execution
    from ..runtime.report import COLUMNS, format_table
    from ._lookup import problem as get_problem
    from ._paths import check_output_dir

    if args.csv:  # a file of other rows is refused now, not after the run
        check_append_csv(args.csv, COLUMNS, "--csv")
    check_output_dir(args.run_dir, "--run-dir")
    problem = get_problem(args.problem)
    settings = _settings(args)
    if args.check_grads:
        settings = _check_settings(settings)
    ex = prepare(problem, [args.plan, *args.vs], mode=args.mode, peer=not args.no_peer,
                 force_plan=args.force_plan, **settings)
    _check_backend(ex.spec.backend)
    if args.check_grads:
        return _checked_run(ex, args, lambda d: _stage_check(ex.spec, d), run_execution)
    result = _run_or_join(ex, args, run_execution)
    if isinstance(result, int):
        return result
    rows = _rows(ex, result, args)
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


def _checked_run(ex: Any, args: argparse.Namespace, check: Any, launch: Any) -> int:
    """Launch a gradient check in ``--run-dir`` (or a temporary folder kept only if the run
    fails), compare, report."""
    from ..runtime.errors import StageFailure

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        raise UserInputError("--check-grads launches its own processes; run it without "
                             "torchrun")
    run_dir = args.run_dir or tempfile.mkdtemp(prefix="umpipe-check-")
    try:
        launch(ex, run_dir, deadline_s=args.deadline, echo=args.echo)
    except StageFailure as exc:
        print(f"umpipe-bench execute: error: {exc}", file=sys.stderr)
        return 1
    checks = check(run_dir)
    if not args.run_dir:
        shutil.rmtree(run_dir, ignore_errors=True)
    return _report_check(checks, args.json)


def run_chunks(args: argparse.Namespace) -> int:
    """``execute --devices D``: chunk plan files, one process per device."""
    from ..files import check_append_csv
    from ..runtime.chunk_execution import gradient_check, prepare_chunks, run_chunk_execution
    from ..runtime.report import COLUMNS, format_table
    from ._lookup import problem as get_problem
    from ._paths import check_output_dir

    for flag, given in (("--no-peer", args.no_peer), ("--force-plan", args.force_plan)):
        if given:
            raise UserInputError(f"{flag} does not apply to chunk plans (--devices): no "
                                 "torch peer runs them, and a chunk plan names no problem")
    if args.csv:
        check_append_csv(args.csv, COLUMNS, "--csv")
    check_output_dir(args.run_dir, "--run-dir")
    problem = get_problem(args.problem)
    settings = _settings(args)
    if args.check_grads:
        settings = _check_settings(settings)
    ex = prepare_chunks(problem, [args.plan, *args.vs], args.devices, mode=args.mode,
                        **settings)
    _check_backend(ex.spec.backend)
    if args.check_grads:
        kept: dict[str, Any] = {}

        def launch(ex: Any, run_dir: str, **kw: Any) -> None:
            kept["result"] = run_chunk_execution(ex, run_dir, **kw)

        return _checked_run(ex, args, lambda d: gradient_check(ex.spec, kept["result"], d),
                            launch)
    result = _run_or_join(ex, args, run_chunk_execution, chunks=True)
    if isinstance(result, int):
        return result
    rows = _rows(ex, result, args)
    if args.json:
        print(json.dumps({"rows": rows, "result": result, "fallbacks": ex.fallbacks}))
        return 0
    print(f"problem {problem.name} ({problem.S} layers, B={problem.B}), chunk plans on "
          f"D={args.devices} devices (one process each), {ex.spec.iters} iterations per plan "
          f"after {ex.spec.warmup} warm-up, alternating; backend {ex.spec.backend}, torch "
          f"{result.get('torch')}; predicted: the device simulator")
    for label, plan in ex.runs:
        print(f"  {label}: {plan.describe()}, layers {'-'.join(map(str, plan.layers))}"
              + (f", {ex.fallbacks[label]} rule fallbacks" if ex.fallbacks[label] else ""))
    print(format_table(rows))
    if args.csv:
        print(f"wrote {args.csv}")
    return 0


def _run_or_join(ex: Any, args: argparse.Namespace, launch: Any,
                 chunks: bool = False) -> dict[str, Any] | int:
    """Rank 0's result: this rank's part under an existing torchrun launch, else ``launch``'s
    run of one process per stage (``chunks``: per device). An int is the exit code: 0 on the
    other ranks (rank 0 reports), 1 when a process failed."""
    from ..runtime.errors import StageFailure

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        result = _run_in_process(ex.spec, args, chunks=chunks)
        return 0 if result is None else result
    try:
        return launch(ex, args.run_dir, deadline_s=args.deadline, echo=args.echo)
    except StageFailure as exc:
        print(f"umpipe-bench execute: error: {exc}", file=sys.stderr)
        return 1


def _rows(ex: Any, result: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The report rows of a run, appended to ``--csv`` when given."""
    from ..runtime.report import write_csv
    from ._paths import writing

    rows = ex.rows(result)
    if args.csv:
        with writing(args.csv, "--csv"):
            write_csv(rows, args.csv)
    return rows


def _run_in_process(spec: Any, args: argparse.Namespace,
                    chunks: bool = False) -> dict[str, Any] | None:
    """Under an existing torchrun: this process is stage (or, ``chunks``, device) RANK."""
    from ..runtime.worker import write_failure

    if chunks:
        from ..runtime.chunk_worker import run_device as run_rank
    else:
        from ..runtime.worker import run_worker as run_rank

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    spec.run_id = os.environ.get("TORCHELASTIC_RUN_ID", "inproc")
    spec.out_dir = args.run_dir or tempfile.mkdtemp(prefix=f"umpipe-execute-r{rank}-")
    os.makedirs(spec.out_dir, exist_ok=True)
    try:
        result = run_rank(spec, rank, world)
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
