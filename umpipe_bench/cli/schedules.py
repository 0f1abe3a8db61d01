"""``umpipe-bench schedules``: every schedule torch ships, its best M and layer partition, and
its predicted iteration time and peak memory on ``D`` devices (docs/TORCH-SCHEDULES.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from ._numbers import seconds, whole


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "schedules",
        help="predict every torch schedule's best M, partition, T and memory on D devices",
        description="For a problem whose stages are single layers (a one-layer-per-stage "
        "profile) and D devices, find for each schedule torch.distributed.pipelining ships "
        "(gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb1p, zbv, dualpipev) the number of equal "
        "microbatches M (a divisor of B), the chunks per device v (loop layouts) and the "
        "contiguous partition of the layers into chunks that give the shortest simulated "
        "iteration among those that fit the memory cap, and name the fastest. The search is "
        "exact (docs/TORCH-SCHEDULES.md). Zero-bubble schedules need split-backward costs "
        "(profile --split-backward-into).",
    )
    p.add_argument("--problem", required=True, help="problem name (see 'problems') or file; its "
                   "stages are the layers")
    p.add_argument("--devices", "-D", type=whole(1), required=True, metavar="D",
                   help="number of devices (pipeline ranks)")
    p.add_argument("--mode", choices=("stash", "recompute"), default="stash",
                   help="memory mode: stash (activations kept) or recompute (activation "
                   "checkpointing)")
    p.add_argument("--memory-cap", metavar="SIZE",
                   help="device memory (bytes, or 512MiB, 24GiB, 2GB..., or a share such as "
                   "50%%: the most any device needs for its static bytes plus that share of the "
                   "activations torch's GPipe schedule keeps there at its best M and partition, "
                   "stash mode): only choices whose every device peak fits; default: no cap")
    p.add_argument("--schedules", metavar="NAMES",
                   help="comma-separated subset of schedules (our names or torch class names); "
                   "default: all seven")
    p.add_argument("--chunks", "-v", type=whole(1), metavar="V",
                   help="chunks per device for the loop layouts (interleaved-1f1b, looped-bfs, "
                   "zb1p); default: search 1..4")
    p.add_argument("--op-overhead", type=seconds(), default=0.0, metavar="SECONDS",
                   help="seconds the runtime adds to every action beyond the profiled compute "
                   "(torch's stage bookkeeping and point-to-point calls; fit one with "
                   "scripts/measure_torch_schedules.py --calibrate, docs/TORCH-SCHEDULES.md §7)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..errors import UmpipeError
    from ..memory import format_bytes
    from ..torch_schedules.best import best_row, schedule_table
    from ._lookup import problem as get_problem
    from .plan import device_cap

    problem = get_problem(args.problem)
    if args.devices < 1 or args.devices > problem.S:
        raise UmpipeError(f"--devices must be in 1..{problem.S} (the problem's layers), got "
                          f"{args.devices}")
    if args.chunks is not None and args.chunks < 1:
        raise UmpipeError(f"--chunks must be a positive integer, got {args.chunks}")
    if not 0 <= args.op_overhead < float("inf"):
        raise UmpipeError(f"--op-overhead must be seconds >= 0, got {args.op_overhead}")
    cap = device_cap(problem, args.devices, args.memory_cap)
    names = [n.strip() for n in args.schedules.split(",") if n.strip()] \
        if args.schedules else None
    rows = []
    for name in names or [None]:  # type: ignore[list-item]
        t0 = time.perf_counter()
        part = schedule_table(problem, args.devices, args.mode, cap,
                              names=[name] if name else None, v=args.chunks,
                              op_overhead=args.op_overhead)
        rows.extend(part)
        print(f"schedules: {', '.join(r.schedule for r in part)} searched in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    best = best_row(rows)
    if args.json:
        print(json.dumps({
            "problem": problem.name, "devices": args.devices, "mode": args.mode,
            "memory_cap": cap, "B": problem.B, "layers": problem.S,
            "op_overhead": args.op_overhead,
            "schedules": [r.to_dict() for r in rows],
            "best": None if best is None else best.schedule,
        }))
        return 0
    print(f"problem {problem.name} ({problem.S} layers, B={problem.B}) on D={args.devices} "
          f"devices, mode {args.mode}"
          + (f", memory cap {format_bytes(cap)}" if cap is not None else ""))
    print(f"{'schedule':<17} {'v':>2} {'M':>3}  {'T (ms)':>10}  {'peak memory':>12}  partition")
    for r in rows:
        c = r.choice
        if c is None:
            print(f"{r.schedule:<17} {'-':>2} {'-':>3}  {'-':>10}  {'-':>12}  ({r.reason})")
            continue
        mem = "-" if c.max_peak is None else format_bytes(c.max_peak)
        print(f"{r.schedule:<17} {c.v:>2} {c.M:>3}  {c.T * 1e3:>10.3f}  {mem:>12}  "
              f"{'-'.join(map(str, c.counts))}")
    if best is None:
        print("no schedule can run" + (" within the memory cap" if cap is not None else ""))
        return 0
    print(f"fastest: {best.schedule} ({best.torch_class})")
    return 0
