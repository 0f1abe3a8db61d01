"""Registry look-ups for the command line: an unknown name is a user error, not a bug.

The registry raises a plain ``KeyError`` for an unknown name; these wrappers check the name
first and raise :class:`~umpipe_bench.errors.UnknownNameError` (one line, exit code 2; see
docs/ARCHITECTURE.md, "Errors"), so a ``KeyError`` from anywhere else stays a bug.
"""

from __future__ import annotations

from typing import Any

from ..errors import UnknownNameError

__all__ = ["planner_class", "problem"]


def _check(kind: str, name: str, names: list[str]) -> None:
    if name.lower() not in {n.lower() for n in names}:
        raise UnknownNameError(f"unknown {kind} {name!r}; valid {kind}s: {', '.join(names)}")


def problem(name: str) -> Any:
    """A registered problem, or a problem file when ``name`` ends in ``.json``."""
    from ..registry import get_problem, problem_names

    if not name.endswith(".json"):
        _check("problem", name, problem_names())
    return get_problem(name)


def planner_class(name: str) -> type:
    """A registered planner class."""
    from ..registry import get_planner_class, planner_names

    _check("planner", name, planner_names())
    return get_planner_class(name)
