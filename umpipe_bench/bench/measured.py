"""Measured times: join what ``umpipe-bench execute --csv results/real/X.csv`` wrote.

The runtime writes one row per executed plan (``umpipe_bench.runtime.report.COLUMNS``): the
problem, a plan label (a plan file's stem, so ``plans/<cell>.json`` executed as such carries
the cell's slug), engine, schedule, mode, the simulator's ``predicted_time`` and the measured
median. A leaderboard row takes the measured median of the same problem, mode, schedule and
predicted time (the same plan on the same problem version predicts the same T to the last
digit; a run made before the problem was re-profiled predicts another and is left out),
preferring the run of its own plan file. Only this project's engine (``umpipe``) counts; rows
with an error are ignored; when several runs match, the latest wins. ``model_error`` is
``(T_measured - T_pred) / T_pred``, as the runtime defines it.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["MEASURED_COLUMNS", "MeasuredIndex"]

MEASURED_COLUMNS = ("T_measured", "model_error", "measured_in")


def _float(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


class MeasuredIndex:
    """The usable rows of every CSV in a ``real/`` folder."""

    def __init__(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self.rows = sorted(rows, key=lambda r: str(r.get("date", "")))

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> MeasuredIndex:
        rows: list[dict[str, Any]] = []
        base = Path(folder)
        for path in sorted(base.glob("*.csv")) if base.is_dir() else []:
            with path.open(newline="", encoding="utf-8") as fh:
                for r in csv.DictReader(fh):
                    if r.get("error") or r.get("engine", "umpipe") != "umpipe":
                        continue
                    if _float(r.get("measured_median")) is None:
                        continue
                    r["_file"] = f"{base.name}/{path.name}"
                    rows.append(r)
        return cls(rows)

    def __bool__(self) -> bool:
        return bool(self.rows)

    def match(self, row: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The latest measured row of the same problem, mode, schedule and predicted time,
        preferring the run of this row's own plan file; None when there is none."""
        T = _float(row.get("T_pred"))
        if T is None:
            return None
        stem = Path(str(row.get("plan_file") or "")).stem
        same = [r for r in self.rows
                if r.get("problem") == row.get("problem") and r.get("mode") == row.get("mode")
                and r.get("schedule") == row.get("schedule")
                and math.isclose(_float(r.get("predicted_time")) or -1.0, T, rel_tol=1e-6)]
        own = [r for r in same if stem and r.get("plan") == stem]
        return (own or same or [None])[-1]

    def columns(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The measured columns for a leaderboard row (empty strings when not executed)."""
        m = self.match(row) if not row.get("error") else None
        if m is None:
            return dict.fromkeys(MEASURED_COLUMNS, "")
        meas = float(m["measured_median"])
        T = float(row["T_pred"])
        return {"T_measured": meas, "model_error": (meas - T) / T, "measured_in": m["_file"]}

    def refresh(self, rows: Sequence[MutableMapping[str, Any]]) -> bool:
        """Re-join every row in place; True when anything changed."""
        changed = False
        for row in rows:
            new = self.columns(row)
            if any(str(row.get(k, "")) != str(v) for k, v in new.items()):
                row.update(new)
                changed = True
        return changed
