"""The family evaluator on 1 thread over 2 threads, and what TiDGAP's ``threads=auto`` picks.

For each problem and population size ``N`` (recompute, random bits and caps): the median time
of one :class:`umpipe_bench.planners.evaluation.family.FamilyEvaluator` call on 1 thread over 2
threads (interleaved rounds, same load), the call's work ``N*S*B`` and the threads ``auto`` uses for
it (:mod:`umpipe_bench.planners.search.threads`). Run on a quiet machine:

    python scripts/family_thread_ratio.py [--rounds 7] [--problems P ...] [--sizes N ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from umpipe_bench.planners.evaluation.encoding import random_bits
from umpipe_bench.planners.evaluation.family import FamilyEvaluator
from umpipe_bench.planners.search.caps import random_caps
from umpipe_bench.planners.search.threads import FAMILY_AUTO_WORK, apply_threads
from umpipe_bench.registry import get_problem


def ratio(problem_name: str, n: int, rounds: int) -> tuple[float, int, int]:
    """(1-thread / 2-thread time, N*S*B, threads auto splits the call over)."""
    p = get_problem(problem_name)
    rng = np.random.default_rng(0)
    f, b = random_bits(rng, n, p.S, p.B), random_bits(rng, n, p.S, p.B)
    k = random_caps(rng, n, p.S, p.B)
    one = FamilyEvaluator(p, "recompute", threads=1)
    two = FamilyEvaluator(p, "recompute", threads=2)
    two.MIN_ROWS_PER_THREAD = 1
    assert np.array_equal(one(f, b, k), two(f, b, k))
    auto = FamilyEvaluator(p, "recompute")
    apply_threads(auto, "auto", p.S, p.B)
    used = min(auto.threads, n // auto.MIN_ROWS_PER_THREAD) or 1
    reps = max(1, int(2e6 // (n * p.S * p.B)))
    samples: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(rounds):
        for t, ev in ((1, one), (2, two)):
            t0 = time.perf_counter()
            for _ in range(reps):
                ev(f, b, k)
            samples[t].append((time.perf_counter() - t0) / reps)
    return (statistics.median(samples[1]) / statistics.median(samples[2]), n * p.S * p.B,
            used)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--problems", nargs="+", default=["gpt1-14", "vgg16", "sim-s32-b256-s0"])
    ap.add_argument("--sizes", nargs="+", type=int, default=[64, 256, 1024],
                    help="population sizes N (default: 64 256 1024)")
    args = ap.parse_args()
    print(f"FAMILY_AUTO_WORK = {FAMILY_AUTO_WORK}\n")
    print("| problem | N | N*S*B | 1-thread time / 2-thread time | auto threads | load |")
    print("|---|---|---|---|---|---|")
    for name in args.problems:
        for n in args.sizes:
            r, work, used = ratio(name, n, args.rounds)
            print(f"| {name} | {n} | {work} | {r:.2f}x | {used} | {os.getloadavg()[0]:.1f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
