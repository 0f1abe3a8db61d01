"""The report's pictures (matplotlib, Agg backend; every file written atomically).

* ``speedup.png``: per problem, the best plan's speedup over the best GPipe-EDP and 1F1B-EDP
  plans (one bar per memory mode) beside the paper's figure for that workload;
* ``convergence.png``: best-so-far speedup vs GPipe-EDP of every searching planner by
  evaluations and by wall time, from the histories the runner saved (thin lines: seeds;
  thick: their mean);
* ``gantt-<problem>.png``: the best plan's timeline above the best GPipe-EDP plan's, on one
  time axis (:func:`umpipe_bench.trace.save_gantt`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..files import atomic_output
from .tables import best_rows, ok_rows, paper_figure, row_edp_reference

__all__ = ["convergence_curve", "draw_all", "draw_convergence", "draw_gantts", "draw_speedup"]

MODE_COLORS = {"stash": "#4C72B0", "recompute": "#DD8452"}
PAPER_COLOR = "#9a9a9a"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    try:
        with atomic_output(path, parents=True) as tmp:
            fig.savefig(tmp, dpi=130, format="png")
    finally:
        _plt().close(fig)
    return path


def draw_speedup(df: pd.DataFrame, path: Path) -> Path | None:
    """Grouped bars: per problem, best speedup per mode, and the paper's figure (uncapped)."""
    best = best_rows(df)
    best = best[best["memory_cap"] == "none"]
    if best.empty:
        return None
    plt = _plt()
    problems = list(dict.fromkeys(best["problem"]))
    modes = [m for m in ("stash", "recompute") if m in set(best["mode"])]
    width = 0.8 / (len(modes) + 1)
    fig, axes = plt.subplots(2, 1, figsize=(max(9.0, 1.2 * len(problems) + 3), 8.5),
                             sharex=True, sharey=True)
    x = np.arange(len(problems))
    for ax, which, title in ((axes[0], "gpipe", "vs best GPipe-EDP"),
                             (axes[1], "1f1b", "vs best 1F1B-EDP (paper: PipeDream)")):
        col = f"speedup_vs_{which}"
        for k, mode in enumerate(modes):
            vals = [best[(best["problem"] == p) & (best["mode"] == mode)][col] for p in problems]
            ys = np.array([100 * v.iloc[0] if len(v) else np.nan for v in vals])
            bars = ax.bar(x + (k - len(modes) / 2) * width, ys, width, label=f"ours, {mode}",
                          color=MODE_COLORS[mode])
            ax.bar_label(bars, labels=["" if np.isnan(v) else f"{v:.1f}" for v in ys],
                         fontsize=7, padding=1)
        paper = []
        for p in problems:
            fig_p = paper_figure(best[best["problem"] == p].iloc[0])
            paper.append(np.nan if fig_p is None else
                         100 * (fig_p.vs_gpipe if which == "gpipe" else fig_p.vs_pipedream))
        bars = ax.bar(x + (len(modes) / 2) * width, paper, width, color="white",
                      edgecolor=PAPER_COLOR, hatch="///", label="paper (its workload)")
        ax.bar_label(bars, labels=["" if np.isnan(v) else
                                   f"{'≥' if v >= 100 else ''}{v:.1f}" for v in paper],
                     fontsize=7, padding=1, color="#555555")
        ax.set_xticks(x, problems, rotation=25, ha="right", fontsize=9)
        ax.set_title(title, fontsize=10, loc="left")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_yscale("symlog", linthresh=10)  # a few % and the paper's >= 170 % both legible
        ax.margins(y=0.12)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes:
        ax.set_ylabel("training speedup (%), symlog axis\n100 · (T_EDP / T − 1)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8,
               frameon=False)
    fig.suptitle("Best plan per problem vs the best equal-microbatch plan (predicted)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return _save(fig, path)


def convergence_curve(records: list[dict[str, Any]]) -> tuple[np.ndarray, ...] | None:
    """``(evaluations, seconds, best T)`` so far, one point per history record.

    Records are the typed history's rows (docs/ARCHITECTURE.md, "Search planners"):
    ``generation``, ``evaluations`` (total so far), ``wall_time`` and ``best`` (so far).
    History files written before the typed history (DEAP logbooks with ``nevals``/``time``,
    lists with ``evals``/``time``/``best``) are still read. Fewer than two records, or records
    without a best value, give None.
    """
    if len(records) < 2:
        return None
    r0 = records[0]
    if all(k in r0 for k in ("evaluations", "wall_time", "best")):
        ekey, tkey, bkey = "evaluations", "wall_time", "best"
    else:  # legacy history files
        ekey = next((k for k in ("nevals", "evals") if k in r0), None)
        tkey = "time" if "time" in r0 else None
        bkey = next((k for k in ("best", "value", "min") if k in r0), None)
    if bkey is None:
        return None
    ev = (np.array([r[ekey] for r in records], dtype=float) if ekey
          else np.arange(1, len(records) + 1, dtype=float))
    t = np.array([r[tkey] for r in records], dtype=float) if tkey else np.full(len(ev), np.nan)
    best = np.minimum.accumulate(np.array([r[bkey] for r in records], dtype=float))
    return ev, t, best


def _mean_step(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The mean of step curves, from where every curve has started (each holds its last
    value after it ends)."""
    start = max(x[0] for x, _ in curves)
    grid = np.unique(np.concatenate([x[x >= start] for x, _ in curves]))
    ys = [y[np.searchsorted(x, grid, side="right") - 1] for x, y in curves]
    return grid, np.mean(np.vstack(ys), axis=0)


def _histories(df: pd.DataFrame, lb_dir: Path) -> pd.DataFrame:
    ok = ok_rows(df).copy()
    curves = []
    for f in ok["history_file"].fillna(""):
        c = None
        path = lb_dir / str(f)
        if f and path.exists():
            c = convergence_curve(json.loads(path.read_text(encoding="utf-8"))["records"])
        curves.append(c)
    ok["curve"] = curves
    return ok[ok["curve"].notna()]


def _convergence_keys(h: pd.DataFrame, max_problems: int) -> list[tuple[str, str]]:
    """Up to ``max_problems`` (problem, mode) panels: one mode per problem (recompute when
    run), the problems most searching planners ran on first, then measured (profiled) ones,
    then the largest."""
    g = (h.assign(size=h["S"] * h["B"], stash=(h["mode"] == "stash").astype(int),
                  synthetic=(h["source"] == "synthetic").astype(int))
         .groupby(["problem", "mode"])
         .agg(n=("planner", "nunique"), size=("size", "max"), stash=("stash", "max"),
              synthetic=("synthetic", "max"))
         .reset_index()
         .sort_values(["n", "synthetic", "stash", "size"],
                      ascending=[False, True, True, False]))
    return list(g.drop_duplicates("problem").head(max_problems)[["problem", "mode"]]
                .itertuples(index=False, name=None))


def draw_convergence(df: pd.DataFrame, lb_dir: Path, path: Path,
                     max_problems: int = 3, floor: float = -5.0) -> Path | None:
    """Best-so-far speedup vs GPipe-EDP by evaluations and by wall time.

    The y axis stops at ``floor`` % so that a planner far below GPipe (random search starts
    from random plans) does not flatten the others; its legend entry gives its final value.
    """
    h = _histories(df, lb_dir)
    if h.empty:
        return None
    plt = _plt()
    keys = _convergence_keys(h, max_problems)
    planners = list(dict.fromkeys(h["planner"]))
    colors = {p: plt.cm.tab10(i % 10) for i, p in enumerate(planners)}
    fig, axes = plt.subplots(len(keys), 2, figsize=(11, 3.4 * len(keys) + 0.6), squeeze=False)
    for row, (problem, mode) in enumerate(keys):
        sub = h[(h["problem"] == problem) & (h["mode"] == mode)]
        finals: list[float] = []
        peaks: list[float] = []
        for col, (xi, xlabel) in enumerate(((0, "evaluations"), (1, "wall time (s)"))):
            ax = axes[row, col]
            for planner, g in sub.groupby("planner", sort=False):
                runs = []
                for _, r in g.iterrows():
                    x, y = r["curve"][xi], 100 * (r["T_gpipe_edp"] / r["curve"][2] - 1)
                    if np.isnan(x).all():
                        continue
                    ax.step(x, y, where="post", color=colors[planner], alpha=0.3, lw=0.8)
                    runs.append((x, y))
                    peaks.append(float(np.max(y)))
                if runs:
                    gx, gy = _mean_step(runs)
                    finals.append(gy[-1])
                    below = f", ends {gy[-1]:+.1f} %: off the axis" if gy[-1] < floor else ""
                    ax.step(gx, gy, where="post", color=colors[planner], lw=2,
                            label=f"{planner} ({len(runs)} seed{'s' * (len(runs) > 1)}{below})")
            if col == 1:  # planners differ by orders of magnitude in speed
                ax.set_xscale("log")
                ax.xaxis.set_minor_formatter(plt.NullFormatter())
            top = max(peaks, default=0.0)
            ax.set_ylim(max(floor, min(finals, default=floor)) - 0.05 * (top - floor + 1),
                        top + 0.1 * (top - floor + 1))
            ax.set_xlabel(xlabel)
            ax.set_ylabel("best speedup vs GPipe-EDP (%)")
            ax.grid(alpha=0.3)
            ax.set_title(f"{problem} · {mode}", fontsize=9, loc="left")
        axes[row, 0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Convergence: best plan found so far (mean of seeds bold, seeds thin)",
                 fontsize=11)
    fig.tight_layout()
    return _save(fig, path)


def draw_gantts(df: pd.DataFrame, lb_dir: Path, out: Path) -> list[tuple[str, Path]]:
    """Per problem: the best plan (any mode, uncapped) above the best EDP plan of that mode
    (the better of GPipe-EDP and 1F1B-EDP)."""
    from ..plan import Plan
    from ..registry import get_problem
    from ..simulator import simulate
    from ..trace import save_gantt

    out_files = []
    best = best_rows(df)
    best = best[best["memory_cap"] == "none"]
    if best.empty:
        return []
    for problem_name, g in best.groupby("problem", sort=False):
        r = g.loc[g["speedup_vs_best_edp"].idxmax()]
        problem = get_problem(problem_name)
        plan = Plan.load(lb_dir / r["plan_file"])
        tl_best = simulate(problem, plan, r["schedule"])
        edp = row_edp_reference(r).best
        assert edp is not None and edp.M is not None  # uncapped: every EDP(M) fits
        sched, M = edp.schedule, edp.M
        tl_edp = simulate(problem, Plan.edp(problem.S, problem.B, M, r["mode"]), sched)
        path = out / f"gantt-{problem_name}.png"
        save_gantt([tl_best, tl_edp], path, [
            f"{problem_name} · best plan: {r['planner']} ({plan.describe()}, {r['schedule']}, "
            f"{r['mode']}), {100 * r['speedup_vs_best_edp']:+.1f} % vs best EDP",
            f"{problem_name} · best EDP: EDP({M}), {sched}, {r['mode']}",
        ])
        out_files.append((f"Gantt: {problem_name}, best plan above the best EDP plan", path))
    return out_files


def draw_all(df: pd.DataFrame, lb_dir: Path, out: Path) -> list[tuple[str, Path]]:
    """Every plot of the report: ``[(title, path), ...]``."""
    files = []
    p = draw_speedup(df, out / "speedup.png")
    if p:
        files.append(("Speedup per problem vs the paper", p))
    p = draw_convergence(df, lb_dir, out / "convergence.png")
    if p:
        files.append(("Convergence by evaluations and wall time", p))
    files += draw_gantts(df, lb_dir, out)
    return files
