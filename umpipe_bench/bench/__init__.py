"""The benchmark suite: matrices (TOML) -> leaderboard (CSV) -> report (markdown + PNG); tuning.

Three registries joined by one runner, as nevergrad's benchmarks are: problems and planners come
from :mod:`umpipe_bench.registry`, matrices from TOML files (:mod:`.config`, with the built-in
``default`` and ``full``). :func:`run_matrix` runs the cells a leaderboard lacks; the report and
the tuner read what it wrote. Heavy libraries (matplotlib, optuna, pandas) are imported by the
modules that draw, tune or report, not here.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public names and the submodule that defines each: imported on first use (PEP 562), so that
#: importing one light submodule (e.g. :mod:`.heterogeneity` for the CLI's defaults) does not
#: pull in the planners through :mod:`.config`.
_EXPORTS = {
    "BenchConfig": "config", "Cell": "config", "ConfigError": "config",
    "builtin_config": "config", "load_config": "config", "parse_config": "config",
    "COLUMNS": "leaderboard", "KEY_COLUMNS": "leaderboard", "Leaderboard": "leaderboard",
    "read_rows": "leaderboard",
    "BenchError": "runner", "RunSummary": "runner", "run_cell": "runner",
    "run_matrix": "runner", "select_cells": "runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
