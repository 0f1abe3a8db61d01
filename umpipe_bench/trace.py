"""Pictures of a timeline: a Chrome trace (opens in Perfetto / chrome://tracing) and a Gantt PNG.

Stages are rows; forward, backward, optimizer and transfers have their own colours. matplotlib is
imported only when a picture is drawn.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Sequence
from typing import Any

from .files import atomic_output, write_text
from .simulator import Timeline

__all__ = ["COLORS", "chrome_trace", "gantt_figure", "save_chrome_trace", "save_gantt"]

COLORS = {"F": "#4C72B0", "B": "#DD8452", "O": "#55A868", "act": "#8172B3", "grad": "#C44E52"}
_NAMES = {"F": "forward", "B": "backward", "O": "optimizer"}
#: Characters per title line: the 11-inch figure holds about 120 at 10 pt.
TITLE_CHARS = 100
GANTT_DPI = 130


def chrome_trace(tl: Timeline) -> dict[str, Any]:
    """The timeline as Chrome trace events (times in microseconds).

    One process; stage ``s`` compute is thread ``2s``, its outgoing transfers thread ``2s+1``.
    """
    ev: list[dict[str, Any]] = []
    stages = sorted({o.stage for o in tl.ops})
    for s in stages:
        ev.append({"ph": "M", "pid": 0, "tid": 2 * s, "name": "thread_name",
                   "args": {"name": f"stage {s} compute"}})
        ev.append({"ph": "M", "pid": 0, "tid": 2 * s + 1, "name": "thread_name",
                   "args": {"name": f"stage {s} send"}})
    for o in tl.ops:
        ev.append({
            "ph": "X", "pid": 0, "tid": 2 * o.stage, "name": o.label, "cat": _NAMES[o.kind],
            "ts": o.t0 * 1e6, "dur": (o.t1 - o.t0) * 1e6,
            "args": {"samples": [o.start, o.stop]},
        })
    for t in tl.transfers:
        ev.append({
            "ph": "X", "pid": 0, "tid": 2 * t.src + 1,
            "name": f"{t.kind} {t.src}->{t.dst} #{t.index}", "cat": t.kind,
            "ts": t.t0 * 1e6, "dur": (t.t1 - t.t0) * 1e6,
            "args": {"samples": [t.start, t.stop]},
        })
    return {
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "otherData": {"problem": tl.problem, "schedule": tl.schedule, "mode": tl.mode,
                      "iteration_time_s": tl.iteration_time},
    }


def save_chrome_trace(tl: Timeline, path: str | os.PathLike[str]) -> None:
    write_text(path, json.dumps(chrome_trace(tl)), parents=True)


def _draw(ax: Any, tl: Timeline, title: str, labels: bool) -> None:
    S = len(tl.busy)
    h = 0.62
    for o in tl.ops:
        y = S - 1 - o.stage
        ax.barh(y + 0.1, o.t1 - o.t0, left=o.t0, height=h, color=COLORS[o.kind],
                edgecolor="white", linewidth=0.4)
        if labels and o.kind != "O" and (o.t1 - o.t0) > tl.iteration_time / 45:
            ax.text((o.t0 + o.t1) / 2, y + 0.1, str(o.stop - o.start), ha="center",
                    va="center", fontsize=6, color="white")
    for t in tl.transfers:
        y = S - 1 - t.src
        ax.barh(y - 0.33, t.t1 - t.t0, left=t.t0, height=0.16, color=COLORS[t.kind],
                linewidth=0)
    ax.set_yticks(range(S))
    ax.set_yticklabels([f"stage {S - 1 - y}" for y in range(S)])
    ax.set_ylim(-0.6, S - 0.35)
    # T first, so a long title never hides it; wrapped to the axes (tight_layout then makes
    # room for every line above the bars).
    text = f"T = {tl.iteration_time * 1e3:.2f} ms · {title}"
    ax.set_title(textwrap.fill(text, width=TITLE_CHARS), fontsize=10, loc="left")
    ax.grid(axis="x", alpha=0.3)


def save_gantt(
    timelines: Timeline | Sequence[Timeline],
    path: str | os.PathLike[str],
    titles: Sequence[str] | None = None,
    labels: bool = True,
) -> None:
    """Draw one or more timelines stacked on one shared time axis and save a PNG.

    Bars are labelled with their microbatch size when wide enough; thin bars under each stage
    are its outgoing transfers (purple: activations, red: gradients). Each panel's title
    starts with its iteration time T and wraps to the figure's width.
    """
    import matplotlib.pyplot as plt

    fig = gantt_figure(timelines, titles, labels)
    try:
        with atomic_output(path, parents=True) as tmp:
            fig.savefig(tmp, dpi=GANTT_DPI, format="png")
    finally:
        plt.close(fig)


def gantt_figure(
    timelines: Timeline | Sequence[Timeline],
    titles: Sequence[str] | None = None,
    labels: bool = True,
) -> Any:
    """The matplotlib figure :func:`save_gantt` saves (laid out; the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    tls = [timelines] if isinstance(timelines, Timeline) else list(timelines)
    titles = list(titles) if titles else [f"{t.problem} · {t.schedule} · {t.mode}" for t in tls]
    S = max(len(t.busy) for t in tls)
    height = sum(0.9 + 0.32 * len(t.busy) for t in tls) + 0.9
    fig, axes = plt.subplots(len(tls), 1, figsize=(11, min(height, 40)), sharex=True,
                             squeeze=False,
                             gridspec_kw={"height_ratios": [len(t.busy) for t in tls]})
    for ax, tl, title in zip(axes[:, 0], tls, titles):
        _draw(ax, tl, title, labels and S <= 40)
    axes[-1, 0].set_xlabel("time (s)")
    handles = [Patch(color=COLORS[k], label=lab) for k, lab in
               (("F", "forward"), ("B", "backward"), ("O", "optimizer"),
                ("act", "activation transfer"), ("grad", "gradient transfer"))]
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
