"""The compiled chunk-plan evaluator against the Python path, and its throughput against the
capped family's kernel (docs/CHUNK-SCHEDULES.md §8).

Measures, interleaved round by round (A B A B; medians over rounds), on one machine at one
moment, per case (a per-layer problem, a chunk space, ``P`` random rows of
:meth:`umpipe_bench.chunk_codec.ChunkSpace.random`):

* :class:`umpipe_bench.planners.evaluation.chunk_eval.ChunkEvaluator` on the population, one
  thread and two threads, per plan;
* the Python path one plan at a time on a sample of the same plans:
  :func:`umpipe_bench.chunk_torch.simulate_plan` (group the layers, the chunk rule, the device
  simulator), and the rule and the simulator alone on the chunk problem grouped once;

then, on one chunk per device (layout ``one``, no split, the same rows through both), the
operations per second of the chunk kernel and of the family's kernel
(:class:`umpipe_bench.planners.evaluation.family.FamilyEvaluator`), which orders the same lists
(the chunk rule is the capped rule there) with less to decide.

Usage: ``python scripts/chunk_eval_perf.py [--rounds 7] [--out results/perf/chunk-eval.md]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from umpipe_bench.chunk_codec import ChunkGenomes, ChunkSpace
from umpipe_bench.chunk_schedule import chunk_order
from umpipe_bench.chunk_torch import simulate_plan
from umpipe_bench.devsim import simulate_devices
from umpipe_bench.layout import balanced_counts, group_layers
from umpipe_bench.planners.evaluation.chunk_eval import ChunkEvaluator
from umpipe_bench.planners.evaluation.family import FamilyEvaluator
from umpipe_bench.problem import Problem
from umpipe_bench.registry import get_problem


def ops_per_row(space: ChunkSpace, g: ChunkGenomes) -> np.ndarray:
    """Operations every row orders: forwards, backwards and (split) W passes of every chunk."""
    C = space.C
    n = (g.fwd.reshape(len(g), -1) != 0).sum(axis=1) + C
    q = g.fwd if space.mode == "stash" else g.bwd
    n = n + (q.reshape(len(g), -1) != 0).sum(axis=1) + C
    if space.split:
        n = n + ((q != 0) & (g.wgt != 0)).reshape(len(g), -1).sum(axis=1) + C
    return n


def timed(fn: Callable[[], object], reps: int = 1) -> float:
    """Seconds per call of ``fn``, over ``reps`` calls."""
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def case(problem: Problem, space: ChunkSpace, P: int, sample: int, rounds: int,
         seed: int) -> tuple[list[str], float]:
    """One row of the speed table; also the one-thread kernel's operations per second."""
    g = space.random(np.random.default_rng(seed), P)
    plans = [space.decode(g, i) for i in range(sample)]
    chunks = group_layers(problem, space.layers)
    ev1, ev2 = ChunkEvaluator(problem, space), ChunkEvaluator(problem, space, threads=2)
    ev1.evaluate(g)  # compile / load the cache, start the pool
    ev2.evaluate(g)

    def python_path() -> None:
        for p in plans:
            simulate_plan(problem, p)

    def rule_and_sim() -> None:
        for p in plans:
            simulate_devices(chunks, p.devices, chunk_order(p).lists, None, p.mode,
                             parts=p.parts())

    reps = max(1, 4096 // P)  # kernel calls per round: about 4096 plans
    t1, t2, tp, tr = [], [], [], []
    for _ in range(rounds):
        t1.append(timed(lambda: ev1.evaluate(g), reps) / P)
        tp.append(timed(python_path) / sample)
        t2.append(timed(lambda: ev2.evaluate(g), reps) / P)
        tr.append(timed(rule_and_sim) / sample)
    ops = float(ops_per_row(space, g).mean())
    med = statistics.median
    r1 = [p / k for p, k in zip(tp, t1)]
    r2 = [p / k for p, k in zip(tp, t2)]
    rr = [p / k for p, k in zip(tr, t1)]
    kind = space.layout if space.layout != "loop" else f"loop v={space.v}"
    row = (f"| {problem.name} | D={space.D} {kind} | {space.mode}{' split' if space.split else ''}"
           f" | {P} | {ops:.0f} | {med(t1) * 1e6:.1f} | {ops / med(t1) / 1e6:.1f} | "
           f"{med(t2) * 1e6:.1f} | "
           f"{med(tp) * 1e6:.0f} | {med(tr) * 1e6:.0f} | {med(r1):.0f}x ({min(r1):.0f}-"
           f"{max(r1):.0f}) | {med(r2):.0f}x | {med(rr):.0f}x |")
    return [row], ops / med(t1)


def family_compare(problem: Problem, D: int, P: int, rounds: int, seed: int) -> list[str]:
    """Operations per second on one chunk per device, the same rows through both kernels."""
    layers = balanced_counts(problem.S, D)
    space = ChunkSpace(D, "one", layers, problem.B, "stash", False)
    g = space.random(np.random.default_rng(seed), P)
    g = ChunkGenomes(g.fwd, g.fwd, g.wgt, np.minimum(g.caps, problem.B), g.w_caps,
                     np.full(P, problem.B), np.zeros_like(g.fwd_lag),
                     np.zeros_like(g.bwd_lag))
    ev = ChunkEvaluator(problem, space)
    fam = FamilyEvaluator(group_layers(problem, layers), "stash")
    ev.evaluate(g)
    fam.evaluate(g.fwd, None, g.caps)
    tc, tf = [], []
    reps = max(1, 4096 // P)
    for _ in range(rounds):
        tc.append(timed(lambda: ev.evaluate(g), reps))
        tf.append(timed(lambda: fam.evaluate(g.fwd, None, g.caps), reps))
    ops = float(ops_per_row(space, g).sum())
    Tc, Tf = ev.evaluate(g)[0], fam.evaluate(g.fwd, None, g.caps)[0]
    oc, of = ops / statistics.median(tc), ops / statistics.median(tf)
    return [
        f"One chunk per device ({problem.name}, D = {D}, layout `one`, stash, no split, "
        f"{P} random rows with caps in 1..B; the same rows through both kernels, "
        f"{rounds} interleaved rounds, one thread):",
        "",
        "| kernel | us/plan | operations/s |",
        "|---|---:|---:|",
        f"| chunk kernel (`chunk_pass`) | {statistics.median(tc) / P * 1e6:.2f} | {oc:.3g} |",
        f"| family kernel (`family_pass`) | {statistics.median(tf) / P * 1e6:.2f} | {of:.3g} |",
        "",
        f"Family / chunk throughput: {of / oc:.2f}x. Rows with the same T in both: "
        f"{int((Tc == Tf).sum())} of {P} (the family kernel times with the stage simulator's "
        "recurrence, the chunk kernel with the device simulator's; they agree to "
        f"{float(np.max(np.abs(Tc - Tf) / Tf)):.1e} relative).",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    ap.add_argument("--population", type=int, default=256, help="rows per kernel call")
    ap.add_argument("--sample", type=int, default=32, help="plans the Python path times")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="also write the report here")
    args = ap.parse_args(argv)
    cmd = f"python scripts/chunk_eval_perf.py {' '.join(argv or sys.argv[1:])}".rstrip()
    P, S, R = args.population, args.sample, args.rounds
    gpt, vgg = get_problem("gpt1-14"), get_problem("vgg16")
    cases = [
        (gpt, ChunkSpace(4, "loop", balanced_counts(14, 8), gpt.B, "stash", True)),
        (gpt, ChunkSpace(4, "loop", balanced_counts(14, 8), gpt.B, "stash", False)),
        (gpt, ChunkSpace(4, "loop", balanced_counts(14, 8), gpt.B, "recompute", True)),
        (gpt, ChunkSpace(4, "v", balanced_counts(14, 8), gpt.B, "stash", True)),
        (vgg, ChunkSpace(4, "loop", balanced_counts(16, 8), vgg.B, "stash", True)),
    ]
    lines = [
        "# The compiled chunk-plan evaluator: speed",
        "",
        f"Command: `{cmd}`. Random rows of `ChunkSpace.random` (seed {args.seed}); per case "
        f"{R} interleaved rounds, medians (the speedup's range over rounds in brackets). "
        "Kernel columns: the whole population per call, per plan; Python columns: "
        f"{S} of the same plans one at a time, `simulate_plan` (grouping the layers each "
        "time, as the Python path does) and the rule plus the simulator alone on a chunk "
        "problem grouped once. Every kernel result equals the Python path's bit for bit "
        "(tests/test_chunk_eval.py).",
        "",
        "| problem | layout | mode | P | ops/plan | kernel 1 thread (us/plan) | Mops/s | "
        "2 threads (us/plan) | simulate_plan (us/plan) | rule + simulator (us/plan) | "
        "speedup 1 thread | 2 threads | vs rule + simulator |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    load0 = os.getloadavg()[0]
    for k, (prob, space) in enumerate(cases):
        rows, _ = case(prob, space, P, S, R, args.seed + k)
        lines += rows
    rows, _ = case(gpt, cases[0][1], 4 * P, S, R, args.seed)  # where a second thread pays
    lines += rows
    lines += ["", *family_compare(gpt, 4, P, R, args.seed)]
    lines += ["", f"Load average (1 min) at the start and the end: {load0:.2f}, "
              f"{os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)."]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
