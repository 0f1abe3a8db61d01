"""The planner interface: ``plan(problem, *, mode, budget, seed) -> PlanResult``.

Every planner optimizes the same simulator (docs/MODEL.md §4); none has a cost model of its own. The
public :meth:`Planner.plan` validates its arguments, times the run and calls the private
:meth:`Planner._plan` hook that each planner overrides.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ...plan import MODES, Plan
from ...problem import Problem
from ...schema import check_seed
from .errors import PlannerError
from .history import History
from .settings import resolve_settings

if TYPE_CHECKING:
    from ..evaluation.clock import RunClock

__all__ = ["Budget", "PlanResult", "Planner", "PlannerError", "annotate_result"]


@dataclass(frozen=True)
class Budget:
    """How long a planner may search: any of evaluations, generations, seconds (first hit stops).

    Parsed from strings such as ``"evals:20000"``, ``"gens:50"``, ``"secs:10"`` or a combination
    ``"evals:20000,secs:30"``.

    ``settle``: a planner's default budget that ends the run when further work is unlikely to
    pay (TiDGAP's stop rule, docs/SEARCH.md "Stopping"); its evaluations and seconds are then
    the caps of that rule. No string parses to it: a ``--budget`` is always a fixed budget.
    """

    evaluations: int | None = None
    generations: int | None = None
    seconds: float | None = None
    settle: bool = False

    _RE: ClassVar[re.Pattern[str]] = re.compile(r"^(evals|gens|secs):(\S+)$")
    _KEYS: ClassVar[dict[str, str]] = {
        "evals": "evaluations", "gens": "generations", "secs": "seconds"}

    @classmethod
    def parse(cls, text: str | Budget | None) -> Budget:
        """Parse and check a budget string; every problem is a :class:`PlannerError` naming
        the part and what was expected (docs/ARCHITECTURE.md, "Search planners")."""
        if text is None:
            return cls()
        if isinstance(text, Budget):
            return text
        kw: dict[str, Any] = {}
        for part in str(text).split(","):
            m = cls._RE.match(part.strip())
            if not m:
                raise PlannerError(
                    f"budget {text!r}: part {part.strip()!r} is not one of evals:N, gens:N, "
                    "secs:X (comma-separated)")
            key, val = m.groups()
            field_name = cls._KEYS[key]
            if field_name in kw:
                raise PlannerError(f"budget {text!r}: {key} given twice")
            try:
                x = float(val)
            except ValueError:
                raise PlannerError(f"budget {text!r}: {key}:{val} is not a number") from None
            if not x > 0 or x == float("inf"):
                raise PlannerError(f"budget {text!r}: {key} must be positive and finite, "
                                   f"got {val}")
            if key == "secs":
                kw[field_name] = x
            else:
                if x != int(x):
                    raise PlannerError(
                        f"budget {text!r}: {key} must be a whole number, got {val}")
                kw[field_name] = int(x)
        return cls(**kw)

    def __str__(self) -> str:
        parts = []
        if self.evaluations is not None:
            parts.append(f"evals:{self.evaluations}")
        if self.generations is not None:
            parts.append(f"gens:{self.generations}")
        if self.seconds is not None:
            parts.append(f"secs:{self.seconds:g}")
        if self.settle:
            return f"settle (at most {','.join(parts)})" if parts else "settle"
        return ",".join(parts) or "default"


@dataclass
class PlanResult:
    """What a planner returns: the plan, its predicted time and how it was found."""

    planner: str
    plan: Plan
    iteration_time: float
    schedule: str = "gpipe"
    evaluations: int = 0
    wall_time: float = 0.0
    seed: int | None = None
    start_time: float | None = None  # predicted T of the planner's own starting point
    history: Any = None  # a loop.History once Planner.plan returns
    settings: dict[str, Any] = field(default_factory=dict)
    #: One line when the run ended early: a signal, or a time budget that ended before the
    #: seeding did (None: the run ended as its budget says).
    stopped: str | None = None
    #: The SIGINT (``KeyboardInterrupt``) or SIGTERM (:class:`~umpipe_bench.errors.Terminated`)
    #: that ended the run (only with ``Planner.plan(partial=True)``; else it is raised).
    interrupted: KeyboardInterrupt | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "planner": self.planner,
            "iteration_time": self.iteration_time,
            "schedule": self.schedule,
            "mode": self.plan.mode,
            "evaluations": self.evaluations,
            "wall_time": self.wall_time,
            "seed": self.seed,
            "start_time": self.start_time,
            "settings": dict(self.settings),
            "plan": self.plan.to_dict(),
        }


class Planner:
    """Base class. Subclasses set ``name`` and implement :meth:`_plan`.

    Settings are constructor keyword arguments (recorded in :attr:`settings`, flattened into
    ``param_*`` leaderboard columns).
    """

    name: ClassVar[str] = "planner"
    default_budget: ClassVar[str] = "evals:20000"
    #: Whether a ``secs:`` budget limits the run (search planners); a one-shot construction
    #: (EDP, greedy, exact) ignores it and runs to its end.
    timed: ClassVar[bool] = False
    #: Declared settings ``name -> default``; a planner that declares them has them checked
    #: when it is built, so a misspelt setting fails before any work.
    defaults: ClassVar[dict[str, Any] | None] = None

    def __init__(self, **settings: Any) -> None:
        self.settings: dict[str, Any] = dict(settings)
        #: The resolved settings (defaults overlaid with the given ones, coerced, checked).
        self.config: dict[str, Any] = dict(settings)
        if self.defaults is not None:
            self.config = self.check_settings(
                resolve_settings(self.name, self.defaults, settings))

    def check_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Range checks beyond the types (hook); raise :class:`PlannerError`."""
        return settings

    def clock_for(self, budget: Budget, start: float | None = None, progress: bool = False,
                  reserve: float = 0.0) -> RunClock:
        """The clock of a run under ``budget`` started at ``start`` (a ``time.perf_counter()``
        value; default: now): its deadline is the budget's seconds when :attr:`timed`, less
        ``reserve`` (time left for what the caller does after the run)."""
        from ..evaluation.clock import RunClock

        return RunClock(budget.seconds if self.timed else None, start, progress=progress,
                        desc=self.name, evaluations=budget.evaluations,
                        generations=budget.generations, reserve=reserve)

    def budget_for(self, problem: Problem) -> str | Budget:
        """The budget :meth:`plan` uses on ``problem`` when given none (hook; here
        :attr:`default_budget` whatever the problem; a :class:`Budget` with ``settle`` for a
        planner with a stop rule of its own)."""
        return self.default_budget

    def plan(
        self,
        problem: Problem,
        *,
        mode: str = "stash",
        budget: str | Budget | None = None,
        seed: int | None = 0,
        progress: bool = False,
        clock: RunClock | None = None,
        partial: bool = False,
    ) -> PlanResult:
        """Run the planner.

        A ``secs:X`` budget ends the whole run, every phase of it, ``X`` seconds after it
        started (:mod:`..evaluation.clock`; planners with ``timed = False``, one-shot
        constructions, ignore it). ``clock``: the run's clock, when the caller started it
        earlier (:meth:`clock_for`; the command line starts it with the command); default: one
        started now. SIGINT or SIGTERM ends a search within a second: by default its
        ``KeyboardInterrupt`` is raised as usual; with ``partial`` the best plan so far is
        returned instead, with ``interrupted`` set.
        """
        from ..evaluation.clock import running

        if mode not in MODES:
            raise PlannerError(f"mode must be one of {MODES}, got {mode!r}")
        seed = check_seed(seed, f"planner {self.name!r}", PlannerError, allow_none=True)
        b = Budget.parse(budget if budget is not None else self.budget_for(problem))
        t0 = time.perf_counter()
        if clock is None:
            clock = self.clock_for(b, progress=progress)
        with running(clock):
            clock.tick()  # the progress bar shows from the start
            problem.digest(capacities=False)  # the plan's meta names it
            clock.tick()
            res = self._plan(problem, mode=mode, budget=b, seed=seed, progress=progress)
        res.wall_time = time.perf_counter() - t0
        res.seed = seed
        if res.interrupted is not None and not partial:
            raise res.interrupted
        return annotate_result(res, problem)

    def _plan(
        self, problem: Problem, *, mode: str, budget: Budget, seed: int | None, progress: bool
    ) -> PlanResult:
        raise NotImplementedError


def annotate_result(res: PlanResult, problem: Problem) -> PlanResult:
    """A result as :meth:`Planner.plan` returns it: a typed history, the plan validated and
    its meta filled in (schedule, planner, predicted time, problem, digest, seed, and
    ``interrupted``: ``SIGINT``/``SIGTERM`` when a signal ended the run)."""
    res.history = History.from_result(res.history, res.evaluations, res.wall_time,
                                      res.iteration_time)
    res.plan.validate(problem)
    meta = res.plan.meta
    meta.setdefault("schedule", res.schedule)
    meta.setdefault("planner", res.planner)
    meta.setdefault("predicted_time", res.iteration_time)
    meta.setdefault("problem", problem.name)
    meta.setdefault("problem_digest", problem.digest(capacities=False))
    meta.setdefault("seed", res.seed)
    if res.interrupted is not None:
        meta["interrupted"] = _signal_name(res.interrupted)
    return res


def _signal_name(exc: KeyboardInterrupt) -> str:
    """``SIGTERM`` for :class:`~umpipe_bench.errors.Terminated`, else ``SIGINT``."""
    import signal

    signum = getattr(exc, "signum", signal.SIGINT)
    return signal.Signals(signum).name
