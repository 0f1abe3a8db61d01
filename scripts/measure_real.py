#!/usr/bin/env python
"""Measured speedups: planner plan vs the best EDP GPipe and 1F1B plans, executed.

For each problem:

1. the best EDP(M) plan under ``gpipe`` and under ``1f1b`` by the simulator (every M, stash
   and recompute);
2. the best plan a registered planner finds (``--planner``, both memory modes); when no planner
   is registered, a seeded local search over cut bits started from the best EDP plan, so the
   machinery can still be validated (the report says which);
3. ``umpipe-bench execute`` on all of them in one run, measured alternately, plus
   torch.distributed.pipelining on the EDP stash plans (peer check);

then writes ``results/real/<problem>.csv`` / ``.json`` and ``results/real/README.md``.
Timings on a shared machine are noisy: medians of alternating rounds, paired ratios, and a
percentile-bootstrap 95 % interval of each speedup from the per-round ratios
(umpipe_bench/runtime/stats.py). ``--capped`` adds the best in-flight-capped variant of the
planned plan (the 1F1B family, docs/SCHEDULES.md); ``--op-times`` keeps every op's timers
(umpipe_bench/runtime/executor.py) in ``<out>/<problem>/op-times/``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from umpipe_bench.plan import Plan  # noqa: E402
from umpipe_bench.problem import Problem  # noqa: E402
from umpipe_bench.registry import get_problem  # noqa: E402
from umpipe_bench.runtime.comparison import (  # noqa: E402
    best_capped,
    best_edp,
    equal_plans,
    intervals,
    planned,
    predict,
    reprofile,
    save_plan,
)
from umpipe_bench.runtime.errors import StageFailure  # noqa: E402
from umpipe_bench.runtime.execution import prepare, run_execution  # noqa: E402
from umpipe_bench.runtime.report import write_csv  # noqa: E402

#: files under --out appended to README.md after the per-problem tables
SECTIONS = ("measured-gain.md", "workload.md", "prediction-quality.md", "overheads.md",
            "gpipe-vs-1f1b.md", "cuda.md")


def paired(a: list[float], b: list[float]) -> float:
    """Median over rounds of a[i] / b[i]."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def measure(problem_name: str, args: argparse.Namespace) -> dict[str, Any]:
    problem = get_problem(problem_name)
    out = Path(args.out)
    pdir = out / problem.name
    pdir.mkdir(parents=True, exist_ok=True)
    committed = problem
    if args.reprofile:
        problem_name = str(reprofile(problem, pdir / "profile.json"))
        problem = Problem.load(problem_name)
    g_plan, g_t = best_edp(problem, "gpipe")
    o_plan, o_t = best_edp(problem, "1f1b")
    u_plan, _u_t, how = planned(problem, args.planner, args.budget, args.seed)
    u_sched = str(u_plan.meta.get("schedule", "gpipe"))
    capped: tuple[Plan, float] | None = None
    if args.capped:
        capped = best_capped(problem, [u_plan, o_plan])

    def stem(kind: str, p: Plan) -> str:
        edp = f"edp{len(p.fwd[0])}" if p.is_edp() else "uedp"
        return f"{kind}-{edp}-{p.mode}"

    specs = [
        save_plan(g_plan, pdir / f"{stem('gpipe', g_plan)}.json", "gpipe"),
        save_plan(o_plan, pdir / f"{stem('1f1b', o_plan)}.json", "1f1b"),
        save_plan(u_plan, pdir / f"{stem('planned', u_plan)}.json", u_sched),
    ]
    if capped is not None:
        specs.append(save_plan(capped[0], pdir / f"{stem('capped', capped[0])}.json", "capped"))
    # the peer check needs stash EDP plans whose M divides B (pytorch#126600)
    for sched, (p, _t) in (("gpipe", (g_plan, g_t)), ("1f1b", (o_plan, o_t))):
        if args.no_peer:
            break
        if p.mode != "stash" or problem.B % len(p.fwd[0]):
            q, _ = best_edp(problem, sched, divides=True)
            specs.append(save_plan(q, pdir / f"{stem(sched, q)}-peer.json", sched))
    # contrast plans: a large predicted difference checks that predicted speedups hold when
    # they are big, not only the planner's small gains
    for spec in args.contrast:
        sched, _, m = spec.partition(":")
        c = Plan.edp(problem.S, problem.B, int(m), "stash")
        specs.append(save_plan(c, pdir / f"contrast-{stem(sched, c)}.json", sched))
    # every equal plan the user could run instead (--equal): the planned plan has to beat the
    # best of them as measured, not only the one the model ranks best
    for label, e, sched in equal_plans(problem, args.equal, {"gpipe": g_plan, "1f1b": o_plan},
                                       {s.stem for s in specs}):
        specs.append(save_plan(e, pdir / f"{label}.json", sched))
    loaded = [Plan.load(s) for s in specs]
    per_round = 1.6 * sum(  # 1.6: room for the torch.pipelining entries
        predict(problem, p, str(p.meta["schedule"])) for p in loaded
    )
    iters = args.iters or max(5, min(30, int(args.seconds / max(per_round, 1e-9))))
    print(f"[{problem.name}] {len(specs)} plans, {iters} iterations each", flush=True)
    ex = prepare(problem, [str(s) for s in specs], iters=iters, warmup=args.warmup, threads=1,
                 peer=not args.no_peer)
    env = {"UMPIPE_OP_TIMES": str(pdir / "op-times")} if args.op_times else None
    load_before = os.getloadavg()
    try:
        # a temporary run folder, kept only if the run fails
        result = run_execution(ex, extra_env=env)
    except StageFailure as exc:
        raise SystemExit(f"[{problem.name}] execute failed: {exc}") from None
    load_after = os.getloadavg()
    rows = ex.rows(result)
    (out / f"{problem.name}.csv").unlink(missing_ok=True)  # this run's rows only
    write_csv(rows, out / f"{problem.name}.csv")
    data: dict[str, Any] = {"rows": rows, "result": result}
    data["planner"] = how
    data["profile"] = "re-profiled (this run)" if args.reprofile else "committed file"
    # predictions of the same plans by the committed profile, for comparison
    data["committed_predictions"] = {
        str(s.name): predict(committed, p, str(p.meta["schedule"]))
        for s, p in zip(specs, loaded, strict=True)
    }
    data["loadavg"] = {"before": load_before, "after": load_after, "cpus": os.cpu_count()}
    labels = [s.stem for s in specs]
    equal = [lb for lb in labels if is_equal_label(lb)]
    data["intervals"] = intervals(result, [(b, o) for b in equal for o in labels
                                           if o.startswith(("planned", "capped"))])
    med = {e["label"]: statistics.median(e["times"]) for e in result["entries"]}
    data["best_equal_measured"] = min(equal, key=lambda lb: med[lb])
    data["command"] = " ".join(["scripts/measure_real.sh", *sys.argv[1:]])
    data["plans"] = {str(s.name): p.to_dict() for s, p in zip(specs, loaded, strict=True)}
    (out / f"{problem.name}.json").write_text(json.dumps(data, indent=1) + "\n")
    return data


