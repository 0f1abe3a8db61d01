"""The equal-microbatch references every row is compared with: best GPipe-EDP and 1F1B-EDP.

For one problem and memory mode, the best EDP(M) plan that fits the problem's memory caps, over
all ``M in 1..B``, under the gpipe schedule and under 1f1b (docs/MODEL.md §2,
docs/SCHEDULES.md), as GPipe and PipeDream-flush would run it with the best microbatch
count: :func:`umpipe_bench.planners.evaluation.reference.edp_reference`, the one the planners
and the ``plan`` CLI compare with.

Results are cached per (problem, mode) in memory and in a JSON file beside the leaderboard,
keyed by a hash of the problem's content, so a resumed run does not search again and a
re-profiled problem is never compared with a stale baseline.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..planners.evaluation.reference import EdpBaseline, edp_reference
from ..problem import Problem, atomic_write_text

__all__ = ["BaselineCache", "EdpBaseline", "TorchBaseline", "best_edp", "best_torch",
           "problem_digest"]


def best_edp(problem: Problem, mode: str, schedule: str) -> EdpBaseline:
    """The best EDP(M) that fits, over all M, under ``schedule`` (ties: the smaller M)."""
    return edp_reference(problem, mode).of(schedule)


def problem_digest(problem: Problem, split: bool = False) -> str:
    """:meth:`Problem.digest <umpipe_bench.problem.Problem.digest>`: a hash of everything
    that determines the costs of our plans (``split``: of the whole file)."""
    return problem.digest(split)


@dataclass(frozen=True)
class TorchBaseline:
    """The fastest schedule torch ships on a problem's own stages (one stage per device), at
    its best M that fits memory (all None when none fits or none can run)."""

    mode: str
    schedule: str | None
    M: int | None
    T: float | None


def best_torch(problem: Problem, mode: str) -> TorchBaseline:
    """The fastest of torch's schedules that run the problem's stages as they are, one per
    device (``D = S``, one chunk per device: gpipe, 1f1b, interleaved-1f1b, looped-bfs and, with
    split-backward costs, zb1p, all at ``v = 1``), over every M torch accepts (a divisor of
    ``B``), within the problem's memory caps (docs/TORCH-SCHEDULES.md §6)."""
    from ..memory import capacities
    from ..torch_schedules.best import best_row, schedule_table

    rows = schedule_table(problem, problem.S, mode, capacities(problem), vs=(1,))
    best = best_row(rows)
    if best is None or best.choice is None:
        return TorchBaseline(mode, None, None, None)
    return TorchBaseline(mode, best.schedule, best.choice.M, float(best.choice.T))


class BaselineCache:
    """Best GPipe-EDP and 1F1B-EDP per (problem, mode), computed once and kept on disk."""

    SCHEDULES = ("gpipe", "1f1b")

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._data: dict[str, dict[str, Any]] = {}
        if self.path is not None and self.path.exists():
            try:
                self._data = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                self._data = {}  # a cache: recompute rather than fail

    def get(self, problem: Problem, mode: str) -> dict[str, EdpBaseline]:
        """``{"gpipe": EdpBaseline, "1f1b": EdpBaseline}`` for this problem and mode."""
        key = f"{problem.name}|{mode}|{problem_digest(problem)}"
        entry = self._data.get(key)
        if entry is None:
            ref = edp_reference(problem, mode)
            entry = {s: asdict(ref.of(s)) for s in self.SCHEDULES}
            self._data[key] = entry
            if self.path is not None:
                atomic_write_text(self.path, json.dumps(self._data, indent=1, sort_keys=True))
        return {s: EdpBaseline(**entry[s]) for s in self.SCHEDULES}

    def torch(self, problem: Problem, mode: str) -> TorchBaseline:
        """:func:`best_torch` for this problem and mode, cached like :meth:`get` (keyed by the
        whole file's digest: the zero-bubble schedules read the split-backward tables)."""
        key = f"{problem.name}|{mode}|torch|{problem_digest(problem, split=True)}"
        entry = self._data.get(key)
        if entry is None:
            entry = asdict(best_torch(problem, mode))
            self._data[key] = entry
            if self.path is not None:
                atomic_write_text(self.path, json.dumps(self._data, indent=1, sort_keys=True))
        return TorchBaseline(**entry)
