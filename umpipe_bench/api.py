"""Problems as objectives: a flat integer genome in, predicted iteration times out.

For researchers who bring their own optimizer (README "Bring your own optimizer"): no planner
class to write. :class:`PipelineObjective` turns a problem, a memory mode and a schedule family
into a black-box function in the manner of COCO's and pymoo's problems:

* :class:`GenomeSpace` says what a genome is: ``S·(B−1)`` forward cut bits (docs/MODEL.md §2:
  bit ``i`` of a stage cuts after sample ``i+1``), then, in recompute mode, as many backward
  bits (in stash mode the backward partition is tied to the forward one), then, in the
  ``capped`` family, one in-flight cap per stage in ``1..B`` (docs/SCHEDULES.md; ``B`` means
  uncapped: the GPipe lists). Every genome inside the bounds is a valid plan.
* :meth:`PipelineObjective.evaluate` takes a batch ``[N, D]`` (or one genome ``[D]``) and
  returns the iteration times ``[N]`` from the numba family evaluator, bit-identical to the
  simulator (MODEL.md §4); ``inf`` where a plan exceeds the problem's memory.
* An evaluation counter refuses a batch that would go past the budget
  (:class:`BudgetExhausted`, nothing of the batch is evaluated), so ``evaluations <= budget``
  holds by construction, and a history of the best so far (evaluations, wall time, best) is
  kept for the anytime statistics (:mod:`umpipe_bench.bench.anytime`).
* :attr:`best_known` is the value in ``umpipe_bench/problems/best_known.json``
  (:mod:`umpipe_bench.bench.best_known`); :attr:`lower_bound` is the proven lower bound on T
  of any plan (docs/SIMNETS.md, :mod:`umpipe_bench.bound`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import BudgetExhausted, InputError
from .plan import MODES, Plan, PlanError
from .problem import Problem, ProblemError

__all__ = ["FAMILIES", "BudgetExhausted", "GenomeSpace", "PipelineObjective", "as_plan",
           "as_problem"]

#: Schedule families a genome can describe: cut bits only, or cut bits and in-flight caps.
FAMILIES = ("gpipe", "capped")


def as_problem(problem: Problem | str | Mapping[str, Any]) -> Problem:
    """The API's problem argument as a :class:`Problem`: a registered name (or a problem
    file's path), a problem file's JSON form (checked against
    :data:`umpipe_bench.problem.SPEC`), or a problem."""
    if isinstance(problem, Problem):
        return problem.validate()
    if isinstance(problem, str):
        from .registry import get_problem

        return get_problem(problem)
    if isinstance(problem, Mapping):
        return Problem.from_dict(problem, "problem")
    raise ProblemError(f"problem: expected a Problem, a registered name or a problem mapping, "
                       f"got {type(problem).__name__}")


def as_plan(plan: Plan | Mapping[str, Any]) -> Plan:
    """The API's plan argument as a :class:`Plan`: a plan or a plan file's JSON form (checked
    against :data:`umpipe_bench.plan.SPEC`)."""
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, Mapping):
        return Plan.from_dict(dict(plan), "plan")
    raise PlanError(f"plan: expected a Plan or a plan mapping, got {type(plan).__name__}")


@dataclass(frozen=True)
class GenomeSpace:
    """The layout and bounds of a flat integer genome (module docstring)."""

    S: int
    B: int
    mode: str
    family: str

    @property
    def n_bits(self) -> int:
        """Cut bits: ``S·(B−1)``, twice in recompute mode."""
        return self.S * (self.B - 1) * (2 if self.mode == "recompute" else 1)

    @property
    def n_caps(self) -> int:
        return self.S if self.family == "capped" else 0

    @property
    def dimension(self) -> int:
        return self.n_bits + self.n_caps

    @property
    def lower(self) -> np.ndarray:
        return np.concatenate([np.zeros(self.n_bits, np.int64), np.ones(self.n_caps, np.int64)])

    @property
    def upper(self) -> np.ndarray:
        return np.concatenate([np.ones(self.n_bits, np.int64),
                               np.full(self.n_caps, self.B, np.int64)])

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(fbits [N,S,B-1], bbits [N,S,B-1], caps [N,S])`` of a batch ``[N, D]``."""
        x = np.asarray(x)
        if x.ndim == 1:
            x = x[None]
        if x.ndim != 2 or x.shape[1] != self.dimension:
            raise ValueError(f"genomes: expected shape [N, {self.dimension}] (or [{self.dimension}]"
                             f") for S={self.S}, B={self.B}, {self.mode}, {self.family}; got "
                             f"{x.shape}")
        xi = np.rint(x).astype(np.int64)
        if np.any(xi < self.lower) or np.any(xi > self.upper):
            raise ValueError("genomes: a gene is outside its bounds (bits 0..1, caps 1..B)")
        N, n = xi.shape[0], self.S * (self.B - 1)
        f = xi[:, :n].reshape(N, self.S, self.B - 1).astype(np.uint8)
        b = (xi[:, n:2 * n].reshape(N, self.S, self.B - 1).astype(np.uint8)
             if self.mode == "recompute" else f)
        caps = (xi[:, self.n_bits:] if self.n_caps else np.full((N, self.S), self.B, np.int64))
        return f, b, np.ascontiguousarray(caps)

    def join(self, fbits: np.ndarray, bbits: np.ndarray | None = None,
             caps: np.ndarray | None = None) -> np.ndarray:
        """The genome ``[D]`` of one plan's bits ``[S, B-1]`` (and caps ``[S]``)."""
        parts = [np.asarray(fbits, np.int64).ravel()]
        if self.mode == "recompute":
            parts.append(np.asarray(fbits if bbits is None else bbits, np.int64).ravel())
        if self.n_caps:
            parts.append(np.full(self.S, self.B, np.int64) if caps is None
                         else np.asarray(caps, np.int64).ravel())
        return np.concatenate(parts)

    def to_plan(self, x: np.ndarray) -> tuple[Plan, str]:
        """``(plan, schedule)`` of one genome: ``gpipe`` when every cap is ``B``."""
        from .planners.evaluation.evaluator import bits_to_plan

        f, b, caps = self.split(x)
        plan = bits_to_plan(f[0], b[0], self.mode)
        if self.n_caps and np.any(caps[0] < self.B):
            return plan.with_caps([int(k) for k in caps[0]]), "capped"
        return plan, "gpipe"

    def from_plan(self, plan: Plan | Mapping[str, Any]) -> np.ndarray:
        """The genome of a plan (its caps, in the capped family); a mapping is read as a plan
        file's JSON form (checked against :data:`umpipe_bench.plan.SPEC`)."""
        from .planners.evaluation.evaluator import plan_to_bits

        plan = as_plan(plan)
        if plan.S != self.S or plan.B != self.B:
            raise PlanError(f"plan: S = {plan.S}, B = {plan.B}; the genome space has S = "
                            f"{self.S}, B = {self.B}")
        f, b = plan_to_bits(plan)
        return self.join(f, b, plan.effective_caps() if self.n_caps else None)


