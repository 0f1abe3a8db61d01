"""The report: a markdown leaderboard beside the paper's figures, and the plots.

Reads a leaderboard CSV (:mod:`.leaderboard`) and writes, into one folder:

* ``report.md``: the best plan per problem and mode against the best GPipe-EDP and
  1F1B-EDP plans, with the paper's headline figures beside ours (docs/PAPER.md); every
  planner's
  mean speedup; search cost; predicted vs measured time where plans were executed; errors;
* ``speedup.png``, ``convergence.png``, ``gantt-<problem>.png`` (:mod:`.plots`).

Speedups are ``T_baseline / T - 1`` (training speed, as the paper reports it: +13.89 % means
13.89 % more iterations per second).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from ..problem import atomic_write_text
from .tables import (
    PAPER,
    REFERENCE_PLANNERS,
    PaperFigure,
    best_rows,
    load_leaderboard,
    ok_rows,
    paper_figure,
)

__all__ = ["PAPER", "REFERENCE_PLANNERS", "PaperFigure", "best_rows", "load_leaderboard",
           "paper_figure", "write_report"]  # the first six re-exported from .tables


def _pct(x: Any) -> str:
    return "" if pd.isna(x) else f"{x:+.2%}"


def _ms(x: Any) -> str:
    return "" if pd.isna(x) else f"{x * 1e3:.2f}"


def headline_table(df: pd.DataFrame) -> pd.DataFrame:
    """The markdown headline: best plan per problem and mode, the paper's figure beside it."""
    ok = ok_rows(df)
    rows = []
    for _, r in best_rows(df).iterrows():
        same = ok[(ok["problem"] == r["problem"]) & (ok["mode"] == r["mode"])
                  & (ok["planner"] == r["planner"])]
        paper = paper_figure(r)
        rows.append({
            "problem": r["problem"], "S": int(r["S"]), "B": int(r["B"]), "mode": r["mode"],
            "best planner": r["planner"],
            "plan": r["plan_kind"],
            "T (ms)": _ms(r["T_pred"]),
            "GPipe-EDP (ms, M)": f"{_ms(r['T_gpipe_edp'])} ({int(r['M_gpipe_edp'])})",
            "1F1B-EDP (ms, M)": f"{_ms(r['T_1f1b_edp'])} ({int(r['M_1f1b_edp'])})",
            "vs GPipe": _pct(r["speedup_vs_gpipe"]),
            "vs 1F1B": _pct(r["speedup_vs_1f1b"]),
            "planner mean vs GPipe (seeds)": (
                f"{_pct(same['speedup_vs_gpipe'].mean())} ({len(same)})"),
            "paper vs GPipe": paper.text("gpipe") if paper else "",
            "paper vs PipeDream": paper.text("pipedream") if paper else "",
            "paper workload": paper.workload if paper else "",
        })
    return pd.DataFrame(rows)


def planner_table(df: pd.DataFrame) -> pd.DataFrame:
    """Mean speedup vs GPipe-EDP of every planner, per problem and mode (over seeds)."""
    ok = ok_rows(df)
    if ok.empty:
        return pd.DataFrame()
    t = ok.pivot_table(index=["problem", "mode"], columns="planner", values="speedup_vs_gpipe",
                       aggfunc="mean", sort=False)
    return t.map(_pct).reset_index()


def cost_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per planner: cells, errors, mean evaluations and wall time, mean speedups."""
    g = df.groupby("planner", sort=False)
    ok = ok_rows(df).groupby("planner", sort=False)
    out = pd.DataFrame({
        "cells": g.size(),
        "errors": g["error"].apply(lambda e: int((e != "").sum())),
        "mean evaluations": ok["evaluations"].mean().round(0),
        "mean wall time (s)": ok["wall_time"].mean().round(3),
        "mean vs GPipe": ok["speedup_vs_gpipe"].mean().map(_pct),
        "mean vs 1F1B": ok["speedup_vs_1f1b"].mean().map(_pct),
    })
    return out.reset_index()


def measured_table(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose plan was executed: predicted vs measured time."""
    m = df[df["T_measured"].notna()] if "T_measured" in df else df.iloc[0:0]
    return pd.DataFrame({
        "problem": m["problem"], "planner": m["planner"], "mode": m["mode"],
        "seed": m["seed"], "T pred (ms)": m["T_pred"].map(_ms),
        "T measured (ms)": m["T_measured"].map(_ms), "model error": m["model_error"].map(_pct),
        "from": m["measured_in"],
    })


