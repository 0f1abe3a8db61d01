"""Is the default plan a local optimum for exact one-stage re-optimization?

For a problem with ``B <= 20`` samples, takes TiDGAP's default plan (``plan`` without
``--budget``) for each seed and tries, per stage and chromosome, every one of the ``2^(B-1)``
compositions of the batch with the rest of the plan fixed (the exact optimum of one stage's
partition given the others), jointly with every in-flight cap ``1..B`` of one stage (any
stage), and moves to the best; sweeps repeat until none gains. It reports the default plan's T,
where the sweeps end and the best known T (``umpipe_bench/problems/best_known.json``, capped
family). A sweep that ends where it started shows that no exact one-stage method (a DP over one
stage's composition included) improves that plan.

    PYTHONPATH=$PWD python scripts/stage_exhaustive.py --problem sim-s4-b16-s0 \\
        --mode recompute --seeds 0-4 --set kicks=false --out results/perf/stage-exhaustive.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from plan_speed import parse_seeds  # scripts/ (this script's folder)

from umpipe_bench.bench.best_known import BestKnown, BestKnownError
from umpipe_bench.codec import partitions_to_bits
from umpipe_bench.planners.evaluation.objective import FamilyObjective, Genomes
from umpipe_bench.registry import get_planner, get_problem

MAX_B = 20


def sweep(obj: FamilyObjective, F: np.ndarray, Bb: np.ndarray, K: np.ndarray, T: float,
          mode: str) -> tuple[float, int, int]:
    """Exact one-stage moves (a stage's composition x one stage's cap) until none gains:
    ``(T, sweeps, evaluations)``."""
    S, L = F.shape
    B = L + 1
    every = ((np.arange(2 ** L)[:, None] >> np.arange(L)[None, :]) & 1).astype(np.uint8)
    n = len(every)
    parts = ("f", "b") if mode == "recompute" else ("f",)
    sweeps = evals = 0
    while True:
        start = T
        for s in range(S):
            for part in parts:
                for cs in range(S):
                    for k in range(1, B + 1):
                        FF = np.repeat(F[None], n, 0)
                        BB = np.repeat(Bb[None], n, 0) if mode == "recompute" else FF
                        KK = np.repeat(K[None], n, 0)
                        (FF if part == "f" else BB)[:, s] = every
                        KK[:, cs] = k
                        t = obj.evaluate(Genomes(FF, BB, KK))
                        evals += n
                        i = int(np.argmin(t))
                        if t[i] < T:
                            T, F, Bb, K = float(t[i]), FF[i].copy(), BB[i].copy(), KK[i].copy()
        sweeps += 1
        if not T < start:
            return T, sweeps, evals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", default="sim-s4-b16-s0")
    ap.add_argument("--mode", default="recompute", choices=("stash", "recompute"))
    ap.add_argument("--seeds", default="0-4", help="e.g. 0-4 or 0,3")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                    help="a TiDGAP setting of the default plans, e.g. kicks=false")
    ap.add_argument("--out", default=None, help="a Markdown page (default: print)")
    a = ap.parse_args(argv)
    problem = get_problem(a.problem)
    if problem.B > MAX_B:
        print(f"stage_exhaustive: --problem {a.problem}: B = {problem.B}, at most {MAX_B} "
              "(2^(B-1) compositions per stage)", file=sys.stderr)
        return 2
    sets = dict(kv.split("=", 1) for kv in a.set)
    obj = FamilyObjective(problem, a.mode)
    try:
        ref: float | None = BestKnown().value(a.problem, a.mode, "capped")
    except BestKnownError:
        ref = None
    rows = []
    for seed in parse_seeds(a.seeds):
        res = get_planner("tidgap", **sets).plan(problem, mode=a.mode, seed=seed)
        plan = res.plan
        F = partitions_to_bits(plan.fwd, problem.B)
        Bb = partitions_to_bits(plan.bwd, problem.B)
        K = np.array(plan.caps if plan.caps is not None else [problem.B] * problem.S, np.int64)
        T0 = float(obj.evaluate(Genomes(F[None], Bb[None], K[None]))[0])
        t0 = time.perf_counter()
        T, sweeps, evals = sweep(obj, F, Bb, K, T0, a.mode)
        rows.append((seed, T0, T, sweeps, evals, time.perf_counter() - t0))
        print(f"seed {seed}: default {T0:.6f} -> {T:.6f} ({sweeps} sweeps, {evals} plans)",
              file=sys.stderr)
    cmd = "PYTHONPATH=$PWD python scripts/stage_exhaustive.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    lines = [
        "# Exact one-stage re-optimization of the default plan",
        "",
        f"`{cmd}`",
        "",
        f"Problem `{a.problem}` ({a.mode}; S = {problem.S}, B = {problem.B}). Per seed: TiDGAP's "
        "default plan (`plan` without `--budget`"
        + "".join(f", `{k}={v}`" for k, v in sets.items())
        + "), then sweeps of exact one-stage moves: per "
        f"stage and chromosome all {2 ** (problem.B - 1):,} compositions of the batch, jointly "
        f"with every cap 1..{problem.B} of one stage (any stage), the rest fixed, moving to "
        "the best, until a sweep gains nothing. Best known (capped family): "
        + ("none" if ref is None else f"{ref:.6f}") + ".",
        "",
        "| seed | default T | after the sweeps | vs best known | sweeps | plans tried | s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for seed, T0, T, sweeps, evals, secs in rows:
        gap = "-" if ref is None else f"{100 * (T / ref - 1):+.2f} %"
        lines.append(f"| {seed} | {T0:.6f} | {T:.6f} | {gap} | {sweeps} | {evals:,} | "
                     f"{secs:.1f} |")
    same = sum(1 for r in rows if r[2] == r[1])
    lines += ["", f"{same} of {len(rows)} default plans are already optimal for every one of "
              "these moves.", "", f"Load average (1 min) at the end: {os.getloadavg()[0]:.2f} "
              f"({os.cpu_count()} CPUs).", ""]
    text = "\n".join(lines)
    if a.out:
        Path(a.out).write_text(text, encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
