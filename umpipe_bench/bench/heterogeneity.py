"""The heterogeneity map: where unequal microbatches pay (docs/SIMNETS.md, "The map").

For every family of :mod:`umpipe_bench.simnets` (and the mix, plus its decorrelated variant),
every heterogeneity ``h`` of a grid, every (S, B), memory mode and seed: the best planner's
iteration time against the best GPipe-EDP and the best 1F1B-EDP
(:func:`umpipe_bench.planners.evaluation.reference.best_edp`), and its gap to the proven lower bound
(:mod:`umpipe_bench.bound`). At ``h = 0`` every family is the same network of identical stages,
so it is computed once (family ``any``) and shared by every family's curve.

The raw rows go to ``heterogeneity.csv``, rewritten atomically after every row; a rerun skips
the rows already there (resume). :func:`summarize` gives median and 10-90 % band per point;
:func:`write_outputs` writes the summary, a markdown table and the plot.
"""

from __future__ import annotations

import csv
import io
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import UserInputError
from ..files import atomic_output
from ..problem import atomic_write_text
from ..runtime.lifetime import kill_pool, process_pool

__all__ = ["COLUMNS", "DEFAULTS", "Point", "run_study", "study_points", "summarize",
           "write_outputs"]

#: The defaults of ``umpipe-bench study`` (the published map was run with these).
DEFAULTS: dict[str, Any] = {
    "stages": (8, 32),
    "batches": (64, 256),
    "modes": ("stash", "recompute"),
    "families": ("knee", "launch", "cache", "weights", "slowgpu", "slowlink", "mix", "mix-dc"),
    "hs": (0.0, 0.5, 1.0),
    "seeds": 20,
    "planner": "tidgap",
    "budget": "evals:20000",
}

COLUMNS = (
    "family", "S", "B", "h", "seed", "mode", "problem", "planner", "budget", "T_planner",
    "T_best", "T_gpipe", "M_gpipe", "T_1f1b", "M_1f1b", "lower_bound", "speedup_vs_gpipe",
    "speedup_vs_1f1b", "gap_to_bound", "plan_kind", "evaluations", "wall_time", "error",
)
KEY = ("family", "S", "B", "h", "seed", "mode")


@dataclass(frozen=True)
class Point:
    """One row of the map: a network (family, S, B, h, seed) in one memory mode."""

    family: str
    S: int
    B: int
    h: float
    seed: int
    mode: str

    def key(self) -> tuple[str, ...]:
        return (self.family, str(self.S), str(self.B), f"{self.h:g}", str(self.seed), self.mode)

    def problem_name(self) -> str:
        from ..simnames import family_name

        fam, dc = (self.family[:-3], True) if self.family.endswith("-dc") else (self.family, False)
        if fam == "any":
            fam = "mix"  # h = 0: every family gives the same identical stages
        return family_name(fam, self.S, self.B, self.h, self.seed, dc)


def study_points(stages: Sequence[int], batches: Sequence[int], modes: Sequence[str],
                 families: Sequence[str], hs: Sequence[float], seeds: int) -> list[Point]:
    """Every point of the grid; ``h = 0`` once per (S, B, seed, mode) as family ``any``.

    Ordered so that the small shapes come first (a partial run is a usable map)."""
    from ..simnets import FAMILIES

    for opt, values in (("--stages", stages), ("--batches", batches), ("--modes", modes),
                        ("--families", families), ("--h", hs)):
        if not values:
            raise UserInputError(f"{opt}: expected at least one value, got none")
    for opt, values in (("--stages", stages), ("--batches", batches)):
        for v in values:
            if v < 1:
                raise UserInputError(f"{opt}: every value must be >= 1, got {v}")
    for fam in families:
        if fam.removesuffix("-dc") not in FAMILIES:
            raise UserInputError(f"--families: unknown family {fam!r}; expected one of "
                                 f"{', '.join(FAMILIES)} (optionally with -dc)")
    for h in hs:
        if not 0.0 <= h <= 1.0:
            raise UserInputError(f"--h: every h must be in [0, 1], got {h:g}")
    if seeds < 1:
        raise UserInputError(f"--seeds must be >= 1, got {seeds}")
    out: list[Point] = []
    for B in sorted(batches):
        for S in sorted(stages):
            for seed in range(seeds):
                for mode in modes:
                    if 0.0 in hs:
                        out.append(Point("any", S, B, 0.0, seed, mode))
                    out += [Point(f, S, B, h, seed, mode) for h in hs if h > 0 for f in families]
    return out


