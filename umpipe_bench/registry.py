"""Problem and planner registries, filled by entry points (STYLE.md habit 3).

* group ``umpipe_bench.problems``: each entry is a zero-argument callable returning a mapping
  ``name -> zero-argument callable returning a Problem``;
* group ``umpipe_bench.planners``: each entry is a planner class, keyed by the entry's name.

The core never imports ``baselines/`` or ``problems/``: they plug in here, as third-party
planners and problem sets can. Lookups are case-insensitive; an unknown name raises a
``KeyError`` that lists the valid names.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from .problem import Problem

__all__ = [
    "get_planner",
    "get_planner_class",
    "get_problem",
    "planner_names",
    "problem_loaders",
    "problem_names",
    "register_planner",
]

PROBLEM_GROUP = "umpipe_bench.problems"
PLANNER_GROUP = "umpipe_bench.planners"

_extra_planners: dict[str, type] = {}


@cache
def problem_loaders() -> dict[str, Callable[[], Problem]]:
    """All registered problems, ``name -> loader`` (loaders are cheap and lazy)."""
    out: dict[str, Callable[[], Problem]] = {}
    for ep in sorted(entry_points(group=PROBLEM_GROUP), key=lambda e: e.name):
        provider = ep.load()
        for name, loader in provider().items():
            if name.lower() in out:
                raise RuntimeError(f"problem {name!r} registered twice (entry point {ep.name!r})")
            out[name.lower()] = loader
    return out


def problem_names() -> list[str]:
    return sorted(problem_loaders())


def _lookup(kind: str, table: dict[str, Any], name: str) -> Any:
    key = name.lower()
    if key not in table:
        raise KeyError(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(sorted(table))}")
    return table[key]


@cache
def _load_problem(name: str) -> Problem:
    return _lookup("problem", problem_loaders(), name)()


def get_problem(name: str) -> Problem:
    """A registered problem by name, or a problem file when ``name`` is a path to one."""
    if name.endswith(".json"):
        return Problem.load(name)
    return _load_problem(name.lower())


@cache
def _planner_classes() -> dict[str, type]:
    out: dict[str, type] = {}
    for ep in entry_points(group=PLANNER_GROUP):
        out[ep.name.lower()] = ep.load()
    return out


def register_planner(name: str, cls: type) -> None:
    """Register a planner class at run time (e.g. a tuned variant read from a file)."""
    _extra_planners[name.lower()] = cls


def planner_names() -> list[str]:
    return sorted({*_planner_classes(), *_extra_planners})


def get_planner_class(name: str) -> type:
    return _lookup("planner", {**_planner_classes(), **_extra_planners}, name)


def get_planner(name: str, **settings: Any) -> Any:
    """Instantiate a registered planner with its settings."""
    return get_planner_class(name)(**settings)
