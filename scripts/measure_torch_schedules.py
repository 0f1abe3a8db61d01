#!/usr/bin/env python
"""Measure torch.distributed.pipelining's schedules on one workload: the measured side of
predicted-vs-measured schedule times (docs/MODEL.md §5).

Input: a JSON file, as a predictor writes it::

    {"workload": "gpt1-mini-b16",            # a name in WORKLOADS, a profiled problem (name
                                             # or .json file: model, config and B from its
                                             # provenance), or {"model", "config", "B"
                                             # [, "layers", "name"]}
     "entries": [{"schedule": "zbv", "torch_class": "ScheduleZBVZeroBubble", "M": 4,
                  "partition": [3, 4, 4, 3], "v": 2, "T_pred": 0.123}, ...]}

``partition`` gives the layer count of each of the ``C = D * v`` chunks (contiguous layer
groups, chunk 0 first); which rank holds which chunk is the schedule's (runtime/
torch_schedules.py). Every entry is checked against torch's rules before anything starts.

One launch of ``D = 2`` processes (gloo, ``torchrun`` through the runtime's launcher: a
deadline, and no process of the run survives it or this script) holds every entry's stages,
runs ``--warmup`` rounds, then ``--rounds`` rounds, each round one iteration of every entry
in a rotating order (round k starts at entry k mod E). An iteration is timed from a barrier
to the end of the slowest rank's step and optimizer update (wall clock).

Output: ``--out`` (JSON: the raw per-iteration times of every entry and rank, and the summary),
``--report`` (markdown, the command first): per entry the median, a percentile-bootstrap 95 %
interval of the median (runtime/stats.py), ``T_pred`` and ``|pred - meas| / meas``; over the
entries with a prediction, Spearman's rank correlation of predicted vs measured medians and
the median relative error. Progress lines go to stderr.

    python scripts/measure_torch_schedules.py entries.json --rounds 30 --warmup 3
    python scripts/measure_torch_schedules.py --example gpt1-mini-b16 > entries.json
    python scripts/measure_torch_schedules.py --profile-command gpt1-mini-b16
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
import socket
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from umpipe_bench.errors import UmpipeError  # noqa: E402
from umpipe_bench.layout import balanced_counts  # noqa: E402
from umpipe_bench.problem import atomic_write_text  # noqa: E402
from umpipe_bench.registry import get_problem  # noqa: E402
from umpipe_bench.runtime.errors import PlanRefused, StageFailure  # noqa: E402
from umpipe_bench.runtime.launcher import launch  # noqa: E402
from umpipe_bench.runtime.lifetime import Terminated, terminate_raises  # noqa: E402
from umpipe_bench.runtime.stats import bootstrap_median, spearman  # noqa: E402
from umpipe_bench.runtime.torch_schedules import (  # noqa: E402
    WORKLOADS,
    TorchMultiSpec,
    make_entry,
)
from umpipe_bench.torch_schedules import TORCH_SCHEDULES  # noqa: E402

D = 2


def resolve_workload(w: Any) -> dict[str, Any]:
    """A workload name or dict -> ``{"name", "model", "config", "B", "layers" (or None)}``."""
    if isinstance(w, str):
        if w in WORKLOADS:
            return {"name": w, **WORKLOADS[w]}
        try:  # a profiled problem (name or file): its provenance names model, config, B
            problem = get_problem(w)
        except UmpipeError:
            raise PlanRefused(f"unknown workload {w!r}; known: {', '.join(WORKLOADS)}, a "
                              "profiled problem (name or .json file), or a dict with model, "
                              "config, B") from None
        prov = problem.provenance
        if "model" not in prov:
            raise PlanRefused(f"problem {problem.name!r} has no 'model' in its provenance, "
                              "so its model cannot be rebuilt")
        return {"name": problem.name, "model": str(prov["model"]),
                "config": dict(prov.get("config") or {}), "B": problem.B, "layers": None}
    if not isinstance(w, dict) or "model" not in w or "B" not in w:
        raise PlanRefused("field 'workload' must be a workload name or a dict with 'model' and "
                          f"'B', got {w!r}")
    return {"name": str(w.get("name", f"{w['model']}-b{w['B']}")), "model": str(w["model"]),
            "config": dict(w.get("config") or {}), "B": int(w["B"]),
            "layers": int(w["layers"]) if w.get("layers") is not None else None}


def predicted_entries(problem_name: str, mode: str, op_overhead: float = 0.0) -> dict[str, Any]:
    """An entries file from the predictor: every torch schedule at its best (v, M, partition)
    on the one-layer-per-stage ``problem_name`` for ``D`` devices (``umpipe-bench schedules``),
    with its predicted T."""
    from umpipe_bench.torch_schedules.best import schedule_table

    problem = get_problem(problem_name)
    entries = []
    for r in schedule_table(problem, D, mode, op_overhead=op_overhead):
        if r.choice is None:
            print(f"predict: {r.schedule} left out: {r.reason}", file=sys.stderr)
            continue
        c = r.choice
        entries.append({"schedule": r.schedule, "torch_class": r.torch_class, "M": c.M,
                        "partition": list(c.counts), "v": c.v, "T_pred": c.T})
    return {"workload": problem_name, "entries": entries, "op_overhead": op_overhead}


def calibration_entries(problem_name: str) -> dict[str, Any]:
    """Entries that calibrate the runtime's per-action overhead and touch none of the schedules
    a prediction picks: GPipe on a balanced partition at every M dividing B (2M actions per
    device, from 2 to 2B)."""
    problem = get_problem(problem_name)
    part = list(balanced_counts(problem.S, D))
    entries = [{"schedule": "gpipe", "torch_class": "ScheduleGPipe", "M": M, "partition": part,
                "v": 1, "label": f"calibrate-gpipe:M{M}"}
               for M in range(1, problem.B + 1) if problem.B % M == 0]
    return {"workload": problem_name, "entries": entries}


def predict_rows(problem_name: str, rows: list[dict[str, Any]], op_overhead: float
                 ) -> list[float]:
    """The device simulator's T of every measured entry (``rows`` of a run's summary)."""
    from umpipe_bench.torch_schedules import schedule_info, torch_orders
    from umpipe_bench.torch_schedules.best import simulate_chunks

    problem = get_problem(problem_name)
    out = []
    for r in rows:
        info = schedule_info(r["torch_class"])
        v = r["v"]
        lists = torch_orders(info.name, D, r["M"], None if info.layout == "one" else v)
        out.append(simulate_chunks(problem, r["partition"], info.layout, D, v, r["M"], "stash",
                                   lists, op_overhead).iteration_time)
    return out


def fit_overhead(problem_name: str, run_json: str) -> float:
    """The per-action overhead (seconds) that makes the device simulator best match a measured
    run (least squares on log times, golden-section search over 0..50 ms)."""
    rows = json.loads(Path(run_json).read_text(encoding="utf-8"))["summary"]["rows"]
    meas = np.array([r["median"] for r in rows])

    def loss(c: float) -> float:
        return float(np.sum(np.log(np.array(predict_rows(problem_name, rows, c)) / meas) ** 2))

    lo, hi = 0.0, 0.05
    g = (5 ** 0.5 - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(40):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = loss(b)
    return (lo + hi) / 2


def example_entries(name: str) -> dict[str, Any]:
    """An entries file for ``name``: every torch schedule at a few M, even partitions."""
    w = resolve_workload(name)
    entries = []
    for info in TORCH_SCHEDULES.values():
        C = D * info.default_v
        for M in (4, 8):
            if w["B"] % M == 0:
                entries.append({"schedule": info.name, "torch_class": info.torch_class, "M": M,
                                "partition": list(balanced_counts(w["layers"], C)),
                                "v": C // D})
    return {"workload": name, "entries": entries}


def profile_command(name: str) -> str:
    """The ``umpipe-bench profile`` command writing the one-layer-per-stage problem of a
    named workload (the per-layer tables a predictor needs; co-run, as the -mini-s2 files)."""
    w = WORKLOADS[name]
    sets = " ".join(f"--set {k}={json.dumps(v)}" for k, v in w["config"].items())
    return (f"umpipe-bench profile {w['model']} --batch {w['B']} {sets} --threads 1 "
            f"--repeats 9 --warmup 2 --co-run --split-backward "
            f"--out results/real/torch-schedules/{name}-l{w['layers']}.json")


class _Progress(threading.Thread):
    """Copy the ranks' progress lines from the run's log to stderr while it runs."""

    def __init__(self, log: Path) -> None:
        super().__init__(daemon=True)
        self.log, self.stop = log, threading.Event()

    def run(self) -> None:
        pos = 0
        while not self.stop.wait(0.5):
            try:
                with open(self.log, encoding="utf-8", errors="replace") as fh:
                    fh.seek(pos)
                    text = fh.read()
            except OSError:
                continue
            cut = text.rfind("\n") + 1
            pos += len(text[:cut].encode("utf-8"))
            for line in text[:cut].splitlines():
                if "[torch-multi]" in line:
                    print(line[line.index("[torch-multi]"):], file=sys.stderr, flush=True)


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """Per entry: median, bootstrap 95 % interval, prediction error; over entries: Spearman."""
    rows = []
    for e in result["entries"]:
        iv = bootstrap_median(e["times"])
        row = {"label": e["label"], "torch_class": e["torch_class"], "M": e["M"],
               "partition": e["partition"], "v": e["v"], "median": iv.median, "low": iv.low,
               "high": iv.high, "n": iv.n, "T_pred": e["T_pred"]}
        if e["T_pred"] is not None:
            row["rel_error"] = abs(e["T_pred"] - iv.median) / iv.median
        rows.append(row)
    pred = [r for r in rows if r["T_pred"] is not None]
    out: dict[str, Any] = {"rows": rows, "n_predicted": len(pred)}
    if len(pred) >= 2:
        out["spearman"] = spearman([r["T_pred"] for r in pred], [r["median"] for r in pred])
    if pred:
        out["median_rel_error"] = float(np.median([r["rel_error"] for r in pred]))
    return out


def report(command: str, meta: dict[str, Any], summary: dict[str, Any]) -> str:
    """The markdown report, the command that regenerates it first."""
    w = meta["workload"]
    lines = [
        "# torch.distributed.pipelining schedules, measured",
        "",
        f"Command: `{command}`",
        "",
        f"Workload `{w['name']}`: model `{w['model']}`, config `{json.dumps(w['config'])}`, "
        f"B = {w['B']}, D = {D} processes (gloo), {meta['threads']} thread(s) per process, "
        f"{meta['dtype']}, optimizer {meta['optimizer']}. {meta['rounds']} rounds after "
        f"{meta['warmup']} warm-up rounds; each round runs every entry once in a rotating order; "
        "an iteration is timed from a barrier to the end of the slowest rank's step and "
        "optimizer update. Interval: percentile bootstrap (95 %) of the median over rounds.",
        "",
        f"Host {meta['host']}, torch {meta['torch']}, {meta['date']}; load average "
        f"{meta['load_before']} before, {meta['load_after']} after; peak memory per process "
        f"{', '.join(f'{x:.0f}' for x in meta['peak_rss_mib'])} MiB.",
        "",
        "| entry | torch class | M | partition | measured median (ms) | 95 % interval (ms) "
        "| T_pred (ms) | \\|pred-meas\\|/meas |",
        "|---|---|---:|---|---:|---|---:|---:|",
    ]
    for r in sorted(summary["rows"], key=lambda r: r["median"]):
        pred = "-" if r["T_pred"] is None else f"{r['T_pred'] * 1e3:.1f}"
        err = "-" if r["T_pred"] is None else f"{r['rel_error'] * 100:.1f} %"
        lines.append(
            f"| {r['label']} | {r['torch_class']} | {r['M']} | {r['partition']} | "
            f"{r['median'] * 1e3:.1f} | [{r['low'] * 1e3:.1f}, {r['high'] * 1e3:.1f}] | "
            f"{pred} | {err} |")
    lines.append("")
    n = summary["n_predicted"]
    if "spearman" in summary:
        lines.append(f"Spearman rank correlation of predicted vs measured medians over {n} "
                     f"entries: {summary['spearman']:.3f}.")
    if "median_rel_error" in summary:
        lines.append(f"Median relative error |pred - meas| / meas over {n} entries: "
                     f"{summary['median_rel_error'] * 100:.1f} %.")
    if n == 0:
        lines.append("No entry carries a prediction (T_pred).")
    return "\n".join(lines) + "\n"


def _launch_rows(runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[list[float]]]:
    """The entries measured in every launch of one workload, and per entry the launch medians."""
    labels = [r["label"] for r in runs[0]["summary"]["rows"]]
    by_label = [{r["label"]: r for r in run["summary"]["rows"]} for run in runs]
    keep = [lab for lab in labels if all(lab in b for b in by_label)]
    rows = [by_label[0][lab] for lab in keep]
    return rows, [[b[lab]["median"] for b in by_label] for lab in keep]


def combine(paths: list[str], report_path: str, png: str | None, command: str) -> int:
    """One page over measured workloads (``X.run*.json`` files written by ``--out``; several
    launches of one workload are combined).

    An entry's measured time is the median over launches of its per-launch median (launches of
    the same entries differ by more than the rounds within one; the page shows each launch's
    rank correlation too). For each workload the simulator predicts every measured entry twice:
    as profiled, and with the per-action overhead fitted to the workload's calibration run
    ``X.calrun.json`` beside it (GPipe at every M, :func:`calibration_entries`; no entry of the
    schedules' runs). Per model: Spearman's rank correlation of predicted and measured times and
    the median relative error, over every entry and over the entries that model itself picked
    (each schedule's best, the ``--predict`` entries); then every entry, and a scatter.
    """
    import re

    from umpipe_bench.runtime.stats import spearman as rho

    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for path in paths:
        run = json.loads(Path(path).read_text(encoding="utf-8"))
        groups.setdefault(run["workload"]["name"], []).append((path, run))
    out = []
    for name, items in groups.items():
        runs = [run for _, run in items]
        first = items[0][0]
        beside = Path(first).parent / f"{name}.json"  # the workload's profile, if kept there
        problem = str(beside) if beside.exists() else name
        cal_path = Path(re.sub(r"\.run\d*\.json$", ".calrun.json", str(first)))
        c = fit_overhead(problem, str(cal_path)) if cal_path.exists() else None
        rows, per_launch = _launch_rows(runs)
        meas = [float(np.median(x)) for x in per_launch]
        models = {"as profiled": 0.0, **({"with overhead": c} if c is not None else {})}
        preds = {k: predict_rows(problem, rows, v) for k, v in models.items()}
        picks = {}
        for k, v in models.items():
            chosen = predicted_entries(problem, "stash", v)["entries"]
            keys = {(e["torch_class"], e["M"], tuple(e["partition"])) for e in chosen}
            picks[k] = [i for i, r in enumerate(rows)
                        if (r["torch_class"], r["M"], tuple(r["partition"])) in keys]
        out.append((name, runs, c, rows, per_launch, meas, models, preds, picks))
    lines = ["# torch's pipeline schedules: predicted against measured", "",
             f"Regenerate the page: `{command}`. The runs: `python "
             "scripts/measure_torch_schedules.py ENTRIES --rounds 40 --warmup 5 --out "
             "X.runN.json` (three launches per workload) on the entries files in "
             "`results/real/torch-schedules/` (each workload's `*.union.json`: the picks of "
             "both models below; `*.cal.json`: the calibration run, `--out X.calrun.json`), "
             "made by `--predict PROBLEM [--op-overhead S]` and `--calibrate PROBLEM`.", "",
             "Two CPU processes (gloo, one thread each), torch.distributed.pipelining running "
             "each schedule itself; every entry of a workload in one launch, interleaved "
             "rounds; an entry's time is the median over launches of its per-launch median. "
             "Predictions: the device simulator on the workload's one-layer-per-stage profile "
             "(beside the runs), **as profiled**, and **with overhead**: plus a fixed time per "
             "action, fitted (least squares on log times) to a separate calibration run of "
             "GPipe at every M.", "",
             "| workload | model | overhead per action | Spearman, all entries | Spearman, "
             "the model's own picks | Spearman per launch (all entries) | median "
             "\\|pred-meas\\|/meas |", "|---|---|---:|---:|---:|---|---:|"]
    for name, _runs, _c, rows, per_launch, meas, models, preds, picks in out:
        for k, v in models.items():
            p = preds[k]
            own = picks[k]
            err = float(np.median([abs(a - b) / b for a, b in zip(p, meas)]))
            launches = ", ".join(f"{rho(p, [x[i] for x in per_launch]):.2f}"
                                 for i in range(len(per_launch[0])))
            lines.append(
                f"| {name} | {k} | {v * 1e3:.2f} ms | {rho(p, meas):.3f} ({len(rows)}) | "
                f"{rho([p[i] for i in own], [meas[i] for i in own]):.3f} ({len(own)}) | "
                f"{launches} | {err * 100:.1f} % |")
    for name, runs, _c, rows, per_launch, meas, models, preds, picks in out:
        names = list(models)
        lines += ["", f"## {name}", ""]
        for run in runs:
            lines.append(f"- `{run['command']}` ({run['date']}; load average "
                         f"{run['load_before']} before, {run['load_after']} after)")
        lines += ["", "| entry | measured (ms) | per launch (ms) | "
                  + " | ".join(f"T {k} (ms)" for k in names) + " | picked by |",
                  "|---|---:|---|" + "---:|" * len(names) + "---|"]
        for i in sorted(range(len(rows)), key=lambda i: meas[i]):
            by = ", ".join(k for k in names if i in picks[k]) or "-"
            lines.append(f"| {rows[i]['label']} | {meas[i] * 1e3:.1f} | "
                         + ", ".join(f"{x * 1e3:.1f}" for x in per_launch[i]) + " | "
                         + " | ".join(f"{preds[k][i] * 1e3:.1f}" for k in names) + f" | {by} |")
    if png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(out), figsize=(5.2 * len(out), 4.8), squeeze=False)
        for ax, (name, _r, _c, rows, per_launch, meas, models, preds, _p) in zip(axes[0], out):
            ys = [x * 1e3 for x in meas]
            err = [[(m - min(x)) * 1e3 for m, x in zip(meas, per_launch)],
                   [(max(x) - m) * 1e3 for m, x in zip(meas, per_launch)]]
            allv = list(ys)
            for k, marker in zip(models, ("o", "s")):
                xs = [x * 1e3 for x in preds[k]]
                allv += xs
                ax.errorbar(xs, ys, yerr=err, fmt=marker, capsize=2, label=k,
                            mfc="none" if marker == "o" else None)
            for x, y, r in zip(preds[list(models)[-1]], ys, rows):
                ax.annotate(r["label"].split(":")[0], (x * 1e3, y), fontsize=6,
                            textcoords="offset points", xytext=(3, 2))
            lo, hi = min(allv) * 0.95, max(allv) * 1.05
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            ax.set_title(f"{name} (bars: range over launches)", fontsize=9)
            ax.set_xlabel("predicted T (ms)")
            ax.set_ylabel("measured T (ms)")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(png, dpi=110)
        lines += ["", f"![predicted vs measured]({Path(png).name})"]
    atomic_write_text(report_path, "\n".join(lines) + "\n")
    print(f"wrote {report_path}" + (f" and {png}" if png else ""), file=sys.stderr)
    return 0


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("entries", nargs="?", help="entries JSON (workload + entries)")
    ap.add_argument("--workload", help="override the file's workload (a WORKLOADS name)")
    ap.add_argument("--rounds", type=int, default=20, help="timed rounds")
    ap.add_argument("--warmup", type=int, default=3, help="discarded warm-up rounds")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--dtype", default="float32", help="parameters and activations")
    ap.add_argument("--optimizer", default="adam", help="none, sgd, adam or adamw (the "
                    "profiler's default is adam)")
    ap.add_argument("--seed", type=int, default=0, help="weights and batch seed")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds a rank waits on its peer before the run fails")
    ap.add_argument("--deadline", type=float, default=3600.0, help="seconds for the whole run")
    ap.add_argument("--out", default="results/real/torch-schedules.json",
                    help="JSON: raw per-iteration times and the summary")
    ap.add_argument("--report", default="results/real/torch-schedules.md",
                    help="markdown report")
    ap.add_argument("--run-dir", help="the launch's folder (default: a temporary one)")
    ap.add_argument("--check-grads", action="store_true",
                    help="instead of timing: one float64 iteration of every entry (no "
                    "optimizer step), each parameter gradient compared with the "
                    "single-process full-batch gradient; exit 1 on a mismatch")
    ap.add_argument("--example", metavar="WORKLOAD",
                    help="print an entries file for WORKLOAD (every schedule, M 4 and 8, even "
                    "partitions) and exit")
    ap.add_argument("--predict", metavar="PROBLEM",
                    help="print an entries file predicted from the one-layer-per-stage problem "
                    "PROBLEM (every schedule at its best v, M and partition on D = 2, with "
                    "T_pred) and exit")
    ap.add_argument("--op-overhead", type=float, default=0.0, metavar="SECONDS",
                    help="with --predict: seconds the runtime adds to every action (fit one "
                    "with --calibrate and --fit-overhead)")
    ap.add_argument("--calibrate", metavar="PROBLEM",
                    help="print calibration entries for PROBLEM's workload (GPipe at every M "
                    "dividing B, balanced partition) and exit")
    ap.add_argument("--fit-overhead", nargs=2, metavar=("PROBLEM", "RUN_JSON"),
                    help="print the per-action overhead that best fits a measured run of the "
                    "calibration entries, and exit")
    ap.add_argument("--mode", default="stash", choices=("stash", "recompute"),
                    help="memory mode of --predict (the runtime keeps activations: stash)")
    ap.add_argument("--combine", nargs="+", metavar="RUN_JSON",
                    help="write one report (--report) and a scatter (--png) over the --out files "
                    "of several measured workloads, and exit")
    ap.add_argument("--png", help="with --combine: the predicted-vs-measured scatter")
    ap.add_argument("--profile-command", metavar="WORKLOAD",
                    help="print the command writing WORKLOAD's one-layer-per-stage problem")
    args = ap.parse_args(argv)
    try:
        if args.example:
            print(json.dumps(example_entries(args.example), indent=1))
            return 0
        if args.combine:
            cmd = "python scripts/measure_torch_schedules.py " + " ".join(
                map(shlex.quote, argv if argv is not None else sys.argv[1:]))
            return combine(args.combine, args.report, args.png, cmd)
        if args.predict:
            print(json.dumps(predicted_entries(args.predict, args.mode, args.op_overhead),
                             indent=1))
            return 0
        if args.calibrate:
            print(json.dumps(calibration_entries(args.calibrate), indent=1))
            return 0
        if args.fit_overhead:
            print(f"{fit_overhead(*args.fit_overhead):.6f}")
            return 0
        if args.profile_command:
            if args.profile_command not in WORKLOADS:
                raise PlanRefused(f"unknown workload {args.profile_command!r}; known: "
                                  f"{', '.join(WORKLOADS)}")
            print(profile_command(args.profile_command))
            return 0
        if not args.entries:
            ap.error("give an entries JSON file (or --example / --profile-command)")
        if args.check_grads:
            return check_grads(args)
        return measure(args, argv if argv is not None else sys.argv[1:])
    except (UmpipeError, StageFailure) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Terminated as exc:
        print(f"measure_torch_schedules: {exc}", file=sys.stderr)
        return 128 + exc.signum


def load_spec(args: argparse.Namespace, **settings: Any) -> tuple[dict[str, Any],
                                                                   TorchMultiSpec]:
    """The workload and a checked spec of every entry of ``args.entries``."""
    data = json.loads(Path(args.entries).read_text(encoding="utf-8"))
    w = resolve_workload(args.workload or data.get("workload"))
    items = data.get("entries") or []
    if not items:
        raise PlanRefused(f"{args.entries}: no entries")
    n_layers = w["layers"] if w["layers"] is not None else sum(items[0].get("partition", []))
    entries = [make_entry(it, D=D, B=w["B"], n_layers=n_layers, index=i)
               for i, it in enumerate(items)]
    base = {"dtype": args.dtype, "seed": args.seed, "rounds": args.rounds,
            "warmup": args.warmup, "optimizer": args.optimizer, "timeout_s": args.timeout,
            "threads": args.threads}
    base.update(settings)
    return w, TorchMultiSpec(run_id=uuid.uuid4().hex, model=w["model"], config=w["config"],
                             B=w["B"], D=D, entries=entries, **base)


def check_grads(args: argparse.Namespace) -> int:
    """One float64 iteration of every entry; gradients vs the full-batch reference."""
    import torch

    from umpipe_bench.runtime.reference import reference_gradients

    w, spec = load_spec(args, dtype="float64", rounds=1, warmup=0, optimizer="none",
                        dump_grads=True)
    with tempfile.TemporaryDirectory(prefix="umpipe-torch-grads-") as tmp:
        run_dir = Path(args.run_dir or tmp)
        with terminate_raises():
            launch(spec, run_dir, deadline_s=args.deadline, stage_args=["--torch-multi"])
        n = sum(spec.entries[0].partition)  # every entry covers the model (checked)
        loss, per_layer = reference_gradients(w["model"], w["config"], [1] * n, w["B"],
                                              seed=args.seed)
        ref = {f"{i}.{k[2:]}": g for i, d in enumerate(per_layer) for k, g in d.items()}
        bad = 0
        for k, e in enumerate(spec.entries):
            got: dict[str, Any] = {}
            for r in range(D):
                got.update(torch.load(run_dir / f"grads-e{k}-r{r}.pt",
                                      weights_only=True)["grads"])
            worst, missing = 0.0, sorted(set(ref) - {x for x, g in got.items() if g is not None})
            for name, g in ref.items():
                if got.get(name) is not None:
                    scale = float(g.abs().max()) or 1.0
                    worst = max(worst, float((got[name] - g).abs().max()) / scale)
            ok = not missing and worst <= 1e-9
            bad += not ok
            print(f"{e.label:<40} {'ok ' if ok else 'BAD'} max |error| / max |grad| "
                  f"{worst:.2e}" + (f", no gradient for {missing[:3]}" if missing else ""))
    print(f"{len(spec.entries) - bad} of {len(spec.entries)} entries give the full-batch "
          f"gradient (float64, reference loss {loss:.6f})")
    return 1 if bad else 0


def measure(args: argparse.Namespace, argv: list[str]) -> int:
    """Check the entries, launch, summarize, write ``--out`` and ``--report``."""
    w, spec = load_spec(args)
    entries = spec.entries
    command = "python scripts/measure_torch_schedules.py " + " ".join(map(shlex.quote, argv))
    print(f"{len(entries)} entries on {w['name']}: {args.warmup} warm-up + {args.rounds} "
          "rounds", file=sys.stderr, flush=True)
    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="umpipe-torch-") as tmp:
        run_dir = Path(args.run_dir or tmp)
        run_dir.mkdir(parents=True, exist_ok=True)
        progress = _Progress(run_dir / "torchrun.log")
        progress.start()
        try:
            with terminate_raises():
                result = launch(spec, run_dir, deadline_s=args.deadline,
                                stage_args=["--torch-multi"],
                                extra_env={"UMPIPE_PROGRESS": "1"})
        finally:
            progress.stop.set()
    summary = summarize(result)
    meta = {"workload": w, "threads": args.threads, "dtype": args.dtype,
            "optimizer": args.optimizer, "rounds": args.rounds, "warmup": args.warmup,
            "host": socket.gethostname(), "torch": result["torch"],
            "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "load_before": load_before, "load_after": _load(),
            "launch_s": round(result["launch_s"], 1),
            "peak_rss_mib": result.get("peak_rss_mib", [])}
    atomic_write_text(args.out, json.dumps({"command": command, **meta, "summary": summary,
                                            "result": result}, indent=1) + "\n")
    atomic_write_text(args.report, report(command, meta, summary))
    for r in sorted(summary["rows"], key=lambda r: r["median"]):
        pred = "" if r["T_pred"] is None else f"  pred {r['T_pred'] * 1e3:.1f} ms"
        print(f"{r['label']:<40} {r['median'] * 1e3:8.1f} ms [{r['low'] * 1e3:.1f}, "
              f"{r['high'] * 1e3:.1f}]{pred}")
    if "spearman" in summary:
        print(f"spearman {summary['spearman']:.3f}, median |pred-meas|/meas "
              f"{summary['median_rel_error'] * 100:.1f} %")
    print(f"wrote {args.out} and {args.report} ({meta['launch_s']} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
