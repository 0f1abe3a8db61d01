"""Every exception class of the package: one base, :class:`UmpipeError`, and a few kinds.

The kinds are chosen by what a caller does differently with them (docs/ARCHITECTURE.md,
"Errors"). :class:`UmpipeError` derives from :class:`ValueError`, so code that already catches
``ValueError`` around a problem, plan or budget keeps working. Modules keep their older names
(``ProblemError``, ``PlanError``, ``PlannerError``, ...) as aliases of these classes.

:class:`InputError`: a file, field, option or setting the user gave cannot be used (a problem,
plan, layout, matrix, tuned-settings or best-known file, a leaderboard CSV, a storage URL, a
budget, a schedule shape torch refuses, a plan the runtime refuses before launch, operation
lists that deadlock). The message names the file, field or stage and what was expected. The
command line prints it as one line and exits with code 2.

:class:`SolverMissing`: an :class:`InputError` raised when an optional solver (OR-Tools CP-SAT,
the extra ``certify``) is not installed. One line, exit code 2.

:class:`UnknownNameError`: a problem, planner, model or schedule name that no registry knows;
the message lists the valid names. Also a :class:`KeyError`, as a failed lookup has always
been. One line, exit code 2.

:class:`MemoryCapError`: no plan of the asked kind fits the memory cap; the message names
stage, bytes and cap. Not an :class:`InputError`, because the bench and the planners catch it
as a result ("none fits") where an invalid input is a failure. One line, exit code 2.

:class:`BudgetExhausted`: a batch would take an objective past its evaluation budget; nothing
of the batch was evaluated. The search loop that owns the budget stops on it. One line, exit
code 2 should it reach the command line. :class:`TimeUp` is its time-budget kind: the deadline
of a ``secs:`` budget passed between two compiled calls; the search loop stops on it and
returns the best plan evaluated so far.

:class:`ProfileError`: a profile cannot be taken as asked (model config, grouping, clock,
device, link measurement): an input or the machine. One line, exit code 2.

:class:`ExecutionError`: a launched distributed run failed (a stage died, a peer was lost, a
tensor arrived with the wrong shape, the deadline passed). Also a :class:`RuntimeError`. Not
the user's doing, so the command line does not shorten it: ``execute`` prints the failed stage
and its log and exits with code 1; anywhere else it keeps its traceback.

:class:`InternalError`: a result contradicts itself (a planner's reported time is not the
simulator's, its plan exceeds the cap it was given). A bug, also a :class:`RuntimeError`; the
bench records it as an error row, the command line keeps its traceback.

:class:`Terminated` is not an error: SIGTERM or SIGHUP, raised as a :class:`KeyboardInterrupt`
so that ``except Exception`` never swallows it and every clean-up path written for Ctrl-C
runs. The command line exits with ``128 + signal``.
"""

from __future__ import annotations

import signal

__all__ = [
    "BudgetExhausted",
    "ExecutionError",
    "InputError",
    "InternalError",
    "MemoryCapError",
    "PeerLostError",
    "ProfileError",
    "RunTimeout",
    "ShapeMismatchError",
    "SolverMissing",
    "StageFailure",
    "Terminated",
    "TimeUp",
    "UmpipeError",
    "UnknownNameError",
    "UserInputError",
]


class UmpipeError(ValueError):
    """Base class of every exception class the package defines (:class:`Terminated` aside);
    the message names the file, field or stage and what was expected."""


class InputError(UmpipeError):
    """A file, field, option or setting the user gave cannot be used."""


#: the name command-line code raises for a bad option, folder or path
UserInputError = InputError


class UnknownNameError(UmpipeError, KeyError):
    """A problem, planner, model or schedule name that no registry knows; the message lists
    the valid names. It is also a :class:`KeyError`, as a failed lookup has always been."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class SolverMissing(InputError):
    """An optional solver is not installed (OR-Tools CP-SAT, the extra ``certify``)."""


class MemoryCapError(UmpipeError):
    """No plan of the asked kind fits the memory cap; the message names stage, bytes, cap."""


class BudgetExhausted(UmpipeError):
    """A batch would take the objective past its evaluation budget; nothing was evaluated."""


class TimeUp(BudgetExhausted):
    """The deadline of a time budget passed (checked between two compiled calls); the search
    loop that owns the budget stops on it with the best plan evaluated so far."""


class ProfileError(UmpipeError):
    """A profile cannot be taken as asked (model config, grouping, clock, device, link)."""


class ExecutionError(UmpipeError, RuntimeError):
    """A launched distributed run failed; each subclass names the stage it concerns
    (docs/MODEL.md §5)."""


class ShapeMismatchError(ExecutionError):
    """A received tensor's header disagrees with what the plan says must arrive.

    Raised by the receiving stage before the payload is received, so gloo never half-fills or
    overruns a buffer (docs/MODEL.md §5).
    """

    def __init__(self, stage: int, what: str, expected: str, got: str) -> None:
        self.stage = stage
        super().__init__(f"stage {stage}: {what}: expected {expected}, got {got}")


class PeerLostError(ExecutionError):
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


class StageFailure(ExecutionError):
    """A launched run failed; ``stage`` is the stage that failed first (None if unknown)."""

    def __init__(self, stage: int | None, message: str, log_path: str | None = None) -> None:
        self.stage = stage
        self.log_path = log_path
        where = f"stage {stage} failed" if stage is not None else "run failed"
        tail = f" (log: {log_path})" if log_path else ""
        super().__init__(f"{where}: {message}{tail}")


class RunTimeout(StageFailure):
    """The whole run exceeded the launcher's deadline and was killed."""


class InternalError(UmpipeError, RuntimeError):
    """A result contradicts itself (e.g. a planner's T disagrees with the simulator): a bug."""


class Terminated(KeyboardInterrupt):
    """The process got SIGTERM or SIGHUP; a :class:`KeyboardInterrupt` so every clean-up path
    written for Ctrl-C runs for it too."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"terminated by {signal.Signals(signum).name}")
