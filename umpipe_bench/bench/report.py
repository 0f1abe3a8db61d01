"""The report: a markdown leaderboard beside the paper's figures, and the plots.

Reads a leaderboard CSV (:mod:`.leaderboard`) and writes, into one folder:

* ``report.md``: the best plan per problem and mode against the best GPipe-EDP and
  1F1B-EDP plans, with the paper's headline figures beside ours (UMPIPE.md); every planner's
  mean speedup; search cost; predicted vs measured time where plans were executed; errors;
* ``speedup.png``, ``convergence.png``, ``gantt-<problem>.png`` (:mod:`.plots`).

Speedups are ``T_baseline / T - 1`` (training speed, as the paper reports it: +13.89 % means
13.89 % more iterations per second).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..problem import atomic_write_text

__all__ = ["PAPER", "REFERENCE_PLANNERS", "PaperFigure", "best_rows", "load_leaderboard",
           "paper_figure", "write_report"]


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


#: The paper's figures (../shared/reference/UMPIPE.md), keyed by model family / source.
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


def load_leaderboard(path: str | os.PathLike[str]) -> pd.DataFrame:
    """The leaderboard as a DataFrame (``error`` as "" when empty)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"no leaderboard at {str(path)!r}; run 'umpipe-bench bench' first (or pass --in)"
        )
    df = pd.read_csv(path, dtype={"error": str, "model": str, "T_measured": float,
                                  "memory_cap": str, "caps": str, "peak_memory": str,
                                  "memory_cap_bytes": str})
    df["error"] = df["error"].fillna("")
    df["model"] = df["model"].fillna("")
    # leaderboards written before memory caps existed: every row is uncapped
    df["memory_cap"] = df["memory_cap"].fillna("none") if "memory_cap" in df else "none"
    if "speedup_vs_best_edp" not in df:
        df["T_best_edp"] = df[["T_gpipe_edp", "T_1f1b_edp"]].min(axis=1)
        df["speedup_vs_best_edp"] = df["T_best_edp"] / df["T_pred"] - 1.0
    return df


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["error"] == "") & df["T_pred"].notna()]


#: Planners whose rows are the equal-microbatch references, not contenders.
REFERENCE_PLANNERS = ("gpipe", "1f1b")


#: What makes one comparison: a problem, a memory mode and a memory cap.
GROUP = ["problem", "mode", "memory_cap"]


def best_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Per (problem, mode, memory cap): the contender row (not a :data:`REFERENCE_PLANNERS`
    row) with the smallest predicted time (ties: first planner)."""
    ok = _ok(df)
    ok = ok[~ok["planner_name"].isin(REFERENCE_PLANNERS)]
    if ok.empty:
        return ok
    idx = ok.groupby(GROUP, sort=False)["T_pred"].idxmin()
    return ok.loc[idx.values].reset_index(drop=True)


def _pct(x: Any) -> str:
    return "" if pd.isna(x) else f"{x:+.2%}"


def _ms(x: Any) -> str:
    return "" if pd.isna(x) else f"{x * 1e3:.2f}"


def _edp(T: Any, M: Any) -> str:
    return "none fits" if pd.isna(T) else f"{_ms(T)} ({int(M)})"


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
    ok = _ok(df)
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


def planner_table(df: pd.DataFrame) -> pd.DataFrame:
    """Mean speedup vs the best EDP that fits (GPipe or 1F1B) of every planner, per problem,
    mode and memory cap (over seeds)."""
    ok = _ok(df)
    if ok.empty:
        return pd.DataFrame()
    t = ok.pivot_table(index=GROUP, columns="planner", values="speedup_vs_best_edp",
                       aggfunc="mean", sort=False)
    return t.map(_pct).reset_index()


def cost_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per planner: cells, errors, mean evaluations and wall time, mean speedups."""
    g = df.groupby("planner", sort=False)
    ok = _ok(df).groupby("planner", sort=False)
    out = pd.DataFrame({
        "cells": g.size(),
        "errors": g["error"].apply(lambda e: int((e != "").sum())),
        "mean evaluations": ok["evaluations"].mean().round(0),
        "mean wall time (s)": ok["wall_time"].mean().round(3),
        "mean vs GPipe": ok["speedup_vs_gpipe"].mean().map(_pct),
        "mean vs 1F1B": ok["speedup_vs_1f1b"].mean().map(_pct),
        "mean vs best EDP": ok["speedup_vs_best_edp"].mean().map(_pct),
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
) -> list[Path]:
    """Write ``report.md`` and the plots into ``out_dir`` (default: the CSV's folder).

    Returns the files written.
    """
    csv_path = Path(csv_path)
    out = Path(out_dir) if out_dir is not None else csv_path.parent
    df = load_leaderboard(csv_path)
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
    if n_err:
        e = df[df["error"] != ""][["problem", "planner", "mode", "memory_cap", "seed", "error"]]
        lines += ["## Errors", "", _md(e)]
    if images:
        lines += ["## Plots", ""]
        lines += [f"![{title}]({p.name})\n" for title, p in images]
    report = out / "report.md"
    atomic_write_text(report, "\n".join(lines))
    return [report, *written]
