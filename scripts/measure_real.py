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
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from umpipe_bench.plan import Plan  # noqa: E402
from umpipe_bench.planners.evaluation.reference import best_edp as reference_best_edp  # noqa: E402
from umpipe_bench.problem import Problem  # noqa: E402
from umpipe_bench.registry import get_planner, get_problem, planner_names  # noqa: E402
from umpipe_bench.runtime.errors import StageFailure  # noqa: E402
from umpipe_bench.runtime.execution import prepare, run_execution  # noqa: E402
from umpipe_bench.runtime.report import write_csv  # noqa: E402
from umpipe_bench.runtime.stats import bootstrap_median, paired_ratios  # noqa: E402
from umpipe_bench.simulator import simulate  # noqa: E402

#: files under --out appended to README.md after the per-problem tables
SECTIONS = ("measured-gain.md", "workload.md", "prediction-quality.md", "overheads.md",
            "gpipe-vs-1f1b.md", "cuda.md")


def predict(problem: Problem, plan: Plan, schedule: str) -> float:
    return simulate(problem, plan, schedule).iteration_time


def best_edp(problem: Problem, schedule: str, divides: bool = False) -> tuple[Plan, float]:
    """The fastest EDP(M) plan under ``schedule`` over every M and both memory modes;
    ``divides``: stash mode and only M dividing B (what torch.distributed.pipelining runs)."""
    if not divides:
        options = [(mode, *reference_best_edp(problem, mode, schedule))
                   for mode in ("stash", "recompute")]
        mode, M, t = min(options, key=lambda o: o[2])
        return Plan.edp(problem.S, problem.B, M, mode), t
    plans = [Plan.edp(problem.S, problem.B, M, "stash")
             for M in range(1, problem.B + 1) if problem.B % M == 0]
    return min(((p, predict(problem, p, schedule)) for p in plans), key=lambda pt: pt[1])


def local_search(problem: Problem, start: Plan, *, evals: int, seed: int) -> tuple[Plan, float]:
    """Seeded first-improvement search over cut bits (docs/MODEL.md §2) under ``gpipe``."""
    rng = random.Random(seed)
    fbits, bbits = start.to_bits()
    best_t = predict(problem, start, "gpipe")
    best = start
    if problem.B < 2:
        return best, best_t
    for _ in range(evals):
        f = [list(b) for b in fbits]
        g = [list(b) for b in bbits]
        for _ in range(rng.choice((1, 1, 2, 3))):
            s = rng.randrange(problem.S)
            i = rng.randrange(problem.B - 1)
            target = f if (start.mode == "stash" or rng.random() < 0.5) else g
            target[s][i] ^= 1
        plan = Plan.from_bits(f, None if start.mode == "stash" else g, start.mode)
        t = predict(problem, plan, "gpipe")
        if t <= best_t:
            best, best_t, fbits, bbits = plan, t, f, g
    return best, best_t


def planned(problem: Problem, names: list[str], budget: str, seed: int) -> tuple[Plan, float, str]:
    """Best plan of the first available planner over both modes, else local search."""
    available = set(planner_names())
    for name in names:
        if name.lower() not in available:
            continue
        best: tuple[Plan, float, str] | None = None
        for mode in ("stash", "recompute"):
            res = get_planner(name).plan(problem, mode=mode, budget=budget, seed=seed)
            if res.schedule != "gpipe" and res.schedule != res.plan.meta.get("schedule"):
                res.plan.meta["schedule"] = res.schedule
            if best is None or res.iteration_time < best[1]:
                best = (res.plan, res.iteration_time, f"{name} ({res.evaluations} evals)")
        assert best is not None
        return best
    start_s, _ = best_edp(problem, "gpipe")
    cands = []
    for mode in ("stash", "recompute"):
        start = Plan(fwd=start_s.fwd, bwd=start_s.bwd, mode=mode)
        plan, t = local_search(problem, start, evals=3000, seed=seed)
        cands.append((plan, t))
    plan, t = min(cands, key=lambda c: c[1])
    return plan, t, f"local search (no planner among {names} registered; 2 x 3000 evals)"