def markdown(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "# Real execution results",
        "",
        f"Generated by `scripts/measure_real.sh` on "
        f"{_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}. One process per stage "
        "(gloo, 1 thread each), plans timed alternately after warm-up in one run; medians; "
        "speedups are medians of per-round ratios. The machine is shared with other work, so "
        "absolute times drift; compare ratios within a table. *compute error*: measured "
        "per-stage compute (ops minus receive waits, plus the optimizer step) summed over "
        "stages vs the simulator's busy time; it is the part of the model error due to stages "
        "computing slower (or faster) than profiled.",
        "",
    ]
    for name, data in results.items():
        rows = data["rows"]
        res = data["result"]
        lines += [
            f"## {name}",
            "",
            f"Planner: {data['planner']}. {res['iters']} iterations per plan after "
            f"{res['warmup']} warm-up; torch {res['torch']}, backend {res['backend']}, "
            f"{res['world_size']} processes. Load average (1 min) before/after: "
            f"{data['loadavg']['before'][0]:.1f}/{data['loadavg']['after'][0]:.1f} on "
            f"{data['loadavg']['cpus']} CPUs (other users' work included).",
            *([f"Command: `{data['command']}`."] if data.get("command") else []),
            "",
            "| plan | engine | schedule | mode | kind | predicted ms | measured ms (p10-p90) "
            "| model error | compute error | speedup meas. | speedup pred. | meas./pred. "
            "| ours/torch |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:

            def f(x: Any, fmt: str) -> str:
                return "-" if x in (None, "") else format(x, fmt)

            lines.append(
                f"| {r['plan']} | {r['engine']} | {r['schedule']} | {r['mode']} | "
                f"{r['plan_kind']} | {f(r['predicted_time'] and r['predicted_time'] * 1e3, '.1f')}"
                " | "
                f"{r['measured_median'] * 1e3:.1f} ({r['measured_p10'] * 1e3:.1f}-"
                f"{r['measured_p90'] * 1e3:.1f}) | {f(r['model_error'], '+.1%')} | "
                f"{f(r['compute_error'], '+.1%')} | "
                f"{f(r['speedup_measured'], '.3f')} | {f(r['speedup_predicted'], '.3f')} | "
                f"{f(r['speedup_ratio'], '.2f')} | {f(r['peer_ratio'], '.3f')} |"
            )
        ent = {e["label"]: e for e in res["entries"]}
        planned = next(r for r in rows if r["plan"].startswith("planned"))
        lines.append("")
        for base in rows[:2]:
            sp = paired(ent[base["plan"]]["times"], ent[planned["plan"]]["times"])
            pred = (
                base["predicted_time"] / planned["predicted_time"]
                if planned["predicted_time"]
                else None
            )
            ok = "meets" if pred and sp >= 0.8 * pred else "misses"
            lines.append(
                f"- {planned['plan']} vs {base['plan']}: measured speedup {sp:.3f}, predicted "
                f"{pred:.3f} ({ok} the >= 0.8x goal)."
            )
        for c in (r for r in rows if r["plan"].startswith("contrast")):
            for base in (rows[0], planned):
                sp = paired(ent[c["plan"]]["times"], ent[base["plan"]]["times"])
                pred = c["predicted_time"] / base["predicted_time"]
                lines.append(
                    f"- {base['plan']} vs {c['plan']} (contrast): measured speedup {sp:.3f}, "
                    f"predicted {pred:.3f} (measured/predicted {sp / pred:.2f})."
                )
        best_eq = data.get("best_equal_measured")
        if best_eq:
            lines.append(
                f"- best equal plan as measured (lowest median of the {len(equal_rows(rows))} "
                f"equal plans run): {best_eq}."
            )
        for pair, iv in data.get("intervals", {}).items():
            lines.append(
                f"- {pair}: measured speedup {iv['median']:.3f}, bootstrap "
                f"{iv['level']:.0%} interval [{iv['low']:.3f}, {iv['high']:.3f}] over "
                f"{iv['rounds']} per-round ratios"
                + (" (above 1.0)." if iv["low"] > 1.0 else " (not above 1.0).")
            )
        errs = [
            abs(r["model_error"])
            for r in rows
            if r["model_error"] is not None and r["engine"] == "umpipe"
        ]
        cerrs = [
            r["compute_error"]
            for r in rows
            if r["compute_error"] is not None and r["engine"] == "umpipe"
        ]
        if errs:
            lines.append(
                f"- median |model error| over our plans: {statistics.median(errs):.1%} "
                f"(goal <= 10%); predictions from the {data.get('profile', 'committed file')} "
                "profile."
            )
        committed = data.get("committed_predictions", {})
        cm = [
            abs(r["measured_median"] / committed[f"{r['plan']}.json"] - 1)
            for r in rows
            if r["engine"] == "umpipe" and f"{r['plan']}.json" in committed
        ]
        if cm and data.get("profile") != "committed file":
            lines.append(
                f"- the same plans predicted by the committed profile instead: median |model "
                f"error| {statistics.median(cm):.1%}."
            )
        if cerrs:
            lines.append(
                f"- median compute error: {statistics.median(cerrs):+.1%}. When it is close to "
                "the model error, the gap comes from the profile (stage costs measured at another "
                "machine load than this run's), not from scheduling or communication."
            )
        peers = [r for r in rows if r["peer_ratio"] is not None]
        for r in peers:
            lines.append(
                f"- ours/torch.pipelining on {r['plan']}: {r['peer_ratio']:.3f} (goal <= 1.05)."
            )
        lines.append("")
    return "\n".join(lines) + "\n"


def is_equal_label(label: str) -> bool:
    """Whether a plan label names an equal plan: a best EDP plan or an ``--equal`` one."""
    return label.startswith(("gpipe-", "1f1b-", "equal-"))


def equal_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["engine"] == "umpipe" and is_equal_label(r["plan"])]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("problems", nargs="*", default=["gpt1-mini-s2", "vgg16-mini-s2"])
    ap.add_argument(
        "--planner",
        action="append",
        default=None,
        help="planner names to try in order (default: tidgap, dgap)",
    )
    ap.add_argument("--budget", default=None, help="planner budget, e.g. evals:20000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iters", type=int, default=0, help="0: fit --seconds")
    ap.add_argument(
        "--seconds",
        type=float,
        default=240.0,
        help="target measured seconds per problem when --iters is 0",
    )
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument(
        "--contrast",
        action="append",
        default=None,
        metavar="SCHED:M",
        help="extra EDP plans with a large predicted difference (default: gpipe:1)",
    )
    ap.add_argument(
        "--equal",
        default="",
        metavar="M,M,...",
        help="also run EDP(M) under gpipe and 1f1b for each M listed (each in the mode of that "
        "schedule's best EDP plan); the report names the best equal plan as measured and gives "
        "the planned plan's interval against every one (default: none)",
    )
    ap.add_argument(
        "--reprofile",
        action="store_true",
        help="profile each problem again first (as its file was made) and predict with that",
    )
    ap.add_argument("--capped", action="store_true",
                    help="also run the best in-flight-capped variant of the planned plan")
    ap.add_argument("--op-times", action="store_true",
                    help="keep per-op timers in <out>/<problem>/op-times/")
    ap.add_argument("--no-peer", action="store_true", help="skip torch.distributed.pipelining")
    ap.add_argument("--report-only", action="store_true",
                    help="measure nothing: rewrite README.md from the results already in --out")
    ap.add_argument("--out", default=str(ROOT / "results" / "real"))
    args = ap.parse_args()
    args.planner = args.planner or ["tidgap", "dgap"]
    args.contrast = ["gpipe:1"] if args.contrast is None else [c for c in args.contrast if c]
    try:
        args.equal = [int(m) for m in args.equal.split(",") if m.strip()]
    except ValueError:
        ap.error(f"--equal: expected a comma-separated list of microbatch counts, got "
                 f"{args.equal!r}")
    if any(m < 1 for m in args.equal):
        ap.error("--equal: every microbatch count must be at least 1")
    for name in [] if args.report_only else args.problems:
        measure(name, args)
    # the report covers every problem measured so far in this folder (latest run of each)
    # a run file holds "rows"; other JSON files in the folder (e.g. chunk-derivation.json) are
    # other tools' results
    results = {p.stem: d for p in sorted(Path(args.out).glob("*.json"))
               if isinstance(d := json.loads(p.read_text()), dict) and "rows" in d}
    md = markdown(results)
    # hand-kept and other scripts' sections, in this order, when present
    for extra in SECTIONS:
        f = Path(args.out) / extra
        if f.exists():
            md += "\n" + f.read_text()
    Path(args.out, "README.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