def _evaluate(point: Point, planner: str, budget: str) -> dict[str, Any]:
    """One row: the planner, both EDP references and the bound on one network."""
    from ..bound import lower_bound
    from ..planners.evaluation.reference import edp_reference
    from ..registry import get_planner, get_problem

    row: dict[str, Any] = {**asdict(point), "h": f"{point.h:g}", "problem": point.problem_name(),
                           "planner": planner, "budget": budget, "error": ""}
    t0 = time.perf_counter()
    try:
        p = get_problem(row["problem"])
        res = get_planner(planner).plan(p, mode=point.mode, budget=budget, seed=point.seed)
        edp = edp_reference(p, point.mode)
        g, o = edp.fitting("gpipe"), edp.fitting("1f1b")
        lb = lower_bound(p, point.mode)
        T = min(res.iteration_time, g.T)
        gains = edp.speedups(T)
        row.update(T_planner=res.iteration_time, T_best=T, T_gpipe=g.T, M_gpipe=g.M, T_1f1b=o.T,
                   M_1f1b=o.M, lower_bound=lb, speedup_vs_gpipe=gains["gpipe"],
                   speedup_vs_1f1b=gains["1f1b"], gap_to_bound=T / lb - 1.0,
                   plan_kind=res.plan.describe() if T == res.iteration_time else "EDP",
                   evaluations=res.evaluations)
    except Exception as exc:  # a failed point is a row with an error, not a lost run
        row["error"] = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    row["wall_time"] = time.perf_counter() - t0
    return row


def _read_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    if not path.is_file():  # a folder, or a FIFO that reading would wait on forever
        raise UserInputError(f"{str(path)!r}: not a regular file; expected the study's rows "
                             "(heterogeneity.csv): move it away or pass another --out")
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header, rows = reader.fieldnames or [], list(reader)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UserInputError(f"{str(path)!r}: not a readable CSV file ({exc}); move it away or "
                             "pass another --out") from None
    if header and set(header) != set(COLUMNS):
        raise UserInputError(f"{str(path)!r}: columns {sorted(header)} are not the study's; "
                             "move it away or pass another --out")
    return rows


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.9g}" if isinstance(v, float) else v) for k, v in r.items()})
    atomic_write_text(path, buf.getvalue())


def _results(points: list[Point], planner: str, budget: str, jobs: int
             ) -> Iterator[dict[str, Any]]:
    if jobs == 1:
        for pt in points:
            yield _evaluate(pt, planner, budget)
        return
    pool = process_pool(jobs)
    done = False
    try:
        yield from pool.map(_evaluate, points, [planner] * len(points), [budget] * len(points))
        done = True
    finally:  # leaving early (SIGINT, SIGTERM, an error) stops the running points at once
        if done:
            pool.shutdown()
        else:
            kill_pool(pool)


def run_study(out: str | os.PathLike[str], points: list[Point], *, planner: str, budget: str,
              jobs: int = 1, progress: bool | None = None) -> tuple[int, int]:
    """Evaluate every point not yet in ``out/heterogeneity.csv``; returns (done now, errors).

    The CSV is rewritten atomically after every row, so an interrupted study resumes."""
    from tqdm import tqdm

    from ..registry import get_planner

    get_planner(planner)  # an unknown planner fails before any work
    path = Path(out) / "heterogeneity.csv"
    rows = _read_rows(path)
    done = {tuple(r[k] for k in KEY) for r in rows if not r.get("error")}
    rows = [r for r in rows if not r.get("error")]
    pending = [p for p in points if p.key() not in done]
    bar = tqdm(total=len(points), initial=len(points) - len(pending), unit="point",
               desc="heterogeneity map", disable=None if progress is None else not progress,
               dynamic_ncols=True)
    errors = 0
    try:
        for row in _results(pending, planner, budget, jobs):
            rows.append(row)
            errors += bool(row["error"])
            if row["error"]:
                bar.write(f"error in {row['problem']} {row['mode']}: {row['error']}")
            _write_rows(path, rows)
            bar.update()
    finally:
        bar.close()
    return len(pending), errors