def equal_plans(problem: Problem, counts: list[int], best: dict[str, Plan],
                have: set[str]) -> list[tuple[str, Plan, str]]:
    """``(label, EDP(M) plan, schedule)`` for every ``M`` in ``counts`` under each schedule of
    ``best`` (in the memory mode of that schedule's best EDP plan), skipping labels already in
    ``have`` (the best EDP plans themselves run under their own labels)."""
    out: list[tuple[str, Plan, str]] = []
    seen = set(have)
    for m in counts:
        if not 1 <= m <= problem.B:
            raise SystemExit(f"[{problem.name}] --equal: M = {m} is not in 1..B = {problem.B}")
        for sched, base in best.items():
            e = Plan.edp(problem.S, problem.B, m, base.mode)
            kind = f"{sched}-edp{m}-{e.mode}"
            if kind in seen or f"equal-{kind}" in seen:
                continue
            seen.add(f"equal-{kind}")
            out.append((f"equal-{kind}", e, sched))
    return out


def best_capped(problem: Problem, plans: list[Plan]) -> tuple[Plan, float]:
    """The fastest in-flight-capped variant (docs/SCHEDULES.md) of ``plans``: every cap vector
    ``K`` in ``1..B`` per stage for S <= 2 (else each stage's cap alike), simulated."""
    import itertools

    best: tuple[Plan, float] | None = None
    for plan in plans:
        grid = (itertools.product(range(1, problem.B + 1), repeat=problem.S) if problem.S <= 2
                else ((k,) * problem.S for k in range(1, problem.B + 1)))
        for caps in grid:
            c = plan.with_caps(caps)
            t = predict(problem, c, "capped")
            if best is None or t < best[1]:
                best = (c, t)
    assert best is not None
    return best


def intervals(result: dict[str, Any], pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Bootstrap 95 % interval of the median per-round speedup ``base/other`` per pair."""
    ent = {e["label"]: e for e in result["entries"]}
    out: dict[str, Any] = {}
    for base, other in pairs:
        if base in ent and other in ent:
            iv = bootstrap_median(paired_ratios(ent[base]["times"], ent[other]["times"]))
            out[f"{other} vs {base}"] = {"median": iv.median, "low": iv.low, "high": iv.high,
                                         "level": iv.level, "rounds": iv.n}
    return out


def save_plan(plan: Plan, path: Path, schedule: str) -> Path:
    """Plan file whose stem is the label ``execute`` reports it under."""
    meta = dict(plan.meta)
    meta["schedule"] = schedule
    Plan(fwd=plan.fwd, bwd=plan.bwd, mode=plan.mode, meta=meta, caps=plan.caps).save(path)
    return path


def paired(a: list[float], b: list[float]) -> float:
    """Median over rounds of a[i] / b[i]."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def reprofile(problem: Problem, path: Path) -> Path:
    """Profile ``problem`` again, as its committed file was made (same model, config, B,
    grouping, rounds, co-runner), so that predictions and measurements are minutes apart: the
    machine's speed drifts more than the model's error between a profile and a later run."""
    prov = problem.provenance
    cfg = prov["config"]
    cmd = [
        sys.executable, "-c", "import sys; from umpipe_bench.cli import main; sys.exit(main())",
        "profile", str(prov["model"]), "--batch", str(problem.B),
        "--layers-per-stage", ",".join(str(k) for k in prov["layers_per_stage"]),
        "--repeats", str(prov.get("repeats", 5)), "--warmup", str(prov.get("warmup_rounds", 1)),
        "--threads", str(prov.get("threads", 1)), "--no-progress",
        *[a for k, v in cfg.items() for a in ("--set", f"{k}={json.dumps(v)}")],
        *(["--co-run"] if prov.get("co_runner") else []),
        *(["--optimizer", str(prov["optimizer"])] if prov.get("optimizer") else []),
        *(["--dtype", str(prov["dtype"])] if prov.get("dtype") else []),
        "--name", problem.name, "--out", str(path),
    ]
    print(f"[{problem.name}] re-profiling: {' '.join(cmd[3:])}", flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"[{problem.name}] profile failed ({proc.returncode}):\n{proc.stderr}")
    return path


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
