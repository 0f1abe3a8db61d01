"""The ``threads`` setting of the population evaluators: an integer, or ``auto``.

Both evaluators split a call's rows over threads (:func:`..evaluation.evaluator.run_row_blocks`; the
numba kernels release the GIL, results are bit-identical for any split). A thread pays only
when the call is big enough, and how big depends on the kernel (results/perf/search.md,
section 3, 1-thread time over 2-thread time): for the GPipe schedule's evaluator 0.67x at
``N*S*B`` = 57k (gpt1-14, N = 256) and 1.38-1.87x from 131k up (vgg16 N = 256; gpt1-14
N = 1024; sim-s32-b256-s0); for the schedule family's evaluator, whose plans cost more each,
1.24x at 16k already (sim-s8-b64-s0, N = 32) and 1.5-1.9x from 32k up (the pair descent's
batches of one stage's moves, a few hundred plans, are there). ``auto`` therefore uses two
threads (at most the cores the process may use, :func:`usable_cores`) for a call whose work
``N*S*B`` is at least :data:`AUTO_WORK` (the GPipe evaluator) or :data:`FAMILY_AUTO_WORK`
(the family's), and one below.
"""

from __future__ import annotations

from typing import Any

from ..evaluation.cores import usable_cores
from ..evaluation.family import FamilyEvaluator
from .settings import auto_or

__all__ = ["AUTO_THREADS", "AUTO_WORK", "FAMILY_AUTO_WORK", "apply_threads", "parse_threads"]

#: Work ``N*S*B`` of one GPipe-evaluator call from which ``auto`` splits it over threads.
AUTO_WORK = 100_000
#: The same for the schedule family's evaluator.
FAMILY_AUTO_WORK = 16_000
#: Threads ``auto`` uses for a big call (at most :func:`usable_cores`).
AUTO_THREADS = 2


def parse_threads(planner: str, value: Any) -> int | str:
    """``"auto"`` or a positive integer (``2``, ``"2"``); anything else is a PlannerError."""
    return auto_or(planner, "threads", value, int, lambda n: n >= 1, "an integer >= 1")


def apply_threads(evaluator: Any, setting: int | str, S: int, B: int) -> None:
    """Set ``evaluator.threads`` (and, for ``auto``, its ``MIN_ROWS_PER_THREAD``, so that a
    call of ``N`` rows splits exactly when ``N*S*B`` reaches the evaluator's threshold:
    :data:`FAMILY_AUTO_WORK` for the schedule family's, else :data:`AUTO_WORK`)."""
    if evaluator is None:
        return
    work = FAMILY_AUTO_WORK if isinstance(evaluator, FamilyEvaluator) else AUTO_WORK
    if setting != "auto":
        evaluator.threads = int(setting)
        return
    k = max(1, min(AUTO_THREADS, usable_cores()))
    evaluator.threads = k
    evaluator.MIN_ROWS_PER_THREAD = max(1, -(-work // (k * S * B)))
