"""Registry look-ups for the command line: an unknown name is a user error, not a bug.

The registry itself raises :class:`~umpipe_bench.errors.UnknownNameError` (one line, exit code
2; see docs/ARCHITECTURE.md, "Errors") with the valid names, or for problems the name patterns
and the closest listed names; a ``KeyError`` from anywhere else stays a bug.
"""

from __future__ import annotations

from typing import Any

__all__ = ["planner_class", "problem"]


def problem(name: str) -> Any:
    """A registered problem (any name of the open patterns), or a problem file (``.json``)."""
    from ..registry import get_problem

    return get_problem(name)


def planner_class(name: str) -> type:
    """A registered planner class."""
    from ..registry import get_planner_class

    return get_planner_class(name)
