"""Errors of the runtime: each names the stage (and microbatch) it concerns (docs/MODEL.md §5).

The classes live in :mod:`umpipe_bench.errors`; this module keeps the runtime's names.
``PlanRefused`` (a plan or problem that cannot be executed, refused before any process is
launched) is an :class:`~umpipe_bench.errors.InputError`; ``RuntimeFailure`` is the base of
the failures of a launched run, :class:`~umpipe_bench.errors.ExecutionError`.
"""

from __future__ import annotations

from ..errors import (
    ExecutionError,
    InputError,
    PeerLostError,
    RunTimeout,
    ShapeMismatchError,
    StageFailure,
)

__all__ = [
    "PeerLostError",
    "PlanRefused",
    "RunTimeout",
    "RuntimeFailure",
    "ShapeMismatchError",
    "StageFailure",
]

RuntimeFailure = ExecutionError
PlanRefused = InputError
