"""torch's schedules the chunk rule does not reproduce, against the family's own equal plans.

For each per-layer problem, device count D, schedule (``looped-bfs``, ``zbv``, ``dualpipev``)
and M torch accepts that divides B: torch's list is simulated (``umpipe_bench.devsim``) on the
balanced partition of the layers into the schedule's chunks; then, on the same partition with
the same M equal microbatches and the same split, a coordinate descent over the chunk plan's
per-device caps and ``w_caps``, its ``group`` and its per-chunk lags (all in multiples of the
microbatch), started from the best six of the schedule's closest plan
(``umpipe_bench.chunk_torch.torch_plan``) and, for the V shape, a grid around it, and from the
best three of 1,000 random plans (seeded), looks for the fastest plan whose every device peak
stays within torch's largest device peak. Rows give both times, their ratio and the plan
found.

Writes ``OUT.csv`` (one row per case) and ``OUT.md`` (the summary per schedule, the command
at its top). Everything is simulated; no time of this machine enters.

    python scripts/chunk_vs_torch.py                          # results/published/chunk-vs-torch
    python scripts/chunk_vs_torch.py --quick --out /tmp/cvt   # two cases, a smoke test
"""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from umpipe_bench.chunk_torch import random_split_problem, simulate_plan, torch_plan, v_lags
from umpipe_bench.chunkplan import ChunkPlan
from umpipe_bench.errors import InputError
from umpipe_bench.layout import balanced_counts
from umpipe_bench.problem import Problem, atomic_write_text
from umpipe_bench.registry import get_problem
from umpipe_bench.torch_schedules import check, schedule_info, torch_orders, torch_send_after
from umpipe_bench.torch_schedules.best import simulate_chunks

SCHEDULES = ("looped-bfs", "zbv", "dualpipev")
COLUMNS = ["problem", "D", "schedule", "M", "torch_T", "closest_T", "closest_peak_vs_torch",
           "best_T", "best_vs_torch", "torch_peak_bytes", "best_peak_vs_torch", "evaluations",
           "plan"]
RANDOM = "rand-l8-b16-s{seed}"


def problem_of(name: str) -> Problem:
    if name.startswith("rand-"):
        seed = int(name.rsplit("-s", 1)[1])
        return random_split_problem(8, 16, seed)
    return get_problem(name)


def random_starts(start: ChunkPlan, m: int, n: int, seed: int) -> list[ChunkPlan]:
    """``n`` plans with random caps, w_caps, group and lags (multiples of ``m`` samples)."""
    rnd = random.Random(seed)
    D, C, v, M = start.D, start.C, start.v, start.B // m
    out = []
    for _ in range(n):
        out.append(start.replace(
            caps=tuple(rnd.randint(1, v * M) * m for _ in range(D)),
            w_caps=tuple(rnd.randint(0, v * M) * m for _ in range(D)) if start.split else None,
            group=rnd.randint(1, M) * m,
            fwd_lag=tuple(rnd.randint(0, 2 * D) * m for _ in range(C)),
            bwd_lag=tuple(rnd.randint(0, 2 * D) * m for _ in range(C))))
    return out


def starts(start: ChunkPlan, m: int) -> list[ChunkPlan]:
    """The closest plan and, for the V shape, a grid around it: rounds of 1, D, 2D - 1 or M
    microbatches, lag slopes 0..2, caps ``2D - 1 .. 2D + 1`` and w_caps ``0`` or ``d``
    microbatches."""
    out = [start]
    if start.layout == "v":
        D, M = start.D, start.B // m
        groups = sorted({1, D, 2 * D - 1, M} & set(range(1, M + 1)))
        for g, fa, ba, k, w in itertools.product(groups, (0, 1, 2), (0, 1, 2), (-1, 0, 1),
                                                 (0, 1)):
            fl, bl = v_lags(D, m, fa, ba)
            out.append(start.replace(caps=(min(2 * D + k, 2 * M) * m,) * D,
                                     w_caps=tuple(w * d * m for d in range(D)), group=g * m,
                                     fwd_lag=tuple(fl), bwd_lag=tuple(bl)))
    return out


