"""``umpipe-bench simulate``: one plan on one problem through the reference simulator."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ._numbers import seconds, whole
from ._paths import path_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate one iteration of a plan (docs/MODEL.md §4) and print T",
        description="Simulate one training iteration of a plan on a problem with the reference "
        "list-schedule simulator. SPEC is 'gpipe:M' (EDP(M) under GPipe), '1f1b:M' (EDP(M) "
        "under 1F1B) or a plan JSON file (written by 'umpipe-bench plan --out'; a plan with "
        "in-flight caps runs the 'capped' schedule, docs/SCHEDULES.md). With --devices D the "
        "problem's stages are layers, SPEC is 'SCHEDULE:M' for any schedule torch ships "
        "(gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb1p, zbv, dualpipev), and the lists torch "
        "executes run on D devices (docs/TORCH-SCHEDULES.md), or a chunk plan file "
        "(umpipe-chunk-plan/1: unequal microbatches per chunk, caps per device) whose lists "
        "the chunk rule makes (docs/CHUNK-SCHEDULES.md).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--problem", required=True, help="problem name (see 'problems') or file")
    p.add_argument("--plan", required=True, metavar="SPEC",
                   help="gpipe:M, 1f1b:M or plan file; with --devices: SCHEDULE:M or a chunk "
                   "plan file")
    p.add_argument("--devices", "-D", type=whole(1), metavar="D",
                   help="run a torch schedule on D devices, the problem's stages being layers "
                   "cut into chunks (see --partition); default: one stage per device, our plans")
    p.add_argument("--chunks", "-v", type=whole(1), metavar="V",
                   help="with --devices: chunks per device for interleaved-1f1b, looped-bfs and "
                   "zb1p (default 2; zbv and dualpipev always hold 2)")
    p.add_argument("--op-overhead", type=seconds(), default=0.0, metavar="SECONDS",
                   help="with --devices: seconds the runtime adds to every action "
                   "(docs/TORCH-SCHEDULES.md §7)")
    p.add_argument("--partition", metavar="N,N,...",
                   help="with --devices: layers per chunk, in model order (default: balanced, "
                   "larger chunks first)")
    p.add_argument("--mode", choices=("stash", "recompute"), default=None,
                   help="memory mode (default: stash for gpipe:M/1f1b:M, the file's for a file)")
    p.add_argument("--memory-cap", metavar="SIZE",
                   help="device memory per stage (bytes, or 512MiB, 24GiB, 2GB...): report "
                   "whether every stage's peak fits; default: the problem file's capacities")
    p.add_argument("--force-plan", action="store_true",
                   help="use a plan file made for another problem (or another version of "
                   "it), with a warning; without it such a plan is refused")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--events", action="store_true",
                   help="with --json: include every op and transfer, and each stage's ops in "
                   "execution order ('stage_ops')")
    p.add_argument("--trace", type=path_arg, metavar="FILE",
                   help="write a Chrome trace (Perfetto) JSON")
    p.add_argument("--gantt", type=path_arg, metavar="FILE", help="write a Gantt chart PNG")
    p.add_argument("--show-ops", action="store_true", help="print the per-stage op lists")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..memory import format_bytes, parse_size
    from ..plan import parse_plan_spec
    from ..schedules import build_schedule, format_schedule
    from ..simulator import simulate
    from ._lookup import problem as get_problem
    from ._paths import check_output_file, writing

    if args.devices is None:
        args.devices = _chunk_plan_devices(args.plan)
    if args.devices is not None:
        return run_devices(args)
    if args.op_overhead:
        from ..errors import UmpipeError

        raise UmpipeError("--op-overhead needs --devices (a torch schedule on devices)")
    for flag in ("chunks", "partition"):
        if getattr(args, flag) is not None:
            from ..errors import UmpipeError

            raise UmpipeError(f"--{flag} needs --devices (a torch schedule on devices)")
    check_output_file(args.trace, "--trace")
    check_output_file(args.gantt, "--gantt")
    problem = get_problem(args.problem)
    if args.memory_cap is not None:
        problem = problem.with_memory_cap(parse_size(args.memory_cap))
    plan, schedule = parse_plan_spec(args.plan, problem, args.mode, force=args.force_plan)
    ops = build_schedule(schedule, plan)
    tl = simulate(problem, plan, schedule, ops=ops)
    if args.trace:
        from ..trace import save_chrome_trace

        with writing(args.trace, "--trace"):
            save_chrome_trace(tl, args.trace)
    if args.gantt:
        from ..trace import save_gantt

        title = f"{problem.name} · {args.plan} · {schedule} · {plan.mode}"
        with writing(args.gantt, "--gantt"):
            save_gantt(tl, args.gantt, [title])
    if args.json:
        out = tl.to_dict(with_events=args.events)
        out["plan"] = plan.to_dict()
        out["spec"] = args.plan
        print(json.dumps(out))
        return 0
    print(f"problem {problem.name} (S={problem.S}, B={problem.B}), plan {args.plan} "
          f"[{plan.describe()}], schedule {schedule}, mode {plan.mode}")
    print(f"iteration time T = {tl.iteration_time * 1e3:.4f} ms")
    print(f"{'stage':>5}  {'busy':>6}  {'bubble':>6}  {'end (ms)':>10}  peak memory")
    for s in range(problem.S):
        mem = "-" if tl.peak_memory is None else f"{tl.peak_memory[s] / 2**20:.1f} MiB"
        print(f"{s:>5}  {tl.busy[s] / tl.iteration_time:>6.1%}  {tl.bubble[s]:>6.1%}  "
              f"{tl.stage_end[s] * 1e3:>10.3f}  {mem}")
    if tl.fits_memory is False:
        assert tl.capacity is not None and tl.peak_memory is not None
        over = [s for s in range(problem.S) if tl.peak_memory[s] > tl.capacity[s]]
        print(f"warning: peak memory exceeds the memory cap on stage(s) {over} (stage "
              f"{over[0]}: {format_bytes(tl.peak_memory[over[0]])} > "
              f"{format_bytes(tl.capacity[over[0]])})")
    if args.show_ops:
        print(format_schedule(ops))
    _wrote(args)
    return 0


def _chunk_plan_devices(text: str) -> int | None:
    """``D`` of ``--plan`` when it names a chunk plan file (schema umpipe-chunk-plan/1), so
    ``simulate --plan FILE`` needs no ``--devices``; else None (a schedule spec, a stage plan
    file, or a file ``run`` reports on)."""
    from ..chunkplan import CHUNK_PLAN_SCHEMA

    path = Path(text)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("schema") != CHUNK_PLAN_SCHEMA:
        return None
    D = data.get("D")
    return D if isinstance(D, int) and not isinstance(D, bool) and D >= 1 else None


def run_devices(args: argparse.Namespace) -> int:
    """``simulate --devices``: one torch schedule on D devices (docs/TORCH-SCHEDULES.md)."""
    from ..devsim import edp_sizes, simulate_devices
    from ..errors import UmpipeError
    from ..layout import Layout, balanced_counts, group_layers
    from ..memory import format_bytes, parse_size
    from ..torch_schedules import check, schedule_info, torch_orders, torch_send_after
    from ._lookup import problem as get_problem
    from ._paths import check_output_file

    check_output_file(args.trace, "--trace")
    check_output_file(args.gantt, "--gantt")
    name, sep, m_text = args.plan.partition(":")
    if not (sep and m_text.strip().isdigit()) and Path(args.plan).is_file():
        return run_chunk_plan(args)
    if not sep or not m_text.strip().isdigit():
        raise UmpipeError(f"--plan {args.plan!r}: with --devices expected SCHEDULE:M, e.g. "
                          "zbv:8, or a chunk plan file")
    info = schedule_info(name)
    M, D = int(m_text), args.devices
    problem = get_problem(args.problem)
    if M < 1 or problem.B % M:
        raise UmpipeError(f"--plan {args.plan!r}: M must divide B = {problem.B} (torch cuts "
                          "the batch into equal microbatches)")
    v = check(info.name, D, M, args.chunks if info.layout == "loop" else None)
    C = D * v
    if args.partition:
        try:
            counts = tuple(int(x) for x in args.partition.split(","))
        except ValueError:
            raise UmpipeError(f"--partition {args.partition!r}: expected comma-separated layer "
                              "counts, e.g. 4,4,3,3") from None
    else:
        counts = balanced_counts(problem.S, C)
    layout = Layout(info.layout, D, counts)
    chunks = group_layers(problem, counts)
    mode = args.mode or "stash"
    lists = torch_orders(info.name, D, M, v)
    sizes = edp_sizes(problem.B, M)
    tl = simulate_devices(chunks, layout.devices, lists, sizes, mode, args.op_overhead,
                          send_after=torch_send_after(info.name, D, M, v))
    _device_pictures(args, tl, [(sizes, sizes, sizes)] * C,
                     {"problem": problem.name, "schedule": info.name, "mode": mode, "D": D,
                      "v": v, "M": M, "partition": list(counts)},
                     f"{problem.name} · {info.name} (v={v}, M={M}) · D={D} · {mode} · "
                     f"partition {'-'.join(map(str, counts))}")
    cap = parse_size(args.memory_cap) if args.memory_cap is not None else None
    fits = None if cap is None or tl.peak_memory is None else max(tl.peak_memory) <= cap
    if args.json:
        out = tl.to_dict(with_events=args.events)
        out.update(problem=problem.name, schedule=info.name, torch_class=info.torch_class,
                   D=D, chunks_per_device=v, M=M, mode=mode, partition=list(counts),
                   memory_cap=cap, fits_memory=fits, spec=args.plan)
        print(json.dumps(out))
        return 0
    print(f"problem {problem.name} ({problem.S} layers, B={problem.B}), {info.name} "
          f"({info.torch_class}) on D={D} devices, v={v}, M={M}, mode {mode}, partition "
          f"{'-'.join(map(str, counts))}")
    print(f"iteration time T = {tl.iteration_time * 1e3:.4f} ms")
    print(f"{'device':>6}  {'chunks':>8}  {'busy':>6}  {'bubble':>6}  {'end (ms)':>10}  "
          "peak memory")
    for d in range(D):
        mem = "-" if tl.peak_memory is None else format_bytes(tl.peak_memory[d])
        held = ",".join(str(c) for c in range(C) if layout.devices[c] == d)
        print(f"{d:>6}  {held:>8}  {tl.busy[d] / tl.iteration_time:>6.1%}  "
              f"{tl.bubble[d]:>6.1%}  {tl.device_end[d] * 1e3:>10.3f}  {mem}")
    if fits is False:
        print(f"warning: peak memory exceeds the memory cap {format_bytes(cap)} on device(s) "
              f"{[d for d in range(D) if tl.peak_memory[d] > cap]}")  # type: ignore[index]
    if args.show_ops:
        for d, row in enumerate(lists):
            print(f"device {d}: " + " ".join(row))
    _wrote(args)
    return 0


def run_chunk_plan(args: argparse.Namespace) -> int:
    """``simulate --devices D --plan FILE``: a chunk plan (docs/CHUNK-SCHEDULES.md) on D
    devices, its lists made by the chunk rule (called by :func:`run_devices`, which has
    checked the output paths)."""
    from ..chunk_schedule import chunk_order
    from ..chunk_torch import simulate_plan
    from ..chunkplan import ChunkPlan
    from ..errors import UmpipeError
    from ..memory import format_bytes, parse_size
    from ._lookup import problem as get_problem

    for flag in ("chunks", "partition"):
        if getattr(args, flag) is not None:
            raise UmpipeError(f"--{flag} does not apply to a chunk plan file, which gives its "
                              "layout and layers")
    plan = ChunkPlan.load(args.plan)
    if plan.D != args.devices:
        raise UmpipeError(f"--devices {args.devices}: chunk plan file {args.plan!r} is for "
                          f"D = {plan.D} devices")
    if args.mode is not None and args.mode != plan.mode:
        plan = plan.replace(mode=args.mode)
    problem = get_problem(args.problem)
    tl = simulate_plan(problem, plan, args.op_overhead)
    sched = chunk_order(plan)
    _device_pictures(args, tl, plan.parts(),
                     {"problem": problem.name, "plan": args.plan, "mode": plan.mode,
                      "D": plan.D},
                     f"{problem.name} · chunk plan {plan.describe()} · D={plan.D} · {plan.mode}"
                     f" · partition {'-'.join(map(str, plan.layers))}")
    cap = parse_size(args.memory_cap) if args.memory_cap is not None else None
    fits = None if cap is None or tl.peak_memory is None else max(tl.peak_memory) <= cap
    if args.json:
        out = tl.to_dict(with_events=args.events)
        out.update(problem=problem.name, D=plan.D, mode=plan.mode, plan=plan.to_dict(),
                   fallbacks=[{"position": i, "device": d, "kind": k}
                              for i, d, k in sched.fallbacks],
                   memory_cap=cap, fits_memory=fits, spec=args.plan)
        print(json.dumps(out))
        return 0
    print(f"problem {problem.name} ({problem.S} layers, B={problem.B}), chunk plan {args.plan} "
          f"[{plan.describe()}] on D={plan.D} devices, mode {plan.mode}, partition "
          f"{'-'.join(map(str, plan.layers))}")
    print(f"iteration time T = {tl.iteration_time * 1e3:.4f} ms"
          + (f" ({len(sched.fallbacks)} fallbacks, {sched.past_cap} past a cap)"
             if sched.fallbacks else ""))
    print(f"{'device':>6}  {'chunks':>8}  {'busy':>6}  {'bubble':>6}  {'end (ms)':>10}  "
          "peak memory")
    for d in range(plan.D):
        mem = "-" if tl.peak_memory is None else format_bytes(tl.peak_memory[d])
        held = ",".join(map(str, plan.device_chunks[d]))
        print(f"{d:>6}  {held:>8}  {tl.busy[d] / tl.iteration_time:>6.1%}  "
              f"{tl.bubble[d]:>6.1%}  {tl.device_end[d] * 1e3:>10.3f}  {mem}")
    if fits is False:
        print(f"warning: peak memory exceeds the memory cap {format_bytes(cap)} on device(s) "
              f"{[d for d in range(plan.D) if tl.peak_memory[d] > cap]}")  # type: ignore[index]
    if args.show_ops:
        for d, row in enumerate(sched.names()):
            print(f"device {d}: " + " ".join(row))
    _wrote(args)
    return 0


def _device_pictures(args: argparse.Namespace, tl: Any, parts: Any, meta: dict[str, Any],
                     title: str) -> None:
    """``--trace`` and ``--gantt`` of a timeline on devices (each file written whole)."""
    from ._paths import writing

    if args.trace:
        from ..trace import save_device_chrome_trace

        with writing(args.trace, "--trace"):
            save_device_chrome_trace(tl, parts, args.trace, meta)
    if args.gantt:
        from ..trace import save_device_gantt

        with writing(args.gantt, "--gantt"):
            save_device_gantt(tl, parts, args.gantt, title)


def _wrote(args: argparse.Namespace) -> None:
    for what, path in (("trace", args.trace), ("gantt", args.gantt)):
        if path:
            print(f"wrote {what}: {path}")
