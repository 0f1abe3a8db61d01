"""``umpipe-bench simulate``: one plan on one problem through the reference simulator."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate one iteration of a plan (docs/MODEL.md §4) and print T",
        description="Simulate one training iteration of a plan on a problem with the reference "
        "list-schedule simulator. SPEC is 'gpipe:M' (EDP(M) under GPipe), '1f1b:M' (EDP(M) "
        "under 1F1B) or a plan JSON file (written by 'umpipe-bench plan --out'; a plan with "
        "in-flight caps runs the 'capped' schedule, docs/SCHEDULES.md).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--problem", required=True, help="problem name (see 'problems') or file")
    p.add_argument("--plan", required=True, metavar="SPEC", help="gpipe:M, 1f1b:M or plan file")
    p.add_argument("--mode", choices=("stash", "recompute"), default=None,
                   help="memory mode (default: stash for gpipe:M/1f1b:M, the file's for a file)")
    p.add_argument("--memory-cap", metavar="SIZE",
                   help="device memory per stage (bytes, or 512MiB, 24GiB, 2GB...): report "
                   "whether every stage's peak fits; default: the problem file's capacities")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--events", action="store_true",
                   help="with --json: include every op and transfer, and each stage's ops in "
                   "execution order ('stage_ops')")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome trace (Perfetto) JSON")
    p.add_argument("--gantt", metavar="FILE", help="write a Gantt chart PNG")
    p.add_argument("--show-ops", action="store_true", help="print the per-stage op lists")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..memory import format_bytes, parse_size
    from ..plan import parse_plan_spec
    from ..schedules import build_schedule, format_schedule
    from ..simulator import simulate
    from ._lookup import problem as get_problem
    from ._paths import check_output_file, writing

    check_output_file(args.trace, "--trace")
    check_output_file(args.gantt, "--gantt")
    problem = get_problem(args.problem)
    if args.memory_cap is not None:
        problem = problem.with_memory_cap(parse_size(args.memory_cap))
    plan, schedule = parse_plan_spec(args.plan, problem, args.mode)
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
    for what, path in (("trace", args.trace), ("gantt", args.gantt)):
        if path:
            print(f"wrote {what}: {path}")
    return 0
