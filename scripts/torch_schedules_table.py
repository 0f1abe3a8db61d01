"""Every torch schedule's best predicted T beside our best plan, per problem, D and mode.

For each per-layer problem and device count D, and each memory mode:

* every schedule torch 2.13 ships, at its best (v, M, contiguous partition) found by the exact
  search of ``umpipe_bench.torch_schedules.best`` (what ``umpipe-bench schedules`` prints);
* our best plan: TiDGAP (unequal microbatches in the capped schedule family, one chunk per
  device) on the chunk problem of each distinct one-chunk-per-device partition the torch search
  chose, plus the balanced one, over ``--seeds`` seeds at ``--budget``; the fastest plan counts.

Writes a long-format CSV (one row per problem, D, mode, schedule; ``schedule = ours`` for our
plan) and a markdown summary with the command at its top.

    python scripts/torch_schedules_table.py            # gpt1-14 at D 2,4,7; vgg16 at D 2,4,8
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
import time
from pathlib import Path

from umpipe_bench.layout import balanced_counts, group_layers
from umpipe_bench.problem import atomic_write_text
from umpipe_bench.registry import get_planner, get_problem
from umpipe_bench.simulator import simulate
from umpipe_bench.torch_schedules.best import best_row, schedule_table

COLUMNS = ["problem", "devices", "mode", "schedule", "torch_class", "v", "M", "partition",
           "T", "peak_memory_bytes", "fastest_torch", "ours_T", "speedup_ours_vs_this",
           "reason"]
DEFAULT = ["gpt1-14:2,4,7", "vgg16:2,4,8"]


def ours(problem, D, mode, partitions, budget, seeds):
    """Our best plan on each candidate partition: (T, counts, seed, plan result)."""
    best = None
    for counts in partitions:
        chunk = group_layers(problem, counts)
        for seed in seeds:
            res = get_planner("tidgap").plan(chunk, mode=mode, budget=budget, seed=seed)
            if best is None or res.iteration_time < best[0]:
                best = (float(res.iteration_time), counts, seed, res)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--problems", nargs="+", default=DEFAULT, metavar="NAME:D,D",
                    help="per-layer problems and their device counts")
    ap.add_argument("--modes", default="stash,recompute", help="memory modes")
    ap.add_argument("--budget", default="evals:200000", help="TiDGAP budget per run")
    ap.add_argument("--seeds", default="0,1,2", help="TiDGAP seeds")
    ap.add_argument("--csv", default="results/published/torch-schedules.csv", help="CSV output")
    ap.add_argument("--md", default="results/published/torch-schedules.md",
                    help="markdown summary")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: list[dict] = []
    summary: list[str] = []
    for item in args.problems:
        name, _, ds = item.partition(":")
        problem = get_problem(name)
        for D in (int(x) for x in ds.split(",")):
            for mode in args.modes.split(","):
                t0 = time.perf_counter()
                table = schedule_table(problem, D, mode)
                fastest = best_row(table)
                parts = {balanced_counts(problem.S, D)}
                parts |= {r.choice.counts for r in table
                          if r.choice is not None and len(r.choice.counts) == D}
                oT, ocounts, oseed, ores = ours(problem, D, mode, sorted(parts), args.budget,
                                                seeds)
                otl = simulate(group_layers(problem, ocounts), ores.plan)
                assert abs(otl.iteration_time - oT) <= 1e-9 * oT, (otl.iteration_time, oT)
                opeak = otl.peak_memory
                for r in table:
                    c = r.choice
                    rows.append({
                        "problem": name, "devices": D, "mode": mode, "schedule": r.schedule,
                        "torch_class": r.torch_class, "v": c.v if c else "",
                        "M": c.M if c else "",
                        "partition": "-".join(map(str, c.counts)) if c else "",
                        "T": f"{c.T:.6f}" if c else "",
                        "peak_memory_bytes": f"{c.max_peak:.0f}" if c and c.max_peak else "",
                        "fastest_torch": bool(fastest is not None and r is fastest),
                        "ours_T": f"{oT:.6f}",
                        "speedup_ours_vs_this": f"{c.T / oT:.4f}" if c else "",
                        "reason": r.reason,
                    })
                rows.append({
                    "problem": name, "devices": D, "mode": mode, "schedule": "ours",
                    "torch_class": "", "v": 1, "M": "", "partition": "-".join(map(str, ocounts)),
                    "T": f"{oT:.6f}", "peak_memory_bytes": f"{max(opeak):.0f}" if opeak else "",
                    "fastest_torch": False,
                    "ours_T": f"{oT:.6f}", "speedup_ours_vs_this": "1.0000",
                    "reason": f"tidgap {args.budget} seed {oseed}",
                })
                ft = fastest.choice if fastest is not None else None
                if ft is not None:
                    summary.append(
                        f"| {name} | {D} | {mode} | {fastest.schedule} | {ft.v} | {ft.M} | "
                        f"{'-'.join(map(str, ft.counts))} | {ft.T:.4f} | {oT:.4f} | "
                        f"{'-'.join(map(str, ocounts))} | {(ft.T / oT - 1) * 100:+.2f} % |")
                print(f"{name} D={D} {mode}: best torch "
                      f"{fastest.schedule if fastest else '-'} "
                      f"{ft.T if ft else float('nan'):.4f}, ours {oT:.4f} "
                      f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.csv, buf.getvalue())
    cmd = "python scripts/torch_schedules_table.py " + " ".join(argv or sys.argv[1:])
    md = [
        "# torch's schedules against our best plan (predicted)",
        "",
        f"Regenerate: `{cmd.strip()}` (rows: `{args.csv}`).",
        "",
        "Per problem, device count D and memory mode: the fastest of the seven schedules torch "
        "2.13 ships at its best v, M and contiguous layer partition (exact search, "
        "`umpipe-bench schedules`), and our best plan (TiDGAP, unequal microbatches with "
        f"in-flight caps, one chunk per device; {args.budget}, seeds {args.seeds}, on each "
        "partition a one-chunk torch schedule chose and the balanced one). Gain: best torch T "
        "over our T, minus one (negative: torch's schedule is faster). No memory cap.",
        "",
        "| problem | D | mode | fastest torch schedule | v | M | partition | T torch (s) | "
        "T ours (s) | our partition | gain |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *summary,
        "",
    ]
    atomic_write_text(args.md, "\n".join(md))
    print(f"wrote {args.csv} and {args.md}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
