"""The chunk-plan planner against torch's seven schedules (docs/CHUNK-SCHEDULES.md §9).

For each problem, mode and seed, runs

    umpipe-bench plan --problem P --devices D --mode MODE --budget BUDGET --seed S --json

(one process at a time) and records the planner's T, its layout and partition, the fastest of
torch's seven schedules at its best v, M and partition (the exact search of ``umpipe-bench
schedules``), the fastest of the four the chunk rule reproduces, both speedups
(``T_torch / T - 1``), the evaluations and the planner's wall time. Writes ``OUT.csv`` (one row
per run) and ``OUT.md`` (the table, the commands at its top). T is simulated; the wall times
are this machine's.

    python scripts/chunk_plans.py                      # results/published/chunk-plans
    python scripts/chunk_plans.py --seeds 0 --budget evals:5000 --out /tmp/cp   # a smoke test
    python scripts/chunk_plans.py --grid "gpt1-14:2,4,7 vgg16:2,4,8" --seeds 0,1,2,3,4 \
        --out results/published/chunk-plans-devices        # several device counts
    python scripts/chunk_plans.py --grid "gpt1-14:2,4,7 vgg16:2,4,8" --seeds 0,1,2,3,4 \
        --memory-cap 50% --no-wall --out results/published/chunk-plans-devices-cap50

``--memory-cap`` is ``plan``'s: a size, or a share of torch's GPipe schedule on ``D`` devices
(``umpipe_bench.bench.memcap.device_memory_cap``); the plan and every torch schedule fit it.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from umpipe_bench.files import write_text

COLUMNS = ["problem", "D", "mode", "seed", "budget", "T", "layout", "v", "partition", "split",
           "best_torch", "T_best_torch", "speedup_vs_best_torch", "best_reproduced",
           "T_best_reproduced", "speedup_vs_best_reproduced", "evaluations", "spaces",
           "wall_s", "process_s", "memory_cap", "cap_bytes", "peak_bytes"]


def run_one(problem: str, D: int, mode: str, budget: str, seed: int,
            memory_cap: str = "none") -> dict:
    argv = [sys.executable, "-m", "umpipe_bench", "plan", "--problem", problem, "--devices",
            str(D), "--mode", mode, "--budget", budget, "--seed", str(seed), "--json",
            "--no-progress"]
    if memory_cap != "none":
        argv += ["--memory-cap", memory_cap]
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    process_s = time.perf_counter() - t0
    r = json.loads(out.stdout)
    return {
        "problem": problem, "D": D, "mode": mode, "seed": seed, "budget": budget,
        "T": r["iteration_time"], "layout": r["layout"], "v": r["v"],
        "partition": "-".join(map(str, r["partition"])), "split": r["split"],
        "best_torch": r["best_torch_schedule"], "T_best_torch": r["T_best_torch"],
        "speedup_vs_best_torch": r["speedup_vs_best_torch"],
        "best_reproduced": r["best_reproduced_schedule"],
        "T_best_reproduced": r["T_best_reproduced"],
        "speedup_vs_best_reproduced": r["speedup_vs_best_reproduced"],
        "evaluations": r["evaluations"], "spaces": r["spaces"], "wall_s": r["wall_time"],
        "process_s": process_s, "memory_cap": memory_cap,
        "cap_bytes": r["memory_cap"] if memory_cap != "none" else None,
        "peak_bytes": None if r["peak_memory"] is None else max(r["peak_memory"]),
    }


def read_rows(path: str) -> list[dict]:
    """The rows of a CSV this script wrote, typed as :func:`run_one` returns them."""
    ints = {"D", "seed", "v", "evaluations", "spaces"}
    floats = {"T", "T_best_torch", "speedup_vs_best_torch", "T_best_reproduced",
              "speedup_vs_best_reproduced", "wall_s", "process_s"}
    out = []
    for r in csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8"))):
        row: dict = dict(r)
        for k in ints:
            row[k] = int(row[k])
        for k in floats:
            row[k] = float(row[k])
        row["split"] = row["split"] == "True"
        row["memory_cap"] = row.get("memory_cap") or "none"  # files without the column
        for k in ("cap_bytes", "peak_bytes"):
            row[k] = float(row[k]) if row.get(k) else None
        out.append(row)
    return out


def write_csv(path: Path, rows: list[dict]) -> None:
    """The rows as :data:`COLUMNS` (missing cells empty), written whole."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows([{k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS} for r in rows])
    write_text(path, buf.getvalue())


