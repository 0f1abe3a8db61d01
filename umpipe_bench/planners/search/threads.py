"""The ``threads`` setting of the population evaluators: an integer, or ``auto``.

Both evaluators split a call's rows over threads (:func:`..evaluation.evaluator.run_row_blocks`; the
numba kernels release the GIL, results are bit-identical for any split). A thread pays only
when the call is big enough: measured on a quiet 2-core machine (results/perf/search.md,
section 3), 1-thread/2-thread was 0.67x at ``N*S*B`` = 57k (gpt1-14, N = 256) and 1.38-1.87x
from 131k up (vgg16 N = 256; gpt1-14 N = 1024; sim-s32-b256-s0). ``auto`` therefore uses
two threads (at most the machine's cores) for a call whose work ``N*S*B`` is at least
:data:`AUTO_WORK`, and one below.
"""

from __future__ import annotations

import os
from typing import Any

from .settings import auto_or

__all__ = ["AUTO_THREADS", "AUTO_WORK", "apply_threads", "parse_threads"]

#: Work ``N*S*B`` of one evaluator call from which ``auto`` splits it over threads.
AUTO_WORK = 100_000
#: Threads ``auto`` uses for a big call (at most the machine's cores).
AUTO_THREADS = 2


def parse_threads(planner: str, value: Any) -> int | str:
    """``"auto"`` or a positive integer (``2``, ``"2"``); anything else is a PlannerError."""
    return auto_or(planner, "threads", value, int, lambda n: n >= 1, "an integer >= 1")


def apply_threads(evaluator: Any, setting: int | str, S: int, B: int) -> None:
    """Set ``evaluator.threads`` (and, for ``auto``, its ``MIN_ROWS_PER_THREAD``, so that a
    call of ``N`` rows splits exactly when ``N*S*B >= AUTO_WORK``)."""
    if evaluator is None:
        return
    if setting != "auto":
        evaluator.threads = int(setting)
        return
    k = max(1, min(AUTO_THREADS, os.cpu_count() or 1))
    evaluator.threads = k
    evaluator.MIN_ROWS_PER_THREAD = max(1, -(-AUTO_WORK // (k * S * B)))
