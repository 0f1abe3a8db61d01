"""The search engine's own costs, as same-run ratios.

Speeds on this machine drift 2x minute to minute and other work shares its 2 cores, so every
figure is a ratio of two things measured interleaved in one run (medians over ``--rounds``),
with the load average printed beside it:

1. a TiDGAP generation (ask, evaluate, tell) over the evaluation inside it, P = 256
   (goal <= 1.5x), on gpt1-14, vgg16 and sim-s32-b256-s0;
2. drawing random plans (random search's batch of 128) over evaluating them (goal <= 1x);
3. the numba evaluator on 1 thread over 2 threads (the population split in two row blocks);
4. CPU time of ``umpipe-bench --help`` and ``umpipe-bench problems`` over
   ``python -c "import numpy"`` (goal <= 2x);
5. with ``--big``: greedy-dp's time over a whole default TiDGAP run at S = 64, B = 1024
   (goal <= 10 %).

    python scripts/search_perf.py [--rounds 7] [--big] > results/perf/search.md
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from umpipe_bench.planners.algorithms.tidgap import TiDGAP, TiDGAPEngine
from umpipe_bench.planners.evaluation.encoding import random_bits
from umpipe_bench.planners.evaluation.evaluator import PopulationEvaluator
from umpipe_bench.planners.evaluation.objective import CutBitsObjective, FamilyObjective, Genomes
from umpipe_bench.problem import Problem
from umpipe_bench.registry import get_problem
from umpipe_bench.synthetic import synthetic_problem

ROOT = Path(__file__).resolve().parents[1]
P = 256
MODES = ("stash", "recompute")


class _Timed:
    """Adds up the seconds an objective spends evaluating (mixed in before the objective)."""

    seconds = 0.0

    def evaluate(self, genomes: Genomes) -> np.ndarray:
        t0 = time.perf_counter()
        out = super().evaluate(genomes)  # type: ignore[misc]
        self.seconds += time.perf_counter() - t0
        return out


class TimedObjective(_Timed, CutBitsObjective):
    """The GPipe-schedule objective, timed."""


class TimedFamilyObjective(_Timed, FamilyObjective):
    """The schedule family's objective (TiDGAP's default), timed."""


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def generation_ratio(problem: Problem, mode: str, rounds: int, gens: int = 20,
                     family: bool = False) -> tuple[float, float]:
    """Median over rounds of (generation seconds / evaluation seconds); ms per generation.
    ``family``: over the schedule family (TiDGAP's default space: cut bits and caps), else
    the GPipe schedule (the cheapest evaluation, so the hardest ratio)."""
    settings = dict(TiDGAP().config)
    obj: TimedObjective | TimedFamilyObjective = (
        TimedFamilyObjective(problem, mode) if family else TimedObjective(problem, mode))
    eng = TiDGAPEngine(problem, mode, settings, P, 0, obj)
    eng.initialize()
    for _ in range(gens):
        eng.step()  # warm: compiled kernels, first-generation allocations
    ratios, per_gen = [], []
    for _ in range(rounds):
        obj.seconds = 0.0
        t0 = time.perf_counter()
        for _ in range(gens):
            eng.step()
        total = time.perf_counter() - t0
        ratios.append(total / obj.seconds)
        per_gen.append(total / gens * 1e3)
    return statistics.median(ratios), statistics.median(per_gen)


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, reps: int
                ) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            samples[k].append((time.perf_counter() - t0) / reps)
    return {k: statistics.median(v) for k, v in samples.items()}


def random_vs_eval(problem: Problem, mode: str, rounds: int) -> tuple[float, float]:
    """(draw / evaluate) for a batch of 128 random plans; ms per batch drawn."""
    rng = np.random.default_rng(0)
    ev = PopulationEvaluator(problem, mode, "numba")
    S, B = problem.S, problem.B
    f = random_bits(rng, 128, S, B)
    b = random_bits(rng, 128, S, B)
    ev(f, b)

    def draw() -> None:
        random_bits(rng, 128, S, B)
        if mode == "recompute":
            random_bits(rng, 128, S, B)

    reps = max(1, int(2e6 // (S * B)))
    m = interleaved({"draw": draw, "eval": lambda: ev(f, b)}, rounds, reps)
    return m["draw"] / m["eval"], m["draw"] * 1e3


def thread_ratio(problem: Problem, mode: str, n: int, rounds: int) -> float:
    rng = np.random.default_rng(0)
    shape = (n, problem.S, problem.B - 1)
    f = (rng.random(shape) < 0.3).astype(np.uint8)
    b = (rng.random(shape) < 0.3).astype(np.uint8)
    one = PopulationEvaluator(problem, mode, "numba", threads=1)
    two = PopulationEvaluator(problem, mode, "numba", threads=2)
    assert np.array_equal(one(f, b), two(f, b))
    reps = max(1, int(4e7 // (n * problem.S * problem.B)))
    m = interleaved({"1": lambda: one(f, b), "2": lambda: two(f, b)}, rounds, reps)
    return m["1"] / m["2"]


def cpu_seconds(argv: list[str], runs: int) -> float:
    """Median user+system CPU seconds of a child process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = []
    for _ in range(runs):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--big", action="store_true", help="also the S=64, B=1024 greedy share")
    ap.add_argument("--sections", nargs="+", type=int, default=[1, 2, 3, 4],
                    help="which of sections 1-4 to measure")
    args = ap.parse_args()
    R = args.rounds
    problems = [get_problem("gpt1-14"), get_problem("vgg16"), get_problem("sim-s32-b256-s0")]
    print(f"# Search engine costs (same-run ratios, medians of {R} rounds)\n")
    only = "" if args.sections == [1, 2, 3, 4] else " --sections " + " ".join(
        map(str, args.sections))
    print(f"Command: `python scripts/search_perf.py --rounds {R}{only}"
          f"{' --big' if args.big else ''}`\n")
    if 1 in args.sections:
        section1(problems, R)
    if 2 in args.sections:
        section2(problems, R)
    if 3 in args.sections:
        section3(problems, R)
    if 4 in args.sections:
        section4()
    if args.big:
        section5()
    return 0


def section1(problems: list[Problem], R: int) -> None:
    print("## 1. TiDGAP generation / its evaluation, P = 256 (goal <= 1.5x)\n")
    print("| problem | mode | space | generation / evaluation | ms per generation | load |")
    print("|---|---|---|---|---|---|")
    for pr in problems:
        for mode in MODES:
            for family in (False, True):
                ratio, ms = generation_ratio(pr, mode, R, family=family)
                space = "family" if family else "gpipe"
                print(f"| {pr.name} | {mode} | {space} | {ratio:.2f}x | {ms:.2f} | {load()} |",
                      flush=True)
    print()


def section2(problems: list[Problem], R: int) -> None:
    print("## 2. Random plans: drawing / evaluating a batch of 128 (goal <= 1x)\n")
    print("| problem | mode | draw / evaluate | ms per batch drawn | load |")
    print("|---|---|---|---|---|")
    big = synthetic_problem(64, 1024, 0, name="sim-s64-b1024-s0")
    for pr in [*problems, big]:
        for mode in MODES:
            ratio, ms = random_vs_eval(pr, mode, R)
            print(f"| {pr.name} | {mode} | {ratio:.2f}x | {ms:.2f} | {load()} |", flush=True)
    print()


def section3(problems: list[Problem], R: int) -> None:
    print("## 3. numba evaluator: 1 thread / 2 threads (population split in two row blocks)\n")
    print("| problem | mode | N | 1-thread time / 2-thread time | load |")
    print("|---|---|---|---|---|")
    for pr in problems:
        for n in (256, 1024):
            ratio = thread_ratio(pr, "recompute", n, R)
            print(f"| {pr.name} | recompute | {n} | {ratio:.2f}x | {load()} |", flush=True)
    print()


def section4() -> None:
    print("## 4. Start-up CPU time (user + system, median of 5)\n")
    base = cpu_seconds([sys.executable, "-c", "import numpy"], 5)
    cli = [sys.executable, "-m", "umpipe_bench"]
    print("| command | CPU s | / `python -c 'import numpy'` |")
    print("|---|---|---|")
    print(f"| python -c 'import numpy' | {base:.3f} | 1.00x |")
    for argv in (["--help"], ["problems"]):
        c = cpu_seconds([*cli, *argv], 5)
        print(f"| umpipe-bench {' '.join(argv)} | {c:.3f} | {c / base:.2f}x |", flush=True)
    print()


def section5() -> None:
    from umpipe_bench.planners.algorithms.greedy import greedy_dp_plan

    big = synthetic_problem(64, 1024, 0, name="sim-s64-b1024-s0")
    print("## 5. greedy-dp seeding share of a default TiDGAP run, S = 64, B = 1024\n")
    print("| mode | greedy-dp s | default run s | share | load |")
    print("|---|---|---|---|---|")
    greedy_dp_plan(synthetic_problem(3, 8, 0), "stash")  # compile
    for mode in MODES:
        t0 = time.perf_counter()
        greedy_dp_plan(big, mode)
        g = time.perf_counter() - t0
        res = TiDGAP().plan(big, mode=mode, seed=0)
        print(f"| {mode} | {g:.2f} | {res.wall_time:.1f} | {g / res.wall_time:.1%} | "
              f"{load()} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
