"""The leaderboard: long-format CSV, one row per (problem, planner, seed, mode, budget).

The fixed columns are :data:`COLUMNS` (pinned by a schema test); each planner setting adds a
``param_<name>`` column after them (STYLE.md habit 7, as optuna's ``params_x``). A failed cell
is a row whose ``error`` column is set, not a crashed batch (as nevergrad's benchmarks do).

The file is rewritten whole through a temporary file and ``os.replace`` after every cell, so a
reader, or a run killed at any instant, only ever sees a complete file of complete rows.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..problem import atomic_write_text

__all__ = [
    "COLUMNS",
    "KEY_COLUMNS",
    "PARAM_PREFIX",
    "VERSION_PACKAGES",
    "Leaderboard",
    "flatten_settings",
    "read_rows",
    "row_key",
]

PARAM_PREFIX = "param_"

#: Packages whose versions every row records (read from metadata: nothing is imported).
VERSION_PACKAGES = ("numpy", "deap", "optuna", "torch", "umpipe-bench")

#: The fixed columns, in file order. ``param_*`` columns follow, sorted.
COLUMNS: tuple[str, ...] = (
    # the problem (problem_digest: a hash of its costs; a row of another version is redone)
    "problem", "S", "B", "source", "device", "model", "problem_digest",
    # the cell (problem, planner, seed, mode, budget, settings_hash form its key)
    "planner", "planner_name", "seed", "mode", "budget", "settings_hash",
    # the result, predicted by the simulator (docs/MODEL.md §4); times in seconds
    "schedule", "plan_kind", "caps", "T_pred", "T_start", "evaluations", "wall_time",
    # memory (docs/SCHEDULES.md §4): the cell's cap (spec and bytes), the plan's peaks
    "memory_cap", "memory_cap_bytes", "peak_memory_max", "peak_memory",
    # the equal-microbatch baselines of the same problem, mode and cap: best EDP(M) that fits
    # (empty when no M fits), and the better of the two
    "T_gpipe_edp", "M_gpipe_edp", "T_1f1b_edp", "M_1f1b_edp", "T_best_edp",
    # T_baseline / T_pred - 1 (0.1389 = +13.89 %)
    "speedup_vs_gpipe", "speedup_vs_1f1b", "speedup_vs_best_edp",
    # real execution, joined from results/real/*.csv where the plan was executed
    "T_measured", "model_error", "measured_in",
    # files (relative to the leaderboard's folder)
    "plan_file", "history_file",
    # a failing cell is a row; a planner with no plan that fits the memory cap is not a
    # failure: "infeasible" says why (stage, bytes, cap) and T_pred stays empty
    "error", "infeasible",
    # provenance
    "python", *(f"v_{p.replace('-', '_')}" for p in VERSION_PACKAGES), "git_rev", "timestamp",
)

KEY_COLUMNS = ("problem", "planner", "seed", "mode", "budget", "settings_hash")


def flatten_settings(settings: Mapping[str, Any], prefix: str = PARAM_PREFIX) -> dict[str, Any]:
    """``{"pop": 64, "init": {"edp": 0.5}}`` -> ``{"param_pop": 64, "param_init.edp": 0.5}``."""
    out: dict[str, Any] = {}
    for k, v in settings.items():
        if isinstance(v, Mapping):
            out.update(flatten_settings(v, f"{prefix}{k}."))
        elif isinstance(v, list | tuple):
            out[f"{prefix}{k}"] = ";".join(map(str, v))
        else:
            out[f"{prefix}{k}"] = v
    return out


def row_key(row: Mapping[str, Any]) -> tuple[str, str, int, str, str, str]:
    """The resume key of a row, as :meth:`Cell.key` builds it for a cell."""
    return (str(row["problem"]), str(row["planner"]), int(row["seed"]), str(row["mode"]),
            str(row["budget"]), str(row["settings_hash"]))


def _cell_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return str(v)


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The rows of a leaderboard file (empty when it does not exist)."""
    p = Path(path)
    if not p.exists():
        return []
    with p.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


class Leaderboard:
    """The rows of one leaderboard file, kept in memory and written whole after each change."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.rows: list[dict[str, Any]] = read_rows(self.path)
        missing = [c for c in KEY_COLUMNS if self.rows and c not in self.rows[0]]
        if missing:
            raise ValueError(
                f"{self.path}: not a leaderboard (missing columns {missing}); choose another "
                "--out folder or move the file away"
            )

    def done(
        self, digests: Mapping[str, str | None], *, with_errors: bool = True
    ) -> set[tuple[str, str, int, str, str, str]]:
        """Keys of finished cells: rows computed on the problem version ``digests[problem]``
        (error rows count unless ``with_errors`` is False)."""
        return {row_key(r) for r in self.rows
                if (with_errors or not r.get("error"))
                and r.get("problem_digest") == digests.get(str(r["problem"]))}

    def add(self, row: Mapping[str, Any]) -> None:
        """Add or replace the row with the same key, then rewrite the file atomically."""
        key = row_key(row)
        self.rows = [r for r in self.rows if row_key(r) != key]
        self.rows.append(dict(row))
        self.write()

    def columns(self) -> list[str]:
        params = sorted({c for r in self.rows for c in r if c.startswith(PARAM_PREFIX)})
        extra = sorted({c for r in self.rows for c in r} - set(COLUMNS) - set(params))
        return [*COLUMNS, *extra, *params]

    def write(self) -> None:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns(), lineterminator="\n")
        w.writeheader()
        for r in self.rows:
            w.writerow({k: _cell_text(v) for k, v in r.items()})
        atomic_write_text(self.path, buf.getvalue())

    def __len__(self) -> int:
        return len(self.rows)