def search(problem: Problem, start: ChunkPlan, peak_cap: float, m: int, n_random: int = 0,
           n_descents: int = 6, seed: int = 0) -> tuple[ChunkPlan, float, float, int]:
    """The best of coordinate descents from the best ``n_descents`` of :func:`starts` and the
    best half as many of ``n_random`` :func:`random_starts`: (plan, T, peak, plans
    simulated); infeasible plans (a device peak above ``peak_cap``) rank last."""
    seen: dict[ChunkPlan, tuple[bool, float, float]] = {}

    def score(plan: ChunkPlan) -> tuple[bool, float, float]:
        if plan not in seen:
            tl = simulate_plan(problem, plan)
            peak = max(tl.peak_memory or [0.0])
            seen[plan] = (peak > peak_cap * (1 + 1e-12), tl.iteration_time, peak)
        return seen[plan]

    first = [p for pool, n in ((starts(start, m), n_descents),
                               (random_starts(start, m, n_random, seed), n_descents // 2))
             for p in sorted(pool, key=lambda q: score(q)[:2])[:n]]
    best = min((descend(p, score, m) for p in first), key=lambda p: score(p)[:2])
    _, T, peak = score(best)
    return best, T, peak, len(seen)


def descend(start: ChunkPlan, score: Callable[[ChunkPlan], tuple[bool, float, float]],
            m: int) -> ChunkPlan:
    """Coordinate descent over caps, w_caps, group and lags (multiples of ``m`` samples)."""
    D, C, v, M = start.D, start.C, start.v, start.B // m

    def set_at(key: str, i: int, value: int) -> Callable[[ChunkPlan], ChunkPlan]:
        def move(plan: ChunkPlan) -> ChunkPlan:
            now = {"caps": plan.effective_caps(), "w_caps": plan.effective_w_caps(),
                   "fwd_lag": plan.effective_lags()[0], "bwd_lag": plan.effective_lags()[1]}
            if key == "group":
                return plan.replace(group=value)
            row = list(now[key])
            row[i] = value
            return plan.replace(**{key: tuple(row)})
        return move

    moves = [set_at("caps", d, k * m) for d in range(D) for k in range(1, v * M + 1)]
    if start.split:
        moves += [set_at("w_caps", d, k * m) for d in range(D) for k in range(v * M + 1)]
    moves += [set_at("group", 0, k * m) for k in range(1, M + 1)]
    moves += [set_at(key, c, k * m) for key in ("fwd_lag", "bwd_lag") for c in range(C)
              for k in range(2 * D + 1)]
    best = start
    while True:
        improved = False
        for move in moves:
            cand = move(best)
            if score(cand)[:2] < score(best)[:2]:
                best, improved = cand, True
        if not improved:
            return best


def run_case(pname: str, problem: Problem, D: int, name: str, M: int, n_random: int
             ) -> dict | None:
    info = schedule_info(name)
    v = info.default_v
    C = D * v
    if C > problem.S or problem.B % M:
        return None
    try:
        check(name, D, M, v)
    except InputError:
        return None
    counts = balanced_counts(problem.S, C)
    ref = simulate_chunks(problem, counts, info.layout, D, v, M, "stash",
                          torch_orders(name, D, M, v),
                          send_after=torch_send_after(name, D, M, v))
    peak_cap = max(ref.peak_memory or [0.0])
    start = torch_plan(name, D, M, counts, problem.B)
    near = simulate_plan(problem, start)
    closest, closest_peak = near.iteration_time, max(near.peak_memory or [0.0])
    plan, T, peak, n = search(problem, start, peak_cap, problem.B // M, n_random)
    keep = {k: v for k, v in plan.to_dict().items()
            if k in ("caps", "w_caps", "group", "fwd_lag", "bwd_lag")}
    return {"problem": pname, "D": D, "schedule": name, "M": M,
            "torch_T": ref.iteration_time, "closest_T": closest,
            "closest_peak_vs_torch": closest_peak / peak_cap if peak_cap else 1.0, "best_T": T,
            "best_vs_torch": T / ref.iteration_time, "torch_peak_bytes": peak_cap,
            "best_peak_vs_torch": peak / peak_cap if peak_cap else 1.0, "evaluations": n,
            "plan": json.dumps(keep, separators=(",", ":"))}


def summary(rows: list[dict], command: str) -> str:
    out = ["# torch's other schedules against the chunk family's equal plans", "",
           f"Command: `{command}`", "",
           "Simulated (`umpipe_bench.devsim`), stash mode, the balanced partition of the layers "
           "into the schedule's chunks, M equal microbatches. `best / torch`: the fastest "
           "equal chunk plan found (same partition, M and split; coordinate descents over "
           "caps, w_caps, group and lags from the best six of the schedule's closest plan and, "
           "for the V shape, a grid around it, and the best three of 1,000 random plans) "
           "whose every device "
           "peak stays within torch's largest, over torch's list. Every case is in "
           "`results/published/chunk-vs-torch.csv`.", "",
           "| schedule | cases | best / torch: min | median | max | cases <= 1 | "
           "closest plan / torch: median |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name in SCHEDULES:
        rs = [r for r in rows if r["schedule"] == name]
        if not rs:
            continue
        q = [r["best_vs_torch"] for r in rs]
        c = [r["closest_T"] / r["torch_T"] for r in rs]
        out.append(f"| `{name}` | {len(rs)} | {min(q):.4f} | {statistics.median(q):.4f} | "
                   f"{max(q):.4f} | {sum(x <= 1 + 1e-12 for x in q)} | "
                   f"{statistics.median(c):.4f} |")
    out += ["", "| problem | D | schedule | M | torch T (s) | best T (s) | best / torch | "
            "peak / torch |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['problem']} | {r['D']} | `{r['schedule']}` | {r['M']} | "
                   f"{r['torch_T']:.4f} | {r['best_T']:.4f} | {r['best_vs_torch']:.4f} | "
                   f"{r['best_peak_vs_torch']:.3f} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", nargs="+",
                    default=["gpt1-14", "vgg16", *(RANDOM.format(seed=s) for s in range(3))],
                    help="per-layer problems with split tables; rand-l8-b16-sN: a random "
                         "one (umpipe_bench.chunk_torch.random_split_problem)")
    ap.add_argument("--devices", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--microbatches", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--schedules", nargs="+", default=list(SCHEDULES), choices=SCHEDULES)
    ap.add_argument("--out", default="results/published/chunk-vs-torch",
                    help="writes OUT.csv and OUT.md")
    ap.add_argument("--random-starts", type=int, default=1000,
                    help="random plans (seeded) beside the structured starts; three "
                         "descents start from the best of them")
    ap.add_argument("--quick", action="store_true", help="two small cases (a smoke test)")
    args = ap.parse_args(argv)
    cases = [(p, D, s, M) for p in args.problems for D in args.devices
             for s in args.schedules for M in args.microbatches]
    if args.quick:
        cases = [(RANDOM.format(seed=0), 2, "zbv", 4), (RANDOM.format(seed=0), 2, "looped-bfs", 4)]
        args.random_starts = min(args.random_starts, 20)
    rows, problems = [], {}
    for pname, D, name, M in cases:
        problem = problems.setdefault(pname, problem_of(pname))
        row = run_case(pname, problem, D, name, M, args.random_starts)
        if row is not None:
            rows.append(row)
            print(f"{pname} D={D} {name} M={M}: best/torch {row['best_vs_torch']:.4f}",
                  file=sys.stderr)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    out = Path(args.out)
    atomic_write_text(out.with_suffix(".csv"), buf.getvalue())
    command = "python scripts/chunk_vs_torch.py" + (" " + " ".join(argv) if argv else "")
    atomic_write_text(out.with_suffix(".md"), summary(rows, command))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
