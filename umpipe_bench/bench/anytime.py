"""Anytime statistics in the manner of COCO: targets, ECDFs, fixed-budget intervals, ranks.

Every searching planner is judged on its whole run, not only on its final plan. A run (one
leaderboard row with its saved history, :mod:`.runner`) is a step curve of the best iteration
time found so far (docs/MODEL.md §4) against evaluations and against wall time.

* **Targets** per (problem, mode, memory cap): ``f_ref × (1 + ε)`` for ε in :data:`EPSILONS`;
  ``f_ref`` is the best known value (``umpipe_bench/problems/best_known.json``,
  :mod:`.best_known`) when it exists for that problem and mode, else the best T of any row of
  the same group in the leaderboard (the table says which).
* **ECDF** (fixed target, COCO's runtime distribution): for a planner, the fraction of its
  (run, target) pairs whose best-so-far has reached the target within ``x`` evaluations (or
  seconds), over every problem and seed it ran.
* **Fixed budget**: the relative gap ``T(b) / f_ref − 1`` of the best-so-far after ``b``
  evaluations, averaged over runs, with a percentile bootstrap 95 % interval (resampling runs;
  seeded, so the table is reproducible). A run that had not evaluated anything by ``b`` (a
  GA's first population is larger) is left out of that column and counted in ``n``.
* **Average rank**: planners ranked within each (problem, mode, memory cap, seed) by final T
  (ties share the mean rank); the mean over those groups. A deterministic planner that ran one
  seed stands in for every seed.

Histories come in two shapes: the typed records of the search loop (``generation``,
``evaluations``, ``wall_time``, ``best``) and the older planner-specific ones (``nevals`` /
``evals``, ``time``, ``best``/``value``). Either way the leaderboard's final ``evaluations``,
``wall_time`` and ``T_pred`` end the curve, so a one-shot planner (EDP, greedy) is one point.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..files import atomic_output
from .tables import GROUP, REFERENCE_PLANNERS, ok_rows

__all__ = ["EPSILONS", "Run", "average_ranks", "bootstrap_ci", "ecdf", "ecdf_table",
           "fixed_budget_table", "hit_times", "load_runs", "reference_values", "targets"]

#: Target precisions (fractions): 10 %, 5 %, 2 %, 1 %, 0.5 %, 0.1 % above the reference.
EPSILONS: tuple[float, ...] = (0.10, 0.05, 0.02, 0.01, 0.005, 0.001)


@dataclass(frozen=True)
class Run:
    """One run: its group, planner and seed, and its best-so-far step curve."""

    problem: str
    mode: str
    memory_cap: str
    planner: str
    seed: int
    evaluations: np.ndarray  # increasing
    wall_time: np.ndarray  # same length, non-decreasing
    best: np.ndarray  # best T so far, non-increasing
    schedule: str = "gpipe"  # of the final plan

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.problem, self.mode, self.memory_cap)

    @property
    def final(self) -> float:
        return float(self.best[-1])

    def best_at(self, evaluations: float) -> float:
        """Best T after ``evaluations`` evaluations (NaN before the first record)."""
        i = int(np.searchsorted(self.evaluations, evaluations, side="right")) - 1
        return float(self.best[i]) if i >= 0 else float("nan")


def _curve(records: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, ...] | None:
    """``(evaluations, wall_time, best)`` from either history shape; None without a best."""
    if not records:
        return None
    r0 = records[0]
    ekey = next((k for k in ("evaluations", "nevals", "evals") if k in r0), None)
    tkey = next((k for k in ("wall_time", "time") if k in r0), None)
    bkey = next((k for k in ("best", "value", "min") if k in r0), None)
    if ekey is None or bkey is None:
        return None
    ev = np.array([r[ekey] for r in records], dtype=float)
    t = (np.array([r[tkey] for r in records], dtype=float) if tkey
         else np.full(len(ev), np.nan))
    best = np.array([r[bkey] for r in records], dtype=float)
    return ev, t, best


def _run_from_row(row: Mapping[str, Any], lb_dir: Path) -> Run:
    ev_end, t_end, T_end = float(row["evaluations"]), float(row["wall_time"]), float(
        row["T_pred"])
    ev, t, best = np.array([ev_end]), np.array([t_end]), np.array([T_end])
    f = row.get("history_file")
    path = lb_dir / str(f) if isinstance(f, str) and f else None
    if path is not None and path.exists():
        c = _curve(json.loads(path.read_text(encoding="utf-8")).get("records") or [])
        if c is not None:
            keep = c[0] < ev_end  # the leaderboard's final point ends the curve
            ev = np.append(c[0][keep], ev_end)
            t = np.append(c[1][keep], t_end)
            best = np.append(c[2][keep], T_end)
    best = np.minimum.accumulate(np.where(np.isfinite(best), best, np.inf))
    t = np.maximum.accumulate(np.nan_to_num(t, nan=0.0))
    return Run(str(row["problem"]), str(row["mode"]), str(row.get("memory_cap", "none")),
               str(row["planner"]), int(row["seed"]), ev, t, best,
               str(row.get("schedule") or "gpipe"))


def load_runs(df: pd.DataFrame, lb_dir: str | Path,
              planners: Sequence[str] | None = None) -> list[Run]:
    """Every error-free row with a predicted T as a :class:`Run` (histories from ``lb_dir``)."""
    ok = ok_rows(df)
    if planners is not None:
        ok = ok[ok["planner"].isin(list(planners))]
    return [_run_from_row(r, Path(lb_dir)) for r in ok.to_dict("records")]


def reference_values(runs: Sequence[Run], best_known: Mapping[tuple[str, str], float]
                     | None = None) -> dict[tuple[str, str, str], tuple[float, str]]:
    """Per group: ``(f_ref, source)``; source ``"best known"`` or ``"best in leaderboard"``.

    The best known value is used only for uncapped groups (``memory_cap == "none"``) and only
    when no run beat it (then the leaderboard's best is the honest reference).
    """
    out: dict[tuple[str, str, str], tuple[float, str]] = {}
    for r in runs:
        g = r.group
        out[g] = (min(out.get(g, (np.inf, ""))[0], float(r.best.min())), "best in leaderboard")
    for g, (v, _) in list(out.items()):
        bk = (best_known or {}).get((g[0], g[1]))
        if g[2] == "none" and bk is not None and bk <= v:
            out[g] = (float(bk), "best known")
    return out


def targets(f_ref: float, epsilons: Sequence[float] = EPSILONS) -> np.ndarray:
    """``f_ref × (1 + ε)`` for each ε, hardest last."""
    return f_ref * (1.0 + np.asarray(epsilons, dtype=float))


def hit_times(run: Run, targets_: np.ndarray, axis: str = "evaluations") -> np.ndarray:
    """Per target: the first evaluation count (or wall time) whose best-so-far reaches it;
    ``inf`` where the run never does."""
    x = run.evaluations if axis == "evaluations" else run.wall_time
    out = np.full(len(targets_), np.inf)
    for k, tgt in enumerate(targets_):
        i = int(np.argmax(run.best <= tgt))
        if run.best[i] <= tgt:
            out[k] = x[i]
    return out


def ecdf(runs: Sequence[Run], refs: Mapping[tuple[str, str, str], tuple[float, str]],
         grid: np.ndarray, axis: str = "evaluations",
         epsilons: Sequence[float] = EPSILONS) -> dict[str, np.ndarray]:
    """Per planner: the fraction of its (run, target) pairs reached by each ``grid`` value."""
    hits: dict[str, list[np.ndarray]] = {}
    for r in runs:
        hits.setdefault(r.planner, []).append(hit_times(r, targets(refs[r.group][0], epsilons),
                                                        axis))
    return {p: (np.concatenate(h)[None, :] <= grid[:, None]).mean(axis=1)
            for p, h in hits.items()}


def ecdf_table(runs: Sequence[Run], refs: Mapping[tuple[str, str, str], tuple[float, str]],
               epsilons: Sequence[float] = EPSILONS) -> pd.DataFrame:
    """Per planner: runs, and the fraction of targets reached at the end of its runs (the
    ECDF's last value), per ε and overall."""
    rows = []
    for p in dict.fromkeys(r.planner for r in runs):
        mine = [r for r in runs if r.planner == p]
        h = np.vstack([hit_times(r, targets(refs[r.group][0], epsilons)) for r in mine])
        row: dict[str, Any] = {"planner": p, "runs": len(mine)}
        for k, e in enumerate(epsilons):
            row[f"ε={e:.1%}"] = f"{np.isfinite(h[:, k]).mean():.0%}"
        row["all targets"] = f"{np.isfinite(h).mean():.1%}"
        rows.append(row)
    return pd.DataFrame(rows)


def bootstrap_ci(values: np.ndarray, n_boot: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean and its percentile bootstrap interval (seeded)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return (float("nan"),) * 3
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(axis=1)
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [a, 1.0 - a])
    return float(v.mean()), float(lo), float(hi)


def default_budgets(runs: Sequence[Run]) -> list[int]:
    """1-3-10 steps from 100 up to the largest evaluation count any run reached."""
    top = max((float(r.evaluations[-1]) for r in runs), default=0.0)
    steps = [int(m * 10 ** k) for k in range(2, 8) for m in (1, 3)]
    return [b for b in steps if b <= top] or [int(top)]


def fixed_budget_table(runs: Sequence[Run],
                       refs: Mapping[tuple[str, str, str], tuple[float, str]],
                       budgets: Sequence[int] | None = None, seed: int = 0) -> pd.DataFrame:
    """Per planner and budget: mean gap to the reference ``T(b)/f_ref − 1`` with its bootstrap
    95 % interval, as ``"+1.23 % [+0.90, +1.60] (n)"``; and the raw numbers in columns
    ``mean@b``, ``lo@b``, ``hi@b``, ``n@b`` (fractions)."""
    budgets = list(budgets) if budgets is not None else default_budgets(runs)
    rows = []
    for p in dict.fromkeys(r.planner for r in runs):
        mine = [r for r in runs if r.planner == p]
        row: dict[str, Any] = {"planner": p, "runs": len(mine)}
        for b in budgets:
            gaps = np.array([r.best_at(b) / refs[r.group][0] - 1.0 for r in mine])
            gaps = gaps[np.isfinite(gaps)]
            m, lo, hi = bootstrap_ci(gaps, seed=seed)
            row.update({f"mean@{b}": m, f"lo@{b}": lo, f"hi@{b}": hi, f"n@{b}": gaps.size})
            row[f"evals {b}"] = ("" if gaps.size == 0 else
                                 f"{m:+.2%} [{lo:+.2%}, {hi:+.2%}] ({gaps.size})")
        rows.append(row)
    return pd.DataFrame(rows)


def average_ranks(runs: Sequence[Run]) -> pd.DataFrame:
    """Mean rank of each planner's final T within (problem, mode, memory cap, seed) groups;
    a planner with one run in a (problem, mode, memory cap) stands in for every seed."""
    df = pd.DataFrame([{"problem": r.problem, "mode": r.mode, "memory_cap": r.memory_cap,
                        "planner": r.planner, "seed": r.seed, "T": r.final} for r in runs])
    if df.empty:
        return pd.DataFrame(columns=["planner", "average rank", "groups"])
    parts = []
    for _, g in df.groupby(GROUP, sort=False):
        n_seeds = g.groupby("planner")["seed"].transform("nunique")
        seeds = sorted(set(g.loc[n_seeds > 1, "seed"])) or sorted(set(g["seed"]))
        single = g[n_seeds == 1]
        parts.append(g[n_seeds > 1])
        parts += [single.assign(seed=s) for s in seeds]
    full = pd.concat(parts).drop_duplicates(["problem", "mode", "memory_cap", "planner",
                                             "seed"])
    full["rank"] = full.groupby([*GROUP, "seed"])["T"].rank(method="average")
    out = (full.groupby("planner").agg(rank=("rank", "mean"), groups=("rank", "size"))
           .reset_index().sort_values("rank"))
    return out.rename(columns={"rank": "average rank"})


def _grid(runs: Sequence[Run], axis: str) -> np.ndarray:
    x = np.concatenate([r.evaluations if axis == "evaluations" else r.wall_time for r in runs])
    x = x[np.isfinite(x) & (x > 0)]
    if x.size == 0:
        return np.array([1.0])
    return np.unique(np.geomspace(x.min(), x.max(), 200))


def draw_ecdf(runs: Sequence[Run], refs: Mapping[tuple[str, str, str], tuple[float, str]],
              path: str | Path, epsilons: Sequence[float] = EPSILONS) -> Path | None:
    """Two panels: the ECDF of (run, target) pairs reached against evaluations and against
    wall time, one line per planner (COCO's runtime distributions)."""
    if not runs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    n_groups = len({r.group for r in runs})
    for ax, axis, label in ((axes[0], "evaluations", "evaluations"),
                            (axes[1], "wall_time", "wall time (s)")):
        grid = _grid(runs, axis)
        for p, frac in ecdf(runs, refs, grid, axis, epsilons).items():
            ax.step(grid, frac, where="post", label=p)
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("fraction of (run, target) pairs reached")
    eps = ", ".join(f"{e:g}" for e in (100 * np.asarray(epsilons)))
    fig.suptitle(f"Targets f_ref × (1 + ε), ε ∈ {{{eps}}} % (f_ref: best known, else best "
                 f"found); {n_groups} (problem, mode) groups, {len(runs)} runs")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out = Path(path)
    try:
        with atomic_output(out, parents=True) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
    return out


def _md(df: pd.DataFrame) -> str:
    return "_none_\n" if df.empty else df.to_markdown(index=False) + "\n"


def _lower_bounds(runs: Sequence[Run]) -> dict[tuple[str, str], float]:
    """Per (problem, mode): the proven lower bound on T (docs/CERTIFY.md: the closed form,
    the stage relaxation and a solver's bound recorded in the best-known file), where the
    problem is registered."""
    from .best_known import proven_bound

    out = {}
    for key in dict.fromkeys((r.problem, r.mode) for r in runs):
        try:
            lb = proven_bound(key[0], key[1])
        except Exception:  # a problem that is no longer registered: no bound for it
            continue
        if lb is not None:
            out[key] = float(lb)
    return out


def _certified_groups(refs: Mapping[Any, tuple[float, str]],
                      bounds: Mapping[tuple[str, str], float]) -> int:
    """Groups whose reference value is within 1 % of the proven bound."""
    from .best_known import CERTIFIED_GAP

    return sum(1 for g, (f, _) in refs.items()
               if bounds.get((g[0], g[1])) and f / bounds[(g[0], g[1])] - 1.0 <= CERTIFIED_GAP)


def _mean_pct(values: Sequence[float]) -> str:
    return f"{float(np.mean(values)):+.2%}" if len(values) else ""


def _family_values(runs: Sequence[Run]) -> dict[tuple[str, str], float]:
    """Per (problem, mode): the best known value of the smallest family holding every run's
    final plan (``gpipe`` when all run under GPipe, else ``capped``); {} without the file."""
    from .best_known import BestKnown, BestKnownError

    try:
        book = BestKnown()
    except BestKnownError:
        return {}
    out: dict[tuple[str, str], float] = {}
    for key in dict.fromkeys((r.problem, r.mode) for r in runs):
        fam = ("gpipe" if all(r.schedule == "gpipe" for r in runs
                              if (r.problem, r.mode) == key) else "capped")
        v = book.value(key[0], key[1], fam)
        if v is not None:
            out[key] = v
    return out


def anytime_section(df: pd.DataFrame, lb_dir: str | Path, out: str | Path | None,
                    best_known: Mapping[tuple[str, str], float] | None = None,
                    ) -> tuple[list[str], list[tuple[str, Path]]]:
    """The report's anytime section (markdown lines) and its plot (``ecdf.png`` in ``out``;
    None: no plot), over the contenders' runs (not the GPipe/1F1B references).
    ``best_known``: ``{(problem, mode): T}`` (default: the committed file, per group the
    family of its plans, :func:`_family_values`)."""
    runs = [r for r in load_runs(df, lb_dir) if r.planner not in REFERENCE_PLANNERS]
    if not runs:
        return [], []
    if best_known is None:
        best_known = _family_values(runs)
    refs = reference_values(runs, best_known)
    n_bk = sum(src == "best known" for _, src in refs.values())
    seeds = pd.Series([r.seed for r in runs]).nunique()
    fb = fixed_budget_table(runs, refs)
    shown = ["planner", "runs", *[c for c in fb.columns if c.startswith("evals ")]]
    final = pd.DataFrame([{"planner": p, **dict(zip(
        ("mean", "lo", "hi"), bootstrap_ci(np.array([r.final / refs[r.group][0] - 1.0
                                                     for r in runs if r.planner == p]))))}
        for p in dict.fromkeys(r.planner for r in runs)])
    ranks = average_ranks(runs).merge(final, on="planner")
    ranks["final gap (95 % CI)"] = [f"{m:+.2%} [{lo:+.2%}, {hi:+.2%}]"
                                    for m, lo, hi in zip(ranks["mean"], ranks["lo"],
                                                         ranks["hi"])]
    ranks["average rank"] = ranks["average rank"].map(lambda v: f"{v:.2f}")
    bounds = _lower_bounds(runs)
    ranks["final gap to lower bound"] = [
        _mean_pct([r.final / bounds[(r.problem, r.mode)] - 1.0 for r in runs
                   if r.planner == p and bounds.get((r.problem, r.mode))])
        for p in ranks["planner"]]
    lines = [
        "## Anytime statistics (COCO style)",
        "",
        f"{len(runs)} runs over {len(refs)} (problem, mode, memory cap) groups, up to "
        f"{seeds} seeds; the GPipe/1F1B references are left out. Reference f_ref per group: "
        f"the best known value (umpipe_bench/problems/best_known.json) of the schedule family "
        f"the group's plans belong to (`gpipe` when every plan runs under GPipe, else `capped`) "
        f"for "
        f"{n_bk} groups, the best T in this leaderboard for {len(refs) - n_bk} (groups under "
        "a memory cap, or where a run beat the file). "
        "Targets f_ref × (1 + ε), ε ∈ {10, 5, 2, 1, 0.5, 0.1} %. Gap = T / f_ref − 1 of "
        "the best plan so far. Intervals: percentile bootstrap over runs (2000 resamples, "
        "seed 0).",
        "",
        "### Targets reached at the end of the runs (ECDF's last value)",
        "",
        _md(ecdf_table(runs, refs)),
        "### Fixed budget: mean gap after b evaluations [95 % CI] (runs with a value by b)",
        "",
        _md(fb[shown]),
        "### Average rank of the final plan (per problem, mode, cap and seed) and final gaps",
        "",
        "The lower bound is the proven bound on T for any plan (docs/CERTIFY.md: "
        "`umpipe_bench.bound` and the solver's bounds in best_known.json); a gap to it is an "
        "upper limit on what any planner could still gain. "
        f"{_certified_groups(refs, bounds)} of {len(refs)} groups have f_ref within 1 % of "
        "it (certified).",
        "",
        _md(ranks[["planner", "average rank", "groups", "final gap (95 % CI)",
                   "final gap to lower bound"]]),
    ]
    images: list[tuple[str, Path]] = []
    if out is not None:
        p = draw_ecdf(runs, refs, Path(out) / "ecdf.png")
        if p is not None:
            images.append(("ECDF of targets reached, by evaluations and by wall time", p))
    return lines, images
