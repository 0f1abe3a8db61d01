"""``optuna-tpe``: what a user would pick instead of a GA (docs/MODEL.md §2 encoding).

Optuna's TPE sampler (seeded) over the GA's own encoding: one ``{0, 1}`` parameter per cut bit
(``f{s}_{i}``, and ``b{s}_{i}`` in recompute mode). The ``counts`` encoding (setting
``encoding=counts``) instead gives each stage and direction a microbatch count ``K`` in 1..B
with a balanced split, ``S`` or ``2S`` integer parameters: a much smaller space TPE handles
better, but one that cannot express every plan. With ``seed_edp`` (default) the best EDP(M)
plan under gpipe (a scan of B evaluations) is enqueued as the first trial, so the result is
never worse than GPipe; the first trial is the starting point. Optuna's own ask/tell is
driven by the shared search loop (:mod:`umpipe_bench.planners.search.loop`): one trial per ask.

TPE's cost grows with trials x parameters (~0.1 s per trial at 60 bits, ~0.6 s at 900 bits
on one core), so give it a ``secs:`` budget on large problems. ``gens:N`` means N trials after
the EDP scan. CMA-ES is not offered: optuna's ``CmaEsSampler`` needs the ``cmaes`` package, which is
not a dependency of this project. Optuna's logging is silenced during the run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from umpipe_bench.planners.evaluation.clock import LibraryCalls
from umpipe_bench.planners.evaluation.encoding import edp_bits, edp_row
from umpipe_bench.planners.evaluation.evaluator import BACKENDS
from umpipe_bench.planners.evaluation.objective import Genomes, Objective
from umpipe_bench.planners.search.base import Budget, PlannerError
from umpipe_bench.planners.search.loop import (
    Evaluate,
    SearchAlgorithm,
    SearchPlanner,
    TrackedAlgorithm,
)
from umpipe_bench.planners.search.seeding import EDP_BLOCK_BYTES
from umpipe_bench.planners.search.settings import Setting, SettingsTable
from umpipe_bench.problem import Problem

__all__ = ["OptunaTPE", "TPEAlgorithm"]

#: Suggestions per look at the run's clock within a stage (TPE's cost per suggestion grows with
#: the trials: at 8,160 bits and 200 trials a stage of 255 takes a few tenths of a second).
SUGGEST_BLOCK = 64


class TPEAlgorithm(TrackedAlgorithm):
    """One Optuna study as an ask/tell algorithm (one trial per ask; the loop keeps the best)."""

    def __init__(self, problem: Problem, mode: str, settings: dict[str, Any],
                 seed: int | None) -> None:
        import optuna

        self.optuna = optuna
        self.S, self.B, self.mode = problem.S, problem.B, mode
        self.s = settings
        self.dirs = ("f",) if mode == "stash" else ("f", "b")
        sampler = optuna.samplers.TPESampler(seed=seed,
                                             n_startup_trials=settings["n_startup_trials"])
        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            self.study = optuna.create_study(direction="minimize", sampler=sampler)
        finally:
            optuna.logging.set_verbosity(verbosity)
        self._trial: Any = None
        self._asks = LibraryCalls()  # each trial: its ask and its decoding

    def _decode(self, trial: Any) -> Genomes:
        """The trial's genome, one ``suggest_int`` per parameter (TPE's cost: at S = 128,
        B = 2048 a trial is 262,016 of them, so the run's clock is read every
        :data:`SUGGEST_BLOCK` of them)."""
        from umpipe_bench.planners.evaluation.clock import current

        clock = current()
        S, B = self.S, self.B
        chrom = {}
        for d in self.dirs:
            arr = np.zeros((1, S, B - 1), dtype=np.uint8)
            for st in range(S):
                clock.check()
                if self.s["encoding"] == "bits":
                    for i in range(B - 1):
                        if i and i % SUGGEST_BLOCK == 0:
                            clock.check()
                        arr[0, st, i] = trial.suggest_int(f"{d}{st}_{i}", 0, 1)
                else:
                    arr[0, st] = edp_row(B, trial.suggest_int(f"{d}{st}", 1, B))
            chrom[d] = arr
        return Genomes(chrom["f"], chrom.get("b", chrom["f"]))

    def setup(self, evaluate: Evaluate) -> None:
        if not self.s["seed_edp"]:
            return
        S, B = self.S, self.B
        T = np.empty(B)
        step = max(1, EDP_BLOCK_BYTES // max(1, S * (B - 1)))
        for a in range(1, B + 1, step):  # in blocks: all B plans at once can be 0.5 GiB
            edp = np.stack([edp_bits(S, B, M) for M in range(a, min(B, a + step - 1) + 1)])
            T[a - 1:a - 1 + len(edp)] = evaluate(Genomes(edp, edp))
        M = int(np.argmin(T)) + 1
        self.start_time = float(T[M - 1])
        if self.s["encoding"] == "bits":
            row = edp_row(B, M)
            first = {f"{d}{st}_{i}": int(row[i])
                     for d in self.dirs for st in range(S) for i in range(B - 1)}
        else:
            first = {f"{d}{st}": M for d in self.dirs for st in range(S)}
        self.study.enqueue_trial(first)

    def ask_size(self) -> int:
        return 1

    def ask(self) -> Genomes:
        """A trial. Its first suggestion is TPE's sampling of the whole genome in one call
        (seconds at 8,160 bits, longer as trials add up), so no trial starts that cannot end
        before the deadline if it takes twice the last one's time."""
        with self._asks.call():
            self._trial = self.study.ask()
            genomes = self._decode(self._trial)
        return genomes

    def tell(self, genomes: Genomes, times: np.ndarray) -> None:
        T = float(times[0])
        verbosity = self.optuna.logging.get_verbosity()
        self.optuna.logging.set_verbosity(self.optuna.logging.WARNING)
        try:
            self.study.tell(self._trial, T)
        finally:
            self.optuna.logging.set_verbosity(verbosity)
        if self.start_time == float("inf"):
            self.start_time = T


class OptunaTPE(SearchPlanner):
    """Optuna TPE over cut bits (or per-stage counts). Settings: encoding, seed_edp,
    n_startup_trials, backend."""

    name = "optuna-tpe"
    default_budget = "evals:2000,secs:120"
    defaults = SettingsTable(
        Setting("encoding", str, "bits", "bits: one categorical per cut bit; counts: one "
                "microbatch count per stage (equal split)", choices=("bits", "counts")),
        Setting("seed_edp", bool, True, "enqueue the best EDP plan (found by a scan of B "
                "evaluations) as the first trial"),
        Setting("n_startup_trials", int, 10, "random trials before TPE models the objective",
                low=0),
        Setting("backend", str, "auto", "evaluator of the GPipe schedule", choices=BACKENDS),
    )

    def make_algorithm(self, problem: Problem, mode: str, settings: dict[str, Any],
                       budget: Budget, seed: int | None, objective: Objective
                       ) -> SearchAlgorithm:
        if settings["seed_edp"] and budget.evaluations is not None and (
                budget.evaluations <= problem.B):
            raise PlannerError(
                f"planner {self.name!r}: budget evals:{budget.evaluations} is used up by the "
                f"EDP scan (B={problem.B}); use at least evals:{problem.B + 1}, or --set "
                "seed_edp=false")
        return TPEAlgorithm(problem, mode, settings, seed)
