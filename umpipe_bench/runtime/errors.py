"""Errors of the runtime: each names the stage (and microbatch) it concerns (docs/MODEL.md §5).
"""

from __future__ import annotations

from ..errors import UmpipeError

__all__ = [
    "PeerLostError",
    "PlanRefused",
    "RunTimeout",
    "RuntimeFailure",
    "ShapeMismatchError",
    "StageFailure",
]


class RuntimeFailure(RuntimeError):
    """Base class of the runtime's errors."""


class PlanRefused(RuntimeFailure, UmpipeError):
    """A plan (or problem) that cannot be executed, refused before any process is launched."""


class ShapeMismatchError(RuntimeFailure):
    """A received tensor's header disagrees with what the plan says must arrive.

    Raised by the receiving stage before the payload is received, so gloo never half-fills or
    overruns a buffer (docs/MODEL.md §5).
    """

    def __init__(self, stage: int, what: str, expected: str, got: str) -> None:
        self.stage = stage
        super().__init__(f"stage {stage}: {what}: expected {expected}, got {got}")


class PeerLostError(RuntimeFailure):
    """A point-to-point transfer with a neighbouring stage failed or timed out.

    This is usually a *consequence* of another stage's failure; the launcher prefers to name
    the stage that failed first.
    """

    def __init__(self, stage: int, peer: int, what: str, cause: BaseException) -> None:
        self.stage = stage
        self.peer = peer
        super().__init__(
            f"stage {stage}: lost stage {peer} while {what}: {type(cause).__name__}: "
            f"{str(cause).strip().splitlines()[0] if str(cause).strip() else ''}"
        )


class StageFailure(RuntimeFailure):
    """A launched run failed; ``stage`` is the stage that failed first (None if unknown)."""

    def __init__(self, stage: int | None, message: str, log_path: str | None = None) -> None:
        self.stage = stage
        self.log_path = log_path
        where = f"stage {stage} failed" if stage is not None else "run failed"
        tail = f" (log: {log_path})" if log_path else ""
        super().__init__(f"{where}: {message}{tail}")


class RunTimeout(StageFailure):
    """The whole run exceeded the launcher's deadline and was killed."""
