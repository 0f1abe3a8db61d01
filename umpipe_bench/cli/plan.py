"""``umpipe-bench plan``: run one planner on one problem; report T and the speedups.

Speedups are against the best equal-microbatch plans in the same memory mode that fit memory
(docs/MODEL.md §2 EDP, best M in 1..B; docs/SCHEDULES.md §4): GPipe (gpipe schedule), 1F1B
(the paper's PipeDream comparison) and the better of the two, written as
``T_baseline / T - 1`` (0.1389 = +13.89 %, the paper's convention and the leaderboard's).

With ``--devices D`` the planner is :class:`~umpipe_bench.planners.algorithms.chunk_search.
ChunkSearch` (chunk plans on D devices, docs/CHUNK-SCHEDULES.md §9) and the speedups are against
torch's seven schedules at their best v, M and partition (``umpipe-bench schedules``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import Terminated, UserInputError
from ..planners.algorithms._tidgap_settings import settle_text
from ._numbers import whole
from ._paths import path_arg

#: The most of a time budget the report's EDP reference scans take before the planner runs
#: (they are partial then, and the report says how far they got; a planner that needs them,
#: as the schedule family's do, carries them on in its own seeding).
REFERENCE_SHARE = 0.25
#: Seconds at the end of a time budget (at most 5 % of it) left for what follows the search:
#: the final plan, the report, the plan file and the process's exit (0.3-0.6 s here).
FINISH_RESERVE = 0.5


def problem_under_cap(problem: Any, text: str) -> Any:
    """``problem`` under ``--memory-cap TEXT`` (a size or a share, :mod:`..bench.memcap`);
    a bad entry is one line naming the option."""
    from ..bench.memcap import apply_memory_cap

    try:
        return apply_memory_cap(problem, text)[0]
    except ValueError as exc:
        raise UserInputError(f"--memory-cap: {exc}") from None


def device_cap(problem: Any, D: int, text: str | None) -> float | None:
    """One capacity in bytes for every one of ``D`` devices from ``--memory-cap TEXT`` (a
    size or a share of torch's GPipe schedule, :func:`..bench.memcap.device_memory_cap`);
    a bad entry is one line naming the option."""
    from ..bench.memcap import device_memory_cap

    try:
        return device_memory_cap(problem, D, text)
    except ValueError as exc:
        raise UserInputError(f"--memory-cap: {exc}") from None


def _parse_sets(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserInputError(f"--set {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="find a plan with a planner (DGAP, TiDGAP or a baseline) and print its speedup",
        description="Run a registered planner on a problem. Prints the predicted iteration "
        "time T and the speedup T_base / T - 1 over the best GPipe-EDP and 1F1B-EDP plans "
        "(best M in 1..B, same memory mode). Planner settings go through --set, e.g. "
        "--set population=256 --set backend=numpy. With --devices D it plans chunk plans "
        "(layouts, layer partitions, per-chunk microbatches, per-device caps, split backward) "
        "and prints T against torch's seven schedules (docs/CHUNK-SCHEDULES.md §9).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--problem", required=True, help="problem name (see 'problems') or file")
    p.add_argument("--planner", default=None,
                   help="planner name (dgap, tidgap, gpipe, 1f1b, local-greedy, greedy-dp, "
                   "random-search, optuna-tpe, exact, or any registered one); default: tidgap; "
                   "with --devices: chunk-search (default) or chunk-exact (the optimum of "
                   "layout one on tiny problems)")
    p.add_argument("--devices", "-D", type=whole(0), metavar="D",
                   help="plan chunk plans on D devices (docs/CHUNK-SCHEDULES.md §9): the "
                   "problem's stages are layers, cut into chunks (layouts one, loop, v), each "
                   "chunk with its own microbatches, caps per device, split backward where the "
                   "problem has its costs; prints T against torch's seven schedules at their "
                   "best M and partition; default: one stage per device")
    p.add_argument("--mode", choices=("stash", "recompute"), default="stash",
                   help="memory mode (recompute frees the backward partitions)")
    p.add_argument("--seed", default=0, metavar="SEED",
                   help="random seed: an integer in 0..4294967295 (numpy's and Optuna's "
                   "range); the same seed gives the same plan")
    p.add_argument("--budget", default=None,
                   help="evals:N, gens:N, secs:X or a comma-separated mix (first reached stops); "
                   "default: the planner's own (tidgap: " + settle_text().replace("%", "%%")
                   + "; docs/SEARCH.md \"Stopping\")")
    p.add_argument("--set", dest="settings", action="append", metavar="KEY=VALUE",
                   help="a planner setting (repeatable)")
    p.add_argument("--memory-cap", metavar="SIZE",
                   help="device memory per stage: bytes or a size such as 24GiB, 512MiB, 2GB, "
                   "or a share such as 50%% (per stage: its static bytes plus that share of the "
                   "activations of the best GPipe-EDP plan in stash mode; with --devices: one "
                   "capacity, the most any device needs for its static bytes plus that share of "
                   "the activations torch's GPipe schedule keeps there); plans (and baselines) "
                   "whose peak exceeds it anywhere are refused (docs/SCHEDULES.md §4); with "
                   "--devices also torch: what the fastest torch schedule holds on its most "
                   "loaded device (the plan at equal memory); default: "
                   "the problem file's capacities, if any")
    p.add_argument("--out", type=path_arg, metavar="FILE",
                   help="write the plan JSON (for simulate/execute)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time

    from ..bound import lower_bound
    from ..memory import check_fits, format_bytes
    from ..planners.evaluation.clock import running
    from ..planners.evaluation.reference import edp_reference
    from ..planners.search.base import Budget
    from ..schema import parse_seed
    from ..simulator import simulate
    from ._lookup import planner_class
    from ._lookup import problem as get_problem
    from ._paths import check_output_file, writing

    started = getattr(args, "started", None) or time.perf_counter()
    args.seed = parse_seed(args.seed, "--seed")
    check_output_file(args.out, "--out")
    if args.devices is not None:
        return run_devices(args)
    if args.planner is None:
        args.planner = "tidgap"
    problem = get_problem(args.problem)
    if args.memory_cap is not None:
        problem = problem_under_cap(problem, args.memory_cap)
    settings = _parse_sets(args.settings)
    planner = planner_class(args.planner)(**settings)
    budget = Budget.parse(args.budget or planner.budget_for(problem))
    if budget.seconds is not None and not planner.timed:
        print(f"umpipe-bench plan: warning: planner {planner.name!r} is a one-shot construction "
              f"and ignores the time budget secs:{budget.seconds:g} (it runs to its end)",
              file=sys.stderr)
    # the whole command runs on the budget's clock: what the report needs first (the bound,
    # the EDP references, which the planners' seeding reuses, at most REFERENCE_SHARE of a
    # time budget), then the planner, which stops where the clock says (docs/ARCHITECTURE.md,
    # "Budgets and signals")
    clock = planner.clock_for(budget, started,
                              progress=not args.no_progress and sys.stderr.isatty(),
                              reserve=min(FINISH_RESERVE, 0.05 * (budget.seconds or 0.0)))
    lb: float | None = None
    with running(clock):
        try:
            clock.tick()  # the progress bar shows from the start
            problem.digest(capacities=False)  # the plan's meta names it
            lb = lower_bound(problem, args.mode)
            with clock.share(REFERENCE_SHARE):
                edp_reference(problem, args.mode, partial=True)
            res = planner.plan(problem, mode=args.mode, budget=budget, seed=args.seed,
                               progress=clock.progress, clock=clock, partial=True)
        except KeyboardInterrupt as exc:  # outside the search: the best EDP plan scanned
            clock.stop("interrupted")
            res = _edp_result(planner.name, problem, args, exc, clock.phase)
        if res.interrupted is not None:
            clock.stop("interrupted")  # no new work: save the plan and go
        tl = simulate(problem, res.plan, res.schedule)
        check_fits(tl.peak_memory or [], tl.capacity,
                   f"the plan planner {res.planner!r} returned")
        edp = edp_reference(problem, args.mode, partial=True)
    if res.stopped:
        print(f"umpipe-bench plan: {res.stopped}", file=sys.stderr)
    T = res.iteration_time
    speedups = edp.speedups(T)
    out: dict[str, Any] = {
        "planner": res.planner,
        "problem": problem.name,
        "mode": args.mode,
        "seed": args.seed,
        "budget": str(args.budget or planner.budget_for(problem)),
        "schedule": res.schedule,
        "caps": None if res.plan.caps is None else list(res.plan.caps),
        "iteration_time": T,
        "start_time": res.start_time,
        "gpipe_time": edp.gpipe.T,
        "gpipe_M": edp.gpipe.M,
        "1f1b_time": edp.one_f_one_b.T,
        "1f1b_M": edp.one_f_one_b.M,
        "best_edp_time": edp.best_T,
        "speedup_vs_gpipe": speedups["gpipe"],
        "speedup_vs_1f1b": speedups["1f1b"],
        "speedup_vs_best_edp": speedups["best_edp"],
        "lower_bound": lb,
        "gap_to_bound": None if lb is None else T / lb - 1.0,
        "memory_cap": None if tl.capacity is None else max(tl.capacity),
        "peak_memory": tl.peak_memory,
        "fits_memory": tl.fits_memory,
        "evaluations": res.evaluations,
        "wall_time": res.wall_time,
        "settings": res.settings,
        "plan_kind": res.plan.describe(),
    }
    if res.stopped:
        out["stopped"] = res.stopped
    if edp.incomplete:  # the M each EDP scan reached before the time budget ended
        out["edp_scanned"] = {s: n for s, (n, _) in edp.incomplete.items()}
    if args.out:
        with writing(args.out, "--out"):
            res.plan.save(args.out)
        out["out"] = args.out
    if args.json:
        out["plan"] = res.plan.to_dict()
        print(json.dumps(out, default=str))
    else:
        _print_report(args, problem, res, out, edp, speedups, lb, tl, format_bytes)
    if res.interrupted is not None:
        raise res.interrupted  # the plan so far is saved: exit 130 (SIGINT) / 143 (SIGTERM)
    return 0


def _edp_result(planner: str, problem: Any, args: argparse.Namespace,
                exc: KeyboardInterrupt, phase: str) -> Any:
    """The best EDP plan the reference scans reached, as the result of a run a signal ended
    outside the planner's search (the signal re-raised when they reached none)."""
    from ..errors import MemoryCapError
    from ..planners.search.base import PlanResult, annotate_result
    from ..planners.search.loop import never_worse_than_edp

    try:
        plan, schedule, T = never_worse_than_edp(problem, args.mode, None, "", float("inf"))
    except MemoryCapError:
        raise exc from None
    res = PlanResult(planner=planner, plan=plan, iteration_time=T, schedule=schedule,
                     seed=args.seed, interrupted=exc,
                     stopped=f"{str(exc) or 'interrupted'} during {phase}; the plan is the "
                     "best EDP plan scanned")
    return annotate_result(res, problem)


def _print_report(args: argparse.Namespace, problem: Any, res: Any, out: dict[str, Any],
                  edp: Any, speedups: dict[str, Any], lb: float | None, tl: Any,
                  format_bytes: Any) -> None:
    T = res.iteration_time
    print(f"problem {problem.name} (S={problem.S}, B={problem.B}), mode {args.mode}, "
          f"planner {res.planner}, seed {args.seed}, budget {out['budget']}")
    print(f"iteration time T = {T * 1e3:.4f} ms  [{res.plan.describe()}, {res.schedule} "
          f"schedule]  ({res.evaluations} evaluations, {res.wall_time:.2f} s)")
    if res.start_time is not None:
        print(f"starting point   = {res.start_time * 1e3:.4f} ms")
    for label, schedule in (("GPipe-EDP", "gpipe"), ("1F1B-EDP", "1f1b")):
        base, gain = edp.of(schedule), speedups[schedule]
        scanned = edp.incomplete.get(schedule)
        part = "" if scanned is None else f" (best of M = 1..{scanned[0]} of {scanned[1]})"
        if base.T is None or gain is None:
            print(f"vs {label:<10} no EDP(M) fits the memory cap{part}")
        else:
            print(f"vs {label:<10} (M={base.M:>3}, {base.T * 1e3:.4f} ms): {100 * gain:+.2f} %"
                  f"{part}")
    if lb is not None:
        print(f"lower bound     ({lb * 1e3:.4f} ms): T is at most {100 * (T / lb - 1):.2f} % "
              "above the optimum (docs/SIMNETS.md)")
    if tl.peak_memory is not None:
        cap = "" if tl.capacity is None else f" (cap {format_bytes(max(tl.capacity))})"
        print(f"peak memory: max {format_bytes(max(tl.peak_memory))} over stages{cap}")
    if problem.S <= 16:
        for s in range(problem.S):
            fwd, bwd = res.plan.fwd[s], res.plan.bwd[s]
            line = f"  stage {s:>2} fwd {list(fwd)}"
            if args.mode == "recompute":
                line += f"  bwd {list(bwd)}"
            if res.plan.caps is not None:
                line += f"  cap {res.plan.caps[s]}"
            print(line)
    if args.out:
        print(f"wrote plan: {args.out}")


def run_devices(args: argparse.Namespace) -> int:
    """``plan --devices D``: the chunk-plan planner (docs/CHUNK-SCHEDULES.md §9)."""
    from ..baselines.chunk_exact import ChunkExact
    from ..planners.algorithms.chunk_search import ChunkSearch
    from ._lookup import problem as get_problem
    from ._paths import writing

    kinds = {k.name: k for k in (ChunkSearch, ChunkExact)}
    name = ChunkSearch.name if args.planner is None else args.planner.lower()
    if name not in kinds:
        raise UserInputError(f"--planner {args.planner}: with --devices the planner is one of "
                             f"{', '.join(kinds)} (the planners of chunk plans); drop --planner "
                             "or --devices")
    problem = get_problem(args.problem)
    D = args.devices
    if not 1 <= D <= problem.S:
        raise UserInputError(f"--devices must be in 1..{problem.S} (the problem's layers), got "
                             f"{D}")
    planner = kinds[name](**_parse_sets(args.settings))
    torch_cap = args.memory_cap is not None and args.memory_cap.strip().lower() == "torch"
    if torch_cap:  # equal memory: what the fastest torch schedule holds
        from ..planners.algorithms._chunk_search_settings import device_capacity, torch_memory

        try:
            cap, _ = torch_memory(problem, D, args.mode, device_capacity(problem, None))
        except ValueError as exc:
            raise UserInputError(f"--memory-cap torch: {exc}") from None
    else:
        cap = device_cap(problem, D, args.memory_cap)
    budget = args.budget or planner.default_budget
    try:
        res = planner.plan(problem, D, mode=args.mode, budget=budget, seed=args.seed,
                           memory_cap=cap, progress=not args.no_progress and sys.stderr.isatty(),
                           started=getattr(args, "started", None))
    except (KeyboardInterrupt, Terminated) as exc:  # before the search had a plan
        print(f"umpipe-bench plan: {str(exc) or 'interrupted'} during the torch baselines, "
              "before any chunk plan; nothing written", file=sys.stderr)
        raise
    if res.stopped:
        print(f"umpipe-bench plan: {res.stopped}", file=sys.stderr)
    plan, T = res.plan, res.iteration_time
    best, exact = res.best_torch(), res.best_torch(exact_only=True)
    out: dict[str, Any] = {
        "planner": planner.name,
        "problem": problem.name,
        "devices": D,
        "mode": args.mode,
        "seed": args.seed,
        "budget": str(budget),
        "iteration_time": T,
        "start_time": res.start_time,
        "layout": plan.layout,
        "v": plan.v,
        "partition": list(plan.layers),
        "split": plan.split,
        "plan_kind": plan.describe(),
        "best_torch_schedule": None if best is None else best.schedule,
        "T_best_torch": None if best is None else best.T,
        "speedup_vs_best_torch": res.speedup_vs(best),
        "best_reproduced_schedule": None if exact is None else exact.schedule,
        "T_best_reproduced": None if exact is None else exact.T,
        "speedup_vs_best_reproduced": res.speedup_vs(exact),
        "faster_torch_schedules": [b.schedule for b in res.baselines
                                   if b.T is not None and b.T < T],
        "torch": [b.to_dict() for b in res.baselines],
        "memory_cap": res.memory_cap,
        "memory_cap_rule": "torch" if torch_cap else args.memory_cap,
        "peak_memory": res.peak_memory,
        "evaluations": res.evaluations,
        "generations": res.generations,
        "spaces": res.spaces,
        "wall_time": res.wall_time,
        "settings": res.settings,
    }
    if res.proven_optimal is not None:
        out["proven_optimal"] = res.proven_optimal
    if res.stopped:
        out["stopped"] = res.stopped
    if args.out:
        with writing(args.out, "--out"):
            plan.save(args.out)
        out["out"] = args.out
    if args.json:
        out["plan"] = plan.to_dict()
        print(json.dumps(out, default=str))
    else:
        _print_devices(problem, args, planner, budget, res, T, plan, best)
    if res.interrupted is not None:
        raise res.interrupted  # the plan so far is saved: exit 130 (SIGINT) / 143 (SIGTERM)
    return 0


def _print_devices(problem: Any, args: argparse.Namespace, planner: Any, budget: Any, res: Any,
                   T: float, plan: Any, best: Any) -> None:
    """The text report of ``plan --devices``."""
    from ..memory import format_bytes

    print(f"problem {problem.name} ({problem.S} layers, B={problem.B}) on D={args.devices} "
          f"devices, mode {args.mode}, planner {planner.name}, seed {args.seed}, budget {budget}")
    print(f"iteration time T = {T * 1e3:.4f} ms  [{plan.describe()}, partition "
          f"{'-'.join(map(str, plan.layers))}]  ({res.evaluations} evaluations over "
          f"{res.spaces} spaces, {res.wall_time:.2f} s)")
    print(f"{'torch schedule':<17} {'v':>2} {'M':>3}  {'T (ms)':>10}  {'speedup':>9}  partition")
    for b in res.baselines:
        if b.T is None:
            print(f"{b.schedule:<17} {'-':>2} {'-':>3}  {'-':>10}  {'-':>9}  ({b.reason})")
            continue
        gain = res.speedup_vs(b)
        print(f"{b.schedule:<17} {b.v:>2} {b.M:>3}  {b.T * 1e3:>10.3f}  "
              f"{100 * gain:>+8.2f}%  {'-'.join(map(str, b.counts or ()))}"
              + ("" if b.exact else "  (not a chunk plan: torch's own lists)"))
    if res.proven_optimal is not None:
        print("optimal over every plan of layout one (enumerated)" if res.proven_optimal else
              "not proven optimal: the enumeration was cut short")
    if best is not None and best.T is not None:
        verdict = "faster than" if T < best.T else "as fast as" if T == best.T else \
            "slower than"
        print(f"vs the fastest torch schedule, {best.schedule}: "
              f"{100 * (best.T / T - 1):+.2f} % ({verdict} it)")
    if res.peak_memory is not None:
        capt = "" if res.memory_cap is None else f" (cap {format_bytes(res.memory_cap)})"
        print(f"peak memory: max {format_bytes(max(res.peak_memory))} over devices{capt}")
    if args.out:
        print(f"wrote chunk plan: {args.out}")