def _md(df: pd.DataFrame) -> str:
    if df.empty:
        return "_none_\n"
    return df.to_markdown(index=False) + "\n"


def write_report(
    csv_path: str | os.PathLike[str] = "results/leaderboard.csv",
    out_dir: str | os.PathLike[str] | None = None,
    *,
    plots: bool = True,
    command: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[Path]:
    """Write ``report.md`` and the plots into ``out_dir`` (default: the CSV's folder).

    Returns the files written. Malformed leaderboard lines are left out, each passed to
    ``warn`` and counted in the report (without ``warn`` they are an error).
    """
    csv_path = Path(csv_path)
    out = Path(out_dir) if out_dir is not None else csv_path.parent
    skipped: list[str] = []

    def note(msg: str) -> None:
        skipped.append(msg)
        if warn is not None:
            warn(msg)

    df = load_leaderboard(csv_path, warn=note if warn is not None else None)
    written: list[Path] = []
    images: list[tuple[str, Path]] = []
    if plots:
        from . import plots as P

        images = P.draw_all(df, csv_path.parent, out)
        written += [p for _, p in images]
    revs = ", ".join(sorted(df["git_rev"].dropna().astype(str).unique())) or "unknown"
    dates = df["timestamp"].dropna().astype(str)
    n_err = int((df["error"] != "").sum())
    lines = [
        "# UMPIPE benchmark report",
        "",
        f"From `{csv_path}`: {len(df)} rows, {df['problem'].nunique()} problems, "
        f"{df['planner'].nunique()} planners, {n_err} error rows; git {revs}; "
        f"{dates.min() if len(dates) else '?'} to {dates.max() if len(dates) else '?'}.",
        *([f"Made by `{command}`."] if command else []),
        *([f"**{len(skipped)} malformed line(s) of the file were left out** (a truncated or "
           "hand-edited row): " + "; ".join(skipped)] if skipped else []),
        "",
        "Times are the simulator's predicted iteration time (docs/MODEL.md §4). Speedup = "
        "T_baseline / T − 1 (more iterations per second), against the best equal-microbatch "
        "plan EDP(M) over all M of the same problem and memory mode under the GPipe schedule "
        "and under 1F1B (PipeDream-flush). The paper's figures (UMPIPE, TPDS 2025, abstract) "
        "were measured on its own hardware and partitions: they are the bar, not the same "
        "experiment. The contenders plan for the GPipe (flush) schedule (1F1B of unequal "
        "partitions is not defined yet, docs/MODEL.md §3), so 'vs 1F1B' sets an unequal GPipe plan "
        "against the best equal 1F1B plan.",
        "",
        "## Best plan per problem (any planner but the GPipe/1F1B references)",
        "",
        _md(headline_table(df)),
        "## Every planner: mean speedup vs GPipe-EDP (over seeds)",
        "",
        _md(planner_table(df)),
        "## Search cost",
        "",
        _md(cost_table(df)),
        "## Predicted vs measured (plans executed with `umpipe-bench execute`)",
        "",
        _md(measured_table(df)),
    ]
    if n_err:
        e = df[df["error"] != ""][["problem", "planner", "mode", "seed", "error"]]
        lines += ["## Errors", "", _md(e)]
    if images:
        lines += ["## Plots", ""]
        lines += [f"![{title}]({p.name})\n" for title, p in images]
    report = out / "report.md"
    atomic_write_text(report, "\n".join(lines))
    return [report, *written]
