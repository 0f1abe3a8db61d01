"""DGAP vs TiDGAP speed ratios, measured interleaved (A B A B ...) in one run; medians.

Population evaluation and one whole generation at P = 256 on a 14-stage, B = 64 synthetic
problem (and ``gpt1-14`` when ``umpipe_bench/problems/data/gpt1-14.json`` exists), both memory
modes. Goals: evaluation >= 100x faster than one individual at a time, a generation >= 20x
faster than DGAP's. Speeds on this machine drift 2x minute to minute, so only ratios taken in
one interleaved run mean anything.

    python scripts/planner_ratios.py [--rounds 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from umpipe_bench.planners.algorithms.dgap import DGAPEngine, Individual, make_toolbox
from umpipe_bench.planners.algorithms.tidgap import TiDGAPEngine
from umpipe_bench.planners.evaluation.evaluator import PopulationEvaluator, bits_to_plan
from umpipe_bench.planners.search.ga import GA_DEFAULTS
from umpipe_bench.problem import Problem
from umpipe_bench.simulator import gpipe_recurrence
from umpipe_bench.synthetic import synthetic_problem

P = 256
DATA = Path(__file__).resolve().parents[1] / "umpipe_bench" / "problems" / "data"


def _time(fn: Callable[[], object], reps: int = 1) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def interleaved(fns: dict[str, tuple[Callable[[], object], int]], rounds: int
                ) -> dict[str, float]:
    """Median seconds per call of each function, measured A B C A B C ..."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, (fn, reps) in fns.items():
            samples[k].append(_time(fn, reps))
    return {k: statistics.median(v) for k, v in samples.items()}


def measure(problem: Problem, mode: str, rounds: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    shape = (P, problem.S, problem.B - 1)
    fb = (rng.random(shape) < 0.3).astype(np.uint8)
    bb = (rng.random(shape) < 0.3).astype(np.uint8)
    tb = make_toolbox(problem, mode, GA_DEFAULTS)
    pop = [Individual([f.reshape(-1).tolist(), b.reshape(-1).tolist()]) for f, b in zip(fb, bb)]
    plans = [bits_to_plan(f, b, mode) for f, b in zip(fb, bb)]
    ev_nb = PopulationEvaluator(problem, mode, "numba")
    ev_np = PopulationEvaluator(problem, mode, "numpy")
    ev_nb(fb[:2], bb[:2])
    settings = {**GA_DEFAULTS, "population": P, "device": ""}
    dg = DGAPEngine(problem, mode, settings, P, seed=0)
    tg = TiDGAPEngine(problem, mode, {**settings, "backend": "numba"}, P, seed=0)
    tn = TiDGAPEngine(problem, mode, {**settings, "backend": "numpy"}, P, seed=0)
    for e in (dg, tg, tn):
        e.initialize()
        e.step()
    ev = interleaved({
        "eval_dgap_fitness": (lambda: [tb.evaluate(i) for i in pop], 1),
        "eval_reference_plans": (lambda: [gpipe_recurrence(problem, p) for p in plans], 1),
        "eval_tidgap_numba": (lambda: ev_nb(fb, bb), 50),
        "eval_tidgap_numpy": (lambda: ev_np(fb, bb), 3),
    }, rounds)
    gen = interleaved({
        "gen_dgap": (dg.step, 1),
        "gen_tidgap_numba": (tg.step, 50),
        "gen_tidgap_numpy": (tn.step, 3),
    }, rounds)
    out = {**ev, **gen}
    out["ratio_eval_numba_vs_dgap_fitness"] = ev["eval_dgap_fitness"] / ev["eval_tidgap_numba"]
    out["ratio_eval_numba_vs_reference"] = ev["eval_reference_plans"] / ev["eval_tidgap_numba"]
    out["ratio_eval_numpy_vs_reference"] = ev["eval_reference_plans"] / ev["eval_tidgap_numpy"]
    out["ratio_gen_numba"] = gen["gen_dgap"] / gen["gen_tidgap_numba"]
    out["ratio_gen_numpy"] = gen["gen_dgap"] / gen["gen_tidgap_numpy"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (medians)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    problems = {"sim-s14-b64": synthetic_problem(14, 64, 0, name="sim-s14-b64")}
    if (DATA / "gpt1-14.json").exists():
        problems["gpt1-14"] = Problem.load(DATA / "gpt1-14.json")
    results = {f"{name}/{mode}": measure(p, mode, args.rounds)
               for name, p in problems.items() for mode in ("stash", "recompute")}
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"P = {P}, medians of {args.rounds} interleaved rounds (ms per population/generation)")
    hdr = (f"{'problem/mode':<24}{'DGAP fit':>10}{'ref only':>10}{'numba':>9}{'numpy':>9}"
           f"{'x numba':>9}{'x numpy':>9} |{'DGAP gen':>10}{'Ti numba':>10}{'Ti numpy':>10}"
           f"{'x numba':>9}{'x numpy':>9}")
    print(hdr)
    for key, r in results.items():
        cells = [
            f"{key:<24}",
            f"{r['eval_dgap_fitness'] * 1e3:>10.1f}",
            f"{r['eval_reference_plans'] * 1e3:>10.1f}",
            f"{r['eval_tidgap_numba'] * 1e3:>9.2f}",
            f"{r['eval_tidgap_numpy'] * 1e3:>9.2f}",
            f"{r['ratio_eval_numba_vs_reference']:>9.0f}",
            f"{r['ratio_eval_numpy_vs_reference']:>9.1f} |",
            f"{r['gen_dgap'] * 1e3:>10.1f}",
            f"{r['gen_tidgap_numba'] * 1e3:>10.2f}",
            f"{r['gen_tidgap_numpy'] * 1e3:>10.2f}",
            f"{r['ratio_gen_numba']:>9.0f}",
            f"{r['ratio_gen_numpy']:>9.1f}",
        ]
        print("".join(cells))
    print("x numba / x numpy: evaluation speedup over the reference recurrence on pre-decoded "
          "plans (goal >= 100x); generation speedup over DGAP's (goal >= 20x).")


if __name__ == "__main__":
    main()
