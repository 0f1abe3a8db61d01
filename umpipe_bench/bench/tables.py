"""The leaderboard as a pandas DataFrame, the selections the report and the plots share, and
the paper's headline figures (docs/PAPER.md).

:mod:`.report` (markdown) and :mod:`.plots` (pictures) both read from here; neither imports
the other's internals, so the import graph has no cycle (report -> plots -> tables).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..planners.evaluation.reference import EdpBaseline, EdpReference
from .leaderboard import COLUMNS, LeaderboardError, scan_rows

__all__ = ["GROUP", "PAPER", "REFERENCE_PLANNERS", "PaperFigure", "best_rows",
           "load_leaderboard", "ok_rows", "paper_figure", "row_edp_reference"]

#: Columns added with the schedule family and memory caps (docs/SCHEDULES.md): a leaderboard
#: written before them is read as uncapped, its best EDP the better of the two it has.
LATER_COLUMNS = ("caps", "memory_cap", "memory_cap_bytes", "peak_memory_max", "peak_memory",
                 "T_best_edp", "speedup_vs_best_edp", "infeasible")


@dataclass(frozen=True)
class PaperFigure:
    """A headline figure of UMPIPE (TPDS 2025, abstract): speedup vs GPipe and PipeDream."""

    workload: str
    vs_gpipe: float  # fraction: 0.1389 = +13.89 %
    vs_pipedream: float
    at_least: bool = False

    def text(self, which: str) -> str:
        v = self.vs_gpipe if which == "gpipe" else self.vs_pipedream
        return f"{'≥ ' if self.at_least else ''}+{v:.2%}"


#: The paper's figures (docs/PAPER.md, Table 1), keyed by model family / source.
PAPER: dict[str, PaperFigure] = {
    "gpt1": PaperFigure("GPT1-14", 0.1389, 0.1109),
    "vgg16": PaperFigure("VGG16", 0.1711, 0.0796),
    "synthetic": PaperFigure("simulation networks", 1.70, 1.00, at_least=True),
}


def paper_figure(row: pd.Series | dict[str, Any]) -> PaperFigure | None:
    """The paper's figure for a problem's workload family (model name, else source)."""
    model = str(row.get("model") or "").lower()
    for key in ("gpt1", "vgg16"):
        if model.startswith(key) or str(row.get("problem", "")).lower().startswith(key):
            return PAPER[key]
    if str(row.get("source", "")) == "synthetic":
        return PAPER["synthetic"]
    return None


def load_leaderboard(path: str | os.PathLike[str],
                     warn: Callable[[str], None] | None = None) -> pd.DataFrame:
    """The leaderboard as a DataFrame (``error`` as "" when empty).

    A file that is missing, a folder, or lacks leaderboard columns is a
    :class:`~.leaderboard.LeaderboardError` naming them; malformed lines (a truncated row)
    are left out and each one is passed to ``warn`` (default: raise instead).
    """
    path = Path(path)
    if not path.exists():
        raise LeaderboardError(
            f"no leaderboard at {str(path)!r}; run 'umpipe-bench bench' first (or pass --in)"
        )
    rows, bad = scan_rows(path)
    if bad and warn is None:
        raise LeaderboardError(f"{bad[0]}; repair or remove the line")
    for msg in bad:
        warn(msg)  # type: ignore[misc]
    with path.open(newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh), [])
    missing = [c for c in COLUMNS if c not in header and c not in LATER_COLUMNS]
    if missing:
        raise LeaderboardError(f"{str(path)!r}: not a leaderboard written by 'umpipe-bench "
                               f"bench' (missing columns {missing})")
    buf = io.StringIO()
    pd.DataFrame(rows, columns=header).to_csv(buf, index=False)
    buf.seek(0)
    text = {c: str for c in ("error", "model", "memory_cap", "caps", "peak_memory",
                             "memory_cap_bytes", "infeasible")}
    df = pd.read_csv(buf, dtype={**text, "T_measured": float})
    _check_values(df, path)
    for c in ("error", "model", "caps", "peak_memory", "memory_cap_bytes", "infeasible"):
        df[c] = df[c].fillna("") if c in df else ""
    df["memory_cap"] = df["memory_cap"].fillna("none") if "memory_cap" in df else "none"
    if "speedup_vs_best_edp" not in df:
        df["T_best_edp"] = df[["T_gpipe_edp", "T_1f1b_edp"]].min(axis=1)
        df["speedup_vs_best_edp"] = df["T_best_edp"] / df["T_pred"] - 1.0
    return df


def row_edp_reference(r: pd.Series) -> EdpReference:
    """The EDP comparison a leaderboard row was written with (its ``T_``/``M_`` ``gpipe_edp``
    and ``1f1b_edp`` columns; a missing value is a reference that does not fit)."""

    def base(schedule: str) -> EdpBaseline:
        T, M = r[f"T_{schedule}_edp"], r[f"M_{schedule}_edp"]
        if pd.isna(T) or pd.isna(M):
            return EdpBaseline(schedule, str(r["mode"]), None, None)
        return EdpBaseline(schedule, str(r["mode"]), float(T), int(M))

    return EdpReference(base("gpipe"), base("1f1b"))


#: Columns that hold numbers (empty where a row has none): times, counts, speedups.
NUMERIC_COLUMNS = ("S", "B", "seed", "T_pred", "T_start", "evaluations", "wall_time",
                   "peak_memory_max", "T_gpipe_edp", "M_gpipe_edp", "T_1f1b_edp", "M_1f1b_edp",
                   "T_best_edp", "T_best_torch", "M_best_torch", "speedup_vs_gpipe",
                   "speedup_vs_1f1b", "speedup_vs_best_edp", "speedup_vs_best_torch",
                   "T_measured", "model_error")
#: Of those, the ones that may be +inf: a planner's starting plan that does not fit the memory
#: cap counts as infinitely slow (docs/SCHEDULES.md §4).
INF_COLUMNS = ("T_start",)
#: Of those, the ones that count things (whole numbers).
WHOLE_COLUMNS = ("S", "B", "seed", "evaluations", "M_gpipe_edp", "M_1f1b_edp", "M_best_torch")


def _check_values(df: pd.DataFrame, path: Path) -> None:
    """Every numeric cell is empty or a finite number (whole where it counts; +inf allowed in
    :data:`INF_COLUMNS`), every mode a memory mode; otherwise a :class:`LeaderboardError`
    naming the file, line and column."""
    import numpy as np

    from ..plan import MODES

    def fail(col: str, i: int, value: object, expected: str) -> None:
        raise LeaderboardError(f"{str(path)!r} line {i + 2}, column {col!r}: expected "
                               f"{expected}, got {value!r}")

    for col in NUMERIC_COLUMNS:
        if col not in df:
            continue
        raw = df[col]
        num = pd.to_numeric(raw, errors="coerce")
        finite = np.isfinite(num.fillna(0.0))
        if col in INF_COLUMNS:
            finite |= num == np.inf
        bad = (raw.notna() & num.isna()) | ~finite
        if col in WHOLE_COLUMNS:
            bad |= num.notna() & (num.fillna(0.0) % 1 != 0)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            fail(col, i, raw.iloc[i], "a whole number" if col in WHOLE_COLUMNS
                 else "a finite number or inf" if col in INF_COLUMNS else "a finite number")
        df[col] = num
    if "mode" in df:
        bad = ~df["mode"].isin(MODES)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            fail("mode", i, df["mode"].iloc[i], f"one of {', '.join(MODES)}")


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["error"] == "") & df["T_pred"].notna()]


#: Planners whose rows are the equal-microbatch references, not contenders.
REFERENCE_PLANNERS = ("gpipe", "1f1b")


#: What makes one comparison: a problem, a memory mode and a memory cap.
GROUP = ["problem", "mode", "memory_cap"]


def best_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Per (problem, mode, memory cap): the contender row (not a :data:`REFERENCE_PLANNERS`
    row) with the smallest predicted time (ties: first planner)."""
    ok = ok_rows(df)
    ok = ok[~ok["planner_name"].isin(REFERENCE_PLANNERS)]
    if ok.empty:
        return ok
    idx = ok.groupby(GROUP, sort=False)["T_pred"].idxmin()
    return ok.loc[idx.values].reset_index(drop=True)
