"""The benchmark suite: matrices (TOML) -> leaderboard (CSV) -> report (markdown + PNG); tuning.

Three registries joined by one runner, as nevergrad's benchmarks are: problems and planners come
from :mod:`umpipe_bench.registry`, matrices from TOML files (:mod:`.config`, with the built-in
``default`` and ``full``). :func:`run_matrix` runs the cells a leaderboard lacks; the report and
the tuner read what it wrote. Heavy libraries (matplotlib, optuna, pandas) are imported by the
modules that draw, tune or report, not here.
"""

from __future__ import annotations

from .config import BenchConfig, Cell, ConfigError, builtin_config, load_config, parse_config
from .leaderboard import COLUMNS, KEY_COLUMNS, Leaderboard, read_rows
from .runner import BenchError, RunSummary, run_cell, run_matrix, select_cells

__all__ = [
    "COLUMNS",
    "KEY_COLUMNS",
    "BenchConfig",
    "BenchError",
    "Cell",
    "ConfigError",
    "Leaderboard",
    "RunSummary",
    "builtin_config",
    "load_config",
    "parse_config",
    "read_rows",
    "run_cell",
    "run_matrix",
    "select_cells",
]
