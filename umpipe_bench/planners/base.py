"""The planner interface: ``plan(problem, *, mode, budget, seed) -> PlanResult`` (STYLE.md 4).

Every planner optimizes the same simulator (MODEL.md §4); none has a cost model of its own. The
public :meth:`Planner.plan` validates its arguments, times the run and calls the private
:meth:`Planner._plan` hook that each planner overrides.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import UmpipeError
from ..plan import MODES, Plan
from ..problem import Problem

__all__ = ["Budget", "PlanResult", "Planner", "PlannerError"]


class PlannerError(UmpipeError):
    """A planner was asked for something it cannot do (bad budget, problem too large...)."""


@dataclass(frozen=True)
class Budget:
    """How long a planner may search: any of evaluations, generations, seconds (first hit stops).

    Parsed from strings such as ``"evals:20000"``, ``"gens:50"``, ``"secs:10"`` or a combination
    ``"evals:20000,secs:30"``.
    """

    evaluations: int | None = None
    generations: int | None = None
    seconds: float | None = None

    _RE: ClassVar[re.Pattern[str]] = re.compile(r"^(evals|gens|secs):([0-9.eE+]+)$")

    @classmethod
    def parse(cls, text: str | Budget | None) -> Budget:
        if text is None:
            return cls()
        if isinstance(text, Budget):
            return text
        kw: dict[str, Any] = {}
        for part in str(text).split(","):
            m = cls._RE.match(part.strip())
            if not m:
                raise PlannerError(
                    f"budget {text!r}: expected comma-separated evals:N, gens:N or secs:X"
                )
            key, val = m.groups()
            if key == "evals":
                kw["evaluations"] = int(float(val))
            elif key == "gens":
                kw["generations"] = int(float(val))
            else:
                kw["seconds"] = float(val)
        b = cls(**kw)
        for name, v in (("evals", b.evaluations), ("gens", b.generations), ("secs", b.seconds)):
            if v is not None and v <= 0:
                raise PlannerError(f"budget {name} must be positive, got {v}")
        return b

    def __str__(self) -> str:
        parts = []
        if self.evaluations is not None:
            parts.append(f"evals:{self.evaluations}")
        if self.generations is not None:
            parts.append(f"gens:{self.generations}")
        if self.seconds is not None:
            parts.append(f"secs:{self.seconds:g}")
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
    history: Any = None  # DEAP Logbook for GAs; list of dicts otherwise
    settings: dict[str, Any] = field(default_factory=dict)

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

    def __init__(self, **settings: Any) -> None:
        self.settings: dict[str, Any] = dict(settings)

    def plan(
        self,
        problem: Problem,
        *,
        mode: str = "stash",
        budget: str | Budget | None = None,
        seed: int | None = 0,
        progress: bool = False,
    ) -> PlanResult:
        if mode not in MODES:
            raise PlannerError(f"mode must be one of {MODES}, got {mode!r}")
        b = Budget.parse(budget if budget is not None else self.default_budget)
        t0 = time.perf_counter()
        res = self._plan(problem, mode=mode, budget=b, seed=seed, progress=progress)
        res.wall_time = time.perf_counter() - t0
        res.seed = seed
        res.plan.validate(problem)
        res.plan.meta.setdefault("schedule", res.schedule)
        res.plan.meta.setdefault("planner", res.planner)
        res.plan.meta.setdefault("predicted_time", res.iteration_time)
        res.plan.meta.setdefault("problem", problem.name)
        res.plan.meta.setdefault("seed", seed)
        return res

    def _plan(
        self, problem: Problem, *, mode: str, budget: Budget, seed: int | None, progress: bool
    ) -> PlanResult:
        raise NotImplementedError
