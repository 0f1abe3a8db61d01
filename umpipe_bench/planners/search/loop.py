"""The one search loop: ask/tell algorithms, a termination object, the count and the history.

In the manner of pymoo's ``Algorithm`` (``setup``/``has_next``/``next`` with ``Termination``
objects) and Optuna's ask/tell: a search planner supplies a :class:`SearchAlgorithm` (its
initial population in :meth:`~SearchAlgorithm.setup`, then :meth:`~SearchAlgorithm.ask` for a
batch of genomes and :meth:`~SearchAlgorithm.tell` their times) and :class:`SearchLoop` does
the rest, the same way for every planner:

* it owns the objective (:mod:`..evaluation.objective`): every evaluation goes through
  :meth:`SearchLoop.evaluate`, which counts it and refuses one past an evaluation budget, so
  ``evaluations <= budget`` holds by construction;
* it owns the budget as a :class:`Termination` (evaluations, generations, seconds; the first
  reached stops). A generation runs only if its worst case (:meth:`~SearchAlgorithm.ask_size`)
  still fits the evaluation budget;
* it keeps the best genome evaluated so far (:class:`BestSoFar`, fed by every evaluation): an
  algorithm with no best of its own (a library adapter, a sampler) is a
  :class:`TrackedAlgorithm` and reports that one; a GA keeps its own (its hall of fame);
* it keeps one typed :class:`History`: one :class:`Record` (generation, evaluations so far,
  wall time, best T so far) after the setup and after every tell. Plots and the leaderboard
  read these four fields (docs/ARCHITECTURE.md, "Search planners");
* it draws the progress bar (tqdm, imported only when asked for) at most a few times a second.

:class:`SearchPlanner` runs every search planner, the outside optimizers included, through the
same steps: :meth:`~SearchPlanner.check_run` (refuse before any work), the objective, the
algorithm, the loop (inside :meth:`~SearchPlanner.running`), then
:meth:`~SearchPlanner.final_plan` (the plan, schedule and T the result reports).

The objects here know nothing about plans or bits: a genome is whatever the objective
evaluates (docs/MODEL.md §2's cut bits today).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

import numpy as np

from ...plan import Plan
from ...problem import Problem
from ..evaluation.clock import RunClock, TimeUp, chunk_rows
from ..evaluation.clock import current as current_clock
from ..evaluation.objective import (
    CutBitsObjective,
    FamilyObjective,
    Genomes,
    JoinedGenomes,
    Objective,
)
from .base import Budget, Planner, PlannerError, PlanResult
from .history import HISTORY_FIELDS, History, Record

__all__ = [
    "HISTORY_FIELDS",
    "BestSoFar",
    "History",
    "Record",
    "SearchAlgorithm",
    "SearchLoop",
    "SearchPlanner",
    "Termination",
    "TrackedAlgorithm",
]


Evaluate = Callable[[Genomes], np.ndarray]


class Termination:
    """A budget as a stopping rule: evaluations, generations, seconds (first reached stops)."""

    def __init__(self, budget: Budget, planner: str = "planner") -> None:
        if budget.evaluations is None and budget.generations is None and budget.seconds is None:
            raise PlannerError(
                f"planner {planner!r} needs a finite budget: evals:N, gens:N or secs:X")
        self.budget = budget

    def reached(self, evaluations: int, generations: int, elapsed: float,
                next_cost: int) -> bool:
        """True when no further generation of ``next_cost`` evaluations may run."""
        b = self.budget
        if b.generations is not None and generations >= b.generations:
            return True
        if b.evaluations is not None and evaluations + next_cost > b.evaluations:
            return True
        return b.seconds is not None and elapsed >= b.seconds


class BestSoFar:
    """The best genome evaluated so far (a copied batch of one) and its T: a strictly smaller T
    replaces it, and within a batch the first minimum counts."""

    def __init__(self) -> None:
        self.value = float("inf")
        self.genomes: Any = None

    def note(self, genomes: Any, times: np.ndarray) -> None:
        if len(times) == 0:
            return
        i = int(np.argmin(times))
        if times[i] < self.value:
            self.value = float(times[i])
            self.genomes = (np.array(genomes[i:i + 1]) if isinstance(genomes, np.ndarray)
                            else genomes.row(i).copy())


class SearchAlgorithm:
    """An ask/tell search (subclasses implement the five hooks; :class:`SearchLoop` drives).

    ``start_time`` (best T of the initial population: the planner's starting point) is kept
    by the subclass; ``best_time`` (best T so far) and :meth:`best` too, unless it is a
    :class:`TrackedAlgorithm`, which reports the loop's :class:`BestSoFar`.
    """

    best_time: float = float("inf")
    start_time: float = float("inf")
    #: True once the algorithm has nothing more worth asking (a stop rule of its own, e.g.
    #: :class:`.settle.SettlingRestarts`): the loop ends before its budget does.
    finished: bool = False
    #: True: the loop adds a history row whenever an evaluation improves the best plan, not
    #: only after each generation (an algorithm that spends long inside one ``tell``).
    records_improvements: bool = False

    def setup(self, evaluate: Evaluate) -> None:
        """Build the initial population; ``evaluate`` is the loop's counted objective."""
        raise NotImplementedError

    def ask_size(self) -> int:
        """The most genomes the next :meth:`ask` may return (budget check)."""
        raise NotImplementedError

    def ask(self) -> Genomes:
        raise NotImplementedError

    def tell(self, genomes: Genomes, times: np.ndarray) -> None:
        raise NotImplementedError

    def best(self) -> tuple[Genomes, float]:
        """The best genome so far (a batch of one) and its T."""
        raise NotImplementedError

    def bind(self, best: BestSoFar) -> None:
        """Receive the loop's running best before :meth:`setup` (kept only by a
        :class:`TrackedAlgorithm`)."""

    # Stand-alone driving (benchmarks): the same hooks, no budget or history.
    def initialize(self, evaluate: Evaluate | None = None) -> None:
        inner = evaluate or self._objective_evaluate()
        best = BestSoFar()

        def noted(genomes: Genomes) -> np.ndarray:
            times = inner(genomes)
            best.note(genomes, times)
            return times

        self._standalone = noted
        self.bind(best)
        self.setup(self._standalone)

    def step(self) -> None:
        g = self.ask()
        self.tell(g, self._standalone(g) if len(g) else np.zeros(0))

    def _objective_evaluate(self) -> Evaluate:
        objective = getattr(self, "objective", None)
        if objective is None:
            raise TypeError(f"{type(self).__name__} has no objective to evaluate with")
        return objective.evaluate


class TrackedAlgorithm(SearchAlgorithm):
    """An algorithm whose best is the loop's :class:`BestSoFar`: ``best_time`` and
    :meth:`best` read it, so the subclass keeps no best of its own."""

    _best_so_far: BestSoFar | None = None

    def bind(self, best: BestSoFar) -> None:
        self._best_so_far = best

    @property  # type: ignore[override]
    def best_time(self) -> float:
        return float("inf") if self._best_so_far is None else self._best_so_far.value

    def best(self) -> tuple[Genomes, float]:
        b = self._best_so_far
        if b is None or b.genomes is None:
            raise PlannerError(f"{type(self).__name__}: the budget allowed no evaluation")
        return b.genomes, b.value


class SearchLoop:
    """Drives one :class:`SearchAlgorithm` under a :class:`Termination` (module docstring).

    Every batch is evaluated in compiled calls of at most
    :func:`..evaluation.clock.chunk_rows` rows; between two calls the clock moves the progress
    bar and raises :class:`~umpipe_bench.errors.TimeUp` once a time budget's deadline has
    passed. :meth:`run` ends on it, and on SIGINT or SIGTERM
    (``KeyboardInterrupt``), with whatever was evaluated: :attr:`stopped` says why,
    :attr:`interrupted` holds the signal's exception, and :meth:`result` gives the best genome.
    """

    #: Seconds between progress-bar refreshes.
    PROGRESS_EVERY: ClassVar[float] = RunClock.PROGRESS_EVERY

    def __init__(self, objective: Objective, termination: Termination,
                 progress: bool = False, desc: str = "search",
                 clock: RunClock | None = None) -> None:
        self.objective = objective
        self.termination = termination
        self.progress, self.desc = progress, desc
        self.evaluations = 0
        self.generation = 0
        self.history = History()
        self.best = BestSoFar()
        b = termination.budget
        self.clock = clock if clock is not None else RunClock(
            b.seconds, progress=progress, desc=desc, evaluations=b.evaluations,
            generations=b.generations)
        self._own_clock = clock is None
        self._rows = _chunk_rows(objective)
        #: Why the run ended before its termination: None, ``"time"``, ``"interrupted"``.
        self.stopped: str | None = None
        #: Where the run was when it stopped: ``"setup"`` (seeding) or ``"search"``, and the
        #: clock's phase then (e.g. ``"the stage descent"``).
        self.stopped_in: str | None = None
        self.stopped_phase: str | None = None
        #: The ``KeyboardInterrupt`` (SIGINT) or :class:`~umpipe_bench.errors.Terminated`
        #: (SIGTERM) that stopped the run.
        self.interrupted: KeyboardInterrupt | None = None
        self.setup_done = False
        #: A history row for every improvement inside a batch, not only per generation: for
        #: algorithms that spend long between generations (``records_improvements``).
        self._improvement_rows = False

    def evaluate(self, genomes: Genomes) -> np.ndarray:
        """T of every genome in the batch; counted against the budget.

        The batch runs in calls of at most ``chunk_rows`` rows; before each call but the
        run's very first, the clock may raise :class:`~umpipe_bench.errors.TimeUp` (what was
        evaluated is counted and noted; nothing of the rest is)."""
        n = len(genomes)
        cap = self.termination.budget.evaluations
        if cap is not None and self.evaluations + n > cap:
            raise RuntimeError(
                f"search loop: {n} more evaluations would exceed the budget evals:{cap} "
                f"({self.evaluations} done); the algorithm's ask_size is wrong")
        if n == 0:
            return np.zeros(0)
        step = self._rows or n
        parts = []
        for a in range(0, n, step):
            if self.evaluations:  # the first call of a run always runs: a plan to return
                self.clock.check()
            part = (_rows_of(genomes, a, min(n, a + step))
                    if step < n or isinstance(genomes, JoinedGenomes) else genomes)
            times = np.asarray(self.objective.evaluate(part), dtype=np.float64)
            self.evaluations += len(part)
            prior = self.best.value
            self.best.note(part, times)
            if self._improvement_rows and self.setup_done and self.best.value < prior:
                self.history.append(self.generation, self.evaluations, self.elapsed(),
                                    self.best.value)
            self.clock.tick(self.evaluations, self.best.value)
            parts.append(times)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def elapsed(self) -> float:
        return self.clock.elapsed()

    def _record(self, algo: SearchAlgorithm) -> None:
        self.history.append(self.generation, self.evaluations, self.elapsed(), algo.best_time)

    def run(self, algo: SearchAlgorithm) -> None:
        """Setup, then ask/evaluate/tell until the termination is reached, the deadline
        passes inside a batch or a signal arrives (:attr:`stopped`)."""
        clock = self.clock
        try:
            clock.phase = "seeding"
            self._improvement_rows = algo.records_improvements
            algo.bind(self.best)
            algo.setup(self.evaluate)
            self.setup_done = True
            self._record(algo)
            clock.phase = "the search"
            while not algo.finished and not self.termination.reached(
                    self.evaluations, self.generation, self.elapsed(), algo.ask_size()):
                g = algo.ask()
                algo.tell(g, self.evaluate(g))
                self.generation += 1
                clock.generation = self.generation
                self._record(algo)
                clock.tick(self.evaluations, algo.best_time)
        except TimeUp:
            self._stop("time")
        except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (Terminated)
            self.interrupted = exc
            self._stop("interrupted")
        finally:
            if self._own_clock:
                clock.close()

    def _stop(self, why: str) -> None:
        self.stopped, self.stopped_in = why, "search" if self.setup_done else "setup"
        self.stopped_phase = self.clock.phase
        self.clock.stop(why)
        if self.best.genomes is not None:
            self.history.append(self.generation, self.evaluations, self.elapsed(),
                                self.best.value)

    def result(self, algo: SearchAlgorithm) -> tuple[Any, float]:
        """The best genome (a batch of one) and its T: the algorithm's, or, when the run
        stopped early, the loop's best so far if it is strictly faster or the algorithm
        cannot answer (its setup did not finish)."""
        if self.stopped is None:
            return algo.best()
        if self.setup_done:
            try:
                genome, T = algo.best()
            except (IndexError, ValueError):  # its setup was cut short
                pass
            else:
                if not self.best.value < T:
                    return genome, T
        if self.best.genomes is None:
            raise PlannerError("the run ended before any plan was evaluated")
        return self.best.genomes, self.best.value


def _chunk_rows(objective: Any) -> int | None:
    """Rows per call for ``objective``: :func:`..evaluation.clock.chunk_rows` for a compiled
    evaluator, one for the reference simulators (``backend`` python: DGAP's, a plan at a time
    in Python, a thousand times slower a row); None: it has no problem to size them by."""
    problem = getattr(objective, "problem", None)
    if problem is None:
        return None
    if getattr(objective, "backend", None) == "python":
        return 1
    evaluator = getattr(objective, "evaluator", None)
    return chunk_rows(problem.S, problem.B, getattr(evaluator, "threads", 1))


def _rows_of(genomes: Any, a: int, b: int) -> Any:
    """Rows ``a..b-1`` of a batch: :class:`Genomes`, or a flat genome array."""
    return genomes[a:b] if isinstance(genomes, np.ndarray) else genomes.rows(a, b)


class SearchPlanner(Planner):
    """A planner made of an objective and an ask/tell algorithm, run by :class:`SearchLoop`.

    Subclasses declare ``defaults`` (validated at construction, :meth:`check_settings`) and
    implement :meth:`make_algorithm`; :meth:`make_objective` picks the evaluator (the
    ``backend``/``device`` settings by default). The other steps of :meth:`_plan` have
    defaults a planner may override: :meth:`check_run`, :meth:`running`, :meth:`finish`,
    :meth:`final_plan`, :meth:`result_settings`.
    """

    timed = True  # a secs: budget limits every phase of the run (:mod:`.clock`)

    def check_run(self, problem: Problem, mode: str, settings: dict[str, Any],
                  budget: Budget) -> None:
        """Refuse a run that cannot start (a missing library, a budget the setup alone would
        spend), before any work."""

    def make_objective(self, problem: Problem, mode: str, settings: dict[str, Any]
                       ) -> Objective:
        return CutBitsObjective(problem, mode, str(settings.get("backend", "auto")),
                                settings.get("device") or None, int(settings.get("threads", 1)))

    def make_algorithm(self, problem: Problem, mode: str, settings: dict[str, Any],
                       budget: Budget, seed: int | None, objective: Objective
                       ) -> SearchAlgorithm:
        raise NotImplementedError

    def running(self) -> AbstractContextManager[Any]:
        """The context the loop runs in (e.g. a library's warnings silenced)."""
        return nullcontext()

    def result_settings(self, algo: SearchAlgorithm, objective: Objective,
                        settings: dict[str, Any]) -> dict[str, Any]:
        """The settings recorded in the result (defaults filled in)."""
        out = dict(settings)
        if "backend" in out and hasattr(objective, "backend"):
            out["backend"] = objective.backend
        return out

    def finish(self, history: History, algo: SearchAlgorithm) -> None:
        """Hook after the run (e.g. attach an algorithm's own log to ``history.extra``)."""

    def final_plan(self, problem: Problem, mode: str, objective: Objective, genomes: Any
                   ) -> tuple[Plan, str, float]:
        """``(plan, schedule, T)`` of the best genome: the family's plan under its own
        schedule, never worse than the best EDP (:func:`never_worse_than_edp`), or the GPipe
        recurrence's plan."""
        plan = objective.decode(genomes, 0)
        if isinstance(objective, FamilyObjective):
            return family_plan(problem, mode, plan)
        from ...simulator import gpipe_recurrence

        return plan, "gpipe", gpipe_recurrence(problem, plan)

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        s = dict(self.config)
        clock = current_clock()  # Planner.plan's: the deadline of the whole run
        self.check_run(problem, mode, s, budget)
        termination = Termination(budget, self.name)
        objective = self.make_objective(problem, mode, s)
        algo = self.make_algorithm(problem, mode, s, budget, seed, objective)
        loop = SearchLoop(objective, termination, progress, self.name, clock)
        with self.running():
            loop.run(algo)
        if loop.interrupted is not None and loop.best.genomes is None:
            raise loop.interrupted  # nothing evaluated: nothing to return
        clock.phase = "the final plan"
        self.finish(loop.history, algo)
        if loop.best.genomes is None:  # the time ran out in the EDP reference scans
            plan, schedule, T = never_worse_than_edp(problem, mode, None, "", float("inf"))
        else:
            genome, _ = loop.result(algo)
            plan, schedule, T = self.final_plan(problem, mode, objective, genome)
        return PlanResult(
            planner=self.name, plan=plan, iteration_time=T, schedule=schedule,
            evaluations=loop.evaluations,
            start_time=algo.start_time if loop.setup_done else None,
            history=loop.history, settings=self.result_settings(algo, objective, s),
            stopped=_stop_note(loop, clock, algo), interrupted=loop.interrupted,
        )


def _stop_note(loop: SearchLoop, clock: RunClock, algo: Any = None) -> str | None:
    """One line on a run that a signal stopped, whose time budget ended before its seeding
    did, or that the default budget's seconds ended before its stop rule held (None: the run
    ended as its budget says)."""
    phase = loop.stopped_phase or "the run"
    if loop.stopped == "interrupted":
        why = str(loop.interrupted) or "interrupted"
        return f"{why} during {phase}; the plan is the best found so far"
    if loop.stopped == "time" and loop.stopped_in == "setup":
        best = (f"the best of the {loop.evaluations} plans evaluated" if loop.evaluations
                else "the best EDP plan scanned")
        return (f"the time budget secs:{clock.seconds:g} ended during seeding ({phase}), "
                f"before the search began; the plan is {best}")
    b = loop.termination.budget
    if b.settle and b.seconds is not None and not getattr(algo, "finished", True) and (
            loop.stopped == "time" or loop.elapsed() >= b.seconds):
        rounds = len(getattr(algo, "round_best", ()))
        return (f"the default budget's {b.seconds:g} s cap ended the search after "
                f"{loop.evaluations:,} evaluations and {rounds} whole "
                f"round{'' if rounds == 1 else 's'}, before its stop rule held; the plan is the "
                "best found so far (--budget evals:N or secs:X searches longer)")
    return None


def family_plan(problem: Problem, mode: str, plan: Plan) -> tuple[Plan, str, float]:
    """``(plan, schedule, T)`` of a schedule-family plan: simulated under its own schedule
    (capped, or GPipe without caps; ``T = inf`` when it does not fit), never worse than the
    best EDP (:func:`never_worse_than_edp`)."""
    from ...simulator import simulate

    schedule = "gpipe" if plan.caps is None else "capped"
    tl = simulate(problem, plan, schedule)
    T = np.inf if tl.fits_memory is False else tl.iteration_time
    return never_worse_than_edp(problem, mode, plan, schedule, T)


def never_worse_than_edp(problem: Problem, mode: str, plan: Plan | None, schedule: str,
                         T: float) -> tuple[Plan, str, float]:
    """The plan, or the best GPipe-EDP / 1F1B-EDP plan that fits when that is faster.

    A family search is seeded with both, so it can only lose to torch's 1F1B at an M that
    does not divide B (the family's sample caps reproduce 1F1B exactly only when it does,
    docs/SCHEDULES.md §1): then that equal plan is the answer, under its own schedule.
    A plan that does not fit (``T = inf``: nothing the search found fits) is not returned:
    the best EDP plan that fits is, and when none fits either, the caller gets the
    :class:`~umpipe_bench.memory.MemoryCapError` that names the stage, bytes and cap.
    ``plan`` None (``T = inf``): the best EDP plan alone. The scans are those the run's clock
    allowed (:func:`..evaluation.reference.edp_reference` with ``partial``).
    """
    from ...memory import MemoryCapError
    from ..evaluation.reference import edp_reference

    ref = edp_reference(problem, mode, partial=True)  # what the run's clock allowed
    edp = ref.faster_than(T)
    if edp is not None:
        assert edp.M is not None and edp.T is not None
        return Plan.edp(problem.S, problem.B, edp.M, mode), edp.schedule, edp.T
    if not np.isfinite(T):
        if ref.errors:
            raise ref.errors["1f1b" if "1f1b" in ref.errors else "gpipe"]
        raise MemoryCapError(f"problem {problem.name!r} ({mode}): no plan found fits memory")
    assert plan is not None
    return plan, schedule, float(T)
