"""Pictures of a timeline: a Chrome trace (opens in Perfetto / chrome://tracing) and a Gantt PNG.

Stages are rows; forward, backward, optimizer and transfers have their own colours. A timeline
on devices (:class:`umpipe_bench.devsim.DeviceTimeline`: torch's schedules, chunk plans) has a
row per device, its operations named by torch's action strings (``0F1``, ``2I0``, ``2W0``) and
coloured by kind (forward, full backward, input gradient, weight gradient, optimizer), each
labelled with its chunk and sample count. matplotlib is imported only when a picture is drawn.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Sequence
from typing import Any

from .devsim import DeviceTimeline, parse_action
from .files import atomic_output, write_text
from .simulator import Timeline

__all__ = ["COLORS", "chrome_trace", "device_chrome_trace", "device_gantt_figure",
           "gantt_figure", "save_chrome_trace", "save_device_chrome_trace", "save_device_gantt",
           "save_gantt"]

COLORS = {"F": "#4C72B0", "B": "#DD8452", "I": "#E5AE38", "W": "#937860", "O": "#55A868",
          "act": "#8172B3", "grad": "#C44E52"}
_NAMES = {"F": "forward", "B": "backward", "I": "input gradient", "W": "weight gradient",
          "O": "optimizer"}

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
    _finish_axes(ax, S, "stage", tl.iteration_time, title)


def _finish_axes(ax: Any, rows: int, row_name: str, T: float, title: str) -> None:
    """Row labels (top row first), limits, the title with T first, the grid."""
    ax.set_yticks(range(rows))
    ax.set_yticklabels([f"{row_name} {rows - 1 - y}" for y in range(rows)])
    ax.set_ylim(-0.6, rows - 0.35)
    # T first, so a long title never hides it; wrapped to the axes (tight_layout then makes
    # room for every line above the bars).
    text = f"T = {T * 1e3:.2f} ms · {title}"
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


# ----------------------------------------------------------------------------- on devices
def _samples(parts: Any, chunk: int, kind: str, mb: int) -> list[int]:
    """``[start, stop)`` of microbatch ``mb`` of ``kind`` in ``chunk`` (``parts[chunk]``: its
    forward, backward and weight-gradient sizes)."""
    sizes = parts[chunk][{"F": 0, "B": 1, "I": 1, "W": 2}[kind]]
    a = sum(sizes[:mb])
    return [a, a + sizes[mb]]


def _device_ops(tl: DeviceTimeline, parts: Any) -> list[tuple[int, str, int, str, int, float,
                                                                float, list[int] | None]]:
    """(device, action, chunk, kind, microbatch, t0, t1, samples) of every operation; the
    optimizer has kind ``O``, chunk and microbatch -1, no samples."""
    out = []
    for d, row in enumerate(tl.ops):
        for act, t0, t1 in row:
            if act == "opt":
                out.append((d, act, -1, "O", -1, t0, t1, None))
                continue
            a = parse_action(act)
            out.append((d, act, a.chunk, a.kind, a.mb, t0, t1,
                        _samples(parts, a.chunk, a.kind, a.mb)))
    return out


def _transfer_kind(what: str) -> str:
    """``act`` for a transfer sent by a forward (its label is the action), else ``grad``."""
    return "act" if parse_action(what).kind == "F" else "grad"


def device_chrome_trace(tl: DeviceTimeline, parts: Any, meta: dict[str, Any] | None = None
                        ) -> dict[str, Any]:
    """A timeline on devices as Chrome trace events (times in microseconds): device ``d``
    computes on thread ``2d`` and sends on thread ``2d+1``; every event carries its chunk,
    kind, microbatch and sample range. ``parts[c]``: chunk ``c``'s forward, backward and
    weight-gradient sizes (``ChunkPlan.parts()``; equal microbatches: the same sizes three
    times per chunk); ``meta``: what ``otherData`` adds (problem, schedule, mode)."""
    ev: list[dict[str, Any]] = []
    for d in range(tl.D):
        held = [c for c, dd in enumerate(tl.chunk_device) if dd == d]
        ev.append({"ph": "M", "pid": 0, "tid": 2 * d, "name": "thread_name",
                   "args": {"name": f"device {d} compute (chunks {held})"}})
        ev.append({"ph": "M", "pid": 0, "tid": 2 * d + 1, "name": "thread_name",
                   "args": {"name": f"device {d} send"}})
    for d, act, c, kind, mb, t0, t1, smp in _device_ops(tl, parts):
        args: dict[str, Any] = {"device": d}
        if kind != "O":
            args.update(chunk=c, kind=kind, microbatch=mb, samples=smp)
        ev.append({"ph": "X", "pid": 0, "tid": 2 * d, "name": act, "cat": _NAMES[kind],
                   "ts": t0 * 1e6, "dur": (t1 - t0) * 1e6, "args": args})
    for src, dst, what, t0, t1 in tl.transfers:
        kind = _transfer_kind(what)
        ev.append({"ph": "X", "pid": 0, "tid": 2 * src + 1, "name": what, "cat": kind,
                   "ts": t0 * 1e6, "dur": (t1 - t0) * 1e6, "args": {"src": src, "dst": dst}})
    other: dict[str, Any] = dict(meta or {})
    other.update(iteration_time_s=tl.iteration_time, chunk_device=list(tl.chunk_device))
    return {"traceEvents": ev, "displayTimeUnit": "ms", "otherData": other}


def save_device_chrome_trace(tl: DeviceTimeline, parts: Any, path: str | os.PathLike[str],
                             meta: dict[str, Any] | None = None) -> None:
    write_text(path, json.dumps(device_chrome_trace(tl, parts, meta)), parents=True)


def device_gantt_figure(tl: DeviceTimeline, parts: Any, title: str, labels: bool = True
                        ) -> Any:
    """The Gantt chart of a timeline on devices (laid out; the caller closes it): a row per
    device, bars coloured by kind and labelled ``chunk:samples`` where wide enough (a device's
    second chunk hatched), thin bars under each row its outgoing transfers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    D = tl.D
    fig, ax = plt.subplots(1, 1, figsize=(11, min(1.8 + 0.45 * D, 40)))
    T = tl.iteration_time
    # a device's chunks after its first are hatched (interleaved and V layouts)
    rank = {c: sum(1 for b in range(c) if tl.chunk_device[b] == d)
            for c, d in enumerate(tl.chunk_device)}
    ops = _device_ops(tl, parts)
    for d, _act, c, kind, _mb, t0, t1, smp in ops:
        y = D - 1 - d
        ax.barh(y + 0.1, t1 - t0, left=t0, height=0.62, color=COLORS[kind], edgecolor="white",
                linewidth=0.4, hatch="///" if rank.get(c, 0) % 2 else None)
        if labels and smp is not None and (t1 - t0) > T / 45:
            ax.text((t0 + t1) / 2, y + 0.1, f"{c}:{smp[1] - smp[0]}", ha="center",
                    va="center", fontsize=5.5, color="white")
    for src, _dst, what, t0, t1 in tl.transfers:
        kind = _transfer_kind(what)
        ax.barh(D - 1 - src - 0.33, t1 - t0, left=t0, height=0.16, color=COLORS[kind],
                linewidth=0)
    _finish_axes(ax, D, "device", T, title)
    ax.set_xlabel("time (s); bars: chunk:samples"
                  + ("; hatched: a device's second chunk" if max(rank.values(), default=0)
                     else ""))
    kinds = {k for _, _, _, k, *_ in ops}
    handles = [Patch(color=COLORS[k], label=_NAMES[k]) for k in "FBIWO" if k in kinds]
    handles += [Patch(color=COLORS["act"], label="activation transfer"),
                Patch(color=COLORS["grad"], label="gradient transfer")]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def save_device_gantt(tl: DeviceTimeline, parts: Any, path: str | os.PathLike[str],
                      title: str, labels: bool = True) -> None:
    """Draw :func:`device_gantt_figure` and save it as a PNG (atomically)."""
    import matplotlib.pyplot as plt

    fig = device_gantt_figure(tl, parts, title, labels)
    try:
        with atomic_output(path, parents=True) as tmp:
            fig.savefig(tmp, dpi=GANTT_DPI, format="png")
    finally:
        plt.close(fig)