def summarize(rows: Any) -> Any:
    """Median and 10/90 % quantiles per (family, S, B, mode, h), ``h = 0`` shared by every
    family. ``rows``: a DataFrame of :data:`COLUMNS`."""
    import pandas as pd

    ok = rows[rows["error"].fillna("") == ""].copy()
    ok["h"] = ok["h"].astype(float)
    fams = sorted(set(ok["family"]) - {"any"})
    shared = ok[ok["family"] == "any"]
    # with h = 0 alone there is no family to share with: the rows stay under "any"
    parts = ([ok[ok["family"] != "any"]] + [shared.assign(family=f) for f in fams]
             if fams else [shared])
    data = pd.concat(parts, ignore_index=True)
    metrics = ("speedup_vs_gpipe", "speedup_vs_1f1b", "gap_to_bound")
    g = data.groupby(["family", "S", "B", "mode", "h"])
    out = g.size().rename("n").to_frame()
    for m in metrics:
        out[f"{m}_median"] = g[m].median()
        out[f"{m}_p10"] = g[m].quantile(0.1)
        out[f"{m}_p90"] = g[m].quantile(0.9)
        out[f"{m}_max"] = g[m].max()
    return out.reset_index()


def _plot(summary: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fams = list(dict.fromkeys(f for f in DEFAULTS["families"] if f in set(summary["family"])))
    fams += sorted(set(summary["family"]) - set(fams))
    shapes = sorted({(int(s), int(b)) for s, b in zip(summary["S"], summary["B"])})
    metrics = (("speedup_vs_gpipe", "speedup vs best GPipe-EDP"),
               ("speedup_vs_1f1b", "speedup vs best 1F1B-EDP"),
               ("gap_to_bound", "gap to the lower bound"))
    fig, axes = plt.subplots(len(metrics), len(fams), figsize=(2.6 * len(fams) + 1, 8.5),
                             sharex=True, sharey="row", squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, fam in enumerate(fams):
        for i, (m, label) in enumerate(metrics):
            ax = axes[i, j]
            for k, (S, B) in enumerate(shapes):
                for mode, ls in (("stash", "-"), ("recompute", "--")):
                    d = summary[(summary["family"] == fam) & (summary["S"] == S)
                                & (summary["B"] == B) & (summary["mode"] == mode)
                                ].sort_values("h")
                    if d.empty:
                        continue
                    c = colors[k % len(colors)]
                    ax.plot(d["h"], 100 * d[f"{m}_median"], ls, color=c, lw=1.3,
                            label=f"S={S} B={B} {mode}")
                    ax.fill_between(d["h"], 100 * d[f"{m}_p10"], 100 * d[f"{m}_p90"],
                                    color=c, alpha=0.08, lw=0)
            ax.axhline(0, color="grey", lw=0.6)
            ax.grid(alpha=0.3)
            if i == 0:
                ax.set_title(fam, fontsize=10)
            if j == 0:
                ax.set_ylabel(f"{label} (%)", fontsize=8)
            if i == len(metrics) - 1:
                ax.set_xlabel("heterogeneity h")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=7,
               frameon=False)
    fig.suptitle("Where unequal microbatches pay: median and 10-90 % band over seeds (best "
                 "planner, same memory mode). The paper's bar: >= +170 % vs GPipe, >= +100 % vs "
                 "PipeDream", fontsize=11)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    try:
        with atomic_output(path, parents=True) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)