def cap_sentence(rows: list[dict]) -> str:
    """What the page says of the memory cap of its rows."""
    caps = sorted({r["memory_cap"] for r in rows})
    if caps == ["none"]:
        return "No memory cap."
    return ("Memory cap " + ", ".join(f"`{c}`" for c in caps) + " (`plan --memory-cap`): one "
            "capacity for every device; a share is the most any device needs for its static "
            "bytes plus that share of the activations torch's GPipe schedule keeps there at its "
            "best M and layer partition in stash mode (so that GPipe choice does not fit); "
            "`torch` is what the fastest torch schedule found without a cap holds on its most "
            "loaded device (equal memory). The plan and every torch schedule fit it; the "
            "summary gives it per problem, D and mode.")


def markdown(rows: list[dict], cmd: str, wall: bool = True, rows_cmd: str | None = None
             ) -> str:
    head = (f"Regenerate: `{cmd}` (rows: the `.csv` beside this file)." if rows_cmd is None
            else f"Rows (the `.csv` beside this file): {rows_cmd}; this page from them: "
                 f"`{cmd}`.")
    lines = [
        "# Chunk plans found by `plan --devices` against torch's schedules (simulated)",
        "",
        f"{head} Each row is one run of",
        "",
        "```",
        "umpipe-bench plan --problem P --devices D --mode MODE --budget BUDGET --seed S --json",
        "```",
        "",
        "T: the plan found (simulated). Best torch: the fastest of torch's seven schedules at "
        "its best v, M and contiguous partition (`umpipe-bench schedules`); best reproduced: "
        "the fastest of gpipe, 1f1b, interleaved-1f1b and zb1p, whose equal plans the search "
        "is seeded with. Speedup: `T_torch / T - 1` (negative: torch's schedule is faster). "
        + ("Wall: the planner's seconds on this machine from the command's process start "
         "(the torch baselines' exact search included); command: the whole `plan` process as "
         "this script timed it (interpreter start and exit included); one process at a "
         "time. " + cap_sentence(rows) if wall else
         cap_sentence(rows) + " Wall times are not given: these runs shared the machine."),
        "",
        "| problem | D | mode | seed | T (s) | layout | partition | split | best torch | "
        "T torch (s) | vs best torch | best reproduced | vs reproduced | evals |"
        + (" wall (s) |" if wall else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if wall else ""),
    ]
    for r in rows:
        kind = r["layout"] if r["layout"] != "loop" else f"loop(v={r['v']})"
        lines.append(
            f"| {r['problem']} | {r['D']} | {r['mode']} | {r['seed']} | {r['T']:.4f} | {kind} | "
            f"{r['partition']} | {'yes' if r['split'] else 'no'} | {r['best_torch']} | "
            f"{r['T_best_torch']:.4f} | {100 * r['speedup_vs_best_torch']:+.2f} % | "
            f"{r['best_reproduced']} | {100 * r['speedup_vs_best_reproduced']:+.2f} % | "
            f"{r['evaluations']} |" + (f" {r['wall_s']:.1f} |" if wall else ""))
    capped = any(r["memory_cap"] != "none" for r in rows)
    lines += ["", "Per problem, D and mode, over seeds:", "",
              "| problem | D | mode |" + (" cap | cap (MiB) |" if capped else "")
              + " seeds | best torch | vs best torch: min | median | max |"
              + (" wall (s): median | max | command (s): max |" if wall else ""),
              "|---|---|---|" + ("---|---|" if capped else "") + "---|---|---|---|---|"
              + ("---|---|---|" if wall else "")]
    keys = sorted({(r["problem"], r["D"], r["mode"], r["memory_cap"]) for r in rows})
    for p, d, m, c in keys:
        rs = [r for r in rows if (r["problem"], r["D"], r["mode"], r["memory_cap"]) ==
              (p, d, m, c)]
        g = [r["speedup_vs_best_torch"] for r in rs]
        torch = "/".join(sorted({r["best_torch"] for r in rs}))
        cap = ""
        if capped:
            mib = rs[0]["cap_bytes"]
            cap = f" {c} | {'-' if mib is None else f'{mib / 2 ** 20:.1f}'} |"
        lines.append(f"| {p} | {d} | {m} |{cap} {len(rs)} | {torch} | {100 * min(g):+.2f} % | "
                     f"{100 * statistics.median(g):+.2f} % | {100 * max(g):+.2f} % |"
                     + (f" {statistics.median(r['wall_s'] for r in rs):.1f} | "
                        f"{max(r['wall_s'] for r in rs):.1f} | "
                        f"{max(r['process_s'] for r in rs):.1f} |" if wall else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="gpt1-14,vgg16")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--modes", default="stash,recompute")
    ap.add_argument("--seeds", default="0,1,2,3,4,5,6,7,8,9")
    ap.add_argument("--budget", default="evals:200000")
    ap.add_argument("--memory-cap", default="none",
                    help="plan's --memory-cap for every run (a size, or a share such as 50%%)")
    ap.add_argument("--grid", default=None,
                    help="problems with their device counts, e.g. 'gpt1-14:2,4,7 vgg16:2,4,8' "
                    "(instead of --problems and --devices)")
    ap.add_argument("--out", default="results/published/chunk-plans")
    ap.add_argument("--from-csv", action="store_true",
                    help="no runs: rewrite OUT.md from the rows of OUT.csv (or of --rows)")
    ap.add_argument("--rows", nargs="+", default=None, metavar="CSV",
                    help="with --from-csv: the rows of these files, in order, written to "
                    "OUT.csv first")
    ap.add_argument("--rows-cmd", default=None, metavar="TEXT",
                    help="with --from-csv: the commands that made the rows, for the page's "
                    "first line (markdown)")
    ap.add_argument("--no-wall", action="store_true",
                    help="leave the wall times out of OUT.md (runs that shared the machine)")
    a = ap.parse_args(argv)
    if (a.rows or a.rows_cmd) and not a.from_csv:
        ap.error("--rows and --rows-cmd go with --from-csv")
    if a.from_csv:
        out = Path(a.out)
        # the page regenerates from the .csv beside it, whatever files the rows came from
        cmd = ("python scripts/chunk_plans.py --from-csv" + (" --no-wall" if a.no_wall else "")
               + f" --out {a.out}")
        if a.rows:
            rows = [r for f in a.rows for r in read_rows(f)]
            write_csv(out.with_suffix(".csv"), rows)
        else:
            rows = read_rows(str(out.with_suffix(".csv")))
        write_text(out.with_suffix(".md"),
                   markdown(rows, cmd, wall=not a.no_wall, rows_cmd=a.rows_cmd))
        return 0
    if a.grid:
        cells = [(p, int(d)) for item in a.grid.split() for p, ds in [item.split(":")]
                 for d in ds.split(",")]
    else:
        cells = [(p, a.devices) for p in a.problems.split(",")]
    rows = []
    for problem, D in cells:
        for mode in a.modes.split(","):
            for seed in (int(s) for s in a.seeds.split(",")):
                r = run_one(problem, D, mode, a.budget, seed, a.memory_cap)
                print(f"{problem} D={D} {mode} seed {seed}: T {r['T']:.4f} vs "
                      f"{r['best_torch']} {r['T_best_torch']:.4f} "
                      f"({100 * r['speedup_vs_best_torch']:+.2f} %), {r['wall_s']:.1f} s",
                      file=sys.stderr)
                rows.append(r)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out.with_suffix(".csv"), rows)
    default = argv is None and len(sys.argv) == 1
    cmd = "python scripts/chunk_plans.py" + ("" if default else " " + " ".join(sys.argv[1:]))
    write_text(out.with_suffix(".md"), markdown(rows, cmd, wall=not a.no_wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
