"""The report: a markdown leaderboard beside the paper's figures, and the plots.

Reads a leaderboard CSV (:mod:`.leaderboard`) and writes, into one folder:

* ``report.md``: the best plan per problem and mode against the best GPipe-EDP and
  1F1B-EDP plans, with the paper's headline figures beside ours (docs/PAPER.md); every
  planner's
  mean speedup; search cost; predicted vs measured time where plans were executed; errors;
* the anytime statistics (:mod:`.anytime`): targets reached, fixed-budget gaps to the best
  known value with bootstrap 95 % intervals, average ranks, and ``ecdf.png``;
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
    GROUP,
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


def _edp(T: Any, M: Any) -> str:
    return "none fits" if pd.isna(T) else f"{_ms(T)} ({int(M)})"


def _gap(r: pd.Series) -> float:
    """How far the row's T is above the problem's proven lower bound (docs/CERTIFY.md)."""
    from .best_known import proven_bound

    lb = proven_bound(str(r["problem"]), str(r["mode"]))
    return float("nan") if lb is None else float(r["T_pred"]) / lb - 1.0


def _gap_known(r: pd.Series) -> float:
    """How far the row's T is above the best known value of the capped family."""
    from .best_known import value_of

    v = value_of(str(r["problem"]), str(r["mode"]))
    return float("nan") if v is None else float(r["T_pred"]) / v - 1.0


def _certified(gap: float) -> str:
    """``yes`` when the gap to the proven bound is at most 1 % (docs/CERTIFY.md)."""
    from .best_known import CERTIFIED_GAP

    return "" if pd.isna(gap) else ("yes" if gap <= CERTIFIED_GAP else "no")


def _peak_share(r: pd.Series) -> str:
    """The largest per-stage ratio of peak memory to memory cap, as a percentage."""
    peaks, caps = r.get("peak_memory"), r.get("memory_cap_bytes")
    if not isinstance(peaks, str) or not isinstance(caps, str) or not peaks or not caps:
        return ""
    share = max(float(p) / float(c) for p, c in zip(peaks.split(";"), caps.split(";")))
    return f"{share:.0%}"


def _plan_text(r: pd.Series) -> str:
    caps = r.get("caps")
    if isinstance(caps, str) and caps:
        return f"{r['plan_kind'].split(' caps=')[0]}, caps {caps.replace(';', ',')}"
    return f"{r['plan_kind']}, {r['schedule']}"


def headline_table(df: pd.DataFrame, capped: bool = False) -> pd.DataFrame:
    """The markdown headline: best plan per problem and mode, the paper's figure beside it
    (uncapped rows; ``capped=True``: the rows under a memory cap, with their peaks)."""
    ok = ok_rows(df)
    rows = []
    for _, r in best_rows(df).iterrows():
        if (r["memory_cap"] != "none") != capped:
            continue
        same = ok[(ok["problem"] == r["problem"]) & (ok["mode"] == r["mode"])
                  & (ok["memory_cap"] == r["memory_cap"]) & (ok["planner"] == r["planner"])]
        row = {"problem": r["problem"], "S": int(r["S"]), "B": int(r["B"]), "mode": r["mode"]}
        if capped:
            row["memory cap"] = r["memory_cap"]
            row["peak / cap (worst stage)"] = _peak_share(r)
        row.update({
            "best planner": r["planner"],
            "plan": _plan_text(r),
            "T (ms)": _ms(r["T_pred"]),
            "GPipe-EDP (ms, M)": _edp(r["T_gpipe_edp"], r["M_gpipe_edp"]),
            "1F1B-EDP (ms, M)": _edp(r["T_1f1b_edp"], r["M_1f1b_edp"]),
            "vs GPipe": _pct(r["speedup_vs_gpipe"]),
            "vs 1F1B": _pct(r["speedup_vs_1f1b"]),
            "vs best EDP": _pct(r["speedup_vs_best_edp"]),
            "best torch schedule (ms, M)": _torch(r),
            "vs best torch": _pct(r.get("speedup_vs_best_torch")),
            "gap to best known": _pct(_gap_known(r)) if not capped else "",
            "gap to bound": _pct(_gap(r)),
            "certified (gap <= 1 %)": _certified(_gap(r)),
            "planner mean vs best EDP (seeds)": (
                f"{_pct(same['speedup_vs_best_edp'].mean())} ({len(same)})"),
        })
        if not capped:
            paper = paper_figure(r)
            row.update({
                "paper vs GPipe": paper.text("gpipe") if paper else "",
                "paper vs PipeDream": paper.text("pipedream") if paper else "",
                "paper workload": paper.workload if paper else "",
            })
        rows.append(row)
    return pd.DataFrame(rows)