def _markdown(summary: Any) -> str:
    def pct(row: Any, m: str) -> str:
        return (f"{100 * row[f'{m}_median']:+.1f} [{100 * row[f'{m}_p10']:+.1f}, "
                f"{100 * row[f'{m}_p90']:+.1f}]")

    lines = ["| family | S | B | mode | h | n | vs GPipe-EDP % median [p10, p90] | "
             "vs 1F1B-EDP % | gap to bound % | max vs GPipe % |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in summary.sort_values(["family", "S", "B", "mode", "h"]).iterrows():
        lines.append(f"| {r['family']} | {r['S']} | {r['B']} | {r['mode']} | {r['h']:g} | "
                     f"{r['n']} | {pct(r, 'speedup_vs_gpipe')} | {pct(r, 'speedup_vs_1f1b')} | "
                     f"{pct(r, 'gap_to_bound')} | {100 * r['speedup_vs_gpipe_max']:+.1f} |")
    return "\n".join(lines) + "\n"


def gantt_of_best_case(rows: Any, path: Path) -> dict[str, Any]:
    """Re-plan the row with the largest speedup over GPipe-EDP (same planner, budget and seed:
    the same plan) and draw its Gantt chart beside the best GPipe-EDP and 1F1B-EDP plans."""
    from ..plan import Plan
    from ..registry import get_planner, get_problem
    from ..simulator import simulate
    from ..trace import save_gantt

    ok = rows[rows["error"].fillna("") == ""]
    r = ok.loc[ok["speedup_vs_gpipe"].idxmax()]
    p = get_problem(str(r["problem"]))
    mode = str(r["mode"])
    res = get_planner(str(r["planner"])).plan(p, mode=mode, budget=str(r["budget"]),
                                              seed=int(r["seed"]))
    tls = [simulate(p, res.plan, res.schedule),
           simulate(p, Plan.edp(p.S, p.B, int(r["M_gpipe"]), mode), "gpipe"),
           simulate(p, Plan.edp(p.S, p.B, int(r["M_1f1b"]), mode), "1f1b")]
    titles = [f"{p.name} {mode}: {r['planner']} ({res.plan.describe()}, {res.schedule})",
              f"best GPipe-EDP, M = {int(r['M_gpipe'])}",
              f"best 1F1B-EDP, M = {int(r['M_1f1b'])}"]
    save_gantt(tls, path, titles=titles, labels=p.S * p.B <= 8 * 64)
    return {"problem": p.name, "mode": mode, "T": tls[0].iteration_time,
            "T_gpipe": tls[1].iteration_time, "T_1f1b": tls[2].iteration_time}


def write_outputs(out: str | os.PathLike[str], gantt: bool = True) -> dict[str, Path]:
    """From ``out/heterogeneity.csv``: ``heterogeneity-summary.csv``, ``heterogeneity.md``
    (the table), ``heterogeneity.png`` (the map) and ``heterogeneity-gantt.png`` (the
    largest speedup over GPipe-EDP, :func:`gantt_of_best_case`)."""
    import pandas as pd

    out = Path(out)
    src = out / "heterogeneity.csv"
    if not src.exists():
        raise FileNotFoundError(f"no study rows at {str(src)!r}; run 'umpipe-bench study' first")
    rows = pd.read_csv(src, dtype={"error": str})
    summary = summarize(rows)
    if summary.empty:
        raise UserInputError(f"no point of {str(src)!r} finished without an error; its "
                             "'error' column says why")
    paths = {"summary": out / "heterogeneity-summary.csv", "table": out / "heterogeneity.md",
             "plot": out / "heterogeneity.png"}
    atomic_write_text(paths["summary"], summary.to_csv(index=False, float_format="%.6g"))
    atomic_write_text(paths["table"], _markdown(summary))
    _plot(summary, paths["plot"])
    if gantt:
        paths["gantt"] = out / "heterogeneity-gantt.png"
        gantt_of_best_case(rows, paths["gantt"])
    return paths
