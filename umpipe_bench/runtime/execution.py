"""One ``execute`` run, importable: plans -> spec and predictions -> launch -> report rows.

This module owns what the command line and ``scripts/measure_real.py`` both need (docs/
ARCHITECTURE.md, "Runtime"): the labels of the plans, the :class:`RunSpec`, the simulator's
prediction, plan kind and per-stage busy time of every entry (a torch.pipelining entry takes
those of the plan it mirrors, its ``twins``), the launch into a run folder that is removed
again unless the run failed, and the rows of :func:`.report.summarize`. Pure: the launch
happens in ``torchrun`` processes; this process imports no torch.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..plan import parse_plan_spec
from ..problem import Problem
from .errors import StageFailure
from .job import PlannedRun, spec_for_problem
from .spec import RunSpec

__all__ = ["Execution", "launch_in", "plan_label", "prepare", "run_execution"]


def plan_label(spec: str) -> str:
    """``gpipe:4`` as written; a plan file by its stem (the leaderboard joins on it)."""
    if os.path.exists(spec):
        return os.path.splitext(os.path.basename(spec))[0]
    return spec


@dataclass
class Execution:
    """A prepared run: the spec the workers get and what the simulator predicts for it."""

    problem: Problem
    runs: list[PlannedRun]
    spec: RunSpec
    predicted: dict[str, float | None] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    peers: dict[str, str] = field(default_factory=dict)  # our label -> torch entry label
    busy: dict[str, list[float]] = field(default_factory=dict)

    def rows(self, result: dict[str, Any]) -> list[dict[str, Any]]:
        """Measured vs predicted rows of a worker result (:func:`.report.summarize`)."""
        from .report import summarize

        return summarize(result, self.predicted, kinds=self.kinds, peers=self.peers,
                         busy=self.busy)


def _planned_runs(problem: Problem, specs: Sequence[str], mode: str | None,
                  force_plan: bool = False) -> list[PlannedRun]:
    runs: list[PlannedRun] = []
    labels: set[str] = set()
    for text in specs:
        plan, schedule = parse_plan_spec(text, problem, mode, force=force_plan)
        label = plan_label(text)
        if plan.mode != "stash" and ":" in label and not os.path.exists(text):
            label = f"{label}:{plan.mode}"
        base, n = label, 2
        while label in labels:
            label, n = f"{base}#{n}", n + 1
        labels.add(label)
        runs.append(PlannedRun(label, plan, schedule))
    return runs


def prepare(problem: Problem, specs: Sequence[str], *, mode: str | None = None,
            peer: bool = True, force_plan: bool = False, **settings: Any) -> Execution:
    """Parse the plan specs (``gpipe:M``, ``1f1b:M`` or plan files), build the spec (which
    refuses what cannot run) and predict every entry (docs/MODEL.md §4). ``force_plan``: use
    a plan file made for another problem, with a warning (:meth:`Plan.check_problem`)."""
    from ..simulator import simulate

    runs = _planned_runs(problem, specs, mode, force_plan)
    spec = spec_for_problem(problem, runs, peer=peer, **settings)
    ex = Execution(problem, runs, spec)
    for r in runs:
        tl = simulate(problem, r.plan, r.schedule)
        ex.predicted[r.label] = tl.iteration_time
        ex.busy[r.label] = list(tl.busy)
        ex.kinds[r.label] = r.plan.describe()
    for e in spec.entries:
        if e.engine == "torch" and e.twins:
            ex.predicted[e.label] = ex.predicted[e.twins[0]]
            ex.kinds[e.label] = f"EDP({e.M})"
            for label in e.twins:
                ex.peers[label] = e.label
    return ex


def run_execution(ex: Execution, run_dir: str | os.PathLike[str] | None = None, *,
                  deadline_s: float = 3600.0, echo: bool = False,
                  extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Launch ``ex`` (one process per stage) and return rank 0's result.

    Without ``run_dir`` the run works in a temporary folder that is removed afterwards,
    except when the run fails: then its logs stay and the error names them.
    """
    return launch_in(ex.spec, run_dir, deadline_s=deadline_s, echo=echo, extra_env=extra_env)


def launch_in(spec: Any, run_dir: str | os.PathLike[str] | None = None, *,
              deadline_s: float = 3600.0, echo: bool = False,
              extra_env: dict[str, str] | None = None,
              stage_args: Sequence[str] = ()) -> dict[str, Any]:
    """:func:`.launcher.launch` in ``run_dir``, or in a temporary folder removed afterwards
    unless the run failed (its logs stay, and the error names them)."""
    from .launcher import launch

    kw: dict[str, Any] = {"deadline_s": deadline_s, "echo": echo, "extra_env": extra_env,
                          "stage_args": stage_args}
    if run_dir is not None:
        return launch(spec, run_dir, **kw)
    tmp = tempfile.mkdtemp(prefix="umpipe-execute-")
    try:
        result = launch(spec, tmp, **kw)
    except StageFailure:
        raise  # keep the logs the error points to
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    return result