class PipelineObjective:
    """A problem as a counted, batched black-box objective (module docstring).

    ``problem``: a :class:`~umpipe_bench.problem.Problem`, a registered name or a problem
    file's JSON form (:func:`as_problem`);
    ``budget``: the most evaluations it will do (None: no limit).
    """

    def __init__(self, problem: Problem | str, mode: str = "stash", family: str = "gpipe",
                 budget: int | None = None, memory_cap: float | None = None) -> None:
        problem = as_problem(problem)
        if mode not in MODES:
            raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if family not in FAMILIES:
            raise InputError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
        if budget is not None and budget < 1:
            raise InputError(f"budget must be a positive number of evaluations, got {budget}")
        from .planners.evaluation.family import FamilyEvaluator

        self.problem, self.mode, self.family, self.budget = problem, mode, family, budget
        self.space = GenomeSpace(problem.S, problem.B, mode, family)
        self._ev = FamilyEvaluator(problem, mode, memory_cap)
        self.evaluations = 0
        self.best_value = float("inf")
        self.best_genome: np.ndarray | None = None
        #: ``{generation (batch), evaluations, wall_time, best}`` at every improvement and at
        #: the latest batch (the best-so-far curve without its flat stretches)
        self.history: list[dict[str, Any]] = []
        self._t0: float | None = None
        self._batches = 0
        self._tail = False

    @property
    def remaining(self) -> int | None:
        return None if self.budget is None else self.budget - self.evaluations

    def evaluate(self, genomes: np.ndarray) -> np.ndarray:
        """Iteration times ``[N]`` (seconds) of a batch ``[N, D]`` or of one genome ``[D]``."""
        f, b, caps = self.space.split(genomes)
        n = f.shape[0]
        if self.budget is not None and self.evaluations + n > self.budget:
            raise BudgetExhausted(
                f"{n} more evaluations would exceed the budget of {self.budget} "
                f"({self.evaluations} done)")
        if self._t0 is None:
            self._t0 = time.perf_counter()
        T = self._ev(f, b, caps)
        self.evaluations += n
        i = int(np.argmin(T))
        improved = bool(T[i] < self.best_value)
        if improved:
            self.best_value = float(T[i])
            self.best_genome = np.asarray(genomes).reshape(n, -1)[i].astype(np.int64)
        rec = {"generation": self._batches, "evaluations": self.evaluations,
               "wall_time": time.perf_counter() - self._t0, "best": self.best_value}
        self._batches += 1
        # the best-so-far step curve, losslessly: every improvement, and the latest batch
        if improved or not self.history or not self._tail:
            self.history.append(rec)
        else:
            self.history[-1] = rec
        self._tail = not improved
        return T

    __call__ = evaluate

    def edp_genome(self, M: int) -> np.ndarray:
        """The genome of EDP(M) (every stage ``M`` balanced microbatches, uncapped)."""
        from .planners.evaluation.encoding import edp_bits

        return self.space.join(edp_bits(self.problem.S, self.problem.B, M))

    def start_genome(self) -> np.ndarray:
        """The best EDP(M) genome over ``M = 1..B`` (a counted scan of ``B`` evaluations):
        where the outside planners start, so none ends worse than GPipe-EDP."""
        from .planners.evaluation.encoding import edp_bits

        S, B = self.problem.S, self.problem.B
        X = np.stack([self.space.join(edp_bits(S, B, M)) for M in range(1, B + 1)])
        return X[int(np.argmin(self.evaluate(X)))]

    @property
    def best_known(self) -> float | None:
        from .bench.best_known import BestKnown, BestKnownError

        try:
            return BestKnown().value(self.problem.name, self.mode, self.family)
        except BestKnownError:
            return None

    @property
    def lower_bound(self) -> float:
        """The proven lower bound on T of any plan (docs/SIMNETS.md, ``umpipe_bench.bound``)."""
        from .bound import lower_bound

        return float(lower_bound(self.problem, self.mode))

    def gap(self, value: float | None = None) -> float | None:
        """``T / best known − 1`` of ``value`` (default: the best so far)."""
        bk = self.best_known
        v = self.best_value if value is None else value
        return None if bk is None or not np.isfinite(v) else v / bk - 1.0

    def decode(self, genomes: np.ndarray, i: int = 0) -> Plan:
        """The plan of genome ``i`` of a batch (with its caps in the capped family): what the
        search loop (:mod:`umpipe_bench.planners.search.loop`) asks of an objective."""
        return self.space.to_plan(np.asarray(genomes).reshape(-1, self.space.dimension)[i])[0]

    def best_plan(self) -> tuple[Plan, str]:
        """``(plan, schedule)`` of the best genome evaluated so far."""
        if self.best_genome is None:
            raise InputError("nothing has been evaluated yet")
        return self.space.to_plan(self.best_genome)