def _torch(r: Any) -> str:
    """``schedule ms (M)`` of the best torch schedule, or empty (older leaderboards, none fits)."""
    name = r.get("best_torch_schedule")
    if not isinstance(name, str) or not name:
        return ""
    return f"{name} {_edp(r['T_best_torch'], r['M_best_torch'])}"


def planner_table(df: pd.DataFrame) -> pd.DataFrame:
    """Mean speedup vs the best EDP that fits (GPipe or 1F1B) of every planner, per problem,
    mode and memory cap (over seeds)."""
    ok = ok_rows(df)
    if ok.empty:
        return pd.DataFrame()
    t = ok.pivot_table(index=GROUP, columns="planner", values="speedup_vs_best_edp",
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
        "mean vs best EDP": ok["speedup_vs_best_edp"].mean().map(_pct),
        **({"mean vs best torch": ok["speedup_vs_best_torch"].mean().map(_pct)}
           if "speedup_vs_best_torch" in df else {}),
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
        "plan EDP(M) over all M that fits memory, of the same problem and memory mode, under "
        "the GPipe schedule, under 1F1B (PipeDream-flush), and the better of the two ('best "
        "EDP'). Contenders plan over the whole schedule family from GPipe to 1F1B (per-stage "
        "in-flight caps, docs/SCHEDULES.md) where they can; 'plan' names the caps. The "
        "paper's figures (docs/PAPER.md) were measured on its own hardware and partitions: "
        "they are the bar, not the same experiment.",
        "",
        "## Best plan per problem (any planner but the GPipe/1F1B references)",
        "",
        _md(headline_table(df)),
        "## Under a memory cap",
        "",
        "A cap of P % gives every stage its static bytes (parameters, gradients, optimizer "
        "state) plus P % of the activation bytes the best GPipe-EDP plan keeps there in stash "
        "mode (GPipe keeps every sample's, so no GPipe-EDP plan fits below 100 %). A returned "
        "plan whose peak exceeds the cap on any stage is an error row; the EDP baselines are "
        "the best M that fits ('none fits' when no M does).",
        "",
        _md(headline_table(df, capped=True)),
        "## Every planner: mean speedup vs the best EDP that fits (over seeds)",
        "",
        _md(planner_table(df)),
        "## Search cost",
        "",
        _md(cost_table(df)),
        "## Predicted vs measured (plans executed with `umpipe-bench execute`)",
        "",
        _md(measured_table(df)),
    ]
    from .anytime import anytime_section

    any_lines, any_images = anytime_section(df, csv_path.parent, out if plots else None)
    lines += any_lines
    images += any_images
    written += [p for _, p in any_images]
    if n_err:
        e = df[df["error"] != ""][["problem", "planner", "mode", "memory_cap", "seed", "error"]]
        lines += ["## Errors", "", _md(e)]
    if images:
        lines += ["## Plots", ""]
        lines += [f"![{title}]({p.name})\n" for title, p in images]
    report = out / "report.md"
    atomic_write_text(report, "\n".join(lines))
    return [report, *written]
