"""``optuna-tpe``: what a user would pick instead of a GA (MODEL.md §2 encoding).

Optuna's TPE sampler (seeded) over the GA's own encoding: one ``{0, 1}`` parameter per cut bit
(``f{s}_{i}``, and ``b{s}_{i}`` in recompute mode). The ``counts`` encoding (setting
``encoding=counts``) instead gives each stage and direction a microbatch count ``K`` in 1..B
with a balanced split, ``S`` or ``2S`` integer parameters: a much smaller space TPE handles
better, but one that cannot express every plan. With ``seed_edp`` (default) the best EDP(M)
plan under gpipe (a scan of B evaluations) is enqueued as the first trial, so the result is
never worse than GPipe; the first trial is the starting point.

TPE's cost grows with trials x parameters (~0.1 s per trial at 60 bits, ~0.6 s at 900 bits
on one core), so give it a ``secs:`` budget on large problems. ``gens:N`` means N x 128
trials. CMA-ES is not offered: optuna's ``CmaEsSampler`` needs the ``cmaes`` package, which is
not a dependency of this project. Optuna's logging is silenced during the run.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from umpipe_bench.plan import balanced_split
from umpipe_bench.planners.base import Budget, Planner, PlannerError, PlanResult
from umpipe_bench.planners.encoding import edp_bits
from umpipe_bench.planners.evaluator import PopulationEvaluator, bits_to_plan
from umpipe_bench.planners.reference import edp_times
from umpipe_bench.planners.settings import resolve_settings
from umpipe_bench.problem import Problem
from umpipe_bench.simulator import gpipe_recurrence

__all__ = ["OptunaTPE"]

_TRIALS_PER_GENERATION = 128


def _split_bits(B: int, K: int) -> np.ndarray:
    row = np.zeros(B - 1, dtype=np.uint8)
    row[np.cumsum(balanced_split(B, K)[:-1], dtype=np.int64) - 1] = 1
    return row


class OptunaTPE(Planner):
    """Optuna TPE over cut bits (or per-stage counts). Settings: encoding, seed_edp,
    n_startup_trials, backend."""

    name = "optuna-tpe"
    default_budget = "evals:2000,secs:120"
    defaults = {"encoding": "bits", "seed_edp": True, "n_startup_trials": 10, "backend": "auto"}

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        import optuna

        s = resolve_settings(self.name, self.defaults, self.settings)
        if s["encoding"] not in ("bits", "counts"):
            raise PlannerError(
                f"planner {self.name!r}: encoding must be 'bits' or 'counts', got "
                f"{s['encoding']!r}")
        cap = budget.evaluations
        if budget.generations is not None:
            g = budget.generations * _TRIALS_PER_GENERATION
            cap = g if cap is None else min(cap, g)
        if cap is None and budget.seconds is None:
            raise PlannerError(f"planner {self.name!r} needs a finite budget")
        S, B = problem.S, problem.B
        ev = PopulationEvaluator(problem, mode, s["backend"])
        dirs = ("f",) if mode == "stash" else ("f", "b")
        evals = 0
        first: dict[str, int] | None = None
        if s["seed_edp"]:
            M = int(np.argmin(edp_times(problem, mode, "gpipe"))) + 1
            evals += B
            if s["encoding"] == "bits":
                row = edp_bits(1, B, M)[0]
                first = {f"{d}{st}_{i}": int(row[i])
                         for d in dirs for st in range(S) for i in range(B - 1)}
            else:
                first = {f"{d}{st}": M for d in dirs for st in range(S)}
            if cap is not None and evals >= cap:
                raise PlannerError(
                    f"planner {self.name!r}: budget evals:{cap} is used up by the EDP scan "
                    f"(B={B}); give more, or --set seed_edp=false")

        def decode(trial: Any) -> tuple[np.ndarray, np.ndarray]:
            chrom = {}
            for d in dirs:
                arr = np.zeros((S, B - 1), dtype=np.uint8)
                for st in range(S):
                    if s["encoding"] == "bits":
                        for i in range(B - 1):
                            arr[st, i] = trial.suggest_int(f"{d}{st}_{i}", 0, 1)
                    else:
                        arr[st] = _split_bits(B, trial.suggest_int(f"{d}{st}", 1, B))
                chrom[d] = arr
            return chrom["f"], chrom.get("b", chrom["f"])

        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            sampler = optuna.samplers.TPESampler(seed=seed,
                                                 n_startup_trials=s["n_startup_trials"])
            study = optuna.create_study(direction="minimize", sampler=sampler)
            if first is not None:
                study.enqueue_trial(first)
            t0 = time.perf_counter()
            start = None
            best_T, best = np.inf, None
            history = []
            with tqdm(total=cap, disable=not progress, desc=self.name, unit="trial",
                      leave=False) as bar:
                while cap is None or evals < cap:
                    if (budget.seconds is not None and best is not None
                            and time.perf_counter() - t0 >= budget.seconds):
                        break
                    trial = study.ask()
                    fb, bb = decode(trial)
                    T = float(ev(fb[None], bb[None])[0])
                    study.tell(trial, T)
                    evals += 1
                    if start is None:
                        start = T
                    if T < best_T:
                        best_T, best = T, (fb, bb)
                    history.append({"evals": evals, "value": T, "best": best_T,
                                    "time": time.perf_counter() - t0})
                    bar.update(1)
        finally:
            optuna.logging.set_verbosity(verbosity)
        if best is None or start is None:
            raise PlannerError(f"planner {self.name!r}: the budget allowed no trial")
        plan = bits_to_plan(best[0], best[1], mode)
        return PlanResult(planner=self.name, plan=plan,
                          iteration_time=gpipe_recurrence(problem, plan), evaluations=evals,
                          start_time=start, history=history, settings=s)
