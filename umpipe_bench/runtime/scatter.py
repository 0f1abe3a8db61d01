"""Prediction quality over many plans: the plans of the scatter, its figure and its page.

:func:`candidate_plans` spreads at least 12 plans over the predicted range (EDP(M) under
``gpipe`` and ``1f1b``, a planner's plans in both memory modes and the best in-flight-capped
variant of its stash plan, seeded random plans; docs/MODEL.md §2, docs/SCHEDULES.md);
``scripts/prediction_scatter.py`` executes them and :func:`plot` and :func:`markdown` draw and
tabulate measured against predicted time (Spearman's rho and the errors of :mod:`.stats`).

Imports no torch (matplotlib only inside :func:`plot`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from ..plan import Plan
from ..problem import Problem
from ..registry import get_planner
from .comparison import best_capped

__all__ = ["EDP_1F1B", "EDP_GPIPE", "candidate_plans", "markdown", "plot", "random_plan"]

EDP_GPIPE = (1, 2, 3, 4, 6, 8)
EDP_1F1B = (2, 4, 8)


def random_plan(problem: Problem, rng: np.random.Generator, density: float) -> Plan:
    """Stash plan with each cut bit set with probability ``density`` (docs/MODEL.md §2)."""
    bits = (rng.random((problem.S, problem.B - 1)) < density).astype(int).tolist()
    return Plan.from_bits(bits, None, "stash")


def candidate_plans(problem: Problem, args: argparse.Namespace) -> list[tuple[str, Plan, str]]:
    """(label, plan, schedule) for every plan of the scatter."""
    out: list[tuple[str, Plan, str]] = []
    for M in EDP_GPIPE:
        if M <= problem.B:
            out.append((f"gpipe-edp{M}", Plan.edp(problem.S, problem.B, M, "stash"), "gpipe"))
    for M in EDP_1F1B:
        if M <= problem.B:
            out.append((f"1f1b-edp{M}", Plan.edp(problem.S, problem.B, M, "stash"), "1f1b"))
    planner = get_planner(args.planner)
    stash_plan: Plan | None = None
    for mode in ("stash", "recompute"):
        res = planner.plan(problem, mode=mode, budget=args.budget, seed=args.seed)
        out.append((f"{args.planner}-{mode}", res.plan, res.schedule))
        if mode == "stash":
            stash_plan = res.plan
    assert stash_plan is not None
    capped, _ = best_capped(problem, [stash_plan])
    out.append((f"{args.planner}-stash-capped", capped, "capped"))
    rng = np.random.default_rng(args.seed)
    for i, density in enumerate((0.1, 0.25, 0.5)[: args.random]):
        out.append((f"random{i}-d{density}", random_plan(problem, rng, density), "gpipe"))
    return out


def plot(all_data: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(all_data), figsize=(5 * len(all_data), 4.6), squeeze=False)
    markers = {"gpipe": "o", "1f1b": "s", "capped": "^"}
    for ax, data in zip(axes[0], all_data, strict=True):
        pts = data["points"]
        lo = 0.9 * min(min(p["predicted"], p["measured"]) for p in pts) * 1e3
        hi = 1.1 * max(max(p["predicted"], p["measured"]) for p in pts) * 1e3
        ax.plot([lo, hi], [lo, hi], color="0.5", lw=1, label="y = x")
        for sched, mk in markers.items():
            sel = [p for p in pts if p["schedule"] == sched]
            if sel:
                ax.scatter([p["predicted"] * 1e3 for p in sel], [p["measured"] * 1e3 for p in sel],
                           marker=mk, label=sched, alpha=0.8)
        q = data["quality"]
        ax.set_title(f"{data['problem']}: rho {q['spearman']:.2f}, median |err| "
                     f"{q['median_abs_error']:.1%}, worst {q['worst_abs_error']:.1%}", fontsize=9)
        ax.set_xlabel("predicted ms (fresh profile)")
        ax.set_ylabel("measured ms (median)")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(all_data: list[dict[str, Any]]) -> str:
    lines = [
        "## Prediction quality over many plans",
        "",
        "Each problem's plans run in one `execute` run, alternately, one process per stage "
        "(gloo, 1 thread); measured = median iteration; predicted by the simulator from the "
        "profile named. ![scatter](prediction_scatter.png)",
        "",
        "| problem | plans | Spearman rho | median abs error | worst abs error | median signed "
        "error | same, committed profile (rho / median / worst) | iterations | load 1-min "
        "before/after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for d in all_data:
        q, c = d["quality"], d["quality_committed_profile"]
        lines.append(
            f"| {d['problem']} | {q['n']} | {q['spearman']:.3f} | {q['median_abs_error']:.1%} | "
            f"{q['worst_abs_error']:.1%} | {q['median_error']:+.1%} | {c['spearman']:.3f} / "
            f"{c['median_abs_error']:.1%} / {c['worst_abs_error']:.1%} | {d['iters']} | "
            f"{d['loadavg']['before'][0]:.1f}/{d['loadavg']['after'][0]:.1f} |")
    lines += ["", f"Command: `{all_data[0]['command']}` ({all_data[0]['date']}).", ""]
    return "\n".join(lines) + "\n"

