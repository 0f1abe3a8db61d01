"""Rows of a measured run: measured vs predicted time, speedups, peer ratio (docs/MODEL.md §5).

Plans were timed alternately (``A B A B ...``), so iteration ``i`` of every entry ran in the
same round under the same machine load. Ratios are therefore taken per round and their median
reported (``speedup_measured``, ``peer_ratio``): on a shared machine whose speed drifts up to
2x minute to minute, that is far steadier than a ratio of two medians.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..files import append_csv

__all__ = ["COLUMNS", "format_table", "summarize", "write_csv"]

#: CSV columns, in order (a schema test pins them).
COLUMNS = (
    "problem",
    "plan",
    "engine",
    "schedule",
    "mode",
    "plan_kind",
    "predicted_time",
    "measured_median",
    "measured_p10",
    "measured_p90",
    "model_error",
    "compute_error",
    "speedup_measured",
    "speedup_predicted",
    "speedup_ratio",
    "peer",
    "peer_ratio",
    "stage_compute_median",
    "iters",
    "warmup",
    "backend",
    "world_size",
    "threads",
    "torch",
    "host",
    "date",
    "run_id",
    "error",
)


def _quantile(xs: Sequence[float], q: float) -> float:
    ys = sorted(xs)
    if len(ys) == 1:
        return ys[0]
    pos = q * (len(ys) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def _paired_median_ratio(num: Sequence[float], den: Sequence[float]) -> float:
    return statistics.median(a / b for a, b in zip(num, den, strict=True) if b > 0)


def summarize(
    result: Mapping[str, Any],
    predicted: Mapping[str, float | None],
    *,
    kinds: Mapping[str, str] | None = None,
    peers: Mapping[str, str] | None = None,
    busy: Mapping[str, Sequence[float]] | None = None,
) -> list[dict[str, Any]]:
    """One row per entry of a worker ``result`` (see :mod:`umpipe_bench.runtime.worker`).

    ``predicted[label]``: the simulator's iteration time for that entry; ``kinds[label]``:
    ``EDP(M)``/``UEDP``; ``peers[label]``: the label of the torch.pipelining entry running the
    same plan; ``busy[label]``: the simulator's per-stage busy time (compute + optimizer).
    Speedups are of each entry over the first one (``> 1``: faster than the first).

    ``compute_error`` splits the model error: measured compute (ops minus time blocked in
    receives, plus the optimizer step), summed over stages, against the predicted busy time. A
    large ``compute_error`` means the stages computed slower than profiled (machine load, two
    processes sharing caches and memory bandwidth); the rest of ``model_error`` is waiting.
    """
    entries = result["entries"]
    kinds = kinds or {}
    peers = peers or {}
    busy = busy or {}
    by_label = {e["label"]: e for e in entries}
    first = entries[0]
    first_pred = predicted.get(first["label"])
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows = []
    for e in entries:
        times = e["times"]
        med = statistics.median(times)
        pred = predicted.get(e["label"])
        sp_meas = _paired_median_ratio(first["times"], times)
        sp_pred = first_pred / pred if (pred and first_pred) else None
        peer = peers.get(e["label"], "")
        peer_ratio = (
            _paired_median_ratio(times, by_label[peer]["times"]) if peer in by_label else None
        )
        compute = [
            statistics.median(c)
            for c in e.get("stage_compute") or []
            if c and all(x == x for x in c)  # NaN for torch entries
        ]
        stage_med = ";".join(f"{c:.6g}" for c in compute)
        pbusy = busy.get(e["label"])
        compute_error = (
            sum(compute) / sum(pbusy) - 1.0 if compute and pbusy and sum(pbusy) > 0 else None
        )
        rows.append(
            {
                "problem": result.get("problem", ""),
                "plan": e["label"],
                "engine": e["engine"],
                "schedule": e["schedule"],
                "mode": e["mode"],
                "plan_kind": kinds.get(e["label"], ""),
                "predicted_time": pred,
                "measured_median": med,
                "measured_p10": _quantile(times, 0.1),
                "measured_p90": _quantile(times, 0.9),
                "model_error": (med - pred) / pred if pred else None,
                "compute_error": compute_error,
                "speedup_measured": sp_meas,
                "speedup_predicted": sp_pred,
                "speedup_ratio": sp_meas / sp_pred if sp_pred else None,
                "peer": peer,
                "peer_ratio": peer_ratio,
                "stage_compute_median": stage_med,
                "iters": result.get("iters"),
                "warmup": result.get("warmup"),
                "backend": result.get("backend"),
                "world_size": result.get("world_size"),
                "threads": result.get("threads"),
                "torch": result.get("torch"),
                "host": result.get("host"),
                "date": date,
                "run_id": result.get("run_id"),
                "error": "",
            }
        )
    return rows


def write_csv(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """Write ``rows`` with :data:`COLUMNS`: a new file, or appended to one with the same header
    (a file with another header is refused: :func:`umpipe_bench.files.append_csv`)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), extrasaction="ignore",
                       lineterminator="\n")
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS})
    append_csv(path, COLUMNS, buf.getvalue())


def _fmt(x: Any, unit: str = "") -> str:
    if x is None:
        return "-"
    if unit == "ms":
        return f"{x * 1e3:.1f}"
    if unit == "%":
        return f"{x:+.1%}"
    if unit == "x":
        return f"{x:.3f}"
    return str(x)


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A plain-text table of the rows (times in ms)."""
    head = (
        "plan",
        "engine",
        "sched",
        "mode",
        "kind",
        "pred ms",
        "median ms",
        "p10 ms",
        "p90 ms",
        "error",
        "cmp err",
        "speedup",
        "pred spd",
        "ratio",
        "ours/torch",
    )
    body = [
        (
            str(r["plan"]),
            str(r["engine"]),
            str(r["schedule"]),
            str(r["mode"]),
            str(r["plan_kind"]),
            _fmt(r["predicted_time"], "ms"),
            _fmt(r["measured_median"], "ms"),
            _fmt(r["measured_p10"], "ms"),
            _fmt(r["measured_p90"], "ms"),
            _fmt(r["model_error"], "%"),
            _fmt(r["compute_error"], "%"),
            _fmt(r["speedup_measured"], "x"),
            _fmt(r["speedup_predicted"], "x"),
            _fmt(r["speedup_ratio"], "x"),
            _fmt(r["peer_ratio"], "x"),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]
    return "\n".join(lines)
