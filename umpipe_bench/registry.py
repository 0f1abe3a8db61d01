"""Problem and planner registries, filled by entry points.

* group ``umpipe_bench.problems``: each entry is a zero-argument callable returning a mapping
  ``name -> zero-argument callable returning a Problem``;
* group ``umpipe_bench.planners``: each entry is a planner class, keyed by the entry's name.

The core never imports ``umpipe_bench.baselines`` or ``umpipe_bench.problems``: they plug in
here, as third-party
planners and problem sets can. Lookups are case-insensitive. A provider's mapping may also
resolve names it does not list (open names such as ``sim-s5-b10-s3``, docs/SIMNETS.md): it then
has a ``resolve(name)`` method returning a loader or None, and a ``patterns`` tuple. An unknown
problem raises a ``KeyError`` naming those patterns and the closest listed names; an unknown
planner one that lists the valid planners.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from .errors import UnknownNameError
from .problem import Problem

__all__ = [
    "get_planner",
    "get_planner_class",
    "get_problem",
    "planner_names",
    "problem_loaders",
    "problem_names",
    "problem_patterns",
    "register_planner",
]

PROBLEM_GROUP = "umpipe_bench.problems"
PLANNER_GROUP = "umpipe_bench.planners"

_extra_planners: dict[str, type] = {}


@cache
def _providers() -> tuple[tuple[str, Any], ...]:
    return tuple((ep.name, ep.load()()) for ep in
                 sorted(entry_points(group=PROBLEM_GROUP), key=lambda e: e.name))


@cache
def problem_loaders() -> dict[str, Callable[[], Problem]]:
    """All listed problems, ``name -> loader`` (loaders are cheap and lazy)."""
    out: dict[str, Callable[[], Problem]] = {}
    for ep_name, table in _providers():
        for name, loader in table.items():
            if name.lower() in out:
                raise RuntimeError(f"problem {name!r} registered twice (entry point {ep_name!r})")
            out[name.lower()] = loader
    return out


def problem_patterns() -> list[str]:
    """The name patterns of the providers' open names (e.g. ``sim-s{S}-b{B}-s{seed}``)."""
    return [p for _, table in _providers() for p in getattr(table, "patterns", ())]


def _problem_loader(name: str) -> Callable[[], Problem]:
    key = name.lower()
    table = problem_loaders()
    if key in table:
        return table[key]
    for _, provider_table in _providers():
        resolve = getattr(provider_table, "resolve", None)
        loader = resolve(key) if resolve is not None else None
        if loader is not None:
            return loader
    close = difflib.get_close_matches(key, list(table), n=5, cutoff=0.5)
    raise UnknownNameError(
        f"unknown problem {name!r}; names: {', '.join(problem_patterns())}, a committed profile "
        f"or a problem file (.json); closest: {', '.join(close) or 'none'} ('umpipe-bench "
        "problems' lists them all)")


def problem_names() -> list[str]:
    return sorted(problem_loaders())


def _lookup(kind: str, table: dict[str, Any], name: str) -> Any:
    key = name.lower()
    if key not in table:
        raise UnknownNameError(
            f"unknown {kind} {name!r}; valid {kind}s: {', '.join(sorted(table))}")
    return table[key]


@cache
def _load_problem(name: str) -> Problem:
    return _problem_loader(name)()


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
