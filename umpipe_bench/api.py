"""Problems as objectives: a flat integer genome in, predicted iteration times out.

For researchers who bring their own optimizer (README "Bring your own optimizer"): no planner
class to write. :class:`PipelineObjective` turns a problem, a memory mode and a schedule
(``gpipe`` or ``capped``) into a black-box function in the manner of COCO's and pymoo's problems:

* :class:`GenomeSpace` says what a genome is: ``S·(B−1)`` forward cut bits (docs/MODEL.md §2:
  bit ``i`` of a stage cuts after sample ``i+1``), then, in recompute mode, as many backward
  bits (in stash mode the backward partition is tied to the forward one), then, under the
  ``capped`` schedule, one in-flight cap per stage in ``1..B`` (docs/SCHEDULES.md; ``B`` means
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

import math
import numbers
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from .codec import GenomeLayout, edp_bits, plan_to_bits
from .errors import BudgetExhausted, InputError
from .plan import MODES, Plan, PlanError
from .problem import Problem, ProblemError

__all__ = ["SCHEDULES", "BudgetExhausted", "GenomeSpace", "PipelineObjective", "as_plan",
           "as_problem"]

#: Schedules a genome can describe: cut bits only (GPipe), or cut bits and in-flight caps.
SCHEDULES = ("gpipe", "capped")
FAMILIES = SCHEDULES  # the older name


def _whole(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an ``int`` in ``low..high``: an integer type, never a bool, a float or a
    string (a fractional budget or a ``"100"`` would otherwise pass ``<`` or fail deep
    inside)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be an integer, got {value!r} "
                          f"({type(value).__name__})")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise InputError(f"{name} must be {bound}, got {value}")
    return int(value)


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




def _genes(x: Any) -> np.ndarray:
    """Genomes as integers: non-integer genes round to the nearest (halves to even), the one
    conversion :meth:`GenomeSpace.split` (what is evaluated) and
    :meth:`PipelineObjective.best_plan` (what is reported) share."""
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":
        raise InputError(f"genomes: expected numbers, got an array of {a.dtype}")
    if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        raise InputError("genomes: a gene is NaN or infinite")
    return np.rint(a).astype(np.int64)


class GenomeSpace(GenomeLayout):
    """The layout and bounds of a flat integer genome (module docstring;
    :class:`umpipe_bench.codec.GenomeLayout`), and its plans."""

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`GenomeLayout.split` of the genes as :func:`_genes` converts them (the
        conversion :meth:`PipelineObjective.best_plan` uses too); a bad genome is an
        :class:`~umpipe_bench.errors.InputError`."""
        xi = _genes(x)
        try:
            return super().split(xi)
        except InputError:
            raise
        except ValueError as exc:
            raise InputError(str(exc)) from None

    def to_plan(self, x: np.ndarray) -> tuple[Plan, str]:
        """``(plan, schedule)`` of one genome: ``gpipe`` when every cap is ``B``."""
        f, b, caps = self.split(x)
        plan = Plan.from_bits(f[0], b[0], self.mode, caps[0] if self.n_caps else None)
        return plan, "gpipe" if plan.caps is None else "capped"

    def from_plan(self, plan: Plan | Mapping[str, Any]) -> np.ndarray:
        """The genome of a plan (its caps, under the capped schedule); a mapping is read as a
        plan file's JSON form (checked against :data:`umpipe_bench.plan.SPEC`)."""
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
    ``budget``: the most evaluations it will do, an integer >= 1 (None: no limit);
    ``memory_cap``: bytes per stage, > 0 (None: the problem's own capacities, if any).
    """

    def __init__(self, problem: Problem | str, mode: str = "stash", schedule: str = "gpipe",
                 budget: int | None = None, memory_cap: float | None = None, *,
                 family: str | None = None) -> None:
        if family is not None:  # the older keyword
            import warnings

            warnings.warn("PipelineObjective(family=...) is now schedule=...",
                          DeprecationWarning, stacklevel=2)
            schedule = family
        problem = as_problem(problem)
        if not isinstance(mode, str) or mode not in MODES:
            raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not isinstance(schedule, str) or schedule not in SCHEDULES:
            raise InputError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
        if budget is not None:
            budget = _whole("budget", budget, 1)
        if memory_cap is not None:
            if isinstance(memory_cap, bool) or not isinstance(memory_cap, numbers.Real) \
                    or math.isnan(memory_cap) or memory_cap <= 0:
                raise InputError(f"memory_cap must be a number of bytes > 0 (or None: the "
                                  f"problem's capacities), got {memory_cap!r}")
            memory_cap = float(memory_cap)
        from .planners.evaluation.family import FamilyEvaluator

        self.problem, self.mode, self.schedule, self.budget = problem, mode, schedule, budget
        self.space = GenomeSpace(problem.S, problem.B, mode, schedule)
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
    def family(self) -> str:
        """The older name of :attr:`schedule`."""
        return self.schedule

    @property
    def remaining(self) -> int | None:
        return None if self.budget is None else self.budget - self.evaluations

    def evaluate(self, genomes: np.ndarray) -> np.ndarray:
        """Iteration times ``[N]`` (seconds) of a batch ``[N, D]`` or of one genome ``[D]``."""
        f, b, caps = self.space.split(genomes)
        n = f.shape[0]
        if n == 0:
            return np.empty(0)  # nothing evaluated, nothing counted
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
            self.best_genome = _genes(genomes).reshape(n, -1)[i]  # the genes evaluated
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
        M = _whole("M (microbatches)", M, 1, self.problem.B)
        return self.space.join(edp_bits(self.problem.S, self.problem.B, M))

    def start_genome(self) -> np.ndarray:
        """The best EDP(M) genome over ``M = 1..B`` (a counted scan of ``B`` evaluations):
        where the outside planners start, so none ends worse than GPipe-EDP."""
        return self.edp_scan(self.evaluate)[0]

    def edp_scan(self, evaluate: Any) -> tuple[np.ndarray, float]:
        """``(genome, T)`` of the best EDP(M), ``M = 1..B`` (ties: the smallest M), each
        block of genomes evaluated by ``evaluate`` (this objective's, or a search loop's
        that counts them); the genomes are made a block at a time (at S = 128, B = 2048 all
        of them would take 4 GiB)."""
        S, B = self.problem.S, self.problem.B
        step = max(1, (1 << 24) // (8 * self.space.dimension))  # 16 MiB of int64 genes
        best, best_T = None, float("inf")
        for a in range(1, B + 1, step):
            X = np.stack([self.space.join(edp_bits(S, B, M))
                          for M in range(a, min(B, a + step - 1) + 1)])
            T = np.asarray(evaluate(X), dtype=np.float64)
            i = int(np.argmin(T))
            if best is None or T[i] < best_T:
                best, best_T = X[i], float(T[i])
        assert best is not None
        return best, best_T

    @property
    def best_known(self) -> float | None:
        from .bench.best_known import BestKnown, BestKnownError

        try:
            return BestKnown().value(self.problem.name, self.mode, self.schedule)
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
