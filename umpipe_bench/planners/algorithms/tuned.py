"""``tidgap-tuned``: TiDGAP with the settings an Optuna study found (``umpipe-bench tune``).

The settings come from a committed JSON file (``umpipe_bench/data/tuned-tidgap.json``, schema
``umpipe-tuned/1``, written by ``umpipe-bench tune --install``) that also records the study,
the training and held-out problems and how the tuned settings compared with the defaults
there. Settings given to the planner override the tuned ones. A missing or malformed file is a
:class:`PlannerError` that says how to make it.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from ...problem import Problem
from ..search.base import Budget, Planner, PlannerError, PlanResult

__all__ = ["TUNED_SCHEMA", "TunedTiDGAP", "load_tuned", "tuned_path"]

TUNED_SCHEMA = "umpipe-tuned/1"


def tuned_path(base: str) -> Path:
    """Where the committed tuned settings of planner ``base`` live."""
    return Path(str(resources.files("umpipe_bench").joinpath("data", f"tuned-{base}.json")))


def load_tuned(path: str | Path, base: str) -> dict[str, Any]:
    """The tuned settings of ``base`` from a settings file (checked)."""
    path = Path(path)
    hint = f"make it with 'umpipe-bench tune --planner {base} --install'"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlannerError(f"no tuned settings for {base!r} at {str(path)!r}; {hint}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise PlannerError(f"tuned settings {str(path)!r} unreadable ({exc}); {hint}") from None
    if not isinstance(data, dict) or data.get("schema") != TUNED_SCHEMA:
        raise PlannerError(f"tuned settings {str(path)!r}: expected schema {TUNED_SCHEMA!r}")
    if data.get("planner") != base or not isinstance(data.get("settings"), dict):
        raise PlannerError(
            f"tuned settings {str(path)!r} are for planner {data.get('planner')!r}, not "
            f"{base!r} (or lack 'settings'); {hint}"
        )
    return dict(data["settings"])


class TunedTiDGAP(Planner):
    """TiDGAP with tuned settings; any setting given here overrides the tuned value."""

    name = "tidgap-tuned"
    base: ClassVar[str] = "tidgap"
    timed = True  # the inner planner runs on this run's clock

    @classmethod
    def resume_inputs(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """The settings this planner would run with: the installed tuned ones under
        ``settings``. The bench hashes them into the resume key, so cells rerun after
        ``umpipe-bench tune --install`` (docs/ARCHITECTURE.md, "Bench")."""
        try:
            tuned = load_tuned(tuned_path(cls.base), cls.base)
        except PlannerError:
            return {"tuned": "unavailable"}  # the cell itself then fails, naming the file
        return {"tuned": {**tuned, **settings}}

    def __init__(self, **overrides: Any) -> None:
        from ...registry import get_planner

        tuned = load_tuned(tuned_path(self.base), self.base)
        self._inner = get_planner(self.base, **{**tuned, **overrides})
        self.default_budget = self._inner.default_budget  # type: ignore[misc]
        super().__init__(**self._inner.settings)

    def budget_for(self, problem: Problem) -> str:
        """The tuned planner's own default budget on ``problem`` (TiDGAP's grows with it)."""
        return self._inner.budget_for(problem)

    def _plan(self, problem: Problem, *, mode: str, budget: Budget, seed: int | None,
              progress: bool) -> PlanResult:
        from ..evaluation.clock import current

        # on the run's clock (its deadline, its phases, its progress bar); a signal comes
        # back as the inner result's ``interrupted``, which :meth:`Planner.plan` handles
        res = self._inner.plan(problem, mode=mode, budget=budget, seed=seed, progress=progress,
                               clock=current(), partial=True)
        res.planner = self.name
        res.plan.meta["planner"] = self.name
        return res
