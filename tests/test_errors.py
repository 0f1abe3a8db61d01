"""One exception base: every exception class of the package lives in ``umpipe_bench.errors``
and derives from ``UmpipeError`` (docs/ARCHITECTURE.md, "Errors").

Two sweeps: importing every module finds each exception class reachable at module level
(aliases included); parsing every source file finds ``class`` statements anywhere, so a class
nested in a function or in a module whose optional dependency is missing is caught too. The
older names stay importable from their modules as aliases, and the command line turns a user's
error into one line and exit code 2 while a failed run or a bug keeps its traceback.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import umpipe_bench
from umpipe_bench import errors
from umpipe_bench.errors import (
    BudgetExhausted,
    ExecutionError,
    InputError,
    InternalError,
    MemoryCapError,
    PeerLostError,
    ProfileError,
    RunTimeout,
    ShapeMismatchError,
    StageFailure,
    Terminated,
    UmpipeError,
    UnknownNameError,
)

PACKAGE = Path(umpipe_bench.__file__).parent

#: every older name, where it is imported from, and the class it now names
OLD_NAMES = {
    ("umpipe_bench.errors", "UserInputError"): InputError,
    ("umpipe_bench.problem", "ProblemError"): InputError,
    ("umpipe_bench.plan", "PlanError"): InputError,
    ("umpipe_bench.layout", "LayoutError"): InputError,
    ("umpipe_bench.simulator", "SimulationError"): InputError,
    ("umpipe_bench.devsim", "DevSimError"): InputError,
    ("umpipe_bench.chunkplan", "ChunkPlanError"): InputError,
    ("umpipe_bench.torch_schedules.orders", "ScheduleShapeError"): InputError,
    ("umpipe_bench.torch_schedules.orders", "ScheduleNameError"): UnknownNameError,
    ("umpipe_bench.planners.search.errors", "PlannerError"): InputError,
    ("umpipe_bench.planners.search.base", "PlannerError"): InputError,
    ("umpipe_bench.bench.config", "ConfigError"): InputError,
    ("umpipe_bench.bench.best_known", "BestKnownError"): InputError,
    ("umpipe_bench.bench.leaderboard", "LeaderboardError"): InputError,
    ("umpipe_bench.bench.storage", "StorageError"): InputError,
    ("umpipe_bench.bench.tune", "TuneError"): InputError,
    ("umpipe_bench.bench.runner", "BenchError"): InternalError,
    ("umpipe_bench.memory", "MemoryCapError"): MemoryCapError,
    ("umpipe_bench.api", "BudgetExhausted"): BudgetExhausted,
    ("umpipe_bench.runtime.errors", "PlanRefused"): InputError,
    ("umpipe_bench.runtime.errors", "RuntimeFailure"): ExecutionError,
    ("umpipe_bench.runtime.errors", "StageFailure"): StageFailure,
    ("umpipe_bench.runtime.errors", "RunTimeout"): RunTimeout,
    ("umpipe_bench.runtime.errors", "PeerLostError"): PeerLostError,
    ("umpipe_bench.runtime.errors", "ShapeMismatchError"): ShapeMismatchError,
    ("umpipe_bench.runtime.lifetime", "Terminated"): Terminated,
}


def _package_exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in the package and reachable from a module's globals."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(umpipe_bench.__path__, "umpipe_bench."):
        if info.name.rpartition(".")[2] == "__main__":
            continue  # importing it runs the command line
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue  # an optional dependency this environment lacks: the source sweep covers it
        for obj in vars(module).values():
            if (inspect.isclass(obj) and issubclass(obj, BaseException)
                    and obj.__module__.partition(".")[0] == "umpipe_bench"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_every_exception_class_is_defined_in_errors():
    found = _package_exception_classes()
    assert "umpipe_bench.errors.UmpipeError" in found  # the sweep reaches the package
    assert sorted(n for n, c in found.items() if c.__module__ != "umpipe_bench.errors") == []


def test_every_exception_class_derives_from_umpipe_error():
    """...except :class:`Terminated`, a signal that must stay outside ``Exception`` so that no
    ``except Exception`` swallows it (errors.py's docstring)."""
    found = _package_exception_classes()
    others = sorted(c.__name__ for c in found.values() if not issubclass(c, UmpipeError))
    assert others == ["Terminated"]
    assert issubclass(Terminated, KeyboardInterrupt) and not issubclass(Terminated, Exception)


def _exception_names() -> set[str]:
    """Names that denote an exception class: the builtins and every name the package binds to
    one of its exception classes (aliases included)."""
    names = {n for n, v in vars(builtins).items()
             if inspect.isclass(v) and issubclass(v, BaseException)}
    names.update(name for _, name in OLD_NAMES)
    names.update(n for n, v in vars(errors).items()
                 if inspect.isclass(v) and issubclass(v, BaseException))
    return names


def test_no_class_statement_outside_errors_derives_from_an_exception():
    names = _exception_names()
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")
                     for b in node.bases}
            if bases & names:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert offenders == []


@pytest.mark.parametrize("where", sorted(OLD_NAMES), ids=lambda w: f"{w[0]}.{w[1]}")
def test_older_names_stay_importable_as_aliases(where):
    module, name = where
    assert getattr(importlib.import_module(module), name) is OLD_NAMES[where]


def test_the_kinds_a_caller_tells_apart_stay_apart():
    """A planner that catches its own refusal (``PlannerError``, an input error) must not turn
    "nothing fits the cap" or "the budget is spent" into a refusal; a lookup is a KeyError; a
    failed run and a bug are RuntimeErrors, not input errors."""
    for kind in (MemoryCapError, BudgetExhausted, UnknownNameError, ProfileError,
                 ExecutionError, InternalError):
        assert issubclass(kind, UmpipeError) and not issubclass(kind, InputError), kind
    assert issubclass(UnknownNameError, KeyError) and issubclass(UmpipeError, ValueError)
    for kind in (ExecutionError, InternalError):
        assert issubclass(kind, RuntimeError)
    for kind in (StageFailure, RunTimeout, PeerLostError, ShapeMismatchError):
        assert issubclass(kind, ExecutionError)
    assert issubclass(RunTimeout, StageFailure)


def _fail_with(monkeypatch, exc: BaseException) -> None:
    import umpipe_bench.cli.problems as problems

    def run(args):
        raise exc

    monkeypatch.setattr(problems, "run", run)


@pytest.mark.parametrize("exc", [InputError("a bad field"), UnknownNameError("no such name"),
                                 MemoryCapError("nothing fits"), ProfileError("no clock")],
                         ids=lambda e: type(e).__name__)
def test_the_command_line_prints_a_users_error_as_one_line(monkeypatch, capsys, exc):
    from umpipe_bench.cli import main

    _fail_with(monkeypatch, exc)
    assert main(["problems"]) == 2
    assert capsys.readouterr().err == f"umpipe-bench problems: error: {exc}\n"


@pytest.mark.parametrize("exc", [StageFailure(1, "died", "log.txt"),
                                 PeerLostError(0, 1, "sending", OSError("reset")),
                                 InternalError("T disagrees")],
                         ids=lambda e: type(e).__name__)
def test_the_command_line_keeps_the_traceback_of_a_failed_run_or_a_bug(monkeypatch, exc):
    from umpipe_bench.cli import main

    _fail_with(monkeypatch, exc)
    with pytest.raises(type(exc)) as info:
        main(["problems"])
    assert info.value is exc
